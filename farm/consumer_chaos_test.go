package farm

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// runningConsumer is a Consumer run in-process by a test.
type runningConsumer struct {
	c      *Consumer
	cancel context.CancelFunc
	done   chan error
}

// startConsumer runs a node on db with cfg adjusted by the test; the test
// ends it with stop (or its cleanup does).
func startConsumer(t *testing.T, db testDB, node, profiles string, adjust func(*ConsumerConfig)) *runningConsumer {
	t.Helper()
	cfg := DefaultConsumerConfig(db.q)
	cfg.NodeID = node
	cfg.Logger = zaptest.NewLogger(t)
	cfg.HeartbeatInterval = 300 * time.Millisecond
	cfg.Supervisor.MemoryInterval = 300 * time.Millisecond
	cfg.Supervisor.Browser.ProfileRoot = profiles
	cfg.Egress = testSiteEgress()
	if adjust != nil {
		adjust(&cfg)
	}
	c, err := NewConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc := &runningConsumer{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { rc.done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rc.done:
		case <-time.After(2 * time.Minute):
			t.Errorf("consumer %s did not stop", node)
		}
	})
	return rc
}

// stop ends Run like SIGTERM and returns its error.
func (rc *runningConsumer) stop(t *testing.T, timeout time.Duration) error {
	t.Helper()
	rc.cancel()
	select {
	case err := <-rc.done:
		rc.done <- err // for the cleanup
		return err
	case <-time.After(timeout):
		t.Fatalf("consumer did not stop within %v", timeout)
		return nil
	}
}

// TestConsumerChromeKilledMidJob kills the Chrome main process with SIGKILL
// while six jobs render on it (one Chrome for the node's six sessions; a
// Chrome per session, the default, loses one job: TestChromePerSessionLoss
// in supervisor), each page asked for: those jobs fail as
// retriable ("crashed"), charged, come back after their backoff and
// complete on the replacement Chrome; the node carries on and reports its
// load meanwhile.
func TestConsumerChromeKilledMidJob(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	// Six slots busy is not yet six pages asked for, and a job whose Chrome
	// is lost before that gets its attempt back (renderFailure).
	site, asked := countingSite(t, "/page/")
	db := newTestDB(t)
	batch, ids := db.enqueue(t, site.URL, pagePaths(12, "/page/%d?delay=1500"))
	const node = "node-chrome-kill"
	profiles := shortProfileRoot(t)
	db.startAssigner(t, node, defaultCapacity())
	rc := startConsumer(t, db, node, profiles, func(c *ConsumerConfig) {
		c.Supervisor.SessionsPerChrome = defaultCapacity()
		c.Supervisor.ChromeRecycleJobs = Off
		c.Supervisor.ExitAfterJobs = Off
	})

	testutil.Eventually(t, time.Minute, "six pages asked for", func() bool { return asked.Load() >= 6 })
	pid := rc.c.SupervisorStats().ChromePID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 90*time.Second, "all 12 jobs completed", func() bool {
		return db.counts(t, batch).By[jobqueue.StateCompleted] == 12
	})
	st := rc.c.SupervisorStats()
	if st.ChromeCrashes != 1 || st.ChromeStarts != 2 {
		t.Errorf("chrome crashes/starts = %d/%d, want 1/2", st.ChromeCrashes, st.ChromeStarts)
	}
	crashed := 0
	for _, id := range ids {
		j, err := db.q.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.ErrorClass == browser.ClassCrashed {
			crashed++
			if j.Attempts != 2 {
				t.Errorf("job %d on the killed Chrome ran %d times, want 2", id, j.Attempts)
			}
		}
	}
	if crashed != 6 {
		t.Errorf("%d jobs recorded a crash, want the 6 that ran on the killed Chrome", crashed)
	}
	if rows, jobs := db.resultRows(t); rows != 12 || jobs != 12 {
		t.Errorf("result rows = %d for %d jobs, want 12 for 12", rows, jobs)
	}
	testutil.Eventually(t, 30*time.Second, "a heartbeat with the Chrome's memory and the restart", func() bool {
		n, err := db.q.GetNode(context.Background(), node)
		return err == nil && n.Load.ChromePSSBytes > 0 && n.Load.MemTotalBytes > 0 && n.Load.ChromeRestarts == 1 &&
			n.Load.JobsSinceProcessStart == 18
	})

	if err := rc.stop(t, time.Minute); err != nil {
		t.Fatalf("Run after stop = %v, want nil", err)
	}
	if left := chromeProcs(profiles); len(left) > 0 {
		t.Errorf("Chrome processes left: %v", left)
	}
	if ents, _ := os.ReadDir(profiles); len(ents) > 0 {
		t.Errorf("%d Chrome profile directories left behind", len(ents))
	}
}

