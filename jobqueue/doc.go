// Package jobqueue is browserfarm's PostgreSQL job queue and the only place in
// the project that speaks SQL: the embedded schema migrations, the Job, Result
// and Node types, and the operations that move a job through its life —
// submitted (pending), assigned to a consumer node by the producer (queued),
// claimed under a lease (processing), and finished (completed with its result
// row, failed, or canceled) — plus node registration, heartbeats, rescue of
// jobs held by lost nodes, and the LISTEN/NOTIFY wake-ups between producer and
// nodes. Every operation takes a context and a pgxpool; nothing here keeps
// global state.
package jobqueue
