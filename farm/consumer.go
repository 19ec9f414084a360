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
	"github.com/browserfarm/browserfarm/browser/egress"
	"github.com/browserfarm/browserfarm/farm/blobstore"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

// ErrRecycle is what Consumer.Run returns after the node finished its
// supervisor's ExitAfterJobs jobs, drained and marked itself exited: the
// process should exit (farm consumer exits with code 75) so that its
// orchestrator starts a fresh one.
var ErrRecycle = errors.New("farm: consumer finished its exit-after-jobs jobs; restart the process")

// ErrFenced is what Consumer.Run returns (wrapped, with the incarnations)
// when another process registered the node's id: this process's calls are
// refused from then on, so it stops at once without touching the node.
var ErrFenced = jobqueue.ErrFenced

// Protector is told when the node starts holding work and when it has been
// idle for a while, e.g. to protect a busy EC2 instance from scale-in
// (autoscale.InstanceProtector). Errors are logged, never fatal.
type Protector interface {
	SetBusy(ctx context.Context, busy bool) error
}

// Consumer defaults.
const (
	DefaultHeartbeatInterval  = 3 * time.Second
	DefaultPollInterval       = 10 * time.Second
	DefaultConsumerDrain      = time.Minute
	DefaultProtectorIdleAfter = 30 * time.Second
	// renderSlack is added to a job's own timeout to bound a render that the
	// browser failed to end in time; the browser enforces the timeout itself.
	renderSlack = 15 * time.Second
	// reportTimeout bounds the attempts to record one job's outcome; past it
	// the job's lease runs out and the producer hands it out again.
	reportTimeout = time.Minute
	// shutdownTimeout bounds each database call made after Run's context ended.
	shutdownTimeout = 15 * time.Second
	// maxCompleteBatch bounds one CompleteMany.
	maxCompleteBatch = 64
	// healthBootGrace is how long the node counts as healthy without a live
	// Chrome (the first boot, a replacement after a crash).
	healthBootGrace = time.Minute
)

// ConsumerConfig configures a Consumer. Start from DefaultConsumerConfig.
type ConsumerConfig struct {
	// Queue is the job queue (required). Its pool also carries the LISTEN
	// connection (see ConsumerPoolConns for the budget).
	Queue *jobqueue.Queue
	// PollOnly: no LISTEN; the node looks for assigned jobs every
	// PollInterval (set it short, e.g. DefaultPollOnlyInterval) and after
	// each job it finishes. No session state is kept, so the pool may go
	// through PgBouncer in transaction mode.
	PollOnly bool
	// Blobs, if set, is where HTML and screenshots go instead of the
	// database (only their keys, sizes and hashes are kept there).
	Blobs blobstore.Store
	// NodeID names the node in the queue. Default: the hostname, made a
	// valid node id. A restarted process with the same id takes back what
	// its previous incarnation left behind.
	NodeID string
	// Hostname is reported with the registration. Default: os.Hostname.
	Hostname string
	// Version is reported with the registration.
	Version string
	// Capacity is how many jobs the node runs at once (Chrome sessions).
	// 0: Supervisor.Capacity, else the supervisor's default. It overrides
	// Supervisor.Capacity.
	Capacity int
	// Supervisor sets the Chrome lifecycle: recycle every N jobs, exit after
	// M, memory ceiling, health checks. DefaultConsumerConfig fills in
	// supervisor.DefaultConfig(); a zero threshold disables it.
	Supervisor supervisor.Config
	// HeartbeatInterval is how often the node reports its load and renews
	// its leases. Default 3 s.
	HeartbeatInterval time.Duration
	// PollInterval is how often the node looks for assigned jobs when no
	// notification woke it, in case one was lost; with PollOnly, how often
	// it looks at all. Default 10 s.
	PollInterval time.Duration
	// DrainTimeout is the grace period in-flight jobs get when Run's
	// context ends (SIGTERM); past it they are canceled and handed back as
	// retriable. Default 1 min; negative means no grace at all.
	DrainTimeout time.Duration
	// Protector, if set, is told when the node goes busy and idle.
	Protector Protector
	// ProtectorIdleAfter is how long the node must hold no job before the
	// Protector is told it is idle, so that protection does not flap
	// between jobs. Default 30 s; negative means at once.
	ProtectorIdleAfter time.Duration
	// Egress is what the node's jobs may reach: by default public addresses
	// only — no loopback, link-local (the cloud metadata service), private
	// range or the farm's own listen addresses (list those in Deny when they
	// are public). The node runs a filtering proxy in front of its Chrome
	// that enforces it on every resolved address; followed links to refused
	// literal addresses are dropped, and a job's own proxy must be allowed.
	Egress egress.Policy
	// Load samples the node's load for heartbeats. Default: a
	// ProcessLoadSampler (this process and its Chromes, not the machine,
	// which several nodes may share); MemUsedBytes gets the Chromes' PSS added.
	Load func(ctx context.Context) (MachineLoad, error)
	// Logger; default zap.NewNop().
	Logger *zap.Logger
}

