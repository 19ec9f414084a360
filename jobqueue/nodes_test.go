package jobqueue

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRescueLostNodesAndExpiredLeases(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now, Lease: 10 * time.Second})
	ctx := context.Background()
	mustRegister(t, q, "lost", 4)
	mustRegister(t, q, "alive", 2)
	mustRegister(t, q, "stuck", 1)
	// Build the scene one step at a time so each node gets exactly its jobs:
	// ids[0:2] queued on lost, ids[2:4] processing on lost (ids[3] on its
	// only attempt), ids[4] processing on alive, ids[5] processing on stuck.
	ids := make([]int64, 0, 6)
	stage := func(node string, claim bool, specs ...Spec) {
		t.Helper()
		ids = append(ids, mustEnqueue(t, q, specs...)...)
		if got, err := q.Assign(ctx, node, len(specs)); err != nil || len(got) != len(specs) {
			t.Fatalf("assign to %s = %v, %v", node, got, err)
		}
		if claim {
			if jobs, err := q.Claim(ctx, node, len(specs)); err != nil || len(jobs) != len(specs) {
				t.Fatalf("claim on %s = %v, %v", node, jobs, err)
			}
		}
	}
	stage("lost", true, Spec{URL: "http://l.test/p1"}, Spec{URL: "http://l.test/last", MaxAttempts: 1})
	stage("lost", false, Spec{URL: "http://l.test/q1"}, Spec{URL: "http://l.test/q2"})
	ids = []int64{ids[2], ids[3], ids[0], ids[1]} // queued first, as documented above
	stage("alive", true, Spec{URL: "http://l.test/alive"})
	stage("stuck", true, Spec{URL: "http://l.test/stuck"})

	// Nothing is stale yet.
	if rep, err := q.RescueLost(ctx, time.Minute); err != nil || len(rep.LostNodes)+int(rep.Released+rep.Retried+rep.Failed) != 0 {
		t.Fatalf("early rescue %+v, %v", rep, err)
	}
	// 11 s later: "alive" heartbeats (renewing its lease), "stuck" heartbeats
	// too late for its lease, "lost" is silent.
	clock.Advance(11 * time.Second)
	if st, err := q.Heartbeat(ctx, "alive", NodeLoad{BusySessions: 1}); err != nil || st != NodeActive {
		t.Fatalf("heartbeat = %v, %v", st, err)
	}
	rep, err := q.RescueLost(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Leases of "lost" (p1, last) and "stuck" expired; no node is stale yet.
	if len(rep.LostNodes) != 0 || rep.Released != 0 || rep.Retried != 2 || rep.Failed != 1 {
		t.Fatalf("lease rescue %+v", rep)
	}
	if j := mustGet(t, q, ids[5]); j.State != StatePending || j.ErrorClass != ClassLeaseExpired || j.Attempts != 1 ||
		!strings.Contains(j.LastError, "lease expired on node stuck") {
		t.Fatalf("expired-lease job %+v", j)
	}
	if j := mustGet(t, q, ids[3]); j.State != StateFailed || j.ErrorClass != ClassLeaseExpired {
		t.Fatalf("job out of attempts %+v", j)
	}
	if j := mustGet(t, q, ids[4]); j.State != StateProcessing {
		t.Fatalf("the renewed job was rescued: %+v", j)
	}

	clock.Advance(time.Minute)
	if _, err := q.Heartbeat(ctx, "alive", NodeLoad{}); err != nil {
		t.Fatal(err)
	}
	rep, err = q.RescueLost(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rep.LostNodes)
	if !slices.Equal(rep.LostNodes, []string{"lost", "stuck"}) || rep.Released != 2 || rep.Retried != 0 || rep.Failed != 0 {
		t.Fatalf("node rescue %+v", rep)
	}
	for _, id := range ids[:2] {
		if j := mustGet(t, q, id); j.State != StatePending || j.Attempts != 0 || j.NodeID != "" {
			t.Fatalf("queued job of a lost node %+v", j)
		}
	}
	// A lost node claims nothing, learns its state from its heartbeat, and
	// its late report of a job it no longer holds changes nothing.
	if st, _ := q.Heartbeat(ctx, "lost", NodeLoad{}); st != NodeLost {
		t.Fatalf("lost node's heartbeat says %v", st)
	}
	if _, err := q.Fail(ctx, ids[2], "lost", "late", "x", true); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("late Fail = %v, want ErrNotHeld", err)
	}
	if got, _ := q.Assign(ctx, "lost", 4); len(got) != 0 {
		t.Fatalf("a lost node was assigned %v", got)
	}
	// Its late result for a job still live is kept: the work was done.
	if _, err := q.Complete(ctx, ids[2], "lost", Result{Status: 200}); err != nil {
		t.Fatalf("late completion of a live job: %v", err)
	}
	if rep, _ := q.RescueLost(ctx, time.Minute); len(rep.LostNodes) != 0 {
		t.Fatalf("a lost node was declared lost again: %+v", rep)
	}
}

