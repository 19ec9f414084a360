package supervisor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/internal/testutil"
)

// TestLifecycleCounts works whole process lives through fake Chromes with
// more workers than slots, and checks every count the consumer relies on.
func TestLifecycleCounts(t *testing.T) {
	tests := []struct {
		name                                     string
		capacity, perChrome, recycle, exit, lead int
		wantChromes                              int
		// wantRecycles: the Chromes retired on their count, at least and at
		// most. A lane's Chrome spent at the process's last start retires
		// for the exit instead, or for its count when it is spent a start
		// earlier: which one comes first depends on the workers' turns.
		wantRecycles [2]int
	}{
		{"defaults: 80 jobs, 20 per chrome", 6, 6, 20, 80, 6, 4, [2]int{3, 3}},
		{"issue test shape", 6, 6, 5, 12, 6, 3, [2]int{2, 2}},
		{"lead off, tiny capacity", 2, 2, 3, 10, Off, 4, [2]int{3, 3}},
		{"recycling off", 6, 6, Off, 30, 6, 1, [2]int{0, 0}},
		{"lead beyond recycle", 3, 3, 7, 50, 20, 8, [2]int{7, 7}},
		// A Chrome per session: six of 20 take the process's 80 jobs, and
		// none is replaced. The lanes take about 13 each, but not exactly:
		// a start goes to the lane with the most starts left of those free
		// at that moment, and with every session busy only the one just
		// released is free, so a lane whose jobs the scheduler happens to
		// end first takes more (in one CI run one took 20, and retired on
		// its count as the process ended: recycles = 1). What must hold is
		// that no Chrome is booted for it; as many as four lanes could
		// reach 20 of 80.
		{"a chrome per session", 6, 1, 20, 80, 6, 6, [2]int{0, 4}},
		// Two lanes of 3 jobs a Chrome for 12: each lane's replacement, and
		// no more than the 12 jobs need.
		{"a chrome per session, recycled", 2, 1, 3, 12, 6, 4, [2]int{2, 3}},
		{"three sessions a chrome, recycled", 6, 3, 5, 24, 6, 5, [2]int{3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fleet := &fakeFleet{}
			fleet.setRender(func(ctx context.Context, c *fakeChrome) error {
				runtime.Gosched() // let other workers interleave
				return nil
			})
			cfg := testConfig()
			cfg.Capacity, cfg.SessionsPerChrome, cfg.ChromeRecycleJobs, cfg.ExitAfterJobs, cfg.ReplacementLead = tt.capacity, tt.perChrome, tt.recycle, tt.exit, tt.lead
			h := start(t, cfg, fleet)

			var wg sync.WaitGroup
			var mu sync.Mutex
			var workerErrs []error
			for range 2 * tt.capacity {
				wg.Go(func() {
					for {
						sl, err := h.s.Acquire(context.Background())
						if errors.Is(err, ErrExitDue) {
							return
						}
						if err != nil {
							mu.Lock()
							workerErrs = append(workerErrs, err)
							mu.Unlock()
							return
						}
						if _, err := sl.Render(context.Background(), browser.Request{URL: "http://127.0.0.1/p"}); err != nil {
							mu.Lock()
							workerErrs = append(workerErrs, err)
							mu.Unlock()
						}
						sl.Release()
					}
				})
			}
			wg.Wait()
			if len(workerErrs) > 0 {
				t.Fatalf("worker errors: %v", workerErrs)
			}
			select {
			case <-h.s.ExitDue():
			default:
				t.Fatal("ExitDue not closed after every job finished")
			}
			t.Cleanup(func() {
				if t.Failed() { // the Chromes' story, for the count that was off
					for _, e := range h.logs.All() {
						t.Logf("%s %v", e.Message, e.ContextMap())
					}
				}
			})
			testutil.Eventually(t, time.Minute, "last chrome killed", func() bool { return h.s.Stats().ChromeKills == tt.wantChromes })
			if err := h.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}

			st := h.s.Stats()
			if st.ChromeStarts != tt.wantChromes || st.ChromeKills != tt.wantChromes || st.ChromeCrashes != 0 {
				t.Errorf("starts=%d kills=%d crashes=%d, want %d/%d/0", st.ChromeStarts, st.ChromeKills, st.ChromeCrashes, tt.wantChromes, tt.wantChromes)
			}
			if st.JobsSinceProcessStart != tt.exit || st.Busy != 0 || !st.ExitDue || st.Remaining != 0 || st.Chromes != 0 {
				t.Errorf("stats after exit: %+v", st)
			}
			if st.Recycles < tt.wantRecycles[0] || st.Recycles > tt.wantRecycles[1] {
				t.Errorf("recycles = %d, want %d to %d", st.Recycles, tt.wantRecycles[0], tt.wantRecycles[1])
			}
			cs := fleet.snapshot()
			if len(cs) != tt.wantChromes {
				t.Errorf("launched %d chromes, want %d", len(cs), tt.wantChromes)
			}
			total := 0
			for _, c := range cs {
				if !c.killed() {
					t.Errorf("chrome %d not killed", c.pid)
				}
				n := c.renderCount()
				total += n
				if tt.recycle > 0 && n > tt.recycle {
					t.Errorf("chrome %d ran %d jobs, limit %d", c.pid, n, tt.recycle)
				}
			}
			if total != tt.exit {
				t.Errorf("rendered %d jobs, want %d", total, tt.exit)
			}
			if p := fleet.peak(); p > tt.capacity {
				t.Errorf("peak concurrent sessions %d > capacity %d", p, tt.capacity)
			}

			// Every Chrome event is one structured line with its pid.
			for msg, want := range map[string]int{"chrome started": tt.wantChromes, "chrome retired": tt.wantChromes, "chrome killed": tt.wantChromes} {
				lines := h.logs.FilterMessage(msg).All()
				if len(lines) != want {
					t.Errorf("%d %q lines, want %d", len(lines), msg, want)
				}
				for _, l := range lines {
					f := l.ContextMap()
					for _, k := range []string{"pid", "chrome", "reason"} {
						if _, ok := f[k]; !ok {
							t.Errorf("%q line lacks %q: %v", msg, k, f)
						}
					}
				}
			}
			for _, l := range h.logs.FilterMessage("chrome killed").All() {
				f := l.ContextMap()
				if _, ok := f["pss_bytes"]; !ok || f["jobs"] == nil {
					t.Errorf("kill line lacks pss_bytes or jobs: %v", f)
				}
			}
		})
	}
}

