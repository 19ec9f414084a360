package farm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// Run boots the node's first Chrome, registers the node (once Gate closes,
// when set: before that, ctx's end stops it quietly) and works until ctx
// ends or the process has done its ExitAfterJobs jobs. On either it stops
// claiming, hands its unstarted jobs back, lets in-flight ones finish
// (within DrainTimeout when ctx ended), marks the node exited and kills its
// Chromes. It returns nil after
// ctx ended, ErrRecycle when the process should exit to be restarted, or
// the error that stopped the node. Run may be called once.
func (c *Consumer) Run(ctx context.Context) (err error) {
	c.mu.Lock()
	if c.ran {
		c.mu.Unlock()
		return errors.New("farm: consumer: Run called twice")
	}
	c.ran = true
	c.mu.Unlock()

	// Chrome profile dirs of consumer processes that died without cleaning
	// up (kill -9) go before this process makes its own.
	swept, err := browser.SweepStaleProfiles(c.cfg.Supervisor.Browser.ProfileRoot)
	if err != nil {
		c.log.Warn("sweeping stale Chrome profile dirs", zap.Error(err))
	}
	if len(swept) > 0 {
		c.log.Info("removed stale Chrome profile dirs of dead processes", zap.Strings("dirs", swept))
	}

	// Every goroutine below is owned by Run and ended before it returns.
	// The supervisor, the renders and the completer outlive ctx on purpose:
	// they are stopped in order during the drain.
	base := context.WithoutCancel(ctx)
	defer c.stopReports()
	// The egress proxy outlives the supervisor: Chrome needs it until it is
	// killed.
	defer c.serveEgress(base)()
	// The first Chrome boots while the node registers (or stands by): its
	// boot is off the node's first jobs either way. Until the drain below
	// takes over, leaving Run kills the Chromes first.
	sup := c.startSupervisor(base)
	defer sup.cancel()
	if c.cfg.Gate != nil {
		if turn, err := c.standBy(ctx, sup); !turn {
			return err
		}
	}

	node, reclaimed, err := c.register(ctx)
	if err != nil {
		sup.stop()
		if ctx.Err() != nil {
			// A stop while the first Chrome booted: nothing to drain.
			c.log.Info("stopped before the node registered")
			return nil
		}
		return fmt.Errorf("farm: consumer: %w", err)
	}
	c.inc = c.q.Incarnation(node)
	c.log = c.log.With(zap.Int64("incarnation", node.Incarnation))
	c.log.Info("node registered", zap.Int("capacity", c.cfg.Capacity),
		zap.Int64("process_restarts", node.ProcessRestarts),
		zap.Int("chrome_recycle_jobs", c.cfg.Supervisor.ChromeRecycleJobs),
		zap.Int("exit_after_jobs", c.cfg.Supervisor.ExitAfterJobs),
		zap.Int64("reclaimed_queued", reclaimed.Released), zap.Int64("reclaimed_retried", reclaimed.Retried),
		zap.Int64("reclaimed_failed", reclaimed.Failed))
	now := time.Now()
	c.mu.Lock()
	c.running, c.startedAt, c.lastBeat, c.lastChrome = true, now, now, now
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running, c.runErr = false, err
		c.mu.Unlock()
	}()

	bgCtx, stopBG := context.WithCancel(base)
	defer stopBG()
	var bg sync.WaitGroup
	woken := c.startBackground(bgCtx, &bg)

	completerCtx, stopCompleter := context.WithCancel(base)
	defer stopCompleter()
	var completerWG sync.WaitGroup
	completerWG.Go(func() { c.completer(completerCtx) })

	jobsCtx, cancelJobs := context.WithCancelCause(base)
	defer cancelJobs(nil)
	var jobs sync.WaitGroup

	reason := c.loop(ctx, woken, sup.exited, jobsCtx, &jobs)

	c.drain(ctx, reason, &jobs, cancelJobs)
	stopCompleter()
	completerWG.Wait()

	// The supervisor kills its Chromes (already retired when the exit was
	// due) and reaps them before Run returns.
	supErr := sup.stop()

	// The heartbeat stops before the exit mark: a heartbeat of the current
	// incarnation would make the node active again.
	stopBG()
	bg.Wait()
	left := c.markExited(base, reason)
	c.logExit(reason, left)

	switch {
	case c.isFenced():
		return fmt.Errorf("farm: consumer: %w", c.fenceCause)
	case supErr != nil:
		return fmt.Errorf("farm: consumer: %w", supErr)
	case reason == stopFatal:
		return errors.New("farm: consumer: the Chrome supervisor stopped")
	case reason == stopExitDue:
		return ErrRecycle
	}
	return nil
}

