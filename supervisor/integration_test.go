package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
)

// These tests run the supervisor on real Chromium against the local test
// site. Each Chrome boot costs about 1.3 CPU-seconds, so they boot few.

// realHarness runs a Supervisor with real Chromes whose profiles live under
// a directory of the test's own, so leftovers can be found by path.
type realHarness struct {
	s           *Supervisor
	profileRoot string
	stop        func() error
}

func startReal(t *testing.T, cfg Config) *realHarness {
	t.Helper()
	if testing.Short() {
		t.Skip("real Chromium: skipped in -short mode")
	}
	// Short on purpose: Chrome puts a unix socket under the profile, and a
	// socket path longer than 108 bytes makes it exit at start, which
	// t.TempDir()'s test-named paths can reach.
	root, err := os.MkdirTemp("", "sv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	cfg.Logger = zaptest.NewLogger(t)
	cfg.Browser.ProfileRoot = root
	// $FARM_TEST_BROWSER (shell or chrome) picks the binary, as in the
	// browser package's tests; the default is the farm's.
	kind, err := browser.ParseKind(os.Getenv("FARM_TEST_BROWSER"))
	if err != nil {
		t.Fatalf("FARM_TEST_BROWSER: %v", err)
	}
	cfg.Browser.Kind = kind
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-errc
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	return &realHarness{s: s, profileRoot: root, stop: stop}
}

// leftovers lists processes whose command line names the profile root, and
// entries left in it: after Run returns both must be empty.
func (h *realHarness) leftovers(t *testing.T) (pids []int, dirs []string) {
	t.Helper()
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		if strings.Contains(string(cmdline), h.profileRoot) {
			pids = append(pids, pid)
		}
	}
	entries, err := os.ReadDir(h.profileRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	return pids, dirs
}

func pageRequest(url string) browser.Request {
	return browser.Request{
		URL:     url,
		Wait:    browser.Wait{Selector: "#ready"},
		Extract: "document.querySelectorAll('li').length",
		Timeout: 30 * time.Second,
	}
}

// TestRealRecycleAndExit: capacity 6 on Chromes of 3 sessions, a new
// Chrome every 5 jobs, exit after 12: the two first Chromes take 10 jobs,
// one replacement the last 2 — exactly 3 Chromes started and killed —,
// never more than 6 renders at once, every job rendered,
// and nothing of Chrome left once Run returns.
func TestRealRecycleAndExit(t *testing.T) {
	site := testutil.StartSite(t, testsite.Options{Items: 50})
	cfg := DefaultConfig()
	cfg.SessionsPerChrome, cfg.ChromeRecycleJobs, cfg.ExitAfterJobs = 3, 5, 12
	h := startReal(t, cfg)

	var running, peak, busyPeak atomic.Int64
	sampleDone := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			busyPeak.Store(max(busyPeak.Load(), int64(h.s.Stats().Busy)))
			select {
			case <-sampleDone:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	var jobs atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for {
				sl, err := h.s.Acquire(context.Background())
				if errors.Is(err, ErrExitDue) {
					return
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				n := running.Add(1)
				peak.Store(max(peak.Load(), n))
				res, err := sl.Render(context.Background(), pageRequest(fmt.Sprintf("%s/page/%d", site.URL, w)))
				running.Add(-1)
				sl.Release()
				jobs.Add(1)
				if err == nil && string(res.Data) != "50" {
					err = fmt.Errorf("page rendered %s items, want 50", res.Data)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(sampleDone)
	<-sampled
	if len(errs) > 0 {
		t.Fatalf("render errors: %v", errs)
	}
	select {
	case <-h.s.ExitDue():
	case <-time.After(10 * time.Second):
		t.Fatal("ExitDue not closed")
	}
	testutil.Eventually(t, time.Minute, "last chrome killed", func() bool { return h.s.Stats().ChromeKills == 3 })
	if err := h.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := h.s.Stats()
	t.Logf("stats: %+v; peak renders %d, peak busy %d", st, peak.Load(), busyPeak.Load())
	if jobs.Load() != 12 || st.JobsSinceProcessStart != 12 {
		t.Errorf("jobs = %d (stats %d), want 12", jobs.Load(), st.JobsSinceProcessStart)
	}
	// The first Chrome spent is recycled; the second too, unless the
	// replacement took the process's last starts before the supervisor saw
	// it spent: it then retires for the exit.
	if st.ChromeStarts != 3 || st.ChromeKills != 3 || st.ChromeCrashes != 0 || st.Recycles < 1 || st.Recycles > 2 {
		t.Errorf("starts=%d kills=%d crashes=%d recycles=%d, want 3 3 0 and 1 or 2", st.ChromeStarts, st.ChromeKills, st.ChromeCrashes, st.Recycles)
	}
	if peak.Load() > 6 || busyPeak.Load() > 6 {
		t.Errorf("peak renders %d, peak busy %d: more than capacity 6", peak.Load(), busyPeak.Load())
	}
	h.noLeftovers(t)
}

// TestRealChromeWorkerFlood: a page that starts Web Workers without end
// (testsite /hostile/workers) costs its own tab, not its Chrome: the
// farm's guard lets a document start browser.MaxPageWorkers of them. Under
// health checks every 200 ms that give up after 2 s the flooding job ends
// at its own timeout with its Chrome never found hung, and the next job
// renders on that same Chrome. (Without the guard Chrome stopped answering
// within seconds: TestRealChromeNestedWorkerFlood.)
func TestRealChromeWorkerFlood(t *testing.T) {
	h, site, pid, _, err := floodJob(t, "/hostile/workers", 10*time.Second)
	if class := browser.ClassOf(err); class != browser.ClassTimeout {
		t.Fatalf("job on the flooding page: %v (class %q), want %q", err, class, browser.ClassTimeout)
	}
	if st := h.s.Stats(); st.ChromeCrashes != 0 {
		t.Fatalf("the flood took its Chrome down: %+v", st)
	}
	if got := h.renderPage1(t, site); got != pid {
		t.Errorf("the next job ran on chrome %d, want the flooded one, %d", got, pid)
	}
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	if st := h.s.Stats(); st.ChromeCrashes != 0 || st.ChromeStarts != 1 || st.ChromeKills != 1 {
		t.Errorf("stats: %+v, want no crash, 1 start, 1 kill", st)
	}
	h.noLeftovers(t)
}

// TestRealChromeNestedWorkerFlood: the same flood started from a worker
// (testsite /hostile/nested-workers), where the farm's guard does not run,
// most often wedges Chrome's browser process, not just its own tab: the
// health check catches it, the job fails as retriable unresponsive instead
// of running out its own timeout, and the next job runs on a fresh Chrome.
// Nothing of the hung Chrome is left behind. Sometimes the page's renderer
// dies first (1 of the first 4 runs here, at 24 s, the browser process
// answering every check until then): the job then fails as retriable
// crashed, and the next job may run on the same Chrome.
func TestRealChromeNestedWorkerFlood(t *testing.T) {
	const timeout = 2 * time.Minute
	h, site, pid, took, err := floodJob(t, "/hostile/nested-workers", timeout)
	if took >= timeout {
		t.Fatalf("the job ran out its own timeout (%v, %v): the hung Chrome was not caught", took, err)
	}
	t.Logf("flooding job failed after %v: %v", took, err)
	switch class := browser.ClassOf(err); {
	case !browser.IsRetriable(err):
		t.Fatalf("job on the flooding page: %v (class %q), want retriable", err, class)
	case class == browser.ClassUnresponsive:
		// Killed twice: the hung Chrome, then its replacement at the stop.
		h.nextJobOnFreshChrome(t, site, pid, 2)
	case class == browser.ClassCrashed:
		h.renderPage1(t, site)
		if err := h.stop(); err != nil {
			t.Fatal(err)
		}
		h.noLeftovers(t)
	default:
		t.Fatalf("job on the flooding page: %v (class %q), want %q or %q", err, class, browser.ClassUnresponsive, browser.ClassCrashed)
	}
}

// floodJob starts a supervisor of lossConfig(true) and renders the page at
// path of a test site in one of its slots, waiting for an element the page
// never makes so that the page floods until the job ends. It returns the
// harness, the site's URL, the pid of the Chrome the job ran on, how long
// the job took and its error.
func floodJob(t *testing.T, path string, timeout time.Duration) (h *realHarness, site string, pid int, took time.Duration, err error) {
	t.Helper()
	srv := httptest.NewServer(testsite.New(testsite.Options{Items: 20}))
	t.Cleanup(srv.Close)
	h = startReal(t, lossConfig(true))
	sl, err := h.s.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pid = sl.ChromePID()
	start := time.Now()
	_, err = sl.Render(context.Background(), browser.Request{URL: srv.URL + path, Wait: browser.Wait{Selector: "#never"}, Timeout: timeout})
	sl.Release()
	return h, srv.URL, pid, time.Since(start), err
}

// lossConfig is the supervisor of the tests that lose a Chrome: two slots
// on one Chrome (the job after the loss is on its replacement, whichever
// slot it takes), no recycling, and with fastHealth fast health checks
// (with a generous timeout: a loaded box is slow, not hung).
func lossConfig(fastHealth bool) Config {
	cfg := DefaultConfig()
	cfg.Capacity, cfg.SessionsPerChrome, cfg.ChromeRecycleJobs, cfg.ExitAfterJobs = 2, 2, Off, Off
	if fastHealth {
		cfg.HealthInterval, cfg.HealthTimeout = 200*time.Millisecond, 2*time.Second
	}
	return cfg
}

// nextJobOnFreshChrome checks what follows the loss of Chrome lost (its
// crash or hang already counted): the next job renders /page/1 of the test
// site at siteURL (20 items) on another Chrome; after the stop the stats
// hold one crash, two starts and wantKills kills, and nothing is left
// behind.
func (h *realHarness) nextJobOnFreshChrome(t *testing.T, siteURL string, lost, wantKills int) {
	t.Helper()
	if h.renderPage1(t, siteURL) == lost {
		t.Fatal("next job went to the lost chrome")
	}
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	if st := h.s.Stats(); st.ChromeCrashes != 1 || st.ChromeStarts != 2 || st.ChromeKills != wantKills {
		t.Errorf("stats: %+v, want 1 crash, 2 starts, %d kills", st, wantKills)
	}
	h.noLeftovers(t)
}

// renderPage1 renders /page/1 of the test site at siteURL (20 items) in a
// slot of its own and returns the pid of the Chrome it ran on.
func (h *realHarness) renderPage1(t *testing.T, siteURL string) int {
	t.Helper()
	sl, err := h.s.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pid := sl.ChromePID()
	res, err := sl.Render(context.Background(), pageRequest(siteURL+"/page/1"))
	sl.Release()
	if err != nil || string(res.Data) != "20" {
		t.Fatalf("job on chrome %d: %v, %v", pid, res, err)
	}
	return pid
}

// noLeftovers fails t if a process or profile directory of the stopped
// supervisor's Chromes is left.
func (h *realHarness) noLeftovers(t *testing.T) {
	t.Helper()
	if pids, dirs := h.leftovers(t); len(pids) > 0 || len(dirs) > 0 {
		t.Errorf("left behind: processes %v, profile dirs %v", pids, dirs)
	}
}

// TestRealChromeLostMidJob: kill -9 of Chrome, or SIGSTOP (a hang the
// health check must catch), while a job waits on a slow page fails that job
// as retriable, counts the loss, and the next job runs on a fresh Chrome.
func TestRealChromeLostMidJob(t *testing.T) {
	tests := []struct {
		name      string
		sig       syscall.Signal
		class     string
		wantKills int  // a hung Chrome is killed by the supervisor; a dead one only reaped
		health    bool // fast health checks (generous timeout: a loaded box is slow, not hung)
	}{
		{"kill -9", syscall.SIGKILL, browser.ClassCrashed, 1, false},
		{"SIGSTOP hang", syscall.SIGSTOP, browser.ClassUnresponsive, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			site := testsite.New(testsite.Options{Items: 20})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.URL.Path, "/slow/") {
					select {
					case arrived <- struct{}{}:
					default:
					}
				}
				site.ServeHTTP(w, r)
			}))
			defer srv.Close()

			h := startReal(t, lossConfig(tt.health))

			sl, err := h.s.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			pid := sl.ChromePID()
			errc := make(chan error, 1)
			go func() {
				_, err := sl.Render(context.Background(), browser.Request{URL: srv.URL + "/slow/20000", Timeout: 30 * time.Second})
				sl.Release()
				errc <- err
			}()
			select {
			case <-arrived:
			case <-time.After(20 * time.Second):
				t.Fatal("the slow page was never requested")
			}
			if err := syscall.Kill(pid, tt.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errc:
				if !browser.IsRetriable(err) || browser.ClassOf(err) != tt.class {
					t.Fatalf("job on the lost chrome: %v (class %q), want retriable %q", err, browser.ClassOf(err), tt.class)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("job on the lost chrome did not return")
			}
			h.nextJobOnFreshChrome(t, srv.URL, pid, tt.wantKills)
		})
	}
}
