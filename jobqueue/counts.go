package jobqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Counts of jobs by state and of finishes per minute (job_counts and
// finished_minutes, migrations/*_job_counts.sql), so that the dashboard, the
// API, the metrics and `farm status` read a few rows instead of scanning the
// history or the backlog. Inserts and deletes are counted by statement-level
// triggers on jobs; a job reaching or leaving pending or a final state by an
// UPDATE is counted by the statement that moves it (stateCountsSQL),
// because an UPDATE trigger ran for every claim and lease renewal too,
// which move no count (see migrations/*_count_in_statements.sql and
// *_pending_counts.sql).

// countedStates are the states job_counts counts: pending and the final
// states. Queued and processing jobs are at most the fleet's capacity and
// are counted from their partial index (Stats).
const countedStates = `('pending', 'completed', 'failed', 'canceled')`

// stateCountsSQL is two CTEs, to follow a CTE of the statement that changes
// jobs, that add to job_counts and finished_minutes the rows of src: rows
// (state, finished_at, error_class, d) of jobs that reached pending or a
// final state (d = 1, their new values) or left one (d = -1, their old
// values). Rows in other states are ignored, as the triggers ignore them;
// only final states have minutes.
func stateCountsSQL(src string) string {
	return `
), finish_counted AS (
    INSERT INTO job_counts (state, n)
    SELECT x.state, sum(x.d) FROM (` + src + `) x
    WHERE x.state IN ` + countedStates + `
    GROUP BY x.state HAVING sum(x.d) <> 0
), minutes_counted AS (
    INSERT INTO finished_minutes (minute, state, class, n)
    SELECT finished_minute(x.finished_at), x.state, finished_class(x.state, x.error_class), sum(x.d)
    FROM (` + src + `) x
    WHERE x.state IN ('completed', 'failed', 'canceled') AND x.finished_at IS NOT NULL
    GROUP BY 1, 2, 3 HAVING sum(x.d) <> 0`
}

// pendingCountSQL is a CTE, to follow a CTE of the statement that changes
// jobs, that adds to the pending count the sum of d over src's rows (d:
// +1 for a job that became pending, -1 for one that left it): the pending
// moves a statement's stateCountsSQL rows do not carry (assignments,
// releases, and the old state a cancel, retry or completion left).
func pendingCountSQL(src string) string {
	return `
), pending_counted AS (
    INSERT INTO job_counts (state, n)
    SELECT 'pending', x.n FROM (SELECT sum(d) AS n FROM (` + src + `) s) x WHERE x.n <> 0`
}

// compactLockKey lets one CompactCounts run at a time; others skip.
const compactLockKey int64 = 0x6266636f756e7473 // "bfcounts"

// The delta rows of each table are replaced by one row per key, in one
// transaction: a reader sees either the deltas or their sum. Rows a
// transaction still open inserted are not visible here and stay for the
// next compaction. job_counts is a few rows; finished_minutes holds a row
// per minute of the retained history, so only the minutes with delta rows
// (not folded, found by a partial index) are rewritten.
const (
	compactJobCountsSQL = `
WITH d AS (DELETE FROM job_counts RETURNING state, n)
INSERT INTO job_counts (state, n)
SELECT state, sum(n) FROM d GROUP BY state HAVING sum(n) <> 0`
	compactFinishedSQL = `
WITH fresh AS (
    SELECT DISTINCT minute, state, class FROM finished_minutes WHERE NOT folded
), d AS (
    DELETE FROM finished_minutes f USING fresh
    WHERE f.minute = fresh.minute AND f.state = fresh.state AND f.class = fresh.class
    RETURNING f.minute, f.state, f.class, f.n
)
INSERT INTO finished_minutes (minute, state, class, n, folded)
SELECT minute, state, class, sum(n), true FROM d GROUP BY minute, state, class HAVING sum(n) <> 0`
)

// CompactCounts folds the delta rows the triggers appended into one row per
// key, and returns how many rows it folded. The leader's recorder runs it
// every sample, which keeps a window's count to a row per minute, state and
// failure class, and its cost to the minutes that changed since the last
// one. It does nothing when another compaction is running.
func (q *Queue) CompactCounts(ctx context.Context) (int64, error) {
	var folded int64
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", compactLockKey).Scan(&locked); err != nil {
			return err
		}
		if !locked {
			return nil
		}
		for _, sql := range []string{compactJobCountsSQL, compactFinishedSQL} {
			tag, err := tx.Exec(ctx, sql)
			if err != nil {
				return err
			}
			folded += tag.RowsAffected()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("compact counts: %w", err)
	}
	return folded, nil
}