// serveEgress serves the node's egress proxy until the returned stop,
// which returns once the proxy has stopped.
func (c *Consumer) serveEgress(base context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(base)
	done := make(chan struct{})
	log := c.log // c.log gains the incarnation while this runs
	go func() {
		defer close(done)
		if err := c.egress.Serve(ctx); err != nil {
			log.Warn("egress proxy stopped", zap.Error(err))
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// supervisorRun is the node's supervisor running under Run.
type supervisorRun struct {
	cancel context.CancelFunc
	exited chan struct{} // closed when the supervisor's Run returned
	err    error         // what it returned; read after exited closed
}

func (c *Consumer) startSupervisor(base context.Context) *supervisorRun {
	ctx, cancel := context.WithCancel(base)
	s := &supervisorRun{cancel: cancel, exited: make(chan struct{})}
	go func() {
		defer close(s.exited)
		s.err = c.sup.Run(ctx)
	}()
	return s
}

// stop kills the supervisor's Chromes, waits until they are reaped and
// returns what the supervisor's Run returned.
func (s *supervisorRun) stop() error {
	s.cancel()
	<-s.exited
	return s.err
}

// standBy waits for the process's turn (Gate) while the first Chrome boots,
// then lets the supervisor serve and reports true. Otherwise it reports
// false, with nil after a stop while standing by (the Chrome killed and
// reaped), or why the supervisor ended.
func (c *Consumer) standBy(ctx context.Context, sup *supervisorRun) (turn bool, err error) {
	c.log.Info("standing by: the first Chrome boots in the background until this process's turn")
	select {
	case <-c.cfg.Gate:
	case <-ctx.Done():
		sup.stop()
		c.log.Info("stopped while standing by")
		return false, nil
	case <-sup.exited:
		return false, fmt.Errorf("farm: consumer: supervisor stopped while standing by: %w", sup.err)
	}
	c.sup.Release()
	return true, nil
}

// startBackground starts the node's wake-ups, heartbeat and scale-in
// protection on bg, until ctx ends. It returns what wakes the claim loop
// besides its own events: a producer's long-poll, the node's NOTIFY
// channel, or nothing in poll-only mode.
func (c *Consumer) startBackground(ctx context.Context, bg *sync.WaitGroup) wakeups {
	noListener := make(chan struct{})
	close(noListener)
	woken := wakeups{ready: noListener}
	var src wakeSource
	switch {
	case c.wakeClient != nil:
		src = c.wakeClient
	case !c.cfg.PollOnly:
		src = c.q.Wakeups(c.node, c.log.Named("listener"))
	}
	if src != nil {
		woken = wakeups{ready: src.Ready(), c: src.C()}
		bg.Go(func() {
			if err := src.Run(ctx); err != nil {
				c.log.Error("wake-ups stopped", zap.Error(err))
			}
		})
	}
	bg.Go(func() { c.heartbeatLoop(ctx) })
	if c.cfg.Protector != nil {
		bg.Go(func() { c.protectLoop(ctx) })
	}
	return woken
}

// drain takes nothing new, hands back what has not started and lets what
// runs finish: after an exit-after-jobs stop within the jobs' own
// timeouts until ctx ends, else (and from then) within DrainTimeout, after
// which the jobs are canceled. A fenced process leaves at once: the node,
// its jobs and their outcomes belong to the id's new process.
func (c *Consumer) drain(ctx context.Context, reason stopReason, jobs *sync.WaitGroup, cancelJobs context.CancelCauseFunc) {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	if reason == stopFenced {
		c.log.Error("another process registered this node id; this process stops without touching the node",
			zap.Error(c.fenceCause), zap.Int("in_flight_abandoned", c.Stats().Held))
		cancelJobs(&browser.Error{Class: browser.ClassCanceled, Retriable: true, Err: c.fenceCause})
	} else {
		c.handBack(reason)
	}
	// After an exit-after-jobs stop nobody asked the node to hurry.
	if waitJobs(ctx, jobs, reason == stopExitDue, c.cfg.DrainTimeout) {
		return
	}
	c.log.Warn("in-flight jobs did not finish within the drain timeout; canceling them",
		zap.Duration("drain_timeout", c.cfg.DrainTimeout), zap.Int("in_flight", c.Stats().Held))
	cancelJobs(errDrainCanceled)
	// The renders end at once; what they still have to record gets
	// drainReportGrace. An outcome not recorded then is left to the exit,
	// which hands its job back.
	t := time.AfterFunc(drainReportGrace, c.stopReports)
	jobs.Wait()
	t.Stop()
}

// errDrainTimeout is why the drain cancels the jobs still running at its
// timeout. The node's stop is not the jobs' doing: a job whose render ends
// for it is handed back with its attempt given back (runJob, nodeStopped),
// as the drain hands back the jobs it had not started.
var errDrainTimeout = errors.New("node stopping: drain timeout")

// errDrainCanceled is the cause the drain cancels its jobs with.
var errDrainCanceled = &browser.Error{Class: browser.ClassCanceled, Retriable: true, Err: errDrainTimeout}

// markExited marks the node exited, handing back whatever it still held
// and adding to its lifetime counters what its process counted since its
// last heartbeat, and lifts its scale-in protection. A fenced node's row
// is not its own.
func (c *Consumer) markExited(base context.Context, reason stopReason) jobqueue.Reclaimed {
	var left jobqueue.Reclaimed
	if !c.isFenced() {
		ctx, cancel := context.WithTimeout(base, shutdownTimeout)
		var err error
		// The exit carries the process's final counts: what it counted
		// after its last heartbeat (a stop with no drain replaces the
		// contexts of the jobs it cancels) would be lost otherwise.
		left, err = c.inc.Exit(ctx, reason.exitReason(), processCounts(c.sup.Stats()))
		cancel()
		if err != nil {
			c.noteFenced(err)
			c.log.Warn("cannot mark the node exited", zap.Error(err))
		}
	}
	if c.cfg.Protector != nil {
		ctx, cancel := context.WithTimeout(base, shutdownTimeout)
		if err := c.cfg.Protector.SetBusy(ctx, false); err != nil {
			c.log.Warn("cannot lift scale-in protection", zap.Error(err))
		}
		cancel()
	}
	return left
}

func (c *Consumer) logExit(reason stopReason, left jobqueue.Reclaimed) {
	st := c.sup.Stats()
	cs := c.Stats()
	c.log.Info("node exited", zap.String("why", reason.String()),
		zap.Int64("completed", cs.Completed), zap.Int64("failed", cs.Failed), zap.Int64("given_back", cs.GivenBack),
		zap.Int("jobs_since_process_start", st.JobsSinceProcessStart),
		zap.Int("chrome_starts", st.ChromeStarts), zap.Int("chrome_kills", st.ChromeKills),
		zap.Int("chrome_crashes", st.ChromeCrashes),
		zap.Int64("contexts_reused", st.Contexts.Reused), zap.Int64("contexts_replaced", st.Contexts.ReplacedTotal()),
		zap.Any("contexts_replaced_by", st.Contexts.ByReason()),
		zap.Int64("left_released", left.Released), zap.Int64("left_retried", left.Retried))
}

// stopReason says why the claim loop ended.
type stopReason int

const (
	stopSignal  stopReason = iota // Run's context ended
	stopExitDue                   // every job the process may start was claimed
	stopFatal                     // the supervisor gave up
	stopFenced                    // another process registered the node's id
)

// handBack marks the node draining and hands its unstarted jobs back to
// the queue, so the producer gives them to other nodes while this one
// finishes what runs. A refusal because the id was taken fences the node.
func (c *Consumer) handBack(reason stopReason) {
	// Retried like an outcome: a node left active by one failed call keeps
	// getting jobs it will not claim, until its exit.
	if err := retryReport(c.reports, c.log, func(ctx context.Context) error {
		_, err := c.inc.SetState(ctx, jobqueue.NodeDraining, "")
		return err
	}); err != nil {
		c.noteFenced(err)
		c.log.Warn("cannot mark the node draining", zap.Error(err))
	}
	if c.claimLost {
		// Into the node's queue, their attempt given back, for the release
		// below to hand back with the rest.
		if err := retryReport(c.reports, c.log, func(ctx context.Context) error {
			back, err := c.inc.Unclaim(ctx, c.liveJobs())
			if err == nil && len(back) > 0 {
				c.log.Warn("a claim's answer was lost: its jobs are handed back", zap.Int64s("jobs", back))
			}
			return err
		}); err != nil {
			c.noteFenced(err)
			c.log.Warn("cannot give back the jobs of a claim whose answer was lost", zap.Error(err))
		}
	}
	var released int64
	if err := retryReport(c.reports, c.log, func(ctx context.Context) error {
		var err error
		released, err = c.inc.Release(ctx)
		return err
	}); err != nil {
		c.noteFenced(err)
		c.log.Warn("cannot release the unstarted jobs", zap.Error(err))
	}
	c.log.Info("node draining", zap.String("why", reason.String()), zap.Int64("released_queued", released),
		zap.Int("in_flight", c.Stats().Held))
}

func (r stopReason) String() string {
	switch r {
	case stopSignal:
		return "signal"
	case stopExitDue:
		return "exit-after-jobs"
	case stopFatal:
		return "fatal"
	case stopFenced:
		return "fenced"
	}
	return "unknown"
}

// exitReason is what the node's exit mark records.
func (r stopReason) exitReason() string {
	switch r {
	case stopExitDue:
		return jobqueue.ExitRecycle
	case stopSignal:
		return jobqueue.ExitStop
	}
	return jobqueue.ExitFatal
}

// register takes the node id with a new incarnation. When a live-looking
// incarnation holds it, and that is a process of this host that no longer
// runs (a consumer killed with -9 and restarted at once), it takes the id
// over without waiting for the holder's heartbeat to go stale; any other
// holder is reported as the error.
func (c *Consumer) register(ctx context.Context) (jobqueue.Node, jobqueue.Reclaimed, error) {
	info := jobqueue.NodeInfo{ID: c.node, Hostname: c.cfg.Hostname, Capacity: c.cfg.Capacity,
		Version: c.cfg.Version, PID: os.Getpid(),
		// The node row's 0 is the supervisor's Off: the dashboard shows "off".
		ChromeRecycleJobs: max(c.cfg.Supervisor.ChromeRecycleJobs, 0), ExitAfterJobs: max(c.cfg.Supervisor.ExitAfterJobs, 0)}
	node, r, err := c.q.Register(ctx, info)
	var inUse *jobqueue.NodeInUseError
	if !errors.As(err, &inUse) || inUse.Hostname != c.cfg.Hostname || inUse.PID <= 0 || browser.ProcessRuns(inUse.PID) {
		return node, r, err
	}
	c.log.Warn("the node id's previous process is gone; taking the id over",
		zap.Int("previous_pid", inUse.PID), zap.Int64("previous_incarnation", inUse.Incarnation),
		zap.Duration("previous_heartbeat_age", inUse.HeartbeatAge))
	info.Replaces = inUse.Incarnation
	return c.q.Register(ctx, info)
}

// waitJobs waits for wg: first until ctx ends when untilCtx is set, then
// at most grace. It reports whether wg finished.
func waitJobs(ctx context.Context, wg *sync.WaitGroup, untilCtx bool, grace time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	if untilCtx {
		select {
		case <-done:
			return true
		case <-ctx.Done():
		}
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		// done may have closed at the same instant; prefer it.
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}
