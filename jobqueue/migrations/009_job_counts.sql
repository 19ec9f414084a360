-- Counts that do not scan history.
--
-- job_counts holds the number of jobs in each state, and finished_minutes
-- the number of jobs that reached a final state in each minute of
-- finished_at (by state and, for failed jobs, error class: '' when none).
-- Statement-level triggers on jobs keep both exact in the transaction that
-- changes a job, so reading a count costs a few rows whatever the history.
--
-- Both tables are append-only deltas: a statement inserts one row per
-- (state[, minute, class]) whose count it changed, and never updates a row.
-- An updated counter row would be a lock every writer waits for until its
-- transaction commits (one hot row serializes the queue), and sharded
-- counter rows can deadlock two transactions that change states in several
-- statements. Inserts take no lock anyone waits for. A reader sums the rows;
-- CompactCounts (run by the leader's recorder every few seconds) folds them
-- into one row per key in one transaction, so a reader sees either the rows
-- or their sum, and the tables stay a few thousand rows.
--
-- The delta rows churn: vacuum them eagerly.

CREATE TABLE job_counts (
    state text   NOT NULL,
    n     bigint NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 2000,
        autovacuum_vacuum_cost_delay = 0);

CREATE TABLE finished_minutes (
    minute timestamptz NOT NULL,
    state  text        NOT NULL,
    class  text        NOT NULL,
    n      bigint      NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 2000,
        autovacuum_vacuum_cost_delay = 0);
CREATE INDEX finished_minutes_idx ON finished_minutes (minute);

-- The newest failures of one error class: what the failures view lists.
CREATE INDEX jobs_failed_class_idx ON jobs ((coalesce(error_class, '')), finished_at DESC, id DESC)
    WHERE state = 'failed';

-- The minute of a finish: buckets aligned to the Unix epoch, whatever the
-- session's time zone.
CREATE FUNCTION finished_minute(t timestamptz) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN date_bin('1 minute', t, timestamptz '1970-01-01 00:00:00+00');

-- The error class a finish is counted under: a failure's class ('' when it
-- has none); other final states are not split by class (a completed job
-- keeps the class of an earlier failed attempt, which is not its outcome).
CREATE FUNCTION finished_class(state text, error_class text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN state = 'failed' THEN coalesce(error_class, '') ELSE '' END;

-- One function for the three events; a transition table a trigger does not
-- have is never referenced (the branches are planned when they run).
CREATE FUNCTION jobs_count_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_counts (state, n)
        SELECT state, count(*) FROM new_rows GROUP BY state;
        INSERT INTO finished_minutes (minute, state, class, n)
        SELECT finished_minute(finished_at), state, finished_class(state, error_class), count(*)
        FROM new_rows WHERE state IN ('completed', 'failed', 'canceled') AND finished_at IS NOT NULL
        GROUP BY 1, 2, 3;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_counts (state, n)
        SELECT state, -count(*) FROM old_rows GROUP BY state;
        INSERT INTO finished_minutes (minute, state, class, n)
        SELECT finished_minute(finished_at), state, finished_class(state, error_class), -count(*)
        FROM old_rows WHERE state IN ('completed', 'failed', 'canceled') AND finished_at IS NOT NULL
        GROUP BY 1, 2, 3;
    ELSE
        -- Rows whose state did not change (lease renewals) net to zero and
        -- write nothing.
        INSERT INTO job_counts (state, n)
        SELECT state, sum(d) FROM (
            SELECT state, -1 AS d FROM old_rows
            UNION ALL
            SELECT state, 1 FROM new_rows) x
        GROUP BY state HAVING sum(d) <> 0;
        INSERT INTO finished_minutes (minute, state, class, n)
        SELECT m, state, class, sum(d) FROM (
            SELECT finished_minute(finished_at) AS m, state,
                   finished_class(state, error_class) AS class, -1 AS d
            FROM old_rows WHERE state IN ('completed', 'failed', 'canceled') AND finished_at IS NOT NULL
            UNION ALL
            SELECT finished_minute(finished_at), state,
                   finished_class(state, error_class), 1
            FROM new_rows WHERE state IN ('completed', 'failed', 'canceled') AND finished_at IS NOT NULL) x
        GROUP BY m, state, class HAVING sum(d) <> 0;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_deltas();
CREATE TRIGGER jobs_count_update AFTER UPDATE ON jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_deltas();
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_deltas();

CREATE FUNCTION jobs_count_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_counts;
    DELETE FROM finished_minutes;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_count_truncate AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_truncate();

-- The jobs already there. CREATE TRIGGER locked jobs against writes until
-- this migration commits, so nothing changes between the triggers and the
-- counts.
INSERT INTO job_counts (state, n) SELECT state, count(*) FROM jobs GROUP BY state;
INSERT INTO finished_minutes (minute, state, class, n)
SELECT finished_minute(finished_at), state, finished_class(state, error_class), count(*)
FROM jobs WHERE state IN ('completed', 'failed', 'canceled') AND finished_at IS NOT NULL
GROUP BY 1, 2, 3;
