-- Final-state counts kept by the statements that change states.
--
-- The statement-level UPDATE trigger of the job counts ran for every UPDATE
-- of jobs: every assignment round, every claim, every lease renewal. Each
-- run captured the old and new rows of the statement in transition tables
-- and ran two INSERT ... SELECT over them, though none of those statements
-- moves a job into or out of a final state — the only counts anyone reads
-- from job_counts and finished_minutes. It was about a sixth of the server's
-- CPU in the queue's lifecycle benchmark.
--
-- The statements that move jobs into or out of a final state (complete,
-- fail, cancel, retry, and the charges of lost, exited and restarted nodes)
-- now add their own deltas, in the same statement and so the same
-- transaction, as the trigger did. Inserts and deletes stay counted by their
-- triggers. Nothing needs recounting: the counts are the same either way.
DROP TRIGGER jobs_count_update ON jobs;

-- job_counts now holds final states only: a live state's count was never
-- read (live jobs are counted from their partial indexes), and without the
-- UPDATE trigger nothing would take an inserted job's pending count back.
CREATE OR REPLACE FUNCTION jobs_count_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_counts (state, n)
        SELECT state, count(*) FROM new_rows WHERE state IN ('completed', 'failed', 'canceled') GROUP BY state;
        INSERT INTO finished_minutes (minute, state, class, n)
        SELECT finished_minute(finished_at), state, finished_class(state, error_class), count(*)
        FROM new_rows WHERE state IN ('completed', 'failed', 'canceled') AND finished_at IS NOT NULL
        GROUP BY 1, 2, 3;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_counts (state, n)
        SELECT state, -count(*) FROM old_rows WHERE state IN ('completed', 'failed', 'canceled') GROUP BY state;
        INSERT INTO finished_minutes (minute, state, class, n)
        SELECT finished_minute(finished_at), state, finished_class(state, error_class), -count(*)
        FROM old_rows WHERE state IN ('completed', 'failed', 'canceled') AND finished_at IS NOT NULL
        GROUP BY 1, 2, 3;
    END IF;
    RETURN NULL;
END $$;

DELETE FROM job_counts WHERE state NOT IN ('completed', 'failed', 'canceled');
