package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

const nodeCols = `n.id, n.hostname, n.version, n.capacity, n.chrome_recycle_jobs, n.exit_after_jobs, n.state,
    n.incarnation, n.pid, n.process_restarts,
    n.cpu_percent, n.mem_used_bytes, n.mem_total_bytes, n.chrome_pss_bytes,
    coalesce(n.chrome_pss_min_bytes, n.chrome_pss_bytes), coalesce(n.chrome_pss_max_bytes, n.chrome_pss_bytes), n.busy_sessions,
    n.jobs_since_chrome_start, n.jobs_since_process_start, n.chrome_restarts,
    n.registered_at, n.started_at, n.heartbeat_at, n.state_changed_at`

func scanNode(row pgx.Row, extra ...any) (Node, error) {
	var n Node
	dest := []any{&n.ID, &n.Hostname, &n.Version, &n.Capacity, &n.ChromeRecycleJobs, &n.ExitAfterJobs, &n.State,
		&n.Incarnation, &n.PID, &n.ProcessRestarts,
		&n.Load.CPUPercent, &n.Load.MemUsedBytes, &n.Load.MemTotalBytes, &n.Load.ChromePSSBytes,
		&n.Load.ChromePSSMinBytes, &n.Load.ChromePSSMaxBytes,
		&n.Load.BusySessions, &n.Load.JobsSinceChromeStart, &n.Load.JobsSinceProcessStart,
		&n.Load.ChromeRestarts, &n.RegisteredAt, &n.StartedAt, &n.HeartbeatAt, &n.StateChangedAt}
	err := row.Scan(append(dest, extra...)...)
	return n, err
}

// Reclaimed counts the jobs a node got back from its previous life
// (Register) or handed back when it exited.
type Reclaimed struct {
	Released int64 // queued jobs returned to pending, no attempt charged
	Retried  int64 // processing jobs charged an attempt and returned to pending
	Failed   int64 // processing jobs charged their last attempt: failed
}

// registerSQL takes the id with a new incarnation, unless a live
// incarnation holds it: one active or draining whose heartbeat is fresher
// than $7 seconds, other than $8 (one the caller proved dead). Then it
// changes nothing and returns no row.
const registerSQL = `
INSERT INTO nodes AS n (id, hostname, version, capacity, chrome_recycle_jobs, exit_after_jobs, state, incarnation, pid,
                        registered_at, started_at, heartbeat_at, state_changed_at)
VALUES ($1, $2, $3, $4, $9, $10, 'active', nextval('node_incarnations'), $6,
        coalesce($5::timestamptz, now()), coalesce($5::timestamptz, now()),
        coalesce($5::timestamptz, now()), coalesce($5::timestamptz, now()))
ON CONFLICT (id) DO UPDATE SET
    hostname = EXCLUDED.hostname, version = EXCLUDED.version, capacity = EXCLUDED.capacity,
    chrome_recycle_jobs = EXCLUDED.chrome_recycle_jobs, exit_after_jobs = EXCLUDED.exit_after_jobs,
    chrome_pss_min_bytes = NULL, chrome_pss_max_bytes = NULL,
    state = 'active', process_restarts = n.process_restarts + 1,
    incarnation = EXCLUDED.incarnation, pid = EXCLUDED.pid, exit_reason = '',
    started_at = EXCLUDED.started_at, heartbeat_at = EXCLUDED.heartbeat_at,
    state_changed_at = EXCLUDED.state_changed_at,
    cpu_percent = 0, mem_used_bytes = 0, mem_total_bytes = 0, chrome_pss_bytes = 0, busy_sessions = 0,
    jobs_since_chrome_start = 0, jobs_since_process_start = 0, chrome_restarts = 0,
    chrome_recycles = 0, chrome_memory_recycles = 0, chrome_crashes = 0,
    contexts_reused = 0, contexts_replaced = 0
WHERE n.state IN ('exited', 'lost') OR n.incarnation = $8
   OR n.heartbeat_at < coalesce($5::timestamptz, now()) - make_interval(secs => $7::float8)
RETURNING ` + nodeCols

