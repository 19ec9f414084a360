package farm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser/egress"
	"github.com/browserfarm/browserfarm/farm/blobstore"
	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/internal/cfgrule"
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

// Off turns off a field of ConsumerConfig or ProducerConfig that can be off;
// each field's comment says what off means there. It is supervisor.Off, so
// one value means off in a ConsumerConfig and in its Supervisor.
const Off = supervisor.Off

// ConsumerConfig configures a Consumer. Start from DefaultConsumerConfig.
// Its fields follow one rule (supervisor.Config's): 0 means the documented
// default, Off turns off a field that can be off, and any other negative
// value is an error that names the field.
type ConsumerConfig struct {
	// Queue is the job queue (required). Its pool also carries the LISTEN
	// connection, if any (see ConsumerPoolSize for the budget).
	Queue *jobqueue.Queue
	// PollOnly: no LISTEN and no session state, so the pool may go through
	// PgBouncer in transaction mode. The node looks for assigned jobs
	// after each job it finishes, when WakeURL wakes it, and every
	// PollInterval (without WakeURL, set it short:
	// DefaultPollOnlyInterval).
	PollOnly bool
	// WakeURL, if set, is a producer's base URL (http://producer:8080): the
	// node is woken when it gets work by a long-poll there (package wake)
	// instead of LISTEN, which a thousand nodes make costly for PostgreSQL
	// (see jobqueue.ChannelAssigned). The node then holds no LISTEN
	// connection. WakeToken is the bearer token the producer's reads need
	// (its read or API token), if any.
	WakeURL   string
	WakeToken string
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
	// Capacity is how many jobs the node runs at once (Chrome sessions),
	// 1..1000. 0: Supervisor.Capacity, else the supervisor's default, 6. It
	// overrides Supervisor.Capacity and cannot be off.
	Capacity int
	// Supervisor sets the Chrome lifecycle: recycle every N jobs, exit after
	// M, memory ceiling, health checks. Its zero fields take the
	// supervisor's defaults (20, 80, …); Off turns a threshold off.
	Supervisor supervisor.Config
	// Gate, when set, makes the node stand by: Run boots its first Chrome
	// and prewarms its sessions in the background (Supervisor.Hold), then
	// waits for Gate to close before it registers the node and claims
	// work. A process started ahead of its predecessor's exit sets it
	// (farm/fleet's handoff), so that its Chrome is up when its turn
	// comes. Nil: register at once.
	Gate <-chan struct{}
	// HeartbeatInterval is how often the node reports its load and renews
	// its leases. 0: the default, 3 s. It cannot be off.
	HeartbeatInterval time.Duration
	// PollInterval is how often the node looks for assigned jobs when no
	// notification woke it, in case one was lost; with PollOnly, how often
	// it looks at all. 0: the default, 10 s. It cannot be off.
	PollInterval time.Duration
	// DrainTimeout is the grace period in-flight jobs get when Run's
	// context ends (SIGTERM); past it they are canceled and handed back as
	// retriable. 0: the default, 1 min. Off: no grace at all.
	DrainTimeout time.Duration
	// Protector, if set, is told when the node goes busy and idle.
	Protector Protector
	// ProtectorIdleAfter is how long the node must hold no job before the
	// Protector is told it is idle, so that protection does not flap
	// between jobs. 0: the default, 30 s. Off: at once.
	ProtectorIdleAfter time.Duration
	// ProtectorRetry is how soon a Protector call that failed is made again,
	// for as long as the node's state differs from what the Protector last
	// applied. 0: the default, 10 s.
	ProtectorRetry time.Duration
	// Egress is what the node's jobs may reach: by default public addresses
	// only — no loopback, link-local (the cloud metadata service), private
	// range or the farm's own listen addresses (list those in Deny when they
	// are public). The node runs a filtering proxy in front of its Chrome
	// that enforces it on every resolved address; followed links to refused
	// literal addresses are dropped, and a job's own proxy must be allowed.
	Egress egress.Policy
	// Load samples the node's load for heartbeats. Default: a
	// ProcessLoadSampler (this process and its Chromes, not the machine,
	// which several nodes may share) that adds the CPU of the helpers of
	// the Chromes the supervisor killed; MemUsedBytes gets the Chromes' PSS
	// added.
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
	c.Supervisor.Hold = c.Gate != nil
	if c.Supervisor.Logger == nil {
		c.Supervisor.Logger = c.Logger.Named("supervisor")
	}
	// Resolved here, not only in supervisor.New, because the node registers
	// its thresholds: a zero ChromeRecycleJobs is the default 20, not off.
	sv, err := c.Supervisor.WithDefaults()
	if err != nil {
		return c, fmt.Errorf("farm: consumer: %w", err)
	}
	c.Supervisor = sv
	// A grace period of none is kept as 0, which waitJobs and the protector
	// take literally.
	errs := []error{
		cfgrule.Resolve("HeartbeatInterval", &c.HeartbeatInterval, DefaultHeartbeatInterval, false),
		cfgrule.Resolve("PollInterval", &c.PollInterval, DefaultPollInterval, false),
		cfgrule.Resolve("DrainTimeout", &c.DrainTimeout, DefaultConsumerDrain, true),
		cfgrule.Resolve("ProtectorIdleAfter", &c.ProtectorIdleAfter, DefaultProtectorIdleAfter, true),
		cfgrule.Resolve("ProtectorRetry", &c.ProtectorRetry, DefaultProtectorRetry, false),
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("farm: consumer: invalid config: %w", err)
	}
	if c.DrainTimeout == Off {
		c.DrainTimeout = 0
	}
	if c.ProtectorIdleAfter == Off {
		c.ProtectorIdleAfter = 0
	}
	if c.WakeURL != "" {
		if err := wake.CheckURL(c.WakeURL); err != nil {
			return c, fmt.Errorf("farm: consumer: WakeURL: %w", err)
		}
	}
	return c, nil
}

