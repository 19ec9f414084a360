package main

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/browserfarm/browserfarm/internal/procstat"
	"github.com/browserfarm/browserfarm/supervisor"
)

// soakResult is the soak mode's JSON line. The fields come first;
// the rest say how they were obtained.
type soakResult struct {
	Bench             string  `json:"bench"`
	PSSMaxMBRecycle   float64 `json:"pss_max_mb_recycle"`   // largest single Chrome tree, recycling on
	PSSFirstCycleMB   float64 `json:"pss_first_cycle_mb"`   // the first generation's largest tree (each lane's first Chrome), recycling on
	PSSMaxMBNoRecycle float64 `json:"pss_max_mb_norecycle"` // the largest tree, recycling off
	RatioRecycle      float64 `json:"ratio_recycle"`        // pss_max_mb_recycle / pss_first_cycle_mb
	// PSSFirstChromeMB is the first Chrome's own largest tree, the first
	// cycle's figure before session 45: with a Chrome per session the
	// largest of 24 trees against one of the first six, which the
	// spread between trees alone puts 1.04–1.38× apart run by run.
	PSSFirstChromeMB      float64 `json:"pss_first_chrome_mb"`
	PSSMaxTotalMBRecycle  float64 `json:"pss_max_total_mb_recycle"`
	PSSFirstCycleMBNoRecy float64 `json:"pss_first_cycle_mb_norecycle"` // the largest tree over the node's first RecycleEvery jobs
	PSSEndMBNoRecycle     float64 `json:"pss_end_mb_norecycle"`         // over the node's last RecycleEvery jobs
	Jobs                  int     `json:"jobs"`
	RecycleEvery          int     `json:"recycle_every"`
	Isolation             string  `json:"isolation"` // the jobs' isolation
	ChromeStartsRecycle   int     `json:"chrome_starts_recycle"`
	SampleMS              int64   `json:"sample_ms"`
	Samples               int     `json:"samples"`
	// Curves are the largest tree's PSS (MB) per RecycleEvery jobs finished.
	CurveRecycle   []float64 `json:"curve_recycle_mb"`
	CurveNoRecycle []float64 `json:"curve_norecycle_mb"`
}

// pssTrace records Chrome-tree PSS samples during one run.
type pssTrace struct {
	bucket int // jobs per curve point

	lanes int // the node's Chromes at once: its first generation's size

	mu        sync.Mutex
	firstMain int
	firstMax  uint64            // the first Chrome's largest sample
	firstGen  map[int]bool      // the first lanes Chromes seen (main pids)
	genMax    uint64            // their largest sample
	treeMax   uint64            // the largest single-tree sample
	totalMax  uint64            // the largest sum over the live trees
	curve     map[int]uint64    // bucket → largest tree in it
	seen      map[int]time.Time // Chrome main pid → first seen
	samples   int
}

func newPSSTrace(bucket, lanes int) *pssTrace {
	return &pssTrace{bucket: bucket, lanes: lanes, curve: map[int]uint64{}, seen: map[int]time.Time{}, firstGen: map[int]bool{}}
}

func (p *pssTrace) sample(st supervisor.Stats, profiles string) {
	trees := procstat.ChromeTrees(profiles)
	sizes := make(map[int]uint64, len(trees))
	for main, pids := range trees {
		sizes[main] = procstat.TreePSS(pids)
	}
	p.observe(sizes, st.JobsSinceProcessStart)
}

// observe records one sample: each live Chrome tree's PSS by its main pid,
// after jobs finished.
func (p *pssTrace) observe(sizes map[int]uint64, jobs int) {
	var total uint64
	for _, s := range sizes {
		total += s
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.samples++
	now := time.Now()
	for main := range sizes {
		if _, ok := p.seen[main]; !ok {
			p.seen[main] = now
			if p.firstMain == 0 {
				p.firstMain = main
			}
			// A lane's standby boots only near its Chrome's recycle point,
			// after the node's first Chromes are all up.
			if len(p.firstGen) < p.lanes {
				p.firstGen[main] = true
			}
		}
	}
	var largest uint64
	for main, s := range sizes {
		largest = max(largest, s)
		if main == p.firstMain {
			p.firstMax = max(p.firstMax, s)
		}
		if p.firstGen[main] {
			p.genMax = max(p.genMax, s)
		}
	}
	p.treeMax = max(p.treeMax, largest)
	p.totalMax = max(p.totalMax, total)
	b := jobs / p.bucket
	p.curve[b] = max(p.curve[b], largest)
}

func (p *pssTrace) firstGenSize() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.firstGen)
}