// DefaultConsumerConfig returns the documented defaults around queue.
func DefaultConsumerConfig(queue *jobqueue.Queue) ConsumerConfig {
	return ConsumerConfig{
		Queue:              queue,
		Supervisor:         supervisor.DefaultConfig(),
		HeartbeatInterval:  DefaultHeartbeatInterval,
		PollInterval:       DefaultPollInterval,
		DrainTimeout:       DefaultConsumerDrain,
		ProtectorIdleAfter: DefaultProtectorIdleAfter,
	}
}

func (c ConsumerConfig) withDefaults() (ConsumerConfig, error) {
	if c.Queue == nil {
		return c, errors.New("farm: consumer: Queue is required")
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return c, fmt.Errorf("farm: consumer: hostname: %w", err)
		}
		c.Hostname = h
	}
	if c.NodeID == "" {
		c.NodeID = NodeIDFromHostname(c.Hostname)
	}
	if err := jobqueue.ValidateNodeID(c.NodeID); err != nil {
		return c, fmt.Errorf("farm: consumer: %w", err)
	}
	if c.Capacity == 0 {
		c.Capacity = c.Supervisor.Capacity
	}
	if c.Capacity == 0 {
		c.Capacity = supervisor.DefaultConfig().Capacity
	}
	if c.Capacity < 1 || c.Capacity > 1000 {
		return c, fmt.Errorf("farm: consumer: capacity %d is out of range 1..1000", c.Capacity)
	}
	c.Supervisor.Capacity = c.Capacity
	if c.Supervisor.Logger == nil {
		c.Supervisor.Logger = c.Logger.Named("supervisor")
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultConsumerDrain
	}
	if c.DrainTimeout < 0 {
		c.DrainTimeout = 0
	}
	if c.ProtectorIdleAfter == 0 {
		c.ProtectorIdleAfter = DefaultProtectorIdleAfter
	}
	if c.ProtectorIdleAfter < 0 {
		c.ProtectorIdleAfter = 0
	}
	if c.Load == nil {
		c.Load = new(ProcessLoadSampler).Sample
	}
	return c, nil
}

// NodeIDFromHostname turns a hostname into a valid node id by the queue's
// one node-id rule (jobqueue.NodeIDFrom): characters outside letters,
// digits, '.', '_', ':' and '-' become '-', and the result is cut to the
// allowed length. An empty or unusable name gives "node".
func NodeIDFromHostname(host string) string { return jobqueue.NodeIDFrom(host, "") }

// Consumer is one node of the farm: it registers with the queue, claims the
// jobs the producer assigns to it (woken by LISTEN/NOTIFY, with a slow poll
// as a safety net), renders each through a recycling Chrome supervisor,
// records the outcome, and heartbeats its load while renewing its leases.
// Create it with NewConsumer and call Run once.
type Consumer struct {
	cfg    ConsumerConfig
	q      *jobqueue.Queue
	sup    *supervisor.Supervisor
	log    *zap.Logger
	node   string
	egress *egress.Proxy         // served by Run
	inc    *jobqueue.Incarnation // set by Run's registration, before anything uses it

	fenced     chan struct{} // closed when a newer incarnation took the id
	fenceOnce  sync.Once
	fenceCause error

	jobDone     chan struct{} // a job released its slot or ended; capacity 1
	completions chan completion
	busyChanged chan struct{} // the number of held jobs changed; capacity 1

	mu            sync.Mutex
	ran           bool
	running       bool
	runErr        error
	unacquired    int                // claimed jobs whose goroutine has no slot yet
	held          int                // claimed jobs not yet recorded
	live          map[int64]struct{} // jobs rendering or being reported: the leases heartbeats renew
	lastBeat      time.Time
	beatErr       error
	startedAt     time.Time
	lastChrome    time.Time // last time a live Chrome was seen
	stopping      bool
	jobsCompleted int64
	jobsFailed    int64
}

