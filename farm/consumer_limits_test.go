package farm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// TestConsumerOversizedResultsFailAlone is the repro of the wedged node: two
// jobs whose extract is far over the node's data cap, among slow ordinary
// pages, on one node of capacity 6. The big jobs fail at once, permanently,
// with result_too_large naming the cap; every other job completes; and the
// node ends holding nothing.
func TestConsumerOversizedResultsFailAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site := testutil.StartSite(t, testsite.Options{Items: 20})
	db := newTestDB(t)
	db.q = jobqueue.New(db.pool, jobqueue.Config{BackoffBase: testBackoff,
		ResultLimits: jobqueue.ResultLimits{DataBytes: 1 << 20}})
	var specs []jobqueue.Spec
	for i := range 14 {
		specs = append(specs, jobqueue.Spec{URL: fmt.Sprintf("%s/page/%d?delay=300", site.URL, i+2),
			Wait: &jobqueue.Wait{Selector: "#ready"}, MaxAttempts: 3})
	}
	for range 2 {
		specs = append(specs, jobqueue.Spec{URL: site.URL + "/page/1", MaxAttempts: 1,
			Extract: `'x'.repeat(3 * 1024 * 1024)`})
	}
	batch, ids, err := db.q.Enqueue(context.Background(), specs)
	if err != nil {
		t.Fatal(err)
	}
	const node = "node-big-results"
	db.startAssigner(t, node, defaultCapacity())
	rc := startConsumer(t, db, node, shortProfileRoot(t), nil)

	testutil.Eventually(t, 2*time.Minute, "every job final", func() bool { return db.counts(t, batch).Finished() == int64(len(ids)) })
	c := db.counts(t, batch)
	if c.By[jobqueue.StateCompleted] != 14 || c.By[jobqueue.StateFailed] != 2 {
		t.Fatalf("counts %v, want 14 completed and 2 failed", c.By)
	}
	for _, id := range ids[14:] {
		j, err := db.q.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.ErrorClass != jobqueue.ClassResultTooLarge || !strings.Contains(j.LastError, "data_bytes") || j.Attempts != 1 {
			t.Errorf("big job %d: class %q, error %q, attempts %d; want result_too_large naming data_bytes, 1 attempt",
				id, j.ErrorClass, j.LastError, j.Attempts)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the node holding nothing", func() bool {
		n, err := db.q.GetNode(context.Background(), node)
		return err == nil && n.Queued+n.Processing == 0 && rc.c.Stats().Held == 0
	})
}
