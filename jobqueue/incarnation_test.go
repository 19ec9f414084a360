package jobqueue

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// An old process that wakes after a new one registered its id can neither
// complete, fail, claim, release, drain, exit-mark nor heartbeat for the
// id; what the new incarnation holds is untouched.
func TestOldIncarnationIsFenced(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	oldNode, _, err := q.Register(ctx, NodeInfo{ID: "n1", Hostname: "h1", PID: 100, Capacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	old := q.Incarnation(oldNode)
	mustEnqueue(t, q, pageSpecs(6, "f.test")...)
	if _, err := q.Assign(ctx, "n1", 4); err != nil {
		t.Fatal(err)
	}
	oldJobs, err := old.Claim(ctx, 2)
	if err != nil || len(oldJobs) != 2 {
		t.Fatalf("old claim = %d jobs, %v", len(oldJobs), err)
	}

	// While the old process heartbeats, a second process cannot take the id.
	_, _, err = q.Register(ctx, NodeInfo{ID: "n1", Hostname: "h1", PID: 200, Capacity: 4})
	var inUse *NodeInUseError
	if !errors.As(err, &inUse) || !errors.Is(err, ErrNodeIDInUse) || inUse.PID != 100 || inUse.Incarnation != oldNode.Incarnation {
		t.Fatalf("second live Register = %v, want a NodeInUseError naming pid 100", err)
	}
	// The old process is paused (kill -STOP, a long GC, a partition); its
	// successor proves it dead and takes the id.
	newNode, rec, err := q.Register(ctx, NodeInfo{ID: "n1", Hostname: "h1", PID: 200, Capacity: 4, Replaces: oldNode.Incarnation})
	if err != nil {
		t.Fatal(err)
	}
	if newNode.Incarnation <= oldNode.Incarnation || rec.Retried != 2 || rec.Released != 2 {
		t.Fatalf("new registration %+v reclaimed %+v", newNode, rec)
	}
	cur := q.Incarnation(newNode)
	if _, err := q.Assign(ctx, "n1", 4); err != nil {
		t.Fatal(err)
	}
	newJobs, err := cur.Claim(ctx, 2)
	if err != nil || len(newJobs) != 2 {
		t.Fatalf("new claim = %d jobs, %v", len(newJobs), err)
	}

	// The old process wakes up.
	fenced := func(op string, err error) {
		t.Helper()
		var fe *FencedError
		if !errors.As(err, &fe) || fe.Incarnation != oldNode.Incarnation || fe.Current != newNode.Incarnation {
			t.Errorf("old incarnation's %s = %v, want a FencedError", op, err)
		}
	}
	out, err := q.CompleteMany(ctx, []Completion{old.Completion(newJobs[0].ID, Result{Status: 200})})
	if err != nil {
		t.Fatal(err)
	}
	fenced("complete", out[0].Err)
	_, err = old.Fail(ctx, newJobs[1].ID, "late", "x", false)
	fenced("fail", err)
	_, err = old.Claim(ctx, 2)
	fenced("claim", err)
	_, err = old.Release(ctx)
	fenced("release", err)
	_, err = old.Unclaim(ctx, nil)
	fenced("unclaim", err)
	_, err = old.SetState(ctx, NodeDraining, "")
	fenced("drain", err)
	_, err = old.SetState(ctx, NodeExited, ExitRecycle)
	fenced("exit mark", err)
	_, err = old.Heartbeat(ctx, NodeLoad{})
	fenced("heartbeat", err)

	n, err := q.GetNode(ctx, "n1")
	if err != nil || n.State != NodeActive || n.Incarnation != newNode.Incarnation || n.Processing != 2 || n.Queued != 2 {
		t.Fatalf("after the old incarnation's calls the node is %+v, %v", n, err)
	}
	for _, j := range newJobs {
		if got := mustGet(t, q, j.ID); got.State != StateProcessing {
			t.Errorf("job %d of the new incarnation is %s", j.ID, got.State)
		}
	}
	// The new incarnation works as usual.
	out, err = q.CompleteMany(ctx, []Completion{cur.Completion(newJobs[0].ID, Result{Status: 200})})
	if err != nil || out[0].Err != nil {
		t.Fatalf("current incarnation's completion = %v, %v", err, out[0].Err)
	}
	if _, err := cur.Fail(ctx, newJobs[1].ID, "boom", "x", false); err != nil {
		t.Fatal(err)
	}
}

// A node declared lost or exited while its current incarnation lives on is
// active again at its next heartbeat, and gets work.
func TestCurrentIncarnationHeartbeatReactivates(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	node, _, err := q.Register(ctx, NodeInfo{ID: "n1", Hostname: "h1", Capacity: 2})
	if err != nil {
		t.Fatal(err)
	}
	in := q.Incarnation(node)
	clock.Advance(time.Minute)
	if rep, err := q.RescueLost(ctx, 15*time.Second); err != nil || len(rep.LostNodes) != 1 {
		t.Fatalf("rescue = %+v, %v", rep, err)
	}
	st, err := in.Heartbeat(ctx, NodeLoad{})
	if err != nil || st != NodeActive {
		t.Fatalf("heartbeat of the lost node = %s, %v; want active", st, err)
	}
	// An exit mark sent by the operator (bound to no incarnation) does not
	// outlive the process either.
	if _, err := q.SetNodeState(ctx, "n1", NodeExited); err != nil {
		t.Fatal(err)
	}
	if st, err := in.Heartbeat(ctx, NodeLoad{}); err != nil || st != NodeActive {
		t.Fatalf("heartbeat of the exited node = %s, %v; want active", st, err)
	}
	mustEnqueue(t, q, pageSpecs(1, "r.test")...)
	if got, err := assignRound(ctx, q, 10); err != nil || len(got["n1"]) != 1 {
		t.Fatalf("assigned %v, %v; the reactivated node should get the job", got, err)
	}
}

// Register lets a new process in at once after an exit mark or once the
// holder's heartbeat is stale; never while it is fresh.
func TestRegisterWaitsOnlyForALiveHolder(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now, StaleAfter: 15 * time.Second})
	ctx := context.Background()
	a, _, err := q.Register(ctx, NodeInfo{ID: "n1", Capacity: 6, PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Incarnation(a).SetState(ctx, NodeExited, ExitRecycle); err != nil {
		t.Fatal(err)
	}
	b, _, err := q.Register(ctx, NodeInfo{ID: "n1", Capacity: 6, PID: 2})
	if err != nil {
		t.Fatalf("register after an exit mark: %v", err)
	}
	clock.Advance(10 * time.Second)
	if _, _, err := q.Register(ctx, NodeInfo{ID: "n1", Capacity: 6, PID: 3}); !errors.Is(err, ErrNodeIDInUse) {
		t.Fatalf("register while the holder's heartbeat is 10 s old = %v", err)
	}
	clock.Advance(6 * time.Second)
	c, _, err := q.Register(ctx, NodeInfo{ID: "n1", Capacity: 6, PID: 3})
	if err != nil || c.Incarnation <= b.Incarnation {
		t.Fatalf("register after the holder went stale = %+v, %v", c, err)
	}
}

// TestUnclaimGivesBackAClaimNeverAnswered: a node whose claim committed but
// whose answer was lost holds jobs it never started; Unclaim, given the
// jobs it runs, puts the others back in its queue with their attempt given
// back, and the next claim starts them as their first attempt.
func TestUnclaimGivesBackAClaimNeverAnswered(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	node, _, err := q.Register(ctx, NodeInfo{ID: "n1", Hostname: "h1", PID: 100, Capacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	in := q.Incarnation(node)
	mustEnqueue(t, q, pageSpecs(3, "u.test")...)
	if _, err := q.Assign(ctx, "n1", 3); err != nil {
		t.Fatal(err)
	}
	run, err := in.Claim(ctx, 1)
	if err != nil || len(run) != 1 {
		t.Fatalf("claim = %v, %v", run, err)
	}
	lost, err := in.Claim(ctx, 2) // its answer never reaches the node
	if err != nil || len(lost) != 2 {
		t.Fatalf("claim = %v, %v", lost, err)
	}
	back, err := in.Unclaim(ctx, []int64{run[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(back)
	if !slices.Equal(back, []int64{lost[0].ID, lost[1].ID}) {
		t.Fatalf("unclaimed %v, want %d and %d", back, lost[0].ID, lost[1].ID)
	}
	if j := mustGet(t, q, run[0].ID); j.State != StateProcessing || j.Attempts != 1 {
		t.Errorf("the job the node runs is %s at attempt %d, want processing at 1", j.State, j.Attempts)
	}
	for _, id := range back {
		if j := mustGet(t, q, id); j.State != StateQueued || j.Attempts != 0 || j.NodeID != "n1" || j.LeaseExpiresAt != nil {
			t.Errorf("unclaimed job %d: %s, attempt %d, node %q, lease %v; want queued on n1 at 0, no lease",
				id, j.State, j.Attempts, j.NodeID, j.LeaseExpiresAt)
		}
	}
	again, err := in.Claim(ctx, 4)
	if err != nil || len(again) != 2 || again[0].Attempts != 1 || again[1].Attempts != 1 {
		t.Fatalf("claim after the unclaim = %+v, %v; want the two jobs at attempt 1", again, err)
	}
	if back, err := in.Unclaim(ctx, nil); err != nil || len(back) != 3 {
		t.Errorf("Unclaim(nil) = %v, %v; want every job processing", back, err)
	}
}

// TestUnclaimQueuesAnew: the jobs of a lost claim answer, put back in the
// node's queue after a long outage, are queued as of then: the rescue does
// not take them from the node as unclaimed before its next claim.
func TestUnclaimQueuesAnew(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now, ClaimTimeout: time.Minute})
	ctx := context.Background()
	in := registerIncarnation(t, q, "n1", 2)
	mustEnqueue(t, q, pageSpecs(2, "u.test")...)
	if _, err := q.Assign(ctx, "n1", 2); err != nil {
		t.Fatal(err)
	}
	if lost, err := in.Claim(ctx, 2); err != nil || len(lost) != 2 { // its answer never reaches the node
		t.Fatalf("claim = %v, %v", lost, err)
	}
	clock.Advance(70 * time.Second) // the database out of reach; the leases hold
	if back, err := in.Unclaim(ctx, nil); err != nil || len(back) != 2 {
		t.Fatalf("unclaim = %v, %v", back, err)
	}
	if rep, err := q.RescueLost(ctx, time.Hour); err != nil || rep.Unclaimed != 0 {
		t.Fatalf("rescue after the unclaim = %+v, %v; want nothing taken", rep, err)
	}
	if again, err := in.Claim(ctx, 2); err != nil || len(again) != 2 {
		t.Fatalf("claim after the unclaim = %v, %v", again, err)
	}
}

// Only a later registration supersedes: a row gone or at an earlier
// incarnation leaves the id to no process.
func TestFencedErrorSuperseded(t *testing.T) {
	for _, tc := range []struct {
		inc, cur int64
		want     bool
		msg      string
	}{
		{5, 6, true, "superseded by incarnation 6"},
		{5, 900, true, "superseded by incarnation 900"},
		{5, 0, false, "no longer registered"},                    // the row is gone
		{5, 3, false, "registered at an earlier incarnation, 3"}, // the database went back past the caller's registration
	} {
		e := &FencedError{NodeID: "n", Incarnation: tc.inc, Current: tc.cur}
		if got := e.Superseded(); got != tc.want {
			t.Errorf("incarnation %d, current %d: Superseded() = %v, want %v", tc.inc, tc.cur, got, tc.want)
		}
		if !strings.Contains(e.Error(), tc.msg) {
			t.Errorf("incarnation %d, current %d: %q, want it to say %q", tc.inc, tc.cur, e.Error(), tc.msg)
		}
	}
}
