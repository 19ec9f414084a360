// Package supervisor owns the Chrome lifecycle of one consumer node: it hands
// out at most Capacity render slots at once, counts job starts against the
// Chrome they run on, boots a replacement Chrome ahead of each recycle point
// and retires, drains and kills the old one, replaces crashed or hung
// Chromes at once, recycles early on a memory ceiling, and reports when the
// process has done its ExitAfterJobs jobs and should exit to be restarted
// fresh — the field's workaround for browser memory leaks, made explicit.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
)

// ErrExitDue is returned by Acquire once the process has started all the
// jobs it may start (Config.ExitAfterJobs): finish in-flight work, wait for
// ExitDue and exit.
var ErrExitDue = errors.New("supervisor: process exit due")

// ErrStopping is returned by Acquire after Drain was called or Run ended.
var ErrStopping = errors.New("supervisor: stopping")

// Supervisor owns the Chromes of one node. Create it with New, run its actor
// with Run, and take render slots with Acquire. All methods are safe for
// concurrent use.
type Supervisor struct {
	cfg    Config
	log    *zap.Logger
	launch launchFunc

	kick     chan struct{} // wakes the actor after Acquire/Release; capacity 1
	events   chan event    // from the per-Chrome monitors and the jobs' probes to the actor
	exitDue  chan struct{}
	exitNear chan struct{}

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change Acquire/Drain may wait for
	ran      bool          // Run was called
	stopping bool
	fatal    error // why Run gave up, if it did
	lanes    []*lane
	retiring []*chrome
	held     bool // Config.Hold until Release
	near     bool // exitNear is closed
	seq      int
	busy     int // slots held
	starts   int // job starts handed out (unused slots given back, unless forfeited)
	finished int // jobs finished
	// forfeited counts starts given back unused that no Chrome serving
	// could take (forfeit): they end the process's count as if finished.
	forfeited int
	exited    bool
	pace      pacer
	counts    counters
	pss       pssAccumulator
}

// lane is one Chrome's share of the node's slots (Config.SessionsPerChrome):
// the Chrome serving it, the standby booted to replace that one, and the
// slots held on them and on the lane's retiring Chromes.
type lane struct {
	capacity int
	lead     int // Config.ReplacementLead's share for the lane
	current  *chrome
	standby  *chrome
	booting  bool // a boot runs or waits out its backoff
	refill   bool // no Chrome has served yet, or the last one was lost
	busy     int  // slots held

	// The actor's alone (not guarded by Supervisor.mu): the lane's boots
	// that failed in a row, and when it boots again (zero: no backoff).
	bootFails int
	retryAt   time.Time
}

// Lanes is how a node of capacity sessions at sessionsPerChrome each
// (Config.SessionsPerChrome) spreads them over its Chromes: the sessions of
// each Chrome, as evenly as they go, the larger first (7 at 3 a Chrome: 3,
// 2, 2). Its length is the node's Chromes.
func Lanes(capacity, sessionsPerChrome int) []int {
	if capacity < 1 {
		return nil
	}
	per := min(max(sessionsPerChrome, 1), capacity)
	n := (capacity + per - 1) / per
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = capacity / n
		if i < capacity%n {
			sizes[i]++
		}
	}
	return sizes
}

// newLanes makes the lanes of Lanes(capacity, perChrome), each with its
// share of the replacement lead, rounded up.
func newLanes(capacity, perChrome, lead int) []*lane {
	sizes := Lanes(capacity, perChrome)
	ls := make([]*lane, len(sizes))
	for i, c := range sizes {
		ls[i] = &lane{capacity: c, lead: (lead*c + capacity - 1) / capacity, refill: true}
	}
	return ls
}

// counters are the lifetime event counts reported by Stats.
type counters struct {
	chromeStarts   int
	chromeKills    int
	chromeCrashes  int
	recycles       int
	memoryRecycles int
	bootFailures   int
	healthFailures int
	drainTimeouts  int
	orphanedTicks  uint64
	contexts       browser.ContextStats // of the killed Chromes
}

// New checks cfg and returns a Supervisor that launches real Chromes with
// cfg.Browser. Nothing starts until Run.
func New(cfg Config) (*Supervisor, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	return newSupervisor(cfg, browserLauncher(cfg.Browser)), nil
}

