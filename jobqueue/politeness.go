package jobqueue

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// HostPolicy is the farm-wide politeness towards one host: how many of its
// jobs may be assigned or running at once across all nodes, and the least
// time between two job starts. Zero values mean no limit.
type HostPolicy struct {
	MaxConcurrent int           `json:"max_concurrent"`
	MinInterval   time.Duration `json:"min_interval"`
}

// assignLockKey serializes assignment rounds farm-wide (a transaction-level
// advisory lock): even if two producers briefly both believe they lead, their
// rounds cannot interleave, so no node and no host is ever over its limit.
const assignLockKey int64 = 0x62666173736967 // "bfassig"

// AssignReport says what one politeness-aware assignment round did.
type AssignReport struct {
	// Assigned lists the job ids given to each node.
	Assigned map[string][]int64
	// FreeSlots is the free capacity of the active nodes before the round.
	FreeSlots int
	// Throttled counts hosts that had pending jobs but no budget this
	// round, of those the round looked at: every host with pending jobs,
	// or, when the head of the queue filled the free slots, the hosts of
	// the jobs it read (see pickFromHead).
	Throttled int
	// NextDueIn is how long until the earliest host held back by its minimum
	// interval may start again (0 if none), of the hosts the round looked
	// at: the producer's next wake-up. A host it did not look at waits
	// behind jobs that filled the round: every free slot, whose ends wake
	// the producer, or the round's limit, after which the producer goes
	// again at once. It is measured on the database's clock, so producer
	// clock skew cannot turn it into a busy loop.
	NextDueIn time.Duration
	// CreatedAt holds the creation time of each assigned job, for the
	// submit-to-assignment latency metric.
	CreatedAt []time.Time
	// Elapsed is how long the round took, from its first statement to its
	// commit, as the producer saw it.
	Elapsed time.Duration
}

// Total is the number of jobs assigned.
func (r AssignReport) Total() int {
	n := 0
	for _, ids := range r.Assigned {
		n += len(ids)
	}
	return n
}

// hostState is what an assignment round knows of one host with pending jobs.
type hostState struct {
	Host        string
	Active      int       // queued + processing, farm-wide
	Queued      int       // assigned but not started
	LastStarted time.Time // zero when unknown (no interval state kept)
}

// hostBudget is how many jobs of a host may be assigned now, and, when the
// minimum interval holds the host back, when it may start again.
//
// A host with a minimum interval gets at most one job at a time, and only
// once its previous job has started and the interval since that start has
// passed: the job's own start (its claim) then comes after the interval,
// which makes the spacing of starts exact rather than approximate.
func hostBudget(pol HostPolicy, h hostState, now time.Time, unlimited int) (int, time.Time) {
	n := unlimited
	if pol.MaxConcurrent > 0 {
		n = min(n, pol.MaxConcurrent-h.Active)
	}
	if pol.MinInterval > 0 {
		if h.Queued > 0 {
			return 0, time.Time{} // its claim will wake the producer
		}
		due := h.LastStarted.Add(pol.MinInterval)
		if !h.LastStarted.IsZero() && now.Before(due) {
			return 0, due
		}
		n = min(n, 1)
	}
	return max(n, 0), time.Time{}
}

const lockAssignSQL = `SELECT pg_advisory_xact_lock($1)`

// genericPlansSQL makes the round's statements run on their cached generic
// plans from the first execution. PostgreSQL otherwise plans a prepared
// statement anew for its first five runs on each connection, and always
// when the generic plan looks dearer than the custom one: politePickSQL,
// whose per-host LIMIT only a custom plan knows, was planned on every round
// (0.2–0.5 ms each, as long as the rest of the pick). The generic plans are
// the same shapes: the round finds its rows through the primary keys and
// a pending partial index (which one follows the statistics: with a large
// history ANALYZEd before the backlog, the pending index by priority,
// filtered by host).
const genericPlansSQL = `SET LOCAL plan_cache_mode = force_generic_plan`

// roundSettings open every round's transaction: its generic plans
// (genericPlansSQL), index scans only, whatever its statistics say, and no
// JIT (noJITSQL). Every read of jobs in a round has an index made for it:
// the small partial indexes of pending and in-flight jobs, and the primary
// key. A
// round's plans are its connection's generic plans, made once (and again
// after an ANALYZE); the statistics of a queue table lag its backlog by
// design, and plans made on them were kept for the connection's life. On a
// table not yet analyzed (a new farm; the scale bench's empty table) the
// pick (politePickSQL) was a bitmap scan, which cannot stop after the
// host's budget: each round fetched and sorted all of the host's
// 5,000-18,000 pending jobs, 3-8 ms, against 0.1 ms for the first n by
// jobs_pending_host_idx. With bitmap scans alone off, the capacity check
// and the pending hosts fell to sequential scans planned on the empty
// table: 80 ms a round at 40,000 jobs.
var roundSettings = []string{genericPlansSQL, indexScansOnlySQL, noJITSQL}