// TestOverlapKeepsCapacity holds a job on a retiring Chrome while the new
// one serves: the two together never exceed Capacity, and the old one dies
// only when its last job is done.
func TestOverlapKeepsCapacity(t *testing.T) {
	fleet := &fakeFleet{}
	g := newGate()
	fleet.setRender(g.render)
	cfg := testConfig()
	cfg.Capacity, cfg.ChromeRecycleJobs, cfg.ExitAfterJobs, cfg.ReplacementLead = 2, 2, Off, Off
	h := start(t, cfg, fleet)

	a, b := h.acquire(), h.acquire()
	c1 := h.chrome(0)
	errA, errB := renderAsync(a), renderAsync(b)
	g.waitStarted(t)
	g.waitStarted(t)
	c2 := h.chrome(1) // booted because chrome 1 handed out its last start

	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if sl, err := h.s.Acquire(short); err == nil {
		sl.Release()
		t.Fatal("acquired a third slot with capacity 2")
	}
	cancel()

	g.finish(t, c1)
	errs := []error{}
	select {
	case err := <-errA:
		errs = append(errs, err)
	case err := <-errB:
		errs = append(errs, err)
	case <-time.After(10 * time.Second):
		t.Fatal("no render finished")
	}
	c := h.acquire()
	if c.ChromePID() != c2.pid {
		t.Fatalf("third job on pid %d, want the new chrome %d", c.ChromePID(), c2.pid)
	}
	errC := renderAsync(c)
	g.waitStarted(t)
	if st := h.s.Stats(); st.Busy != 2 || st.Chromes != 2 || c1.killed() {
		t.Fatalf("during overlap: busy=%d chromes=%d old killed=%v", st.Busy, st.Chromes, c1.killed())
	}
	g.finish(t, c1)
	testutil.Eventually(t, time.Minute, "old chrome killed after its last job", c1.killed)
	g.finish(t, c2)
	errs = append(errs, recv(t, errC))
	select {
	case err := <-errA:
		errs = append(errs, err)
	case err := <-errB:
		errs = append(errs, err)
	}
	for _, err := range errs {
		if err != nil {
			t.Errorf("render: %v", err)
		}
	}
	if p := fleet.peak(); p > 2 {
		t.Errorf("peak sessions %d > 2", p)
	}
}

// TestPrebootBeforeLastStart checks that the replacement is up before the
// current Chrome hands out its last start, so the next job does not wait,
// and that it comes to the foreground only when it takes over.
func TestPrebootBeforeLastStart(t *testing.T) {
	fleet := &fakeFleet{}
	cfg := testConfig()
	cfg.ChromeRecycleJobs, cfg.ExitAfterJobs, cfg.ReplacementLead = 4, Off, 2
	h := start(t, cfg, fleet)

	held := []*Slot{h.acquire(), h.acquire()}
	c1 := h.chrome(0)
	c2 := h.chrome(1) // booting starts with 2 starts left
	testutil.Eventually(t, time.Minute, "replacement booted", func() bool { return h.s.Stats().ChromeStarts == 2 })
	if pid := h.s.Stats().ChromePID; pid != c1.pid {
		t.Fatalf("current chrome %d, want %d still serving", pid, c1.pid)
	}
	// The standby stays in the background, where it boots, until it serves.
	if f1, f2 := c1.foregroundCount(), c2.foregroundCount(); f1 != 1 || f2 != 0 {
		t.Fatalf("foreground calls: serving chrome %d, standby %d; want 1 and 0", f1, f2)
	}
	held = append(held, h.acquire(), h.acquire())
	for _, sl := range held {
		if sl.ChromePID() != c1.pid {
			t.Fatalf("start %d went to pid %d, want %d", len(held), sl.ChromePID(), c1.pid)
		}
	}
	next := h.acquire()
	if next.ChromePID() != c2.pid {
		t.Fatalf("fifth start on pid %d, want the replacement %d", next.ChromePID(), c2.pid)
	}
	testutil.Eventually(t, time.Minute, "replacement in the foreground", func() bool { return c2.foregroundCount() == 1 })
	for _, sl := range append(held, next) {
		if _, err := sl.Render(context.Background(), browser.Request{}); err != nil {
			t.Fatal(err)
		}
		sl.Release()
	}
	// Killed, and the kill counted (after Kill returns).
	testutil.Eventually(t, time.Minute, "old chrome killed", func() bool { return c1.killed() && h.s.Stats().ChromeKills == 1 })
	if st := h.s.Stats(); st.Recycles != 1 || st.ChromeKills != 1 || st.JobsSinceChromeStart != 1 || st.JobsSinceProcessStart != 5 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestChromeLoss covers a Chrome that dies or hangs mid-job: the job fails
// as retriable with the right class, the loss is counted, and the next job
// runs on a fresh Chrome.
func TestChromeLoss(t *testing.T) {
	tests := []struct {
		name      string
		cfg       func(*Config)
		lose      func(*fakeChrome)
		class     string
		wantKills int
	}{
		{"crash", func(*Config) {}, (*fakeChrome).exit, "crashed", 0},
		{"hang", func(c *Config) { c.HealthInterval = 2 * time.Millisecond },
			func(c *fakeChrome) { c.set(func(c *fakeChrome) { c.unhealthy = true }) }, "unresponsive", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fleet := &fakeFleet{}
			g := newGate()
			fleet.setRender(g.render)
			cfg := testConfig()
			tt.cfg(&cfg)
			h := start(t, cfg, fleet)

			errc := renderAsync(h.acquire())
			c1 := g.waitStarted(t)
			held := h.acquire() // its job not begun when the Chrome is lost
			if held.ChromePID() != c1.pid {
				t.Fatalf("second slot on chrome %d, want %d", held.ChromePID(), c1.pid)
			}
			tt.lose(c1)
			err := recv(t, errc)
			var be *browser.Error
			if !errors.As(err, &be) || !be.Retriable || be.Class != tt.class {
				t.Fatalf("render error = %v, want retriable %q", err, tt.class)
			}
			if browser.FailedBeforePage(err) {
				t.Errorf("the job under way: %v, want it not failed before its page", err)
			}
			testutil.Eventually(t, time.Minute, "crash counted", func() bool { return h.s.Stats().ChromeCrashes == 1 })
			testutil.Eventually(t, time.Minute, "lost chrome killed", c1.killed)
			_, err = held.Render(context.Background(), browser.Request{})
			if !errors.As(err, &be) || !be.Retriable || be.Class != tt.class || !browser.FailedBeforePage(err) {
				t.Fatalf("render begun on the lost chrome: %v, want retriable %q, failed before its page", err, tt.class)
			}
			held.Release()

			fleet.setRender(nil)
			sl := h.acquire()
			if sl.ChromePID() == c1.pid {
				t.Fatal("next job went to the lost chrome")
			}
			if _, err := sl.Render(context.Background(), browser.Request{}); err != nil {
				t.Fatalf("render on replacement: %v", err)
			}
			sl.Release()
			c1.mu.Lock()
			reaped := c1.kills
			c1.mu.Unlock()
			if reaped != 1 {
				t.Errorf("lost chrome Kill called %d times, want 1 (reap and profile cleanup)", reaped)
			}
			st := h.s.Stats()
			if st.ChromeStarts != 2 || st.ChromeKills != tt.wantKills || st.JobsSinceProcessStart != 3 {
				t.Errorf("stats: %+v", st)
			}
			if n := h.logs.FilterMessage("chrome " + tt.class).Len(); n != 1 {
				t.Errorf("%d loss log lines, want 1", n)
			}
		})
	}
}