// newSupervisor takes a checked cfg and any launcher (tests pass fakes).
func newSupervisor(cfg Config, launch launchFunc) *Supervisor {
	return &Supervisor{
		cfg:      cfg,
		log:      cfg.Logger,
		launch:   launch,
		kick:     make(chan struct{}, 1),
		events:   make(chan event),
		exitDue:  make(chan struct{}),
		exitNear: make(chan struct{}),
		changed:  make(chan struct{}),
		lanes:    newLanes(cfg.Capacity, cfg.SessionsPerChrome, max(cfg.ReplacementLead, 0)),
		held:     cfg.Hold,
		pace:     pacer{fixed: cfg.BurstSpacing},
	}
}

// Acquire blocks until a session may start and returns its slot, counted as
// one job start against the process and the current Chrome. It returns
// ErrExitDue once the process may start no more jobs, ErrStopping after
// Drain or Run's end, or ctx's error. Every slot must be Released.
func (s *Supervisor) Acquire(ctx context.Context) (*Slot, error) {
	for {
		var paced time.Duration // wait that long at most, else for a change
		s.mu.Lock()
		now := time.Now()
		l, adm := s.admitLocked()
		switch {
		case adm == admitNow:
			if paced = s.pace.wait(s.starts, s.cfg.Capacity-s.busy, s.cfg.Capacity, now); paced > 0 {
				break // a burst's start: after the spacing, or a change
			}
			s.pace.started(now)
			c := l.current
			c.starts++
			c.inflight++
			l.busy++
			s.busy++
			s.starts++
			if s.cfg.ExitAfterJobs > 0 && s.starts >= s.cfg.ExitAfterJobs {
				// The process's last start: no session gets another job.
				for _, l := range s.lanes {
					if l.current != nil {
						l.current.retireSessionsLocked()
					}
				}
			}
			if !s.near && s.processViewLocked().exitNear() {
				s.near = true
				close(s.exitNear)
			}
			s.mu.Unlock()
			s.poke()
			return &Slot{s: s, c: c, at: now}, nil
		case adm == refuseExitDue:
			s.mu.Unlock()
			return nil, ErrExitDue
		case adm == refuseStopping:
			err := s.fatal
			s.mu.Unlock()
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrStopping, err)
			}
			return nil, ErrStopping
		}
		ch := s.changed
		s.mu.Unlock()
		var timeout <-chan time.Time // nil: never
		if paced > 0 {
			timeout = time.After(paced)
		}
		select {
		case <-ch:
		case <-timeout:
		case <-ctx.Done():
			return nil, fmt.Errorf("supervisor: acquire: %w", ctx.Err())
		}
	}
}

// admitLocked picks the lane a session may start in now: of those whose
// Chrome may take it, the one with the most starts left, so that the
// lanes' Chromes age together and one spent early does not leave its lane
// empty before the process's exit. Otherwise it returns why none may: the
// process's refusal, else a wait.
func (s *Supervisor) admitLocked() (*lane, admission) {
	var pick *lane
	pickLeft := -1
	why := waitChrome
	for _, l := range s.lanes {
		v := s.viewLocked(l)
		switch adm := admit(v); adm {
		case admitNow:
			if left := v.currentLeft(); left > pickLeft {
				pick, pickLeft = l, left
			}
		case refuseExitDue, refuseStopping:
			// The process's answer: every lane gives it.
			return nil, adm
		case waitSlot:
			why = waitSlot
		}
	}
	if pick != nil {
		return pick, admitNow
	}
	return nil, why
}

// release ends a slot. A slot that never rendered gives its start back, so
// a consumer may acquire first and hand back slots it found no job for.
// After the process's last start, such a start may be forfeited instead
// (forfeit).
func (s *Supervisor) release(c *chrome, used bool) {
	s.mu.Lock()
	c.inflight--
	c.lane.busy--
	s.busy--
	switch {
	case used:
		c.finished++
		s.finished++
	case forfeit(s.viewLocked(c.lane), c == c.lane.current):
		c.starts--
		s.forfeited++
	default:
		c.starts--
		s.starts--
	}
	if s.cfg.ExitAfterJobs > 0 && s.finished+s.forfeited >= s.cfg.ExitAfterJobs && !s.exited {
		// starts never exceed ExitAfterJobs, so all of them have ended:
		// nothing is in flight.
		s.exited = true
		close(s.exitDue)
		s.log.Info("exit due", zap.Int("jobs", s.finished), zap.Int("starts_forfeited", s.forfeited),
			zap.Int("chrome_starts", s.counts.chromeStarts))
	}
	s.broadcastLocked()
	s.mu.Unlock()
	s.poke()
}

