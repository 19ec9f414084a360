package jobqueue

import "context"

// Incarnation is one registration of a node: the process that registered
// the id speaks to the queue through it. Everything it sends is refused with
// a *FencedError (errors.Is ErrFenced) once a newer incarnation registered
// the same id, so a process that was paused, partitioned or presumed dead
// cannot touch what the id's new process holds; it must stop.
type Incarnation struct {
	q      *Queue
	NodeID string
	N      int64
}

// Incarnation returns the handle of node's current registration, as
// Register returned it.
func (q *Queue) Incarnation(node Node) *Incarnation {
	return &Incarnation{q: q, NodeID: node.ID, N: node.Incarnation}
}

// Heartbeat records the node's load and liveness and renews the leases of
// its processing jobs, in one round trip, and returns the node's state. A
// node found lost or exited is made active again: its current incarnation
// is alive.
func (in *Incarnation) Heartbeat(ctx context.Context, load NodeLoad) (NodeState, error) {
	st, _, err := in.q.heartbeat(ctx, in.NodeID, in.N, load, nil)
	return st, err
}

// HeartbeatLive is Heartbeat renewing the leases of live only: the jobs the
// node still renders or reports. A job it gave up on (its outcome could not
// be recorded) is left to its lease, so the producer takes it back instead
// of the node holding its slot for ever. It also returns gone: the jobs of
// live no longer processing on the node (canceled, or taken back while the
// node was declared lost), whose renders the node should stop — a job
// finished meanwhile by the node itself is among them too.
func (in *Incarnation) HeartbeatLive(ctx context.Context, load NodeLoad, live []int64) (st NodeState, gone []int64, err error) {
	return in.q.heartbeat(ctx, in.NodeID, in.N, load, live)
}

// Claim starts up to n of the jobs queued on the node (Queue.Claim).
func (in *Incarnation) Claim(ctx context.Context, n int) ([]Job, error) {
	return in.q.claim(ctx, in.NodeID, in.N, n)
}

// Unclaim puts the jobs processing on the node but not in keep back in
// its queue, their attempt given back, and returns their ids. A Claim whose
// answer was lost (the connection dropped after it committed) leaves the
// node holding jobs it never started, which would run out their lease and
// be charged an attempt they never had: before it claims again, the node
// calls Unclaim with every job it has started and not yet recorded, and
// claims those jobs anew.
func (in *Incarnation) Unclaim(ctx context.Context, keep []int64) ([]int64, error) {
	return in.q.unclaim(ctx, in.NodeID, in.N, keep)
}

// Fail records a failed attempt of a job processing on the node. While
// attempts remain and the error is retriable the job goes back to pending
// after an exponential backoff with jitter; otherwise it is failed. The error
// text and class are kept either way. It returns the job's new state.
// A job no longer processing on this node is left alone: a *FinishedError
// (ErrAlreadyFinished) when it is final, ErrNotHeld when it was taken back.
func (in *Incarnation) Fail(ctx context.Context, jobID int64, errText, class string, retriable bool) (State, error) {
	return in.q.fail(ctx, jobID, in.NodeID, in.N, errText, class, retriable, false, nil)
}

// FailKeeping is Fail for an attempt whose page answered (an HTTP error
// status, say): if the job fails for good, what the page answered — its
// final URL, status, title, console errors and timings, not its data, HTML
// or screenshot — becomes the job's result in the same statement, so that a
// failed job still says what the site answered. A later completion (after
// Retry) replaces it.
func (in *Incarnation) FailKeeping(ctx context.Context, jobID int64, errText, class string, retriable bool, answer Result) (State, error) {
	return in.q.fail(ctx, jobID, in.NodeID, in.N, errText, class, retriable, false, &answer)
}

// GiveBack ends the attempt of a job processing on the node through no
// fault of the job (the node stopped before it started it, or could not
// store its result): the job goes back to pending after the usual backoff
// with its attempt given back, whatever its count, and the error text and
// class are kept. Whether a cause is the node's is the caller's rule; one
// that could be the job's must go through Fail, or the job could run for
// ever. Refusals as Fail.
func (in *Incarnation) GiveBack(ctx context.Context, jobID int64, errText, class string) (State, error) {
	return in.q.fail(ctx, jobID, in.NodeID, in.N, errText, class, true, true, nil)
}

// Completion is the Completion of a job this incarnation rendered.
func (in *Incarnation) Completion(jobID int64, res Result) Completion {
	return Completion{JobID: jobID, NodeID: in.NodeID, Incarnation: in.N, Result: res}
}

// Release hands the node's queued (unstarted) jobs back to pending without
// charging an attempt — what a draining node does — and returns how many.
func (in *Incarnation) Release(ctx context.Context) (int64, error) {
	return in.q.release(ctx, in.NodeID, in.N)
}

// SetState moves the node to draining, active or exited
// (Queue.SetNodeState); reason is recorded with an exit (ExitRecycle, …).
func (in *Incarnation) SetState(ctx context.Context, st NodeState, reason string) (Reclaimed, error) {
	return in.q.setNodeState(ctx, in.NodeID, in.N, st, reason)
}

// Exit is SetState(ctx, NodeExited, reason) that also adds to the node's
// lifetime counters what its process counted after its last heartbeat:
// final holds the process's totals since it started, as a heartbeat carries
// them (ChromeRecycles, ChromeMemoryRecycles, ChromeCrashes, ContextsReused,
// ContextsReplaced; its other fields are ignored), and their growth since
// the last heartbeat is added in the exit's own transaction. Jobs and
// process restarts need nothing of the kind: the statements that finish a
// job or register the next process count them. A fenced incarnation changes
// nothing and gets a *FencedError.
func (in *Incarnation) Exit(ctx context.Context, reason string, final NodeLoad) (Reclaimed, error) {
	return in.q.exit(ctx, in.NodeID, in.N, reason, &final)
}

// Why a node's process exited, as its exit mark records it: the next
// registration of the id counts its process restart by this reason (and as
// a crash when the previous incarnation never marked itself exited).
const (
	ExitRecycle = "recycle" // exit-after-jobs: exit code 75, restart me
	ExitStop    = "stop"    // asked to stop (SIGTERM, Ctrl-C)
	ExitFatal   = "fatal"   // the node could not go on (its Chrome supervisor failed)
)
