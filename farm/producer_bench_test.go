package farm

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// BenchmarkAssign100Nodes measures assignment rounds alone: 100 nodes of 6
// slots, jobs over 200 hosts with the default (unlimited) politeness and
// with a per-host concurrency limit. Between rounds the nodes' jobs are
// claimed and completed with the timer stopped.
func BenchmarkAssign100Nodes(b *testing.B) {
	for _, bc := range []struct {
		name string
		pol  Politeness
	}{
		{"unlimited", Politeness{}},
		{"per-host-limit-4", Politeness{Default: HostPolicy{MaxConcurrent: 4}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			q, _ := newProducerQueue(b)
			const nodes = 100
			for i := 0; i < nodes; i++ {
				if _, _, err := q.Register(ctx, jobqueue.NodeInfo{ID: fmt.Sprintf("n%03d", i), Capacity: 6}); err != nil {
					b.Fatal(err)
				}
			}
			specs := make([]jobqueue.Spec, b.N)
			for i := range specs {
				specs[i] = jobqueue.Spec{URL: fmt.Sprintf("http://h%03d.test/%d", i%200, i)}
			}
			for i := 0; i < len(specs); i += 10000 {
				if _, _, err := q.Enqueue(ctx, specs[i:min(i+10000, len(specs))]); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			assigned, rounds := 0, 0
			for assigned < b.N {
				rep, err := q.AssignPolite(ctx, bc.pol.For, 5000, jobqueue.AssignSpread)
				if err != nil {
					b.Fatal(err)
				}
				rounds++
				assigned += rep.Total()
				if rep.Total() == 0 {
					b.Fatalf("round %d assigned nothing with %d of %d assigned", rounds, assigned, b.N)
				}
				b.StopTimer()
				var done []jobqueue.Completion
				for node := range rep.Assigned {
					jobs, err := q.Claim(ctx, node, 6)
					if err != nil {
						b.Fatal(err)
					}
					for _, j := range jobs {
						done = append(done, jobqueue.Completion{JobID: j.ID, NodeID: node, Result: jobqueue.Result{Status: 200}})
					}
				}
				if _, err := q.CompleteMany(ctx, done); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(assigned)/b.Elapsed().Seconds(), "assignments/s")
			b.ReportMetric(float64(assigned)/float64(rounds), "jobs/round")
		})
	}
}

// BenchmarkSubmitToStart measures, on an idle farm (a producer and one
// node), the time from the call to Enqueue (its insert and NOTIFY
// included) to the node's Claim returning the job: woken by NOTIFY ("listen"; the fallback tick is a full second, so a
// poll-bound path would show as ~500 ms), or polling every
// DefaultPollOnlyInterval, producer and node ("poll-only": what going
// without LISTEN costs).
func BenchmarkSubmitToStart(b *testing.B) {
	b.Run("listen", func(b *testing.B) { benchSubmitToStart(b, false) })
	b.Run("poll-only", func(b *testing.B) { benchSubmitToStart(b, true) })
}

func benchSubmitToStart(b *testing.B, pollOnly bool) {
	ctx := context.Background()
	q, pool := newProducerQueue(b)
	node := newSimNode(b, q, pool, "idle", 6, func() time.Duration { return 0 })
	node.pollOnly = pollOnly
	p := newTestProducer(b, q, pool, func(c *ProducerConfig) {
		c.Tick = time.Second
		if pollOnly {
			c.PollOnly, c.Tick = true, DefaultPollOnlyInterval
		}
	})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{}, 2)
	go func() { _ = node.run(ctx); done <- struct{}{} }()
	go func() { _ = p.Run(ctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()
	for !p.IsLeader() {
		time.Sleep(5 * time.Millisecond)
	}
	// Warm up: one job through the whole path.
	started := func(id int64) (time.Time, bool) {
		node.mu.Lock()
		defer node.mu.Unlock()
		at, ok := node.starts[id]
		return at, ok
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i <= b.N; i++ {
		t0 := time.Now()
		_, ids, err := q.Enqueue(ctx, []jobqueue.Spec{{URL: fmt.Sprintf("http://idle.test/%d", i)}})
		if err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if at, ok := started(ids[0]); ok {
				if i > 0 { // the first is the warm-up
					lat = append(lat, at.Sub(t0))
				}
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("job %d not started after 30 s", ids[0])
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
