package farm

import "time"

// The connection budget. A fleet of a thousand nodes on one PostgreSQL
// server is only possible if each node holds few connections, and behind
// PgBouncer in transaction mode if it holds no session state at all.
//
// A consumer holds at most ConsumerConnBudget connections in steady state:
//   - with LISTEN (the default): the listener's own connection plus a pool
//     of one that the claim loop, the completer, failures and heartbeats
//     share (each is one short statement or implicit transaction, so they
//     queue for microseconds to milliseconds, not for a render);
//   - without LISTEN (PollOnly, or woken over HTTP through WakeURL): a pool
//     of two, so a heartbeat never waits behind a completion; with
//     PollOnly every statement is self-contained and the pool may sit
//     behind PgBouncer's transaction pooling.
//
// A producer holds its pool (at most 16 connections in farm producer, 24 in
// farm up) plus one connection for the leader election's session advisory
// lock and, unless poll-only, one LISTEN connection:
//
//	producer connections = pool + 1 (election) + 1 (LISTEN, not with --poll-only)
//
// The election's session lock cannot pass through transaction pooling: a
// producer connects to PostgreSQL directly (or through a session pool),
// which costs a fixed number of connections however large the fleet.
const ConsumerConnBudget = 2

// ProducerConnBudget is the most connections a producer with a pool of
// pool holds: the pool, the election's session, and its LISTEN connection
// unless pollOnly (the formula above).
func ProducerConnBudget(pool int32, pollOnly bool) int {
	n := int(pool) + 1
	if !pollOnly {
		n++
	}
	return n
}

// ConsumerPoolSize is the pool size that keeps a consumer within
// ConsumerConnBudget: listen is whether the node LISTENs (neither PollOnly
// nor WakeURL).
func ConsumerPoolSize(listen bool) int32 {
	if listen {
		return ConsumerConnBudget - 1 // the listener takes its own
	}
	return ConsumerConnBudget
}

// DefaultPollOnlyInterval is how often a poll-only node looks for assigned
// jobs, and a poll-only producer for new work and freed slots: what LISTEN
// saves in latency (half of it on average, per hop), bought with one
// indexed read per node per interval.
const DefaultPollOnlyInterval = 250 * time.Millisecond