// TestChromePerSessionLoss: with a Chrome per session, a crash fails the
// job on that Chrome only — the other session's job, on its own Chrome,
// finishes — and the lost Chrome is replaced although the other Chrome
// could take every start the process has left: a lane is not left empty.
func TestChromePerSessionLoss(t *testing.T) {
	fleet := &fakeFleet{}
	g := newGate()
	fleet.setRender(g.render)
	cfg := testConfig()
	cfg.Capacity, cfg.SessionsPerChrome, cfg.ChromeRecycleJobs, cfg.ExitAfterJobs = 2, 1, 20, 10
	h := start(t, cfg, fleet)

	errA := renderAsync(h.acquire())
	a := g.waitStarted(t)
	errB := renderAsync(h.acquire())
	b := g.waitStarted(t)
	if a.pid == b.pid {
		t.Fatalf("both jobs on chrome %d, want a chrome each", a.pid)
	}
	a.exit()
	if err := recv(t, errA); browser.ClassOf(err) != browser.ClassCrashed {
		t.Fatalf("job on the crashed chrome: %v, want crashed", err)
	}
	testutil.Eventually(t, time.Minute, "a replacement", func() bool { return h.s.Stats().ChromeStarts == 3 })
	g.finish(t, b)
	if err := recv(t, errB); err != nil {
		t.Fatalf("job on the other chrome: %v", err)
	}
	// Both lanes serve again: two slots held at once, on two live Chromes
	// that are not the lost one.
	fleet.setRender(nil)
	s1, s2 := h.acquire(), h.acquire()
	if s1.ChromePID() == s2.ChromePID() || s1.ChromePID() == a.pid || s2.ChromePID() == a.pid {
		t.Errorf("slots on chromes %d and %d after chrome %d was lost", s1.ChromePID(), s2.ChromePID(), a.pid)
	}
	s1.Release()
	s2.Release()
	if st := h.s.Stats(); st.ChromeCrashes != 1 || st.Chromes != 2 {
		t.Errorf("stats: %+v, want 1 crash, 2 live chromes", st)
	}
}

// TestSuspectChromeTakesNoNewJob: a Chrome that failed its latest health
// check, but not enough of them in a row to be declared hung, gets no new
// session until it passes one — a job started on a hung Chrome waits out
// its tab's time and fails — and then serves again, not replaced.
func TestSuspectChromeTakesNoNewJob(t *testing.T) {
	fleet := &fakeFleet{}
	cfg := testConfig()
	cfg.HealthInterval = 2 * time.Millisecond
	cfg.HealthFailures = 1 << 20 // never declared hung here
	cfg.BurstSpacing = Off       // a start waits for nothing but the Chrome
	h := start(t, cfg, fleet)
	sl := h.acquire() // the first Chrome serves
	c1 := h.chrome(0)
	sl.Release()
	failures := func() int { return h.s.Stats().HealthFailures }
	c1.set(func(c *fakeChrome) { c.unhealthy = true })
	testutil.Eventually(t, time.Minute, "a failed health check", func() bool { return failures() >= 1 })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type acquired struct {
		sl  *Slot
		err error
	}
	got := make(chan acquired, 1)
	go func() {
		sl, err := h.s.Acquire(ctx)
		got <- acquired{sl, err}
	}()
	n := failures()
	testutil.Eventually(t, time.Minute, "more failed health checks", func() bool { return failures() >= n+5 })
	select {
	case a := <-got:
		t.Fatalf("Acquire returned (%v, %v) on a Chrome that failed its latest health check", a.sl != nil, a.err)
	default:
	}

	c1.set(func(c *fakeChrome) { c.unhealthy = false })
	var a acquired
	select {
	case a = <-got:
	case <-time.After(time.Minute):
		t.Fatal("no slot once the Chrome passed a health check")
	}
	if a.err != nil {
		t.Fatalf("Acquire: %v", a.err)
	}
	waited := a.sl
	if waited.ChromePID() != c1.pid {
		t.Errorf("slot on chrome %d, want the same chrome %d", waited.ChromePID(), c1.pid)
	}
	if _, err := waited.Render(context.Background(), browser.Request{}); err != nil {
		t.Errorf("render: %v", err)
	}
	waited.Release()
	if st := h.s.Stats(); st.ChromeStarts != 1 || st.ChromeCrashes != 0 {
		t.Errorf("stats: %+v, want one chrome, none lost", st)
	}
	// Logged after the Chrome is back in service: perhaps after the slot.
	testutil.Eventually(t, time.Minute, "the recovery logged", func() bool {
		return h.logs.FilterMessage("chrome healthy again").Len() == 1
	})
}

