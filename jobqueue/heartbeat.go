package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// heartbeatSQL records the load of the node's incarnation $11 (any when 0)
// and returns its state before and after. The current incarnation's
// heartbeat is proof of life: a node it finds lost or exited — declared so
// while its process lived on, e.g. through a database outage — is active
// again (its jobs were taken back; it simply gets new ones).
var heartbeatSQL = `
WITH prev AS (
    SELECT id, state, ` + processCounterList("") + `
    FROM nodes WHERE id = $1 AND ($11::bigint = 0 OR incarnation = $11::bigint) FOR NO KEY UPDATE
), counted AS (` + foldProcessCountersSQL(heartbeatCounterParams) + `
), upd AS (
    UPDATE nodes n SET cpu_percent = $2, mem_used_bytes = $3, mem_total_bytes = $4, chrome_pss_bytes = $5,
        busy_sessions = $6, jobs_since_chrome_start = $7, jobs_since_process_start = $8, chrome_restarts = $9,
        chrome_pss_min_bytes = least(n.chrome_pss_min_bytes, $15::bigint),
        chrome_pss_max_bytes = greatest(n.chrome_pss_max_bytes, $16::bigint),
        ` + keepProcessCountersSQL(heartbeatCounterParams) + `,
        heartbeat_at = coalesce($10::timestamptz, now()),
        state = CASE WHEN $11::bigint <> 0 AND p.state IN ('lost', 'exited') THEN 'active' ELSE p.state END,
        state_changed_at = CASE WHEN $11::bigint <> 0 AND p.state IN ('lost', 'exited')
                                THEN coalesce($10::timestamptz, now()) ELSE n.state_changed_at END
    FROM prev p
    WHERE n.id = p.id
    RETURNING n.state
)
SELECT p.state, u.state FROM prev p, upd u`

// heartbeatCounterParams are heartbeatSQL's placeholders of the process's
// counters, in the order of processCounterCols.
var heartbeatCounterParams = []string{"$12", "$13", "$14", "$17", "$18"}

// processCounterCols are the lifetime counters a node's process counts
// itself and reports as totals since its start (NodeLoad's ChromeRecycles
// to ContextsReplaced), in that order. The node row keeps, under the same
// names, the totals of its current process already added to node_counters,
// so that a report adds only the growth since the previous one: a
// heartbeat's, and last the exit mark's (Incarnation.Exit), which carries
// what the process counted after its last heartbeat.
var processCounterCols = []string{"chrome_recycles", "chrome_memory_recycles", "chrome_crashes",
	"contexts_reused", "contexts_replaced"}

// processCounterArgs are load's process counters, in the order of
// processCounterCols.
func processCounterArgs(load NodeLoad) []any {
	return []any{load.ChromeRecycles, load.ChromeMemoryRecycles, load.ChromeCrashes,
		load.ContextsReused, load.ContextsReplaced}
}

// processCounterList is processCounterCols, each prefixed, comma-separated.
func processCounterList(prefix string) string {
	parts := make([]string, len(processCounterCols))
	for i, c := range processCounterCols {
		parts[i] = prefix + c
	}
	return strings.Join(parts, ", ")
}

// foldProcessCountersSQL is an UPDATE adding to node_counters the growth
// of the process's totals (the placeholders params, in the order of
// processCounterCols) over those of CTE prev (the node row, column id) —
// none when nothing grew.
func foldProcessCountersSQL(params []string) string {
	set := make([]string, len(processCounterCols))
	grew := make([]string, len(processCounterCols))
	for i, c := range processCounterCols {
		v := params[i] + "::bigint"
		set[i] = c + " = c." + c + " + greatest(" + v + " - p." + c + ", 0)"
		grew[i] = v + " > p." + c
	}
	return `
    -- What the process counted since its last report joins the lifetime.
    UPDATE node_counters c SET
        ` + strings.Join(set, ",\n        ") + `
    FROM prev p
    WHERE c.node_id = p.id
      AND (` + strings.Join(grew, " OR ") + `)`
}

// keepProcessCountersSQL is the SET list that records in the node row the
// process's totals (params, as in foldProcessCountersSQL) just folded in.
func keepProcessCountersSQL(params []string) string {
	set := make([]string, len(processCounterCols))
	for i, c := range processCounterCols {
		set[i] = c + " = greatest(p." + c + ", " + params[i] + "::bigint)"
	}
	return strings.Join(set, ",\n        ")
}

