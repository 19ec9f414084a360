package autoscale

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
)

// Driver applies a desired node count to whatever runs the consumers.
// SetDesired must be safe to call again with the same number (the
// Reconciler re-applies periodically to correct drift) and must not panic
// on any error from the orchestrator.
type Driver interface {
	// Name is the driver's flag value ("none", "aws", "exec").
	Name() string
	SetDesired(ctx context.Context, n int) error
}

// CurrentReader is a Driver that can read back the count the orchestrator
// now holds (an Auto Scaling group's desired capacity). A reconciler
// starting a term starts from it rather than from the live nodes: the
// instances another producer asked for and that are still booting are not
// live nodes yet, and a count computed from the live ones alone would give
// them up at once, without the cooldown; and the live nodes beyond it are
// leaving, given up by the last leader.
type CurrentReader interface {
	Current(ctx context.Context) (int, error)
}

// Driver names accepted by NewDriver.
const (
	DriverNone = "none"
	DriverAWS  = "aws"
	DriverExec = "exec"
)

// DriverConfig selects and configures a driver (the --autoscale-driver flag
// and its companions).
type DriverConfig struct {
	// Kind is DriverNone (default), DriverAWS or DriverExec.
	Kind string
	AWS  AWSConfig
	Exec ExecConfig
}

// NewDriver builds the driver named by cfg.Kind. The AWS driver loads
// credentials from the SDK's default chain here, without any network call.
func NewDriver(ctx context.Context, cfg DriverConfig, log *zap.Logger) (Driver, error) {
	switch cfg.Kind {
	case "", DriverNone:
		return &NoneDriver{}, nil
	case DriverAWS:
		return NewAWS(ctx, cfg.AWS, log)
	case DriverExec:
		return NewExec(cfg.Exec, log)
	default:
		return nil, fmt.Errorf("autoscale: unknown driver %q (want %s, %s or %s)", cfg.Kind, DriverNone, DriverAWS, DriverExec)
	}
}

// NoneDriver only records the number: the producer reports it on /metrics,
// the API and the dashboard, where Kubernetes HPA/KEDA or an operator reads
// it. The zero value is ready to use.
type NoneDriver struct {
	last atomic.Int64 // desired+1, so zero means "never set"
}

// Name returns "none".
func (*NoneDriver) Name() string { return DriverNone }

// SetDesired records n.
func (d *NoneDriver) SetDesired(_ context.Context, n int) error {
	if n < 0 {
		return fmt.Errorf("autoscale: none: negative desired count %d", n)
	}
	d.last.Store(int64(n) + 1)
	return nil
}

// Last returns the last recorded count and whether one was recorded.
func (d *NoneDriver) Last() (int, bool) {
	v := d.last.Load()
	return int(v - 1), v > 0
}

// Defaults for ExecConfig.
const (
	DefaultExecTimeout   = 30 * time.Second
	DefaultExecMaxOutput = 16 << 10
)

// ExecConfig configures the exec driver, for orchestrators without a
// built-in driver. Zero fields take their defaults; none can be off, and a
// negative one is an error naming it.
type ExecConfig struct {
	// Command is the program and its leading arguments; the desired count
	// is appended as the last argument and also set in the environment as
	// FARM_DESIRED_NODES. For a shell pipeline use
	// []string{"sh", "-c", `kubectl scale deploy/consumer --replicas="$FARM_DESIRED_NODES"`}.
	Command []string
	// Timeout bounds one run (default 30s); on expiry the command's whole
	// process group is killed.
	Timeout time.Duration
	// MaxOutput caps the combined stdout+stderr kept for the log
	// (default 16 KiB); the rest is counted and dropped.
	MaxOutput int
	// Env is the command's environment, as KEY=value entries, to which
	// FARM_DESIRED_NODES is added (nil: that variable alone). The command
	// does not inherit the producer's environment: that holds the
	// database URL and the API tokens, which a scaling script has no use
	// for and would hand on to whatever it runs.
	Env []string
}

// ExecDriver runs a configured command with the desired count.
type ExecDriver struct {
	cfg ExecConfig
	log *zap.Logger
	// mu serialises runs: two scaling commands racing each other could
	// apply the older count last.
	mu sync.Mutex
}

