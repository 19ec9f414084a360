package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/pgtest"
	"github.com/browserfarm/browserfarm/internal/testutil"
)

// initScriptEnv makes this test binary run `farm init -- sh -c SCRIPT`.
const initScriptEnv = "FARM_TEST_INIT_SCRIPT"

// TestInitCommand: `farm init` exits with its command's status.
func TestInitCommand(t *testing.T) {
	if script := os.Getenv(initScriptEnv); script != "" {
		os.Exit(realMain([]string{"farm", "init", "--", "sh", "-c", script}, processEnvironment()))
	}
	for _, tc := range []struct {
		name, script string
		want         int
	}{
		{"success", "exit 0", exitOK},
		{"recycle", "exit 75", exitRecycle},
		{"killed", "kill -KILL $$", 128 + 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := initHelper(tc.script).CombinedOutput()
			if code := testutil.ExitCode(t, err); code != tc.want {
				t.Errorf("exit code %d, want %d\n%s", code, tc.want, out)
			}
		})
	}
}

// TestInitPassesStopSignalsOn: `farm init` passes a SIGTERM and then a
// SIGHUP on to its command rather than stopping on them itself, where the
// other commands exit at once on a second stop signal.
func TestInitPassesStopSignalsOn(t *testing.T) {
	cmd := initHelper(`
		sleep 60 >/dev/null 2>&1 & s=$!
		trap 't=1; echo TERM' TERM
		trap 'kill $s; wait $s; [ "$t" = 1 ] && exit 7; exit 8' HUP
		echo ready
		while kill -0 $s 2>/dev/null; do wait $s; done
		exit 9`)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A test whose signal is not passed on ends here: the script ends.
	watchdog := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill(); _ = out.Close() })
	defer watchdog.Stop()
	lines := bufio.NewScanner(out)
	for _, step := range []struct {
		want string
		then syscall.Signal
	}{{"ready", syscall.SIGTERM}, {"TERM", syscall.SIGHUP}} {
		if !lines.Scan() || lines.Text() != step.want {
			t.Fatalf("the command wrote %q (%v), want %q", lines.Text(), lines.Err(), step.want)
		}
		if err := cmd.Process.Signal(step.then); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = io.Copy(io.Discard, out)
	if code := testutil.ExitCode(t, cmd.Wait()); code != 7 {
		t.Errorf("exit code %d, want the command's 7 (it got both signals)", code)
	}
}

// initHelper is this test binary set to run `farm init -- sh -c script`
// (an init reaps every child of its process, so not in the test's own).
func initHelper(script string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestInitCommand$")
	// The stand-in URL keeps the child from starting a PostgreSQL of its
	// own (pgtest.Main).
	cmd.Env = append(os.Environ(), initScriptEnv+"="+script, pgtest.EnvURL+"=postgres://unused")
	return cmd
}

func TestInitUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "a program to run is required"},
		{[]string{"--"}, "a program to run is required"},
		{[]string{"--", "no-such-program-here"}, `program "no-such-program-here"`},
		{[]string{"--frob", "farm"}, "flag provided but not defined: --frob"},
	} {
		code, _, errOut := farmRun(t, "", nil, append([]string{"init"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("farm init %q: code %d, stderr %q; want %d and %q", tc.args, code, errOut, exitUsage, tc.want)
		}
	}
}
