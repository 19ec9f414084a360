package jobqueue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The walk's pick, whenever it vouches for it, is the host scan's: the
// same jobs in the same order, over backlogs that mix priorities, jobs not
// yet due, hosts at their concurrency limit or held back by their interval,
// and hosts whose jobs come in runs; and behind a head of jobs no round can
// be filled from (a throttled host's run, retries not yet due), which the
// walk reads past when allowed and leaves to the host scan when not.
func TestPickWalkIsTheHostScansPick(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		seed uint64
		run  int // jobs of one host in a row
	}{
		{"interleaved", 1, 1},
		{"runs of 5", 2, 5},
		{"runs of 40", 3, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, pool := newTestQueue(t, Config{})
			rng := rand.New(rand.NewPCG(tc.seed, 7))
			const hosts = 30
			host := func(h int) string { return fmt.Sprintf("h%02d.test", h) }
			policies := map[string]HostPolicy{}
			for h := range hosts {
				switch h % 5 {
				case 1:
					policies[host(h)] = HostPolicy{MaxConcurrent: 1 + h%3}
				case 2:
					policies[host(h)] = HostPolicy{MinInterval: time.Hour}
				case 3:
					policies[host(h)] = HostPolicy{MaxConcurrent: 2, MinInterval: time.Hour}
				}
			}
			policy := func(h string) HostPolicy { return policies[h] }

			// Jobs of some hosts in flight on another node (half of them
			// started, which stamps the start of a host with a row).
			if _, err := pool.Exec(ctx, `INSERT INTO hosts (host) VALUES ($1), ($2)`, host(2), host(8)); err != nil {
				t.Fatal(err)
			}
			var busy []Spec
			for _, h := range []int{1, 2, 6, 8, 11, 13} {
				busy = append(busy, Spec{URL: fmt.Sprintf("http://%s/busy", host(h))})
			}
			mustEnqueue(t, q, busy...)
			mustRegister(t, q, "busy", len(busy))
			if rep, err := q.AssignPolite(ctx, func(string) HostPolicy { return HostPolicy{} }, 100, AssignSpread); err != nil || rep.Total() != len(busy) {
				t.Fatalf("busy node: %d assigned, %v", rep.Total(), err)
			}
			if _, err := q.Claim(ctx, "busy", 3); err != nil {
				t.Fatal(err)
			}

			var specs []Spec
			for len(specs) < 600 {
				h := rng.IntN(hosts)
				for i := 0; i < tc.run && len(specs) < 600; i++ {
					specs = append(specs, Spec{URL: fmt.Sprintf("http://%s/%d", host(h), len(specs)), Priority: rng.IntN(3)})
				}
			}
			ids := mustEnqueue(t, q, specs...)
			var later []int64
			for _, id := range ids {
				if rng.IntN(10) == 0 {
					later = append(later, id)
				}
			}
			if _, err := pool.Exec(ctx, `UPDATE jobs SET run_after = now() + interval '1 hour' WHERE id = ANY($1)`, later); err != nil {
				t.Fatal(err)
			}

			// rounds compares the two ways for rounds of several sizes, the
			// walk allowed what the last host scan's count of hosts allows
			// (scanned, as Queue.hostsScanned holds it), and counts the
			// rounds the walk vouched for and those it left to the host
			// scan.
			rounds := func(scanned int64) (vouched, fellBack int) {
				for _, free := range []int{1, 3, 6, 20, 60, 250, 1000} {
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						q.hostsScanned.Store(scanned)
						w, ok, err := q.pickFromHead(ctx, tx, policy, free)
						if err != nil {
							return err
						}
						all, err := q.pickByHost(ctx, tx, policy, free)
						if err != nil {
							return err
						}
						if !ok {
							fellBack++
							return nil
						}
						vouched++
						if !slices.Equal(w.cands, all.cands) {
							t.Errorf("free %d: the walk picked %v, the host scan %v", free, candIDs(w.cands), candIDs(all.cands))
						}
						// Each statement reads the clock of its own.
						if d := w.nextDueIn - all.nextDueIn; w.nextDueIn != 0 && (d < -time.Second || d > time.Second) {
							t.Errorf("free %d: the walk's next due %v, the host scan's %v", free, w.nextDueIn, all.nextDueIn)
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				return vouched, fellBack
			}
			const noScanYet, unbounded = 0, 1 << 40
			// The small rounds read fewer rows than the backlog holds: the
			// walk vouches for them by filling them.
			if vouched, _ := rounds(noScanYet); vouched < 4 {
				t.Errorf("the walk vouched for %d rounds of 7, want the 4 smallest at least", vouched)
			}
			// A head no round can be filled from: a run of one host at
			// its limit, and ahead of it retries not yet due.
			mustEnqueue(t, q, pageSpecs(1200, host(1))...)
			if _, err := pool.Exec(ctx, `UPDATE jobs SET priority = 3 WHERE host = $1 AND state = 'pending'`, host(1)); err != nil {
				t.Fatal(err)
			}
			retries := mustEnqueue(t, q, pageSpecs(900, host(4))...)
			if _, err := pool.Exec(ctx, `UPDATE jobs SET priority = 4, run_after = now() + interval '1 hour' WHERE id = ANY($1)`, retries); err != nil {
				t.Fatal(err)
			}
			// Before any host scan, the walk reads its first two chunks
			// and leaves the rest to the scan.
			if _, fellBack := rounds(noScanYet); fellBack == 0 {
				t.Error("the walk vouched for every round behind the held-back head with no allowance")
			}
			// With hosts enough to allow it, the walk reads past the head.
			if vouched, _ := rounds(unbounded); vouched != 7 {
				t.Errorf("the walk vouched for %d rounds of 7 behind the held-back head, allowed to read it all", vouched)
			}
		})
	}
}

