-- What became of the wiped browser contexts of isolation wipe: jobs that ran
-- in a context wiped after the session's previous job, and contexts given
-- up for a brand-new one (a service worker, HTTP auth, a popup, a fetch in
-- flight...). Lifetime counters like the Chrome counts of 006, and the
-- current process's counts on its node row, from its heartbeats.
ALTER TABLE node_counters
    ADD COLUMN contexts_reused   bigint NOT NULL DEFAULT 0,
    ADD COLUMN contexts_replaced bigint NOT NULL DEFAULT 0;
ALTER TABLE farm_counters
    ADD COLUMN contexts_reused   bigint NOT NULL DEFAULT 0,
    ADD COLUMN contexts_replaced bigint NOT NULL DEFAULT 0;
ALTER TABLE nodes
    ADD COLUMN contexts_reused   bigint NOT NULL DEFAULT 0,
    ADD COLUMN contexts_replaced bigint NOT NULL DEFAULT 0;
