package farm

import (
	"context"
	"fmt"

	"github.com/browserfarm/browserfarm/farm/autoscale"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// ScaleSource reads the autoscaler's inputs from the queue: the work
// (ready pending, queued and processing — running work counts, or a busy
// fleet would look idle; jobs waiting out a retry backoff do not, since more
// nodes would not run them sooner) and the live nodes with what each holds.
// Jobs held back by per-host politeness still count: a farm-wide cap on one
// host can make the estimate high, which the Max bound limits.
func ScaleSource(q *jobqueue.Queue) autoscale.Source {
	return autoscale.SourceFunc(func(ctx context.Context) (autoscale.Load, error) {
		stats, err := q.Stats(ctx)
		if err != nil {
			return autoscale.Load{}, fmt.Errorf("scale source: %w", err)
		}
		nodes, err := q.ListNodes(ctx)
		if err != nil {
			return autoscale.Load{}, fmt.Errorf("scale source: %w", err)
		}
		load := autoscale.Load{
			Pending:    int(stats.Ready),
			Queued:     int(stats.Jobs[jobqueue.StateQueued]),
			Processing: int(stats.Jobs[jobqueue.StateProcessing]),
		}
		for _, n := range nodes {
			switch n.State {
			case jobqueue.NodeActive, jobqueue.NodeDraining:
				load.Nodes = append(load.Nodes, autoscale.Node{ID: n.ID, Busy: n.Queued + n.Processing, Capacity: n.Capacity,
					// Grows with every job the node starts (its process's
					// count, from its heartbeats) or finishes for good.
					Work: n.Lifetime.JobsCompleted + n.Lifetime.JobsFailed + n.Load.JobsSinceProcessStart})
			case jobqueue.NodeLost:
				load.Lost++
			}
		}
		return load, nil
	})
}
