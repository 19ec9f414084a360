package jobqueue

import (
	"context"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

// TestRoundLockLetsHeartbeatsThrough holds an assignment round's node locks
// open: the nodes' heartbeats must go through (a round must not wait for the
// fleet's heartbeats, nor they for it), while a drain, which changes what the
// round read, must wait until the round commits.
func TestRoundLockLetsHeartbeatsThrough(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	node, _, err := q.Register(ctx, NodeInfo{ID: "n1", Hostname: "test", Capacity: 6})
	if err != nil {
		t.Fatal(err)
	}
	in := q.Incarnation(node)
	mustEnqueue(t, q, pageSpecs(1, "round.test")...)
	assignClaim(t, q, "n1", 1)

	round, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer round.Rollback(ctx)
	if _, err := round.Exec(ctx, lockTargetsSQL, []string{"n1"}); err != nil {
		t.Fatal(err)
	}
	// Blocking here would hang the test: the heartbeat must not wait.
	if _, err := in.Heartbeat(ctx, NodeLoad{CPUPercent: 42, ChromeRecycles: 1}); err != nil {
		t.Fatalf("heartbeat during a round: %v", err)
	}

	drained := make(chan error, 1)
	go func() {
		_, err := q.SetNodeState(ctx, "n1", NodeDraining)
		drained <- err
	}()
	testutil.Eventually(t, time.Minute, "the drain waiting for the round", func() bool {
		return countRows(t, pool, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%draining%'`) == 1
	})
	select {
	case err := <-drained:
		t.Fatalf("the drain went through during a round: %v", err)
	default:
	}
	if err := round.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM nodes WHERE id = 'n1' AND state = 'draining' AND cpu_percent = 42"); n != 1 {
		t.Errorf("node n1: the heartbeat's load or the drain is missing")
	}
}
