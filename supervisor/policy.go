package supervisor

import "math"

// unlimited stands for "no threshold": a disabled recycle or exit limit
// leaves an effectively endless budget of job starts.
const unlimited = math.MaxInt

// view is the snapshot the policy decides on, for one lane: a Chrome's
// share of the node's slots (Config.SessionsPerChrome), served by its
// current Chrome, replaced by its standby. It holds counters only, no
// Chrome handles, so the decisions below can be tested as plain tables.
type view struct {
	capacity    int // concurrent sessions allowed in the lane, across its live Chromes
	recycleJobs int // job starts per Chrome; 0 = never recycle on count
	exitAfter   int // job starts per process; 0 = never exit on count
	lead        int // boot the replacement when the current Chrome has this many starts left

	busy          int  // slots held in the lane, on any of its Chromes
	processStarts int  // job starts handed out by this process (minus unused slots given back)
	stopping      bool // Drain was called or Run is ending
	// othersLeft is how many more jobs the other lanes may start on their
	// current Chromes and on the replacements booting or ready for them,
	// together (unlimited if any may start without limit).
	othersLeft int
	// refill: the lane has had no Chrome yet, or lost its last one (a
	// crash, a hang), rather than retired it.
	refill bool

	hasCurrent    bool // a Chrome is taking new sessions
	currentStarts int  // job starts handed out on the current Chrome
	currentBusy   int  // slots held on the current Chrome
	overMemory    bool // the current Chrome's tree passed the PSS ceiling
	currentGone   bool // the current Chrome exited or lost CDP, and its monitor has not told the actor yet
	suspect       bool // the current Chrome failed its latest health check (fewer than Config.HealthFailures in a row), or a job's probe found it not answering since the last one passed
	standbyReady  bool // a replacement has booted and waits to take over
	booting       bool // a boot is running or waits out its retry backoff
	held          bool // Config.Hold: the first Chrome may not serve before Release
}

// processLeft is how many more jobs this process may start.
func (v view) processLeft() int {
	if v.exitAfter <= 0 {
		return unlimited
	}
	return max(v.exitAfter-v.processStarts, 0)
}

// exitNear reports whether the process has lead or fewer starts left: where
// a replacement Chrome would begin booting had the process more jobs, the
// time to start the process that takes over after the exit.
func (v view) exitNear() bool {
	return v.exitAfter > 0 && v.processLeft() <= v.lead
}

// currentLeft is how many more jobs the current Chrome may start.
func (v view) currentLeft() int {
	if !v.hasCurrent {
		return 0
	}
	if v.recycleJobs <= 0 {
		return unlimited
	}
	return max(v.recycleJobs-v.currentStarts, 0)
}

// admission is the answer to "may a session start now?".
type admission int

const (
	admitNow       admission = iota // hand out a slot on the current Chrome
	waitSlot                        // every slot is busy
	waitChrome                      // no Chrome may take a new session yet (booting, exhausted)
	refuseExitDue                   // the process has started all the jobs it may start
	refuseStopping                  // draining or shut down
)

func (a admission) String() string {
	switch a {
	case admitNow:
		return "admit"
	case waitSlot:
		return "wait-slot"
	case waitChrome:
		return "wait-chrome"
	case refuseExitDue:
		return "exit-due"
	case refuseStopping:
		return "stopping"
	}
	return "unknown"
}

// admit decides whether a session may start. The capacity check is global,
// not per Chrome, which is what keeps the node at Capacity sessions while an
// old and a new Chrome overlap.
func admit(v view) admission {
	switch {
	case v.stopping:
		return refuseStopping
	case v.processLeft() == 0:
		return refuseExitDue
	case v.busy >= v.capacity:
		return waitSlot
	case v.currentLeft() == 0:
		return waitChrome
	case v.currentGone:
		// Its replacement is moments away: wait rather than hand out a
		// slot that can only fail.
		return waitChrome
	case v.suspect:
		// Most likely hung: a job started now would wait out its tab's
		// time and fail. It waits instead for the next check's verdict,
		// the Chrome passing it or being replaced.
		return waitChrome
	}
	return admitNow
}

// forfeit reports whether a start given back unused, on its lane's current
// Chrome or not (onCurrent), is dropped rather than returned to the
// process: it has handed out its last start, and no Chrome serving has a
// start left to take it (the slot is on an older Chrome, and every lane's
// current one is retired or spent on its own recycle count). Returned, it
// would boot a whole Chrome to run one job before the exit.
func forfeit(v view, onCurrent bool) bool {
	return !onCurrent && v.processLeft() == 0 && v.currentLeft() == 0 && v.othersLeft == 0
}

