package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/farm/fleet"
)

// respawnStopGrace is how long past --drain-timeout a respawned consumer gets
// after SIGTERM before it is killed: past the drain it still hands its jobs
// back and marks its node exited.
const respawnStopGrace = 30 * time.Second

// runRespawn is `farm consumer --respawn`: this process stays up as the
// container's main process and runs the consumer as its child, restarting it
// at once when it exits exitRecycle after --exit-after-jobs jobs (the same
// fresh-process recycle systemd gives), and after a doubling backoff when it
// crashes. Docker and Kubernetes never see the recycle, so they never back
// off. SIGTERM/SIGINT reach the child, which drains; this process exits 0
// once it has. A child that exits exitUsage (bad configuration) is not
// restarted: this process exits with it too (stopRespawning).
func runRespawn(ctx context.Context, env *environment, args []string, drain time.Duration, log *zap.Logger) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--respawn: finding this binary: %w", err)
	}
	// The child gets the same flags and environment; the last --respawn wins,
	// so it runs the consumer itself.
	childArgs := append(append([]string{"consumer"}, args...), "--respawn=false")
	fl, err := fleet.New(fleet.Config{
		Count: 1,
		Command: func(int) *exec.Cmd {
			cmd := exec.Command(self, childArgs...)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, env.stdout, env.stderr
			return cmd
		},
		StopTimeout: drain + respawnStopGrace,
		// The next child boots its Chrome while this one ends its last jobs.
		Handoff: true,
		// A configuration error comes back on every restart: end with it, so
		// the orchestrator shows the failure rather than a container that runs.
		StopOn: stopRespawning,
		Logger: log.Named("respawn"),
	})
	if err != nil {
		return err
	}
	log.Info(fmt.Sprintf("respawn: running the consumer as a child process; it is restarted in place on exit %d", exitRecycle),
		zap.Duration("stop_timeout", drain+respawnStopGrace))
	if err := fl.Run(ctx); err != nil {
		var ee *fleet.ExitError
		if errors.As(err, &ee) {
			return usagef("the consumer process exited with code %d (bad configuration: see its message above); not restarting it", ee.Code)
		}
		return err
	}
	s := fl.Stats()
	log.Info("respawn: stopped", zap.Int("starts", s.Starts), zap.Int("recycles", s.Recycles), zap.Int("crashes", s.Crashes))
	return nil
}

// stopRespawning reports whether a consumer child's exit code is one that a
// restart cannot fix: a bad configuration, exitUsage. A crash is restarted,
// Go's exit 2 on a panic included (TestRespawnRestartsAPanickedChild).
func stopRespawning(code int) bool { return code == exitUsage }
