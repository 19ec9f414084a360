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
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/backoff"
	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"github.com/browserfarm/browserfarm/internal/ctxtime"
	"github.com/browserfarm/browserfarm/internal/lockedstart"
)

// RecycleExitCode is the exit code with which a child asks to be restarted
// as a matter of course (it is not a failure): 75, EX_TEMPFAIL. It is the
// one definition: farm consumer exits with it, and the systemd unit, the
// EC2 user data and the README spell it (a test in cmd/farm checks them).
const RecycleExitCode = 75

// ParentGoneSignal is what a child gets when the fleet's process dies (its
// Pdeathsig): farm consumer drains on it. It is not SIGTERM, the fleet's
// request to stop, so that a child already draining after that request can
// tell its parent's death from a second request, which ends it at once.
const ParentGoneSignal = syscall.SIGUSR2

// Config says what to run and how to restart it. Its durations follow the
// one rule of every config struct: 0 means the default, none can be off,
// and a negative one is an error naming the field.
type Config struct {
	// Count is the number of children kept running. Required (> 0).
	Count int
	// Command builds the command for child slot i (0-based). It is called for
	// every start, so each incarnation gets a fresh *exec.Cmd. An output
	// writer of it with a Flush() error method is flushed once the child
	// has exited and its output is copied. Required.
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
	// Handoff starts each child's successor before the child exits to be
	// recycled, so that the successor's start-up overlaps the child's last
	// jobs: a child that writes a byte to its descriptor ExitNearFD (its
	// exit is near) gets its successor started at once, which stands by
	// until its descriptor GateFD yields a byte — written when the child
	// exits with RecycleExitCode. End of file on GateFD instead means the
	// successor is not needed (the child crashed, or the fleet stops) and
	// it is sent SIGTERM too. Children find HandoffEnv=1 in their
	// environment. Default false: a successor starts after the exit.
	Handoff bool
	// Logger; nil means no logging.
	Logger *zap.Logger
}

// The handoff's contract with the children (Config.Handoff).
const (
	// HandoffEnv is set to "1" in a child's environment under Handoff.
	HandoffEnv = "FARM_HANDOFF"
	// ExitNearFD is where a child writes one byte when its exit is near.
	ExitNearFD = 3
	// GateFD is where a child reads one byte before it may start work.
	GateFD = 4
)

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
	// next is the slot's successor, started ahead of the current child's
	// exit and standing by (Config.Handoff).
	var next *child
	defer func() {
		if next != nil {
			f.stop(next)
		}
	}()
	for ctx.Err() == nil {
		c := next
		next = nil
		if c == nil {
			var err error
			if c, err = f.start(slot, false); err != nil {
				if !f.crashed(ctx, slot, -1, err, 0, &failures) {
					return nil
				}
				continue
			}
		}
		c.release()
		started := time.Now()
		code, err := f.await(ctx, slot, c, &next)
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
			f.log.Info("child recycled; restarting", zap.Int("slot", slot), zap.Duration("ran", ran),
				zap.Bool("successor_standing_by", next != nil))
			failures = 0
			continue
		}
		// A crash is not a handoff: the successor goes, and the backoff
		// applies to whatever starts next.
		if next != nil {
			f.stop(next)
			next = nil
		}
		if !f.crashed(ctx, slot, code, err, ran, &failures) {
			return nil
		}
	}
	return nil
}

// crashed counts an unexpected exit (or a failed start) and waits out the
// backoff; false means ctx ended meanwhile.
func (f *Fleet) crashed(ctx context.Context, slot, code int, err error, ran time.Duration, failures *int) bool {
	f.count(func(s *Stats) { s.Crashes++ })
	delay := backoff.Doubling(*failures, f.cfg.MinBackoff, f.cfg.MaxBackoff)
	*failures++
	f.log.Warn("child exited unexpectedly; restarting after backoff", zap.Int("slot", slot),
		zap.Int("exit_code", code), zap.Error(err), zap.Duration("ran", ran), zap.Duration("backoff", delay))
	return ctxtime.Sleep(ctx, delay)
}

// child is one started incarnation.
type child struct {
	proc *os.Process
	pid  int
	done chan exitResult // receives once, when the child is reaped
	// near is closed when the child said its exit is near (Handoff); nil
	// without Handoff.
	near  chan struct{}
	gateW *os.File // the write end of the child's gate; nil without Handoff
	// termed: SIGTERM was sent. A second one makes farm exit at once,
	// without its cleanup (signalContext in cmd/farm).
	termed bool
}

// terminate sends the child SIGTERM, once. Through os.Process: a child
// reaped meanwhile is not signalled by pid, which another process may have
// taken.
func (c *child) terminate() {
	if !c.termed {
		c.termed = true
		_ = c.proc.Signal(syscall.SIGTERM)
	}
}

type exitResult struct {
	code int
	err  error
}

// release lets a child that stands by take its turn (it is told by a byte
// on its gate), and closes the gate.
func (c *child) release() {
	if c.gateW != nil {
		_, _ = c.gateW.Write([]byte{'g'})
	}
	c.abandon()
}

// abandon tells a child that stands by that it is not needed: the end of
// file on its gate.
func (c *child) abandon() {
	if c.gateW != nil {
		_ = c.gateW.Close()
		c.gateW = nil
	}
}

