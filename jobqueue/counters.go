package jobqueue

import "strings"

// Counters are lifetime event counts, of one node id across its process
// restarts (Node.Lifetime) or of the whole farm (Stats.Lifetime). They only
// go up: they are kept in counter rows updated by the transactions that
// complete and fail jobs, take heartbeats, register nodes and mark their
// processes' exits (Incarnation.Exit), so that a
// retention purge or a process restart does not reset them, and reading
// them costs the same however long the history.
type Counters struct {
	JobsCompleted        int64 `json:"jobs_completed"`
	JobsFailed           int64 `json:"jobs_failed"` // jobs that reached failed
	ChromeRecycles       int64 `json:"chrome_recycles"`
	ChromeMemoryRecycles int64 `json:"chrome_memory_recycles"`
	ChromeCrashes        int64 `json:"chrome_crashes"`
	// Process restarts by how the previous process ended.
	RestartsRecycle int64 `json:"restarts_recycle"` // exit 75, exit-after-jobs
	RestartsStop    int64 `json:"restarts_stop"`    // stopped on request (SIGTERM)
	RestartsCrash   int64 `json:"restarts_crash"`   // killed, crashed, lost, or gave up (fatal)
	// Jobs of isolation wipe that ran in a context wiped after the
	// session's previous job, and contexts given up for a brand-new one.
	ContextsReused   int64 `json:"contexts_reused"`
	ContextsReplaced int64 `json:"contexts_replaced"`
}

// counterCols are the columns of node_counters and farm_counters, in the
// order of counterDest.
var counterCols = []string{"jobs_completed", "jobs_failed", "chrome_recycles", "chrome_memory_recycles",
	"chrome_crashes", "restarts_recycle", "restarts_stop", "restarts_crash", "contexts_reused", "contexts_replaced"}

func counterDest(c *Counters) []any {
	return []any{&c.JobsCompleted, &c.JobsFailed, &c.ChromeRecycles, &c.ChromeMemoryRecycles,
		&c.ChromeCrashes, &c.RestartsRecycle, &c.RestartsStop, &c.RestartsCrash, &c.ContextsReused, &c.ContextsReplaced}
}

// counterList is counterCols, each as expr(col), comma-separated.
func counterList(expr func(col string) string) string {
	parts := make([]string, len(counterCols))
	for i, c := range counterCols {
		parts[i] = expr(c)
	}
	return strings.Join(parts, ", ")
}

// bumpNodeCounterSQL adds to one counter column of node ids: the rows of
// the query src, which yields (node_id, n) ordered by node id (so that two
// statements bumping several nodes lock their rows in the same order).
func bumpNodeCounterSQL(col, src string) string {
	return `INSERT INTO node_counters AS c (node_id, ` + col + `) ` + src + `
    ON CONFLICT (node_id) DO UPDATE SET ` + col + ` = c.` + col + ` + EXCLUDED.` + col
}

// lifetimeCols selects a node's counters from node_counters c (LEFT JOINed).
var lifetimeCols = counterList(func(col string) string { return "coalesce(c." + col + ", 0)" })

// farmCountersSQL reads the farm's lifetime counters: those of every node id
// the queue knows plus those of node ids deleted since (DeleteGoneNodes).
var farmCountersSQL = `SELECT ` + counterList(func(col string) string {
	return "f." + col + " + coalesce((SELECT sum(" + col + ") FROM node_counters), 0)::bigint"
}) + ` FROM farm_counters f`

// foldGoneCountersSQL deletes the counters of the node ids just deleted
// (CTE gone, column id) and adds them to farm_counters.
var foldGoneCountersSQL = `
), dropped AS (
    DELETE FROM node_counters c USING gone g WHERE c.node_id = g.id RETURNING c.*
), folded AS (
    UPDATE farm_counters f SET ` + counterList(func(col string) string {
	return col + " = f." + col + " + (SELECT coalesce(sum(" + col + "), 0) FROM dropped)"
}) + `
    RETURNING 1
)`

// restartColumn is the node_counters column counting a process restart
// after a previous incarnation that ended in state with the given exit
// reason.
func restartColumn(prevState NodeState, exitReason string) string {
	switch {
	case prevState != NodeExited:
		return "restarts_crash"
	case exitReason == ExitRecycle:
		return "restarts_recycle"
	case exitReason == ExitFatal:
		return "restarts_crash"
	default:
		return "restarts_stop"
	}
}
