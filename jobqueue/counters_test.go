package jobqueue

import (
	"context"
	"testing"
	"time"
)

// Lifetime counters go up across process restarts, by restart reason, and
// survive both a retention purge of the jobs and the deletion of the node.
func TestLifetimeCounters(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now, BackoffBase: time.Millisecond})
	ctx := context.Background()
	register := func(replaces int64) *Incarnation {
		t.Helper()
		n, _, err := q.Register(ctx, NodeInfo{ID: "n1", Capacity: 4, Replaces: replaces})
		if err != nil {
			t.Fatal(err)
		}
		return q.Incarnation(n)
	}
	work := func(in *Incarnation, complete, fail int) {
		t.Helper()
		mustEnqueue(t, q, pageSpecs(complete+fail, "c.test")...)
		if _, err := q.Assign(ctx, "n1", complete+fail); err != nil {
			t.Fatal(err)
		}
		jobs, err := in.Claim(ctx, complete+fail)
		if err != nil || len(jobs) != complete+fail {
			t.Fatalf("claim = %d, %v", len(jobs), err)
		}
		var cs []Completion
		for _, j := range jobs[:complete] {
			cs = append(cs, in.Completion(j.ID, Result{Status: 200}))
		}
		if _, err := q.CompleteMany(ctx, cs); err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs[complete:] {
			if _, err := in.Fail(ctx, j.ID, "boom", "x", false); err != nil {
				t.Fatal(err)
			}
		}
	}
	beat := func(in *Incarnation, recycles, memory, crashes int64, contexts ...int64) {
		t.Helper()
		l := NodeLoad{ChromeRecycles: recycles, ChromeMemoryRecycles: memory, ChromeCrashes: crashes}
		if len(contexts) == 2 {
			l.ContextsReused, l.ContextsReplaced = contexts[0], contexts[1]
		}
		if _, err := in.Heartbeat(ctx, l); err != nil {
			t.Fatal(err)
		}
	}

	a := register(0)
	work(a, 3, 1)
	beat(a, 1, 0, 0, 10, 1)
	beat(a, 2, 1, 0, 25, 1) // counts of the process so far: only the growth is added
	beat(a, 2, 1, 0, 25, 2)
	if _, err := a.SetState(ctx, NodeExited, ExitRecycle); err != nil {
		t.Fatal(err)
	}
	b := register(0)       // after exit 75
	beat(b, 1, 0, 1, 5, 0) // the new process counts from zero again
	work(b, 2, 0)
	c := register(b.N) // b was killed: it never marked itself exited
	if _, err := c.SetState(ctx, NodeExited, ExitStop); err != nil {
		t.Fatal(err)
	}
	register(0)

	want := Counters{JobsCompleted: 5, JobsFailed: 1, ChromeRecycles: 3, ChromeMemoryRecycles: 1, ChromeCrashes: 1,
		RestartsRecycle: 1, RestartsCrash: 1, RestartsStop: 1, ContextsReused: 30, ContextsReplaced: 2}
	n, err := q.GetNode(ctx, "n1")
	if err != nil || n.Lifetime != want {
		t.Fatalf("node lifetime = %+v, %v; want %+v", n.Lifetime, err, want)
	}
	if st, err := q.Stats(ctx); err != nil || st.Lifetime != want {
		t.Fatalf("farm counters = %+v, %v; want %+v", st.Lifetime, err, want)
	}

	// Retention deletes the finished jobs; the node exits and is deleted:
	// the farm's counters stay.
	if _, err := q.Pool().Exec(ctx, "DELETE FROM jobs"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetNodeState(ctx, "n1", NodeExited); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if deleted, err := q.DeleteGoneNodes(ctx, clock.Now()); err != nil || deleted != 1 {
		t.Fatalf("delete gone nodes = %d, %v", deleted, err)
	}
	if st, err := q.Stats(ctx); err != nil || st.Lifetime != want {
		t.Fatalf("farm counters after purge and node deletion = %+v, %v; want %+v", st.Lifetime, err, want)
	}
}