// NewExec returns an exec driver; the command must name a program.
func NewExec(cfg ExecConfig, log *zap.Logger) (*ExecDriver, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("autoscale: exec driver needs a command")
	}
	if err := errors.Join(
		cfgrule.Resolve("Timeout", &cfg.Timeout, DefaultExecTimeout, false),
		cfgrule.Resolve("MaxOutput", &cfg.MaxOutput, DefaultExecMaxOutput, false),
	); err != nil {
		return nil, fmt.Errorf("autoscale: exec driver: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	cfg.Command = append([]string(nil), cfg.Command...)
	cfg.Env = append([]string(nil), cfg.Env...)
	return &ExecDriver{cfg: cfg, log: log.Named("autoscale.exec")}, nil
}

// Name returns "exec".
func (*ExecDriver) Name() string { return DriverExec }

// SetDesired runs the command with n and waits for it (bounded by the
// timeout). A non-zero exit, a timeout or a failure to start is returned
// with the tail of the command's output; the output is logged either way.
func (d *ExecDriver) SetDesired(ctx context.Context, n int) error {
	if n < 0 {
		return fmt.Errorf("autoscale: exec: negative desired count %d", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	count := strconv.Itoa(n)
	args := append(append([]string(nil), d.cfg.Command[1:]...), count)
	cmd := exec.CommandContext(ctx, d.cfg.Command[0], args...)
	cmd.Env = append(append([]string(nil), d.cfg.Env...), "FARM_DESIRED_NODES="+count)
	out := &cappedBuffer{max: d.cfg.MaxOutput}
	cmd.Stdout = out
	cmd.Stderr = out
	// Its own process group, so a timeout kills what the command started
	// too (kubectl, a shell's children), not only the direct child.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A background child still holding stdout would otherwise keep Wait
	// blocked until the timeout even though the command itself is done.
	cmd.WaitDelay = time.Second

	start := time.Now()
	err := cmd.Start()
	if err != nil {
		return fmt.Errorf("autoscale: exec: start %q: %w", d.cfg.Command[0], err)
	}
	pgid := cmd.Process.Pid
	err = cmd.Wait()
	// Whatever the command left behind in its group goes with it; the
	// group is gone already in the usual case (ESRCH).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)

	// The command itself is not logged at every run: an operator's script
	// can carry a credential inline (curl -H "Authorization: ...").
	fields := []zap.Field{
		zap.Int("desired", n),
		zap.String("program", d.cfg.Command[0]),
		zap.Duration("took", time.Since(start)),
		zap.String("output", out.String()),
	}
	if out.dropped > 0 {
		fields = append(fields, zap.Int("output_dropped_bytes", out.dropped))
	}
	switch {
	case err == nil, errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil && cmd.ProcessState.Success():
		d.log.Info("scaling command done", fields...)
		return nil
	case ctx.Err() != nil:
		d.log.Error("scaling command timed out or was canceled", append(fields, zap.Error(err))...)
		return fmt.Errorf("autoscale: exec: %q with %d stopped after %v (%w): %s", d.cfg.Command[0], n, time.Since(start).Round(time.Millisecond), context.Cause(ctx), out.tail(512))
	default:
		d.log.Error("scaling command failed", append(fields, zap.Error(err))...)
		return fmt.Errorf("autoscale: exec: %q with %d: %w: %s", d.cfg.Command[0], n, err, out.tail(512))
	}
}

// cappedBuffer keeps the first max bytes written and counts the rest. The
// exec package writes to it from one goroutine when Stdout == Stderr; the
// mutex covers reads racing a late write after WaitDelay.
type cappedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	max     int
	dropped int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	keep := min(len(p), b.max-b.buf.Len())
	if keep > 0 {
		b.buf.Write(p[:keep])
	}
	b.dropped += len(p) - max(keep, 0)
	return len(p), nil
}

func (b *cappedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail returns at most n trailing bytes of the kept output, for error text.
func (b *cappedBuffer) tail(n int) string {
	s := bytes.TrimSpace([]byte(b.String()))
	if len(s) > n {
		s = s[len(s)-n:]
	}
	if len(s) == 0 {
		return "(no output)"
	}
	return string(s)
}
