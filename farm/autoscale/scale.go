package autoscale

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"github.com/browserfarm/browserfarm/supervisor"
)

// Defaults for Config fields left at their zero value.
const (
	DefaultMax               = 10
	DefaultTargetUtilisation = 0.8
	DefaultScaleInCooldown   = 5 * time.Minute
	DefaultIdleGrace         = time.Minute
)

// Off turns off a field of Config or ReconcilerConfig that can be off; each
// field's comment says what off means there.
const Off = cfgrule.Off

// Config is the scaling policy. Its fields follow the one rule of every
// config struct: 0 means the documented default (see WithDefaults; Min's
// default is 0 itself), Off turns off a field that can be off, and any
// other negative value is an error naming the field (see Validate).
type Config struct {
	// Min is the smallest desired count ever reported (default 0: an empty
	// queue runs no consumers).
	Min int
	// Max is the largest desired count ever reported (default 10). It is a
	// hard bound: lowering it takes effect at the next computation, without
	// waiting for the cooldown.
	Max int
	// NodeCapacity is the number of jobs one consumer runs at once, for a
	// fleet with no live node to say (default: the supervisor's capacity).
	// Live nodes report their own capacity (Node.Capacity), which wins.
	NodeCapacity int
	// TargetUtilisation is the share of the fleet's slots the backlog should
	// fill, in (0, 1] (default 0.8): the headroom absorbs the next burst
	// while new nodes boot.
	TargetUtilisation float64
	// ScaleInCooldown is how long the need must stay below the desired
	// count before the count is lowered (0: the default, 5m; Off: none, scale
	// in at once). It keeps a short lull between bursts from terminating
	// nodes that the next burst needs.
	ScaleInCooldown time.Duration
	// IdleGrace is how long a node must have had no job before it counts as
	// an idle scale-in candidate (0: the default, 1m; Off: none), so a node
	// between two jobs is not mistaken for an idle one.
	IdleGrace time.Duration
	// MaxScaleOutStep bounds how many nodes one computation adds
	// (0: the default, which is no bound: scale out to the need at once).
	MaxScaleOutStep int
}

// WithDefaults returns c with zero fields replaced by their defaults.
func (c Config) WithDefaults() Config {
	if c.Max == 0 {
		c.Max = DefaultMax
	}
	if c.NodeCapacity == 0 {
		c.NodeCapacity = supervisor.DefaultConfig().Capacity
	}
	if c.TargetUtilisation == 0 {
		c.TargetUtilisation = DefaultTargetUtilisation
	}
	if c.ScaleInCooldown == 0 {
		c.ScaleInCooldown = DefaultScaleInCooldown
	}
	if c.IdleGrace == 0 {
		c.IdleGrace = DefaultIdleGrace
	}
	return c
}

// Validate reports every field of c (after defaults) that is out of range.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.Min < 0 {
		errs = append(errs, fmt.Errorf("autoscale: min %d is negative", c.Min))
	}
	if c.Max < 1 {
		errs = append(errs, fmt.Errorf("autoscale: max %d must be at least 1", c.Max))
	}
	if c.Max < c.Min {
		errs = append(errs, fmt.Errorf("autoscale: max %d is below min %d", c.Max, c.Min))
	}
	if c.NodeCapacity < 1 {
		errs = append(errs, fmt.Errorf("autoscale: node capacity %d must be at least 1", c.NodeCapacity))
	}
	if !(c.TargetUtilisation > 0 && c.TargetUtilisation <= 1) {
		errs = append(errs, fmt.Errorf("autoscale: target utilisation %v must be in (0, 1]", c.TargetUtilisation))
	}
	if c.ScaleInCooldown < 0 && c.ScaleInCooldown != Off {
		errs = append(errs, fmt.Errorf("autoscale: scale-in cooldown %v is negative", c.ScaleInCooldown))
	}
	if c.IdleGrace < 0 && c.IdleGrace != Off {
		errs = append(errs, fmt.Errorf("autoscale: idle grace %v is negative", c.IdleGrace))
	}
	if c.MaxScaleOutStep < 0 {
		errs = append(errs, fmt.Errorf("autoscale: max scale-out step %d is negative", c.MaxScaleOutStep))
	}
	return errors.Join(errs...)
}

