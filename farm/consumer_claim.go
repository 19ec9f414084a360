package farm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/farm/blobstore"
	"github.com/browserfarm/browserfarm/internal/backoff"
	"github.com/browserfarm/browserfarm/internal/ctxtime"
	"github.com/browserfarm/browserfarm/internal/outage"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// loop claims jobs while slots are free and starts one goroutine per job,
// until ctx ends, every job the process may start has been claimed, or the
// supervisor fails.
func (c *Consumer) loop(ctx context.Context, l wakeups, supExited <-chan struct{}, jobsCtx context.Context, jobs *sync.WaitGroup) stopReason {
	c.turned()
	defer c.unwatched()
	// Jobs assigned before the LISTEN took effect are found by the first
	// claim, made once listening, so none waits for the poll.
	// A listener that never becomes ready (LISTEN refused, the producer
	// unreachable) leaves the node to its poll, not idle.
	select {
	case <-l.ready:
	case <-time.After(c.cfg.PollInterval):
		c.log.Warn("no wake-ups yet; looking for work every poll interval meanwhile", zap.Duration("poll_interval", c.cfg.PollInterval))
	case <-ctx.Done():
		return stopSignal
	case <-supExited:
		return stopFatal
	}
	poll := time.NewTicker(c.cfg.PollInterval)
	defer poll.Stop()
	claimBackoff := time.Duration(0)
	// claimOut says when claims, failing through a database outage, answer
	// again: the warnings below just stop otherwise.
	var claimOut outage.Tracker
	for {
		c.turned()
		if c.isFenced() {
			return stopFenced
		}
		if ctx.Err() != nil {
			return stopSignal
		}
		if c.blobsDown.Load() {
			if r, stop := c.awaitBlobs(ctx, supExited); stop {
				return r
			}
		}
		// Notifications that arrived so far are answered by this claim.
		drainWakeups(l.c)
		free, remaining := c.claimable()
		if remaining == 0 {
			return stopExitDue
		}
		if free > 0 {
			// Not canceled by a stop: the server may commit a claim whose
			// client gave up, leaving jobs processing that nobody runs until
			// their lease runs out, each charged an attempt it never had.
			// A claim that returns is started; the stop is seen next turn.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
			var claimed []jobqueue.Job
			var err error
			if c.claimLost {
				// Every job started is in live now: the others processing
				// here go back to the node's queue, their attempt given
				// back, and this turn's claim starts them.
				var back []int64
				if back, err = c.inc.Unclaim(cctx, c.liveJobs()); err == nil {
					c.claimLost = false
					if len(back) > 0 {
						c.log.Warn("a claim's answer was lost: its jobs are claimed again", zap.Int64s("jobs", back))
					}
				}
			}
			if err == nil {
				claimed, err = c.inc.Claim(cctx, free)
			}
			cancel()
			switch {
			case errors.Is(err, jobqueue.ErrFenced):
				c.noteFenced(err)
				return stopFenced
			case err != nil && ctx.Err() != nil:
				c.claimLost = true // the drain gives its jobs back (handBack)
				return stopSignal
			case err != nil:
				c.claimLost = true
				claimBackoff = min(max(2*claimBackoff, 100*time.Millisecond), 5*time.Second)
				wait := backoff.Jitter(claimBackoff)
				if claimOut.Fail(time.Now()) != outage.Nothing {
					// When the failures start, then once a minute.
					c.log.Warn("claim failed", zap.Error(err), zap.Duration("retry_in", wait),
						zap.Int64("failures", claimOut.Failures()), zap.Duration("failing_for", claimOut.For(time.Now())))
				}
				if !ctxtime.Sleep(ctx, wait) {
					return stopSignal
				}
				continue
			}
			claimBackoff = 0
			if failures, failedFor, ended := claimOut.Succeed(time.Now()); ended {
				c.log.Info("claims answered again", zap.Int64("failures", failures), zap.Duration("failed_for", failedFor))
			}
			for _, j := range claimed {
				c.start(jobsCtx, jobs, j)
			}
			if len(claimed) == free {
				// There may be more queued; look again at once.
				continue
			}
		}
		select {
		case <-ctx.Done():
			return stopSignal
		case <-supExited:
			return stopFatal
		case <-c.fenced:
			return stopFenced
		case <-l.c:
		case <-c.jobDone:
		case <-poll.C:
		}
	}
}

// turned marks the claim loop running, beginning a turn now
// (claimLoopStalled). The loop calls it at each turn and as it leaves
// awaitBlobs.
func (c *Consumer) turned() {
	c.mu.Lock()
	c.claiming, c.lastTurn = true, time.Now()
	c.mu.Unlock()
}

// unwatched takes the claim loop out of claimLoopStalled's watch: it ended,
// or it waits on purpose.
func (c *Consumer) unwatched() {
	c.mu.Lock()
	c.claiming = false
	c.mu.Unlock()
}

