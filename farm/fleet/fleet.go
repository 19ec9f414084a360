// Package fleet runs a fixed number of child processes on this machine and
// restarts each one when it exits: at once when it asks to be recycled (exit
// code 75), after an exponential backoff when it crashes. It is `farm up`'s
// local stand-in for systemd, Docker's restart policy or an Auto Scaling
// group, so that a consumer's recycle-by-exit works on one machine too.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
)

// RecycleExitCode is the exit code with which a child asks to be restarted
// as a matter of course (it is not a failure): 75, EX_TEMPFAIL. It is the
// one definition: farm consumer exits with it, and the systemd unit, the
// EC2 user data and the README spell it (a test in cmd/farm checks them).
const RecycleExitCode = 75

// Config says what to run and how to restart it. Its durations follow the
// one rule of every config struct: 0 means the default, none can be off,
// and a negative one is an error naming the field.
type Config struct {
	// Count is the number of children kept running. Required (> 0).
	Count int
	// Command builds the command for child slot i (0-based). It is called for
	// every start, so each incarnation gets a fresh *exec.Cmd. Required.
	Command func(slot int) *exec.Cmd
	// MinBackoff is the first delay before restarting a crashed child. 0 means 500 ms.
	MinBackoff time.Duration
	// MaxBackoff caps the doubling delay. 0 means 30 s.
	MaxBackoff time.Duration
	// HealthyAfter: a child that ran this long resets its backoff. 0 means 30 s.
	HealthyAfter time.Duration
	// StopTimeout is how long children get to drain after SIGTERM when the
	// fleet stops, before SIGKILL. 0 means 60 s.
	StopTimeout time.Duration
	// StopOn, when set, names exit codes no restart can fix (a configuration
	// error): such an exit stops every child and ends Run with an *ExitError
	// instead of a restart.
	StopOn func(exitCode int) bool
	// Logger; nil means no logging.
	Logger *zap.Logger
}

// ExitError is Run's error when a child exited with a code StopOn names.
type ExitError struct {
	Slot, Code int
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("fleet: child %d exited with code %d, which a restart cannot fix", e.Slot, e.Code)
}

// Stats counts what happened to the children.
type Stats struct {
	Starts   int // processes started, first starts included
	Recycles int // exits with RecycleExitCode
	Crashes  int // any other exit while the fleet was running
	Running  int // children alive now
}

// Fleet keeps Config.Count children running until its context ends.
type Fleet struct {
	cfg Config
	log *zap.Logger

	mu    sync.Mutex
	stats Stats
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Fleet, error) {
	if cfg.Count <= 0 {
		return nil, fmt.Errorf("fleet: Count must be positive, got %d", cfg.Count)
	}
	if cfg.Command == nil {
		return nil, errors.New("fleet: Command is required")
	}
	if err := errors.Join(
		cfgrule.Resolve("MinBackoff", &cfg.MinBackoff, 500*time.Millisecond, false),
		cfgrule.Resolve("MaxBackoff", &cfg.MaxBackoff, 30*time.Second, false),
		cfgrule.Resolve("HealthyAfter", &cfg.HealthyAfter, 30*time.Second, false),
		cfgrule.Resolve("StopTimeout", &cfg.StopTimeout, 60*time.Second, false),
	); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Fleet{cfg: cfg, log: log}, nil
}

// Stats is a snapshot of the counters.
func (f *Fleet) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Run starts the children and keeps them running until ctx ends; then it
// sends each SIGTERM (they drain), waits up to StopTimeout, kills what is
// left, and returns once every child has been reaped. It returns nil, or an
// *ExitError when a child's exit code is one StopOn names (the others are
// stopped the same way first).
func (f *Fleet) Run(ctx context.Context) error {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var wg sync.WaitGroup
	for slot := 0; slot < f.cfg.Count; slot++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.keepRunning(ctx, slot); err != nil {
				stop(err)
			}
		}()
	}
	wg.Wait()
	var ee *ExitError
	if err := context.Cause(ctx); errors.As(err, &ee) {
		return ee
	}
	return nil
}

// keepRunning is one slot's restart loop.
func (f *Fleet) keepRunning(ctx context.Context, slot int) error {
	failures := 0
	for ctx.Err() == nil {
		started := time.Now()
		code, err := f.runOnce(ctx, slot)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil && f.cfg.StopOn != nil && f.cfg.StopOn(code) {
			f.count(func(s *Stats) { s.Crashes++ })
			f.log.Error("child exited with a code a restart cannot fix; stopping", zap.Int("slot", slot), zap.Int("exit_code", code))
			return &ExitError{Slot: slot, Code: code}
		}
		ran := time.Since(started)
		if ran >= f.cfg.HealthyAfter {
			failures = 0
		}
		if err == nil && code == RecycleExitCode {
			f.count(func(s *Stats) { s.Recycles++ })
			f.log.Info("child recycled; restarting", zap.Int("slot", slot), zap.Duration("ran", ran))
			failures = 0
			continue
		}
		f.count(func(s *Stats) { s.Crashes++ })
		delay := Backoff(failures, f.cfg.MinBackoff, f.cfg.MaxBackoff)
		failures++
		f.log.Warn("child exited unexpectedly; restarting after backoff", zap.Int("slot", slot),
			zap.Int("exit_code", code), zap.Error(err), zap.Duration("ran", ran), zap.Duration("backoff", delay))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
	return nil
}

// runOnce starts one incarnation and waits for it, signalling it to drain if
// ctx ends first. It returns the exit code (-1 when killed by a signal or not started).
func (f *Fleet) runOnce(ctx context.Context, slot int) (int, error) {
	cmd := f.cfg.Command(slot)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Own process group: a terminal's Ctrl-C reaches only us, and we drain the
	// children in order. Pdeathsig: should we die, the kernel asks them to drain.
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	pid := cmd.Process.Pid
	f.count(func(s *Stats) { s.Starts++; s.Running++ })
	defer f.count(func(s *Stats) { s.Running-- })
	f.log.Info("child started", zap.Int("slot", slot), zap.Int("pid", pid))

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }() // ends when the child is reaped
	select {
	case err := <-done:
		return exitCode(err)
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		code, _ := exitCode(err)
		f.log.Info("child stopped", zap.Int("slot", slot), zap.Int("pid", pid), zap.Int("exit_code", code))
		return code, nil
	case <-time.After(f.cfg.StopTimeout):
	}
	f.log.Warn("child did not drain in time; killing its process group", zap.Int("slot", slot), zap.Int("pid", pid))
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	err := <-done
	return exitCode(err)
}

func exitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return -1, err
}

func (f *Fleet) count(update func(*Stats)) {
	f.mu.Lock()
	update(&f.stats)
	f.mu.Unlock()
}

// Backoff is the delay before the restart that follows `failures` earlier
// consecutive crashes: min, 2·min, 4·min, … capped at max.
func Backoff(failures int, min, max time.Duration) time.Duration {
	d := min
	for i := 0; i < failures && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}
