package farm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/farm/blobstore"
	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// Producer defaults: what a zero ProducerConfig field means.
const (
	DefaultTick              = time.Second
	DefaultAssignBatch       = 5000
	DefaultRescueInterval    = 2 * time.Second
	DefaultRetention         = 7 * 24 * time.Hour
	DefaultNodeRetention     = 24 * time.Hour
	DefaultRetentionInterval = time.Minute
	DefaultRetentionBatch    = 1000
)

// ProducerConfig configures a Producer. Its fields follow the rule of
// ConsumerConfig: 0 means the documented default, Off turns off a field
// that can be off, and any other negative value is an error naming the
// field.
type ProducerConfig struct {
	// Queue and Pool are required. The pool also serves the producer's
	// LISTEN connection and the leader lock connection.
	Queue *jobqueue.Queue
	Pool  *pgxpool.Pool
	// Politeness is the farm-wide per-host policy. Zero: no limits.
	Politeness Politeness
	// Tick is the fallback assignment interval; NOTIFY wakes the producer at
	// once on submits and freed slots. 0: the default, 1 s
	// (DefaultTick). With PollOnly it is the assignment interval (set it
	// short: DefaultPollOnlyInterval). It cannot be off.
	Tick time.Duration
	// PollOnly: no LISTEN connection; assignment runs every Tick. The
	// leader election still holds a session lock on a connection of its
	// own (see ConsumerConnBudget for the formula).
	PollOnly bool
	// AssignBatch caps the jobs assigned in one round. 0: the default,
	// 5,000. It cannot be off.
	AssignBatch int
	// Assign is which nodes get work first. Default jobqueue.AssignSpread.
	Assign jobqueue.AssignPolicy
	// StaleAfter: a node whose last heartbeat is older is lost, and its jobs
	// go back to pending. 0: the default, 15 s (jobqueue.DefaultStaleAfter;
	// consumers heartbeat every 3 s). It cannot be off.
	StaleAfter time.Duration
	// RescueInterval is how often lost nodes and expired leases are looked
	// for. 0: the default, 2 s. It cannot be off.
	RescueInterval time.Duration
	// Retention: finished jobs and their results older than this are
	// deleted, and the politeness rows of hosts idle as long. 0: the
	// default, 7 days (DefaultRetention). Off: keep them forever.
	Retention time.Duration
	// NodeRetention: nodes that exited or were lost longer ago than this
	// are deleted (their lifetime counters fold into the farm's), and so
	// are their rows in /api/nodes and their node-labelled series in
	// /metrics. An autoscaled fleet or a Kubernetes rollout leaves a gone
	// node per replaced machine or pod, so their number follows the
	// fleet's churn, not its size. 0: the default, 24 h
	// (DefaultNodeRetention). Off: keep them forever.
	NodeRetention time.Duration
	// RetentionInterval is how often the purge runs. 0: the default, 1 min.
	// It cannot be off (turn Retention and NodeRetention off instead).
	RetentionInterval time.Duration
	// RetentionBatch is the rows deleted per transaction. 0: the default,
	// 1,000. It cannot be off.
	RetentionBatch int
	// Blobs is where consumers keep HTML and screenshots, if anywhere:
	// retention deletes them with their rows.
	Blobs blobstore.Store
	// Elector settings (lock key, retry): see jobqueue.ElectorConfig.
	Elector jobqueue.ElectorConfig
	// LeaderActors run only while this producer leads (autoscaling, load
	// sample recording); each is stopped through its context when
	// leadership ends.
	LeaderActors []func(ctx context.Context) error
	// OnAssigned, if set, observes every round that assigned jobs (metrics).
	OnAssigned func(jobqueue.AssignReport)
	// Wake, if set, is woken for the nodes that got jobs, so that nodes
	// polling this producer over HTTP (package wake) claim them: from
	// jobqueue.ChannelAssigned, which names the nodes of every round of
	// whichever producer leads, on the producer's LISTEN connection; in
	// PollOnly mode, from this producer's own rounds only.
	Wake   *wake.Hub
	Logger *zap.Logger
	// Now is the clock for metrics and logs. Default time.Now.
	Now func() time.Time
}