// finishedCountsSQL counts the jobs that finished in the minutes from $1
// (a whole minute) on, from the per-minute rows alone: a window costs its
// minutes' rows, neither the history nor the rate of finishes.
const finishedCountsSQL = `
SELECT state, class, sum(n)::bigint FROM finished_minutes WHERE minute >= $1
GROUP BY 1, 2 HAVING sum(n) <> 0
ORDER BY 1, 2`

// lastMinuteSQL counts the completions and failures of the last whole
// minute, the one before now's ($1, or the server's clock), from its
// per-minute rows.
const lastMinuteSQL = `
SELECT coalesce(sum(n) FILTER (WHERE state = 'completed'), 0)::bigint,
       coalesce(sum(n) FILTER (WHERE state = 'failed'), 0)::bigint
FROM finished_minutes
WHERE minute = finished_minute(coalesce($1::timestamptz, now())) - interval '1 minute'`

// WindowStart is where a window of finishes asked to start at since starts:
// the whole minute holding since, the unit finished_minutes counts in (the
// same boundaries as finished_minute() in SQL). A window may so reach up
// to a minute further back than asked; in exchange its counts come from a
// row per minute, state and class, however many jobs finish per minute.
func WindowStart(since time.Time) time.Time {
	return since.Truncate(time.Minute)
}

// FinishedSince counts the jobs that reached a final state from
// WindowStart(since) on, by state and, for failed jobs, error class. A
// completed job keeps the error class of an earlier failed attempt, which
// is not its outcome, so only failures are split by class.
func (q *Queue) FinishedSince(ctx context.Context, since time.Time) ([]FinishedCount, error) {
	var out []FinishedCount
	err := q.readQuery(ctx, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (FinishedCount, error) {
			var c FinishedCount
			err := row.Scan(&c.State, &c.ErrorClass, &c.Count)
			if c.State == StateFailed && c.ErrorClass == "" {
				c.ErrorClass = Unclassified
			}
			return c, err
		})
		return err
	}, finishedCountsSQL, WindowStart(since))
	if err != nil {
		return nil, fmt.Errorf("finished jobs since %s: %w", since.Format(time.RFC3339), err)
	}
	return out, nil
}

// jobCountsSQL reads the jobs in final states from the maintained counts.
const jobCountsSQL = `
SELECT state, sum(n)::bigint FROM job_counts
WHERE state IN ('completed', 'failed', 'canceled')
GROUP BY state`

// pendingCountExpr is the pending count, from the maintained counts.
const pendingCountExpr = `(SELECT coalesce(sum(n), 0)::bigint FROM job_counts WHERE state = 'pending')`

// pendingStatsSQL reads the pending count, the ready count and the oldest
// pending job's creation time in one snapshot, at a cost that does not grow
// with the backlog:
//
//   - the count is maintained;
//   - the jobs not yet due ($1, or the server's clock) are a range of
//     jobs_pending_due_idx, which holds only the pending jobs whose
//     run_after was moved past their creation (a backoff, a retry): a job
//     is enqueued with run_after = created_at, due at once, so every
//     pending job not yet due is there (any whose created_at is not in the
//     future of $1);
//   - the oldest is the first enqueued of each priority, a loose scan of
//     jobs_pending_idx (a probe per distinct priority among the pending
//     jobs, each finding that priority's lowest id). Ids are taken in
//     enqueue order, so the lowest id's job is the oldest to within the
//     length of an enqueue transaction.
//
// Both index reads are shaped so that no other index serves them without a
// sort, whatever the statistics: right after a large enqueue, before
// autovacuum analyzes the table, every pending index is estimated at a row
// or so, and with an index of all pending jobs by run_after the planner
// read 500,000 rows through it for each probe (0.31 s); by priority alone,
// the probe of one priority walked the primary key through the history.
const pendingStatsSQL = `
WITH RECURSIVE pending AS MATERIALIZED (
    -- Once: referenced twice, a subquery in FROM was planned twice.
    SELECT ` + pendingCountExpr + ` AS n
), first AS (
    (SELECT j.priority, j.created_at FROM jobs j
     WHERE j.state = 'pending'
     ORDER BY j.priority DESC, j.id LIMIT 1)
    UNION ALL
    SELECT n.priority, n.created_at FROM first f CROSS JOIN LATERAL (
        SELECT j.priority, j.created_at FROM jobs j
        WHERE j.state = 'pending' AND j.priority < f.priority
        ORDER BY j.priority DESC, j.id LIMIT 1) n
)
SELECT c.n, greatest(c.n - d.n, 0), (SELECT min(created_at) FROM first)
FROM pending c,
     (SELECT count(*) AS n FROM (
          SELECT run_after FROM jobs
          WHERE state = 'pending' AND run_after > created_at AND run_after > coalesce($1::timestamptz, now())
          ORDER BY run_after) due) d`