// lockTargetsSQL key-share-locks the nodes a round is about to assign to,
// in id order (the order every multi-node locker uses): a node cannot be
// declared lost, start draining, exit or re-register with another capacity
// until the round commits, because each of those takes its node row FOR
// UPDATE first, which conflicts with FOR KEY SHARE. A heartbeat takes the
// row FOR NO KEY UPDATE, which does not: it writes only the node's load and
// liveness, none of which the round reads, and the one state change it makes
// (a lost or exited node active again) concerns a node the round does not
// assign to. Only the round's targets are locked (a few per round), not
// every active node: each tuple lock is a write and a WAL record, which at
// 1,000 nodes made the round's cost grow with the fleet.
const lockTargetsSQL = `SELECT id FROM nodes WHERE id = ANY($1::text[]) ORDER BY id FOR KEY SHARE`

// targetFreeSQL reads the free slots of the locked targets in a statement of
// its own, so in a snapshot taken after the locks were granted: whatever
// changed a target between the round's first look and its lock is seen.
const targetFreeSQL = `
SELECT n.id, n.capacity - count(h.id)::int
FROM nodes n
LEFT JOIN jobs h ON h.node_id = n.id AND h.state IN ('queued', 'processing')
WHERE n.id = ANY($1::text[]) AND n.state = 'active'
GROUP BY n.id, n.capacity`

const politeNodesSQL = `
SELECT n.id, n.capacity, count(h.id)::int
FROM nodes n
LEFT JOIN jobs h ON h.node_id = n.id AND h.state IN ('queued', 'processing')
WHERE n.state = 'active'
GROUP BY n.id, n.capacity
HAVING n.capacity > count(h.id)
ORDER BY n.id`

// politeLockSQL locks the picked jobs and returns their state after the
// lock; the round keeps those still pending. Locking a row writes to it, so
// only the winners are locked. Rounds are serialized by assignLockKey; SKIP
// LOCKED only steps around a cancel or retry touching the same job at the
// same moment.
//
// The state is checked by the caller, not here: with "state = 'pending'" in
// the WHERE clause the planner may answer from a pending partial index
// (jobs_pending_idx, jobs_pending_host_idx), whose statistics lag a queue
// that fills and drains between two ANALYZEs, and it did — a bitmap AND over
// every pending entry, each round. By id alone only the primary key serves.
const politeLockSQL = `SELECT id, state FROM jobs WHERE id = ANY($1::bigint[]) FOR UPDATE SKIP LOCKED`

const politeHostRowsSQL = `INSERT INTO hosts (host) SELECT unnest($1::text[]) ON CONFLICT (host) DO NOTHING`

// politeUpdateSQL assigns jobs the round locked and saw pending
// (politeLockSQL): nothing can have changed them since, so they are found
// by id alone, through the primary key (see politeLockSQL). Each node that
// got jobs is woken on its own channel (nodes that LISTEN) and named on
// ChannelAssigned (nodes woken through a producer). A CTE that nothing
// references is not run, hence the final SELECT.
var politeUpdateSQL = `
WITH assigned AS (
    UPDATE jobs j SET state = 'queued', node_id = a.node_id, queued_at = coalesce($3::timestamptz, now())
    FROM unnest($1::bigint[], $2::text[]) AS a(id, node_id)
    WHERE j.id = a.id
    RETURNING j.node_id
` + pendingCountSQL("SELECT -1 AS d FROM assigned") + `
), per_node AS (
    SELECT node_id, count(*) AS n FROM assigned GROUP BY node_id
), node_wake AS (
    SELECT pg_notify($4 || node_id, n::text) FROM per_node
), relay AS (
    -- The nodes' ids, $6 to a notification (assignedPerNotify).
    SELECT pg_notify($5, string_agg(node_id, ' ')) FROM (
        SELECT node_id, (row_number() OVER (ORDER BY node_id) - 1) / $6 AS chunk FROM per_node
    ) c GROUP BY chunk
)
SELECT (SELECT count(*) FROM node_wake), (SELECT count(*) FROM relay)`

