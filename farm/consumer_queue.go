package farm

import (
	"context"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// consumerQueue is what a Consumer needs of the job queue, and all of it:
// the node registers, gets its incarnation's handle, learns the result
// limits, records outcomes, and (unless poll-only) is woken by its NOTIFY
// channel. pgQueue is it over PostgreSQL; the unit tests put a fake behind
// it to test the consumer's own logic without a database.
type consumerQueue interface {
	Register(ctx context.Context, info jobqueue.NodeInfo) (jobqueue.Node, jobqueue.Reclaimed, error)
	Incarnation(node jobqueue.Node) nodeIncarnation
	ResultLimits() jobqueue.ResultLimits
	CompleteMany(ctx context.Context, items []jobqueue.Completion) ([]jobqueue.CompleteOutcome, error)
	Wakeups(nodeID string, log *zap.Logger) wakeSource
}

// nodeIncarnation is what the node sends as its current registration: every
// call is refused with a *jobqueue.FencedError once another process
// registered the id. *jobqueue.Incarnation is it.
type nodeIncarnation interface {
	Claim(ctx context.Context, n int) ([]jobqueue.Job, error)
	Unclaim(ctx context.Context, keep []int64) ([]int64, error)
	Fail(ctx context.Context, jobID int64, errText, class string, retriable bool) (jobqueue.State, error)
	FailKeeping(ctx context.Context, jobID int64, errText, class string, retriable bool, answer jobqueue.Result) (jobqueue.State, error)
	GiveBack(ctx context.Context, jobID int64, errText, class string) (jobqueue.State, error)
	Completion(jobID int64, res jobqueue.Result) jobqueue.Completion
	Release(ctx context.Context) (int64, error)
	SetState(ctx context.Context, st jobqueue.NodeState, reason string) (jobqueue.Reclaimed, error)
	Exit(ctx context.Context, reason string, final jobqueue.NodeLoad) (jobqueue.Reclaimed, error)
	HeartbeatLive(ctx context.Context, load jobqueue.NodeLoad, live []int64) (st jobqueue.NodeState, gone []int64, err error)
}

// wakeSource delivers the node's notifications: Ready closes once they are
// being received, C carries them, Run receives until ctx ends.
// *jobqueue.Listener (LISTEN) and *wake.Client (a producer's long-poll)
// are it.
type wakeSource interface {
	Ready() <-chan struct{}
	C() <-chan jobqueue.Notification
	Run(ctx context.Context) error
}

// pgQueue is the consumerQueue of a *jobqueue.Queue; its wakeups LISTEN on
// a connection of the queue's pool.
type pgQueue struct{ *jobqueue.Queue }

func (q pgQueue) Incarnation(node jobqueue.Node) nodeIncarnation { return q.Queue.Incarnation(node) }

func (q pgQueue) Wakeups(nodeID string, log *zap.Logger) wakeSource {
	return jobqueue.NewListener(q.Pool(), jobqueue.ListenerConfig{
		Channels: []string{jobqueue.NodeChannel(nodeID)},
		Logger:   log,
	})
}

var (
	_ consumerQueue   = pgQueue{}
	_ nodeIncarnation = (*jobqueue.Incarnation)(nil)
	_ wakeSource      = (*jobqueue.Listener)(nil)
	_ wakeSource      = (*wake.Client)(nil)
)