// claimable is how many jobs may be claimed now (free slots) and how many
// more this process may start, both net of claimed jobs that have not taken
// their slot yet. unacquired is read before the supervisor: a goroutine
// takes its slot before it stops counting as unacquired, so the sum can
// only overstate what is in use, never understate it.
func (c *Consumer) claimable() (free, remaining int) {
	c.mu.Lock()
	pending := c.unacquired
	c.mu.Unlock()
	free = c.sup.Available() - pending
	remaining = c.sup.Remaining() - pending
	return max(0, min(free, remaining)), max(0, remaining)
}

// liveJob is one claimed attempt's entry in Consumer.live.
type liveJob struct {
	stop context.CancelCauseFunc // stops its render
}

// start runs one claimed job on its own goroutine, under a context of its
// own that stopGone cancels.
func (c *Consumer) start(jobsCtx context.Context, jobs *sync.WaitGroup, j jobqueue.Job) {
	ctx, stop := context.WithCancelCause(jobsCtx)
	lj := &liveJob{stop: stop}
	c.mu.Lock()
	c.unacquired++
	c.held++
	// A job taken back from this node (declared lost) and given to it
	// again can be claimed while its earlier attempt's goroutine is still
	// ending: the newer attempt's entry replaces it, and stays.
	c.live[j.ID] = lj
	c.mu.Unlock()
	c.signal(c.busyChanged)
	jobs.Go(func() {
		defer func() {
			c.mu.Lock()
			c.held--
			if c.live[j.ID] == lj {
				delete(c.live, j.ID)
			}
			c.mu.Unlock()
			stop(nil)
			c.signal(c.busyChanged)
			c.signal(c.jobDone)
		}()
		c.runJob(ctx, j)
	})
}

// errJobGone is why a job's render stops when the queue no longer has it
// processing on this node.
var errJobGone = &browser.Error{Class: browser.ClassCanceled, Retriable: true,
	Err: errors.New("the job is no longer this node's (canceled, or taken back while the node was declared lost)")}

// stopGone stops the renders of jobs the queue no longer has processing on
// this node (a heartbeat names them): a canceled job would otherwise go on
// loading its site, past the host's politeness limit, which no longer
// counts it, until its timeout. A job already reporting is unaffected.
func (c *Consumer) stopGone(ids []int64) {
	c.mu.Lock()
	stops := make([]context.CancelCauseFunc, 0, len(ids))
	for _, id := range ids {
		if lj := c.live[id]; lj != nil {
			stops = append(stops, lj.stop)
		}
	}
	c.mu.Unlock()
	for _, stop := range stops {
		stop(errJobGone)
	}
	if len(stops) > 0 {
		c.log.Info("stopping jobs no longer this node's", zap.Int64s("jobs", ids))
	}
}

// signal wakes the reader of a capacity-1 channel without blocking.
func (c *Consumer) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// runJob renders one job on a supervisor slot and records the outcome.
func (c *Consumer) runJob(ctx context.Context, j jobqueue.Job) {
	log := c.log.With(zap.Int64("job", j.ID), zap.Int("attempt", j.Attempts))
	slot, err := c.sup.Acquire(ctx)
	c.mu.Lock()
	c.unacquired--
	c.mu.Unlock()
	if err != nil {
		if c.gone(ctx, log, err) || c.fencedOut(ctx, log, err) {
			return
		}
		// The node is stopping or its supervisor failed before the job
		// started: not the job's fault.
		c.fail(j, log, nodeFault{&browser.Error{Class: browser.ClassCanceled, Retriable: true,
			Err: fmt.Errorf("node %s could not start the job: %w", c.node, err)}}, 0)
		return
	}
	req := SpecRequest(j.Spec, j.BatchID)
	limitRequest(&req, c.q.ResultLimits())
	proxy, err := c.checkJobProxy(ctx, j.Spec.Proxy)
	if err != nil {
		slot.Release()
		c.signal(c.jobDone)
		if c.gone(ctx, log, err) || c.fencedOut(ctx, log, err) {
			return
		}
		if nodeStopped(ctx, err) {
			err = nodeFault{err}
		}
		c.fail(j, log, err, 0)
		return
	}
	req.Proxy = proxy
	rctx, cancel := context.WithTimeout(ctx, req.Timeout+renderSlack)
	t0 := time.Now()
	res, err := slot.Render(rctx, req)
	took := time.Since(t0)
	cancel()
	pid := slot.ChromePID()
	slot.Release()
	c.signal(c.jobDone)
	if err != nil {
		if c.gone(ctx, log, err) || c.fencedOut(ctx, log, err) {
			return
		}
		// Decided on the render's own error: a render that failed by
		// itself (its timeout, a Chrome it hung) just before the drain
		// canceled it is charged.
		stopped := nodeStopped(ctx, err)
		if cause := context.Cause(ctx); ctx.Err() != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		rerr := renderFailure(j, err)
		if stopped {
			// Given back, but charged when its last attempt was given back
			// for a stop too: a job longer than the drain timeout on a fleet
			// that stops nodes often cannot run for ever uncharged.
			rerr = givenBack(j, err, browser.ClassCanceled)
		}
		c.failWithResult(j, log.With(zap.Int("chrome_pid", pid)), rerr, took, res)
		return
	}
	res.Links = c.followable(res.Links)
	c.complete(ctx, j, log, res, took)
}