// heartbeatLockSQL locks the row of the node's incarnation $2 (any when 0)
// first, so that the renewal of its jobs comes after it as in every
// statement that changes a node and its jobs. FOR NO KEY UPDATE, the mode of
// the row's own UPDATE: it still excludes every other writer of the row, but
// not an assignment round's FOR KEY SHARE (see lockTargetsSQL).
const heartbeatLockSQL = `SELECT 1 FROM nodes WHERE id = $1 AND ($2::bigint = 0 OR incarnation = $2::bigint) FOR NO KEY UPDATE`

// heartbeat sends the heartbeat of incarnation inc (0: any) and renews the
// leases of live — the jobs the node still renders or reports — or, with a
// nil live, of every job it holds. A job the node holds in the queue but
// gave up on (its outcome could not be recorded) is left to its lease, so
// the producer takes it back instead of the node holding its slot for ever.
func (q *Queue) heartbeat(ctx context.Context, nodeID string, inc int64, load NodeLoad, live []int64) (NodeState, []int64, error) {
	var before, st NodeState
	pssMin, pssMax := load.pssRange()
	var ids any
	if live != nil {
		ids = live
	}
	var renewed map[int64]bool
	// One implicit transaction, its locks taken in the order every other
	// statement takes them: the node row, then its jobs (a completion in
	// flight may hold some: the renewal waits for it), then the node's
	// lifetime counters, which a completion bumps after locking its jobs.
	// Bumping the counters before renewing deadlocked against completions
	// whenever a heartbeat carried a Chrome recycle.
	err := q.sendBatch(ctx, "heartbeat", func(b *pgx.Batch) {
		b.Queue(noJITSQL)
		b.Queue(heartbeatLockSQL, nodeID, inc)
		renew := b.Queue(renewSQL, nodeID, q.now(), q.cfg.Lease.Seconds(), inc, ids)
		if live != nil {
			// Which of live were renewed: the others are gone.
			renewed = make(map[int64]bool, len(live))
			renew.Query(func(rows pgx.Rows) error {
				var id int64
				_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
					renewed[id] = true
					return nil
				})
				return err
			})
		}
		b.Queue(heartbeatSQL, nodeID, load.CPUPercent, load.MemUsedBytes, load.MemTotalBytes, load.ChromePSSBytes,
			load.BusySessions, load.JobsSinceChromeStart, load.JobsSinceProcessStart, load.ChromeRestarts, q.now(), inc,
			load.ChromeRecycles, load.ChromeMemoryRecycles, load.ChromeCrashes, pssMin, pssMax,
			load.ContextsReused, load.ContextsReplaced).
			QueryRow(func(row pgx.Row) error { return row.Scan(&before, &st) })
	})
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			if ferr := q.fenceErr(ctx, nodeID, inc); ferr != nil {
				return "", nil, fmt.Errorf("heartbeat: %w", ferr)
			}
			return "", nil, fmt.Errorf("heartbeat of node %q: %w", nodeID, ErrNotFound)
		}
		return "", nil, fmt.Errorf("heartbeat of node %q: %w", nodeID, err)
	}
	var gone []int64
	for _, id := range live {
		if !renewed[id] {
			gone = append(gone, id)
		}
	}
	if before != st {
		q.log.Warn("node was "+string(before)+" while its process lived on; its heartbeat made it active again",
			zap.String("node", nodeID), zap.Int64("incarnation", inc))
		if _, err := q.pool.Exec(ctx, "SELECT pg_notify($1, $2)", ChannelProducer, PayloadSlots); err != nil {
			return st, gone, fmt.Errorf("heartbeat of node %q: notify: %w", nodeID, err)
		}
	}
	return st, gone, nil
}

// fenceErr explains why a statement of incarnation inc of a node matched
// nothing: a *FencedError when the node is gone or at another incarnation,
// nil when inc is 0 or still current (the cause lies elsewhere).
func (q *Queue) fenceErr(ctx context.Context, nodeID string, inc int64) error {
	if inc == 0 {
		return nil
	}
	var cur int64
	err := q.pool.QueryRow(ctx, "SELECT incarnation FROM nodes WHERE id = $1", nodeID).Scan(&cur)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return &FencedError{NodeID: nodeID, Incarnation: inc}
	case err != nil:
		return fmt.Errorf("node %q: read incarnation: %w", nodeID, err)
	case cur != inc:
		return &FencedError{NodeID: nodeID, Incarnation: inc, Current: cur}
	}
	return nil
}