// Node is one live (heartbeating) consumer as the producer sees it.
type Node struct {
	ID string `json:"id"`
	// Busy is the node's queued + processing job count.
	Busy int `json:"busy"`
	// Capacity is the node's concurrent sessions as it registered them
	// (0: unknown).
	Capacity int `json:"capacity,omitempty"`
	// IdleSince is when Busy last became zero; zero time while busy or when
	// unknown. A node with an unknown idle time is never a scale-in candidate.
	IdleSince time.Time `json:"idle_since,omitzero"`
	// Work is a count that grows with the jobs the node starts and
	// finishes. A node seen idle at two samples whose Work changed between
	// them ran jobs meanwhile: it was not idle all along.
	Work int64 `json:"work,omitempty"`
}

// Load is what the scaler needs to know about the farm at one instant.
type Load struct {
	Pending    int `json:"pending"`
	Queued     int `json:"queued"`
	Processing int `json:"processing"`
	// Nodes are the live consumers. Nodes marked lost are not in this list.
	Nodes []Node `json:"nodes"`
	// Lost is the number of nodes currently marked lost. Their jobs are
	// already back in Pending (or still counted where they were): the need
	// is computed from the work, so losing nodes never lowers it, and the
	// slots they leave are the first given up when the fleet shrinks.
	Lost int `json:"lost"`
}

// State is what Compute carries from one computation to the next. A State
// not Initialized means "no computation yet"; the first one starts from the
// count the orchestrator holds when the driver read it back (Seeded), and
// otherwise from the number of live nodes or, when larger, the Desired it
// carries, so a producer restart does not shrink a running or still
// booting fleet before the cooldown. A seeded start does not count the
// live nodes: those beyond the orchestrator's count are leaving (the last
// leader gave them up and they drain until terminated), and counting them
// would ask for their replacements for a cooldown.
type State struct {
	Initialized bool      `json:"initialized"`
	Desired     int       `json:"desired"`
	Seeded      bool      `json:"seeded,omitempty"`
	BelowSince  time.Time `json:"below_since,omitzero"`
}

// Action is what a computation did to the desired count.
type Action string

// Actions reported in Decision.Action.
const (
	ActionHold     Action = "hold"
	ActionScaleOut Action = "scale-out"
	ActionScaleIn  Action = "scale-in"
)

// Decision is the outcome of one Compute call, for the driver, logs,
// /metrics and the dashboard.
type Decision struct {
	// Desired is the node count to ask the orchestrator for.
	Desired int `json:"desired"`
	// Previous is the desired count before this computation.
	Previous int `json:"previous"`
	// Work is pending + queued + processing.
	Work int `json:"work"`
	// Need is the node count the work calls for, bounded by Min and Max.
	Need int `json:"need"`
	// Active, Idle and Lost count live nodes, idle scale-in candidates
	// (idle for at least IdleGrace) and lost nodes.
	Active int    `json:"active"`
	Idle   int    `json:"idle"`
	Lost   int    `json:"lost"`
	Action Action `json:"action"`
	// Reason explains a hold or the size of a step, for the log.
	Reason string `json:"reason"`
	// CooldownLeft is how long a pending scale-in still waits.
	CooldownLeft time.Duration `json:"cooldown_left_ns,omitempty"`
	// ScaleIn names the idle nodes a scale-in is meant for, longest idle
	// first; the producer may stop assigning to them so they stay idle until
	// the orchestrator removes them. Slots with no live node (booting,
	// lost) are given up before any of these.
	ScaleIn []string `json:"scale_in,omitempty"`
}

// NodesFor returns how many nodes of the given capacity keep work at the
// target utilisation: ceil(work / (capacity × target)), 0 for no work.
func NodesFor(work, capacity int, target float64) int {
	if work <= 0 {
		return 0
	}
	if capacity < 1 {
		capacity = 1
	}
	if !(target > 0 && target <= 1) {
		target = DefaultTargetUtilisation
	}
	perNode := float64(capacity) * target
	// The small epsilon keeps exact multiples (24 jobs / 4.8) from rounding
	// up to one node too many through floating-point error.
	n := math.Ceil(float64(work)/perNode - 1e-9)
	// Converted in range only: an out-of-range float becomes the minimum
	// int, which the bounds would then clamp to the fleet's minimum.
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(n)
}

