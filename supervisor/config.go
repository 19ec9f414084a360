package supervisor

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
)

// Config sets the thresholds of one node's supervisor. Start from
// DefaultConfig. For the thresholds (ChromeRecycleJobs, ExitAfterJobs,
// ReplacementLead, MemoryCeilingBytes, the intervals, DrainTimeout,
// MaxBootFailures) 0 disables the threshold; the remaining fields fall back
// to their default when 0.
type Config struct {
	// Capacity is the most sessions that run at once on the node, counted
	// across every live Chrome, so it also holds while a retiring and a new
	// Chrome overlap. Default 6; 0 means the default.
	Capacity int

	// ChromeRecycleJobs is how many job starts one Chrome takes before it
	// is retired and replaced. Default 20; 0 never recycles on job count.
	ChromeRecycleJobs int

	// ExitAfterJobs is how many jobs the process starts in its life. After
	// exactly that many have finished, ExitDue is closed and the process
	// should exit so its orchestrator starts a fresh one. Default 80; 0
	// never asks the process to exit.
	ExitAfterJobs int

	// ReplacementLead is how many starts before its recycle point the
	// current Chrome's replacement begins booting, so the new Chrome is up
	// when the old one hands out its last session. Default 6; 0 boots the
	// replacement only when the last start is handed out.
	ReplacementLead int

	// MemoryCeilingBytes retires the current Chrome early when its process
	// tree's PSS passes it. Default 0 (off). Needs MemoryInterval.
	MemoryCeilingBytes uint64

	// MemoryInterval is how often every live Chrome's tree PSS is sampled,
	// for the ceiling, Stats and TakePSSRange. Default 5s; 0 disables
	// sampling. It is not shortened to catch fast recycles: reading
	// smaps_rollup of a 6-tab tree (12 processes) costs 36-52 ms of CPU,
	// mostly the kernel walking Chrome's page tables, so a 1 s interval would
	// cost 2-5% of a core per node. Each kill samples the tree instead (see
	// TakePSSRange), which puts every recycle's peak and trough in the range.
	MemoryInterval time.Duration

	// HealthInterval is how often every live Chrome gets a CDP round trip.
	// Default 5s; 0 disables health checks (crashes are still detected).
	HealthInterval time.Duration

	// HealthTimeout bounds one health check. Default 10s; 0 means the default.
	HealthTimeout time.Duration

	// HealthFailures is how many consecutive failed health checks declare a
	// Chrome hung; it is then killed and replaced like a crashed one.
	// Default 2; 0 means the default.
	HealthFailures int

	// DrainTimeout bounds how long a retiring Chrome waits for its in-flight
	// sessions, on top of their own job timeouts; past it the Chrome is
	// killed and those sessions fail as retriable. Default 2m; 0 waits
	// without bound.
	DrainTimeout time.Duration

	// BootBackoff is the pause after a failed Chrome boot, doubled after
	// each further failure up to 30s. Default 1s; 0 means the default.
	BootBackoff time.Duration

	// MaxBootFailures makes Run give up and return an error after this many
	// Chrome boots failed in a row: a node that cannot start Chrome is
	// better restarted (and noticed) than left idle. Default 5; 0 retries
	// forever.
	MaxBootFailures int

	// Browser is passed to browser.Launch for every Chrome. A nil
	// Browser.Logger is replaced by Logger.
	Browser browser.Options

	// Logger receives one structured line per Chrome event. Default: nop.
	Logger *zap.Logger
}

// DefaultConfig returns the documented defaults: 6 sessions, a new Chrome
// every 20 jobs, process exit after 80, no memory ceiling.
func DefaultConfig() Config {
	return Config{
		Capacity:          6,
		ChromeRecycleJobs: 20,
		ExitAfterJobs:     80,
		ReplacementLead:   6,
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

// withDefaults fills the zero fields that have a default and checks the rest.
func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.Capacity == 0 {
		c.Capacity = d.Capacity
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = d.HealthTimeout
	}
	if c.HealthFailures == 0 {
		c.HealthFailures = d.HealthFailures
	}
	if c.BootBackoff == 0 {
		c.BootBackoff = d.BootBackoff
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Browser.Logger == nil {
		c.Browser.Logger = c.Logger.Named("browser")
	}
	var errs []error
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Capacity", int64(c.Capacity)},
		{"ChromeRecycleJobs", int64(c.ChromeRecycleJobs)},
		{"ExitAfterJobs", int64(c.ExitAfterJobs)},
		{"ReplacementLead", int64(c.ReplacementLead)},
		{"MemoryInterval", int64(c.MemoryInterval)},
		{"HealthInterval", int64(c.HealthInterval)},
		{"HealthTimeout", int64(c.HealthTimeout)},
		{"HealthFailures", int64(c.HealthFailures)},
		{"DrainTimeout", int64(c.DrainTimeout)},
		{"BootBackoff", int64(c.BootBackoff)},
		{"MaxBootFailures", int64(c.MaxBootFailures)},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %d", f.name, f.v))
		}
	}
	if c.MemoryCeilingBytes > 0 && c.MemoryInterval == 0 {
		errs = append(errs, errors.New("MemoryCeilingBytes needs MemoryInterval > 0 to sample memory"))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("supervisor: invalid config: %w", err)
	}
	return c, nil
}
