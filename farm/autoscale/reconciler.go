package autoscale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
)

// Source supplies the farm's load; the producer implements it over its job
// queue, so this package does not depend on the queue.
type Source interface {
	Load(ctx context.Context) (Load, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context) (Load, error)

// Load calls f.
func (f SourceFunc) Load(ctx context.Context) (Load, error) { return f(ctx) }

// Defaults for ReconcilerConfig.
const (
	DefaultInterval     = 15 * time.Second
	DefaultReapply      = 5 * time.Minute
	DefaultApplyTimeout = 2 * time.Minute
)

// ReconcilerConfig configures a Reconciler. Zero fields take the defaults;
// none of them can be off, and a negative one is an error naming it.
type ReconcilerConfig struct {
	// Scaling is the policy handed to Compute.
	Scaling Config
	// Interval between computations (default 15s).
	Interval time.Duration
	// Reapply re-sends an unchanged desired count this often (default 5m),
	// so a count changed behind the producer's back (console, another
	// tool) is corrected.
	Reapply time.Duration
	// ApplyTimeout bounds one driver call including the SDK's retries
	// (default 2m).
	ApplyTimeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Fence, if set, is asked right before each call that sets the
	// orchestrator's count; an error skips the call, as a failed one. A
	// producer confirms with the database that it still leads
	// (jobqueue.Elector.Confirm): one that lost its lock a moment ago, and
	// has not noticed yet, must not size the fleet over its successor.
	Fence func(ctx context.Context) error
}

// notApplied is Status.Applied before the driver's first success of a
// term.
const notApplied = -1

// Status is the scaler's state for /metrics, the API and the dashboard.
type Status struct {
	Driver string `json:"driver"`
	// Desired is the count computed last; Applied the count the driver
	// last accepted (-1 before the first success of the producer's term).
	Desired   int       `json:"desired"`
	Applied   int       `json:"applied"`
	Decision  Decision  `json:"decision"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	AppliedAt time.Time `json:"applied_at,omitzero"`
	// LastError is the last failure (load or driver), cleared by the next
	// successful tick.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// Errors counts failed ticks since start.
	Errors int `json:"errors"`
}

// Reconciler is the producer's scaling actor: every interval it reads the
// load, computes the desired count and applies it through the driver when
// it changed, when the last attempt failed, or every Reapply period.
type Reconciler struct {
	cfg ReconcilerConfig
	src Source
	drv Driver
	log *zap.Logger

	tickMu sync.Mutex // serialises Tick; guards the fields below it
	state  State
	idle   map[string]time.Time // first time each node was seen idle
	work   map[string]int64     // each node's Work at the previous tick

	desired atomic.Int64
	mu      sync.Mutex // guards status
	status  Status
}

// NewReconciler validates the policy and returns a reconciler; nothing runs
// until Run or Tick.
func NewReconciler(cfg ReconcilerConfig, src Source, drv Driver, log *zap.Logger) (*Reconciler, error) {
	if err := cfg.Scaling.Validate(); err != nil {
		return nil, err
	}
	if src == nil || drv == nil {
		return nil, errors.New("autoscale: reconciler needs a source and a driver")
	}
	cfg.Scaling = cfg.Scaling.WithDefaults()
	if err := errors.Join(
		cfgrule.Resolve("Interval", &cfg.Interval, DefaultInterval, false),
		cfgrule.Resolve("Reapply", &cfg.Reapply, DefaultReapply, false),
		cfgrule.Resolve("ApplyTimeout", &cfg.ApplyTimeout, DefaultApplyTimeout, false),
	); err != nil {
		return nil, fmt.Errorf("autoscale: reconciler: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if log == nil {
		log = zap.NewNop()
	}
	r := &Reconciler{
		cfg:    cfg,
		src:    src,
		drv:    drv,
		log:    log.Named("autoscale").With(zap.String("driver", drv.Name())),
		idle:   make(map[string]time.Time),
		work:   make(map[string]int64),
		status: Status{Driver: drv.Name(), Applied: notApplied},
	}
	r.desired.Store(-1)
	return r, nil
}

// Desired returns the count computed last in this term, -1 before its
// first computation: unknown, which a gauge should not report as a count
// (a KEDA ScaledObject would size the fleet to it).
func (r *Reconciler) Desired() int { return int(r.desired.Load()) }

// Status returns a copy of the scaler's state.
func (r *Reconciler) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.status
	s.Decision.ScaleIn = append([]string(nil), s.Decision.ScaleIn...)
	return s
}

// Run ticks at once and then every interval until ctx is done, and returns
// nil then. Failures are logged and retried on the next tick; they never
// stop the loop. A producer runs it for each term it leads: it starts
// afresh each time (the first computation starts from the live nodes, and
// a decrease waits a cooldown), since what it knew at the end of an earlier
// term (the desired count, since when the need was below it, idle nodes,
// what it applied) is stale after another producer led. A driver that can
// read the orchestrator's count back (CurrentReader) is asked for it first:
// the term starts from it.
func (r *Reconciler) Run(ctx context.Context) error {
	r.tickMu.Lock()
	r.desired.Store(-1)
	r.state = State{}
	r.idle = map[string]time.Time{}
	r.work = map[string]int64{}
	r.tickMu.Unlock()
	r.mu.Lock()
	r.status.Applied, r.status.AppliedAt = notApplied, time.Time{}
	r.mu.Unlock()
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		// Errors are in the log and Status already.
		_, _ = r.Tick(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Tick runs one computation and, when needed, one driver call. It returns
// the decision, and the load or driver error if either failed (the
// decision is then the previous one for a load error).
func (r *Reconciler) Tick(ctx context.Context) (Decision, error) {
	r.tickMu.Lock()
	defer r.tickMu.Unlock()

	load, err := r.src.Load(ctx)
	now := r.cfg.Now()
	if err != nil {
		if ctx.Err() != nil {
			return r.Status().Decision, ctx.Err()
		}
		err = fmt.Errorf("autoscale: read load: %w", err)
		r.log.Warn("cannot read farm load; keeping desired count", zap.Error(err))
		r.fail(now, err)
		return r.Status().Decision, err
	}
	if err := r.seed(ctx); err != nil {
		if ctx.Err() != nil {
			return r.Status().Decision, ctx.Err()
		}
		r.log.Warn("cannot read the orchestrator's count; computing nothing until it can be read", zap.Error(err))
		r.fail(now, err)
		return r.Status().Decision, err
	}
	r.trackIdle(&load, now)

	prev := r.state
	d, st := Compute(r.cfg.Scaling, r.state, load, now)
	r.state = st
	r.desired.Store(int64(d.Desired))

	if d.Desired != prev.Desired || !prev.Initialized {
		r.log.Info("desired node count",
			zap.Int("desired", d.Desired), zap.Int("previous", d.Previous), zap.String("action", string(d.Action)),
			zap.Int("work", d.Work), zap.Int("need", d.Need), zap.Int("active", d.Active),
			zap.Int("idle", d.Idle), zap.Int("lost", d.Lost), zap.Strings("scale_in", d.ScaleIn),
			zap.String("reason", d.Reason))
	}

	r.mu.Lock()
	r.status.Desired = d.Desired
	r.status.Decision = d
	r.status.UpdatedAt = now
	applied, appliedAt, failing := r.status.Applied, r.status.AppliedAt, r.status.LastError != ""
	r.mu.Unlock()

	if applied == d.Desired && !failing && now.Sub(appliedAt) < r.cfg.Reapply {
		return d, nil
	}
	actx, cancel := context.WithTimeout(ctx, r.cfg.ApplyTimeout)
	err = r.fence(actx)
	if err == nil {
		err = r.drv.SetDesired(actx, d.Desired)
	}
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return d, ctx.Err()
		}
		r.log.Error("driver could not apply desired count; retrying next tick", zap.Int("desired", d.Desired), zap.Error(err))
		r.fail(now, err)
		return d, err
	}
	r.mu.Lock()
	r.status.Applied = d.Desired
	r.status.AppliedAt = now
	r.status.LastError = ""
	r.status.LastErrorAt = time.Time{}
	r.mu.Unlock()
	return d, nil
}

// fence asks cfg.Fence, if any.
func (r *Reconciler) fence(ctx context.Context) error {
	if r.cfg.Fence == nil {
		return nil
	}
	if err := r.cfg.Fence(ctx); err != nil {
		return fmt.Errorf("autoscale: not applying the desired count: %w", err)
	}
	return nil
}

// seed reads, once a term, the count the orchestrator holds into the state
// the term's first computation starts from. Until it succeeds nothing is
// computed or applied: a count from the live nodes alone could give up
// instances still booting. Callers hold tickMu.
func (r *Reconciler) seed(ctx context.Context) error {
	cr, ok := r.drv.(CurrentReader)
	if r.state.Initialized || !ok {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, r.cfg.ApplyTimeout)
	defer cancel()
	n, err := cr.Current(actx)
	if err != nil {
		return fmt.Errorf("autoscale: read the orchestrator's count: %w", err)
	}
	r.state = State{Desired: n, Seeded: true}
	r.log.Info("term starts from the orchestrator's count", zap.Int("current", n))
	return nil
}

func (r *Reconciler) fail(now time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status.LastError = err.Error()
	r.status.LastErrorAt = now
	r.status.Errors++
}

// trackIdle fills in IdleSince for idle nodes whose source left it unknown,
// from the first tick that saw each of them idle (again: a node whose Work
// changed since the previous tick ran jobs in between, short ones the
// samples missed), and forgets nodes that are busy or gone. Callers hold
// tickMu.
func (r *Reconciler) trackIdle(load *Load, now time.Time) {
	seen := make(map[string]bool, len(load.Nodes))
	nodes := make([]Node, len(load.Nodes))
	copy(nodes, load.Nodes)
	for i := range nodes {
		n := &nodes[i]
		prevWork, known := r.work[n.ID]
		r.work[n.ID] = n.Work
		if n.Busy > 0 {
			continue
		}
		if known && prevWork != n.Work {
			delete(r.idle, n.ID)
		}
		seen[n.ID] = true
		since, ok := r.idle[n.ID]
		if !ok {
			since = now
			if !n.IdleSince.IsZero() {
				since = n.IdleSince
			}
			r.idle[n.ID] = since
		}
		if n.IdleSince.IsZero() {
			n.IdleSince = since
		}
	}
	for id := range r.idle {
		if !seen[id] {
			delete(r.idle, id)
		}
	}
	present := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		present[n.ID] = true
	}
	for id := range r.work {
		if !present[id] {
			delete(r.work, id)
		}
	}
	load.Nodes = nodes
}