// nodeCapacity is the jobs one more node would run: the mean capacity the
// live nodes reported (rounded down), or cfg.NodeCapacity when none did.
func nodeCapacity(cfg Config, nodes []Node) int {
	sum, n := 0, 0
	for _, nd := range nodes {
		if nd.Capacity > 0 {
			sum += nd.Capacity
			n++
		}
	}
	if n == 0 {
		return cfg.NodeCapacity
	}
	return max(sum/n, 1)
}

func clamp(n, lo, hi int) int {
	if n < lo {
		return lo
	}
	if n > hi {
		return hi
	}
	return n
}

// Compute is the scaling policy as a pure function: from the policy, the
// previous state, the farm's load and the time it returns the decision and
// the next state. It scales out to the need at once (limited only by
// MaxScaleOutStep) and scales in only once the need has stayed below the
// desired count for ScaleInCooldown, and then only by slots without a live
// node and by nodes idle for at least IdleGrace, never below the need.
func Compute(cfg Config, st State, load Load, now time.Time) (Decision, State) {
	cfg = cfg.WithDefaults()
	if cfg.Max < cfg.Min {
		cfg.Max = cfg.Min
	}
	work := max(load.Pending, 0) + max(load.Queued, 0) + max(load.Processing, 0)
	need := clamp(NodesFor(work, nodeCapacity(cfg, load.Nodes), cfg.TargetUtilisation), cfg.Min, cfg.Max)

	idle := idleCandidates(load.Nodes, now, cfg.IdleGrace)
	if !st.Initialized {
		start := st.Desired
		if !st.Seeded {
			start = max(len(load.Nodes), st.Desired)
		}
		st = State{Initialized: true, Desired: start}
	}
	d := Decision{
		Previous: st.Desired,
		Work:     work,
		Need:     need,
		Active:   len(load.Nodes),
		Idle:     len(idle),
		Lost:     load.Lost,
		Action:   ActionHold,
	}

	// Max is a hard bound (an operator lowering it means it now), so it
	// bypasses the cooldown and the idle-node rule.
	aboveMax := st.Desired > cfg.Max
	if aboveMax {
		st.Desired = cfg.Max
		st.BelowSince = time.Time{}
	}

	switch {
	case need > st.Desired:
		step := need - st.Desired
		d.Reason = fmt.Sprintf("%d jobs need %d nodes", work, need)
		if cfg.MaxScaleOutStep > 0 && step > cfg.MaxScaleOutStep {
			step = cfg.MaxScaleOutStep
			d.Reason += fmt.Sprintf("; step limited to %d", step)
		}
		st.Desired += step
		st.BelowSince = time.Time{}
		d.Action = ActionScaleOut
	case need == st.Desired:
		st.BelowSince = time.Time{}
		d.Reason = "at need"
	default:
		if st.BelowSince.IsZero() {
			st.BelowSince = now
		}
		if left := cfg.ScaleInCooldown - now.Sub(st.BelowSince); left > 0 {
			d.CooldownLeft = left
			d.Reason = fmt.Sprintf("need %d below desired %d; cooling down", need, st.Desired)
			break
		}
		surplus := st.Desired - need
		vacant := min(max(st.Desired-len(load.Nodes), 0), surplus)
		fromIdle := min(len(idle), surplus-vacant)
		if vacant+fromIdle == 0 {
			d.Reason = fmt.Sprintf("need %d below desired %d; no idle node to remove", need, st.Desired)
			break
		}
		st.Desired -= vacant + fromIdle
		for _, n := range idle[:fromIdle] {
			d.ScaleIn = append(d.ScaleIn, n.ID)
		}
		d.Action = ActionScaleIn
		d.Reason = fmt.Sprintf("need %d; giving up %d empty slots and %d idle nodes", need, vacant, fromIdle)
	}
	if aboveMax && d.Action == ActionHold {
		d.Action = ActionScaleIn
		d.Reason = "lowered to max; " + d.Reason
	}
	d.Desired = st.Desired
	return d, st
}

// idleCandidates returns the nodes idle for at least grace, longest idle
// first (ties by id, so the choice is deterministic).
func idleCandidates(nodes []Node, now time.Time, grace time.Duration) []Node {
	var out []Node
	for _, n := range nodes {
		if n.Busy == 0 && !n.IdleSince.IsZero() && now.Sub(n.IdleSince) >= grace {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].IdleSince.Equal(out[j].IdleSince) {
			return out[i].IdleSince.Before(out[j].IdleSince)
		}
		return out[i].ID < out[j].ID
	})
	return out
}