// gone reports whether the job's render was stopped because the queue no
// longer has this attempt processing on the node (stopGone), and logs it.
// Such an attempt has nothing to record: the queue would refuse a failure
// for it — or, if the job was given to this node again meanwhile, charge
// the failure to the newer attempt, which runs on.
func (c *Consumer) gone(ctx context.Context, log *zap.Logger, err error) bool {
	if !errors.Is(context.Cause(ctx), errJobGone) {
		return false
	}
	log.Info("job stopped: it is no longer this node's", zap.Error(err))
	return true
}

// fencedOut reports whether the job's render was stopped because another
// process registered the node's id (the drain of a fenced process), and
// logs it. Such a process touches none of the node's jobs: their outcomes
// belong to the id's new process, and the queue would refuse them anyway.
func (c *Consumer) fencedOut(ctx context.Context, log *zap.Logger, err error) bool {
	if !errors.Is(context.Cause(ctx), jobqueue.ErrFenced) {
		return false
	}
	log.Info("job stopped: another process registered this node id; its outcome is left to that process", zap.Error(err))
	return true
}

// nodeStopped reports whether err, a job's failure, is the drain's cancel
// of it at the drain timeout (errDrainTimeout), rather than a failure of
// its own: the job's page, its timeout or its Chrome.
func nodeStopped(ctx context.Context, err error) bool {
	if !errors.Is(context.Cause(ctx), errDrainTimeout) {
		return false
	}
	return errors.Is(err, errDrainTimeout) || errors.Is(err, context.Canceled)
}

// wakeups are the notifications that wake the claim loop: ready closes once
// they are being received; c is nil when there are none (poll-only).
type wakeups struct {
	ready <-chan struct{}
	c     <-chan jobqueue.Notification
}

// drainWakeups empties a notification channel without blocking.
func drainWakeups(ch <-chan jobqueue.Notification) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// Pacing of awaitBlobs' probes: from blobProbeFirst, doubling to
// blobProbeMax.
const (
	blobProbeFirst = time.Second
	blobProbeMax   = 30 * time.Second
)

// awaitBlobs holds the claims while the blob store fails: a job the node
// rendered meanwhile would be thrown away (its attempt given back). The
// node's queued jobs go back to pending for nodes whose store works — again
// after each failed probe, since the producer sees free slots here — and the
// store is probed until it takes a blob. It returns true with the reason
// when the loop must stop instead.
//
// The wait is no stall of the loop (claimLoopStalled): a restart does not
// mend the store, and a directory store's probe on a hung network mount is
// bounded by nothing.
func (c *Consumer) awaitBlobs(ctx context.Context, supExited <-chan struct{}) (stopReason, bool) {
	c.unwatched()
	defer c.turned()
	pause := blobProbeFirst
	for {
		// Bounded like the loop's claims: not held by an unanswered call.
		rctx, cancel := context.WithTimeout(ctx, shutdownTimeout)
		n, err := c.inc.Release(rctx)
		cancel()
		switch {
		case errors.Is(err, jobqueue.ErrFenced):
			c.noteFenced(err)
			return stopFenced, true
		case err != nil && ctx.Err() != nil:
			return stopSignal, true
		case err != nil:
			c.log.Warn("cannot hand the queued jobs back", zap.Error(err))
		}
		c.log.Warn("the blob store failed; taking no job until it takes a blob again",
			zap.String("store", c.cfg.Blobs.String()), zap.Int64("handed_back", n), zap.Duration("probe_in", pause))
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return stopSignal, true
		case <-supExited:
			timer.Stop()
			return stopFatal, true
		case <-c.fenced:
			timer.Stop()
			return stopFenced, true
		case <-timer.C:
		}
		err = blobstore.Probe(ctx, c.cfg.Blobs, c.node)
		if err == nil {
			c.blobsDown.Store(false)
			c.log.Info("the blob store takes blobs again; taking jobs")
			return 0, false
		}
		if ctx.Err() != nil {
			return stopSignal, true
		}
		c.log.Warn("blob store probe failed", zap.Error(err))
		pause = min(2*pause, blobProbeMax)
	}
}