// TestConsumerDrainOnStop stops a node (SIGTERM) while it renders: with a
// grace period its in-flight jobs finish and the rest stay pending; with
// none they are handed back as retriable. Either way the node ends exited
// with no Chrome left.
func TestConsumerDrainOnStop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site := testutil.StartSite(t, testsite.Options{Items: 20})
	for _, tc := range []struct {
		name      string
		drain     time.Duration
		completed int64
	}{
		{"grace", time.Minute, 6},
		{"no grace", Off, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newTestDB(t)
			batch, _ := db.enqueue(t, site.URL, pagePaths(9, "/page/%d?delay=1500"))
			node := "node-drain"
			profiles := shortProfileRoot(t)
			db.startAssigner(t, node, defaultCapacity())
			rc := startConsumer(t, db, node, profiles, func(c *ConsumerConfig) { c.DrainTimeout = tc.drain })
			testutil.Eventually(t, time.Minute, "six sessions busy", func() bool { return rc.c.SupervisorStats().Busy == 6 })
			if err := rc.stop(t, time.Minute); err != nil {
				t.Fatalf("Run after stop = %v, want nil", err)
			}
			c := db.counts(t, batch)
			if got := c.By[jobqueue.StateCompleted]; got != tc.completed {
				t.Errorf("completed = %d, want %d (%v)", got, tc.completed, c.By)
			}
			if got := c.By[jobqueue.StatePending]; got != 9-tc.completed {
				t.Errorf("pending = %d, want %d (%v)", got, 9-tc.completed, c.By)
			}
			n, err := db.q.GetNode(context.Background(), node)
			if err != nil || n.State != jobqueue.NodeExited {
				t.Errorf("node after stop: %+v, %v; want exited", n, err)
			}
			if tc.completed == 0 {
				page, err := db.q.List(context.Background(), jobqueue.ListFilter{BatchID: batch})
				if err != nil {
					t.Fatal(err)
				}
				canceled := 0
				for _, j := range page.Jobs {
					if j.ErrorClass == browser.ClassCanceled {
						canceled++
					}
				}
				if canceled != 6 {
					t.Errorf("%d jobs were handed back as canceled, want 6", canceled)
				}
			}
			if left := chromeProcs(profiles); len(left) > 0 {
				t.Errorf("Chrome processes left: %v", left)
			}
		})
	}
}

// TestConsumerChromeWillNotBoot gives the node a "Chrome" that exits at
// once: the supervisor gives up after MaxBootFailures, and the node hands
// its claimed jobs back as retriable, marks itself exited, and fails.
func TestConsumerChromeWillNotBoot(t *testing.T) {
	db := newTestDB(t)
	batch, _ := db.enqueue(t, "http://127.0.0.1:8", pagePaths(3, "/page/%d"))
	const node = "node-no-chrome"
	db.startAssigner(t, node, defaultCapacity())
	rc := startConsumer(t, db, node, shortProfileRoot(t), func(c *ConsumerConfig) {
		c.Supervisor.Browser.ExecPath = "/bin/false"
		c.Supervisor.MaxBootFailures = 2
		c.Supervisor.BootBackoff = 10 * time.Millisecond
	})
	var err error
	select {
	case err = <-rc.done:
		rc.done <- err
	case <-time.After(time.Minute):
		t.Fatal("the node did not give up")
	}
	if err == nil || !strings.Contains(err.Error(), "boot") {
		t.Fatalf("Run = %v, want the supervisor's boot failure", err)
	}
	c := db.counts(t, batch)
	if c.By[jobqueue.StatePending] != 3 {
		t.Errorf("jobs after the failure: %v, want all 3 pending", c.By)
	}
	n, err := db.q.GetNode(context.Background(), node)
	if err != nil || n.State != jobqueue.NodeExited {
		t.Errorf("node: %+v, %v; want exited", n, err)
	}
	if err := rc.c.Healthy(); err == nil {
		t.Error("a node whose Run failed reports healthy")
	}
}