// flushOutput lets a Command's output writer that holds back a partial
// line (one with a Flush method) pass it on: the child has exited and its
// output has been copied, so nothing more comes.
func flushOutput(cmd *exec.Cmd) {
	for _, w := range []io.Writer{cmd.Stdout, cmd.Stderr} {
		if f, ok := w.(interface{ Flush() error }); ok {
			_ = f.Flush()
		}
	}
}

// start starts one incarnation of slot. With Handoff it stands by until
// released.
func (f *Fleet) start(slot int, standby bool) (*child, error) {
	cmd := f.cfg.Command(slot)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Own process group: a terminal's Ctrl-C reaches only us, and we drain the
	// children in order. Pdeathsig: should we die, the kernel asks them to drain.
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = ParentGoneSignal
	c := &child{done: make(chan exitResult, 1)}
	// A HandoffEnv this process inherited is not its children's: they get
	// it from this fleet's Handoff only.
	cmd.Env = slices.DeleteFunc(cmd.Environ(), func(kv string) bool { return strings.HasPrefix(kv, HandoffEnv+"=") })
	// ours are the fleet's ends of the handoff's pipes, theirs the child's,
	// which the fleet closes once the child has its copies.
	var ours, theirs []*os.File
	var nearR *os.File
	if f.cfg.Handoff {
		var nearW *os.File
		var err error
		if nearR, nearW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("fleet: handoff pipe: %w", err)
		}
		gateR, gateW, err := os.Pipe()
		if err != nil {
			closeAll(nearR, nearW)
			return nil, fmt.Errorf("fleet: handoff pipe: %w", err)
		}
		ours, theirs = []*os.File{nearR, gateW}, []*os.File{nearW, gateR}
		// ExtraFiles[i] is the child's descriptor 3+i.
		cmd.ExtraFiles = theirs
		cmd.Env = append(cmd.Env, HandoffEnv+"=1")
		c.near, c.gateW = make(chan struct{}), gateW
	}
	// Pdeathsig follows the forking thread: lockedstart keeps it.
	err := lockedstart.Start(cmd, func(err error) {
		flushOutput(cmd)
		code, err := exitCode(err)
		c.done <- exitResult{code, err}
	})
	closeAll(theirs...)
	if err != nil {
		closeAll(ours...)
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	c.proc, c.pid = cmd.Process, cmd.Process.Pid
	if nearR != nil {
		// Ends at the child's exit at the latest (EOF), which closes its end.
		go func() {
			defer nearR.Close()
			if n, _ := nearR.Read(make([]byte, 1)); n == 1 {
				close(c.near)
			}
		}()
	}
	f.count(func(s *Stats) { s.Starts++; s.Running++ })
	f.log.Info("child started", zap.Int("slot", slot), zap.Int("pid", c.pid), zap.Bool("standing_by", standby))
	return c, nil
}

// closeAll closes files whose close errors tell nothing.
func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// reaped records the end of a child.
func (f *Fleet) reaped() {
	f.count(func(s *Stats) { s.Running-- })
}

// await waits for c to exit, signalling it to drain if ctx ends first. When
// c says its exit is near, it starts the successor into *next, which stands
// by; a successor that exits before its turn is dropped. It returns c's exit
// code (-1 when killed by a signal).
func (f *Fleet) await(ctx context.Context, slot int, c *child, next **child) (int, error) {
	near := c.near
	for {
		var nextDone chan exitResult
		if *next != nil {
			nextDone = (*next).done
		}
		select {
		case r := <-c.done:
			f.reaped()
			return r.code, r.err
		case <-near:
			near = nil
			if *next == nil {
				n, err := f.start(slot, true)
				if err != nil {
					f.log.Warn("starting the successor failed; it starts after the exit instead", zap.Int("slot", slot), zap.Error(err))
					continue
				}
				*next = n
			}
		case r := <-nextDone:
			f.reaped()
			*next = nil
			f.count(func(s *Stats) { s.Crashes++ })
			f.log.Warn("the successor exited while standing by; a new one starts after the exit", zap.Int("slot", slot),
				zap.Int("exit_code", r.code), zap.Error(r.err))
		case <-ctx.Done():
			if *next != nil {
				// It goes at once, while c drains (keepRunning reaps it):
				// its gate closes unopened, and SIGTERM stops it also
				// before it reads the gate (still checking its database).
				(*next).abandon()
				(*next).terminate()
			}
			return f.stop(c)
		}
	}
}

// stop sends c SIGTERM (it drains), waits up to StopTimeout, then kills
// its process group, and returns its exit code once it is reaped.
func (f *Fleet) stop(c *child) (int, error) {
	c.abandon() // if it still stands by
	c.terminate()
	t := time.NewTimer(f.cfg.StopTimeout)
	defer t.Stop()
	select {
	case r := <-c.done:
		f.reaped()
		f.log.Info("child stopped", zap.Int("pid", c.pid), zap.Int("exit_code", r.code))
		return r.code, nil
	case <-t.C:
	}
	var r exitResult
	select {
	case r = <-c.done:
		// Reaped as the timer fired: its group id may be another's by now.
	default:
		f.log.Warn("child did not drain in time; killing its process group", zap.Int("pid", c.pid))
		// By group id, which is only as safe as the child is unreaped; the
		// check above leaves a window of the reaper's few instructions. The
		// group takes whatever the child started without a group of its
		// own (Chrome has its own, killed by its parent-death signal).
		_ = syscall.Kill(-c.pid, syscall.SIGKILL)
		r = <-c.done
	}
	f.reaped()
	return r.code, r.err
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
