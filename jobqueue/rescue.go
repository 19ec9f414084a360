package jobqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RescueReport says what RescueLost did.
type RescueReport struct {
	LostNodes []string // nodes just declared lost
	Released  int64    // queued jobs of gone nodes returned free
	// Unclaimed counts the queued jobs returned free because their live
	// node had not claimed them within Config.ClaimTimeout; UnclaimedNodes
	// names those nodes.
	Unclaimed      int64
	UnclaimedNodes []string
	Retried        int64 // processing jobs charged an attempt, back to pending
	Failed         int64 // processing jobs that used their last attempt
}

// markLostSQL locks the stale nodes in id order first, like an assignment
// round locks its targets (lockTargetsSQL), so the two cannot deadlock.
const markLostSQL = `
WITH stale AS (
    SELECT id FROM nodes
    WHERE state IN ('active', 'draining')
      AND heartbeat_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::float8)
    ORDER BY id
    FOR UPDATE
)
UPDATE nodes n SET state = 'lost', state_changed_at = coalesce($1::timestamptz, now())
FROM stale
WHERE n.id = stale.id
RETURNING n.id`

// releaseGoneSQL also catches jobs assigned to a node in the instant it was
// declared lost or exited, so none stays queued on a node that is gone.
var releaseGoneSQL = releaseJobsSQL(`
    FROM nodes n`, "j.node_id = n.id AND n.state IN ('lost', 'exited')", "j.id") + `
)
SELECT count(*) FROM upd`

// releaseUnclaimedSQL returns free the jobs queued on a node longer than
// $2 seconds ago, whatever the node's state, and names the nodes. A node
// claims what it is given as soon as it is woken, or at its next poll: a
// job it holds queued far longer sits behind a wedged claim loop that the
// node's heartbeats (another goroutine) hide, and would wait there as long
// as they go on. A claim racing this finds the job no longer its own. The
// age is checked again on the row the update waited for: a job released
// and queued anew meanwhile is young again. The nodes come from a read
// before the update, which leaves node_id empty.
var releaseUnclaimedSQL = releaseJobsSQL(`
    FROM (SELECT j.id, j.node_id FROM jobs j WHERE j.state = 'queued' AND `+unclaimedSince+`) stuck`,
	"j.id = stuck.id AND j.node_id = stuck.node_id AND "+unclaimedSince, "stuck.node_id") + `
)
SELECT count(*), coalesce(array_agg(DISTINCT node_id ORDER BY node_id), '{}') FROM upd`

// unclaimedSince admits a job queued (j) longer than $2 seconds before the
// statement's clock ($1, or the database's).
const unclaimedSince = "j.queued_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::float8)"

var chargeGoneSQL = `
WITH upd AS (
    UPDATE jobs j SET
` + chargeAttempt("$1", "$2") + `
        last_error  = CASE WHEN j.lease_expires_at < coalesce($1::timestamptz, now())
                           THEN 'lease expired on node ' || j.node_id
                           ELSE 'node ' || j.node_id || ' was lost while the job was running' END,
        error_class = CASE WHEN j.lease_expires_at < coalesce($1::timestamptz, now())
                           THEN 'lease_expired' ELSE 'node_lost' END
    WHERE j.state = 'processing'
      AND (j.lease_expires_at < coalesce($1::timestamptz, now())
           OR j.node_id IN (SELECT id FROM nodes WHERE state IN ('lost', 'exited')))
    RETURNING j.state, j.node_id, j.finished_at, j.error_class
), counted AS (
    ` + bumpNodeCounterSQL("jobs_failed",
	"SELECT node_id, count(*) FROM upd WHERE state = 'failed' GROUP BY node_id ORDER BY node_id") +
	stateCountsSQL("SELECT state, finished_at, error_class, 1 AS d FROM upd") + `
)
SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'failed') FROM upd`

// RescueLost declares lost every active or draining node whose last heartbeat
// is older than staleAfter, then takes back the jobs of gone (lost or exited)
// nodes — queued ones free, processing ones charged an attempt — every job
// queued on any node longer than Config.ClaimTimeout (free), and every
// processing job whose lease expired on any node. The producer runs it
// periodically.
func (q *Queue) RescueLost(ctx context.Context, staleAfter time.Duration) (RescueReport, error) {
	var rep RescueReport
	now := q.now()
	err := q.sendBatch(ctx, "rescue", func(b *pgx.Batch) {
		// Each statement of the batch takes its own snapshot after the one
		// before it finished: marking a node lost waits for an Assign holding
		// its row, and the next statement then sees what that Assign queued.
		b.Queue(markLostSQL, now, staleAfter.Seconds()).Query(func(rows pgx.Rows) error {
			var err error
			rep.LostNodes, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		b.Queue(releaseGoneSQL).QueryRow(func(row pgx.Row) error { return row.Scan(&rep.Released) })
		b.Queue(releaseUnclaimedSQL, now, q.cfg.ClaimTimeout.Seconds()).QueryRow(func(row pgx.Row) error {
			return row.Scan(&rep.Unclaimed, &rep.UnclaimedNodes)
		})
		b.Queue(chargeGoneSQL, now, q.delays()).QueryRow(func(row pgx.Row) error {
			return row.Scan(&rep.Retried, &rep.Failed)
		})
	})
	if err != nil {
		return RescueReport{}, fmt.Errorf("rescue lost jobs: %w", err)
	}
	// The report is the caller's to log (the producer's rescue loop does).
	if rep.Released+rep.Unclaimed+rep.Retried > 0 {
		if _, err := q.pool.Exec(ctx, "SELECT pg_notify($1, $2)", ChannelProducer, PayloadSubmitted); err != nil {
			return rep, fmt.Errorf("rescue lost jobs: notify: %w", err)
		}
	}
	return rep, nil
}

// DeleteGoneNodes deletes exited and lost nodes that hold no job and whose
// state changed before cutoff, and returns how many.
func (q *Queue) DeleteGoneNodes(ctx context.Context, cutoff time.Time) (int64, error) {
	// Their lifetime counters move into the farm's, in the same statement.
	var n int64
	err := q.pool.QueryRow(ctx, `
        WITH gone AS (
            DELETE FROM nodes n
            WHERE n.state IN ('exited', 'lost') AND n.state_changed_at < $1
              AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.node_id = n.id AND j.state IN ('queued', 'processing'))
            RETURNING n.id
        `+foldGoneCountersSQL+`
        SELECT count(*), (SELECT count(*) FROM folded) FROM gone`, cutoff).Scan(&n, new(int64))
	if err != nil {
		return 0, fmt.Errorf("delete gone nodes: %w", err)
	}
	return n, nil
}
