package farm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser/egress"
	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/internal/outage"
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
	// claimLost: a claim failed on the way and may have committed, so the
	// jobs it took may be processing on the node, started by nobody (the
	// next claim, or the drain, gives them back: Incarnation.Unclaim). The
	// claim loop's, then, once it returned, the drain's: Run's goroutine
	// only.
	claimLost bool

	mu         sync.Mutex
	ran        bool
	running    bool
	runErr     error
	unacquired int                // claimed jobs whose goroutine has no slot yet
	held       int                // claimed jobs not yet recorded
	live       map[int64]*liveJob // jobs rendering or being reported: the leases heartbeats renew
	lastBeat   time.Time
	beatErr    error
	beatOut    outage.Tracker // the heartbeat's failures, for the line saying it answers again
	startedAt  time.Time
	lastChrome time.Time // last time a live Chrome was seen
	// claiming is set while the claim loop runs, and lastTurn is when it
	// last began a turn: Healthy's view of a loop that stopped turning.
	claiming      bool
	lastTurn      time.Time
	stopping      bool
	jobsCompleted int64
	jobsFailed    int64
	jobsGivenBack int64
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
	cfg.Supervisor.Browser.EgressFailure = proxy.Failure
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
			Logger: log.Named("wake"), FallbackPoll: cfg.PollInterval}); err != nil {
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

// ExitNear is closed once the process has few job starts left before its
// exit (supervisor.Supervisor.ExitNear): the time to start the process that
// takes over, standing by with a Gate.
func (c *Consumer) ExitNear() <-chan struct{} { return c.sup.ExitNear() }

// ConsumerStats counts the node's jobs since Run started.
type ConsumerStats struct {
	Completed int64 // jobs completed by this node
	Failed    int64 // attempts recorded as failed (retried later or final)
	// GivenBack are attempts handed back uncharged: the node's own failure
	// (a Chrome lost before the page) or its stop (the drain's timeout).
	GivenBack int64
	Held      int // jobs claimed and not yet recorded
}

// Stats returns the node's job counters.
func (c *Consumer) Stats() ConsumerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConsumerStats{Completed: c.jobsCompleted, Failed: c.jobsFailed, GivenBack: c.jobsGivenBack, Held: c.held}
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
