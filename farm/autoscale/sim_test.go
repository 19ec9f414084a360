package autoscale

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
)

func TestSimulateDay(t *testing.T) {
	rep, err := Simulate(SimConfig{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(rep.Autoscaled, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("jobs %d over %.1fh; autoscaled %s", rep.Jobs, rep.SpanS/3600, b)
	t.Logf("fixed fleet of %d: %.1f node-hours, max wait %.0fs, p95 %.0fs; saving %.0f%%",
		rep.FixedNodes, rep.Fixed.NodeHours, rep.Fixed.MaxWaitS, rep.Fixed.P95WaitS, 100*rep.Saving)
	for _, h := range rep.Hours {
		t.Logf("hour %02d: submitted %5d, node-hours %5.1f, nodes %2d–%2d, max wait %4.0fs",
			h.Hour, h.Submitted, h.NodeHours, h.MinNodes, h.MaxNodes, h.MaxWaitS)
	}

	cfg := rep.Config
	day := cfg.Duration.Hours()
	// Both fleets are billed over the same span, the fixed one fully.
	if want := float64(rep.FixedNodes) * rep.SpanS / 3600; !approx(rep.Fixed.NodeHours, want) {
		t.Errorf("fixed fleet node-hours %.2f, want %d nodes × span = %.2f", rep.Fixed.NodeHours, rep.FixedNodes, want)
	}
	if rep.FixedNodes != rep.Autoscaled.PeakNodes || rep.FixedNodes > cfg.Scaling.Max {
		t.Errorf("fixed fleet %d nodes, autoscaled peak %d, max %d", rep.FixedNodes, rep.Autoscaled.PeakNodes, cfg.Scaling.Max)
	}
	// A diurnal day with a 12× peak/trough ratio must cost clearly less
	// than running the peak fleet all day.
	if rep.Saving < 0.3 {
		t.Errorf("autoscaled %.1f node-hours vs fixed %.1f: saving %.0f%%, want at least 30%%",
			rep.Autoscaled.NodeHours, rep.Fixed.NodeHours, 100*rep.Saving)
	}
	if rep.Autoscaled.NodeHours < 1 || rep.Autoscaled.NodeHours > float64(cfg.Scaling.Max)*day {
		t.Errorf("autoscaled node-hours %.1f out of range", rep.Autoscaled.NodeHours)
	}
	if rep.Autoscaled.ScaleOuts == 0 || rep.Autoscaled.ScaleIns == 0 {
		t.Errorf("autoscaled run never scaled both ways: %+v", rep.Autoscaled)
	}
	if rep.Fixed.ScaleOuts != 0 || rep.Fixed.ScaleIns != 0 || rep.Fixed.Launched != rep.FixedNodes {
		t.Errorf("fixed fleet scaled: %+v", rep.Fixed)
	}
	// The fixed fleet is always warm, so nobody waits longer for it; the
	// autoscaled one pays node boots on bursts.
	if rep.Fixed.MaxWaitS > rep.Autoscaled.MaxWaitS {
		t.Errorf("fixed fleet max wait %.0fs above autoscaled %.0fs", rep.Fixed.MaxWaitS, rep.Autoscaled.MaxWaitS)
	}
	if rep.Autoscaled.MaxWaitS < cfg.NodeStartup.Seconds() {
		t.Errorf("autoscaled max wait %.0fs is below one node boot (%v) although bursts arrive at an idle fleet",
			rep.Autoscaled.MaxWaitS, cfg.NodeStartup)
	}
	submitted := 0
	for _, h := range rep.Hours {
		submitted += h.Submitted
	}
	if submitted != rep.Jobs {
		t.Errorf("hours account for %d submits, want %d", submitted, rep.Jobs)
	}
}

func TestSimulateDeterministic(t *testing.T) {
	short := SimConfig{Duration: 4 * time.Hour, Bursts: 3}
	a, err := Simulate(short)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Simulate(short)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different reports:\n%+v\n%+v", a, b)
	}
	short.Seed = 2
	c, err := Simulate(short)
	if err != nil {
		t.Fatal(err)
	}
	if c.Jobs == a.Jobs && c.Autoscaled == a.Autoscaled {
		t.Fatalf("seeds 1 and 2 gave the same day: %+v", a.Autoscaled)
	}
}

func approx(a, b float64) bool { d := a - b; return d < 1e-6 && d > -1e-6 }

func lowest(hours []SimHour) int {
	n := hours[0].MinNodes
	for _, h := range hours {
		n = min(n, h.MinNodes)
	}
	return n
}

// TestSimulatePolicies checks the simulation responds to the policy the
// way the policy says it should, on a short day.
func TestSimulatePolicies(t *testing.T) {
	base := SimConfig{Duration: 6 * time.Hour, Bursts: 4}
	tests := []struct {
		name  string
		tweak func(*SimConfig)
		check func(t *testing.T, base, got SimReport)
	}{
		{
			name:  "min keeps a warm floor",
			tweak: func(c *SimConfig) { c.Scaling.Min = 5 },
			check: func(t *testing.T, base, got SimReport) {
				if lowest(base.Hours) >= 5 {
					t.Fatalf("reference run never went below 5 nodes: the check would prove nothing")
				}
				if n := lowest(got.Hours); n < 5 {
					t.Errorf("min 5 ran as few as %d nodes", n)
				}
			},
		},
		{
			name:  "lower max bounds the peak and lengthens waits",
			tweak: func(c *SimConfig) { c.Scaling.Max = 8 },
			check: func(t *testing.T, base, got SimReport) {
				if got.Autoscaled.PeakNodes > 8 {
					t.Errorf("peak %d nodes above max 8", got.Autoscaled.PeakNodes)
				}
				if got.Autoscaled.MaxWaitS <= base.Autoscaled.MaxWaitS {
					t.Errorf("max 8 waited %.0fs, max 40 waited %.0fs", got.Autoscaled.MaxWaitS, base.Autoscaled.MaxWaitS)
				}
			},
		},
		{
			name:  "longer cooldown costs node-hours",
			tweak: func(c *SimConfig) { c.Scaling.ScaleInCooldown = 30 * time.Minute },
			check: func(t *testing.T, base, got SimReport) {
				if got.Autoscaled.NodeHours <= base.Autoscaled.NodeHours {
					t.Errorf("30m cooldown used %.1f node-hours, 5m used %.1f", got.Autoscaled.NodeHours, base.Autoscaled.NodeHours)
				}
			},
		},
	}
	ref, err := Simulate(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.Scaling = DefaultSimConfig().Scaling
			tc.tweak(&cfg)
			got, err := Simulate(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got.Jobs != ref.Jobs {
				t.Fatalf("policy changed the workload: %d jobs vs %d", got.Jobs, ref.Jobs)
			}
			tc.check(t, ref, got)
		})
	}
	if _, err := Simulate(SimConfig{Scaling: Config{Min: 5, Max: 2}}); err == nil {
		t.Error("Simulate accepted max below min")
	}
}

// BenchmarkSimulateDay reports the autoscaler's cost and latency on the
// default simulated day: node-hours used versus a fixed fleet sized for the
// peak, and the longest time any job waited, packing jobs onto busy nodes
// (what the producer should do) and spreading them.
func BenchmarkSimulateDay(b *testing.B) {
	for _, assign := range jobqueue.AssignPolicies {
		name := string(assign)
		b.Run(name, func(b *testing.B) {
			var rep SimReport
			for b.Loop() {
				var err error
				rep, err = Simulate(SimConfig{Assign: assign})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(rep.Autoscaled.NodeHours, "node-hours")
			b.ReportMetric(rep.Fixed.NodeHours, "fixed-node-hours")
			b.ReportMetric(float64(rep.FixedNodes), "fixed-nodes")
			b.ReportMetric(100*rep.Saving, "saving-%")
			b.ReportMetric(rep.Autoscaled.MaxWaitS, "max-wait-s")
			b.ReportMetric(rep.Autoscaled.P95WaitS, "p95-wait-s")
			b.ReportMetric(rep.Fixed.MaxWaitS, "fixed-max-wait-s")
			b.ReportMetric(float64(rep.Jobs), "jobs")
		})
	}
}
