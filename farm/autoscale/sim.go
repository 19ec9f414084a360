package autoscale

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// SimConfig describes a simulated day: a diurnal stream of submits plus
// bursts, consumers that boot for NodeStartup before taking jobs, and a
// per-slot job time that sets each node's throughput. Zero fields take the
// defaults in DefaultSimConfig(); Bursts alone can be Off; any other
// negative value is an error naming the field.
type SimConfig struct {
	// Seed makes the workload reproducible: the same config gives the same
	// report.
	Seed uint64 `json:"seed"`
	// Duration of the submit window (default 24h); the simulation then runs
	// on until the last job has started.
	Duration time.Duration `json:"duration_ns"`
	// Interval between scaling computations (default 15s).
	Interval time.Duration `json:"interval_ns"`
	// Scaling is the policy under test (default: Max 40, other defaults).
	Scaling Config `json:"scaling"`
	// NodeStartup is the delay from launch to the node's first job
	// (default 3m: instance boot, consumer start, first Chrome).
	NodeStartup time.Duration `json:"node_startup_ns"`
	// JobTime is the mean time a job holds a slot (default 20s); each job
	// takes uniformly 0.5–1.5× of it. A node's throughput is
	// NodeCapacity/JobTime.
	JobTime time.Duration `json:"job_time_ns"`
	// BaseRate and PeakRate are submits per minute at the quietest (03:00)
	// and busiest (15:00) time of day (defaults 10 and 120).
	BaseRate float64 `json:"base_rate_per_min"`
	PeakRate float64 `json:"peak_rate_per_min"`
	// Bursts is the number of batch submits during the day (0: the default,
	// 12; Off: none), each of about BurstJobs jobs (0.5–1.5×, default 1500).
	Bursts    int `json:"bursts"`
	BurstJobs int `json:"burst_jobs"`
	// Assign is the producer's assignment policy (default
	// jobqueue.AssignPack, what the producer uses with an autoscale driver):
	// packing lets nodes go idle, which is what scale-in needs.
	Assign jobqueue.AssignPolicy `json:"assign"`
}

// DefaultSimConfig returns the day Simulate runs for zero fields.
func DefaultSimConfig() SimConfig {
	return SimConfig{
		Seed:        1,
		Duration:    24 * time.Hour,
		Interval:    15 * time.Second,
		Scaling:     Config{Max: 40},
		NodeStartup: 3 * time.Minute,
		JobTime:     20 * time.Second,
		BaseRate:    10,
		PeakRate:    120,
		Bursts:      12,
		BurstJobs:   1500,
		Assign:      jobqueue.AssignPack,
	}
}

func (c SimConfig) withDefaults() (SimConfig, error) {
	d := DefaultSimConfig()
	if c.Seed == 0 {
		c.Seed = d.Seed
	}
	if c.Scaling == (Config{}) {
		c.Scaling = d.Scaling
	}
	c.Scaling = c.Scaling.WithDefaults()
	var errs []error
	for _, r := range []struct {
		name string
		v    *float64
		def  float64
	}{{"BaseRate", &c.BaseRate, d.BaseRate}, {"PeakRate", &c.PeakRate, d.PeakRate}} {
		switch {
		case *r.v == 0:
			*r.v = r.def
		case *r.v < 0:
			errs = append(errs, fmt.Errorf("%s must not be negative, got %v", r.name, *r.v))
		}
	}
	errs = append(errs,
		cfgrule.Resolve("Duration", &c.Duration, d.Duration, false),
		cfgrule.Resolve("Interval", &c.Interval, d.Interval, false),
		cfgrule.Resolve("NodeStartup", &c.NodeStartup, d.NodeStartup, false),
		cfgrule.Resolve("JobTime", &c.JobTime, d.JobTime, false),
		cfgrule.Resolve("Bursts", &c.Bursts, d.Bursts, true),
		cfgrule.Resolve("BurstJobs", &c.BurstJobs, d.BurstJobs, false))
	if c.Bursts == Off {
		c.Bursts = 0
	}
	if c.Assign == "" {
		c.Assign = d.Assign
	}
	return c, errors.Join(errs...)
}

