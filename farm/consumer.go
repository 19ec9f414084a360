package farm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/browser/egress"
	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

// Consumer is one node of the farm: it registers with the queue, claims the
// jobs the producer assigns to it (woken by LISTEN/NOTIFY, with a slow poll
// as a safety net), renders each through a recycling Chrome supervisor,
// records the outcome, and heartbeats its load while renewing its leases.
// Create it with NewConsumer and call Run once.
type Consumer struct {
	cfg    ConsumerConfig
	q      consumerQueue
	sup    *supervisor.Supervisor
	log    *zap.Logger
	node   string
	egress *egress.Proxy // served by Run
	// wakeClient, with WakeURL, wakes the node instead of LISTEN.
	wakeClient *wake.Client
	inc        nodeIncarnation // set by Run's registration, before anything uses it

	fenced     chan struct{} // closed when a newer incarnation took the id
	fenceOnce  sync.Once
	fenceCause error

	jobDone     chan struct{} // a job released its slot or ended; capacity 1
	completions chan completion
	// reports bounds recording outcomes (blob uploads, completions,
	// failures): not Run's context, since an outcome is worth recording
	// during a drain, but canceled drainReportGrace after a drain timed
	// out, so that a slow database or blob store cannot hold the exit.
	reports     context.Context
	stopReports context.CancelFunc
	busyChanged chan struct{} // the number of held jobs changed; capacity 1
	// blobsDown is set when storing a result's blobs failed: the claim
	// loop takes no job until the store answers again (awaitBlobs).
	blobsDown atomic.Bool

	mu         sync.Mutex
	ran        bool
	running    bool
	runErr     error
	unacquired int                // claimed jobs whose goroutine has no slot yet
	held       int                // claimed jobs not yet recorded
	live       map[int64]*liveJob // jobs rendering or being reported: the leases heartbeats renew
	lastBeat   time.Time
	beatErr    error
	startedAt  time.Time
	lastChrome time.Time // last time a live Chrome was seen
	// claiming is set while the claim loop runs, and lastTurn is when it
	// last began a turn: Healthy's view of a loop that stopped turning.
	claiming      bool
	lastTurn      time.Time
	stopping      bool
	jobsCompleted int64
	jobsFailed    int64
}

// NewConsumer checks cfg and builds the node's supervisor. Nothing starts
// until Run.
func NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With(zap.String("node", cfg.NodeID))
	// The egress proxy listens now so that Chrome's flags can name it; Run
	// serves it and closes it.
	proxy, err := egress.Listen("127.0.0.1:0", egress.Config{Policy: cfg.Egress, Logger: log.Named("egress")})
	if err != nil {
		return nil, fmt.Errorf("farm: consumer: %w", err)
	}
	cfg.Supervisor.Browser.EgressProxy = proxy.URL()
	cfg.Supervisor.Browser.EgressRefused = proxy.Refused
	cfg.Supervisor.Browser.MaxMessageBytes = messageBound(cfg.Queue.ResultLimits())
	sup, err := supervisor.New(cfg.Supervisor)
	if err != nil {
		proxy.Close()
		return nil, fmt.Errorf("farm: consumer: %w", err)
	}
	if cfg.Load == nil {
		// A killed Chrome's helpers are reaped by init, out of this
		// process's tree: their CPU is counted from the kill's record.
		cfg.Load = (&ProcessLoadSampler{Orphaned: func() uint64 { return sup.Stats().OrphanedCPUTicks }}).Sample
	}
	log.Info("egress proxy listening", zap.String("addr", proxy.Addr()),
		zap.Stringers("allow", cfg.Egress.Allow), zap.Stringers("deny", cfg.Egress.Deny))
	c := newConsumer(cfg, pgQueue{cfg.Queue}, sup, log)
	c.egress = proxy
	if cfg.WakeURL != "" {
		if c.wakeClient, err = wake.NewClient(wake.ClientConfig{URL: cfg.WakeURL, Token: cfg.WakeToken, NodeID: cfg.NodeID,
			Logger: log.Named("wake")}); err != nil {
			proxy.Close()
			return nil, fmt.Errorf("farm: consumer: WakeURL: %w", err)
		}
	}
	return c, nil
}

// newConsumer assembles a Consumer of checked cfg over q and sup.
func newConsumer(cfg ConsumerConfig, q consumerQueue, sup *supervisor.Supervisor, log *zap.Logger) *Consumer {
	reports, stopReports := context.WithCancel(context.Background())
	return &Consumer{
		cfg:         cfg,
		q:           q,
		sup:         sup,
		log:         log,
		node:        cfg.NodeID,
		jobDone:     make(chan struct{}, 1),
		completions: make(chan completion),
		reports:     reports,
		stopReports: stopReports,
		busyChanged: make(chan struct{}, 1),
		fenced:      make(chan struct{}),
		live:        map[int64]*liveJob{},
	}
}

