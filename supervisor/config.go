package supervisor

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/internal/cfgrule"
)

// Off turns off a Config field that can be off: a threshold that is never
// reached, an interval whose work never runs, a bound that never cuts. Each
// field's comment says whether it takes Off and what off means there.
const Off = cfgrule.Off

// Config sets the thresholds of one node's supervisor. Start from
// DefaultConfig. Every field follows one rule: 0 means the documented
// default, Off (where the field allows it) turns the threshold off, and any
// other negative value is an error that names the field.
type Config struct {
	// Capacity is the most sessions that run at once on the node, counted
	// across every live Chrome, so it also holds while a retiring and a new
	// Chrome overlap. 0: the default, 6. It cannot be off.
	Capacity int

	// SessionsPerChrome is how many of the Capacity sessions share one
	// Chrome, at most: the node runs Capacity/SessionsPerChrome Chromes
	// (rounded up, Chromes), the sessions spread evenly over them, each a
	// lane of its own with its own recycle count, standby and health. 0: the default, 1 — a Chrome per session. A Chrome's life has
	// a fixed cost, its boot and a renderer for each of its sessions'
	// browser contexts, paid again at every recycle: shared by six
	// sessions, a Chrome recycled every 20 jobs pays six renderers per 20
	// jobs; alone, one. One Chrome per session also keeps a crash or hang
	// to that session's job. Each Chrome costs its browser process (about
	// 55 MB of PSS for the headless shell) beside its sessions. Capacity or
	// more: one Chrome for all the sessions. It cannot be off.
	SessionsPerChrome int

	// ChromeRecycleJobs is how many job starts one Chrome takes before it
	// is retired and replaced. 0: the default, 20. Off: never recycle on
	// job count.
	ChromeRecycleJobs int

	// ExitAfterJobs is how many jobs the process starts in its life. After
	// exactly that many have finished, ExitDue is closed and the process
	// should exit so its orchestrator starts a fresh one. 0: the default,
	// 80. Off: never ask the process to exit.
	ExitAfterJobs int

	// ReplacementLead is how many of the node's starts ahead a Chrome's
	// replacement begins booting, so the new Chrome is up when the old one
	// hands out its last session: a lane begins when its Chrome has its
	// share of the lead left (the lead times its sessions over Capacity,
	// rounded up: 2 starts for a Chrome per session of 6), and the
	// process's successor is started when the process has the whole lead
	// left (ExitNear). 0: the default, 12, about two jobs' time of each
	// session: the lanes' Chromes age together, so their replacements boot
	// at about the same time and share the CPU, and one job's time (6) was
	// not always enough (400 ms pages lost about 5% to recycling with 6,
	// about 1% with 12; session 44's alternated runs). Off: boot the
	// replacement only when the last start is handed out.
	ReplacementLead int

	// Hold keeps the first Chrome from serving until Release is called: it
	// boots and prewarms its sessions in the background, as every
	// replacement does, and Acquire waits. A process started to stand by
	// for its predecessor's exit sets it, so that its Chrome is ready when
	// its turn comes without slowing the predecessor's last jobs. Default
	// false: the first Chrome serves as soon as it is up.
	Hold bool

	// BurstSpacing spreads the process's first burst of starts: each of
	// its first Capacity starts, while two or more slots are free, comes
	// at least this long after the one before, so that its jobs do not run
	// in step (see pacing.go). 0: the default, a light page's render
	// (400 ms) divided by Capacity, at most 100 ms: 67 ms for 6 slots.
	// Off: start at once.
	BurstSpacing time.Duration

	// MemoryCeilingBytes retires the current Chrome early when its process
	// tree's PSS passes it. 0: the default, which is no ceiling; Off: no
	// ceiling either. A ceiling needs MemoryInterval. It bounds one Chrome,
	// not the node: retiring Chromes wait for their last job, each holding
	// at least one slot, so up to Capacity+2 Chromes can be alive at once
	// (their finished sessions closed, the pages in flight at most
	// Capacity); Stats.ChromePSSBytes sums them all.
	MemoryCeilingBytes int64

	// MemoryInterval is how often every live Chrome's tree PSS is sampled,
	// for the ceiling, Stats and TakePSSRange. 0: the default, 5s. Off: no
	// periodic sampling (each kill still samples). It is not shortened to
	// catch fast recycles: reading
	// smaps_rollup of a 6-tab tree (12 processes) costs 36-52 ms of CPU,
	// mostly the kernel walking Chrome's page tables, so a 1 s interval would
	// cost 2-5% of a core per node. Each kill samples the tree instead (see
	// TakePSSRange), which puts every recycle's peak and trough in the range.
	MemoryInterval time.Duration

	// HealthInterval is how often every live Chrome gets a CDP round trip.
	// 0: the default, 5s. Off: no health checks (crashes are still
	// detected).
	HealthInterval time.Duration

	// HealthTimeout bounds one health check. 0: the default, 10s. It cannot
	// be off.
	HealthTimeout time.Duration

	// HealthFailures is how many consecutive failed health checks declare a
	// Chrome hung; it is then killed and replaced like a crashed one. From
	// the first failed check until one passes, the Chrome gets no new job;
	// a replacement already booted takes over from it at once. A job that
	// found the Chrome not answering (its render failed unresponsive) has
	// the same effect, and has it checked next rather than at the next tick;
	// its finding counts as one of the failures, but only beside a failed
	// check, never alone, and however many jobs find it, once until a check
	// passes. With HealthInterval off, jobs' findings are ignored. 0: the
	// default, 2. It cannot be off.
	HealthFailures int

	// DrainTimeout bounds how long a retiring Chrome waits for its in-flight
	// sessions, on top of their own job timeouts (counted from the later of
	// its retirement and the latest deadline of a render started on it);
	// past it the Chrome is killed and those sessions fail as retriable.
	// 0: the default, 2m. Off: wait without bound.
	DrainTimeout time.Duration

	// BootBackoff is the pause after a failed Chrome boot, doubled after
	// each further failure of the same lane up to 30s. 0: the default, 1s. It cannot be off.
	BootBackoff time.Duration

	// MaxBootFailures makes Run give up and return an error after this many
	// boots of one Chrome (one lane: SessionsPerChrome) failed in a row: a
	// node that cannot start Chrome is better restarted (and noticed) than
	// left idle. 0: the default, 5. Off: retry forever.
	MaxBootFailures int

	// Browser is passed to browser.Launch for every Chrome. A nil
	// Browser.Logger is replaced by Logger, and Background is set: a
	// Chrome boots and prewarms in the background, and comes to the
	// foreground when it starts to serve.
	Browser browser.Options

	// Logger receives one structured line per Chrome event. Default: nop.
	Logger *zap.Logger
}

