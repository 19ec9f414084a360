package jobqueue

// What a node does with the jobs the producer gave it: claim them (an
// attempt starts), renew their leases, fail or give them back, release
// the ones it has not started.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

const claimSQL = `
WITH picked AS (
    SELECT j.id FROM jobs j
    WHERE j.node_id = $1 AND j.state = 'queued'
      AND EXISTS (SELECT 1 FROM nodes n WHERE n.id = $1 AND n.state IN ('active', 'draining')
                  AND ($7::bigint = 0 OR n.incarnation = $7::bigint))
    ORDER BY j.priority DESC, j.id
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
), claimed AS (
    -- started_at is the clock when the row changes, not now() (the
    -- transaction's start, which can precede the snapshot that saw the job
    -- queued): politeness spaces starts by these stamps.
    UPDATE jobs j SET state = 'processing', attempts = j.attempts + 1,
        started_at = coalesce($3::timestamptz, clock_timestamp()),
        lease_expires_at = coalesce($3::timestamptz, now()) + make_interval(secs => $4::float8)
    FROM picked
    WHERE j.id = picked.id
    RETURNING j.*
), stamped AS (
    -- Politeness: a host with a minimum interval between starts has a row in
    -- hosts; its start is recorded in the statement that starts the job, so
    -- the producer spaces starts by what happened, not by what it assigned.
    -- It also wakes the producer: the host's next job may be assigned once
    -- the interval from this start has passed. (Identical notifications of
    -- one transaction are delivered once.)
    UPDATE hosts h SET last_started_at = greatest(h.last_started_at, coalesce($3::timestamptz, clock_timestamp()))
    WHERE h.host IN (SELECT host FROM claimed)
    RETURNING pg_notify($5, $6)
)
SELECT ` + jobCols + ` FROM claimed j`

// Claim starts up to n of the jobs queued on the node: they become processing
// under a lease of Config.Lease, and their attempt counter goes up. A lost or
// exited node claims nothing. This is the form bound to no incarnation; a
// node's process uses Incarnation.Claim.
func (q *Queue) Claim(ctx context.Context, nodeID string, n int) ([]Job, error) {
	return q.claim(ctx, nodeID, 0, n)
}

