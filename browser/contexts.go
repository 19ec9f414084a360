package browser

import (
	"errors"
	"sync"
)

// ReplaceReason is why a session gave up its wiped browser context for a
// brand-new one after a job of IsolationWipe.
type ReplaceReason int

const (
	// ReplacedAuth: the page answered an HTTP auth or proxy auth
	// challenge, or sent credentials: Chrome keeps them in a cache of the
	// context that no CDP call clears.
	ReplacedAuth ReplaceReason = iota
	// ReplacedWorker: a worker started in the context: a service worker
	// or shared worker outlives the page; any worker, dedicated ones too,
	// fetches past the tab's settings and events.
	ReplacedWorker
	// ReplacedPopup: the page opened a window, which writes to the context
	// until it is closed.
	ReplacedPopup
	// ReplacedFrame: a frame stored its data where the wipe cannot reach
	// it (moved to another renderer, or under a frame of another site).
	ReplacedFrame
	// ReplacedInFlight: fetches or beacons were still in flight after the
	// job (a long poll, a stream, a slow keepalive fetch), whose answers
	// could set cookies after the wipe.
	ReplacedInFlight
	// ReplacedBroken: the tab was unusable after the job (its renderer
	// crashed or hung, or the job timed out in it).
	ReplacedBroken
	// ReplacedOriginLeft: the page navigated its main frame to another
	// origin (a script's or meta refresh's redirect to another host, a
	// link clicked): the origins it left keep session storage in the tab,
	// which only a live frame of theirs can clear.
	ReplacedOriginLeft
	// ReplacedWipeFailed: the wipe itself failed (a CDP error, its time
	// limit, a page that reached a new origin while it ran).
	ReplacedWipeFailed
	numReplaceReasons
)

func (r ReplaceReason) String() string {
	switch r {
	case ReplacedAuth:
		return "auth"
	case ReplacedWorker:
		return "worker"
	case ReplacedPopup:
		return "popup"
	case ReplacedFrame:
		return "frame"
	case ReplacedInFlight:
		return "in_flight"
	case ReplacedBroken:
		return "broken"
	case ReplacedOriginLeft:
		return "origin_left"
	case ReplacedWipeFailed:
		return "wipe_failed"
	}
	return "unknown"
}

// ContextStats counts what became of the browser contexts of IsolationWipe
// after their jobs. A wiped context costs the next job a few CDP calls; a
// replaced one costs a new context and renderer, as IsolationContext does.
// Pages that register service workers, ask for HTTP auth, open popups or
// keep a long poll open make the default isolation cost that on every job,
// and these counts are where an operator sees it.
type ContextStats struct {
	// Reused: jobs that ran in a context wiped after the session's
	// previous job.
	Reused int64
	// Replaced: contexts given up after a job, for a brand-new one, by
	// ReplaceReason.
	Replaced [numReplaceReasons]int64
}

// ReplacedTotal is the sum of Replaced.
func (c ContextStats) ReplacedTotal() int64 {
	var n int64
	for _, v := range c.Replaced {
		n += v
	}
	return n
}

// Add adds o's counts to c.
func (c *ContextStats) Add(o ContextStats) {
	c.Reused += o.Reused
	for i, v := range o.Replaced {
		c.Replaced[i] += v
	}
}

// ByReason returns the nonzero replacement counts keyed by their reason's
// name, for logs.
func (c ContextStats) ByReason() map[string]int64 {
	m := map[string]int64{}
	for i, v := range c.Replaced {
		if v > 0 {
			m[ReplaceReason(i).String()] = v
		}
	}
	return m
}

// contextCounter is a Browser's ContextStats.
type contextCounter struct {
	mu sync.Mutex
	s  ContextStats
}

func (c *contextCounter) reused() {
	c.mu.Lock()
	c.s.Reused++
	c.mu.Unlock()
}

func (c *contextCounter) replaced(r ReplaceReason) {
	c.mu.Lock()
	c.s.Replaced[r]++
	c.mu.Unlock()
}

func (c *contextCounter) snapshot() ContextStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}

// ContextStats returns the counts of this Chrome's wiped contexts so far.
func (b *Browser) ContextStats() ContextStats { return b.contexts.snapshot() }

// errInFlight is the wipe's error for fetches or beacons still in flight.
var errInFlight = errors.New("fetches or beacons still in flight")

// errOriginLeft is the wipe's error for an origin whose session storage it
// cannot clear because no frame of the tab shows it any more.
var errOriginLeft = errors.New("the page left the origin: its session storage cannot be cleared")

// replaceReason is why a tab that a job left is not wiped for the next:
// err is the wipe's error, nil if it did not run.
func (t *tab) replaceReason(err error) ReplaceReason {
	if t.isBroken() {
		return ReplacedBroken
	}
	t.mu.Lock()
	tainted, why := t.tainted, t.taintReason
	t.mu.Unlock()
	switch {
	case tainted:
		return why
	case errors.Is(err, errInFlight):
		return ReplacedInFlight
	case errors.Is(err, errOriginLeft):
		return ReplacedOriginLeft
	}
	return ReplacedWipeFailed
}