// fence is the SQL condition that the node named by idExpr is at the
// incarnation in the parameter inc, or that inc is 0 (an operator's call,
// not a node's).
func fence(idExpr, inc string) string {
	return "(" + inc + "::bigint = 0 OR EXISTS (SELECT 1 FROM nodes f WHERE f.id = " + idExpr +
		" AND f.incarnation = " + inc + "::bigint))"
}

// releaseJobsSQL opens a statement that returns to pending, free of charge,
// the queued jobs (j) that cond admits, joined to from (a FROM clause, or
// ""): CTE upd (returning returned) and their pending count, left open for
// the statement's next CTE or its closing parenthesis. Every release of
// queued jobs goes through it.
func releaseJobsSQL(from, cond, returned string) string {
	return `
WITH upd AS (
    UPDATE jobs j SET state = 'pending', node_id = NULL, queued_at = NULL` + from + `
    WHERE j.state = 'queued' AND ` + cond + `
    RETURNING ` + returned + `
` + pendingCountSQL("SELECT 1 AS d FROM upd")
}

// releaseQueuedSQL opens a statement that returns the queued jobs of node
// $1 to pending, free of charge, if the node is at the incarnation inc (a
// placeholder): releaseJobsSQL's CTE upd (the jobs' ids) and their pending
// count.
func releaseQueuedSQL(inc string) string {
	return releaseJobsSQL("", "j.node_id = $1 AND "+fence("$1", inc), "j.id")
}

// releaseNodeSQL returns a node's queued jobs to pending, free of charge.
var releaseNodeSQL = releaseQueuedSQL("$2") + `
)
SELECT count(*) FROM upd`

// chargeNodeSQL ends the running attempt of each job processing on a node
// that will not finish it: pending after a backoff while attempts remain,
// else failed. $3 holds the delay per attempt number.
var chargeNodeSQL = `
WITH upd AS (
    UPDATE jobs j SET
` + chargeAttempt("$2", "$3") + `
        last_error  = $4,
        error_class = $5
    WHERE j.node_id = $1 AND j.state = 'processing' AND ` + fence("$1", "$6") + `
    RETURNING j.state, j.finished_at, j.error_class
), counted AS (
    ` + bumpNodeCounterSQL("jobs_failed", "SELECT $1, count(*) FROM upd WHERE state = 'failed' HAVING count(*) > 0") +
	stateCountsSQL("SELECT state, finished_at, error_class, 1 AS d FROM upd") + `
)
SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'failed') FROM upd`

// chargeAttempt is the SET list that ends a running attempt the node will
// not finish: back to pending after the backoff while attempts remain, else
// failed. now and delays name the parameters holding the clock override and
// the delay per attempt number.
func chargeAttempt(now, delays string) string {
	return strings.NewReplacer("$NOW", now, "$DELAYS", delays).Replace(`
        state       = CASE WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'failed' END,
        node_id     = CASE WHEN j.attempts < j.max_attempts THEN NULL ELSE j.node_id END,
        queued_at   = CASE WHEN j.attempts < j.max_attempts THEN NULL ELSE j.queued_at END,
        run_after   = CASE WHEN j.attempts < j.max_attempts
                           THEN coalesce($NOW::timestamptz, now())
                                + make_interval(secs => ($DELAYS::float8[])[least(greatest(j.attempts, 1), 20)])
                           ELSE j.run_after END,
        finished_at = CASE WHEN j.attempts < j.max_attempts THEN NULL ELSE coalesce($NOW::timestamptz, now()) END,
        lease_expires_at = NULL,`)
}

// Error classes the queue itself records.
const (
	ClassNodeRestarted = "node_restarted" // the node re-registered while the job ran
	ClassNodeExited    = "node_exited"    // the node exited while the job ran
	ClassNodeLost      = "node_lost"      // the node stopped heartbeating
	ClassLeaseExpired  = "lease_expired"  // the lease ran out without renewal
)

// queueReclaim adds to b the statements that take back everything nodeID
// holds, if the node is at incarnation inc (any, when inc is 0).
func (q *Queue) queueReclaim(b *pgx.Batch, nodeID string, inc int64, why, class string, r *Reclaimed) {
	b.Queue(releaseNodeSQL, nodeID, inc).QueryRow(func(row pgx.Row) error { return row.Scan(&r.Released) })
	b.Queue(chargeNodeSQL, nodeID, q.now(), q.delays(), why, class, inc).QueryRow(func(row pgx.Row) error {
		return row.Scan(&r.Retried, &r.Failed)
	})
	b.Queue("SELECT pg_notify($1, $2)", ChannelProducer, PayloadSlots)
}