// ExitDue is closed once ExitAfterJobs jobs have finished (or had their
// starts forfeited, see release) and nothing is in flight: the process
// should exit (code 75 in farm consumer) to be restarted.
func (s *Supervisor) ExitDue() <-chan struct{} { return s.exitDue }

// ExitNear is closed once the process has ReplacementLead or fewer job
// starts left, when a replacement Chrome would begin booting had the process
// more jobs to start: the time to start the process that takes over after
// the exit (farm/fleet's handoff). It is never closed when ExitAfterJobs is
// Off.
func (s *Supervisor) ExitNear() <-chan struct{} { return s.exitNear }

// Release lets the Chrome held back by Config.Hold serve: it comes to the
// foreground and Acquire hands out its slots. Release is idempotent, and
// a no-op without Hold.
func (s *Supervisor) Release() {
	s.mu.Lock()
	if s.held {
		s.held = false
		s.log.Info("released: the first chrome may serve")
		s.broadcastLocked()
	}
	s.mu.Unlock()
	s.poke()
}

// Remaining is how many more jobs this process may start; math.MaxInt when
// ExitAfterJobs is Off.
func (s *Supervisor) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.processLeftLocked()
}

// processLeftLocked is how many more jobs this process may start.
func (s *Supervisor) processLeftLocked() int {
	return s.processViewLocked().processLeft()
}

// processViewLocked is the policy's view of the process alone, not of a
// lane: its starts against ExitAfterJobs, with the whole ReplacementLead
// (ExitNear).
func (s *Supervisor) processViewLocked() view {
	return view{exitAfter: max(s.cfg.ExitAfterJobs, 0), processStarts: s.starts, lead: max(s.cfg.ReplacementLead, 0)}
}

// Available is how many jobs the consumer may claim now: free slots, capped
// by Remaining, 0 while stopping.
func (s *Supervisor) Available() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return 0
	}
	return max(min(s.cfg.Capacity-s.busy, s.processLeftLocked()), 0)
}

// Drain stops handing out slots (Acquire returns ErrStopping) and waits until
// every held slot is released, or ctx ends. The running actor then kills
// the idle Chromes; Run's return guarantees they are gone.
func (s *Supervisor) Drain(ctx context.Context) error {
	s.mu.Lock()
	if !s.stopping {
		s.stopping = true
		s.log.Info("draining", zap.Int("busy", s.busy))
		s.broadcastLocked()
	}
	s.mu.Unlock()
	s.poke()
	for {
		s.mu.Lock()
		busy, ch := s.busy, s.changed
		s.mu.Unlock()
		if busy == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("supervisor: drain with %d sessions busy: %w", busy, ctx.Err())
		}
	}
}

// Stats is a snapshot of the supervisor's state for heartbeats and metrics.
type Stats struct {
	Capacity              int // configured concurrent sessions
	Busy                  int // slots held now, on any Chrome
	Remaining             int // job starts left for this process (math.MaxInt: unlimited)
	JobsSinceChromeStart  int // the most jobs finished on any serving Chrome: the one nearest its recycle
	JobsSinceProcessStart int // jobs finished by this process
	ChromeStarts          int // Chromes booted
	ChromeKills           int // live Chromes killed by the supervisor (retired, stopped, hung)
	ChromeCrashes         int // Chromes lost unplanned: exited on their own or hung
	Recycles              int // retirements for job count or memory
	MemoryRecycles        int // of Recycles, those for memory
	BootFailures          int // failed boots
	HealthFailures        int // failed health checks
	DrainTimeouts         int // retiring Chromes killed with sessions still running
	// OrphanedCPUTicks is the CPU, in /proc ticks (1/100 s), of the killed
	// Chromes' helpers and renderers: init reaps them, so their CPU is in
	// no cutime of this process's tree; a CPU figure of that tree adds it.
	OrphanedCPUTicks uint64
	Chromes          int    // live Chrome processes (serving, standby, retiring)
	ChromePID        int    // the first lane's serving Chrome's pid, 0 if none
	ChromePSSBytes   uint64 // last sampled PSS summed over every live Chrome tree
	ExitDue          bool   // ExitAfterJobs jobs finished (or their starts forfeited)
	// StartsForfeited are starts given back unused after the process's
	// last one that no serving Chrome could take (see release): they count
	// toward ExitAfterJobs, so the process exits after that many fewer
	// jobs rather than boot a Chrome for them.
	StartsForfeited int
	Stopping        bool // Drain was called or Run ended
	// Contexts counts what became of the wiped contexts of every Chrome
	// this process ran: reused for the next job, or replaced (why: a
	// worker, a popup, HTTP auth, a fetch in flight...), each replacement
	// costing a new context and renderer.
	Contexts browser.ContextStats
}