// TestJobProbeMakesChromeSuspect: a job whose own probe found its Chrome
// not answering (the render failed unresponsive) makes that Chrome suspect
// before any health check has failed: no job starts on it, and its monitor
// checks it at once rather than at the next tick (an hour away here), not
// after the failed session's close, which a hung Chrome holds up. Once the
// check passes, the next job gets a slot on the same Chrome.
func TestJobProbeMakesChromeSuspect(t *testing.T) {
	checking := make(chan struct{}, 1) // a health check began
	pass := make(chan struct{})        // closed: health checks pass
	release := sync.OnceFunc(func() { close(pass) })
	fleet := &fakeFleet{
		render: unresponsiveFirst(),
		health: func(ctx context.Context, c *fakeChrome) error {
			select {
			case checking <- struct{}{}:
			default:
			}
			select {
			case <-pass:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		close: func(*fakeChrome) { <-pass }, // as on a Chrome that does not answer
	}
	cfg := testConfig()
	cfg.HealthInterval = time.Hour // no check but the one the job asks for
	cfg.HealthTimeout = time.Hour  // which passes only when the test says so
	cfg.BurstSpacing = Off         // a start waits for nothing but the Chrome
	// One failure declares a Chrome hung: the probe alone must not, which
	// the default, 2, would not show.
	cfg.HealthFailures = 1
	h := start(t, cfg, fleet)
	t.Cleanup(release) // before the harness stops, should the test end early
	sl := h.acquire()
	c1 := h.chrome(0)
	rendered := make(chan error, 1)
	go func() {
		_, err := sl.Render(context.Background(), browser.Request{})
		sl.Release()
		rendered <- err
	}()
	select {
	case <-checking:
	case <-time.After(time.Minute):
		t.Fatal("no health check after a job found the Chrome not answering")
	}
	// The check is under way and has not passed: a start must wait for
	// it. Acquire gets its ctx's error, not a slot.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	early, err := h.s.Acquire(ctx)
	cancel()
	if err == nil {
		early.Release()
		t.Fatalf("Acquire gave a slot on chrome %d while a job's probe had found it not answering", early.ChromePID())
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v, want its ctx's deadline", err)
	}

	release()
	if err := <-rendered; browser.ClassOf(err) != browser.ClassUnresponsive {
		t.Fatalf("render: %v, want class %q", err, browser.ClassUnresponsive)
	}
	next := h.acquire()
	if next.ChromePID() != c1.pid {
		t.Errorf("slot on chrome %d, want the same chrome %d", next.ChromePID(), c1.pid)
	}
	if _, err := next.Render(context.Background(), browser.Request{}); err != nil {
		t.Errorf("render: %v", err)
	}
	next.Release()
	if st := h.s.Stats(); st.ChromeStarts != 1 || st.ChromeCrashes != 0 || st.HealthFailures != 0 {
		t.Errorf("stats: %+v, want one chrome, none lost, no failed check", st)
	}
	if n := h.logs.FilterMessage("chrome did not answer a job's probe").Len(); n != 1 {
		t.Errorf("%d probe log lines, want 1", n)
	}
	testutil.Eventually(t, time.Minute, "the recovery logged", func() bool {
		return h.logs.FilterMessage("chrome healthy again").FilterField(zap.Bool("job_probe_failed", true)).Len() == 1
	})
}

// TestJobProbeBesideFailedCheckDeclaresHung: a job's own finding that its
// Chrome does not answer counts as one failed health check beside a failed
// check, in either order, so with HealthFailures 2 the Chrome is replaced
// after one check's timeout rather than two; the next job runs on its
// replacement. Alone the finding declares nothing
// (TestJobProbeMakesChromeSuspect).
func TestJobProbeBesideFailedCheckDeclaresHung(t *testing.T) {
	for _, tc := range []struct {
		name       string
		interval   time.Duration // health checks; an hour: only the one the job asks for
		checkFirst bool          // the check fails before the job's probe
	}{
		{name: "probe then check", interval: time.Hour},
		{name: "check then probe", interval: time.Millisecond, checkFirst: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verdict := make(chan error) // each check returns what the test sends
			fleet := &fakeFleet{
				render: unresponsiveFirst(),
				health: func(ctx context.Context, c *fakeChrome) error {
					select {
					case err := <-verdict:
						return err
					case <-ctx.Done():
						return ctx.Err()
					}
				},
			}
			cfg := testConfig()
			cfg.HealthInterval, cfg.HealthTimeout, cfg.HealthFailures = tc.interval, time.Hour, 2
			cfg.BurstSpacing = Off
			h := start(t, cfg, fleet)
			sl := h.acquire() // before any check fails: a suspect Chrome starts no job
			c1 := h.chrome(0)
			failCheck := func() {
				t.Helper()
				select {
				case verdict <- errors.New("fake: no CDP answer"):
				case <-time.After(time.Minute):
					t.Fatal("no health check under way")
				}
			}
			if tc.checkFirst {
				failCheck()
				testutil.Eventually(t, time.Minute, "the failed check counted", func() bool { return h.s.Stats().HealthFailures == 1 })
				if c1.killed() {
					t.Fatal("chrome killed after one failed check")
				}
			}
			if _, err := sl.Render(context.Background(), browser.Request{}); browser.ClassOf(err) != browser.ClassUnresponsive {
				t.Fatalf("render: %v, want class %q", err, browser.ClassUnresponsive)
			}
			sl.Release()
			if !tc.checkFirst {
				failCheck() // the check the job asked for
			}
			testutil.Eventually(t, time.Minute, "the chrome declared hung and killed", c1.killed)
			next := h.acquire()
			if next.ChromePID() == c1.pid {
				t.Errorf("next job on the hung chrome %d", c1.pid)
			}
			if _, err := next.Render(context.Background(), browser.Request{}); err != nil {
				t.Errorf("render: %v", err)
			}
			next.Release()
			if st := h.s.Stats(); st.ChromeStarts != 2 || st.ChromeCrashes != 1 || st.HealthFailures != 1 {
				t.Errorf("stats: %+v, want two chromes, one lost, one failed check", st)
			}
			if n := h.logs.FilterMessage("chrome unresponsive").Len(); n != 1 {
				t.Errorf("%d chrome unresponsive log lines, want 1", n)
			}
		})
	}
}

// unresponsiveFirst is a fake render whose first job fails as a session
// does whose own probe found its Chrome not answering; the later ones pass.
func unresponsiveFirst() func(ctx context.Context, c *fakeChrome) error {
	var renders atomic.Int32
	return func(ctx context.Context, c *fakeChrome) error {
		if renders.Add(1) == 1 {
			return &browser.Error{Class: browser.ClassUnresponsive, Retriable: true, Err: errors.New("fake: chrome did not answer the job's probe")}
		}
		return nil
	}
}

// TestSuspectChromeHandsOverToReadyStandby: a Chrome that fails a health
// check while its replacement is booted and ready is retired at once, not
// after its remaining starts: the next job runs on the replacement instead
// of waiting for the next check's verdict, and the jobs in flight on the
// suspect Chrome finish there before it is killed.
func TestSuspectChromeHandsOverToReadyStandby(t *testing.T) {
	fleet := &fakeFleet{}
	cfg := testConfig()
	cfg.ChromeRecycleJobs, cfg.ExitAfterJobs, cfg.ReplacementLead = 10, Off, 5
	cfg.HealthInterval = 2 * time.Millisecond
	cfg.HealthFailures = 1 << 20 // never declared hung here
	h := start(t, cfg, fleet)
	var held []*Slot
	for range 5 { // 5 starts left: the replacement boots
		held = append(held, h.acquire())
	}
	c1 := h.chrome(0)
	c2 := h.chrome(1)
	testutil.Eventually(t, time.Minute, "replacement booted", func() bool { return h.s.Stats().ChromeStarts == 2 })
	if pid := h.s.Stats().ChromePID; pid != c1.pid {
		t.Fatalf("current chrome %d, want %d still serving", pid, c1.pid)
	}

	c1.set(func(c *fakeChrome) { c.unhealthy = true })
	testutil.Eventually(t, time.Minute, "the replacement serving", func() bool { return h.s.Stats().ChromePID == c2.pid })
	if c1.killed() {
		t.Fatal("the suspect chrome killed with jobs on it")
	}
	next := h.acquire()
	if next.ChromePID() != c2.pid {
		t.Fatalf("next job on chrome %d, want the replacement %d", next.ChromePID(), c2.pid)
	}
	for _, sl := range append(held, next) {
		if _, err := sl.Render(context.Background(), browser.Request{}); err != nil {
			t.Errorf("render on chrome %d: %v", sl.ChromePID(), err)
		}
		sl.Release()
	}
	testutil.Eventually(t, time.Minute, "the suspect chrome killed", func() bool { return c1.killed() && h.s.Stats().ChromeKills == 1 })
	if st := h.s.Stats(); st.ChromeStarts != 2 || st.ChromeCrashes != 0 || st.Recycles != 0 {
		t.Errorf("stats: %+v, want two chromes, none lost, no recycle", st)
	}
	retired := h.logs.FilterMessage("chrome retired").All()
	if len(retired) != 1 || retired[0].ContextMap()["reason"] != reasonSuspect {
		t.Errorf("retire log lines: %v, want one, reason %q", retired, reasonSuspect)
	}
}

// TestMemoryCeiling retires a Chrome whose tree passed the PSS ceiling once
// its replacement is up, before its job quota.
func TestMemoryCeiling(t *testing.T) {
	fleet := &fakeFleet{}
	cfg := testConfig()
	cfg.MemoryCeilingBytes, cfg.MemoryInterval = 1000, 2*time.Millisecond
	h := start(t, cfg, fleet)

	held := h.acquire()
	c1 := h.chrome(0)
	c1.set(func(c *fakeChrome) { c.pss = 5000 })
	c2 := h.chrome(1)
	testutil.Eventually(t, time.Minute, "replacement serving", func() bool { return h.s.Stats().ChromePID == c2.pid })
	if c1.killed() {
		t.Fatal("over-memory chrome killed with a job on it")
	}
	if sl := h.acquire(); sl.ChromePID() != c2.pid {
		t.Fatalf("new job on pid %d, want %d", sl.ChromePID(), c2.pid)
	} else {
		sl.Release()
	}
	held.Release()
	testutil.Eventually(t, time.Minute, "over-memory chrome killed", func() bool { return c1.killed() && h.s.Stats().ChromeKills == 1 })
	if st := h.s.Stats(); st.Recycles != 1 || st.ChromeKills != 1 {
		t.Fatalf("stats: %+v", st)
	}
	hit := h.logs.FilterMessage("chrome memory ceiling hit").All()
	if len(hit) != 1 || hit[0].ContextMap()["pss_bytes"] != uint64(5000) {
		t.Fatalf("ceiling log lines: %v", hit)
	}
	testutil.Eventually(t, time.Minute, "kill logged", func() bool { return h.logs.FilterMessage("chrome killed").Len() == 1 })
	if kill := h.logs.FilterMessage("chrome killed").All()[0].ContextMap(); kill["reason"] != reasonMemory || kill["pss_bytes"] != uint64(5000) {
		t.Fatalf("kill line: %v", kill)
	}
}

// startDrainTimeout starts a supervisor that retires its Chrome after one
// job and gives a retiring Chrome 20 ms, its renders held by the gate.
func startDrainTimeout(t *testing.T) (*harness, *gate, Config) {
	fleet := &fakeFleet{}
	g := newGate()
	fleet.setRender(g.render)
	cfg := testConfig()
	cfg.ChromeRecycleJobs, cfg.ExitAfterJobs, cfg.ReplacementLead, cfg.DrainTimeout = 1, Off, Off, 20*time.Millisecond
	return start(t, cfg, fleet), g, cfg
}

// TestDrainTimeout kills a retiring Chrome whose job outlives DrainTimeout;
// the job fails as retriable.
func TestDrainTimeout(t *testing.T) {
	h, g, _ := startDrainTimeout(t)

	errc := renderAsync(h.acquire())
	c1 := g.waitStarted(t)
	err := recv(t, errc)
	if !browser.IsRetriable(err) || !strings.Contains(err.Error(), reasonDrain) {
		t.Fatalf("render error = %v, want retriable drain timeout", err)
	}
	testutil.Eventually(t, time.Minute, "chrome killed", func() bool { return c1.killed() && h.s.Stats().ChromeKills == 1 })
	if st := h.s.Stats(); st.DrainTimeouts != 1 || st.ChromeKills != 1 || st.ChromeCrashes != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestDrainWaitsForTheJobsOwnDeadline: a retiring Chrome's drain is
// DrainTimeout past the latest deadline of a render started on it, not past
// its retirement: a job may run for its own timeout whatever the recycling.
func TestDrainWaitsForTheJobsOwnDeadline(t *testing.T) {
	h, g, cfg := startDrainTimeout(t)
	sl := h.acquire()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := sl.Render(ctx, browser.Request{URL: "http://127.0.0.1/long"})
		sl.Release()
		errc <- err
	}()
	c1 := g.waitStarted(t)
	testutil.Eventually(t, time.Minute, "chrome retired", func() bool { return h.logs.FilterMessage("chrome retired").Len() == 1 })
	jobDue, _ := ctx.Deadline()
	h.s.mu.Lock()
	due := sl.c.drainDeadline(cfg.DrainTimeout)
	h.s.mu.Unlock()
	if !due.Equal(jobDue.Add(cfg.DrainTimeout)) {
		t.Fatalf("drain deadline %v, want the job's own deadline plus DrainTimeout (%v)", due, jobDue.Add(cfg.DrainTimeout))
	}
	// Well past DrainTimeout from the retirement, the job still runs.
	retired := time.Now()
	testutil.Eventually(t, time.Minute, "ten drain timeouts gone by", func() bool { return time.Since(retired) > 10*cfg.DrainTimeout })
	select {
	case err := <-errc:
		t.Fatalf("the job ended before its own deadline: %v", err)
	default:
	}
	g.finish(t, c1)
	if err := recv(t, errc); err != nil {
		t.Fatalf("a job within its own deadline failed: %v", err)
	}
	testutil.Eventually(t, time.Minute, "chrome killed once drained", c1.killed)
	if st := h.s.Stats(); st.DrainTimeouts != 0 {
		t.Fatalf("stats: %+v, want no drain timeout", st)
	}
}

// TestChromeDrainDeadline: DrainTimeout counts from the later of the
// retirement and the latest render deadline.
func TestChromeDrainDeadline(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		jobsDue time.Time
		want    time.Time
	}{
		{"no deadline", time.Time{}, at.Add(2 * time.Minute)},
		{"a job due later", at.Add(5 * time.Minute), at.Add(7 * time.Minute)},
		{"a job due before the retirement", at.Add(-time.Minute), at.Add(2 * time.Minute)},
	} {
		c := &chrome{retiredAt: at, jobsDue: tc.jobsDue}
		if got := c.drainDeadline(2 * time.Minute); !got.Equal(tc.want) {
			t.Errorf("%s: drainDeadline = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDrain is the SIGTERM path: no new slots, in-flight jobs finish, then
// every Chrome is killed.
func TestDrain(t *testing.T) {
	fleet := &fakeFleet{}
	g := newGate()
	fleet.setRender(g.render)
	h := start(t, testConfig(), fleet)

	e1, e2 := renderAsync(h.acquire()), renderAsync(h.acquire())
	c1 := g.waitStarted(t)
	g.waitStarted(t)
	drained := make(chan error, 1)
	go func() { drained <- h.s.Drain(context.Background()) }()
	testutil.Eventually(t, time.Minute, "stopping", func() bool { return h.s.Stats().Stopping })
	if _, err := h.s.Acquire(context.Background()); !errors.Is(err, ErrStopping) {
		t.Fatalf("Acquire while draining = %v, want ErrStopping", err)
	}
	if n := h.s.Available(); n != 0 {
		t.Fatalf("Available while draining = %d", n)
	}
	g.finish(t, c1)
	g.finish(t, c1)
	for _, errc := range []<-chan error{e1, e2, drained} {
		if err := recv(t, errc); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, time.Minute, "chrome killed after drain", c1.killed)
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	if st := h.s.Stats(); st.JobsSinceProcessStart != 2 || st.ChromeKills != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestDrainDeadline(t *testing.T) {
	fleet := &fakeFleet{}
	h := start(t, testConfig(), fleet)
	sl := h.acquire()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := h.s.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain with a held slot = %v, want deadline exceeded", err)
	}
	sl.Release()
}

// TestStopKillsEverything cancels Run with jobs in flight on two Chromes:
// Run returns only after both are killed, and the jobs fail as retriable.
func TestStopKillsEverything(t *testing.T) {
	fleet := &fakeFleet{}
	g := newGate()
	fleet.setRender(g.render)
	cfg := testConfig()
	cfg.ChromeRecycleJobs, cfg.ExitAfterJobs, cfg.ReplacementLead = 2, Off, Off
	h := start(t, cfg, fleet)

	var errcs []<-chan error
	for range 3 {
		errcs = append(errcs, renderAsync(h.acquire()))
		g.waitStarted(t)
	}
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	for _, c := range fleet.snapshot() {
		if !c.killed() {
			t.Errorf("chrome %d alive after Run returned", c.pid)
		}
	}
	for _, errc := range errcs {
		if err := recv(t, errc); !browser.IsRetriable(err) {
			t.Errorf("in-flight job error = %v, want retriable", err)
		}
	}
	if _, err := h.s.Acquire(context.Background()); !errors.Is(err, ErrStopping) {
		t.Fatalf("Acquire after Run = %v, want ErrStopping", err)
	}
	if st := h.s.Stats(); st.ChromeStarts != 2 || st.ChromeKills != 2 || st.Busy != 0 || st.Chromes != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestStopDuringBoot(t *testing.T) {
	fleet := &fakeFleet{blockBoot: true}
	h := start(t, testConfig(), fleet)
	testutil.Eventually(t, time.Minute, "boot started", func() bool {
		fleet.mu.Lock()
		defer fleet.mu.Unlock()
		return fleet.launches == 1
	})
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	if st := h.s.Stats(); st.ChromeStarts != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestBootFailures(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		fleet := &fakeFleet{failBoots: 2}
		h := start(t, testConfig(), fleet)
		h.acquire().Release()
		if st := h.s.Stats(); st.BootFailures != 2 || st.ChromeStarts != 1 {
			t.Fatalf("stats: %+v", st)
		}
	})
	// Six Chromes booting at once, each failing once: one failure of each
	// lane, not six in a row, so MaxBootFailures 3 does not give up.
	t.Run("a wave over lanes, retried", func(t *testing.T) {
		fleet := &fakeFleet{failBoots: 6}
		cfg := testConfig()
		cfg.SessionsPerChrome, cfg.MaxBootFailures = 1, 3
		h := start(t, cfg, fleet)
		h.acquire().Release()
		testutil.Eventually(t, time.Minute, "six chromes up", func() bool { return h.s.Stats().ChromeStarts == 6 })
		if st := h.s.Stats(); st.BootFailures != 6 || st.Stopping {
			t.Fatalf("stats: %+v", st)
		}
	})
	t.Run("fatal", func(t *testing.T) {
		fleet := &fakeFleet{failBoots: 1000}
		cfg := testConfig()
		cfg.MaxBootFailures = 3
		h := start(t, cfg, fleet)
		_, err := h.s.Acquire(context.Background())
		if !errors.Is(err, ErrStopping) || !strings.Contains(err.Error(), "3 times") {
			t.Fatalf("Acquire = %v, want ErrStopping with the boot failure", err)
		}
		if err := h.stop(); err == nil || !strings.Contains(err.Error(), "fake boot 3 failed") {
			t.Fatalf("Run = %v, want the boot failure", err)
		}
	})
}

// TestUnusedSlotGivesStartBack: a consumer may acquire, find no job, and
// release; that start does not count against the process.
func TestUnusedSlotGivesStartBack(t *testing.T) {
	fleet := &fakeFleet{}
	cfg := testConfig()
	cfg.ExitAfterJobs = 3
	h := start(t, cfg, fleet)

	slots := []*Slot{h.acquire(), h.acquire(), h.acquire()}
	if _, err := h.s.Acquire(context.Background()); !errors.Is(err, ErrExitDue) {
		t.Fatalf("fourth Acquire = %v, want ErrExitDue", err)
	}
	if r, a := h.s.Remaining(), h.s.Available(); r != 0 || a != 0 {
		t.Fatalf("Remaining=%d Available=%d, want 0 0", r, a)
	}
	slots[2].Release()
	if r, a := h.s.Remaining(), h.s.Available(); r != 1 || a != 1 {
		t.Fatalf("after giving back: Remaining=%d Available=%d, want 1 1", r, a)
	}
	slots[2] = h.acquire()
	for _, sl := range slots {
		if _, err := sl.Render(context.Background(), browser.Request{}); err != nil {
			t.Fatal(err)
		}
		sl.Release()
	}
	select {
	case <-h.s.ExitDue():
	default:
		t.Fatal("ExitDue not closed")
	}
	if st := h.s.Stats(); st.JobsSinceProcessStart != 3 || st.ChromeStarts != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestUnusedStartForfeitedAfterTheLastStart: a start given back on an older
// Chrome once the process has handed out its last one, while the current
// Chrome has none left to give, is forfeited; handing it back would boot a
// Chrome to run one job before the exit.
func TestUnusedStartForfeitedAfterTheLastStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		// last is the process's last start count; the current Chrome
		// (Chrome 1) gets the starts from 3 to last.
		last int
		// retired: the current Chrome has finished its jobs and been
		// retired before the start is given back; else it is busy with
		// them, its recycle count spent.
		retired bool
	}{
		{"current retired", 3, true},
		{"current busy and spent", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fleet := &fakeFleet{}
			cfg := testConfig()
			cfg.ChromeRecycleJobs, cfg.ExitAfterJobs, cfg.ReplacementLead = 2, tc.last, 1
			h := start(t, cfg, fleet)

			unused := h.acquire()        // Chrome 0's first start, never rendered
			used := []*Slot{h.acquire()} // its second and last: Chrome 1 takes over
			for range tc.last - 2 {      // the process's last starts, on Chrome 1
				used = append(used, h.acquire())
			}
			if used[0].ChromePID() != unused.ChromePID() || used[1].ChromePID() == unused.ChromePID() {
				t.Fatalf("the first slots on Chromes %d, %d, %d; want two on one, then another",
					unused.ChromePID(), used[0].ChromePID(), used[1].ChromePID())
			}
			render := func(slots []*Slot) {
				t.Helper()
				for _, sl := range slots {
					if err := recv(t, renderAsync(sl)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.retired {
				render(used)
				select {
				case <-h.chrome(1).done:
				case <-time.After(10 * time.Second):
					t.Fatal("Chrome 1 not retired after the process's last job")
				}
			}
			unused.Release()
			if !tc.retired {
				render(used)
			}
			select {
			case <-h.s.ExitDue():
			case <-time.After(10 * time.Second):
				t.Fatal("ExitDue not closed after the last start was given back")
			}
			if st := h.s.Stats(); st.JobsSinceProcessStart != tc.last-1 || st.StartsForfeited != 1 || st.ChromeStarts != 2 || st.Remaining != 0 {
				t.Errorf("stats: %+v; want %d jobs, 1 start forfeited, 2 Chrome starts, none remaining", st, tc.last-1)
			}
		})
	}
}

func TestSlotMisuse(t *testing.T) {
	fleet := &fakeFleet{}
	h := start(t, testConfig(), fleet)
	sl := h.acquire()
	if _, err := sl.Render(context.Background(), browser.Request{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sl.Render(context.Background(), browser.Request{}); !errors.Is(err, errSlotUsed) {
		t.Fatalf("second Render = %v, want errSlotUsed", err)
	}
	sl.Release()
	sl.Release()
	if st := h.s.Stats(); st.Busy != 0 || st.JobsSinceProcessStart != 1 {
		t.Fatalf("stats: %+v", st)
	}
	if _, err := sl.Render(context.Background(), browser.Request{}); !errors.Is(err, errSlotUsed) {
		t.Fatalf("Render after Release = %v, want errSlotUsed", err)
	}
}

func TestAcquireHonoursContext(t *testing.T) {
	fleet := &fakeFleet{}
	cfg := testConfig()
	cfg.Capacity = 1
	h := start(t, cfg, fleet)
	sl := h.acquire()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.s.Acquire(ctx)
		errc <- err
	}()
	cancel()
	if err := recv(t, errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire = %v, want canceled", err)
	}
	sl.Release()
}

func TestRunTwice(t *testing.T) {
	h := start(t, testConfig(), &fakeFleet{})
	h.chrome(0) // the first Run is under way
	if err := h.s.Run(context.Background()); err == nil {
		t.Fatal("second Run succeeded")
	}
}

// configCase is one row of TestConfig.
type configCase struct {
	name    string
	cfg     Config
	wantErr string
	check   func(Config) bool
}

func TestConfig(t *testing.T) {
	tests := []configCase{
		{"zero config gets every default", Config{}, "", func(c Config) bool {
			return c.Capacity == 6 && c.HealthTimeout == 10*time.Second && c.HealthFailures == 2 &&
				c.BootBackoff == time.Second && c.ChromeRecycleJobs == 20 && c.ExitAfterJobs == 80 &&
				c.ReplacementLead == 12 && c.MemoryCeilingBytes == 0 && c.MemoryInterval == 5*time.Second &&
				c.HealthInterval == 5*time.Second && c.DrainTimeout == 2*time.Minute && c.MaxBootFailures == 5 &&
				c.Logger != nil && c.Browser.Logger != nil
		}},
		{"DefaultConfig is valid and unchanged", DefaultConfig(), "", func(c Config) bool {
			d := DefaultConfig()
			return c.Capacity == d.Capacity && c.ChromeRecycleJobs == 20 && c.ExitAfterJobs == 80 && c.DrainTimeout == d.DrainTimeout
		}},
		{"Off stays off", Config{ChromeRecycleJobs: Off, ExitAfterJobs: Off, ReplacementLead: Off, MemoryCeilingBytes: Off,
			MemoryInterval: Off, HealthInterval: Off, DrainTimeout: Off, MaxBootFailures: Off}, "", func(c Config) bool {
			return c.ChromeRecycleJobs == Off && c.ExitAfterJobs == Off && c.ReplacementLead == Off && c.MemoryCeilingBytes == Off &&
				c.MemoryInterval == Off && c.HealthInterval == Off && c.DrainTimeout == Off && c.MaxBootFailures == Off
		}},
		{"values kept", Config{Capacity: 2, ChromeRecycleJobs: 3, ExitAfterJobs: 7, ReplacementLead: 1, DrainTimeout: time.Second}, "", func(c Config) bool {
			return c.Capacity == 2 && c.ChromeRecycleJobs == 3 && c.ExitAfterJobs == 7 && c.ReplacementLead == 1 && c.DrainTimeout == time.Second
		}},
		{"negative capacity", Config{Capacity: -1}, "Capacity must not be negative", nil},
		{"negative recycle", Config{ChromeRecycleJobs: -5}, "ChromeRecycleJobs", nil},
		{"negative drain", Config{DrainTimeout: -time.Second}, "DrainTimeout", nil},
		{"ceiling without sampling", Config{MemoryCeilingBytes: 1 << 30, MemoryInterval: Off}, "MemoryInterval", nil},
		{"ceiling with sampling", Config{MemoryCeilingBytes: 1 << 30, MemoryInterval: time.Second}, "", func(c Config) bool { return true }},
		{"ceiling with the default sampling", Config{MemoryCeilingBytes: 1 << 30}, "", func(c Config) bool { return c.MemoryInterval == 5*time.Second }},
	}
	// Every numeric field: -2 is an error naming it; Off stays Off where
	// the field can be off and is an error naming it where it cannot.
	for _, f := range []struct {
		name   string
		set    func(*Config, int64)
		get    func(Config) int64
		canOff bool
	}{
		{"Capacity", func(c *Config, v int64) { c.Capacity = int(v) }, func(c Config) int64 { return int64(c.Capacity) }, false},
		{"ChromeRecycleJobs", func(c *Config, v int64) { c.ChromeRecycleJobs = int(v) }, func(c Config) int64 { return int64(c.ChromeRecycleJobs) }, true},
		{"ExitAfterJobs", func(c *Config, v int64) { c.ExitAfterJobs = int(v) }, func(c Config) int64 { return int64(c.ExitAfterJobs) }, true},
		{"ReplacementLead", func(c *Config, v int64) { c.ReplacementLead = int(v) }, func(c Config) int64 { return int64(c.ReplacementLead) }, true},
		{"MemoryCeilingBytes", func(c *Config, v int64) { c.MemoryCeilingBytes = v }, func(c Config) int64 { return int64(c.MemoryCeilingBytes) }, true},
		{"MemoryInterval", func(c *Config, v int64) { c.MemoryInterval = time.Duration(v) }, func(c Config) int64 { return int64(c.MemoryInterval) }, true},
		{"HealthInterval", func(c *Config, v int64) { c.HealthInterval = time.Duration(v) }, func(c Config) int64 { return int64(c.HealthInterval) }, true},
		{"HealthTimeout", func(c *Config, v int64) { c.HealthTimeout = time.Duration(v) }, func(c Config) int64 { return int64(c.HealthTimeout) }, false},
		{"HealthFailures", func(c *Config, v int64) { c.HealthFailures = int(v) }, func(c Config) int64 { return int64(c.HealthFailures) }, false},
		{"DrainTimeout", func(c *Config, v int64) { c.DrainTimeout = time.Duration(v) }, func(c Config) int64 { return int64(c.DrainTimeout) }, true},
		{"BootBackoff", func(c *Config, v int64) { c.BootBackoff = time.Duration(v) }, func(c Config) int64 { return int64(c.BootBackoff) }, false},
		{"MaxBootFailures", func(c *Config, v int64) { c.MaxBootFailures = int(v) }, func(c Config) int64 { return int64(c.MaxBootFailures) }, true},
	} {
		var bad, off Config
		f.set(&bad, -2)
		f.set(&off, Off)
		tests = append(tests, configCase{f.name + " -2", bad, f.name + " must not be negative", nil})
		if f.canOff {
			tests = append(tests, configCase{f.name + " Off", off, "", func(c Config) bool { return f.get(c) == Off }})
		} else {
			tests = append(tests, configCase{f.name + " Off", off, f.name + " must not be negative", nil})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cfg.WithDefaults()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if _, err := New(tt.cfg); err == nil {
					t.Fatal("New accepted an invalid config")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(got) {
				t.Fatalf("config after defaults: %+v", got)
			}
		})
	}
}

// TestLastJobsSkipPreparation checks that the sessions running a Chrome's
// last jobs are retired before those jobs end — on the recycle count and on
// the process's exit count — so that none of them wipes or prepares a tab
// for a job that will never come, while earlier jobs' sessions do.
func TestLastJobsSkipPreparation(t *testing.T) {
	for _, tc := range []struct {
		name           string
		recycle, exit  int
		starts         int // jobs started in all, the last one making the Chrome or process done
		wantRetiredEnd []bool
	}{
		{"recycle", 4, Off, 4, []bool{false, false, true, true}},
		{"exit", Off, 3, 3, []bool{false, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fleet := &fakeFleet{}
			g := newGate()
			fleet.setRender(g.render)
			cfg := testConfig()
			cfg.Capacity, cfg.ChromeRecycleJobs, cfg.ExitAfterJobs, cfg.ReplacementLead = 2, tc.recycle, tc.exit, Off
			h := start(t, cfg, fleet)

			done := make(chan error, 8) // every render's result, in the order they end
			startOne := func() {
				sl := h.acquire()
				go func() {
					_, err := sl.Render(context.Background(), browser.Request{URL: "http://127.0.0.1/x"})
					sl.Release()
					done <- err
				}()
				g.waitStarted(t)
			}
			finishOne := func(c *fakeChrome) {
				g.finish(t, c)
				if err := recv(t, done); err != nil {
					t.Fatalf("render: %v", err)
				}
			}
			startOne()
			startOne()
			c1 := h.chrome(0)
			for started := 2; started < tc.starts; started++ {
				finishOne(c1)
				startOne()
			}
			if tc.recycle > 0 {
				testutil.Eventually(t, time.Minute, "chrome retired", func() bool { return h.logs.FilterMessage("chrome retired").Len() == 1 })
			}
			finishOne(c1)
			finishOne(c1)
			c1.mu.Lock()
			got := append([]bool(nil), c1.endings...)
			c1.mu.Unlock()
			if fmt.Sprint(got) != fmt.Sprint(tc.wantRetiredEnd) {
				t.Fatalf("sessions retired at the end of each job: %v, want %v", got, tc.wantRetiredEnd)
			}
		})
	}
}

// TestHoldUntilRelease covers a process standing by for its predecessor:
// its first Chrome boots but neither serves nor comes to the foreground
// before Release, and ExitNear closes when the process has
// ReplacementLead starts left, as a replacement Chrome would boot.
func TestHoldUntilRelease(t *testing.T) {
	fleet := &fakeFleet{}
	cfg := testConfig()
	cfg.Hold = true
	cfg.ChromeRecycleJobs, cfg.ExitAfterJobs, cfg.ReplacementLead = Off, 8, 2
	h := start(t, cfg, fleet)

	c1 := h.chrome(0)
	testutil.Eventually(t, time.Minute, "first chrome booted", func() bool { return h.s.Stats().Chromes == 1 })
	got := make(chan *Slot, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		sl, err := h.s.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- sl
	}()
	if st := h.s.Stats(); st.ChromePID != 0 || c1.foregroundCount() != 0 {
		t.Fatalf("held chrome serves before Release: current pid %d, foreground calls %d", st.ChromePID, c1.foregroundCount())
	}
	// What serves while the Chrome comes to the foreground: nothing yet,
	// or a job could start on it at the background priority.
	servingAtForeground := make(chan int, 1)
	fleet.mu.Lock()
	fleet.foreground = func(*fakeChrome) { servingAtForeground <- h.s.Stats().ChromePID }
	fleet.mu.Unlock()
	h.s.Release()
	var slots []*Slot
	select {
	case sl := <-got:
		slots = append(slots, sl)
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire still waits after Release")
	}
	if slots[0].ChromePID() != c1.pid || c1.foregroundCount() != 1 {
		t.Fatalf("after Release: slot on pid %d (want %d), foreground calls %d (want 1)", slots[0].ChromePID(), c1.pid, c1.foregroundCount())
	}
	if pid := <-servingAtForeground; pid != 0 {
		t.Fatalf("chrome %d already served when it came to the foreground", pid)
	}
	h.s.Release() // idempotent

	for i := 2; i <= 6; i++ {
		select {
		case <-h.s.ExitNear():
			t.Fatalf("ExitNear closed after %d starts of 8, lead 2", i-1)
		default:
		}
		slots = append(slots, h.acquire())
	}
	select {
	case <-h.s.ExitNear():
	default:
		t.Fatal("ExitNear still open with 2 starts left")
	}
	for _, sl := range slots {
		sl.Release()
	}
	if n := len(fleet.snapshot()); n != 1 {
		t.Fatalf("%d chromes launched, want 1: holding must not boot another", n)
	}
}

// TestHeldUpChromeClosesFinishedSessions: a Chrome that takes no more jobs
// (retired for its job count, or the process's last start handed out) but
// stays up for a slower job still in flight closes the session of every job
// that finishes meanwhile, whose page would otherwise go on running.
func TestHeldUpChromeClosesFinishedSessions(t *testing.T) {
	for _, tc := range []struct {
		name          string
		recycle, exit int
	}{
		{"recycle", 2, Off},
		{"exit", Off, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fleet := &fakeFleet{}
			g := newGate()
			fleet.setRender(g.render)
			cfg := testConfig()
			cfg.Capacity, cfg.ChromeRecycleJobs, cfg.ExitAfterJobs, cfg.ReplacementLead = 2, tc.recycle, tc.exit, Off
			h := start(t, cfg, fleet)

			a, b := h.acquire(), h.acquire()
			errA, errB := renderAsync(a), renderAsync(b)
			c1 := g.waitStarted(t)
			g.waitStarted(t)
			if tc.recycle > 0 {
				testutil.Eventually(t, time.Minute, "chrome retired", func() bool { return h.logs.FilterMessage("chrome retired").Len() == 1 })
			}
			if n := c1.closeCount(); n != 0 {
				t.Fatalf("%d sessions closed before any job finished", n)
			}
			g.finish(t, c1)
			var last <-chan error
			select {
			case err := <-errA:
				if err != nil {
					t.Fatalf("render: %v", err)
				}
				last = errB
			case err := <-errB:
				if err != nil {
					t.Fatalf("render: %v", err)
				}
				last = errA
			case <-time.After(10 * time.Second):
				t.Fatal("no render finished")
			}
			// Render returns after putSession: the close has happened.
			if n := c1.closeCount(); n != 1 || c1.killed() {
				t.Fatalf("first job done, one still in flight: %d sessions closed (want 1), chrome killed %v", n, c1.killed())
			}
			g.finish(t, c1)
			if err := recv(t, last); err != nil {
				t.Fatalf("render: %v", err)
			}
		})
	}
}

// TestStatsSumOrphanedCPU: the CPU of every killed Chrome's helpers and
// renderers, lost to init at the kill, is summed in Stats, for recycled
// Chromes and for those killed at the stop; so are the counts of their
// wiped contexts, with those of the live Chromes.
func TestStatsSumOrphanedCPU(t *testing.T) {
	fleet := &fakeFleet{}
	cfg := testConfig()
	cfg.Capacity, cfg.ChromeRecycleJobs, cfg.ExitAfterJobs, cfg.ReplacementLead = 1, 1, Off, Off
	h := start(t, cfg, fleet)
	for range 3 {
		sl := h.acquire()
		if err := recv(t, renderAsync(sl)); err != nil {
			t.Fatal(err)
		}
	}
	c1 := h.chrome(0)
	testutil.Eventually(t, time.Minute, "the first chrome killed", func() bool { return c1.killed() && h.s.Stats().ChromeKills >= 1 })
	if got := h.s.Stats().OrphanedCPUTicks; got < c1.orphaned {
		t.Fatalf("after the first recycle: %d orphaned ticks, want at least the first chrome's %d", got, c1.orphaned)
	}
	wantContexts := func() browser.ContextStats {
		var want browser.ContextStats
		for _, c := range fleet.snapshot() {
			want.Add(c.ContextStats())
		}
		return want
	}
	// The killed Chrome's and the live ones' (no render runs now; a
	// Chrome still booting is in the fleet but not yet the supervisor's).
	testutil.Eventually(t, time.Minute, "context stats summed over the killed and the live chromes", func() bool {
		return h.s.Stats().Contexts == wantContexts()
	})
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, c := range fleet.snapshot() {
		if !c.killed() {
			t.Fatalf("chrome %d not killed at the stop", c.pid)
		}
		want += c.orphaned
	}
	if got := h.s.Stats().OrphanedCPUTicks; got != want {
		t.Fatalf("%d orphaned ticks after the stop, want the sum over every killed chrome, %d", got, want)
	}
	if got, want := h.s.Stats().Contexts, wantContexts(); got != want || got.Reused != 3 {
		t.Fatalf("context stats %+v after the stop, want the sum over every chrome, %+v, with the 3 renders", got, want)
	}
}