// Register records a node starting (again) under a new incarnation and
// returns it. A node id seen before is re-activated with its load counters
// reset and its process restart count raised, and whatever the previous
// process left behind is taken back at once, in the same transaction: its
// queued jobs return to pending free, its processing ones are charged an
// attempt. From then on the previous incarnation is fenced:
// whatever it sends is refused with a *FencedError.
//
// Two live processes never share an id: while an incarnation is active or
// draining and heartbeated within Config.StaleAfter, Register refuses with
// a *NodeInUseError — unless info.Replaces names it, which a process does
// that proved it dead (see NodeInfo.Replaces). An incarnation that exited
// (the restart after exit code 75) or was declared lost is replaced at once.
func (q *Queue) Register(ctx context.Context, info NodeInfo) (Node, Reclaimed, error) {
	if err := ValidateNodeID(info.ID); err != nil {
		return Node{}, Reclaimed{}, fmt.Errorf("register: %w", err)
	}
	if info.Capacity < 1 || info.Capacity > 1000 {
		return Node{}, Reclaimed{}, fmt.Errorf("register node %q: capacity %d is out of range 1..1000", info.ID, info.Capacity)
	}
	if info.ChromeRecycleJobs < 0 || info.ExitAfterJobs < 0 {
		return Node{}, Reclaimed{}, fmt.Errorf("register node %q: recycle thresholds must not be negative (chrome recycle %d, exit after %d)",
			info.ID, info.ChromeRecycleJobs, info.ExitAfterJobs)
	}
	var node Node
	var r Reclaimed
	err := q.retryDeadlocks(ctx, "register", func() error {
		r = Reclaimed{}
		return pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
			// How the previous incarnation ended decides which restart
			// counter this registration raises.
			var prevState NodeState
			var prevReason string
			err := tx.QueryRow(ctx, "SELECT state, exit_reason FROM nodes WHERE id = $1 FOR UPDATE", info.ID).
				Scan(&prevState, &prevReason)
			first := errors.Is(err, pgx.ErrNoRows)
			if err != nil && !first {
				return err
			}
			node, err = scanNode(tx.QueryRow(ctx, registerSQL, info.ID, cleanText(info.Hostname, 255),
				cleanText(info.Version, 255), info.Capacity, q.now(), info.PID, q.cfg.StaleAfter.Seconds(), info.Replaces,
				info.ChromeRecycleJobs, info.ExitAfterJobs))
			if errors.Is(err, pgx.ErrNoRows) {
				return q.holder(ctx, tx, info.ID)
			}
			if err != nil {
				return err
			}
			b := &pgx.Batch{}
			if first {
				b.Queue("INSERT INTO node_counters (node_id) VALUES ($1) ON CONFLICT (node_id) DO NOTHING", info.ID)
			}
			q.queueReclaim(b, info.ID, 0, "node "+info.ID+" restarted while the job was running", ClassNodeRestarted, &r)
			if !first {
				// After the reclaim: jobs first, then the node's counters,
				// the order every statement takes them in (see heartbeat.go).
				// The previous incarnation's last Fail holds its job and
				// waits for the counters; taking the counters first here
				// and then that job deadlocked.
				b.Queue(bumpNodeCounterSQL(restartColumn(prevState, prevReason), "VALUES ($1, 1)"), info.ID)
			}
			return tx.SendBatch(ctx, b).Close()
		})
	})
	if err != nil {
		return Node{}, Reclaimed{}, fmt.Errorf("register node %q: %w", info.ID, err)
	}
	if r != (Reclaimed{}) {
		q.log.Info("node reclaimed its abandoned jobs", zap.String("node", info.ID),
			zap.Int64("released", r.Released), zap.Int64("retried", r.Retried), zap.Int64("failed", r.Failed))
	}
	return node, r, nil
}

