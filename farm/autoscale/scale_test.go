package autoscale

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// busy is a live node running n jobs.
func busy(id string, n int) Node { return Node{ID: id, Busy: n} }

// idle is a live node idle since t0+at (at is usually negative).
func idle(id string, at time.Duration) Node { return Node{ID: id, IdleSince: t0.Add(at)} }

func TestNodesFor(t *testing.T) {
	tests := []struct {
		work, capacity int
		target         float64
		want           int
	}{
		{0, 6, 0.8, 0},
		{-3, 6, 0.8, 0},
		{1, 6, 0.8, 1},
		{4, 6, 0.8, 1},
		{5, 6, 0.8, 2},
		{24, 6, 0.8, 5}, // exact multiple of 4.8 must not round up to 6
		{25, 6, 0.8, 6},
		{1000, 1, 1e-17, math.MaxInt32}, // far beyond any int: not wrapped to negative
		{6, 6, 1, 1},
		{7, 6, 1, 2},
		{7, 0, 1, 7},  // capacity below 1 is treated as 1
		{24, 6, 0, 5}, // invalid target falls back to the default
		{96, 6, 0.8, 20},
	}
	for _, tc := range tests {
		if got := NodesFor(tc.work, tc.capacity, tc.target); got != tc.want {
			t.Errorf("NodesFor(%d, %d, %v) = %d, want %d", tc.work, tc.capacity, tc.target, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error, "" for valid
	}{
		{"defaults", Config{}, ""},
		{"min equals max", Config{Min: 3, Max: 3}, ""},
		{"negative min", Config{Min: -1}, "min -1 is negative"},
		{"max below min", Config{Min: 5, Max: 2}, "max 2 is below min 5"},
		{"negative max", Config{Max: -1}, "max -1 must be at least 1"},
		{"target above one", Config{TargetUtilisation: 1.5}, "target utilisation 1.5"},
		{"negative target", Config{TargetUtilisation: -0.5}, "target utilisation -0.5"},
		{"negative capacity", Config{NodeCapacity: -6}, "node capacity -6"},
		{"negative cooldown", Config{ScaleInCooldown: -time.Second}, "cooldown -1s is negative"},
		{"negative grace", Config{IdleGrace: -time.Second}, "idle grace -1s is negative"},
		{"negative step", Config{MaxScaleOutStep: -1}, "step -1 is negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestCompute replays sequences of loads through Compute, carrying the state
// from step to step, and checks every decision. Default policy unless a case
// says otherwise: min 0, max 10, 6 slots per node at 80% (4.8 jobs/node),
// 5m cooldown, 1m idle grace.
func TestCompute(t *testing.T) {
	type step struct {
		at      time.Duration // offset from t0
		load    Load
		want    int
		action  Action
		scaleIn []string
	}
	tests := []struct {
		name  string
		cfg   Config
		state State
		steps []step
	}{
		{
			name: "empty queue, no nodes",
			steps: []step{
				{at: 0, load: Load{}, want: 0, action: ActionHold},
				{at: time.Hour, load: Load{}, want: 0, action: ActionHold},
			},
		},
		{
			name: "empty queue keeps min",
			cfg:  Config{Min: 2},
			steps: []step{
				{at: 0, load: Load{}, want: 2, action: ActionScaleOut},
				{at: time.Hour, load: Load{Nodes: []Node{idle("a", -time.Hour), idle("b", -time.Hour)}}, want: 2, action: ActionHold},
			},
		},
		{
			name: "burst scales out at once",
			steps: []step{
				{at: 0, load: Load{}, want: 0, action: ActionHold},
				{at: time.Second, load: Load{Pending: 30}, want: 7, action: ActionScaleOut},
				// Nodes still booting: the need is unchanged, so no second step.
				{at: 2 * time.Second, load: Load{Pending: 30, Nodes: []Node{idle("a", 0)}}, want: 7, action: ActionHold},
			},
		},
		{
			// A new term whose driver read the group's count back (8:
			// 3 live, 5 booting): a need of 7 waits the cooldown and then
			// gives up an empty slot, instead of dropping to 7 at once.
			name:  "first computation starts from the orchestrator's count",
			cfg:   Config{NodeCapacity: 6, TargetUtilisation: 1},
			state: State{Desired: 8},
			steps: []step{
				{at: 0, load: Load{Processing: 18, Pending: 24, Nodes: []Node{busy("a", 6), busy("b", 6), busy("c", 6)}}, want: 8, action: ActionHold},
				{at: 6 * time.Minute, load: Load{Processing: 18, Pending: 24, Nodes: []Node{busy("a", 6), busy("b", 6), busy("c", 6)}}, want: 7, action: ActionScaleIn},
			},
		},
		{
			// The orchestrator's count below the live nodes: the live
			// nodes win, as without it.
			name:  "first computation starts from the live nodes above the orchestrator's count",
			state: State{Desired: 1},
			steps: []step{
				{at: 0, load: Load{Processing: 12, Nodes: []Node{busy("a", 6), busy("b", 6), idle("c", -time.Hour)}}, want: 3, action: ActionHold},
			},
		},
		{
			name: "burst bounded by max",
			cfg:  Config{Max: 4},
			steps: []step{
				{at: 0, load: Load{Pending: 1000}, want: 4, action: ActionScaleOut},
			},
		},
		{
			name:  "running work counts, not only pending",
			state: State{Initialized: true, Desired: 5},
			steps: []step{
				// 6 queued + 18 processing with nothing pending still needs 5
				// nodes; a scaler that looked at pending alone would shrink
				// to zero and kill running jobs.
				{at: 0, load: Load{Queued: 6, Processing: 18, Nodes: []Node{busy("a", 6), busy("b", 6), busy("c", 6), busy("d", 6), idle("e", -time.Hour)}}, want: 5, action: ActionHold},
				{at: 10 * time.Minute, load: Load{Queued: 6, Processing: 18, Nodes: []Node{busy("a", 6), busy("b", 6), busy("c", 6), busy("d", 6), idle("e", -time.Hour)}}, want: 5, action: ActionHold},
				{at: 11 * time.Minute, load: Load{Pending: 1, Queued: 6, Processing: 18, Nodes: []Node{busy("a", 6), busy("b", 6), busy("c", 6), busy("d", 6), idle("e", -time.Hour)}}, want: 6, action: ActionScaleOut},
			},
		},
		{
			name: "scale-out step limit",
			cfg:  Config{MaxScaleOutStep: 2},
			steps: []step{
				{at: 0, load: Load{Pending: 30}, want: 2, action: ActionScaleOut},
				{at: 15 * time.Second, load: Load{Pending: 30}, want: 4, action: ActionScaleOut},
				{at: 30 * time.Second, load: Load{Pending: 30}, want: 6, action: ActionScaleOut},
				{at: 45 * time.Second, load: Load{Pending: 30}, want: 7, action: ActionScaleOut},
				{at: 60 * time.Second, load: Load{Pending: 30}, want: 7, action: ActionHold},
			},
		},
		{
			name:  "cooldown before scale-in",
			state: State{Initialized: true, Desired: 3},
			steps: []step{
				{at: 0, load: Load{Nodes: []Node{idle("a", -time.Hour), idle("b", -2*time.Hour), idle("c", -time.Hour)}}, want: 3, action: ActionHold},
				{at: 5*time.Minute - time.Second, load: Load{Nodes: []Node{idle("a", -time.Hour), idle("b", -2*time.Hour), idle("c", -time.Hour)}}, want: 3, action: ActionHold},
				// Longest idle first, then by id.
				{at: 5 * time.Minute, load: Load{Nodes: []Node{idle("a", -time.Hour), idle("b", -2*time.Hour), idle("c", -time.Hour)}}, want: 0, action: ActionScaleIn, scaleIn: []string{"b", "a", "c"}},
			},
		},
		{
			name:  "cooldown restarts when the need comes back",
			state: State{Initialized: true, Desired: 2},
			steps: []step{
				{at: 0, load: Load{Nodes: []Node{idle("a", -time.Hour), idle("b", -time.Hour)}}, want: 2, action: ActionHold},
				{at: 3 * time.Minute, load: Load{Pending: 9, Nodes: []Node{idle("a", -time.Hour), idle("b", -time.Hour)}}, want: 2, action: ActionHold},
				{at: 6 * time.Minute, load: Load{Nodes: []Node{idle("a", -time.Hour), idle("b", -time.Hour)}}, want: 2, action: ActionHold},
				{at: 10 * time.Minute, load: Load{Nodes: []Node{idle("a", -time.Hour), idle("b", -time.Hour)}}, want: 2, action: ActionHold},
				{at: 11 * time.Minute, load: Load{Nodes: []Node{idle("a", -time.Hour), idle("b", -time.Hour)}}, want: 0, action: ActionScaleIn, scaleIn: []string{"a", "b"}},
			},
		},
		{
			name:  "slow drain removes only idle nodes, as they go idle",
			state: State{Initialized: true, Desired: 4},
			steps: []step{
				{at: 0, load: Load{Processing: 12, Nodes: []Node{busy("a", 3), busy("b", 3), busy("c", 3), busy("d", 3)}}, want: 4, action: ActionHold},
				{at: time.Minute, load: Load{Processing: 8, Nodes: []Node{busy("a", 3), busy("b", 3), busy("c", 2), idle("d", 0)}}, want: 4, action: ActionHold},
				// Cooled down (need 2 since 1m) but d has been idle only 5m-1m.
				{at: 6 * time.Minute, load: Load{Processing: 8, Nodes: []Node{busy("a", 3), busy("b", 3), busy("c", 2), idle("d", time.Minute)}}, want: 3, action: ActionScaleIn, scaleIn: []string{"d"}},
				{at: 7 * time.Minute, load: Load{Processing: 4, Nodes: []Node{busy("a", 2), busy("b", 2), idle("c", 6*time.Minute+30*time.Second)}}, want: 3, action: ActionHold},
				{at: 8 * time.Minute, load: Load{Processing: 4, Nodes: []Node{busy("a", 2), busy("b", 2), idle("c", 6*time.Minute+30*time.Second)}}, want: 2, action: ActionScaleIn, scaleIn: []string{"c"}},
				// Need 1, but both remaining nodes are busy: hold.
				{at: 9 * time.Minute, load: Load{Processing: 2, Nodes: []Node{busy("a", 1), busy("b", 1)}}, want: 2, action: ActionHold},
				// b went idle 30s ago, within the idle grace: only a goes.
				{at: 20 * time.Minute, load: Load{Nodes: []Node{idle("a", 10*time.Minute), idle("b", 19*time.Minute+30*time.Second)}}, want: 1, action: ActionScaleIn, scaleIn: []string{"a"}},
				{at: 21 * time.Minute, load: Load{Nodes: []Node{idle("b", 19*time.Minute+30*time.Second)}}, want: 0, action: ActionScaleIn, scaleIn: []string{"b"}},
			},
		},
		{
			name:  "idle node of unknown idle time is not a candidate",
			state: State{Initialized: true, Desired: 1},
			steps: []step{
				{at: 0, load: Load{Nodes: []Node{{ID: "a"}}}, want: 1, action: ActionHold},
				{at: time.Hour, load: Load{Nodes: []Node{{ID: "a"}}}, want: 1, action: ActionHold},
			},
		},
		{
			name:  "min bounds scale-in",
			cfg:   Config{Min: 2},
			state: State{Initialized: true, Desired: 4},
			steps: []step{
				{at: 0, load: Load{Nodes: []Node{idle("a", -time.Hour), idle("b", -time.Hour), idle("c", -time.Hour), idle("d", -time.Hour)}}, want: 4, action: ActionHold},
				{at: 5 * time.Minute, load: Load{Nodes: []Node{idle("a", -time.Hour), idle("b", -time.Hour), idle("c", -time.Hour), idle("d", -time.Hour)}}, want: 2, action: ActionScaleIn, scaleIn: []string{"a", "b"}},
			},
		},
		{
			name:  "lowered max applies at once",
			cfg:   Config{Max: 3},
			state: State{Initialized: true, Desired: 8},
			steps: []step{
				{at: 0, load: Load{Pending: 100, Nodes: []Node{busy("a", 6), busy("b", 6)}}, want: 3, action: ActionScaleIn},
				{at: time.Second, load: Load{Pending: 100, Nodes: []Node{busy("a", 6), busy("b", 6)}}, want: 3, action: ActionHold},
			},
		},
		{
			name:  "nodes lost: need unchanged, no scale-out, no scale-in",
			state: State{Initialized: true, Desired: 5},
			steps: []step{
				// Two of five nodes lost; their 12 jobs are back in pending.
				{at: 0, load: Load{Pending: 12, Processing: 12, Nodes: []Node{busy("a", 4), busy("b", 4), busy("c", 4)}, Lost: 2}, want: 5, action: ActionHold},
				{at: 10 * time.Minute, load: Load{Pending: 12, Processing: 12, Nodes: []Node{busy("a", 4), busy("b", 4), busy("c", 4)}, Lost: 2}, want: 5, action: ActionHold},
			},
		},
		{
			name:  "nodes lost: their empty slots go first on scale-in",
			state: State{Initialized: true, Desired: 5},
			steps: []step{
				{at: 0, load: Load{Processing: 6, Nodes: []Node{busy("a", 3), busy("b", 3), idle("c", -time.Hour)}, Lost: 2}, want: 5, action: ActionHold},
				// Need 2: give up the 2 lost slots, then the idle node c.
				{at: 5 * time.Minute, load: Load{Processing: 6, Nodes: []Node{busy("a", 3), busy("b", 3), idle("c", -time.Hour)}, Lost: 2}, want: 2, action: ActionScaleIn, scaleIn: []string{"c"}},
			},
		},
		{
			name: "producer restart starts from the live fleet",
			steps: []step{
				{at: 0, load: Load{Nodes: []Node{idle("a", -time.Hour), idle("b", -time.Hour), busy("c", 2)}, Processing: 2}, want: 3, action: ActionHold},
				{at: 5 * time.Minute, load: Load{Nodes: []Node{idle("a", -time.Hour), idle("b", -time.Hour), busy("c", 2)}, Processing: 2}, want: 1, action: ActionScaleIn, scaleIn: []string{"a", "b"}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.state
			for i, s := range tc.steps {
				var d Decision
				d, st = Compute(tc.cfg, st, s.load, t0.Add(s.at))
				if d.Desired != s.want || d.Action != s.action || !slices.Equal(d.ScaleIn, s.scaleIn) {
					t.Fatalf("step %d (t0+%v): got desired %d %s scale-in %v (%s), want %d %s scale-in %v",
						i, s.at, d.Desired, d.Action, d.ScaleIn, d.Reason, s.want, s.action, s.scaleIn)
				}
				if st.Desired != d.Desired {
					t.Fatalf("step %d: state desired %d differs from decision %d", i, st.Desired, d.Desired)
				}
			}
		})
	}
}

func TestComputeCooldownLeft(t *testing.T) {
	st := State{Initialized: true, Desired: 2}
	nodes := []Node{idle("a", -time.Hour), idle("b", -time.Hour)}
	d, st := Compute(Config{}, st, Load{Nodes: nodes}, t0)
	if d.CooldownLeft != 5*time.Minute {
		t.Fatalf("cooldown left at start = %v, want 5m", d.CooldownLeft)
	}
	d, _ = Compute(Config{}, st, Load{Nodes: nodes}, t0.Add(2*time.Minute))
	if d.CooldownLeft != 3*time.Minute {
		t.Fatalf("cooldown left after 2m = %v, want 3m", d.CooldownLeft)
	}
	if d.Work != 0 || d.Need != 0 || d.Active != 2 || d.Idle != 2 || d.Previous != 2 {
		t.Fatalf("decision counts = %+v", d)
	}
}

// TestConfigsFollowTheZeroRule: 0 is the default, Off is off where a field
// can be off, and any other negative value is an error naming the field.
func TestConfigsFollowTheZeroRule(t *testing.T) {
	if err := (Config{ScaleInCooldown: Off, IdleGrace: Off}).Validate(); err != nil {
		t.Errorf("Off cooldown and grace: %v", err)
	}
	if c := (Config{}).WithDefaults(); c.ScaleInCooldown != DefaultScaleInCooldown || c.IdleGrace != DefaultIdleGrace || c.Max != DefaultMax {
		t.Errorf("zero Config after defaults: %+v", c)
	}
	drv := &NoneDriver{}
	src := SourceFunc(func(context.Context) (Load, error) { return Load{}, nil })
	for _, tc := range []struct {
		name string
		cfg  ReconcilerConfig
		want string
	}{
		{"zero", ReconcilerConfig{}, ""},
		{"negative interval", ReconcilerConfig{Interval: -time.Second}, "Interval must not be negative"},
		{"interval cannot be off", ReconcilerConfig{Interval: Off}, "Interval must not be negative"},
		{"negative reapply", ReconcilerConfig{Reapply: -2}, "Reapply must not be negative"},
		{"negative apply timeout", ReconcilerConfig{ApplyTimeout: -time.Minute}, "ApplyTimeout must not be negative"},
	} {
		r, err := NewReconciler(tc.cfg, src, drv, nil)
		switch {
		case tc.want == "" && (err != nil || r.cfg.Interval != DefaultInterval || r.cfg.Reapply != DefaultReapply || r.cfg.ApplyTimeout != DefaultApplyTimeout):
			t.Errorf("%s: err %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		cfg  ExecConfig
		want string
	}{
		{"zero", ExecConfig{Command: []string{"true"}}, ""},
		{"negative timeout", ExecConfig{Command: []string{"true"}, Timeout: -time.Second}, "Timeout must not be negative"},
		{"negative output", ExecConfig{Command: []string{"true"}, MaxOutput: Off}, "MaxOutput must not be negative"},
	} {
		d, err := NewExec(tc.cfg, nil)
		switch {
		case tc.want == "" && (err != nil || d.cfg.Timeout != DefaultExecTimeout || d.cfg.MaxOutput != DefaultExecMaxOutput):
			t.Errorf("exec %s: err %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("exec %s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		cfg  AWSConfig
		want string
	}{
		{"zero", AWSConfig{}, ""},
		{"negative attempts", AWSConfig{MaxAttempts: -1}, "MaxAttempts must not be negative"},
		{"negative backoff", AWSConfig{MaxBackoff: -time.Second}, "MaxBackoff must not be negative"},
	} {
		c, err := tc.cfg.withDefaults()
		switch {
		case tc.want == "" && (err != nil || c.MaxAttempts != DefaultAWSMaxAttempts || c.MaxBackoff != DefaultAWSMaxBackoff):
			t.Errorf("aws %s: err %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("aws %s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name   string
		cfg    SimConfig
		want   string
		bursts int
	}{
		{"zero", SimConfig{}, "", DefaultSimConfig().Bursts},
		{"bursts off", SimConfig{Bursts: Off}, "", 0},
		{"negative bursts", SimConfig{Bursts: -3}, "Bursts must not be negative", 0},
		{"negative job time", SimConfig{JobTime: -time.Second}, "JobTime must not be negative", 0},
		{"negative rate", SimConfig{PeakRate: -1}, "PeakRate must not be negative", 0},
	} {
		c, err := tc.cfg.withDefaults()
		switch {
		case tc.want == "" && (err != nil || c.Bursts != tc.bursts):
			t.Errorf("sim %s: err %v, bursts %d", tc.name, err, c.Bursts)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("sim %s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}
