package supervisor

import (
	"context"
	"time"
)

// PSSRange is the Chrome PSS, summed over every live Chrome tree, seen
// between two calls of Supervisor.TakePSSRange. A node that recycles Chrome
// every few seconds rises and falls several times between two heartbeats;
// one value per heartbeat would show a flat or random line, the range shows
// each recycle: Max holds the peak sampled just before a kill, Min the
// trough right after it.
type PSSRange struct {
	Min, Max uint64
	Last     uint64 // the latest sample
	Samples  int    // how many values the range holds; 0: none since the last take
}

// pssAccumulator gathers a PSSRange. Guarded by Supervisor.mu.
type pssAccumulator struct {
	r PSSRange
	// killSampled says that a kill since the last take sampled its peak and
	// trough. One pair per range is enough: a CPU-bound node recycles
	// about once a second, its sawtooth's teeth are alike, and sampling
	// the trees at every kill cost 54 ms of CPU per recycle (the kernel
	// walking page tables for smaps_rollup), 2.7 ms per page at 20 jobs a
	// Chrome: 3% of a page's CPU for the same band.
	killSampled bool
}

func (a *pssAccumulator) observe(v uint64) {
	if a.r.Samples == 0 || v < a.r.Min {
		a.r.Min = v
	}
	if a.r.Samples == 0 || v > a.r.Max {
		a.r.Max = v
	}
	a.r.Last = v
	a.r.Samples++
}

// take returns the range so far and starts a new one. With nothing observed
// since the previous take, the range is the latest value alone (Samples 0),
// so a reader always gets a usable Min and Max.
func (a *pssAccumulator) take() PSSRange {
	r := a.r
	if r.Samples == 0 {
		r.Min, r.Max = r.Last, r.Last
	}
	a.r = PSSRange{Last: r.Last}
	a.killSampled = false
	return r
}

// sampleKill reports whether a kill should sample its peak and trough: the
// first kill of each range does, later ones of the same range do not.
func (a *pssAccumulator) sampleKill() bool {
	if a.killSampled {
		return false
	}
	a.killSampled = true
	return true
}

// TakePSSRange returns the range of the Chrome PSS sampled since the previous
// call (or since the start) and starts a new one. The consumer calls it once
// per heartbeat. Samples arrive every Config.MemoryInterval per Chrome, and
// at the first kill of each range: the tree's PSS right before it and the
// sum of the remaining Chromes right after it.
func (s *Supervisor) TakePSSRange() PSSRange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pss.take()
}

// livePSSLocked sums the latest PSS of every live Chrome.
func (s *Supervisor) livePSSLocked() uint64 {
	var sum uint64
	for _, c := range s.liveLocked() {
		sum += c.pss
	}
	return sum
}

// samplePeak records the peak of the sawtooth: the tree of c, sampled just
// before its kill. c is out of the live list already, so it is added back.
func (a *actor) samplePeak(c *chrome, pss uint64) {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	c.pss = pss
	s.pss.observe(s.livePSSLocked() + pss)
}

// sampleTrough samples every live Chrome right after a kill: the trough of
// the sawtooth, which the replacement's periodic sample may not have reached
// yet (a replacement never sampled would count as 0). /proc reads only, one
// tree per live Chrome, once per kill.
func (a *actor) sampleTrough() {
	s := a.s
	s.mu.Lock()
	live := s.liveLocked()
	s.mu.Unlock()
	pss := make([]uint64, len(live))
	ok := make([]bool, len(live))
	for i, c := range live {
		mctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
		if m, err := c.proc.Memory(mctx); err == nil {
			pss[i], ok[i] = m.PSSBytes, true
		}
		cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range live {
		if ok[i] && c.state != stateDead {
			c.pss = pss[i]
		}
	}
	s.pss.observe(s.livePSSLocked())
}