// Producer assigns pending jobs to consumer nodes. Several may run against
// one database: one leads (an advisory lock) and assigns, rescues and purges;
// the others stand by, ready to take over within a second or so.
type Producer struct {
	cfg     ProducerConfig
	log     *zap.Logger
	elector *jobqueue.Elector
	// assignWake is signalled by ChannelProducer notifications (capacity 1:
	// one round answers any number of them).
	assignWake chan struct{}
	// listener is Run's (nil with PollOnly), set before it campaigns.
	listener *jobqueue.Listener
}

// NewProducer checks cfg and fills in defaults.
func NewProducer(cfg ProducerConfig) (*Producer, error) {
	if cfg.Queue == nil || cfg.Pool == nil {
		return nil, errors.New("producer: Queue and Pool are required")
	}
	if cfg.Assign == "" {
		cfg.Assign = jobqueue.AssignSpread
	}
	errs := []error{
		cfgrule.Resolve("Tick", &cfg.Tick, DefaultTick, false),
		cfgrule.Resolve("AssignBatch", &cfg.AssignBatch, DefaultAssignBatch, false),
		cfgrule.Resolve("StaleAfter", &cfg.StaleAfter, jobqueue.DefaultStaleAfter, false),
		cfgrule.Resolve("RescueInterval", &cfg.RescueInterval, DefaultRescueInterval, false),
		cfgrule.Resolve("Retention", &cfg.Retention, DefaultRetention, true),
		cfgrule.Resolve("NodeRetention", &cfg.NodeRetention, DefaultNodeRetention, true),
		cfgrule.Resolve("RetentionInterval", &cfg.RetentionInterval, DefaultRetentionInterval, false),
		cfgrule.Resolve("RetentionBatch", &cfg.RetentionBatch, DefaultRetentionBatch, false),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("producer: invalid config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ec := cfg.Elector
	ec.Logger = cfg.Logger.Named("leader")
	return &Producer{cfg: cfg, log: cfg.Logger, elector: jobqueue.NewElector(cfg.Pool, ec), assignWake: make(chan struct{}, 1)}, nil
}

// IsLeader reports whether this producer assigns now.
func (p *Producer) IsLeader() bool { return p.elector.IsLeader() }

// ConfirmLeader asks the database whether this producer still leads (see
// jobqueue.Elector.Confirm): for a leader actor about to act outside the
// database, where losing the lock does not stop it.
func (p *Producer) ConfirmLeader(ctx context.Context) error { return p.elector.Confirm(ctx) }

// Run campaigns for leadership until ctx ends, leading whenever it wins.
// Unless PollOnly, it LISTENs throughout, leader or not: for the leader's
// rounds (ChannelProducer) and, with Wake, for every producer's nodes
// (ChannelAssigned), whichever producer the nodes poll.
func (p *Producer) Run(ctx context.Context) error {
	if !p.cfg.PollOnly {
		channels := []string{jobqueue.ChannelProducer}
		if p.cfg.Wake != nil {
			channels = append(channels, jobqueue.ChannelAssigned)
		}
		// Delivered on the listener's goroutine, none dropped: a dropped
		// ChannelAssigned notification would leave its nodes to their
		// fallback poll.
		l := jobqueue.NewListener(p.cfg.Pool, jobqueue.ListenerConfig{Channels: channels, Logger: p.log.Named("listener"),
			Deliver: p.route})
		p.listener = l
		lctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := l.Run(lctx); err != nil {
				p.log.Error("listener stopped", zap.Error(err))
			}
		})
		wg.Go(func() {
			select {
			case <-l.Ready():
				// Work or slots notified before the LISTEN took effect
				// were missed: a round now finds them (a leader elected
				// first ran its first round before), rather than the
				// fallback tick.
				p.signalAssign()
				if p.cfg.Wake != nil {
					// Rounds committed before it were not relayed to the
					// polls this producer already holds.
					p.cfg.Wake.WakeAll()
				}
			case <-lctx.Done():
			}
		})
		defer func() { stop(); wg.Wait() }()
	}
	return p.elector.Run(ctx, p.lead)
}