// NodeIDFromHostname turns a hostname into a valid node id by the queue's
// one node-id rule (jobqueue.NodeIDFrom): characters outside letters,
// digits, '.', '_', ':' and '-' become '-', and the result is cut to the
// allowed length. An empty or unusable name gives "node".
func NodeIDFromHostname(host string) string { return jobqueue.NodeIDFrom(host, "") }

// Consumer defaults.
const (
	DefaultHeartbeatInterval  = 3 * time.Second
	DefaultPollInterval       = 10 * time.Second
	DefaultConsumerDrain      = time.Minute
	DefaultProtectorIdleAfter = 30 * time.Second
	DefaultProtectorRetry     = 10 * time.Second
	// renderSlack is added to a job's own timeout to bound a render that the
	// browser failed to end in time; the browser enforces the timeout itself.
	renderSlack = 15 * time.Second
	// reportTimeout bounds the attempts to record one job's outcome; past it
	// the job's lease runs out and the producer hands it out again. As long
	// as the node rides out a database outage (healthBeatGrace): a managed
	// database's failover takes a minute or two, and a rendered page is
	// worth recording after it — the queue takes a completion while the job
	// is live, whichever node holds it. A minute threw away the renders of
	// a longer failover and charged their jobs an attempt each.
	reportTimeout = healthBeatGrace
	// drainReportGrace is how long a drain that timed out still lets the
	// jobs record their outcomes (blob uploads, completions, failures).
	drainReportGrace = 10 * time.Second
	// shutdownTimeout bounds each database call made after Run's context ended.
	shutdownTimeout = 15 * time.Second
	// maxCompleteBatch bounds one CompleteMany.
	maxCompleteBatch = 64
	// healthBootGrace is how long the node counts as healthy without a live
	// Chrome (the first boot, a replacement after a crash).
	healthBootGrace = time.Minute
	// healthBeatGrace is how long the node counts as healthy while its
	// heartbeats fail (at least five heartbeat intervals): a database outage
	// or failover is not mended by restarting the node, which under
	// Kubernetes would restart the whole fleet and add restart backoff; a
	// node whose heartbeats fail for longer may hold a broken pool a
	// restart does mend.
	healthBeatGrace = 5 * time.Minute
	// healthLoopGrace is how long, past its poll interval, the claim loop
	// may go without beginning a turn before the node is unhealthy: far
	// more than a turn's calls and waits besides the poll (a claim, with
	// the Unclaim before it, within shutdownTimeout; a backoff of up to
	// 5 s). Waiting for a failing blob store is not counted (awaitBlobs).
	healthLoopGrace = 2 * time.Minute
)
