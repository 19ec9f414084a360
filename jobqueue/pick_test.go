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

// The window's pick, whenever it vouches for it, is the host scan's: the
// same jobs in the same order, over backlogs that mix priorities, jobs not
// yet due, hosts at their concurrency limit or held back by their interval,
// and hosts whose jobs come in runs; and behind a head of jobs the windows
// cannot fill a round from, which the host scan must.
func TestPickWindowIsTheHostScansPick(t *testing.T) {
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

			// rounds compares the two ways for rounds of several sizes, and
			// counts the rounds the windows vouched for and those they
			// left to the host scan.
			rounds := func() (vouched, fellBack int) {
				for _, free := range []int{1, 3, 6, 20, 60, 250, 1000} {
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
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
							t.Errorf("free %d: the windows picked %v, the host scan %v", free, candIDs(w.cands), candIDs(all.cands))
						}
						// Each statement reads the clock of its own.
						if d := w.nextDueIn - all.nextDueIn; w.nextDueIn != 0 && (d < -time.Second || d > time.Second) {
							t.Errorf("free %d: the windows' next due %v, the host scan's %v", free, w.nextDueIn, all.nextDueIn)
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				return vouched, fellBack
			}
			// The small rounds read fewer rows than the backlog holds: the
			// windows vouch for them by filling them.
			if vouched, _ := rounds(); vouched < 4 {
				t.Errorf("the windows vouched for %d rounds of 7, want the 4 smallest at least", vouched)
			}
			// A head they cannot fill a round from: a run of one host at
			// its limit, ahead of everything else.
			mustEnqueue(t, q, pageSpecs(1200, host(1))...)
			if _, err := pool.Exec(ctx, `UPDATE jobs SET priority = 3 WHERE host = $1 AND state = 'pending'`, host(1)); err != nil {
				t.Fatal(err)
			}
			if _, fellBack := rounds(); fellBack == 0 {
				t.Error("the windows vouched for every round behind a throttled head")
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
