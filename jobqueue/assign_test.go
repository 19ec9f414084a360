package jobqueue

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestAssignOrderCapacityAndNodeState(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 3)
	ids := mustEnqueue(t, q,
		Spec{URL: "http://a.test/0"}, Spec{URL: "http://a.test/1", Priority: 5},
		Spec{URL: "http://a.test/2"}, Spec{URL: "http://a.test/3", Priority: 5},
		Spec{URL: "http://a.test/4", Priority: -1})
	got, err := q.Assign(ctx, "n1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{ids[0], ids[1], ids[3]}; !slices.Equal(got, want) {
		t.Fatalf("assigned %v, want %v (priority 5 first, then the oldest)", got, want)
	}
	for _, id := range got {
		if j := mustGet(t, q, id); j.State != StateQueued || j.NodeID != "n1" || j.QueuedAt == nil {
			t.Fatalf("assigned job %+v", j)
		}
	}
	if more, err := q.Assign(ctx, "n1", 10); err != nil || len(more) != 0 {
		t.Fatalf("a full node got %v (err %v)", more, err)
	}
	// Claiming does not free capacity; completing does.
	jobs, err := q.Claim(ctx, "n1", 1)
	if err != nil || len(jobs) != 1 || jobs[0].ID != ids[1] {
		t.Fatalf("claim = %v, %v", jobs, err)
	}
	if more, _ := q.Assign(ctx, "n1", 10); len(more) != 0 {
		t.Fatalf("node at capacity with a processing job got %v", more)
	}
	if _, err := q.Complete(ctx, jobs[0].ID, "n1", Result{Status: 200}); err != nil {
		t.Fatal(err)
	}
	if more, _ := q.Assign(ctx, "n1", 10); !slices.Equal(more, []int64{ids[2]}) {
		t.Fatalf("after a completion got %v, want [%d]", more, ids[2])
	}

	mustRegister(t, q, "n2", 6)
	if _, err := q.SetNodeState(ctx, "n2", NodeDraining); err != nil {
		t.Fatal(err)
	}
	if got, err := q.Assign(ctx, "n2", 6); err != nil || len(got) != 0 {
		t.Fatalf("a draining node got %v (err %v)", got, err)
	}
	if _, err := q.Assign(ctx, "nobody", 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Assign(unknown node) = %v, want ErrNotFound", err)
	}
	if got, err := q.Assign(ctx, "n1", 0); err != nil || got != nil {
		t.Fatalf("Assign(n=0) = %v, %v", got, err)
	}
}

func TestAssignSkipsBackoff(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now, Rand: func() float64 { return 0 }, BackoffBase: time.Minute})
	ctx := context.Background()
	mustRegister(t, q, "n1", 1)
	ids := mustEnqueue(t, q, Spec{URL: "http://a.test/retry", Priority: 10}, Spec{URL: "http://a.test/other"})
	jobs := assignClaim(t, q, "n1", 1)
	if len(jobs) != 1 || jobs[0].ID != ids[0] {
		t.Fatalf("claimed %v", jobs)
	}
	if st, err := q.Fail(ctx, ids[0], "n1", "timeout", "timeout", true); err != nil || st != StatePending {
		t.Fatalf("Fail = %v, %v", st, err)
	}
	// The higher-priority job waits out its backoff (30 s with this draw):
	// the other one goes first.
	if got, _ := q.Assign(ctx, "n1", 1); !slices.Equal(got, []int64{ids[1]}) {
		t.Fatalf("assigned %v, want the job not in backoff (%d)", got, ids[1])
	}
	jobs = assignClaim(t, q, "n1", 1)
	if _, err := q.Complete(ctx, jobs[0].ID, "n1", Result{}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(29 * time.Second)
	if got, _ := q.Assign(ctx, "n1", 1); len(got) != 0 {
		t.Fatalf("assigned %v before its run_after", got)
	}
	clock.Advance(time.Second)
	if got, _ := q.Assign(ctx, "n1", 1); !slices.Equal(got, []int64{ids[0]}) {
		t.Fatalf("assigned %v after the backoff, want [%d]", got, ids[0])
	}
}

func TestConcurrentAssignNeverExceedsCapacity(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	mustRegister(t, q, "n2", 6)
	mustEnqueue(t, q, pageSpecs(200, "c.test")...)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			var err error
			switch i % 3 {
			case 0:
				_, err = q.Assign(ctx, "n1", 6)
			case 1:
				_, err = q.Assign(ctx, "n2", 4)
			default:
				_, err = assignRound(ctx, q, 100)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range []string{"n1", "n2"} {
		if n := countRows(t, pool, "SELECT count(*) FROM jobs WHERE node_id = $1 AND state IN ('queued', 'processing')", node); n != 6 {
			t.Errorf("node %s holds %d jobs, want exactly its capacity 6", node, n)
		}
	}
}

func TestAssignRoundSpreadsAndRespectsCapacity(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "a", 2)
	mustRegister(t, q, "b", 4)
	mustRegister(t, q, "c", 3)
	mustRegister(t, q, "d", 4)
	if _, err := q.SetNodeState(ctx, "c", NodeDraining); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, pageSpecs(3, "s.test")...)
	// Short supply: three jobs go to three different nodes.
	got, err := assignRound(ctx, q, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(got["a"]) != 1 || len(got["b"]) != 1 || len(got["d"]) != 1 {
		t.Fatalf("short supply assigned %v, want one job each to a, b and d", got)
	}
	mustEnqueue(t, q, pageSpecs(20, "s.test")...)
	got, err = assignRound(ctx, q, 4)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got["a"]) + len(got["b"]) + len(got["d"]); n != 4 || len(got["c"]) != 0 {
		t.Fatalf("limit 4 assigned %v", got)
	}
	if _, err := assignRound(ctx, q, 100); err != nil {
		t.Fatal(err)
	}
	nodes, err := q.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		want := n.Capacity
		if n.ID == "c" {
			want = 0
		}
		if n.Queued != want {
			t.Errorf("node %s holds %d queued, want %d", n.ID, n.Queued, want)
		}
	}
}