// NodeID is the node's id in the queue.
func (c *Consumer) NodeID() string { return c.node }

// SupervisorStats is a snapshot of the node's Chrome supervisor.
func (c *Consumer) SupervisorStats() supervisor.Stats { return c.sup.Stats() }

// ConsumerStats counts the node's jobs since Run started.
type ConsumerStats struct {
	Completed int64 // jobs completed by this node
	Failed    int64 // attempts recorded as failed (retried later or final)
	Held      int   // jobs claimed and not yet recorded
}

// Stats returns the node's job counters.
func (c *Consumer) Stats() ConsumerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConsumerStats{Completed: c.jobsCompleted, Failed: c.jobsFailed, Held: c.held}
}

// Healthy reports whether the node is doing its work: Run is running, the
// last heartbeat reached the database recently, and a Chrome is alive (or
// is being booted, for a grace period). A draining node is healthy: it is
// finishing its work on purpose.
func (c *Consumer) Healthy() error {
	c.mu.Lock()
	running, stopping, runErr := c.running, c.stopping, c.runErr
	lastBeat, beatErr, lastChrome := c.lastBeat, c.beatErr, c.lastChrome
	c.mu.Unlock()
	if !running {
		if runErr != nil {
			return fmt.Errorf("consumer stopped: %w", runErr)
		}
		return errors.New("consumer is not running")
	}
	if stopping {
		return nil
	}
	now := time.Now()
	if stale := max(5*c.cfg.HeartbeatInterval, healthBeatGrace); now.Sub(lastBeat) > stale {
		return fmt.Errorf("no successful heartbeat for %s: %v", now.Sub(lastBeat).Round(time.Second), beatErr)
	}
	st := c.sup.Stats()
	if st.Chromes == 0 && !st.ExitDue && now.Sub(lastChrome) > healthBootGrace {
		return fmt.Errorf("no live Chrome for %s (boot failures %d)", now.Sub(lastChrome).Round(time.Second), st.BootFailures)
	}
	return c.claimLoopStalled(now)
}

// claimLoopStalled reports a claim loop that has not begun a turn for
// longer than its poll interval plus healthLoopGrace, unless it waits for a
// failing blob store (awaitBlobs). Its heartbeats, on another goroutine,
// would keep such a node looking alive, and its queued jobs, released after
// the queue's claim timeout, would be assigned to it again at the next
// round, a minute's delay each, for as long as it runs.
func (c *Consumer) claimLoopStalled(now time.Time) error {
	c.mu.Lock()
	claiming, last := c.claiming, c.lastTurn
	c.mu.Unlock()
	if claiming && now.Sub(last) > c.cfg.PollInterval+healthLoopGrace {
		return fmt.Errorf("the claim loop has not turned for %s", now.Sub(last).Round(time.Second))
	}
	return nil
}

// stopReason says why the claim loop ended.
type stopReason int

const (
	stopSignal  stopReason = iota // Run's context ended
	stopExitDue                   // every job the process may start was claimed
	stopFatal                     // the supervisor gave up
	stopFenced                    // another process registered the node's id
)

