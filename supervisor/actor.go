package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/internal/backoff"
)

// bootResult is what one boot goroutine hands the actor.
type bootResult struct {
	proc   chromeProc
	err    error
	took   time.Duration
	reason string
}

// killOrder is a Chrome the actor must kill, and why.
type killOrder struct {
	c      *chrome
	reason string
	class  string // error class for sessions still running on it
}

// Run is the supervisor's actor: it boots the first Chrome, boots
// replacements ahead of recycle points, retires and kills drained Chromes,
// and replaces crashed or hung ones. It returns nil when ctx ends, or an
// error once MaxBootFailures boots failed in a row; either way only after
// every Chrome it started is killed and reaped and every goroutine it
// started has ended. Run may be called once.
func (s *Supervisor) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.ran {
		s.mu.Unlock()
		return errors.New("supervisor: Run called twice")
	}
	s.ran = true
	s.mu.Unlock()

	a := &actor{s: s, bootCh: make(chan bootResult, 1)}
	return a.run(ctx)
}

// actor is Run's private state; only Run's goroutine touches it.
type actor struct {
	s            *Supervisor
	wg           sync.WaitGroup // boot and monitor goroutines
	bootCh       chan bootResult
	bootFails    int       // consecutive
	retryAt      time.Time // zero: no boot backoff pending
	bootInFlight bool
}

func (a *actor) run(ctx context.Context) error {
	s := a.s
	s.log.Info("supervisor started",
		zap.Int("capacity", s.cfg.Capacity),
		zap.Int("chrome_recycle_jobs", s.cfg.ChromeRecycleJobs),
		zap.Int("exit_after_jobs", s.cfg.ExitAfterJobs),
		zap.Int("replacement_lead", s.cfg.ReplacementLead),
		zap.Int64("memory_ceiling_bytes", s.cfg.MemoryCeilingBytes))
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	var fatal error
	for fatal == nil {
		next := a.reconcile(ctx)
		if next.IsZero() {
			wake.Stop()
		} else {
			wake.Reset(time.Until(next))
		}
		select {
		case <-ctx.Done():
			return a.shutdown(nil)
		case <-s.kick:
		case <-wake.C:
			if !a.retryAt.IsZero() && !time.Now().Before(a.retryAt) {
				a.retryAt = time.Time{}
				s.mu.Lock()
				s.booting = false
				s.mu.Unlock()
			}
		case r := <-a.bootCh:
			a.bootInFlight = false
			fatal = a.booted(ctx, r)
		case ev := <-s.events:
			a.handle(ev)
		}
	}
	return a.shutdown(fatal)
}

// reconcile applies the policy until it is quiet, starts a boot if asked,
// kills the retiring Chromes that have drained or run out of time, and
// returns when the actor must wake up next on its own (zero: never).
func (a *actor) reconcile(ctx context.Context) time.Time {
	s := a.s
	now := time.Now()
	var bootReason string
	var kills []killOrder

	s.mu.Lock()
	for range 8 {
		act := decide(s.viewLocked())
		if act.kind == actNone {
			break
		}
		switch act.kind {
		case actBoot:
			s.booting = true
			bootReason = act.reason
			if bootReason == reasonInitial && s.counts.chromeStarts > 0 {
				bootReason = "replace"
			}
		case actPromote:
			if c := s.standby; !c.foreground {
				// The standby comes to the foreground before it serves:
				// a job handed a slot on it must not start at the
				// background priority, behind the Chrome it replaces.
				// Foreground walks the tree's threads, so it runs
				// without the lock; only this goroutine changes the
				// standby, and the policy decides again afterwards.
				s.mu.Unlock()
				a.foreground(c)
				s.mu.Lock()
				c.foreground = true
				continue
			}
			s.current, s.standby = s.standby, nil
			s.current.state = stateCurrent
			s.log.Info("chrome serving", zap.Int("pid", s.current.pid), zap.Int("chrome", s.current.seq))
			s.broadcastLocked()
		case actRetireCurrent:
			a.retireLocked(s.current, act.reason, now)
			s.current = nil
		case actRetireStandby:
			a.retireLocked(s.standby, act.reason, now)
			s.standby = nil
		}
	}
	var next time.Time
	s.retiring = slices.DeleteFunc(s.retiring, func(c *chrome) bool {
		deadline := c.drainDeadline(s.cfg.DrainTimeout)
		switch {
		case c.inflight <= 0:
			kills = append(kills, killOrder{c, c.retireReason, browser.ClassCanceled})
		case s.cfg.DrainTimeout > 0 && !now.Before(deadline):
			s.counts.drainTimeouts++
			kills = append(kills, killOrder{c, reasonDrain, browser.ClassCanceled})
		default:
			if s.cfg.DrainTimeout > 0 && (next.IsZero() || deadline.Before(next)) {
				next = deadline
			}
			return false
		}
		c.state = stateDead
		return true
	})
	s.mu.Unlock()

	if bootReason != "" {
		a.startBoot(ctx, bootReason)
	}
	for _, k := range kills {
		a.kill(k, true)
	}
	if !a.retryAt.IsZero() && (next.IsZero() || a.retryAt.Before(next)) {
		next = a.retryAt
	}
	return next
}