// needsMore reports whether the process has starts left that the other
// lanes' Chromes and the current one's count cannot take: only then is a
// lane's Chrome replaced ahead of, or at, its recycle point.
func (v view) needsMore() bool {
	others := v.othersLeft
	cur := v.currentLeft()
	if others == unlimited || cur == unlimited {
		return false
	}
	return v.processLeft() > cur+others
}

// actionKind is one step the actor takes on the Chrome set.
type actionKind int

const (
	actNone          actionKind = iota
	actBoot                     // start booting a Chrome (first, replacement, or after a loss)
	actRetireCurrent            // the current Chrome takes no new sessions; it is killed once drained
	actPromote                  // the booted standby becomes the current Chrome
	actRetireStandby            // a booted standby is no longer needed
)

func (k actionKind) String() string {
	switch k {
	case actNone:
		return "none"
	case actBoot:
		return "boot"
	case actRetireCurrent:
		return "retire-current"
	case actPromote:
		return "promote"
	case actRetireStandby:
		return "retire-standby"
	}
	return "unknown"
}

// Reasons name why a Chrome was booted or retired; they appear in log lines.
const (
	reasonInitial = "initial"      // first Chrome of the process, or after a loss
	reasonPreboot = "preboot"      // replacement booted ahead of the recycle point
	reasonJobs    = "recycle"      // the Chrome handed out its ChromeRecycleJobs starts
	reasonMemory  = "memory"       // the Chrome tree passed MemoryCeilingBytes
	reasonExit    = "exit-due"     // the process has started its ExitAfterJobs jobs
	reasonStop    = "stopping"     // Drain or Run ending
	reasonCrash   = "crashed"      // Chrome exited or lost its CDP connection on its own
	reasonHang    = "unresponsive" // Chrome failed Config.HealthFailures health checks in a row (a job's probe counting as one beside them)
	reasonSuspect = "suspect"      // Chrome was suspect (view.suspect), and a replacement was ready
	reasonDrain   = "drain-timeout"
)

// action is the policy's answer: one step and why.
type action struct {
	kind   actionKind
	reason string
}

// decide returns the next step for the actor. The actor applies it, takes a
// fresh view and asks again until the answer is actNone, so every rule can
// assume the earlier ones no longer apply.
func decide(v view) action {
	processLeft := v.processLeft()
	currentLeft := v.currentLeft()
	switch {
	case v.stopping && v.standbyReady:
		return action{actRetireStandby, reasonStop}
	case v.stopping && v.hasCurrent:
		return action{actRetireCurrent, reasonStop}
	case v.stopping:
		return action{actNone, ""}

	// No further job may start here: no replacement is booted (80 jobs at
	// 20 per Chrome = 4 boots), and the current Chrome is retired once idle.
	// It stays current until then because a slot released unused hands its
	// start back, and that start should run here rather than on a new Chrome.
	case processLeft == 0 && v.standbyReady:
		return action{actRetireStandby, reasonExit}
	case processLeft == 0 && v.hasCurrent && v.currentBusy == 0:
		return action{actRetireCurrent, reasonExit}
	case processLeft == 0:
		return action{actNone, ""}

	case v.hasCurrent && currentLeft == 0:
		return action{actRetireCurrent, reasonJobs}
	case v.hasCurrent && v.overMemory && v.standbyReady:
		return action{actRetireCurrent, reasonMemory}
	case v.hasCurrent && v.suspect && v.standbyReady:
		// admit gives a suspect Chrome no new job; one that is ready
		// takes them instead of their waiting for the next check.
		return action{actRetireCurrent, reasonSuspect}
	case !v.hasCurrent && v.standbyReady && v.held:
		return action{actNone, ""}
	case !v.hasCurrent && v.standbyReady:
		return action{actPromote, ""}
	case !v.hasCurrent && !v.booting && (v.refill || v.needsMore()):
		// A lane's first Chrome and a lost one are always booted; one
		// retired on its count is replaced only when the other lanes
		// cannot take what the process has left (80 jobs on six Chromes of
		// 20: none is).
		return action{actBoot, reasonInitial}

	// Boot ahead: the replacement is ready by the time the current Chrome
	// hands out its last start, unless the process will never need it.
	case v.hasCurrent && !v.standbyReady && !v.booting && v.overMemory:
		return action{actBoot, reasonMemory}
	case v.hasCurrent && !v.standbyReady && !v.booting &&
		currentLeft <= v.lead && v.needsMore():
		return action{actBoot, reasonPreboot}
	}
	return action{actNone, ""}
}