// SimRun is one fleet's outcome in a simulation.
type SimRun struct {
	NodeHours float64 `json:"node_hours"`
	PeakNodes int     `json:"peak_nodes"`
	// Waits are from submit to start, in seconds.
	MaxWaitS  float64 `json:"max_wait_s"`
	P95WaitS  float64 `json:"p95_wait_s"`
	MeanWaitS float64 `json:"mean_wait_s"`
	ScaleOuts int     `json:"scale_outs"`
	ScaleIns  int     `json:"scale_ins"`
	// Launched counts node launches (the fixed fleet's initial ones too).
	Launched int `json:"launched"`
}

// SimHour summarises one hour of the submit window of the autoscaled run
// (node counts include booting nodes; waits are of jobs submitted that hour).
type SimHour struct {
	Hour      int     `json:"hour"`
	Submitted int     `json:"submitted"`
	NodeHours float64 `json:"node_hours"`
	MinNodes  int     `json:"min_nodes"`
	MaxNodes  int     `json:"max_nodes"`
	MaxWaitS  float64 `json:"max_wait_s"`
}

// SimReport compares the autoscaled fleet with a fixed fleet sized for the
// autoscaled run's peak, over the same workload and the same span.
type SimReport struct {
	Config SimConfig `json:"config"`
	Jobs   int       `json:"jobs"`
	// SpanS is the simulated time in seconds: the submit window plus the
	// time the slower fleet needed to start the last job.
	SpanS      float64 `json:"span_s"`
	Autoscaled SimRun  `json:"autoscaled"`
	Fixed      SimRun  `json:"fixed"`
	FixedNodes int     `json:"fixed_nodes"`
	// Saving is 1 − autoscaled node-hours / fixed node-hours.
	Saving float64   `json:"saving"`
	Hours  []SimHour `json:"hours"`
}

// Simulate replays a seeded day of submits twice through the real
// Reconciler and Compute — once autoscaled from Scaling.Min warm nodes,
// once with a fixed fleet of the autoscaled run's peak size, warm from the
// start — and reports node-hours and job waits. The simulated Auto Scaling
// group launches nodes that take NodeStartup to boot and, on scale-in,
// terminates booting nodes first and then idle ones, never a busy node
// (scale-in protection). It is deterministic and takes well under a
// second for a day. It fails only for an invalid config.
func Simulate(cfg SimConfig) (SimReport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return SimReport{}, fmt.Errorf("autoscale: simulation: %w", err)
	}
	jobs := simWorkload(cfg)
	auto, err := newSimFarm(cfg, cfg.Scaling, cfg.Scaling.Min, jobs)
	if err != nil {
		return SimReport{}, err
	}
	auto.run()
	peak := max(auto.result.PeakNodes, 1)
	fixedPolicy := cfg.Scaling
	fixedPolicy.Min, fixedPolicy.Max = peak, peak
	fixed, err := newSimFarm(cfg, fixedPolicy, peak, jobs)
	if err != nil {
		return SimReport{}, err
	}
	fixed.run()

	span := max(auto.end, fixed.end)
	auto.finish(span)
	fixed.finish(span)
	rep := SimReport{
		Config:     cfg,
		Jobs:       len(jobs),
		SpanS:      float64(span),
		Autoscaled: auto.result,
		Fixed:      fixed.result,
		FixedNodes: peak,
		Hours:      auto.hours,
	}
	if rep.Fixed.NodeHours > 0 {
		rep.Saving = 1 - rep.Autoscaled.NodeHours/rep.Fixed.NodeHours
	}
	return rep, nil
}

// simJob is one submit: time and slot time, in whole seconds.
type simJob struct {
	submit, work int64
}

// simWorkload draws the day's submits, sorted by time.
func simWorkload(cfg SimConfig) []simJob {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6272_6f77_7365_72)) // "browser"
	day := int64(cfg.Duration / time.Second)
	mean := cfg.JobTime.Seconds()
	work := func() int64 { return max(1, int64(math.Round(mean*(0.5+rng.Float64())))) }
	var jobs []simJob
	for t := range day {
		// Diurnal rate: quietest at 03:00, busiest at 15:00.
		phase := 2 * math.Pi * (float64(t%86400)/86400 - 3.0/24)
		perMin := cfg.BaseRate + (cfg.PeakRate-cfg.BaseRate)*(1-math.Cos(phase))/2
		for range poisson(rng, perMin/60) {
			jobs = append(jobs, simJob{submit: t, work: work()})
		}
	}
	for range cfg.Bursts {
		at := rng.Int64N(day)
		n := int(float64(cfg.BurstJobs) * (0.5 + rng.Float64()))
		for range n {
			jobs = append(jobs, simJob{submit: at, work: work()})
		}
	}
	slices.SortStableFunc(jobs, func(a, b simJob) int { return int(a.submit - b.submit) })
	return jobs
}