// foreground gives c, booted in the background, the node's normal CPU
// priority; a failure leaves it serving at the lower one.
func (a *actor) foreground(c *chrome) {
	if err := c.proc.Foreground(); err != nil {
		a.s.log.Warn("chrome serves at a lower CPU priority", zap.Int("pid", c.pid), zap.Error(err))
	}
}

// retireLocked stops c from taking sessions; reconcile kills it once drained.
func (a *actor) retireLocked(c *chrome, reason string, now time.Time) {
	s := a.s
	c.state = stateRetiring
	c.retiredAt = now
	c.retireReason = reason
	s.retiring = append(s.retiring, c)
	// The jobs still running are the last of their sessions here: what a
	// session would do to get ready for a next job is wasted on a Chrome
	// about to be killed.
	c.retireSessionsLocked()
	if reason == reasonJobs || reason == reasonMemory {
		s.counts.recycles++
	}
	if reason == reasonMemory {
		s.counts.memoryRecycles++
	}
	s.log.Info("chrome retired",
		zap.Int("pid", c.pid), zap.Int("chrome", c.seq), zap.String("reason", reason),
		zap.Int("jobs", c.starts), zap.Int("jobs_finished", c.finished), zap.Int("in_flight", c.inflight))
}

// startBoot boots one Chrome in the background; the result arrives on bootCh,
// which has room for it, so the goroutine never blocks on the actor.
func (a *actor) startBoot(ctx context.Context, reason string) {
	a.bootInFlight = true
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t0 := time.Now()
		p, err := a.s.launch(ctx)
		a.bootCh <- bootResult{proc: p, err: err, took: time.Since(t0), reason: reason}
	}()
}

// booted takes a boot's result: a new standby Chrome, or a retry later, or
// a fatal error after too many failures in a row.
func (a *actor) booted(ctx context.Context, r bootResult) error {
	s := a.s
	if r.err != nil {
		if ctx.Err() != nil {
			return nil // the boot was canceled by shutdown, not broken
		}
		a.bootFails++
		s.mu.Lock()
		s.counts.bootFailures++
		s.mu.Unlock()
		if s.cfg.MaxBootFailures > 0 && a.bootFails >= s.cfg.MaxBootFailures {
			s.log.Error("chrome boot failed, giving up", zap.Int("failures", a.bootFails), zap.Error(r.err))
			return fmt.Errorf("supervisor: chrome failed to boot %d times in a row: %w", a.bootFails, r.err)
		}
		delay := backoff.Doubling(a.bootFails-1, s.cfg.BootBackoff, maxBootBackoff)
		a.retryAt = time.Now().Add(delay)
		s.log.Warn("chrome boot failed", zap.String("reason", r.reason), zap.Int("failures", a.bootFails),
			zap.Duration("retry_in", delay), zap.Error(r.err))
		return nil
	}
	a.bootFails = 0
	c := a.adopt(r)
	a.prewarm(c)
	s.mu.Lock()
	s.standby = c
	s.booting = false
	s.mu.Unlock()
	a.startMonitor(ctx, c)
	return nil
}

// prewarm opens Capacity idle sessions on a Chrome that has not served yet.
// Opening one is cheap, and each prepares its first fresh tab in the
// background, so the Chrome's first jobs do not wait for their tabs: the
// standby is ready when it takes over. A failure only means that some
// first jobs open their session themselves.
func (a *actor) prewarm(c *chrome) {
	s := a.s
	sessions := make([]renderSession, 0, s.cfg.Capacity)
	for range s.cfg.Capacity {
		sess, err := c.proc.NewSession(c.ctx)
		if err != nil {
			s.log.Debug("prewarming a session failed", zap.Int("pid", c.pid), zap.Error(err))
			break
		}
		sessions = append(sessions, sess)
	}
	s.mu.Lock()
	c.idle = append(c.idle, sessions...)
	s.mu.Unlock()
}

