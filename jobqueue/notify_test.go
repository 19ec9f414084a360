package jobqueue

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAssignedRelayNamesEveryNode: a round that assigns to more nodes than
// one notification can name splits them over several ChannelAssigned
// notifications, each within PostgreSQL's payload limit, naming every node
// exactly once; a single-node Assign names its node.
func TestAssignedRelayNamesEveryNode(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	const nodes = 2*assignedPerNotify + 37
	want := map[string]bool{}
	for i := range nodes {
		// The longest ids, so that a full notification is as long as it gets.
		id := fmt.Sprintf("n%0*d", MaxNodeIDLength-1, i)
		mustRegister(t, q, id, 1)
		want[id] = true
	}
	l := NewListener(pool, ListenerConfig{Channels: []string{ChannelAssigned}, Buffer: 16})
	startListener(t, l)

	mustEnqueue(t, q, pageSpecs(nodes, "relay.test")...)
	got, err := assignRound(ctx, q, nodes)
	if err != nil || len(got) != nodes {
		t.Fatalf("round assigned to %d nodes (%v), want %d", len(got), err, nodes)
	}
	seen := map[string]int{}
	notifications := 0
	for len(seen) < nodes {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := l.Wait(wctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d notifications naming %d nodes: %v", notifications, len(seen), err)
		}
		notifications++
		if len(n.Payload) >= 8000 {
			t.Errorf("notification %d is %d bytes, over PostgreSQL's limit", notifications, len(n.Payload))
		}
		for _, id := range strings.Fields(n.Payload) {
			if !want[id] {
				t.Errorf("notification names %q, which got no job", id)
			}
			seen[id]++
		}
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("node %s named %d times", id, c)
		}
	}
	if wantN := (nodes + assignedPerNotify - 1) / assignedPerNotify; notifications != wantN {
		t.Errorf("%d notifications, want %d", notifications, wantN)
	}

	// A single-node Assign names its node.
	one := fmt.Sprintf("n%0*d", MaxNodeIDLength-1, 0)
	if _, err := q.Claim(ctx, one, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Complete(ctx, got[one][0], one, Result{}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, pageSpecs(1, "relay.test")...)
	if ids, err := q.Assign(ctx, one, 1); err != nil || len(ids) != 1 {
		t.Fatalf("assign: %v, %v", ids, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if n, err := l.Wait(wctx); err != nil || n.Payload != one {
		t.Fatalf("after Assign: %q, %v; want %q", n.Payload, err, one)
	}
}
