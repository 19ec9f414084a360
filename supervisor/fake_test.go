package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/internal/testutil"
)

// fakeFleet launches fake Chromes and records what happens to them; it
// stands in for browser.Launch behind the launchFunc seam.
type fakeFleet struct {
	mu        sync.Mutex
	chromes   []*fakeChrome
	launches  int
	failBoots int  // the first failBoots launches fail
	blockBoot bool // launches wait for their ctx to end
	// render, if set, runs inside every session's Render; it decides how
	// long the job takes and whether it fails.
	render    func(ctx context.Context, c *fakeChrome) error
	active    int // sessions rendering now, on any Chrome
	maxActive int

	// foreground, if set, runs inside every Foreground call.
	foreground func(c *fakeChrome)
	// health, if set, answers every health check in place of the
	// Chrome's unhealthy field.
	health func(ctx context.Context, c *fakeChrome) error
	// close, if set, runs inside every session's Close.
	close func(c *fakeChrome)
}

func (f *fakeFleet) launch(ctx context.Context) (chromeProc, error) {
	f.mu.Lock()
	f.launches++
	n, fail, block := f.launches, f.launches <= f.failBoots, f.blockBoot
	f.mu.Unlock()
	if block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if fail {
		return nil, fmt.Errorf("fake boot %d failed", n)
	}
	c := &fakeChrome{fleet: f, pid: 1000 + n, done: make(chan struct{}), orphaned: uint64(100 + n)}
	f.mu.Lock()
	f.chromes = append(f.chromes, c)
	f.mu.Unlock()
	return c, nil
}

// snapshot returns the Chromes launched so far.
func (f *fakeFleet) snapshot() []*fakeChrome {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*fakeChrome(nil), f.chromes...)
}

func (f *fakeFleet) peak() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxActive
}

type fakeChrome struct {
	fleet *fakeFleet
	pid   int
	done  chan struct{}
	once  sync.Once

	mu        sync.Mutex
	kills     int
	renders   int
	endings   []bool // per finished render: whether its session was retired by then
	closes    int    // sessions closed
	orphaned  uint64 // OrphanedCPUTicks once killed
	unhealthy bool
	pss       uint64
	memReads  int
	// foregrounds counts Foreground calls: once, when it takes over.
	foregrounds int
}

func (c *fakeChrome) exit()                 { c.once.Do(func() { close(c.done) }) }
func (c *fakeChrome) PID() int              { return c.pid }
func (c *fakeChrome) Done() <-chan struct{} { return c.done }
func (c *fakeChrome) Gone() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}
func (c *fakeChrome) set(fn func(*fakeChrome)) { c.mu.Lock(); fn(c); c.mu.Unlock() }

func (c *fakeChrome) Healthy(ctx context.Context) error {
	c.fleet.mu.Lock()
	hook := c.fleet.health
	c.fleet.mu.Unlock()
	if hook != nil {
		return hook(ctx, c)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unhealthy {
		return errors.New("fake: no CDP answer")
	}
	return nil
}

func (c *fakeChrome) Memory(ctx context.Context) (browser.Memory, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.memReads++
	return browser.Memory{PSSBytes: c.pss, RSSBytes: 3 * c.pss, Processes: 5}, nil
}

func (c *fakeChrome) Kill() error {
	c.mu.Lock()
	c.kills++
	c.mu.Unlock()
	c.exit()
	return nil
}

// ContextStats: every render reused a wiped context, and each Chrome
// replaced one for a worker.
func (c *fakeChrome) ContextStats() browser.ContextStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := browser.ContextStats{Reused: int64(c.renders)}
	st.Replaced[browser.ReplacedWorker] = 1
	return st
}

func (c *fakeChrome) OrphanedCPUTicks() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kills == 0 {
		return 0
	}
	return c.orphaned
}

func (c *fakeChrome) Foreground() error {
	c.fleet.mu.Lock()
	hook := c.fleet.foreground
	c.fleet.mu.Unlock()
	if hook != nil {
		hook(c)
	}
	c.mu.Lock()
	c.foregrounds++
	c.mu.Unlock()
	return nil
}

func (c *fakeChrome) foregroundCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.foregrounds
}

func (c *fakeChrome) killed() bool {
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.kills > 0
	default:
		return false
	}
}

func (c *fakeChrome) renderCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.renders
}

func (c *fakeChrome) NewSession(ctx context.Context) (renderSession, error) {
	select {
	case <-c.done:
		return nil, errors.New("fake: chrome gone")
	default:
		return &fakeSession{c: c}, nil
	}
}

type fakeSession struct {
	c       *fakeChrome
	retired atomic.Bool
}

func (s *fakeSession) Retire() { s.retired.Store(true) }

