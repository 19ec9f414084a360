package farm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// TestConsumerPSSRangeSpansRecycle: a node that recycles Chrome every 3 jobs
// reports, through its heartbeats, a PSS range that holds the recycle —
// from the old tree's peak just before its kill down to what is left after
// — and the dashboard's sample carries that range, however the heartbeats
// and the sample fall around the kill.
func TestConsumerPSSRangeSpansRecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	// The first Chrome's jobs are held until its replacement has booted,
	// so that the kill's trough has a live Chrome to sample: a replacement
	// still booting at the kill (a slow boot on a loaded machine) leaves a
	// moment with no Chrome, whose trough is rightly 0.
	release := make(chan struct{})
	inner := testsite.New(testsite.Options{Items: 20})
	held := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") != "" {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(held.Close)
	db := newTestDB(t)
	const node = "node-pss-range"
	db.startAssigner(t, node, defaultCapacity())
	rc := startConsumer(t, db, node, shortProfileRoot(t), func(c *ConsumerConfig) {
		// One Chrome, whose life of 3 jobs ends in one recycle.
		c.Supervisor.SessionsPerChrome = defaultCapacity()
		c.Supervisor.ChromeRecycleJobs, c.Supervisor.ExitAfterJobs = 3, Off
	})
	ctx := context.Background()
	// The recorder's clock is the test's, so that its two samples fall in
	// buckets of their own whatever the jobs take.
	at := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
	recorder := jobqueue.New(db.pool, jobqueue.Config{Now: func() time.Time { return at }})
	record := func() jobqueue.SampleReport {
		t.Helper()
		at = at.Add(10 * time.Second)
		rep, err := recorder.RecordSamples(ctx, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// Once the first Chrome is sampled, a sample takes the range gathered
	// so far (from before any Chrome ran: 0), so the next holds only what
	// follows: every value then is a live Chrome's.
	testutil.Eventually(t, time.Minute, "the first Chrome sampled", func() bool {
		n, err := db.q.GetNode(ctx, node)
		return err == nil && n.Load.ChromePSSBytes > 0
	})
	record()

	// One Chrome life of 3 jobs: one recycle, one kill.
	batch, ids := db.enqueue(t, held.URL, pagePaths(3, "/page/%d?hold=1"))
	testutil.Eventually(t, 2*time.Minute, "the replacement booted", func() bool { return rc.c.sup.Stats().ChromeStarts >= 2 })
	close(release)
	testutil.Eventually(t, 2*time.Minute, "every job final", func() bool { return db.counts(t, batch).Finished() == int64(len(ids)) })
	if c := db.counts(t, batch); c.By[jobqueue.StateCompleted] != int64(len(ids)) {
		t.Fatalf("counts %v, want %d completed", c.By, len(ids))
	}
	testutil.Eventually(t, time.Minute, "a recycled Chrome killed", func() bool { return rc.c.sup.Stats().ChromeKills >= 1 })

	// A Chrome tree is tens of MiB at the least; a band narrower than that
	// did not see the kill.
	const wide = 20 << 20
	var n jobqueue.Node
	testutil.Eventually(t, time.Minute, "a heartbeat with the recycle's range", func() bool {
		var err error
		n, err = db.q.GetNode(ctx, node)
		return err == nil && n.Load.ChromePSSMaxBytes-n.Load.ChromePSSMinBytes >= wide
	})
	t.Logf("node row: pss %d MiB, range %d..%d MiB", n.Load.ChromePSSBytes>>20,
		n.Load.ChromePSSMinBytes>>20, n.Load.ChromePSSMaxBytes>>20)

	if rep := record(); rep.Nodes != 1 {
		t.Fatalf("record: %+v", rep)
	}
	_, np, err := db.q.Samples(ctx, at, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(np) != 1 {
		t.Fatalf("node samples %+v, want the last one", np)
	}
	p := np[0]
	if p.ChromePSSMinBytes == 0 || p.ChromePSSMaxBytes-p.ChromePSSMinBytes < wide ||
		p.ChromePSSBytes < p.ChromePSSMinBytes || p.ChromePSSBytes > p.ChromePSSMaxBytes {
		t.Fatalf("sample pss %d, range %d..%d: want a trough above 0 (the new Chrome) and a range at least %d MiB wide around the value",
			p.ChromePSSBytes, p.ChromePSSMinBytes, p.ChromePSSMaxBytes, wide>>20)
	}
}