// holder describes the live incarnation that kept Register out.
func (q *Queue) holder(ctx context.Context, tx pgx.Tx, nodeID string) error {
	e := &NodeInUseError{NodeID: nodeID}
	var ageSecs float64
	err := tx.QueryRow(ctx, `
        SELECT hostname, pid, incarnation,
               extract(epoch FROM coalesce($2::timestamptz, now()) - heartbeat_at)::float8
        FROM nodes WHERE id = $1`, nodeID, q.now()).Scan(&e.Hostname, &e.PID, &e.Incarnation, &ageSecs)
	if err != nil {
		return fmt.Errorf("read the holder of the id: %w", err)
	}
	e.HeartbeatAge = time.Duration(ageSecs * float64(time.Second))
	return e
}

// SetNodeState moves a node to draining (takes nothing new), back to active,
// or to exited. Exiting also takes back what the node still holds: queued jobs
// free, processing ones charged an attempt. Lost is decided by RescueLost
// only; a lost or exited node becomes active again by registering. This is
// the operator's form, bound to no incarnation; a node's process uses
// Incarnation.SetState.
func (q *Queue) SetNodeState(ctx context.Context, nodeID string, st NodeState) (Reclaimed, error) {
	return q.setNodeState(ctx, nodeID, 0, st, "")
}

func (q *Queue) setNodeState(ctx context.Context, nodeID string, inc int64, st NodeState, reason string) (Reclaimed, error) {
	var r Reclaimed
	switch st {
	case NodeActive, NodeDraining:
		tag, err := q.pool.Exec(ctx, `
            WITH locked AS (
                -- FOR UPDATE, not the UPDATE's own FOR NO KEY UPDATE: an
                -- assignment round's FOR KEY SHARE must keep the node active
                -- until the round commits (see lockTargetsSQL).
                SELECT id FROM nodes
                WHERE id = $1 AND state IN ('active', 'draining') AND ($4::bigint = 0 OR incarnation = $4::bigint)
                FOR UPDATE
            )
            UPDATE nodes n SET state = $2, state_changed_at = coalesce($3::timestamptz, now())
            FROM locked WHERE n.id = locked.id`,
			nodeID, st, q.now(), inc)
		if err != nil {
			return r, fmt.Errorf("set node %q %s: %w", nodeID, st, err)
		}
		if tag.RowsAffected() == 0 {
			if ferr := q.fenceErr(ctx, nodeID, inc); ferr != nil {
				return r, fmt.Errorf("set node %q %s: %w", nodeID, st, ferr)
			}
			var cur NodeState
			err := q.pool.QueryRow(ctx, "SELECT state FROM nodes WHERE id = $1", nodeID).Scan(&cur)
			if errors.Is(err, pgx.ErrNoRows) {
				return r, fmt.Errorf("set node %q %s: %w", nodeID, st, ErrNotFound)
			}
			if err != nil {
				return r, fmt.Errorf("set node %q %s: %w", nodeID, st, err)
			}
			return r, fmt.Errorf("set node %q %s: the node is %s; it must register again", nodeID, st, cur)
		}
		if st == NodeActive {
			if _, err := q.pool.Exec(ctx, "SELECT pg_notify($1, $2)", ChannelProducer, PayloadSlots); err != nil {
				return r, fmt.Errorf("set node %q %s: notify: %w", nodeID, st, err)
			}
		}
		return r, nil
	case NodeExited:
		return q.exit(ctx, nodeID, inc, reason, nil)
	default:
		return r, fmt.Errorf("set node %q: state %q cannot be set (use active, draining or exited)", nodeID, st)
	}
}

// exitCountersSQL folds the final totals of the process of node $1 at
// incarnation $2 ($3…, as heartbeatSQL's) into its lifetime counters. It
// runs after the reclaim: node row, jobs, counters, the order every
// statement takes them in (see heartbeat.go).
var exitCountersSQL = `
WITH prev AS (
    SELECT id, ` + processCounterList("") + `
    FROM nodes WHERE id = $1 AND incarnation = $2::bigint FOR NO KEY UPDATE
), counted AS (` + foldProcessCountersSQL(exitCounterParams) + `
)
UPDATE nodes n SET ` + keepProcessCountersSQL(exitCounterParams) + `
FROM prev p WHERE n.id = p.id`

var exitCounterParams = []string{"$3", "$4", "$5", "$6", "$7"}

