package jobqueue

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestHostBudget(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)
	sec := time.Second
	tests := []struct {
		name    string
		pol     HostPolicy
		h       hostState
		want    int
		wantDue time.Time
	}{
		{"no policy: all free slots", HostPolicy{}, hostState{Active: 50}, 8, time.Time{}},
		{"concurrency room", HostPolicy{MaxConcurrent: 4}, hostState{Active: 1}, 3, time.Time{}},
		{"concurrency room above free", HostPolicy{MaxConcurrent: 40}, hostState{Active: 1}, 8, time.Time{}},
		{"at the limit", HostPolicy{MaxConcurrent: 2}, hostState{Active: 2}, 0, time.Time{}},
		{"over the limit (policy lowered)", HostPolicy{MaxConcurrent: 2}, hostState{Active: 5}, 0, time.Time{}},
		{"interval: never started", HostPolicy{MinInterval: sec}, hostState{}, 1, time.Time{}},
		{"interval: one waits unstarted", HostPolicy{MinInterval: sec}, hostState{Queued: 1, Active: 1, LastStarted: now.Add(-time.Hour)}, 0, time.Time{}},
		{"interval: too soon", HostPolicy{MinInterval: sec}, hostState{LastStarted: now.Add(-300 * time.Millisecond)}, 0, now.Add(700 * time.Millisecond)},
		{"interval: exactly due", HostPolicy{MinInterval: sec}, hostState{LastStarted: now.Add(-sec)}, 1, time.Time{}},
		{"interval and concurrency full", HostPolicy{MaxConcurrent: 2, MinInterval: sec}, hostState{Active: 2, LastStarted: now.Add(-time.Hour)}, 0, time.Time{}},
		{"interval and concurrency room", HostPolicy{MaxConcurrent: 2, MinInterval: sec}, hostState{Active: 1, LastStarted: now.Add(-time.Hour)}, 1, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, due := hostBudget(tt.pol, tt.h, now, 8)
			if got != tt.want || !due.Equal(tt.wantDue) {
				t.Errorf("hostBudget = %d, due %v; want %d, due %v", got, due, tt.want, tt.wantDue)
			}
		})
	}
}

// Within one round: every node filled up to capacity and no further, no host
// over its concurrency, a rate-limited host given one job, a throttled host's
// jobs waiting while other hosts' jobs go ahead, and priorities first.
func TestAssignPolite(t *testing.T) {
	ctx := context.Background()
	q, _ := newTestQueue(t, Config{})
	mustRegister(t, q, "n1", 6)
	mustRegister(t, q, "n2", 6)
	mustRegister(t, q, "n3", 6)
	if _, err := q.SetNodeState(ctx, "n3", NodeDraining); err != nil {
		t.Fatal(err)
	}
	var specs []Spec
	for i := 0; i < 10; i++ {
		specs = append(specs, Spec{URL: fmt.Sprintf("http://limited.example/%d", i)})
		specs = append(specs, Spec{URL: fmt.Sprintf("http://slow.example/%d", i)})
		specs = append(specs, Spec{URL: fmt.Sprintf("http://free.example/%d", i), Priority: i % 2})
	}
	mustEnqueue(t, q, specs...)
	policy := func(host string) HostPolicy {
		switch host {
		case "limited.example":
			return HostPolicy{MaxConcurrent: 2}
		case "slow.example":
			return HostPolicy{MinInterval: time.Hour}
		}
		return HostPolicy{MaxConcurrent: 100}
	}
	rep, err := q.AssignPolite(ctx, policy, 1000, AssignSpread)
	if err != nil {
		t.Fatal(err)
	}
	if rep.FreeSlots != 12 || rep.Total() != 12 {
		t.Fatalf("free %d, assigned %d; want 12 and 12 (the draining node gets nothing)", rep.FreeSlots, rep.Total())
	}
	if len(rep.Assigned["n1"]) != 6 || len(rep.Assigned["n2"]) != 6 || len(rep.Assigned["n3"]) != 0 {
		t.Fatalf("per node: %v", rep.Assigned)
	}
	byHost := map[string]int{}
	var freePriorities []int
	for _, ids := range rep.Assigned {
		for _, id := range ids {
			j := mustGet(t, q, id)
			if j.State != StateQueued {
				t.Fatalf("job %d is %s", id, j.State)
			}
			byHost[j.Host]++
			if j.Host == "free.example" {
				freePriorities = append(freePriorities, j.Priority)
			}
		}
	}
	if byHost["limited.example"] != 2 || byHost["slow.example"] != 1 || byHost["free.example"] != 9 {
		t.Fatalf("per host: %v", byHost)
	}
	ones := 0
	for _, p := range freePriorities {
		ones += p
	}
	if ones != 5 { // all five priority-1 jobs went before the priority-0 ones
		t.Errorf("free.example priorities assigned %v: want all five priority-1 jobs", freePriorities)
	}

	// Nothing is free now: a second round assigns nothing.
	rep, err = q.AssignPolite(ctx, policy, 1000, AssignSpread)
	if err != nil || rep.Total() != 0 {
		t.Fatalf("second round: %+v, %v", rep, err)
	}
}

// A host's cap counts the server once, however its URLs spell the host: a
// trailing dot, upper case and the scheme's default port are one bucket.
func TestHostCapCountsEverySpellingOfOneServer(t *testing.T) {
	ctx := context.Background()
	q, _ := newTestQueue(t, Config{})
	mustRegister(t, q, "n1", 6)
	mustEnqueue(t, q, Spec{URL: "http://shop.example.com/a"}, Spec{URL: "http://shop.example.com./b"},
		Spec{URL: "http://SHOP.example.com:80/c"})
	rep, err := q.AssignPolite(ctx, func(string) HostPolicy { return HostPolicy{MaxConcurrent: 1} }, 100, AssignSpread)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total() != 1 {
		t.Fatalf("max_concurrent 1 on one server: %d jobs assigned at once", rep.Total())
	}
}

// A round reads a few rows of jobs, not the backlog, when the statistics lag
// the queue. A producer's connection plans the round's statements once (the
// generic plans, cached); here, as on a new farm, it plans them while the
// never-analyzed table is empty, and rounds then run against a backlog of
// 3,000 jobs of one host. Rows of jobs read are counted whatever the plans:
// the pool has one connection, and its statistics are flushed on demand.
func TestRoundReadsNoBacklogOnPlansOfAnEmptyTable(t *testing.T) {
	ctx := context.Background()
	_, shared := newTestQueue(t, Config{})
	q, pool := singleConnQueue(t, shared, Config{})
	mustRegister(t, q, "n1", 6)
	mustRegister(t, q, "n2", 6)
	round := func() int {
		t.Helper()
		rep, err := q.AssignPolite(ctx, func(string) HostPolicy { return HostPolicy{} }, 1000, AssignSpread)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Total()
	}
	if n := round(); n != 0 { // planned on the empty table
		t.Fatalf("assigned %d jobs of none", n)
	}
	mustEnqueue(t, q, pageSpecs(1, "big.example")...)
	if n := round(); n != 1 { // the pick planned too
		t.Fatalf("assigned %d jobs of 1", n)
	}
	mustEnqueue(t, q, pageSpecs(3000, "big.example")...)
	before := jobsRowsRead(t, pool)
	if n := round(); n != 11 {
		t.Fatalf("assigned %d jobs, want the 11 free slots filled", n)
	}
	if read := jobsRowsRead(t, pool) - before; read > 300 {
		t.Errorf("a round that assigned 11 jobs read %d rows of jobs (3,001 jobs pending)", read)
	}
}
