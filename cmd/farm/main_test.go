package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/pgtest"
	"github.com/browserfarm/browserfarm/jobqueue"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// farmRun runs one farm command in-process and returns its exit code and output.
func farmRun(t *testing.T, stdin string, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := realMain(append([]string{"farm"}, args...), &environment{
		stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb,
		getenv: func(k string) string { return env[k] }, args0: "farm",
	})
	return code, out.String(), errb.String()
}

// migratedDB is a fresh database with the schema, and a queue on it.
func migratedDB(t *testing.T) (string, *jobqueue.Queue) {
	t.Helper()
	url := pgtest.NewDB(t)
	pool, err := openPool(context.Background(), url, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := jobqueue.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return url, jobqueue.New(pool, jobqueue.Config{})
}

func TestUsageAndUnknownCommand(t *testing.T) {
	if code, _, errOut := farmRun(t, "", nil); code != exitUsage || !strings.Contains(errOut, "commands:") {
		t.Errorf("no command: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := farmRun(t, "", nil, "frobnicate"); code != exitUsage || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: code %d, stderr %q", code, errOut)
	}
	for _, c := range commands() {
		code, _, errOut := farmRun(t, "", nil, c.name, "--help")
		if code != exitOK || !strings.Contains(errOut, "usage: farm "+c.name) {
			t.Errorf("%s --help: code %d, stderr %q", c.name, code, errOut)
		}
	}
}

func TestEnvironmentConfiguresFlags(t *testing.T) {
	// A flag beats the environment, which beats the default.
	fs := newFlagSet("x", "", &bytes.Buffer{})
	n := fs.Int("exit-after-jobs", 80, "")
	s := fs.String("node-id", "", "")
	err := fs.parse([]string{"--node-id", "from-flag"}, func(k string) string {
		return map[string]string{"FARM_EXIT_AFTER_JOBS": "12", "FARM_NODE_ID": "from-env"}[k]
	})
	if err != nil || *n != 12 || *s != "from-flag" {
		t.Fatalf("exit-after-jobs=%d node-id=%q err=%v", *n, *s, err)
	}
	fs = newFlagSet("x", "", &bytes.Buffer{})
	fs.Int("exit-after-jobs", 80, "")
	err = fs.parse(nil, func(k string) string { return map[string]string{"FARM_EXIT_AFTER_JOBS": "lots"}[k] })
	if err == nil || !strings.Contains(err.Error(), `FARM_EXIT_AFTER_JOBS="lots"`) {
		t.Fatalf("bad env value: err = %v", err)
	}
}

func TestFlagsAfterArguments(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantWait bool
		wantArgs []string
	}{
		{[]string{"http://a/", "--wait"}, true, []string{"http://a/"}},
		{[]string{"--wait", "http://a/", "http://b/"}, true, []string{"http://a/", "http://b/"}},
		{[]string{"http://a/", "--", "--wait"}, false, []string{"http://a/", "--wait"}},
		{[]string{"-", "--wait"}, true, []string{"-"}},
		{nil, false, nil},
	} {
		fs := newFlagSet("x", "", &bytes.Buffer{})
		wait := fs.Bool("wait", false, "")
		if err := fs.parse(tc.args, func(string) string { return "" }); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if *wait != tc.wantWait || strings.Join(fs.Args(), " ") != strings.Join(tc.wantArgs, " ") {
			t.Errorf("%q: wait=%v args=%q; want %v %q", tc.args, *wait, fs.Args(), tc.wantWait, tc.wantArgs)
		}
	}
}

// completeJob completes one job as nodeID through CompleteMany, the
// product's form, bound to no registration of the node (incarnation 0
// passes every fence).
func completeJob(ctx context.Context, q *jobqueue.Queue, jobID int64, nodeID string, res jobqueue.Result) error {
	out, err := q.CompleteMany(ctx, []jobqueue.Completion{{JobID: jobID, NodeID: nodeID, Result: res}})
	if err != nil {
		return err
	}
	return out[0].Err
}

// The commands that take flags only refuse an argument rather than ignore
// it: `farm results BATCH` would otherwise export every batch.
func TestFlagsOnlyCommandsRefuseArguments(t *testing.T) {
	for _, cmd := range []string{"migrate", "status", "results", "producer", "consumer", "up", "health"} {
		code, _, stderr := farmRun(t, "", nil, cmd, "3f2a0000-0000-4000-8000-000000000000")
		if code != exitUsage || !strings.Contains(stderr, "unexpected arguments: 3f2a0000") {
			t.Errorf("farm %s with an argument: exit %d, %q; want %d, unexpected arguments", cmd, code, stderr, exitUsage)
		}
	}
}

// TestHangupStopsGracefully: SIGHUP (a closed terminal) starts the same
// graceful stop as SIGINT and SIGTERM instead of killing the process.
func TestHangupStopsGracefully(t *testing.T) {
	// A backstop: without it a SIGHUP nobody asked for ends the test binary.
	backstop := make(chan os.Signal, 1)
	signal.Notify(backstop, syscall.SIGHUP)
	defer signal.Stop(backstop)
	ctx, stop := signalContext(io.Discard)
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	<-backstop
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGHUP did not start a stop")
	}
}

func TestUsageErrorsNameTheEnvironment(t *testing.T) {
	env := map[string]string{"FARM_API_TOKEN": "short", "FARM_CAPACITY": "0"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		msg  string
		args []string
		want string
	}{
		{"--api-token: 5 characters; a token needs at least 16", nil, " (set by FARM_API_TOKEN in the environment, not on the command line)"},
		{"--api-token: 5 characters", []string{"--api-token", "short"}, ""},
		{"--api-token: 5 characters", []string{"--api-token=short"}, ""},
		{"--api-token: 5 characters", []string{"-api-token", "short"}, ""},
		{"--read-token: 5 characters", nil, ""}, // its variable is not set
		{`FARM_CAPACITY="0": --capacity 0`, nil, ""},
		{"--capacity 0 and --api-token short", nil, " (set by FARM_CAPACITY, FARM_API_TOKEN in the environment, not on the command line)"},
		{"no flag named", nil, ""},
	}
	for _, tc := range tests {
		if got := fromEnvironment(tc.msg, tc.args, getenv); got != tc.want {
			t.Errorf("fromEnvironment(%q, %q) = %q, want %q", tc.msg, tc.args, got, tc.want)
		}
	}
	code, _, errOut := farmRun(t, "", map[string]string{"FARM_API_TOKEN": "change-me"}, "producer")
	if code != exitUsage || !strings.Contains(errOut, "--api-token") || !strings.Contains(errOut, "set by FARM_API_TOKEN") {
		t.Errorf("producer with FARM_API_TOKEN=change-me: %d %q; want the variable named", code, errOut)
	}
}
