package farm

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/outage"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

// heartbeatLoop reports the node's load and renews its leases every
// HeartbeatInterval until ctx ends.
func (c *Consumer) heartbeatLoop(ctx context.Context) {
	// The first sample only primes the CPU counters.
	if _, err := c.cfg.Load(ctx); err != nil {
		c.log.Debug("load sample failed", zap.Error(err))
	}
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.heartbeat(ctx)
	}
}

// heartbeat sends one heartbeat. The queue makes a node that was declared
// lost while this process lived on active again; a heartbeat refused because
// another process registered the id stops the node.
func (c *Consumer) heartbeat(ctx context.Context) {
	load := c.load(ctx)
	// A heartbeat sent is let finish, not canceled with ctx: pgx returns at
	// once on cancel while the server may still commit the statement, and a
	// heartbeat committed after the exit mark would make the node active
	// again. Stopping waits for it (bounded by the timeout).
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(c.cfg.HeartbeatInterval, 5*time.Second))
	defer cancel()
	st, gone, err := c.inc.HeartbeatLive(hctx, load, c.liveJobs())
	c.stopGone(gone)
	now := time.Now()
	c.mu.Lock()
	c.beatErr = err
	var failures int64
	var failedFor time.Duration
	recovered := false
	say := outage.Nothing
	switch {
	case err == nil:
		c.lastBeat = now
		failures, failedFor, recovered = c.beatOut.Succeed(now)
	case !errors.Is(err, jobqueue.ErrFenced) && ctx.Err() == nil:
		say = c.beatOut.Fail(now)
		failures, failedFor = c.beatOut.Failures(), c.beatOut.For(now)
	}
	stopping := c.stopping
	c.mu.Unlock()
	if recovered {
		// The warnings stop: say why, once (a database outage's end).
		c.log.Info("heartbeat answered again", zap.Int64("failures", failures), zap.Duration("failed_for", failedFor))
	}
	if err == nil && stopping && st == jobqueue.NodeActive {
		// Declared lost while draining (its heartbeats failed for a while),
		// the node was made active again by this one: it would get jobs it
		// no longer claims. Draining again, they go back.
		c.log.Warn("the draining node was made active again after being declared lost; draining it again")
		if _, err := c.inc.SetState(hctx, jobqueue.NodeDraining, ""); err != nil {
			c.noteFenced(err)
			c.log.Warn("cannot mark the node draining", zap.Error(err))
		} else if _, err := c.inc.Release(hctx); err != nil {
			c.log.Warn("cannot release the unstarted jobs", zap.Error(err))
		}
	}
	if errors.Is(err, jobqueue.ErrFenced) {
		c.noteFenced(err)
		return
	}
	if err != nil && say != outage.Nothing {
		// When the failures start, then once a minute while they go on.
		c.log.Warn("heartbeat failed", zap.Error(err), zap.Int64("failures", failures), zap.Duration("failing_for", failedFor))
	}
}

// liveJobs lists the jobs whose leases the next heartbeat renews: those
// still rendering or being reported. A job whose report was given up on is
// not among them, so its lease runs out and the producer takes it back.
func (c *Consumer) liveJobs() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]int64, 0, len(c.live))
	for id := range c.live {
		ids = append(ids, id)
	}
	return ids
}

// load assembles the heartbeat's load report.
func (c *Consumer) load(ctx context.Context) jobqueue.NodeLoad {
	st := c.sup.Stats()
	pss := c.sup.TakePSSRange()
	if st.Chromes > 0 {
		c.mu.Lock()
		c.lastChrome = time.Now()
		c.mu.Unlock()
	}
	l := processCounts(st)
	l.ChromePSSBytes = int64(st.ChromePSSBytes)
	l.BusySessions = st.Busy
	l.JobsSinceChromeStart = int64(st.JobsSinceChromeStart)
	l.JobsSinceProcessStart = int64(st.JobsSinceProcessStart)
	// Replaced Chromes, not starts: a node starts a Chrome per session, and
	// a standby boots before the Chrome it replaces retires.
	l.ChromeRestarts = int64(st.Recycles + st.ChromeCrashes)
	l.ChromePSSMinBytes, l.ChromePSSMaxBytes = int64(pss.Min), int64(pss.Max)
	m, err := c.cfg.Load(ctx)
	if err != nil {
		c.log.Debug("load sample failed", zap.Error(err))
		return l
	}
	l.CPUPercent = m.CPUPercent
	l.MemUsedBytes = int64(m.MemUsedBytes) + l.ChromePSSBytes
	l.MemTotalBytes = int64(m.MemTotalBytes)
	return l
}

// processCounts is the load report's counts of the process's life so far
// that the queue adds into the node's lifetime counters: what every
// heartbeat carries, and the exit mark last.
func processCounts(st supervisor.Stats) jobqueue.NodeLoad {
	return jobqueue.NodeLoad{
		ChromeRecycles:       int64(st.Recycles - st.MemoryRecycles),
		ChromeMemoryRecycles: int64(st.MemoryRecycles),
		ChromeCrashes:        int64(st.ChromeCrashes),
		ContextsReused:       st.Contexts.Reused,
		ContextsReplaced:     st.Contexts.ReplacedTotal(),
	}
}

// protectLoop tells the Protector when the node starts holding jobs (at
// once) and when it has held none for ProtectorIdleAfter. A call that
// failed is made again every ProtectorRetry until one succeeds: a busy node
// left unprotected could be terminated mid-job by a scale-in, for as long
// as it stays busy. A process that holds no job for ProtectorIdleAfter
// after its start says idle too, though it never said busy: a process
// killed while busy left its instance protected, and an idle instance
// nobody unprotects can never be scaled in. (Not at once at the start: a
// node that gets work at once, as one replaced every few seconds does,
// would make two calls per process instead of one.)
func (c *Consumer) protectLoop(ctx context.Context) {
	var idleTimer *time.Timer
	var idleC <-chan time.Time
	stopTimer := func() {
		if idleTimer != nil {
			idleTimer.Stop()
			idleTimer, idleC = nil, nil
		}
	}
	defer stopTimer()
	busy := false // what the instance should be
	var retryC <-chan time.Time
	apply := func() {
		pctx, cancel := context.WithTimeout(ctx, shutdownTimeout)
		defer cancel()
		retryC = nil
		if err := c.cfg.Protector.SetBusy(pctx, busy); err != nil && ctx.Err() == nil {
			c.log.Warn("protector failed; trying again", zap.Bool("busy", busy), zap.Duration("retry_in", c.cfg.ProtectorRetry), zap.Error(err))
			retryC = time.After(c.cfg.ProtectorRetry)
		}
	}
	told := false // the Protector was told something by this process
	idleTimer = time.NewTimer(c.cfg.ProtectorIdleAfter)
	idleC = idleTimer.C
	for {
		select {
		case <-ctx.Done():
			return
		case <-retryC:
			apply()
			continue
		case <-idleC:
			idleTimer, idleC = nil, nil
			if c.Stats().Held == 0 && (busy || !told) {
				busy, told = false, true
				apply()
			}
			continue
		case <-c.busyChanged:
		}
		held := c.Stats().Held
		switch {
		case held > 0:
			stopTimer()
			if !busy {
				busy, told = true, true
				apply()
			}
		case busy && idleTimer == nil:
			idleTimer = time.NewTimer(c.cfg.ProtectorIdleAfter)
			idleC = idleTimer.C
		}
	}
}