// DefaultConfig returns the documented defaults: 6 sessions, a Chrome each,
// a new Chrome every 20 of its jobs, process exit after 80, no memory
// ceiling. It is what
// New makes of the zero Config.
func DefaultConfig() Config {
	return Config{
		Capacity:          6,
		SessionsPerChrome: 1,
		ChromeRecycleJobs: 20,
		ExitAfterJobs:     80,
		ReplacementLead:   12,
		MemoryInterval:    5 * time.Second,
		HealthInterval:    5 * time.Second,
		HealthTimeout:     10 * time.Second,
		HealthFailures:    2,
		DrainTimeout:      2 * time.Minute,
		BootBackoff:       time.Second,
		MaxBootFailures:   5,
	}
}

// maxBootBackoff caps the doubling of BootBackoff.
const maxBootBackoff = 30 * time.Second

// WithDefaults is the config New runs with: the zero fields filled with
// their defaults, Off left where a field can be off, and an error naming
// every field that holds any other negative value. A nil Logger becomes a
// nop logger, a nil Browser.Logger a child of Logger.
func (c Config) WithDefaults() (Config, error) {
	d := DefaultConfig()
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Browser.Logger == nil {
		c.Browser.Logger = c.Logger.Named("browser")
	}
	errs := []error{
		cfgrule.Resolve("Capacity", &c.Capacity, d.Capacity, false),
		cfgrule.Resolve("SessionsPerChrome", &c.SessionsPerChrome, d.SessionsPerChrome, false),
		cfgrule.Resolve("ChromeRecycleJobs", &c.ChromeRecycleJobs, d.ChromeRecycleJobs, true),
		cfgrule.Resolve("ExitAfterJobs", &c.ExitAfterJobs, d.ExitAfterJobs, true),
		cfgrule.Resolve("ReplacementLead", &c.ReplacementLead, d.ReplacementLead, true),
		cfgrule.Resolve("BurstSpacing", &c.BurstSpacing, d.BurstSpacing, true),
		cfgrule.Resolve("MemoryCeilingBytes", &c.MemoryCeilingBytes, d.MemoryCeilingBytes, true),
		cfgrule.Resolve("MemoryInterval", &c.MemoryInterval, d.MemoryInterval, true),
		cfgrule.Resolve("HealthInterval", &c.HealthInterval, d.HealthInterval, true),
		cfgrule.Resolve("HealthTimeout", &c.HealthTimeout, d.HealthTimeout, false),
		cfgrule.Resolve("HealthFailures", &c.HealthFailures, d.HealthFailures, false),
		cfgrule.Resolve("DrainTimeout", &c.DrainTimeout, d.DrainTimeout, true),
		cfgrule.Resolve("BootBackoff", &c.BootBackoff, d.BootBackoff, false),
		cfgrule.Resolve("MaxBootFailures", &c.MaxBootFailures, d.MaxBootFailures, true),
	}
	if c.MemoryCeilingBytes > 0 && c.MemoryInterval == Off {
		errs = append(errs, errors.New("MemoryCeilingBytes needs MemoryInterval to sample memory, not Off"))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("supervisor: invalid config: %w", err)
	}
	return c, nil
}