func (p *pssTrace) curveMB(jobs int) []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := (jobs + p.bucket - 1) / p.bucket
	out := make([]float64, 0, n)
	for b := range n {
		out = append(out, mb(p.curve[b]))
	}
	return out
}

func mb(b uint64) float64 { return math.Round(float64(b)/(1<<20)*10) / 10 }

// soak renders jobs /leak/ pages twice, recycling Chrome every recycleEvery
// jobs and never, sampling every Chrome tree's PSS from /proc.
func soak(ctx context.Context, e *env, jobs, recycleEvery int, isolation string, perChrome int) (soakResult, error) {
	const every = 250 * time.Millisecond
	paths := make([]string, jobs)
	for i := range paths {
		paths[i] = "/leak/" + itoa(i)
	}
	res := soakResult{Bench: "soak", Jobs: jobs, RecycleEvery: recycleEvery, SampleMS: every.Milliseconds(), Isolation: isolation}

	on := newPSSTrace(recycleEvery, lanes(perChrome))
	e.progress("soak: %d /leak/ jobs, recycling every %d", jobs, recycleEvery)
	r, err := e.run(ctx, nodeRun{name: "soak-recycle", lead: -1, perChrome: perChrome, paths: paths, recycleEvery: recycleEvery, isolation: isolation, sampleEvery: every, sample: on.sample})
	if err != nil {
		return res, err
	}
	res.ChromeStartsRecycle = r.stats.ChromeStarts
	if r.stats.BootFailures > 0 || on.firstGenSize() != on.lanes {
		// The first generation is told by order of appearance: a boot that
		// failed takes a place in it (its lane's retry is left out), and
		// fewer trees than lanes means the node never ran them all.
		e.progress("soak: warning: the first cycle may be miscounted (%d boots failed, %d of %d first Chromes seen)",
			r.stats.BootFailures, on.firstGenSize(), on.lanes)
	}
	e.progress("soak: recycling on: largest tree %.0f MB, the first %d Chromes' largest %.0f MB, the first Chrome's %.0f MB (%d Chromes, %.1f s)",
		mb(on.treeMax), on.lanes, mb(on.genMax), mb(on.firstMax), r.stats.ChromeStarts, r.wall.Seconds())

	off := newPSSTrace(recycleEvery, lanes(perChrome))
	e.progress("soak: %d /leak/ jobs, never recycling", jobs)
	r, err = e.run(ctx, nodeRun{name: "soak-norecycle", lead: -1, perChrome: perChrome, paths: paths, recycleEvery: 0, isolation: isolation, sampleEvery: every, sample: off.sample})
	if err != nil {
		return res, err
	}
	e.progress("soak: recycling off: largest %.0f MB (%.1f s)", mb(off.treeMax), r.wall.Seconds())

	res.PSSMaxMBRecycle = mb(on.treeMax)
	res.PSSFirstCycleMB = mb(on.genMax)
	res.PSSFirstChromeMB = mb(on.firstMax)
	res.PSSMaxTotalMBRecycle = mb(on.totalMax)
	res.PSSMaxMBNoRecycle = mb(off.treeMax)
	if res.PSSFirstCycleMB > 0 {
		res.RatioRecycle = math.Round(res.PSSMaxMBRecycle/res.PSSFirstCycleMB*100) / 100
	}
	res.CurveRecycle = on.curveMB(jobs)
	res.CurveNoRecycle = off.curveMB(jobs)
	if len(res.CurveNoRecycle) > 0 {
		res.PSSFirstCycleMBNoRecy = res.CurveNoRecycle[0]
		res.PSSEndMBNoRecycle = res.CurveNoRecycle[len(res.CurveNoRecycle)-1]
	}
	res.Samples = on.samples + off.samples
	return res, nil
}

// lanes is how many Chromes the bench's node runs at once with perChrome
// sessions to a Chrome (0: the supervisor's default).
func lanes(perChrome int) int {
	d := supervisor.DefaultConfig()
	if perChrome <= 0 {
		perChrome = d.SessionsPerChrome
	}
	return len(supervisor.Lanes(d.Capacity, perChrome))
}