// completion is one render handed to the batching completer.
type completion struct {
	c     jobqueue.Completion
	reply chan error
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
	sup, err := supervisor.New(cfg.Supervisor)
	if err != nil {
		proxy.Close()
		return nil, fmt.Errorf("farm: consumer: %w", err)
	}
	log.Info("egress proxy listening", zap.String("addr", proxy.Addr()),
		zap.Stringers("allow", cfg.Egress.Allow), zap.Stringers("deny", cfg.Egress.Deny))
	return &Consumer{
		egress:      proxy,
		cfg:         cfg,
		q:           cfg.Queue,
		sup:         sup,
		log:         log,
		node:        cfg.NodeID,
		jobDone:     make(chan struct{}, 1),
		completions: make(chan completion),
		busyChanged: make(chan struct{}, 1),
		fenced:      make(chan struct{}),
		live:        map[int64]struct{}{},
	}, nil
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
	if stale := max(5*c.cfg.HeartbeatInterval, 30*time.Second); now.Sub(lastBeat) > stale {
		return fmt.Errorf("no successful heartbeat for %s: %v", now.Sub(lastBeat).Round(time.Second), beatErr)
	}
	st := c.sup.Stats()
	if st.Chromes == 0 && !st.ExitDue && now.Sub(lastChrome) > healthBootGrace {
		return fmt.Errorf("no live Chrome for %s (boot failures %d)", now.Sub(lastChrome).Round(time.Second), st.BootFailures)
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

// Run registers the node and works until ctx ends or the process has done
// its ExitAfterJobs jobs. On either it stops claiming, hands its unstarted
// jobs back, lets in-flight ones finish (within DrainTimeout when ctx
// ended), marks the node exited and kills its Chromes. It returns nil after
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

	node, reclaimed, err := c.register(ctx)
	if err != nil {
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
	// Chrome profile dirs of consumer processes that died without cleaning
	// up (kill -9) go before this process makes its own.
	swept, err := browser.SweepStaleProfiles(c.cfg.Supervisor.Browser.ProfileRoot)
	if err != nil {
		c.log.Warn("sweeping stale Chrome profile dirs", zap.Error(err))
	}
	if len(swept) > 0 {
		c.log.Info("removed stale Chrome profile dirs of dead processes", zap.Strings("dirs", swept))
	}
	now := time.Now()
	c.mu.Lock()
	c.running, c.startedAt, c.lastBeat, c.lastChrome = true, now, now, now
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running, c.runErr = false, err
		c.mu.Unlock()
	}()

	// Every goroutine below is owned by Run and ended before it returns.
	// The supervisor, the renders and the completer outlive ctx on purpose:
	// they are stopped in order during the drain.
	base := context.WithoutCancel(ctx)
	// The egress proxy outlives the supervisor: Chrome needs it until it is
	// killed.
	egressCtx, stopEgress := context.WithCancel(base)
	egressDone := make(chan struct{})
	go func() {
		defer close(egressDone)
		if err := c.egress.Serve(egressCtx); err != nil {
			c.log.Warn("egress proxy stopped", zap.Error(err))
		}
	}()
	defer func() {
		stopEgress()
		<-egressDone
	}()
	supCtx, stopSup := context.WithCancel(base)
	defer stopSup()
	// supErr is written once, before supExited closes.
	var supErr error
	supExited := make(chan struct{})
	go func() {
		defer close(supExited)
		supErr = c.sup.Run(supCtx)
	}()

	bgCtx, stopBG := context.WithCancel(base)
	defer stopBG()
	var bg sync.WaitGroup
	// wake is what wakes the claim loop besides its own events: the
	// node's NOTIFY channel, or nothing in poll-only mode.
	noListener := make(chan struct{})
	close(noListener)
	wake := wakeups{ready: noListener}
	if !c.cfg.PollOnly {
		listener := jobqueue.NewListener(c.q.Pool(), jobqueue.ListenerConfig{
			Channels: []string{jobqueue.NodeChannel(c.node)},
			Logger:   c.log.Named("listener"),
		})
		wake = wakeups{ready: listener.Ready(), c: listener.C()}
		bg.Go(func() {
			if err := listener.Run(bgCtx); err != nil {
				c.log.Error("listener stopped", zap.Error(err))
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

	reason := c.loop(ctx, wake, supExited, jobsCtx, &jobs)

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
		dctx, cancel := context.WithTimeout(base, shutdownTimeout)
		if _, err := c.inc.SetState(dctx, jobqueue.NodeDraining, ""); err != nil {
			c.noteFenced(err)
			c.log.Warn("cannot mark the node draining", zap.Error(err))
		}
		released, err := c.inc.Release(dctx)
		cancel()
		if err != nil {
			c.noteFenced(err)
			c.log.Warn("cannot release the unstarted jobs", zap.Error(err))
		}
		c.log.Info("node draining", zap.String("why", reason.String()), zap.Int64("released_queued", released),
			zap.Int("in_flight", c.Stats().Held))
	}

	// After an exit-after-jobs stop nobody asked the node to hurry: the
	// jobs' own timeouts bound the wait, until a signal starts the grace
	// period. After a signal (or a failure) the grace period runs at once.
	if !waitJobs(ctx, &jobs, reason == stopExitDue, c.cfg.DrainTimeout) {
		c.log.Warn("in-flight jobs did not finish within the drain timeout; canceling them",
			zap.Duration("drain_timeout", c.cfg.DrainTimeout), zap.Int("in_flight", c.Stats().Held))
		cancelJobs(&browser.Error{Class: browser.ClassCanceled, Retriable: true,
			Err: errors.New("node stopping: drain timeout")})
		jobs.Wait()
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
		ChromeRecycleJobs: c.cfg.Supervisor.ChromeRecycleJobs, ExitAfterJobs: c.cfg.Supervisor.ExitAfterJobs}
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

// loop claims jobs while slots are free and starts one goroutine per job,
// until ctx ends, every job the process may start has been claimed, or the
// supervisor fails.
func (c *Consumer) loop(ctx context.Context, l wakeups, supExited <-chan struct{}, jobsCtx context.Context, jobs *sync.WaitGroup) stopReason {
	// Jobs assigned before the LISTEN took effect are found by the first
	// claim, made once listening, so none waits for the poll.
	select {
	case <-l.ready:
	case <-ctx.Done():
		return stopSignal
	case <-supExited:
		return stopFatal
	}
	poll := time.NewTicker(c.cfg.PollInterval)
	defer poll.Stop()
	claimBackoff := time.Duration(0)
	for {
		if c.isFenced() {
			return stopFenced
		}
		if ctx.Err() != nil {
			return stopSignal
		}
		// Notifications that arrived so far are answered by this claim.
		drainWakeups(l.c)
		free, remaining := c.claimable()
		if remaining == 0 {
			return stopExitDue
		}
		if free > 0 {
			claimed, err := c.inc.Claim(ctx, free)
			switch {
			case errors.Is(err, jobqueue.ErrFenced):
				c.noteFenced(err)
				return stopFenced
			case err != nil && ctx.Err() != nil:
				return stopSignal
			case err != nil:
				claimBackoff = min(max(2*claimBackoff, 100*time.Millisecond), 5*time.Second)
				c.log.Warn("claim failed", zap.Error(err), zap.Duration("retry_in", claimBackoff))
				if !sleepCtx(ctx, claimBackoff) {
					return stopSignal
				}
				continue
			}
			claimBackoff = 0
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

// start runs one claimed job on its own goroutine.
func (c *Consumer) start(jobsCtx context.Context, jobs *sync.WaitGroup, j jobqueue.Job) {
	c.mu.Lock()
	c.unacquired++
	c.held++
	c.live[j.ID] = struct{}{}
	c.mu.Unlock()
	c.signal(c.busyChanged)
	jobs.Go(func() {
		defer func() {
			c.mu.Lock()
			c.held--
			delete(c.live, j.ID)
			c.mu.Unlock()
			c.signal(c.busyChanged)
			c.signal(c.jobDone)
		}()
		c.runJob(jobsCtx, j)
	})
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
		// The node is stopping or its supervisor failed before the job
		// started: not the job's fault.
		c.fail(j, log, &browser.Error{Class: browser.ClassCanceled, Retriable: true,
			Err: fmt.Errorf("node %s could not start the job: %w", c.node, err)}, 0)
		return
	}
	req := SpecRequest(j.Spec)
	limitRequest(&req, c.q.ResultLimits())
	if err := c.checkJobProxy(ctx, j.Spec.Proxy); err != nil {
		slot.Release()
		c.signal(c.jobDone)
		c.fail(j, log, err, 0)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, req.Timeout+renderSlack)
	t0 := time.Now()
	res, err := slot.Render(rctx, req)
	took := time.Since(t0)
	cancel()
	pid := slot.ChromePID()
	slot.Release()
	c.signal(c.jobDone)
	if err != nil {
		if cause := context.Cause(ctx); ctx.Err() != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		c.failWithResult(j, log.With(zap.Int("chrome_pid", pid)), err, took, res)
		return
	}
	res.Links = c.followable(res.Links)
	c.complete(ctx, j, log, res, took)
}

// complete hands a render to the batching completer and waits for its outcome.
func (c *Consumer) complete(ctx context.Context, j jobqueue.Job, log *zap.Logger, res *browser.Result, took time.Duration) {
	rec := ResultRecord(res)
	if c.cfg.Blobs != nil {
		// Not tied to Run's context: a render finished during a drain is kept.
		if err := blobstore.Offload(context.WithoutCancel(ctx), c.cfg.Blobs, j.ID, &rec); err != nil {
			c.fail(j, log, &browser.Error{Class: ClassBlobStore, Retriable: true, Err: err}, took)
			return
		}
	}
	reply := make(chan error, 1)
	c.completions <- completion{c: c.inc.Completion(j.ID, rec), reply: reply}
	err := <-reply
	switch {
	case err == nil:
		c.mu.Lock()
		c.jobsCompleted++
		c.mu.Unlock()
		log.Debug("job completed", zap.Duration("took", took), zap.Int("status", res.Status))
	case errors.Is(err, jobqueue.ErrAlreadyFinished):
		// Canceled by a user, or finished elsewhere after its lease ran out:
		// the first outcome stands.
		log.Info("job was already finished; result dropped", zap.Error(err))
	case errors.Is(err, jobqueue.ErrFenced):
		c.noteFenced(err)
		log.Error("result refused: another process registered this node id", zap.Error(err))
	case errors.Is(err, errReport):
		log.Error("cannot record the job's result; its lease will expire and it will run again", zap.Error(err))
	default:
		// The queue refused the result itself (over a limit, not JSON, or
		// refused by the database): running the job again would produce
		// the same, so the job fails at once with the queue's class.
		class := "result"
		var re *jobqueue.ResultError
		if errors.As(err, &re) {
			class = re.Class
		}
		c.fail(j, log, &browser.Error{Class: class, Err: err}, took)
	}
}

// errReport marks a failure to reach the database while recording an outcome.
var errReport = errors.New("recording the outcome failed")

// fail records a failed attempt: retried with backoff by the queue when the
// error is retriable and attempts remain, failed at once otherwise.
func (c *Consumer) fail(j jobqueue.Job, log *zap.Logger, rerr error, took time.Duration) {
	c.failWithResult(j, log, rerr, took, nil)
}

// failWithResult is fail keeping what the page answered (res, when the
// browser returned one) as the result of a job that failed for good.
func (c *Consumer) failWithResult(j jobqueue.Job, log *zap.Logger, rerr error, took time.Duration, res *browser.Result) {
	retriable := browser.IsRetriable(rerr)
	class := browser.ClassOf(rerr)
	// The error may quote the job's URL or proxy; what is stored and
	// logged must not show their credentials.
	text := jobqueue.RedactText(rerr.Error(), j.Spec.Secrets()...)
	var st jobqueue.State
	err := retryReport(c.log, func(ctx context.Context) error {
		var err error
		st, err = c.inc.Fail(ctx, j.ID, text, class, retriable)
		return err
	})
	c.mu.Lock()
	c.jobsFailed++
	c.mu.Unlock()
	if err == nil && st == jobqueue.StateFailed && res != nil {
		rec := ResultRecord(res)
		rec.FinalURL = jobqueue.RedactText(rec.FinalURL, j.Spec.Secrets()...)
		if serr := retryReport(c.log, func(ctx context.Context) error {
			return c.q.SaveFailedResult(ctx, j.ID, c.node, rec)
		}); serr != nil {
			log.Warn("cannot keep the failed job's answer", zap.Error(serr))
		}
	}
	switch {
	case err == nil:
		log.Warn("job attempt failed", zap.String("class", class), zap.Bool("retriable", retriable),
			zap.String("state", string(st)), zap.Duration("took", took), zap.String("error", text))
	case errors.Is(err, jobqueue.ErrFenced):
		c.noteFenced(err)
		log.Error("failure refused: another process registered this node id", zap.String("render_error", text), zap.Error(err))
	case errors.Is(err, jobqueue.ErrAlreadyFinished), errors.Is(err, jobqueue.ErrNotHeld):
		log.Info("job attempt failed, but the job is no longer this node's", zap.String("class", class),
			zap.String("render_error", text), zap.Error(err))
	default:
		log.Error("cannot record the job's failure; its lease will expire and it will run again",
			zap.String("class", class), zap.String("render_error", text), zap.Error(err))
	}
}

// retryReport runs a database write until it succeeds, fails for a reason
// that retrying cannot change, or reportTimeout passes. The write is not
// tied to Run's context: an outcome is worth recording during a drain.
func retryReport(log *zap.Logger, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
	defer cancel()
	pause := 100 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil || errors.Is(err, jobqueue.ErrAlreadyFinished) || errors.Is(err, jobqueue.ErrNotHeld) ||
			errors.Is(err, jobqueue.ErrNotFound) || errors.Is(err, jobqueue.ErrFenced) {
			return err
		}
		log.Warn("recording a job outcome failed; retrying", zap.Duration("retry_in", pause), zap.Error(err))
		if !sleepCtx(ctx, pause) {
			return fmt.Errorf("%w: %w", errReport, err)
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// completer records renders in batches: it takes what is waiting at the
// moment (up to maxCompleteBatch) and completes it in one CompleteMany, so a
// busy node pays one commit for several jobs and an idle one no delay. It
// returns when ctx ends; Run stops it only after every job goroutine ended.
func (c *Consumer) completer(ctx context.Context) {
	for {
		var batch []completion
		select {
		case <-ctx.Done():
			return
		case x := <-c.completions:
			batch = append(batch, x)
		}
	gather:
		for len(batch) < maxCompleteBatch {
			select {
			case x := <-c.completions:
				batch = append(batch, x)
			default:
				break gather
			}
		}
		items := make([]jobqueue.Completion, len(batch))
		for i, x := range batch {
			items[i] = x.c
		}
		var outcomes []jobqueue.CompleteOutcome
		err := retryReport(c.log, func(ctx context.Context) error {
			var err error
			outcomes, err = c.q.CompleteMany(ctx, items)
			return err
		})
		for i, x := range batch {
			if err != nil {
				x.reply <- err
				continue
			}
			x.reply <- outcomes[i].Err
		}
	}
}

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
	_, err := c.inc.HeartbeatLive(hctx, load, c.liveJobs())
	c.mu.Lock()
	c.beatErr = err
	if err == nil {
		c.lastBeat = time.Now()
	}
	c.mu.Unlock()
	if errors.Is(err, jobqueue.ErrFenced) {
		c.noteFenced(err)
		return
	}
	if err != nil && ctx.Err() == nil {
		c.log.Warn("heartbeat failed", zap.Error(err))
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
	l := jobqueue.NodeLoad{
		ChromePSSBytes:        int64(st.ChromePSSBytes),
		BusySessions:          st.Busy,
		JobsSinceChromeStart:  int64(st.JobsSinceChromeStart),
		JobsSinceProcessStart: int64(st.JobsSinceProcessStart),
		ChromeRestarts:        int64(max(st.ChromeStarts-1, 0)),
		ChromeRecycles:        int64(st.Recycles - st.MemoryRecycles),
		ChromeMemoryRecycles:  int64(st.MemoryRecycles),
		ChromeCrashes:         int64(st.ChromeCrashes),
		ChromePSSMinBytes:     int64(pss.Min),
		ChromePSSMaxBytes:     int64(pss.Max),
	}
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

// protectLoop tells the Protector when the node starts holding jobs (at
// once) and when it has held none for ProtectorIdleAfter.
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
	set := func(busy bool) {
		pctx, cancel := context.WithTimeout(ctx, shutdownTimeout)
		defer cancel()
		if err := c.cfg.Protector.SetBusy(pctx, busy); err != nil && ctx.Err() == nil {
			c.log.Warn("protector failed", zap.Bool("busy", busy), zap.Error(err))
		}
	}
	busy := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-idleC:
			idleTimer, idleC = nil, nil
			if c.Stats().Held == 0 && busy {
				busy = false
				set(false)
			}
			continue
		case <-c.busyChanged:
		}
		held := c.Stats().Held
		switch {
		case held > 0:
			stopTimer()
			if !busy {
				busy = true
				set(true)
			}
		case busy && idleTimer == nil:
			idleTimer = time.NewTimer(c.cfg.ProtectorIdleAfter)
			idleC = idleTimer.C
		}
	}
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

// sleepCtx pauses for d unless ctx ends first, and reports whether it slept.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// SpecRequest maps a job's spec to the browser's render request. The spec
// was validated at submit, where the queue also stored its defaults; the
// timeout is the spec's (jobqueue.Spec.Timeout), so a render is bounded the
// same on every node.
func SpecRequest(s jobqueue.Spec) browser.Request {
	req := browser.Request{
		URL:        s.URL,
		Extract:    s.Extract,
		HTML:       s.HTML,
		Screenshot: s.Screenshot,
		Timeout:    s.Timeout(),
		Block:      s.Block,
		Headers:    s.Headers,
		UserAgent:  s.UserAgent,
		Proxy:      s.Proxy,
		Isolation:  browser.Isolation(s.EffectiveIsolation()),
	}
	if s.Wait != nil {
		req.Wait = browser.Wait{Selector: s.Wait.Selector, Visible: s.Wait.Visible, NetworkIdle: s.Wait.NetworkIdle}
	}
	for _, a := range s.Actions {
		req.Actions = append(req.Actions, browser.Action{
			Type: a.Type, Selector: a.Selector, Text: a.Text, Times: a.Times, Ms: a.Ms,
		})
	}
	if s.Viewport != nil {
		req.Viewport = browser.Viewport{Width: s.Viewport.Width, Height: s.Viewport.Height, Mobile: s.Viewport.Mobile}
	}
	for _, ck := range s.Cookies {
		req.Cookies = append(req.Cookies, browser.Cookie{
			Name: ck.Name, Value: ck.Value, Domain: ck.Domain, Path: ck.Path, Secure: ck.Secure, HTTPOnly: ck.HTTPOnly,
		})
	}
	if s.Follow != nil {
		// The queue keeps the first MaxLinks links that pass its host and
		// duplicate filters, so the page is asked for some more than that.
		limit := s.Follow.MaxLinks
		if limit == 0 {
			limit = jobqueue.DefaultMaxLinks
		}
		req.FollowSelector = s.Follow.Selector
		req.FollowMax = min(jobqueue.LinksAskedPerFollowed*limit, jobqueue.MaxCollectedLinks)
	}
	return req
}

// limitRequest holds a render to the node's result limits: the browser
// enforces them in the page, the queue again before storing.
func limitRequest(req *browser.Request, l jobqueue.ResultLimits) {
	req.MaxDataBytes = l.DataBytes
	req.MaxScreenshotBytes = l.ScreenshotBytes
	req.MaxConsoleErrors = l.ConsoleErrors
}

// ResultRecord maps a render's result to the queue's result row.
func ResultRecord(r *browser.Result) jobqueue.Result {
	return jobqueue.Result{
		FinalURL:      r.FinalURL,
		Status:        r.Status,
		Title:         r.Title,
		Data:          r.Data,
		HTML:          r.HTML,
		Screenshot:    r.Screenshot,
		ConsoleErrors: r.ConsoleErrors,
		Links:         r.Links,
		// Links the page had past FollowMax: the queue adds those past max_links.
		LinksOverLimit: r.LinksOmitted,
		Timings: jobqueue.Timings{
			NavigationMS: r.Timings.Navigation.Milliseconds(),
			WaitMS:       r.Timings.Wait.Milliseconds(),
			ActionsMS:    r.Timings.Actions.Milliseconds(),
			ExtractMS:    r.Timings.Extract.Milliseconds(),
			TotalMS:      r.Timings.Total.Milliseconds(),
		},
	}
}