// adviseServer warns about server settings that slow the queue down, once
// per leadership term: the leader is the one that runs the rounds. Reading
// them failing is no reason not to lead.
func (p *Producer) adviseServer(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	advice, err := p.cfg.Queue.ServerAdvice(ctx)
	if err != nil {
		p.log.Debug("reading the server's settings", zap.Error(err))
		return
	}
	for _, a := range advice {
		p.log.Warn("a PostgreSQL setting slows the queue down", zap.String("setting", a.Setting),
			zap.String("have", a.Have), zap.String("recommended", a.Want), zap.String("why", a.Why))
	}
}

// hearsAssigned reports whether the leader's rounds come back to its own
// polls through its listener (ChannelAssigned). When they do not (poll-only,
// or its LISTEN connection down and not yet back: a pool at
// max_connections), the leader wakes the nodes of its rounds itself, or
// its polls would wait for their fallback poll. It does not do so always:
// the notification would then wake each node a second time, for a claim
// that finds nothing.
func (p *Producer) hearsAssigned() bool {
	return p.listener != nil && p.listener.Listening()
}

// route acts on one notification of the listener; it does not block.
func (p *Producer) route(n jobqueue.Notification) {
	switch n.Channel {
	case jobqueue.ChannelAssigned:
		p.cfg.Wake.Wake(strings.Fields(n.Payload)...)
	case jobqueue.ChannelProducer:
		p.signalAssign()
	default: // PayloadReconnected: anything may have been missed
		p.signalAssign()
		if p.cfg.Wake != nil {
			p.cfg.Wake.WakeAll()
		}
	}
}

func (p *Producer) signalAssign() {
	select {
	case p.assignWake <- struct{}{}:
	default:
	}
}

// lead runs the leader's actors until ctx ends (leadership lost or shutdown).
func (p *Producer) lead(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.adviseServer(ctx)
	actors := []func(context.Context) error{p.assignLoop, p.rescueLoop}
	if p.cfg.Retention > 0 || p.cfg.NodeRetention > 0 {
		actors = append(actors, p.retentionLoop)
	}
	actors = append(actors, p.cfg.LeaderActors...)
	var wg sync.WaitGroup
	for _, a := range actors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a(ctx); err != nil && ctx.Err() == nil {
				p.log.Error("leader actor failed; stepping down", zap.Error(err))
				cancel() // a half-working leader is worse than a standby taking over
			}
		}()
	}
	wg.Wait()
}

// assignLoop assigns whenever work or capacity appears (NOTIFY), when a host
// held back by its interval comes due, and on a fallback tick.
func (p *Producer) assignLoop(ctx context.Context) error {
	tick := time.NewTicker(p.cfg.Tick)
	defer tick.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	for {
		rep, err := p.cfg.Queue.AssignPolite(ctx, p.cfg.Politeness.For, p.cfg.AssignBatch, p.cfg.Assign)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.log.Warn("assignment round failed", zap.Error(err))
		} else if n := rep.Total(); n > 0 {
			p.log.Debug("assigned", zap.Int("jobs", n), zap.String("policy", string(p.cfg.Assign)), zap.Int("nodes", len(rep.Assigned)),
				zap.Int("free_slots", rep.FreeSlots), zap.Int("throttled_hosts", rep.Throttled))
			if p.cfg.OnAssigned != nil {
				p.cfg.OnAssigned(rep)
			}
			if p.cfg.Wake != nil && !p.hearsAssigned() {
				p.cfg.Wake.Wake(slices.Collect(maps.Keys(rep.Assigned))...)
			}
			if n == p.cfg.AssignBatch {
				continue // more may be waiting: go again without waiting for a wake-up
			}
		}
		if rep.NextDueIn > 0 {
			resetTimer(due, rep.NextDueIn)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.assignWake:
		case <-tick.C:
		case <-due.C:
		}
	}
}

// rescueGate holds the rescue off until the database has answered this
// leader for staleAfter without a break. A heartbeat older than staleAfter
// proves a node gone only if the node could reach the database meanwhile:
// after an outage every node saw too (a failover), every heartbeat is that
// old, and a rescue then would declare the whole fleet lost, charging every
// running job an attempt (failing those on their last) though no node
// stopped. The cost: a leader that just took over rescues a node that
// really is gone up to staleAfter later.
type rescueGate struct {
	staleAfter time.Duration
	upSince    time.Time // since when the database answered; zero: it did not, last time
}

