-- Links a completed page had beyond a limit: past follow.max_links, or past
-- the most links a page is asked for. They were not followed; counting them
-- keeps a truncated fan-out visible.
ALTER TABLE results ADD COLUMN links_over_limit integer NOT NULL DEFAULT 0;
