-- The pending count kept like the final states' counts, and an index of
-- pending jobs by due time.
--
-- Stats counted pending jobs, and the ready ones among them and the oldest,
-- from the pending rows themselves: with 500,000 jobs waiting it read every
-- one of them from the heap, 0.84 s a call (10M finished jobs retained) for
-- each dashboard refresh, uncached scrape and autoscale tick, just when a
-- backlog makes them matter. Now the pending count is a sum of job_counts
-- rows, the jobs not yet due (in a retry's backoff) are a range of the new
-- index, and the oldest pending job is found per priority
-- (pendingStatsSQL): a few rows each, however long the backlog.
--
-- The statements that move jobs into or out of pending (assign, release,
-- fail and charge back to pending, retry, cancel, a completion of a job
-- already given back) add their deltas, in the same statement; inserts and
-- deletes are counted by the triggers. As with migration 010, upgrade every
-- producer and node together.

-- No writer may change a job between the count below and the commit.
LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;

CREATE OR REPLACE FUNCTION jobs_count_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_counts (state, n)
        SELECT state, count(*) FROM new_rows WHERE state IN ('pending', 'completed', 'failed', 'canceled') GROUP BY state;
        INSERT INTO finished_minutes (minute, state, class, n)
        SELECT finished_minute(finished_at), state, finished_class(state, error_class), count(*)
        FROM new_rows WHERE state IN ('completed', 'failed', 'canceled') AND finished_at IS NOT NULL
        GROUP BY 1, 2, 3;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_counts (state, n)
        SELECT state, -count(*) FROM old_rows WHERE state IN ('pending', 'completed', 'failed', 'canceled') GROUP BY state;
        INSERT INTO finished_minutes (minute, state, class, n)
        SELECT finished_minute(finished_at), state, finished_class(state, error_class), -count(*)
        FROM old_rows WHERE state IN ('completed', 'failed', 'canceled') AND finished_at IS NOT NULL
        GROUP BY 1, 2, 3;
    END IF;
    RETURN NULL;
END $$;

INSERT INTO job_counts (state, n)
SELECT 'pending', count(*) FROM jobs WHERE state = 'pending' HAVING count(*) > 0;

-- Ready = pending - not yet due. A job is enqueued with run_after equal to
-- created_at, due at once; only a backoff or a retry moves run_after past
-- it. So the jobs not yet due are among the few this index holds, and an
-- enqueue costs it nothing. The predicate also keeps the index out of every
-- other query's reach: an index of all pending jobs by run_after was the
-- planner's pick for the oldest-pending probes and could be for the round's,
-- on the statistics of a table not analyzed since a large enqueue.
CREATE INDEX jobs_pending_due_idx ON jobs (run_after) WHERE state = 'pending' AND run_after > created_at;
