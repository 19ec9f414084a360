package supervisor

import (
	"context"
	"time"

	"github.com/browserfarm/browserfarm/browser"
)

// chromeProc is what the supervisor needs of one Chrome process. It is the
// seam between the lifecycle machinery and *browser.Browser, so the
// machinery can be tested on a fake.
type chromeProc interface {
	PID() int
	Done() <-chan struct{}
	// Gone is Done without its delay (see browser.Browser.Gone).
	Gone() bool
	Healthy(ctx context.Context) error
	Memory(ctx context.Context) (browser.Memory, error)
	Kill() error
	// OrphanedCPUTicks is the CPU, in /proc ticks, of the helpers and
	// renderers Kill killed, which init reaps (see
	// browser.Browser.OrphanedCPUTicks).
	OrphanedCPUTicks() uint64
	// ContextStats counts what became of its sessions' wiped contexts
	// (see browser.Browser.ContextStats).
	ContextStats() browser.ContextStats
	// Foreground gives the Chrome, booted in the background, the node's
	// normal CPU priority (see browser.Browser.Foreground).
	Foreground() error
	NewSession(ctx context.Context) (renderSession, error)
}

// renderSession is one session of a chromeProc.
type renderSession interface {
	Render(ctx context.Context, req browser.Request) (*browser.Result, error)
	// Retire says no job is expected after the one in progress: the
	// session skips wiping or preparing a context for a next one.
	Retire()
	Close() error
}

// launchFunc boots one Chrome.
type launchFunc func(ctx context.Context) (chromeProc, error)

// realChrome adapts *browser.Browser to chromeProc.
type realChrome struct{ *browser.Browser }

func (r realChrome) NewSession(ctx context.Context) (renderSession, error) {
	s, err := r.Browser.NewSession(ctx)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// browserLauncher boots real Chromes with opts, each in the background: a
// Chrome boots and prewarms its sessions as the standby while another one
// serves, and the CPU that costs (about 0.5 s per Chrome) should be the
// CPU the serving Chrome leaves idle, not slow its pages. The promotion
// brings it to the foreground.
func browserLauncher(opts browser.Options) launchFunc {
	opts.Background = true
	return func(ctx context.Context) (chromeProc, error) {
		b, err := browser.Launch(ctx, opts)
		if err != nil {
			return nil, err
		}
		return realChrome{b}, nil
	}
}

// chromeState is where a Chrome is in its life.
type chromeState int

const (
	stateStandby  chromeState = iota // booted, waiting to take over
	stateCurrent                     // takes new sessions
	stateRetiring                    // no new sessions; killed once drained
	stateDead                        // killed by us or exited by itself
)

// chrome is the supervisor's record of one Chrome process.
type chrome struct {
	lane       *lane // whose slots it serves
	proc       chromeProc
	seq        int // 1 for the process's first Chrome
	pid        int
	bootedAt   time.Time
	bootReason string

	// ctx is canceled, with a retriable *browser.Error as its cause, when the
	// supervisor gives up on this Chrome; sessions running on it end with
	// that error and its monitor stops.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// checkNow asks its monitor for a health check before the next tick;
	// capacity 1.
	checkNow chan struct{}

	// Guarded by Supervisor.mu.
	state        chromeState
	starts       int // job starts handed out on this Chrome
	finished     int // of which finished
	inflight     int // slots held on this Chrome
	pss          uint64
	overMemory   bool
	healthFails  int  // consecutive failed health checks
	probeFailed  bool // a job's probe found it not answering since the last passed check
	retiredAt    time.Time
	retireReason string
	// foreground: Foreground was called; the standby may be promoted.
	foreground bool
	// jobsDue is the latest deadline of a render started on this Chrome:
	// its drain waits for that, then DrainTimeout more (drainDeadline).
	jobsDue time.Time
	// idle holds sessions between jobs. A session prepares its next fresh
	// tab while idle, so reusing it, instead of opening one per job, saves
	// a tab and browser context per job (about a third of the CPU of a
	// light page) and hides the next job's isolation cost.
	idle []renderSession
	// inUse holds the sessions of running jobs, so that retiring the
	// Chrome reaches them before their jobs end.
	inUse map[renderSession]struct{}
}

// retireSessionsLocked tells every session of c that c takes no more jobs.
// Called with Supervisor.mu held; Retire does not block.
func (c *chrome) retireSessionsLocked() {
	for sess := range c.inUse {
		sess.Retire()
	}
	for _, sess := range c.idle {
		sess.Retire()
	}
}

// drainDeadline is when a retiring c is killed with jobs still in flight:
// DrainTimeout after it retired, or after the latest deadline of a render
// started on it if that is later. A job may run for its own timeout
// (timeout_ms, up to minutes) whatever its Chrome's recycling: measured
// from the retirement alone, a job longer than DrainTimeout that started
// shortly before it would be killed on every attempt.
func (c *chrome) drainDeadline(drainTimeout time.Duration) time.Time {
	base := c.retiredAt
	if c.jobsDue.After(base) {
		base = c.jobsDue
	}
	return base.Add(drainTimeout)
}

// lost returns the retriable error sessions on c fail with once the
// supervisor gave up on c, or nil while c is usable.
func (c *chrome) lost() *browser.Error {
	if c.ctx.Err() == nil {
		return nil
	}
	if be, ok := context.Cause(c.ctx).(*browser.Error); ok {
		return be
	}
	return &browser.Error{Class: browser.ClassCrashed, Retriable: true, Err: context.Cause(c.ctx)}
}

// gone reports whether the process has exited or lost its CDP connection,
// whether or not the actor has handled that yet.
func (c *chrome) gone() bool { return c.proc.Gone() }