// exit marks node exited with reason and takes back what it still holds;
// with final, the totals its process counted (as a heartbeat carries them)
// join its lifetime counters in the same transaction.
func (q *Queue) exit(ctx context.Context, nodeID string, inc int64, reason string, final *NodeLoad) (Reclaimed, error) {
	var r Reclaimed
	if final != nil && inc == 0 {
		return r, fmt.Errorf("set node %q exited: final counts need the incarnation that counted them", nodeID)
	}
	found := false
	err := q.sendBatch(ctx, "exit", func(b *pgx.Batch) {
		// Locked FOR UPDATE first, like a drain (see lockTargetsSQL).
		b.Queue(`WITH locked AS (
                         SELECT id FROM nodes WHERE id = $1 AND ($3::bigint = 0 OR incarnation = $3::bigint) FOR UPDATE)
                     UPDATE nodes n SET state = 'exited', exit_reason = $4, state_changed_at = coalesce($2::timestamptz, now())
                     FROM locked WHERE n.id = locked.id`,
			nodeID, q.now(), inc, cleanText(reason, 64)).Exec(func(tag pgconn.CommandTag) error {
			found = tag.RowsAffected() == 1
			return nil
		})
		q.queueReclaim(b, nodeID, inc, "node "+nodeID+" exited while the job was running", ClassNodeExited, &r)
		if final != nil {
			b.Queue(exitCountersSQL, append([]any{nodeID, inc}, processCounterArgs(*final)...)...)
		}
	})
	if err != nil {
		return Reclaimed{}, fmt.Errorf("set node %q exited: %w", nodeID, err)
	}
	if !found {
		if ferr := q.fenceErr(ctx, nodeID, inc); ferr != nil {
			return Reclaimed{}, fmt.Errorf("set node %q exited: %w", nodeID, ferr)
		}
		return Reclaimed{}, fmt.Errorf("set node %q exited: %w", nodeID, ErrNotFound)
	}
	return r, nil
}

// GetNode returns one node with the jobs it holds.
func (q *Queue) GetNode(ctx context.Context, nodeID string) (Node, error) {
	nodes, err := q.listNodes(ctx, "WHERE n.id = $1", nodeID)
	if err != nil {
		return Node{}, err
	}
	if len(nodes) == 0 {
		return Node{}, fmt.Errorf("node %q: %w", nodeID, ErrNotFound)
	}
	return nodes[0], nil
}

// ListNodes returns every node, by id, with the jobs each holds now.
func (q *Queue) ListNodes(ctx context.Context) ([]Node, error) {
	return q.listNodes(ctx, "")
}

func (q *Queue) listNodes(ctx context.Context, where string, args ...any) ([]Node, error) {
	// The heartbeat's age by the database's clock: the next placeholder.
	age := fmt.Sprintf("extract(epoch FROM coalesce($%d::timestamptz, now()) - n.heartbeat_at)::float8", len(args)+1)
	args = append(args, q.now())
	var nodes []Node
	err := q.readQuery(ctx, func(rows pgx.Rows) error {
		for rows.Next() {
			var queued, processing int64
			var ageSeconds float64
			var life Counters
			n, err := scanNode(rows, append([]any{&queued, &processing, &ageSeconds}, counterDest(&life)...)...)
			if err != nil {
				return err
			}
			n.Lifetime = life
			n.Queued, n.Processing = int(queued), int(processing)
			n.HeartbeatAge = max(0, time.Duration(ageSeconds*float64(time.Second)))
			nodes = append(nodes, n)
		}
		return rows.Err()
	}, `
        SELECT `+nodeCols+`, coalesce(h.queued, 0), coalesce(h.processing, 0), `+age+`, `+lifetimeCols+`
        FROM nodes n
        LEFT JOIN node_counters c ON c.node_id = n.id
        LEFT JOIN (SELECT node_id,
                          count(*) FILTER (WHERE state = 'queued') AS queued,
                          count(*) FILTER (WHERE state = 'processing') AS processing
                   FROM jobs WHERE state IN ('queued', 'processing')
                   GROUP BY node_id) h ON h.node_id = n.id
        `+where+`
        ORDER BY n.id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return nodes, nil
}
