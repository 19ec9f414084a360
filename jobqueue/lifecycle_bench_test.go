package jobqueue_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/pgtest"
	"github.com/browserfarm/browserfarm/internal/procstat"
	"github.com/browserfarm/browserfarm/internal/queuesim"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// lifecycleOpJobs is the number of jobs one BenchmarkLifecycle op carries
// through their whole life, so that one -benchtime=Nx suits both benchmarks.
const lifecycleOpJobs = 1000

// BenchmarkLifecycle: enqueue → assign → claim → complete for 16 simulated
// nodes of 6 slots, driven as the farm's producer and consumers drive the
// queue (internal/queuesim, the driver the scale bench uses too); one op is
// 1,000 jobs. Sub-benchmarks differ in how nodes hear NOTIFY: one LISTEN
// connection per node (as 16 separate node processes would), or one shared
// by all the nodes of this process. A third, nodes=1x96, is one node of 96
// slots: the shape of River's default harness (one client of 96 workers,
// bench/river), so that each River figure has one of the same shape beside
// it — the farm itself never runs a node of more than a few sessions.
func BenchmarkLifecycle(b *testing.B) {
	b.Run("listener=per-node", func(b *testing.B) { benchLifecycle(b, false, 16, 6) })
	b.Run("listener=shared", func(b *testing.B) { benchLifecycle(b, true, 16, 6) })
	b.Run("nodes=1x96", func(b *testing.B) { benchLifecycle(b, false, 1, 96) })
}

func benchLifecycle(b *testing.B, sharedListener bool, nodes, capacity int) {
	ctx := context.Background()
	pool := pgtest.NewPool(b)
	if err := jobqueue.Migrate(ctx, pool); err != nil {
		b.Fatalf("migrate: %v", err)
	}
	q := jobqueue.New(pool, jobqueue.Config{})
	// CPU per job, besides jobs/s: the figure paired rounds compare best, as
	// it moves less with the machine's other work and with how the
	// statements happen to batch. The meter counts this process's tree —
	// this process and the private cluster pgtest started as its child —
	// and this process's own CPU is taken out of it for the server's share.
	// (Against FARM_TEST_DATABASE_URL the server is not a child: server-us
	// then reads 0.)
	meter := &procstat.Meter{Root: os.Getpid(), Interval: 100 * time.Millisecond}
	stopMeter := func() {} // until the run starts
	var self0 time.Duration
	cfg := queuesim.Config{Capacity: capacity, Jobs: b.N * lifecycleOpJobs, SharedListener: sharedListener, OnStart: func() {
		stopMeter = meter.Start(ctx)
		self0 = procstat.SelfCPU()
		b.ResetTimer()
	}}
	for i := range nodes {
		id := fmt.Sprintf("bench-node-%02d", i)
		if _, _, err := q.Register(ctx, jobqueue.NodeInfo{ID: id, Hostname: "bench", Capacity: capacity}); err != nil {
			b.Fatalf("register %s: %v", id, err)
		}
		cfg.Nodes = append(cfg.Nodes, id)
	}
	elapsed, err := queuesim.Run(ctx, pool, q, cfg)
	self := procstat.SelfCPU() - self0
	stopMeter()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	jobs := float64(cfg.Jobs)
	b.ReportMetric(jobs/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64(max(meter.Total()-self, 0).Microseconds())/jobs, "server-us/job")
	b.ReportMetric(float64(self.Microseconds())/jobs, "client-us/job")
}
