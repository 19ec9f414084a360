package jobqueue

import (
	"context"
	"errors"
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

// The exit mark carries the process's final counts: what it counted after
// its last heartbeat (a Chrome recycled, contexts replaced while a stop
// with no drain canceled its jobs) joins the node's and the farm's
// lifetime counters, over several processes of one id. A fenced process's
// exit changes nothing.
func TestExitCountsWhatFollowedTheLastHeartbeat(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	register := func() *Incarnation {
		t.Helper()
		n, _, err := q.Register(ctx, NodeInfo{ID: "n1", Capacity: 4})
		if err != nil {
			t.Fatal(err)
		}
		return q.Incarnation(n)
	}
	counts := func(recycles, memory, crashes, reused, replaced int64) NodeLoad {
		return NodeLoad{ChromeRecycles: recycles, ChromeMemoryRecycles: memory, ChromeCrashes: crashes,
			ContextsReused: reused, ContextsReplaced: replaced}
	}
	check := func(when string, want Counters) {
		t.Helper()
		n, err := q.GetNode(ctx, "n1")
		if err != nil || n.Lifetime != want {
			t.Fatalf("%s: node lifetime = %+v, %v; want %+v", when, n.Lifetime, err, want)
		}
		if st, err := q.Stats(ctx); err != nil || st.Lifetime != want {
			t.Fatalf("%s: farm counters = %+v, %v; want %+v", when, st.Lifetime, err, want)
		}
	}

	// A process that heartbeated, then counted more before it exited.
	a := register()
	if _, err := a.Heartbeat(ctx, counts(1, 0, 0, 3, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exit(ctx, ExitStop, counts(2, 1, 1, 4, 5)); err != nil {
		t.Fatal(err)
	}
	check("after the first process", Counters{ChromeRecycles: 2, ChromeMemoryRecycles: 1, ChromeCrashes: 1,
		ContextsReused: 4, ContextsReplaced: 5})

	// One that never heartbeated: everything it counted comes with its exit.
	b := register()
	if _, err := b.Exit(ctx, ExitRecycle, counts(0, 0, 0, 1, 3)); err != nil {
		t.Fatal(err)
	}
	want := Counters{ChromeRecycles: 2, ChromeMemoryRecycles: 1, ChromeCrashes: 1,
		ContextsReused: 5, ContextsReplaced: 8, RestartsStop: 1}
	check("after the second process", want)

	// The third process takes the id; the second one's late exit (a
	// duplicate, or a process that thought it still held the id) is fenced
	// and counts nothing.
	register()
	if _, err := b.Exit(ctx, ExitStop, counts(9, 9, 9, 9, 9)); !errors.Is(err, ErrFenced) {
		t.Fatalf("exit of a fenced incarnation = %v, want ErrFenced", err)
	}
	want.RestartsRecycle++ // the third process's registration
	check("after the fenced exit", want)
}
