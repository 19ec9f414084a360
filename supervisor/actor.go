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
	lane   *lane
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

	a := &actor{s: s, bootCh: make(chan bootResult, len(s.lanes))}
	return a.run(ctx)
}

// actor is Run's private state; only Run's goroutine touches it.
type actor struct {
	s             *Supervisor
	wg            sync.WaitGroup // boot and monitor goroutines
	bootCh        chan bootResult
	bootsInFlight int
}

func (a *actor) run(ctx context.Context) error {
	s := a.s
	s.log.Info("supervisor started",
		zap.Int("capacity", s.cfg.Capacity),
		zap.Int("chromes", len(s.lanes)),
		zap.Int("sessions_per_chrome", s.cfg.SessionsPerChrome),
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
			now := time.Now()
			for _, l := range s.lanes {
				if !l.retryAt.IsZero() && !now.Before(l.retryAt) {
					l.retryAt = time.Time{}
					s.mu.Lock()
					l.booting = false
					s.mu.Unlock()
				}
			}
		case r := <-a.bootCh:
			a.bootsInFlight--
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
	type bootOrder struct {
		l      *lane
		reason string
	}
	var boots []bootOrder
	var kills []killOrder

	s.mu.Lock()
	for _, l := range s.lanes {
		for range 8 {
			act := decide(s.viewLocked(l))
			if act.kind == actNone {
				break
			}
			switch act.kind {
			case actBoot:
				l.booting = true
				reason := act.reason
				if reason == reasonInitial && s.counts.chromeStarts > 0 {
					reason = "replace"
				}
				boots = append(boots, bootOrder{l, reason})
			case actPromote:
				if c := l.standby; !c.foreground {
					// The standby comes to the foreground before it
					// serves: a job handed a slot on it must not start at
					// the background priority, behind the Chrome it
					// replaces. Foreground walks the tree's threads, so it
					// runs without the lock; only this goroutine changes
					// the standby, and the policy decides again
					// afterwards.
					s.mu.Unlock()
					a.foreground(c)
					s.mu.Lock()
					c.foreground = true
					continue
				}
				l.current, l.standby = l.standby, nil
				l.current.state = stateCurrent
				l.refill = false
				s.log.Info("chrome serving", zap.Int("pid", l.current.pid), zap.Int("chrome", l.current.seq))
				s.broadcastLocked()
			case actRetireCurrent:
				a.retireLocked(l.current, act.reason, now)
				l.current = nil
			case actRetireStandby:
				a.retireLocked(l.standby, act.reason, now)
				l.standby = nil
			}
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

	for _, b := range boots {
		a.startBoot(ctx, b.l, b.reason)
	}
	for _, k := range kills {
		a.kill(k, true)
	}
	for _, l := range s.lanes {
		if !l.retryAt.IsZero() && (next.IsZero() || l.retryAt.Before(next)) {
			next = l.retryAt
		}
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

// startBoot boots one Chrome for lane l in the background; the result
// arrives on bootCh, which has room for one boot of each lane, so the
// goroutine never blocks on the actor.
func (a *actor) startBoot(ctx context.Context, l *lane, reason string) {
	a.bootsInFlight++
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t0 := time.Now()
		p, err := a.s.launch(ctx)
		a.bootCh <- bootResult{lane: l, proc: p, err: err, took: time.Since(t0), reason: reason}
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
		// Counted and backed off by lane: the lanes boot at once, and a
		// wave of their failures is one failure of each, not several in
		// a row.
		l := r.lane
		l.bootFails++
		s.mu.Lock()
		s.counts.bootFailures++
		s.mu.Unlock()
		if s.cfg.MaxBootFailures > 0 && l.bootFails >= s.cfg.MaxBootFailures {
			s.log.Error("chrome boot failed, giving up", zap.Int("failures", l.bootFails), zap.Error(r.err))
			return fmt.Errorf("supervisor: chrome failed to boot %d times in a row: %w", l.bootFails, r.err)
		}
		delay := backoff.Doubling(l.bootFails-1, s.cfg.BootBackoff, maxBootBackoff)
		l.retryAt = time.Now().Add(delay)
		s.log.Warn("chrome boot failed", zap.String("reason", r.reason), zap.Int("failures", l.bootFails),
			zap.Duration("retry_in", delay), zap.Error(r.err))
		return nil
	}
	r.lane.bootFails = 0
	c := a.adopt(r)
	a.prewarm(c)
	s.mu.Lock()
	r.lane.standby = c
	r.lane.booting = false
	s.mu.Unlock()
	a.startMonitor(ctx, c)
	return nil
}

// prewarm opens its lane's idle sessions on a Chrome that has not served yet.
// Opening one is cheap, and each prepares its first fresh tab in the
// background, so the Chrome's first jobs do not wait for their tabs: the
// standby is ready when it takes over. A failure only means that some
// first jobs open their session themselves.
func (a *actor) prewarm(c *chrome) {
	s := a.s
	sessions := make([]renderSession, 0, c.lane.capacity)
	for range c.lane.capacity {
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
		lane:       r.lane,
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
	for _, l := range s.lanes {
		l.current, l.standby = nil, nil
	}
	s.retiring = nil
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
	for ; a.bootsInFlight > 0; a.bootsInFlight-- {
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