// AssignPolite runs one farm-wide assignment round: it fills the free slots
// of the active nodes, in the order the assign policy gives (see
// Distribute), with ready pending jobs by
// priority then age, while no host exceeds its policy (see hostBudget) —
// jobs of a throttled host wait without holding up other hosts. At most
// limit jobs are assigned. Rounds are serialized farm-wide by an advisory
// lock. Each node that got work is woken by NOTIFY.
func (q *Queue) AssignPolite(ctx context.Context, policy func(host string) HostPolicy, limit int, assign AssignPolicy) (AssignReport, error) {
	rep := AssignReport{Assigned: map[string][]int64{}}
	if limit <= 0 {
		return rep, nil
	}
	start := time.Now()
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		// The lock and the read of the nodes in one round trip: the read
		// runs after the lock is granted, in a snapshot of its own. The
		// nodes are read unlocked; the ones the round picks are locked and
		// read again below.
		var nodes []NodeSlots
		b := &pgx.Batch{}
		for _, sql := range roundSettings {
			b.Queue(sql)
		}
		b.Queue(lockAssignSQL, assignLockKey)
		b.Queue(politeNodesSQL).Query(func(rows pgx.Rows) error {
			var err error
			nodes, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (NodeSlots, error) {
				var n NodeSlots
				err := r.Scan(&n.ID, &n.Capacity, &n.Held)
				return n, err
			})
			return err
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		for _, n := range nodes {
			rep.FreeSlots += n.Capacity - n.Held
		}
		free := min(rep.FreeSlots, limit)
		if free == 0 {
			return nil
		}

		var p pick
		var ok bool
		var err error
		if !q.fewPendingHosts(free) {
			p, ok, err = q.pickFromHead(ctx, tx, policy, free)
		}
		if err == nil && !ok {
			p, err = q.pickByHost(ctx, tx, policy, free)
		}
		if err != nil {
			return err
		}
		rep.Throttled, rep.NextDueIn = p.throttled, p.nextDueIn
		if len(p.gated) > 0 {
			// Claim keeps last_started_at only for hosts that have a row.
			if _, err := tx.Exec(ctx, politeHostRowsSQL, p.gated); err != nil {
				return err
			}
		}
		cands := p.cands
		targets := Distribute(assign, nodes, len(cands))
		if len(targets) == 0 {
			return nil
		}
		candIDs := make([]int64, len(targets))
		for i := range targets {
			candIDs[i] = cands[i].id
		}
		freeNow, locked, err := lockTargets(ctx, tx, targets, candIDs)
		if err != nil {
			return err
		}
		// A job taken meanwhile, or a target that changed before its lock
		// (gone, draining, fewer free slots), leaves jobs pending for the
		// next round; no node ever gets more than it has free.
		var ids []int64
		var to []string
		for i, node := range targets {
			if !locked[cands[i].id] || freeNow[node] <= 0 {
				continue
			}
			freeNow[node]--
			ids = append(ids, cands[i].id)
			to = append(to, node)
			rep.Assigned[node] = append(rep.Assigned[node], cands[i].id)
			rep.CreatedAt = append(rep.CreatedAt, cands[i].created)
		}
		if len(ids) == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, politeUpdateSQL, ids, to, q.now(), NodeChannelPrefix, ChannelAssigned, assignedPerNotify)
		return err
	})
	if err != nil {
		return AssignReport{Assigned: map[string][]int64{}}, fmt.Errorf("assign (politeness-aware): %w", err)
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// lockTargets locks the distinct nodes of targets (lockTargetsSQL), reads
// their free slots after the locks (targetFreeSQL; a node no longer active
// is absent), then locks the candidate jobs still pending (politeLockSQL):
// three statements, each with its own snapshot, in one round trip.
func lockTargets(ctx context.Context, tx pgx.Tx, targets []string, candIDs []int64) (map[string]int, map[int64]bool, error) {
	distinct := slices.Compact(slices.Sorted(slices.Values(targets)))
	free := make(map[string]int, len(distinct))
	locked := make(map[int64]bool, len(candIDs))
	b := &pgx.Batch{}
	b.Queue(lockTargetsSQL, distinct)
	b.Queue(targetFreeSQL, distinct).Query(func(rows pgx.Rows) error {
		var id string
		var n int
		_, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error {
			free[id] = n
			return nil
		})
		return err
	})
	b.Queue(politeLockSQL, candIDs).Query(func(rows pgx.Rows) error {
		var id int64
		var st State
		_, err := pgx.ForEachRow(rows, []any{&id, &st}, func() error {
			if st == StatePending {
				locked[id] = true
			}
			return nil
		})
		return err
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, err
	}
	return free, locked, nil
}