// open reports whether the database has answered for the stale time by now.
func (g *rescueGate) open(now time.Time) bool {
	return !g.upSince.IsZero() && now.Sub(g.upSince) >= g.staleAfter
}

// answered records whether the database answered at now, and reports
// whether the rescue may run.
func (g *rescueGate) answered(now time.Time, ok bool) bool {
	if !ok {
		g.upSince = time.Time{}
		return false
	}
	if g.upSince.IsZero() {
		g.upSince = now
	}
	return g.open(now)
}

// rescueLoop returns the jobs of nodes that stopped heartbeating and of
// expired leases, once the database has answered for the stale time
// (rescueGate).
func (p *Producer) rescueLoop(ctx context.Context) error {
	tick := time.NewTicker(p.cfg.RescueInterval)
	defer tick.Stop()
	gate := rescueGate{staleAfter: p.cfg.StaleAfter}
	for {
		var rep jobqueue.RescueReport
		var err error
		if !gate.open(p.cfg.Now()) {
			// Until it opens, a ping says whether the database answers;
			// then the rescue's own success or failure does.
			err = p.cfg.Queue.Ping(ctx)
		}
		if gate.answered(p.cfg.Now(), err == nil) {
			if rep, err = p.cfg.Queue.RescueLost(ctx, p.cfg.StaleAfter); err != nil {
				gate.answered(p.cfg.Now(), false)
			}
		}
		switch {
		case err != nil && ctx.Err() == nil:
			p.log.Warn("rescue failed", zap.Error(err))
		case len(rep.LostNodes) > 0 || rep.Released+rep.Unclaimed+rep.Retried+rep.Failed > 0:
			p.log.Warn("rescued jobs of lost nodes, expired leases or unclaimed assignments", zap.Strings("lost_nodes", rep.LostNodes),
				zap.Int64("released", rep.Released), zap.Int64("retried", rep.Retried), zap.Int64("failed", rep.Failed),
				zap.Int64("unclaimed", rep.Unclaimed), zap.Strings("unclaimed_nodes", rep.UnclaimedNodes))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// retentionLoop deletes, every RetentionInterval, the finished jobs older
// than Retention in bounded batches and the politeness rows of hosts idle
// as long, and the rows of nodes that exited or were lost longer than
// NodeRetention ago (their lifetime counters fold into the farm's).
func (p *Producer) retentionLoop(ctx context.Context) error {
	tick := time.NewTicker(p.cfg.RetentionInterval)
	defer tick.Stop()
	for {
		if p.cfg.Retention > 0 {
			p.purgeJobs(ctx, p.cfg.Now().Add(-p.cfg.Retention))
		}
		if p.cfg.NodeRetention > 0 {
			cutoff := p.cfg.Now().Add(-p.cfg.NodeRetention)
			nodes, err := p.cfg.Queue.DeleteGoneNodes(ctx, cutoff)
			switch {
			case err != nil && ctx.Err() == nil:
				p.log.Warn("deleting gone nodes failed", zap.Error(err))
			case nodes > 0:
				p.log.Info("deleted gone nodes", zap.Int64("nodes", nodes), zap.Time("gone_before", cutoff))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// purgeJobs deletes the finished jobs (and their results and blobs) that
// finished before cutoff, and the politeness rows of hosts that started no
// job since.
func (p *Producer) purgeJobs(ctx context.Context, cutoff time.Time) {
	n, err := p.cfg.Queue.DeleteFinishedBefore(ctx, cutoff, p.cfg.RetentionBatch, blobDeleter(ctx, p.cfg.Blobs, p.log))
	switch {
	case err != nil && ctx.Err() == nil:
		p.log.Warn("retention purge failed", zap.Error(err))
	case n > 0:
		p.log.Info("purged finished jobs", zap.Int64("jobs", n), zap.Time("finished_before", cutoff))
	}
	hosts, err := p.cfg.Queue.DeleteIdleHosts(ctx, cutoff, p.cfg.RetentionBatch)
	switch {
	case err != nil && ctx.Err() == nil:
		p.log.Warn("deleting idle hosts failed", zap.Error(err))
	case hosts > 0:
		p.log.Info("deleted idle hosts", zap.Int64("hosts", hosts), zap.Time("last_started_before", cutoff))
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	t.Reset(max(d, 0))
}