// TestConsumerDrainTimeoutGivesAttemptBack stops a node (SIGTERM) while
// jobs render slow pages, their pages asked for, with a drain timeout
// shorter than the pages: the drain cancels them, and since the node's
// stop is not the jobs' doing they go back to pending with their attempt
// given back — a job of one attempt is not failed, as it was. A second
// stop in a row is charged (a job longer than the drain timeout must not
// run uncharged for ever on a fleet that stops nodes often), and a third
// node then completes them.
func TestConsumerDrainTimeoutGivesAttemptBack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site, asked := countingSite(t, "/api/item/")
	db := newTestDB(t)
	const jobs = 3
	specs := make([]jobqueue.Spec, jobs)
	for i := range specs {
		specs[i] = jobqueue.Spec{URL: fmt.Sprintf("%s/page/%d?delay=4000", site.URL, i),
			Wait: &jobqueue.Wait{Selector: "#ready"}, MaxAttempts: 2}
	}
	batch, ids, err := db.q.Enqueue(context.Background(), specs)
	if err != nil {
		t.Fatal(err)
	}
	wantJobs := func(when string, state jobqueue.State, attempts int, class string) {
		t.Helper()
		for _, id := range ids {
			j, err := db.q.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if j.State != state || j.Attempts != attempts || j.ErrorClass != class {
				t.Errorf("job %d %s: %s, attempts %d, class %q (%s); want %s, %d, %q",
					id, when, j.State, j.Attempts, j.ErrorClass, j.LastError, state, attempts, class)
			}
		}
	}
	stopMidJob := func(node string, pagesAsked int32) {
		t.Helper()
		db.startAssigner(t, node, defaultCapacity())
		rc := startConsumer(t, db, node, shortProfileRoot(t), func(c *ConsumerConfig) {
			c.DrainTimeout = 200 * time.Millisecond
		})
		testutil.Eventually(t, time.Minute, "every job's page loaded, its data not yet answered", func() bool {
			return asked.Load() >= pagesAsked
		})
		if err := rc.stop(t, time.Minute); err != nil {
			t.Fatalf("Run after stop = %v, want nil", err)
		}
	}
	stopMidJob("node-drain-timeout", jobs)
	wantJobs("after the node's stop", jobqueue.StatePending, 0, browser.ClassCanceled)
	stopMidJob("node-drain-timeout-b", 2*jobs)
	wantJobs("after a second stop", jobqueue.StatePending, 1, browser.ClassCanceled)

	const other = "node-drain-timeout-c"
	db.startAssigner(t, other, defaultCapacity())
	startConsumer(t, db, other, shortProfileRoot(t), nil)
	testutil.Eventually(t, time.Minute, "the jobs completed on the third node", func() bool {
		return db.counts(t, batch).By[jobqueue.StateCompleted] == jobs
	})
	wantJobs("completed", jobqueue.StateCompleted, 2, browser.ClassCanceled)
}

// TestConsumerFailedJobKeepsTheAnswer: a job that fails for good after its
// page answered — its extract throws, the selector it awaits never shows —
// keeps the page's final URL, status and title as its result, as an HTTP
// error does.
func TestConsumerFailedJobKeepsTheAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site := testutil.StartSite(t, testsite.Options{Items: 20})
	db := newTestDB(t)
	specs := []jobqueue.Spec{
		{URL: site.URL + "/page/31", Wait: &jobqueue.Wait{Selector: "#ready"}, Extract: "null.x", MaxAttempts: 1},
		{URL: site.URL + "/page/32", Wait: &jobqueue.Wait{Selector: "#nope"}, TimeoutMS: 3000, MaxAttempts: 1},
	}
	batch, ids, err := db.q.Enqueue(context.Background(), specs)
	if err != nil {
		t.Fatal(err)
	}
	const node = "node-failed-answer"
	db.startAssigner(t, node, defaultCapacity())
	startConsumer(t, db, node, shortProfileRoot(t), nil)
	testutil.Eventually(t, time.Minute, "both jobs failed", func() bool {
		return db.counts(t, batch).By[jobqueue.StateFailed] == int64(len(ids))
	})
	for i, id := range ids {
		j, err := db.q.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{browser.ClassExtract, browser.ClassTimeout}[i]
		if j.ErrorClass != want {
			t.Errorf("job %d failed with %q (%s), want %q", id, j.ErrorClass, j.LastError, want)
		}
		res, err := db.q.GetResult(context.Background(), id)
		if err != nil {
			t.Fatalf("job %d: no result kept: %v", id, err)
		}
		title := fmt.Sprintf("Page %d", 31+i)
		if res.FinalURL != specs[i].URL || res.Status != 200 || res.Title != title {
			t.Errorf("job %d's result: final URL %q, status %d, title %q; want %q, 200, %q",
				id, res.FinalURL, res.Status, res.Title, specs[i].URL, title)
		}
	}
}

// countingSite serves the test site (20 items a page) and counts the
// requests whose path starts with prefix: a page asked for ("/page/"), or
// one whose script has run ("/api/item/").
func countingSite(t *testing.T, prefix string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	pages := testsite.New(testsite.Options{Items: 20})
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, prefix) {
			n.Add(1)
		}
		pages.ServeHTTP(w, r)
	}))
	t.Cleanup(site.Close)
	return site, &n
}
