package supervisor

// A Chrome's monitor and the actor's verdicts on what it and the jobs
// report: exit, health checks, a job's own probe, memory samples. Every
// verdict that takes a Chrome out of service is made here, on the actor's
// goroutine.

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
)

// eventKind is what a Chrome's monitor observed.
type eventKind int

const (
	evExited eventKind = iota // Done closed: process gone or CDP connection lost
	evHealth                  // a health check finished (err nil = healthy)
	evMemory                  // a memory sample
	evProbe                   // a job's own probe found the Chrome not answering
)

type event struct {
	c    *chrome
	kind eventKind
	err  error
	mem  browser.Memory
}

// startMonitor watches c for exit, and samples its health and memory.
func (a *actor) startMonitor(ctx context.Context, c *chrome) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.s.monitor(ctx, c)
	}()
}

func (s *Supervisor) monitor(ctx context.Context, c *chrome) {
	var healthC, memC <-chan time.Time
	if s.cfg.HealthInterval > 0 {
		t := time.NewTicker(s.cfg.HealthInterval)
		defer t.Stop()
		healthC = t.C
	}
	if s.cfg.MemoryInterval > 0 {
		t := time.NewTicker(s.cfg.MemoryInterval)
		defer t.Stop()
		memC = t.C
	}
	send := func(ev event) bool {
		select {
		case s.events <- ev:
			return true
		case <-ctx.Done():
		case <-c.ctx.Done():
		}
		return false
	}
	sampleMemory := func() bool {
		mctx, cancel := context.WithTimeout(c.ctx, s.cfg.HealthTimeout)
		m, err := c.proc.Memory(mctx)
		cancel()
		return send(event{c: c, kind: evMemory, mem: m, err: err})
	}
	checkHealth := func() bool {
		hctx, cancel := context.WithTimeout(c.ctx, s.cfg.HealthTimeout)
		err := c.proc.Healthy(hctx)
		cancel()
		return send(event{c: c, kind: evHealth, err: err})
	}
	// A first sample at once, so Stats shows a new Chrome's footprint
	// without waiting a whole interval.
	if memC != nil && !sampleMemory() {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.ctx.Done():
			return
		case <-c.proc.Done():
			send(event{c: c, kind: evExited})
			return
		case <-healthC:
			if !checkHealth() {
				return
			}
		case <-c.checkNow:
			if !checkHealth() {
				return
			}
		case <-memC:
			if !sampleMemory() {
				return
			}
		}
	}
}

// handle takes one monitor event.
func (a *actor) handle(ev event) {
	s := a.s
	c := ev.c
	s.mu.Lock()
	if c.state == stateDead {
		s.mu.Unlock()
		return // killed meanwhile; its monitor's last words do not matter
	}
	switch ev.kind {
	case evExited:
		a.detachLocked(c)
		s.counts.chromeCrashes++
		jobs, inflight := c.starts, c.inflight
		s.mu.Unlock()
		s.log.Error("chrome crashed", zap.Int("pid", c.pid), zap.Int("chrome", c.seq),
			zap.Int("jobs", jobs), zap.Int("in_flight", inflight))
		// Reap it and remove its profile; the process is already gone.
		a.kill(killOrder{c, reasonCrash, browser.ClassCrashed}, false)
		return
	case evHealth:
		if ev.err == nil {
			fails, probe := c.healthFails, c.probeFailed
			c.healthFails, c.probeFailed = 0, false
			suspected := fails > 0 || probe
			if suspected {
				s.broadcastLocked() // Acquire waits while the current Chrome is suspect
			}
			s.mu.Unlock()
			if suspected {
				s.log.Info("chrome healthy again", zap.Int("pid", c.pid), zap.Int("chrome", c.seq),
					zap.Int("failed_checks", fails), zap.Bool("job_probe_failed", probe))
			}
			return
		}
		c.healthFails++
		s.counts.healthFailures++
		fails, probe := c.healthFails, c.probeFailed
		hung := a.hungLocked(c)
		jobs, inflight := c.starts, c.inflight
		s.mu.Unlock()
		s.log.Warn("chrome health check failed", zap.Int("pid", c.pid), zap.Int("chrome", c.seq),
			zap.Int("consecutive", fails), zap.Bool("job_probe_failed", probe), zap.Error(ev.err))
		if hung {
			a.killHung(c, jobs, inflight)
		}
		return
	case evProbe:
		if c.probeFailed {
			s.mu.Unlock()
			return // counted once until a check passes
		}
		c.probeFailed = true
		fails := c.healthFails
		hung := a.hungLocked(c)
		jobs, inflight := c.starts, c.inflight
		s.mu.Unlock()
		s.log.Warn("chrome did not answer a job's probe", zap.Int("pid", c.pid), zap.Int("chrome", c.seq),
			zap.Int("failed_checks", fails))
		if hung {
			a.killHung(c, jobs, inflight)
			return
		}
		select {
		case c.checkNow <- struct{}{}:
		default:
		}
		return
	case evMemory:
		if ev.err != nil {
			s.mu.Unlock()
			s.log.Warn("chrome memory sample failed", zap.Int("pid", c.pid), zap.Error(ev.err))
			return
		}
		c.pss = ev.mem.PSSBytes
		s.pss.observe(s.livePSSLocked())
		ceiling := s.cfg.MemoryCeilingBytes
		hit := ceiling > 0 && c.pss > uint64(ceiling) && !c.overMemory
		if hit {
			c.overMemory = true
		}
		s.mu.Unlock()
		if hit {
			s.log.Warn("chrome memory ceiling hit", zap.Int("pid", c.pid), zap.Int("chrome", c.seq),
				zap.Uint64("pss_bytes", ev.mem.PSSBytes), zap.Int64("ceiling_bytes", ceiling),
				zap.Int("processes", ev.mem.Processes))
		}
	}
}

// hungLocked reports whether c's evidence declares it hung, and if so
// takes it out of service: Config.HealthFailures failures in a row, where
// a job's probe that found c not answering since its last passed check
// counts as one, but never alone — a 2 s probe on a busy node is weaker
// evidence than a check's HealthTimeout, so one failed check must back it.
func (a *actor) hungLocked(c *chrome) bool {
	fails := c.healthFails
	if fails == 0 {
		return false
	}
	if c.probeFailed {
		fails++
	}
	if fails < a.s.cfg.HealthFailures {
		return false
	}
	a.detachLocked(c)
	a.s.counts.chromeCrashes++
	return true
}

// killHung logs c declared hung and kills it; jobs and inflight are its
// counts when it was.
func (a *actor) killHung(c *chrome, jobs, inflight int) {
	a.s.log.Error("chrome unresponsive", zap.Int("pid", c.pid), zap.Int("chrome", c.seq),
		zap.Int("jobs", jobs), zap.Int("in_flight", inflight))
	a.kill(killOrder{c, reasonHang, browser.ClassUnresponsive}, true)
}

// detachLocked takes a lost Chrome out of service wherever it was, so the
// policy replaces it at once.
func (a *actor) detachLocked(c *chrome) {
	s := a.s
	switch l := c.lane; {
	case l.current == c:
		l.current = nil
		l.refill = true
	case l.standby == c:
		l.standby = nil
	default:
		s.retiring = slices.DeleteFunc(s.retiring, func(r *chrome) bool { return r == c })
	}
	c.state = stateDead
	s.broadcastLocked()
}
