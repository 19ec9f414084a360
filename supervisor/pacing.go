package supervisor

import "time"

// Jobs started at the same moment stay in step: their pages parse and run
// their scripts at the same time, competing for the cores, then all wait on
// the network while the cores idle, and they drift apart only over many
// jobs. A process starting with six free slots showed it: its renders were
// 5–15% slower for its first seconds (bench/HISTORY.md). So the process's
// first burst is spread: each of its first Capacity starts, while two or
// more slots are free, comes at least a spacing after the one before.
// Spreading every burst (a node going from idle to busy, or claims that
// bring two jobs at once) cost CPU-bound nodes 5–13% pages/s in 3 paired
// runs, and its later bursts are left alone.

const (
	// burstRender is the render time the default spacing assumes, a light
	// page's: a process's first burst starts before any of its renders
	// has ended, so there is nothing of its own to measure yet.
	burstRender = 400 * time.Millisecond
	// maxSpacing bounds the default spacing on small nodes.
	maxSpacing = 100 * time.Millisecond
)

// pacer spreads the first burst of starts. Guarded by Supervisor.mu.
type pacer struct {
	fixed     time.Duration // Config.BurstSpacing: 0 the default, Off none
	lastStart time.Time
}

// spacing is how far apart the burst's starts are: one start per slot per
// render of a light page, at most maxSpacing.
func (p *pacer) spacing(capacity int) time.Duration {
	switch {
	case p.fixed == Off:
		return 0
	case p.fixed > 0:
		return p.fixed
	}
	return min(burstRender/time.Duration(max(capacity, 1)), maxSpacing)
}

// wait is how long a start must wait that would be the process's start
// number starts+1 and take one of free slots.
func (p *pacer) wait(starts, free, capacity int, now time.Time) time.Duration {
	if starts >= capacity || free < 2 || p.lastStart.IsZero() {
		return 0
	}
	return max(p.lastStart.Add(p.spacing(capacity)).Sub(now), 0)
}

// started records a start at now.
func (p *pacer) started(now time.Time) { p.lastStart = now }