// poisson draws from a Poisson distribution with a small mean (Knuth).
func poisson(rng *rand.Rand, mean float64) int {
	limit, p, k := math.Exp(-mean), 1.0, 0
	for {
		p *= rng.Float64()
		if p <= limit {
			return k
		}
		k++
	}
}

type simNode struct {
	id         string
	launched   int64
	ready      int64
	terminated int64 // -1 while running; terminated nodes leave simFarm.nodes
	slots      []int64
	idleSince  int64
}

func (n *simNode) busy() int { return len(n.slots) }

// simFarm is one fleet under simulation: jobs, nodes, the simulated Auto
// Scaling group (desired) and the real Reconciler.
type simFarm struct {
	cfg     SimConfig
	jobs    []simJob
	next    int        // next job to submit
	queue   []int32    // pending job indexes, FIFO
	nodes   []*simNode // running (booting or ready) nodes
	billed  int64      // node-seconds of terminated nodes
	desired int
	now     int64
	end     int64
	rec     *Reconciler
	waits   []float64
	started int
	result  SimRun
	hours   []SimHour
	epoch   time.Time
	// slots and byID are assign's scratch space: the ready nodes with a
	// free slot, in launch (= id) order, and their simNodes.
	slots []jobqueue.NodeSlots
	byID  []*simNode
}