func candIDs(cs []candidate) []int64 {
	ids := make([]int64, len(cs))
	for i, c := range cs {
		ids[i] = c.id
	}
	return ids
}

// TestPickWalkReadsNoHistory: a walk past a held-back head reads the
// pending jobs through their index, not the finished ones whose ids lie
// between them, whatever the statistics say: here they were taken when
// every job was pending, and the history came after, as it does between
// two ANALYZEs of a busy queue. The rest of a priority is read from the
// walk's position on; a plan that read it in id order from the primary
// key, which such statistics make look as cheap, would read the history.
func TestPickWalkReadsNoHistory(t *testing.T) {
	ctx := context.Background()
	_, shared := newTestQueue(t, Config{})
	q, pool := singleConnQueue(t, shared, Config{})
	if _, err := pool.Exec(ctx, `ALTER TABLE jobs SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	// The head: a host held to one job at a time, which has one in flight.
	const head, history = 300, 30000
	mustEnqueue(t, q, pageSpecs(head, "big.test")...)
	mustRegister(t, q, "busy", 1)
	policy := func(h string) HostPolicy {
		if h == "big.test" {
			return HostPolicy{MaxConcurrent: 1}
		}
		return HostPolicy{}
	}
	if rep, err := q.AssignPolite(ctx, policy, 1, AssignSpread); err != nil || rep.Total() != 1 {
		t.Fatalf("busy node: %d assigned, %v", rep.Total(), err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	done := mustEnqueue(t, q, pageSpecs(history, "done.test")...)
	if _, err := pool.Exec(ctx, `UPDATE jobs SET state = 'completed', finished_at = now() WHERE id = ANY($1)`, done); err != nil {
		t.Fatal(err)
	}
	var tail []Spec
	for i := range 20 {
		tail = append(tail, Spec{URL: fmt.Sprintf("http://t%d.test/", i)})
	}
	want := mustEnqueue(t, q, tail...)[:6]
	mustRegister(t, q, "n1", 6)

	before := jobsRowsRead(t, pool)
	rep, err := q.AssignPolite(ctx, policy, 6, AssignSpread)
	if err != nil {
		t.Fatal(err)
	}
	read := jobsRowsRead(t, pool) - before
	if got := rep.Assigned["n1"]; !slices.Equal(got, want) {
		t.Errorf("assigned %v, want the tail's first six %v", got, want)
	}
	if read > 3*head {
		t.Errorf("the round read %d rows of jobs behind a head of %d pending jobs, beside %d finished", read, head, history)
	}
}