func (q *Queue) claim(ctx context.Context, nodeID string, inc int64, n int) ([]Job, error) {
	if n <= 0 {
		return nil, nil
	}
	// Two claims stamping the same hosts rows in different orders can
	// deadlock; the loser is rolled back whole and simply runs again.
	var jobs []Job
	err := q.retryDeadlocks(ctx, "claim", func() error {
		b, claim := nodeBatch(claimSQL, nodeID, n, q.now(), q.cfg.Lease.Seconds(), ChannelProducer, PayloadSlots, inc)
		claim.Query(func(rows pgx.Rows) error {
			var err error
			jobs, err = collectJobs(rows)
			return err
		})
		return q.pool.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, fmt.Errorf("claim for node %q: %w", nodeID, err)
	}
	if len(jobs) == 0 {
		// Nothing queued, or nothing for this incarnation any more.
		if err := q.fenceErr(ctx, nodeID, inc); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
	}
	return jobs, nil
}

// unclaimSQL puts the jobs processing on node $1 (at incarnation $3) but
// not in $2 back in its queue, their attempt given back: the jobs of a
// claim whose answer the node never had. They are queued anew as of now
// ($4, or the database's clock), the claim that follows being the node's
// answer to them: their first assignment's time would have them returned
// free as unclaimed (RescueLost) when the lost answer came after a long
// outage. Processing and queued are not counted in job_counts: nothing
// to count.
var unclaimSQL = `
UPDATE jobs j SET state = 'queued', attempts = greatest(j.attempts - 1, 0),
    started_at = NULL, lease_expires_at = NULL, queued_at = coalesce($4::timestamptz, now())
WHERE j.node_id = $1 AND j.state = 'processing' AND NOT (j.id = ANY($2::bigint[]))
  AND ` + fence("$1", "$3") + `
RETURNING j.id`

func (q *Queue) unclaim(ctx context.Context, nodeID string, inc int64, keep []int64) ([]int64, error) {
	if keep == nil {
		keep = []int64{} // NULL would match no job
	}
	var ids []int64
	err := q.sendBatch(ctx, "unclaim", func(b *pgx.Batch) {
		b.Queue(noJITSQL)
		// The node row first, as every statement that changes a node's
		// jobs locks it (heartbeat).
		b.Queue(heartbeatLockSQL, nodeID, inc)
		b.Queue(unclaimSQL, nodeID, keep, inc, q.now()).Query(func(rows pgx.Rows) error {
			var err error
			ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("unclaim for node %q: %w", nodeID, err)
	}
	if len(ids) == 0 {
		if err := q.fenceErr(ctx, nodeID, inc); err != nil {
			return nil, fmt.Errorf("unclaim: %w", err)
		}
	}
	return ids, nil
}

// renewSQL locks the jobs it renews in id order first, the order
// CompleteMany locks them in: an UPDATE alone would lock them in the order
// its scan meets them, and a heartbeat and a completion of the same jobs
// could then deadlock.
const renewSQL = `
WITH locked AS (
    SELECT j.id FROM jobs j
    WHERE j.node_id = $1 AND j.state = 'processing'
      AND ($5::bigint[] IS NULL OR j.id = ANY($5::bigint[]))
      AND EXISTS (SELECT 1 FROM nodes n WHERE n.id = $1 AND n.state IN ('active', 'draining')
                  AND ($4::bigint = 0 OR n.incarnation = $4::bigint))
    ORDER BY j.id
    FOR NO KEY UPDATE OF j
)
UPDATE jobs j SET lease_expires_at = coalesce($2::timestamptz, now()) + make_interval(secs => $3::float8)
FROM locked l
WHERE j.id = l.id AND j.state = 'processing' AND j.node_id = $1
RETURNING j.id`

// failSQL ends the attempt of a job processing on the node: pending again
// after a backoff while attempts remain and the error is retriable, else
// failed. $5 holds the delay per attempt number. With $11 the attempt is
// given back (the node's fault, not the job's): pending again whatever its
// count, which goes down by one.
var failSQL = failCTEs + failSelect

// failKeepingSQL is failSQL that also stores, in the same statement, what
// the page answered ($12-$16: final URL, status, title, console errors,
// timings) as the result of a job it fails for good: a job is never final
// without the answer it failed with, and retention, which deletes a failed
// job with its result, cannot come between the two (the UPDATE holds the
// job's row). A result left by an earlier failure (before a Retry) is
// replaced; no data, HTML or screenshot is kept.
var failKeepingSQL = failCTEs + `, kept AS (
    INSERT INTO results (job_id, node_id, final_url, status, title, console_errors, timings, created_at)
    SELECT $1, $2, $12, $13, $14, $15::jsonb, $16::jsonb, coalesce($4::timestamptz, now())
    FROM upd WHERE upd.state = 'failed'
    ON CONFLICT (job_id) DO UPDATE SET node_id = EXCLUDED.node_id, final_url = EXCLUDED.final_url,
        status = EXCLUDED.status, title = EXCLUDED.title, data = NULL, html = NULL, html_truncated = false, screenshot = NULL,
        console_errors = EXCLUDED.console_errors, timings = EXCLUDED.timings, links = '[]',
        links_over_limit = 0, created_at = EXCLUDED.created_at
)` + failSelect

const failSelect = `
SELECT u.state, (SELECT count(*) FROM woken) FROM upd u`

var failCTEs = `
WITH upd AS (
    UPDATE jobs j SET
        state       = CASE WHEN ` + failRetries + ` THEN 'pending' ELSE 'failed' END,
        node_id     = CASE WHEN ` + failRetries + ` THEN NULL ELSE j.node_id END,
        queued_at   = CASE WHEN ` + failRetries + ` THEN NULL ELSE j.queued_at END,
        run_after   = CASE WHEN ` + failRetries + `
                           THEN coalesce($4::timestamptz, now())
                                + make_interval(secs => ($5::float8[])[least(greatest(j.attempts, 1), 20)])
                           ELSE j.run_after END,
        finished_at = CASE WHEN ` + failRetries + ` THEN NULL ELSE coalesce($4::timestamptz, now()) END,
        attempts    = CASE WHEN $11 THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
        lease_expires_at = NULL,
        last_error  = $6,
        error_class = $7
    WHERE j.id = $1 AND j.state = 'processing' AND j.node_id = $2 AND ` + fence("$2", "$10") + `
    RETURNING j.state, j.finished_at, j.error_class
), counted AS (
    ` + bumpNodeCounterSQL("jobs_failed", "SELECT $2, 1 FROM upd WHERE state = 'failed'") +
	stateCountsSQL("SELECT state, finished_at, error_class, 1 AS d FROM upd") + `
), woken AS (
    SELECT pg_notify($8, $9) FROM upd HAVING count(*) > 0
)`

// failRetries is failSQL's rule for a job going back to pending.
const failRetries = `$3 AND ($11 OR j.attempts < j.max_attempts)`

// fail is Incarnation.Fail, GiveBack and FailKeeping: answer, when not nil,
// is kept as the result if the job fails for good.
func (q *Queue) fail(ctx context.Context, jobID int64, nodeID string, inc int64, errText, class string, retriable, giveBack bool, answer *Result) (State, error) {
	var st State
	var notified int64
	var held bool
	sql, args := failSQL, []any{jobID, nodeID, retriable, q.now(), q.delays(),
		cleanText(errText, maxErrorText), cleanText(class, 64), ChannelProducer, PayloadSlots, inc, giveBack}
	if answer != nil {
		r := Result{FinalURL: answer.FinalURL, Status: answer.Status, Title: answer.Title,
			ConsoleErrors: answer.ConsoleErrors, Timings: answer.Timings}
		var a completeArgs
		if err := a.add(Completion{JobID: jobID, NodeID: nodeID, Result: r}, q.cfg.ResultLimits); err != nil {
			// What is left of an answer (no data, HTML or screenshot)
			// is within every limit; the failure itself must be kept.
			q.log.Warn("the failed job's answer cannot be kept", zap.Int64("job", jobID), zap.Error(err))
		} else {
			sql = failKeepingSQL
			args = append(args, a.finalURLs[0], a.statuses[0], a.titles[0], a.consoleErrors[0], a.timings[0])
		}
	}
	b, failed := nodeBatch(sql, args...)
	// No row is an answer, not an error: an error would make pgx drop the
	// connection's prepared statements of the batch.
	failed.Query(func(rows pgx.Rows) error {
		if held = rows.Next(); held {
			return rows.Scan(&st, &notified)
		}
		return rows.Err()
	})
	if err := q.pool.SendBatch(ctx, b).Close(); err != nil {
		return "", fmt.Errorf("fail job %d: %w", jobID, err)
	}
	if !held {
		if ferr := q.fenceErr(ctx, nodeID, inc); ferr != nil {
			return "", fmt.Errorf("fail job %d: %w", jobID, ferr)
		}
		return "", q.whyNotHeld(ctx, jobID, nodeID)
	}
	return st, nil
}

// whyNotHeld explains why a job was not processing on the node.
func (q *Queue) whyNotHeld(ctx context.Context, jobID int64, nodeID string) error {
	var st State
	var holder string
	err := q.pool.QueryRow(ctx, "SELECT state, coalesce(node_id, '') FROM jobs WHERE id = $1", jobID).Scan(&st, &holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("job %d: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("job %d: %w", jobID, err)
	}
	if st.Finished() {
		return &FinishedError{JobID: jobID, State: st}
	}
	return fmt.Errorf("job %d is %s on node %q, not processing on %q: %w", jobID, st, holder, nodeID, ErrNotHeld)
}

var releaseSQL = releaseQueuedSQL("$4") + `
), woken AS (
    SELECT pg_notify($2, $3) FROM upd HAVING count(*) > 0
)
SELECT count(*), (SELECT count(*) FROM woken) FROM upd`

// release is Incarnation.Release.
func (q *Queue) release(ctx context.Context, nodeID string, inc int64) (int64, error) {
	var n, notified int64
	err := q.retryDeadlocks(ctx, "release", func() error {
		b, release := nodeBatch(releaseSQL, nodeID, ChannelProducer, PayloadSlots, inc)
		release.QueryRow(func(row pgx.Row) error { return row.Scan(&n, &notified) })
		return q.pool.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return 0, fmt.Errorf("release jobs of node %q: %w", nodeID, err)
	}
	if n == 0 {
		if err := q.fenceErr(ctx, nodeID, inc); err != nil {
			return 0, fmt.Errorf("release: %w", err)
		}
	}
	return n, nil
}