// adopt records a freshly booted Chrome and logs its start.
func (a *actor) adopt(r bootResult) *chrome {
	s := a.s
	cctx, cancel := context.WithCancelCause(context.Background())
	c := &chrome{
		proc:       r.proc,
		pid:        r.proc.PID(),
		bootedAt:   time.Now(),
		bootReason: r.reason,
		ctx:        cctx,
		cancel:     cancel,
		checkNow:   make(chan struct{}, 1),
		state:      stateStandby,
	}
	s.mu.Lock()
	s.seq++
	c.seq = s.seq
	s.counts.chromeStarts++
	s.mu.Unlock()
	s.log.Info("chrome started", zap.Int("pid", c.pid), zap.Int("chrome", c.seq),
		zap.String("reason", r.reason), zap.Int64("boot_ms", r.took.Milliseconds()))
	return c
}

// kill ends c: sessions still on it fail as retriable with k's class, then
// its whole process group is killed and reaped and its profile removed.
// alive says whether c was still running, i.e. whether this counts as a kill.
func (a *actor) kill(k killOrder, alive bool) {
	s := a.s
	c := k.c
	s.mu.Lock()
	pss := c.pss
	sample := alive && s.pss.sampleKill()
	s.mu.Unlock()
	if sample {
		// The PSS right before the kill is what recycling saves; /proc reads only.
		mctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if m, err := c.proc.Memory(mctx); err == nil {
			pss = m.PSSBytes
		}
		cancel()
		a.samplePeak(c, pss)
	}
	c.cancel(&browser.Error{Class: k.class, Retriable: true,
		Err: fmt.Errorf("chrome %d %s", c.pid, k.reason)})
	err := c.proc.Kill()
	// The sessions died with their Chrome; closing them ends their
	// background work.
	s.mu.Lock()
	idle := c.idle
	c.idle = nil
	s.mu.Unlock()
	for _, sess := range idle {
		_ = sess.Close()
	}
	s.mu.Lock()
	if alive {
		s.counts.chromeKills++
	}
	s.counts.orphanedTicks += c.proc.OrphanedCPUTicks()
	ctxs := c.proc.ContextStats()
	s.counts.contexts.Add(ctxs)
	jobs, finished, inflight := c.starts, c.finished, c.inflight
	s.mu.Unlock()
	if sample {
		a.sampleTrough()
	}
	fields := []zap.Field{zap.Int("pid", c.pid), zap.Int("chrome", c.seq), zap.String("reason", k.reason),
		zap.Int("jobs", jobs), zap.Int("jobs_finished", finished), zap.Int("in_flight", inflight),
		zap.Uint64("pss_bytes", pss), zap.Duration("age", time.Since(c.bootedAt)),
		zap.Int64("contexts_reused", ctxs.Reused), zap.Int64("contexts_replaced", ctxs.ReplacedTotal())}
	if ctxs.ReplacedTotal() > 0 {
		fields = append(fields, zap.Any("contexts_replaced_by", ctxs.ByReason()))
	}
	if err != nil {
		s.log.Error("chrome kill failed", append(fields, zap.Error(err))...)
		return
	}
	s.log.Info("chrome killed", fields...)
}

// shutdown kills every Chrome, waits for every goroutine Run started, and
// returns fatal.
func (a *actor) shutdown(fatal error) error {
	s := a.s
	s.mu.Lock()
	s.stopping = true
	if fatal != nil {
		s.fatal = fatal
	}
	all := s.liveLocked()
	s.current, s.standby, s.retiring = nil, nil, nil
	for _, c := range all {
		c.state = stateDead
	}
	s.broadcastLocked()
	s.mu.Unlock()

	for _, c := range all {
		reason := c.retireReason
		if reason == "" {
			reason = reasonStop
		}
		a.kill(killOrder{c, reason, browser.ClassCanceled}, true)
	}
	// A boot still running was started with the canceled ctx, or ended
	// in a fatal failure; wait for it and kill what it may have started.
	a.wg.Wait()
	if a.bootInFlight {
		a.bootInFlight = false
		if r := <-a.bootCh; r.err == nil {
			c := a.adopt(r)
			c.state = stateDead
			a.kill(killOrder{c, reasonStop, browser.ClassCanceled}, true)
		}
	}
	st := s.Stats()
	s.log.Info("supervisor stopped", zap.Int("jobs", st.JobsSinceProcessStart),
		zap.Int("chrome_starts", st.ChromeStarts), zap.Int("chrome_kills", st.ChromeKills),
		zap.Int("chrome_crashes", st.ChromeCrashes),
		zap.Int64("contexts_reused", st.Contexts.Reused), zap.Int64("contexts_replaced", st.Contexts.ReplacedTotal()))
	return fatal
}
