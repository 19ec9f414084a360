package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/internal/queuesim"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// The lifecycle run's fleet, as in jobqueue's BenchmarkLifecycle.
const (
	lifecycleNodes    = 16
	lifecycleCapacity = 6
)

// lifecycle runs total jobs through their whole life with the driver of
// jobqueue's BenchmarkLifecycle (listener=shared) and returns jobs/s from
// the first enqueue to the last completion.
func lifecycle(ctx context.Context, pool *pgxpool.Pool, q *jobqueue.Queue, nodes []string, total int) (float64, error) {
	elapsed, err := queuesim.Run(ctx, pool, q, queuesim.Config{
		Nodes: nodes, Capacity: lifecycleCapacity, Jobs: total, SharedListener: true})
	if err != nil {
		return 0, err
	}
	return float64(total) / elapsed.Seconds(), nil
}
