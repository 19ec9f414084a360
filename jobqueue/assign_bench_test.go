package jobqueue

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkAssignPending is the cost of one assignment round (one op) as the
// pending backlog spreads over more hosts: a node of 6 slots is filled from
// it, and its jobs are claimed and completed with the timer stopped. The
// hosts' jobs are interleaved (a wide crawl: the best pending jobs belong
// to many hosts) or clustered (each host's jobs submitted together: the
// best pending jobs all belong to one host), with no per-host limit or
// with one that lets each host run only a few; or a host's jobs come
// first, throttled or waiting out a retry's backoff.
func BenchmarkAssignPending(b *testing.B) {
	for _, bc := range []struct {
		name      string
		hosts     int
		perHost   int
		clustered bool
		limit     int // per-host MaxConcurrent; 0: none
	}{
		{"hosts=10/clustered/limit-2", 10, 2000, true, 2},
		{"hosts=1k/interleaved/unlimited", 1000, 20, false, 0},
		{"hosts=20k/interleaved/unlimited", 20000, 2, false, 0},
		{"hosts=20k/clustered/limit-2", 20000, 3, true, 2},
		{"hosts=100k/interleaved/limit-1", 100000, 1, false, 1},
		{"hosts=100k/one-big-host-first/limit-2", 100000, 1, true, 2},
		{"hosts=100k/retries-first/limit-2", 100000, 1, true, 2},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			q, pool := newTestQueue(b, Config{})
			mustRegister(b, q, "n1", 6)
			var specs []Spec
			add := func(h, i int) {
				specs = append(specs, Spec{URL: fmt.Sprintf("http://h%d.test/%d", h, i)})
			}
			switch {
			case bc.name == "hosts=100k/one-big-host-first/limit-2", bc.name == "hosts=100k/retries-first/limit-2":
				for i := range 20000 {
					add(0, i)
				}
				for h := 1; h <= bc.hosts; h++ {
					add(h, 0)
				}
			case bc.clustered:
				for h := range bc.hosts {
					for i := range bc.perHost {
						add(h, i)
					}
				}
			default:
				for i := range bc.perHost {
					for h := range bc.hosts {
						add(h, i)
					}
				}
			}
			for i := 0; i < len(specs); i += 10000 {
				if _, _, err := q.Enqueue(ctx, specs[i:min(i+10000, len(specs))]); err != nil {
					b.Fatal(err)
				}
			}
			if bc.name == "hosts=100k/retries-first/limit-2" {
				// Host 0's jobs wait out a retry's backoff, ahead of the rest.
				if _, err := pool.Exec(ctx, `UPDATE jobs SET priority = 1, run_after = now() + interval '1 hour' WHERE host = 'h0.test'`); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := pool.Exec(ctx, "ANALYZE jobs"); err != nil {
				b.Fatal(err)
			}
			policy := func(string) HostPolicy { return HostPolicy{MaxConcurrent: bc.limit} }
			b.ResetTimer()
			for b.Loop() {
				rep, err := q.AssignPolite(ctx, policy, 5000, AssignSpread)
				if err != nil {
					b.Fatal(err)
				}
				if rep.Total() != 6 {
					b.Fatalf("assigned %d jobs, want 6", rep.Total())
				}
				b.StopTimer()
				jobs, err := q.Claim(ctx, "n1", 6)
				if err != nil {
					b.Fatal(err)
				}
				done := make([]Completion, len(jobs))
				for i, j := range jobs {
					done[i] = Completion{JobID: j.ID, NodeID: "n1", Result: Result{Status: 200}}
				}
				if _, err := q.CompleteMany(ctx, done); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