// ExitNear is closed once the process has few job starts left before its
// exit (supervisor.Supervisor.ExitNear): the time to start the process that
// takes over, standing by with a Gate.
func (c *Consumer) ExitNear() <-chan struct{} { return c.sup.ExitNear() }

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
	egressCtx, stopEgress := context.WithCancel(base)
	egressDone := make(chan struct{})
	elog := c.log // c.log gains the incarnation below, while this runs
	go func() {
		defer close(egressDone)
		if err := c.egress.Serve(egressCtx); err != nil {
			elog.Warn("egress proxy stopped", zap.Error(err))
		}
	}()
	defer func() {
		stopEgress()
		<-egressDone
	}()
	// The first Chrome boots while the node registers (or stands by): its
	// boot is off the node's first jobs either way.
	supCtx, stopSup := context.WithCancel(base)
	defer stopSup()
	// supErr is written once, before supExited closes.
	var supErr error
	supExited := make(chan struct{})
	go func() {
		defer close(supExited)
		supErr = c.sup.Run(supCtx)
	}()
	// Until the drain below takes over, leaving Run kills the Chromes
	// first.
	stopEarly := func() {
		stopSup()
		<-supExited
	}
	if c.cfg.Gate != nil {
		c.log.Info("standing by: the first Chrome boots in the background until this process's turn")
		select {
		case <-c.cfg.Gate:
		case <-ctx.Done():
			stopEarly()
			c.log.Info("stopped while standing by")
			return nil
		case <-supExited:
			return fmt.Errorf("farm: consumer: supervisor stopped while standing by: %w", supErr)
		}
		c.sup.Release()
	}

	node, reclaimed, err := c.register(ctx)
	if err != nil {
		stopEarly()
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
	// woken is what wakes the claim loop besides its own events: a
	// producer's long-poll, the node's NOTIFY channel, or nothing in
	// poll-only mode.
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
			if err := src.Run(bgCtx); err != nil {
				c.log.Error("wake-ups stopped", zap.Error(err))
			}
		})
	}
	bg.Go(func() { c.heartbeatLoop(bgCtx) })
	if c.cfg.Protector != nil {
		bg.Go(func() { c.protectLoop(bgCtx) })
	}

	completerCtx, stopCompleter := context.WithCancel(base)
	defer stopCompleter()
	var completerWG sync.WaitGroup
	completerWG.Go(func() { c.completer(completerCtx) })

	jobsCtx, cancelJobs := context.WithCancelCause(base)
	defer cancelJobs(nil)
	var jobs sync.WaitGroup

	reason := c.loop(ctx, woken, supExited, jobsCtx, &jobs)

	// Drain: take nothing new, hand back what has not started, finish what
	// runs, then leave. A fenced process leaves at once: the node, its jobs
	// and their outcomes belong to the id's new process.
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

	// After an exit-after-jobs stop nobody asked the node to hurry: the
	// jobs' own timeouts bound the wait, until a signal starts the grace
	// period. After a signal (or a failure) the grace period runs at once.
	if !waitJobs(ctx, &jobs, reason == stopExitDue, c.cfg.DrainTimeout) {
		c.log.Warn("in-flight jobs did not finish within the drain timeout; canceling them",
			zap.Duration("drain_timeout", c.cfg.DrainTimeout), zap.Int("in_flight", c.Stats().Held))
		cancelJobs(&browser.Error{Class: browser.ClassCanceled, Retriable: true,
			Err: errors.New("node stopping: drain timeout")})
		// The renders end at once; what they still have to record gets
		// drainReportGrace. An outcome not recorded then is left to the
		// exit below, which hands its job back.
		t := time.AfterFunc(drainReportGrace, c.stopReports)
		jobs.Wait()
		t.Stop()
	}
	stopCompleter()
	completerWG.Wait()

	// The supervisor kills its Chromes (already retired when the exit was
	// due) and reaps them before Run returns.
	stopSup()
	<-supExited

	// The heartbeat stops before the exit mark: a heartbeat of the current
	// incarnation would make the node active again.
	stopBG()
	bg.Wait()
	var left jobqueue.Reclaimed
	if !c.isFenced() {
		ectx, cancel := context.WithTimeout(base, shutdownTimeout)
		left, err = c.inc.SetState(ectx, jobqueue.NodeExited, reason.exitReason())
		cancel()
		if err != nil {
			c.noteFenced(err)
			c.log.Warn("cannot mark the node exited", zap.Error(err))
		}
	}
	if c.cfg.Protector != nil {
		pctx, cancel := context.WithTimeout(base, shutdownTimeout)
		if err := c.cfg.Protector.SetBusy(pctx, false); err != nil {
			c.log.Warn("cannot lift scale-in protection", zap.Error(err))
		}
		cancel()
	}

	st := c.sup.Stats()
	cs := c.Stats()
	c.log.Info("node exited", zap.String("why", reason.String()),
		zap.Int64("completed", cs.Completed), zap.Int64("failed", cs.Failed),
		zap.Int("jobs_since_process_start", st.JobsSinceProcessStart),
		zap.Int("chrome_starts", st.ChromeStarts), zap.Int("chrome_kills", st.ChromeKills),
		zap.Int("chrome_crashes", st.ChromeCrashes),
		zap.Int64("contexts_reused", st.Contexts.Reused), zap.Int64("contexts_replaced", st.Contexts.ReplacedTotal()),
		zap.Any("contexts_replaced_by", st.Contexts.ByReason()),
		zap.Int64("left_released", left.Released), zap.Int64("left_retried", left.Retried))

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

// noteFenced stops the node if err says a newer incarnation took its id.
func (c *Consumer) noteFenced(err error) {
	if !errors.Is(err, jobqueue.ErrFenced) {
		return
	}
	c.fenceOnce.Do(func() {
		c.fenceCause = err
		close(c.fenced)
	})
}

// isFenced reports whether a newer incarnation took the node's id.
func (c *Consumer) isFenced() bool {
	select {
	case <-c.fenced:
		return true
	default:
		return false
	}
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