func newSimFarm(cfg SimConfig, policy Config, warm int, jobs []simJob) (*simFarm, error) {
	f := &simFarm{cfg: cfg, jobs: jobs, desired: warm, epoch: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	// Warm nodes are up before the day starts.
	for range warm {
		f.launch(0)
	}
	rec, err := NewReconciler(ReconcilerConfig{
		Scaling:  policy,
		Interval: cfg.Interval,
		Now:      func() time.Time { return f.epoch.Add(time.Duration(f.now) * time.Second) },
	}, SourceFunc(f.load), simDriver{f}, zap.NewNop())
	if err != nil {
		return nil, fmt.Errorf("autoscale: simulate: %w", err)
	}
	f.rec = rec
	f.hours = make([]SimHour, int((cfg.Duration+time.Hour-1)/time.Hour))
	for i := range f.hours {
		f.hours[i].Hour = i
		f.hours[i].MinNodes = -1
	}
	return f, nil
}

type simDriver struct{ f *simFarm }

func (simDriver) Name() string { return "sim" }

func (d simDriver) SetDesired(_ context.Context, n int) error {
	d.f.desired = n
	return nil
}

func (f *simFarm) load(context.Context) (Load, error) {
	l := Load{Pending: len(f.queue)}
	for _, n := range f.nodes {
		if n.ready > f.now {
			continue
		}
		l.Processing += n.busy()
		node := Node{ID: n.id, Busy: n.busy()}
		if n.busy() == 0 {
			node.IdleSince = f.epoch.Add(time.Duration(n.idleSince) * time.Second)
		}
		l.Nodes = append(l.Nodes, node)
	}
	return l, nil
}

// launch starts a node at f.now that takes its first job at ready.
func (f *simFarm) launch(ready int64) {
	at := f.now
	f.nodes = append(f.nodes, &simNode{
		id: fmt.Sprintf("n%06d", f.result.Launched), launched: at, ready: ready, terminated: -1, idleSince: ready,
	})
	f.result.Launched++
}

// run advances second by second until the submit window is over and every
// job has started.
func (f *simFarm) run() {
	ctx := context.Background()
	day := int64(f.cfg.Duration / time.Second)
	interval := max(int64(f.cfg.Interval/time.Second), 1)
	for f.now = 0; f.now < day || f.next < len(f.jobs) || len(f.queue) > 0; f.now++ {
		f.complete()
		for f.next < len(f.jobs) && f.jobs[f.next].submit <= f.now {
			f.queue = append(f.queue, int32(f.next))
			if h := int(f.now / 3600); h < len(f.hours) {
				f.hours[h].Submitted++
			}
			f.next++
		}
		f.assign()
		if f.now%interval == 0 {
			d, _ := f.rec.Tick(ctx)
			switch d.Action {
			case ActionScaleOut:
				f.result.ScaleOuts++
			case ActionScaleIn:
				f.result.ScaleIns++
			}
		}
		f.orchestrate()
		f.account()
	}
	f.end = f.now
}

func (f *simFarm) complete() {
	for _, n := range f.nodes {
		if n.busy() == 0 {
			continue
		}
		n.slots = slices.DeleteFunc(n.slots, func(end int64) bool { return end <= f.now })
		if n.busy() == 0 {
			n.idleSince = f.now
		}
	}
}

// assign starts pending jobs on ready nodes with a free slot, like the
// producer's round: FIFO, placed by jobqueue.Distribute under the policy —
// the producer's own placement code. Node ids are launch numbers, so ties
// go to the older node as they would to the smaller id in a real fleet
// named in order.
func (f *simFarm) assign() {
	if len(f.queue) == 0 {
		return
	}
	capacity := f.cfg.Scaling.NodeCapacity
	f.slots = f.slots[:0]
	f.byID = f.byID[:0]
	for _, n := range f.nodes {
		if n.ready > f.now || n.busy() >= capacity {
			continue
		}
		f.slots = append(f.slots, jobqueue.NodeSlots{ID: n.id, Capacity: capacity, Held: n.busy()})
		f.byID = append(f.byID, n)
	}
	if len(f.slots) == 0 {
		return
	}
	for _, id := range jobqueue.Distribute(f.cfg.Assign, f.slots, len(f.queue)) {
		i, _ := slices.BinarySearchFunc(f.slots, id, func(s jobqueue.NodeSlots, id string) int { return strings.Compare(s.ID, id) })
		best := f.byID[i]
		j := f.jobs[f.queue[0]]
		f.queue = f.queue[1:]
		best.slots = append(best.slots, f.now+j.work)
		wait := float64(f.now - j.submit)
		f.waits = append(f.waits, wait)
		if h := int(j.submit / 3600); h < len(f.hours) {
			f.hours[h].MaxWaitS = max(f.hours[h].MaxWaitS, wait)
		}
	}
}

// orchestrate is the Auto Scaling group: launch up to desired; above it,
// terminate booting nodes (newest first), then idle ready ones (oldest
// first). Busy nodes are protected from scale-in, so an excess of busy
// nodes waits until they go idle.
func (f *simFarm) orchestrate() {
	for len(f.nodes) < f.desired {
		f.launch(f.now + int64(f.cfg.NodeStartup/time.Second))
	}
	excess := len(f.nodes) - f.desired
	for i := len(f.nodes) - 1; i >= 0 && excess > 0; i-- {
		if n := f.nodes[i]; n.ready > f.now {
			n.terminated = f.now
			excess--
		}
	}
	for _, n := range f.nodes {
		if excess == 0 {
			break
		}
		if n.terminated < 0 && n.ready <= f.now && n.busy() == 0 {
			n.terminated = f.now
			excess--
		}
	}
	f.nodes = slices.DeleteFunc(f.nodes, func(n *simNode) bool {
		if n.terminated < 0 {
			return false
		}
		f.billed += n.terminated - n.launched
		return true
	})
}

// account adds this second to the node-hours and the hour's peak.
func (f *simFarm) account() {
	count := len(f.nodes)
	f.result.PeakNodes = max(f.result.PeakNodes, count)
	if h := int(f.now / 3600); h < len(f.hours) {
		f.hours[h].NodeHours += float64(count) / 3600
		f.hours[h].MaxNodes = max(f.hours[h].MaxNodes, count)
		if f.hours[h].MinNodes < 0 || count < f.hours[h].MinNodes {
			f.hours[h].MinNodes = count
		}
	}
}

// finish closes the books at span seconds: running nodes are billed until
// then, and wait statistics are computed.
func (f *simFarm) finish(span int64) {
	seconds := f.billed
	for _, n := range f.nodes {
		seconds += span - n.launched
	}
	f.result.NodeHours = float64(seconds) / 3600
	if len(f.waits) == 0 {
		return
	}
	sorted := slices.Clone(f.waits)
	slices.Sort(sorted)
	var sum float64
	for _, w := range sorted {
		sum += w
	}
	f.result.MaxWaitS = sorted[len(sorted)-1]
	f.result.P95WaitS = sorted[int(math.Ceil(0.95*float64(len(sorted))))-1]
	f.result.MeanWaitS = sum / float64(len(sorted))
}
