package farm

import (
	"context"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// TestConsumerExitCountsWhatFollowedTheLastHeartbeat runs a node whose
// heartbeat is never due through 18 jobs, and stops it: what its process
// counted (the jobs that ran in a wiped context, and whatever else) reaches
// the node's and the farm's lifetime counters through the exit mark alone.
func TestConsumerExitCountsWhatFollowedTheLastHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site := testutil.StartSite(t, testsite.Options{Items: 20})
	db := newTestDB(t)
	batch, _ := db.enqueue(t, site.URL, pagePaths(18, "/page/%d"))
	const node = "node-exit-counts"
	db.startAssigner(t, node, defaultCapacity())
	rc := startConsumer(t, db, node, shortProfileRoot(t), func(c *ConsumerConfig) {
		c.HeartbeatInterval = time.Hour // no heartbeat within the test
	})
	testutil.Eventually(t, 2*time.Minute, "18 jobs completed", func() bool {
		return db.counts(t, batch).By[jobqueue.StateCompleted] == 18
	})
	if err := rc.stop(t, time.Minute); err != nil {
		t.Fatalf("Run after stop = %v, want nil", err)
	}
	st := rc.c.SupervisorStats()
	if st.Contexts.Reused == 0 {
		t.Fatalf("the process reused no context (stats %+v): the test shows nothing", st)
	}
	got := func(c jobqueue.Counters) jobqueue.NodeLoad {
		return jobqueue.NodeLoad{ChromeRecycles: c.ChromeRecycles, ChromeMemoryRecycles: c.ChromeMemoryRecycles,
			ChromeCrashes: c.ChromeCrashes, ContextsReused: c.ContextsReused, ContextsReplaced: c.ContextsReplaced}
	}
	want := processCounts(st)
	n, err := db.q.GetNode(context.Background(), node)
	if err != nil || n.State != jobqueue.NodeExited {
		t.Fatalf("node after stop: %+v, %v; want exited", n, err)
	}
	if got(n.Lifetime) != want {
		t.Errorf("node lifetime counts = %+v, want the process's %+v", got(n.Lifetime), want)
	}
	farm, err := db.q.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got(farm.Lifetime) != want {
		t.Errorf("farm lifetime counts = %+v, want the process's %+v", got(farm.Lifetime), want)
	}
}