// TestRescueReturnsUnclaimedJobs: a node that goes on heartbeating but
// stops claiming does not keep what it was given: past the claim timeout
// its queued jobs go back to pending, counted as pending again, for
// another node; what it claimed is its own, and a claim after the release
// gets nothing.
func TestRescueReturnsUnclaimedJobs(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now, ClaimTimeout: time.Minute, Lease: time.Hour})
	ctx := context.Background()
	mustRegister(t, q, "wedged", 3)
	ids := mustEnqueue(t, q, pageSpecs(3, "u.test")...)
	if got, err := q.Assign(ctx, "wedged", 3); err != nil || len(got) != 3 {
		t.Fatalf("assign = %v, %v", got, err)
	}
	if got, err := q.Claim(ctx, "wedged", 1); err != nil || len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("claim = %v, %v", got, err)
	}
	beat := func() {
		t.Helper()
		if st, err := q.Heartbeat(ctx, "wedged", NodeLoad{BusySessions: 1}); err != nil || st != NodeActive {
			t.Fatalf("heartbeat = %v, %v", st, err)
		}
	}
	clock.Advance(59 * time.Second)
	beat()
	if rep, err := q.RescueLost(ctx, 15*time.Second); err != nil || rep.Unclaimed != 0 {
		t.Fatalf("rescue within the claim timeout: %+v, %v", rep, err)
	}
	clock.Advance(2 * time.Second)
	beat()
	rep, err := q.RescueLost(ctx, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Unclaimed != 2 || !slices.Equal(rep.UnclaimedNodes, []string{"wedged"}) || len(rep.LostNodes) != 0 || rep.Released+rep.Retried != 0 {
		t.Fatalf("rescue past the claim timeout: %+v", rep)
	}
	for _, id := range ids[1:] {
		if j := mustGet(t, q, id); j.State != StatePending || j.NodeID != "" || j.QueuedAt != nil || j.Attempts != 0 {
			t.Errorf("unclaimed job after the rescue: %+v", j)
		}
	}
	if j := mustGet(t, q, ids[0]); j.State != StateProcessing || j.NodeID != "wedged" {
		t.Errorf("the claimed job after the rescue: %+v", j)
	}
	s, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Jobs[StatePending] != 2 || s.Jobs[StateQueued] != 0 {
		t.Errorf("counts after the rescue: %v", s.Jobs)
	}
	if got, err := q.Claim(ctx, "wedged", 2); err != nil || len(got) != 0 {
		t.Errorf("a claim after the release got %v, %v", got, err)
	}
}

func TestRegisterReclaimsOwnAbandonedJobs(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	node, rec, err := q.Register(ctx, NodeInfo{ID: "n1", Hostname: "h1", Capacity: 4, Version: "v1"})
	if err != nil || rec != (Reclaimed{}) || node.ProcessRestarts != 0 || node.State != NodeActive || node.Capacity != 4 {
		t.Fatalf("first Register = %+v, %+v, %v", node, rec, err)
	}
	mustEnqueue(t, q, Spec{URL: "http://o.test/1"}, Spec{URL: "http://o.test/2"}, Spec{URL: "http://o.test/3", MaxAttempts: 1},
		Spec{URL: "http://o.test/4"})
	if _, err := q.Assign(ctx, "n1", 4); err != nil {
		t.Fatal(err)
	}
	if jobs, _ := q.Claim(ctx, "n1", 3); len(jobs) != 3 {
		t.Fatal("claim")
	}
	if _, err := q.Heartbeat(ctx, "n1", NodeLoad{CPUPercent: 50, JobsSinceProcessStart: 9}); err != nil {
		t.Fatal(err)
	}
	// The process dies and comes back with the same id, knowing its
	// predecessor is gone.
	node, rec, err = q.Register(ctx, NodeInfo{ID: "n1", Hostname: "h1", Capacity: 6, Version: "v2", Replaces: node.Incarnation})
	if err != nil {
		t.Fatal(err)
	}
	if rec != (Reclaimed{Released: 1, Retried: 2, Failed: 1}) {
		t.Fatalf("reclaimed %+v", rec)
	}
	if node.ProcessRestarts != 1 || node.Capacity != 6 || node.Version != "v2" || node.Load != (NodeLoad{}) {
		t.Fatalf("re-registered node %+v", node)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM jobs WHERE node_id = 'n1' AND state IN ('queued', 'processing')"); n != 0 {
		t.Fatalf("node still holds %d jobs", n)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM jobs WHERE error_class = $1", ClassNodeRestarted); n != 3 {
		t.Fatalf("%d jobs charged as node_restarted, want 3", n)
	}
	// Taking the id over again, with nothing held, takes nothing back.
	if _, rec, err := q.Register(ctx, NodeInfo{ID: "n1", Hostname: "h1", Capacity: 6, Version: "v2", Replaces: node.Incarnation}); err != nil || rec != (Reclaimed{}) {
		t.Fatalf("reclaim with nothing held = %+v, %v", rec, err)
	}
	if _, _, err := q.Register(ctx, NodeInfo{ID: "bad id"}); !errors.Is(err, ErrBadNodeID) {
		t.Fatalf("Register(bad id) = %v", err)
	}
	if _, _, err := q.Register(ctx, NodeInfo{ID: "n2", Capacity: -1}); err == nil {
		t.Fatal("negative capacity accepted")
	}
	// The node's supervisor owns its capacity; the queue does not guess one.
	if _, _, err := q.Register(ctx, NodeInfo{ID: "n3"}); err == nil || !strings.Contains(err.Error(), "capacity 0") {
		t.Fatalf("Register without a capacity = %v, want an error naming the capacity", err)
	}
	if _, _, err := q.Register(ctx, NodeInfo{ID: "n4", Capacity: 6, ExitAfterJobs: -1}); err == nil || !strings.Contains(err.Error(), "exit after -1") {
		t.Fatalf("Register with a negative threshold = %v", err)
	}
	n, _, err := q.Register(ctx, NodeInfo{ID: "n5", Capacity: 4, ChromeRecycleJobs: 10, ExitAfterJobs: 0})
	if err != nil || n.Capacity != 4 || n.ChromeRecycleJobs != 10 || n.ExitAfterJobs != 0 {
		t.Fatalf("the node's own policy: %+v, %v", n, err)
	}
}

