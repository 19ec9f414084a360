package jobqueue

import "context"

// The forms below bind to no incarnation (0 passes every fence). Only tests
// use them, to act as a node without registering a process for it; the
// product goes through Incarnation and CompleteMany.

// Complete completes one job for nodeID and returns how many child jobs its
// followed links produced (see CompleteMany).
func (q *Queue) Complete(ctx context.Context, jobID int64, nodeID string, res Result) (children int, err error) {
	out, err := q.CompleteMany(ctx, []Completion{{JobID: jobID, NodeID: nodeID, Result: res}})
	if err != nil {
		return 0, err
	}
	return out[0].Children, out[0].Err
}

// Fail records a failed attempt of a job processing on nodeID (see
// Incarnation.Fail).
func (q *Queue) Fail(ctx context.Context, jobID int64, nodeID, errText, class string, retriable bool) (State, error) {
	return q.fail(ctx, jobID, nodeID, 0, errText, class, retriable, false, nil)
}

// Heartbeat sends nodeID's heartbeat (see Incarnation.Heartbeat).
func (q *Queue) Heartbeat(ctx context.Context, nodeID string, load NodeLoad) (NodeState, error) {
	st, _, err := q.heartbeat(ctx, nodeID, 0, load, nil)
	return st, err
}