func (s *fakeSession) Render(ctx context.Context, req browser.Request) (*browser.Result, error) {
	f := s.c.fleet
	f.mu.Lock()
	f.active++
	f.maxActive = max(f.maxActive, f.active)
	render := f.render
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.active--
		f.mu.Unlock()
	}()
	s.c.mu.Lock()
	s.c.renders++
	s.c.mu.Unlock()
	if render != nil {
		if err := render(ctx, s.c); err != nil {
			return nil, err
		}
	}
	select {
	case <-s.c.done:
		return nil, errors.New("fake: connection closed")
	default:
	}
	// What a real session would do next: get ready for another job, unless
	// it was retired.
	s.c.mu.Lock()
	s.c.endings = append(s.c.endings, s.retired.Load())
	s.c.mu.Unlock()
	return &browser.Result{FinalURL: req.URL, Status: 200}, nil
}

func (s *fakeSession) Close() error {
	s.c.fleet.mu.Lock()
	hook := s.c.fleet.close
	s.c.fleet.mu.Unlock()
	if hook != nil {
		hook(s.c)
	}
	s.c.mu.Lock()
	s.c.closes++
	s.c.mu.Unlock()
	return nil
}

func (c *fakeChrome) closeCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closes
}

// gate makes fake renders block until released, so a test controls exactly
// which jobs are in flight and on which Chrome they end.
type gate struct {
	started chan *fakeChrome // one value per render that began

	mu      sync.Mutex
	release map[int]chan struct{} // per Chrome pid: one value lets one render finish
}

func newGate() *gate {
	return &gate{started: make(chan *fakeChrome, 64), release: map[int]chan struct{}{}}
}

func (g *gate) ch(c *fakeChrome) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch, ok := g.release[c.pid]
	if !ok {
		ch = make(chan struct{})
		g.release[c.pid] = ch
	}
	return ch
}

// finish lets one render running on c complete.
func (g *gate) finish(t *testing.T, c *fakeChrome) {
	t.Helper()
	select {
	case g.ch(c) <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatalf("no render waiting on chrome %d", c.pid)
	}
}

func (g *gate) render(ctx context.Context, c *fakeChrome) error {
	g.started <- c
	select {
	case <-g.ch(c):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fake render: %w", context.Cause(ctx))
	case <-c.done:
		return errors.New("fake render: chrome gone")
	}
}

// testConfig is a small, fast configuration: health and memory sampling off
// and no drain bound unless a test turns them on.
func testConfig() Config {
	return Config{Capacity: 6, SessionsPerChrome: 6, ChromeRecycleJobs: 20, ExitAfterJobs: 80, ReplacementLead: 6,
		BootBackoff: time.Millisecond, MaxBootFailures: 5,
		MemoryInterval: Off, HealthInterval: Off, DrainTimeout: Off}
}

type harness struct {
	t     *testing.T
	s     *Supervisor
	fleet *fakeFleet
	logs  *observer.ObservedLogs
	stop  func() error
}

// start runs a Supervisor over fleet; Run is stopped at cleanup, and the
// test fails if any goroutine outlives it.
func start(t *testing.T, cfg Config, fleet *fakeFleet) *harness {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	cfg.Logger = zap.New(core)
	cfg, err := cfg.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := newSupervisor(cfg, fleet.launch)
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
	t.Cleanup(func() {
		stop()
		goleak.VerifyNone(t)
	})
	return &harness{t: t, s: s, fleet: fleet, logs: logs, stop: stop}
}

func (h *harness) acquire() *Slot {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sl, err := h.s.Acquire(ctx)
	if err != nil {
		h.t.Fatalf("acquire: %v", err)
	}
	return sl
}

// renderAsync renders on sl in the background and releases the slot after.
func renderAsync(sl *Slot) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := sl.Render(context.Background(), browser.Request{URL: "http://127.0.0.1/x"})
		sl.Release()
		errc <- err
	}()
	return errc
}

func recv(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("render did not return")
		return nil
	}
}

func (g *gate) waitStarted(t *testing.T) *fakeChrome {
	t.Helper()
	select {
	case c := <-g.started:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("render did not start")
		return nil
	}
}

func (f *fakeFleet) setRender(fn func(ctx context.Context, c *fakeChrome) error) {
	f.mu.Lock()
	f.render = fn
	f.mu.Unlock()
}

// chrome returns the i-th launched fake Chrome (0-based), waiting for it.
func (h *harness) chrome(i int) *fakeChrome {
	h.t.Helper()
	var c *fakeChrome
	testutil.Eventually(h.t, time.Minute, fmt.Sprintf("chrome #%d launched", i+1), func() bool {
		cs := h.fleet.snapshot()
		if len(cs) > i {
			c = cs[i]
			return true
		}
		return false
	})
	return c
}