func TestNodeStatesAndHeartbeat(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	mustRegister(t, q, "n1", 3)
	mustEnqueue(t, q, pageSpecs(3, "st.test")...)
	if _, err := q.Assign(ctx, "n1", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Claim(ctx, "n1", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetNodeState(ctx, "n1", NodeDraining); err != nil {
		t.Fatal(err)
	}
	// A draining node still starts what it was given.
	if jobs, _ := q.Claim(ctx, "n1", 1); len(jobs) != 1 {
		t.Fatal("a draining node could not claim its queued job")
	}
	clock.Advance(5 * time.Second)
	load := NodeLoad{CPUPercent: 71.5, MemUsedBytes: 3 << 30, MemTotalBytes: 8 << 30, ChromePSSBytes: 900 << 20,
		BusySessions: 2, JobsSinceChromeStart: 7, JobsSinceProcessStart: 27, ChromeRestarts: 1,
		ChromePSSMinBytes: 850 << 20, ChromePSSMaxBytes: 950 << 20}
	if st, err := q.Heartbeat(ctx, "n1", load); err != nil || st != NodeDraining {
		t.Fatalf("Heartbeat = %v, %v", st, err)
	}
	n, err := q.GetNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if n.Load != load || !n.HeartbeatAt.Equal(clock.Now()) || n.State != NodeDraining || n.Queued != 1 || n.Processing != 2 {
		t.Fatalf("node after heartbeat %+v", n)
	}
	rec, err := q.SetNodeState(ctx, "n1", NodeExited)
	if err != nil || rec != (Reclaimed{Released: 1, Retried: 2}) {
		t.Fatalf("exit = %+v, %v", rec, err)
	}
	if _, err := q.SetNodeState(ctx, "n1", NodeDraining); err == nil || !strings.Contains(err.Error(), "register again") {
		t.Fatalf("draining an exited node = %v", err)
	}
	if _, err := q.SetNodeState(ctx, "n1", NodeLost); err == nil {
		t.Fatal("SetNodeState(lost) accepted")
	}
	if _, err := q.SetNodeState(ctx, "nobody", NodeDraining); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetNodeState(unknown) = %v", err)
	}
	if _, err := q.SetNodeState(ctx, "nobody", NodeExited); !errors.Is(err, ErrNotFound) {
		t.Fatalf("exit unknown = %v", err)
	}
	if _, err := q.Heartbeat(ctx, "nobody", NodeLoad{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Heartbeat(unknown) = %v", err)
	}
	if _, err := q.GetNode(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetNode(unknown) = %v", err)
	}
	// Gone nodes are forgotten after a while, live ones never.
	mustRegister(t, q, "n2", 1)
	clock.Advance(time.Hour)
	if n, err := q.DeleteGoneNodes(ctx, clock.Now().Add(-time.Minute)); err != nil || n != 1 {
		t.Fatalf("DeleteGoneNodes = %d, %v", n, err)
	}
	if nodes, _ := q.ListNodes(ctx); len(nodes) != 1 || nodes[0].ID != "n2" {
		t.Fatalf("nodes left: %+v", nodes)
	}
}