// Stats returns a snapshot.
func (s *Supervisor) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Capacity:              s.cfg.Capacity,
		Busy:                  s.busy,
		Remaining:             s.processLeftLocked(),
		JobsSinceProcessStart: s.finished,
		ChromeStarts:          s.counts.chromeStarts,
		ChromeKills:           s.counts.chromeKills,
		ChromeCrashes:         s.counts.chromeCrashes,
		Recycles:              s.counts.recycles,
		MemoryRecycles:        s.counts.memoryRecycles,
		BootFailures:          s.counts.bootFailures,
		HealthFailures:        s.counts.healthFailures,
		DrainTimeouts:         s.counts.drainTimeouts,
		OrphanedCPUTicks:      s.counts.orphanedTicks,
		ExitDue:               s.exited,
		StartsForfeited:       s.forfeited,
		Stopping:              s.stopping,
	}
	for _, l := range s.lanes {
		if c := l.current; c != nil {
			st.JobsSinceChromeStart = max(st.JobsSinceChromeStart, c.finished)
			if st.ChromePID == 0 {
				st.ChromePID = c.pid
			}
		}
	}
	live := s.liveLocked()
	st.Chromes = len(live)
	st.Contexts = s.counts.contexts
	for _, c := range live {
		st.ChromePSSBytes += c.pss
		st.Contexts.Add(c.proc.ContextStats())
	}
	return st
}

// viewLocked snapshots the counters of lane l for the policy.
func (s *Supervisor) viewLocked(l *lane) view {
	v := view{
		capacity: l.capacity,
		// The policy's 0 is Config's Off: never recycle, never exit, no lead.
		recycleJobs:   max(s.cfg.ChromeRecycleJobs, 0),
		exitAfter:     max(s.cfg.ExitAfterJobs, 0),
		lead:          l.lead,
		busy:          l.busy,
		processStarts: s.starts,
		stopping:      s.stopping,
		standbyReady:  l.standby != nil,
		booting:       l.booting,
		refill:        l.refill,
		held:          s.held,
	}
	if c := l.current; c != nil {
		v.hasCurrent = true
		v.currentStarts = c.starts
		v.currentBusy = c.inflight
		v.overMemory = c.overMemory
		v.currentGone = c.gone()
		v.suspect = c.healthFails > 0 || c.probeFailed
	}
	for _, o := range s.lanes {
		if o == l {
			continue
		}
		// What the other lane can still start: its current Chrome's
		// starts left, and a whole Chrome's more if its replacement is
		// booting or ready.
		left := 0
		if o.current != nil {
			left = view{hasCurrent: true, recycleJobs: v.recycleJobs, currentStarts: o.current.starts}.currentLeft()
		}
		if (o.standby != nil || o.booting) && left != unlimited {
			left += v.recycleJobs
			if v.recycleJobs == 0 {
				left = unlimited
			}
		}
		if left == unlimited || v.othersLeft == unlimited {
			v.othersLeft = unlimited
		} else {
			v.othersLeft += left
		}
	}
	return v
}

// liveLocked lists every Chrome not yet killed.
func (s *Supervisor) liveLocked() []*chrome {
	var cs []*chrome
	for _, l := range s.lanes {
		if l.current != nil {
			cs = append(cs, l.current)
		}
		if l.standby != nil {
			cs = append(cs, l.standby)
		}
	}
	return append(cs, s.retiring...)
}

// broadcastLocked wakes every Acquire and Drain waiting for a change.
func (s *Supervisor) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// poke wakes the actor without blocking; one pending wake is enough since
// the actor rereads all state.
func (s *Supervisor) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
