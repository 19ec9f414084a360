package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/browserfarm/browserfarm/internal/pgtest"
)

// initScriptEnv makes this test binary run `farm init -- sh -c SCRIPT` as
// its process (an init reaps every child of its process, so not in the
// test's own).
const initScriptEnv = "FARM_TEST_INIT_SCRIPT"

// TestInitCommand: `farm init` exits with its command's status, and passes
// the stop signals on rather than stopping on them itself: a SIGTERM and
// then a SIGHUP both reach the command, where the other commands would
// exit at once on the second.
func TestInitCommand(t *testing.T) {
	if script := os.Getenv(initScriptEnv); script != "" {
		os.Exit(realMain([]string{"farm", "init", "--", "sh", "-c", script}, &environment{
			stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, environ: os.Environ,
		}))
	}
	for _, tc := range []struct {
		name, script string
		want         int
	}{
		{"success", "exit 0", exitOK},
		{"recycle", "exit 75", exitRecycle},
		{"killed", "kill -KILL $$", 128 + 9},
		{"two stop signals", `
			sleep 60 >/dev/null & s=$!
			trap 't=1' TERM
			trap 'kill $s; [ "$t" = 1 ] && exit 7; exit 8' HUP
			kill -TERM $PPID; wait $s
			kill -HUP $PPID; wait $s; exit 9`, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestInitCommand$")
			// The stand-in URL keeps the child from starting a PostgreSQL
			// of its own (pgtest.Main).
			cmd.Env = append(os.Environ(), initScriptEnv+"="+tc.script, pgtest.EnvURL+"=postgres://unused")
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Errorf("exit code %d, want %d\n%s", code, tc.want, out)
			}
		})
	}
}

func TestInitUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "a program to run is required"},
		{[]string{"--"}, "a program to run is required"},
		{[]string{"--", "no-such-program-here"}, `program "no-such-program-here"`},
		{[]string{"--frob", "farm"}, "flag provided but not defined: -frob"},
	} {
		code, _, errOut := farmRun(t, "", nil, append([]string{"init"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("farm init %q: code %d, stderr %q; want %d and %q", tc.args, code, errOut, exitUsage, tc.want)
		}
	}
}
