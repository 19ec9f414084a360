package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/farm"
)

// buildFarm builds the real binary once for the end-to-end tests.
func buildFarm(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "farm")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// upDataDir returns a fresh temporary directory and a data dir for farm up
// in it, whose parents the PostgreSQL account (not root) can enter.
func upDataDir(t *testing.T) (work, dataDir string) {
	t.Helper()
	work = t.TempDir()
	for _, d := range []string{filepath.Dir(work), work} {
		os.Chmod(d, 0o755)
	}
	return work, filepath.Join(work, "data")
}

// processesMentioning lists the pids whose command line contains s.
func processesMentioning(s string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// `farm up --demo` on a fresh data dir with low recycle thresholds: exit 0,
// every page completed, Chrome recycled and a consumer restarted, and
// nothing — no Chrome, no PostgreSQL — left running afterwards.
func TestUpDemoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds the binary and runs Chrome")
	}
	bin := buildFarm(t)
	work, dataDir := upDataDir(t)
	tmp := filepath.Join(work, "tmp") // Chrome's profile dirs land here: ours to find
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	const jobs = 30
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "up", "--demo", "--demo-jobs", strconv.Itoa(jobs),
		// Three Chromes of 2 jobs take 6 of a process's 9: a Chrome per
		// session recycles within the process.
		"--consumers", "2", "--capacity", "3", "--chrome-recycle-jobs", "2", "--exit-after-jobs", "9",
		"--data-dir", dataDir, "--listen", "127.0.0.1:0")
	cmd.Env = append(withoutFarmSettings(os.Environ()), "TMPDIR="+tmp)
	// On timeout, stop the farm the way an operator would (Ctrl-C), so the
	// test still finds out whether everything shuts down cleanly.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 2 * time.Minute
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	logs := func() string {
		var b strings.Builder
		matches, _ := filepath.Glob(filepath.Join(dataDir, "logs", "*.log"))
		for _, m := range matches {
			data, _ := os.ReadFile(m)
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			if len(lines) > 15 {
				lines = lines[len(lines)-15:]
			}
			b.WriteString("--- " + m + "\n" + strings.Join(lines, "\n") + "\n")
		}
		return b.String()
	}
	if err != nil {
		t.Fatalf("farm up --demo: %v\nstdout:\n%s\nstderr tail:\n%s\n%s", err, stdout.String(), tail(stderr.String(), 2000), logs())
	}
	out := stdout.String()
	t.Logf("summary:\n%s", out)
	if !strings.Contains(stderr.String(), "politeness per host, farm-wide: at most 4 jobs at once") {
		t.Errorf("farm up did not print the politeness it runs with:\n%s", tail(stderr.String(), 2000))
	}
	m := regexp.MustCompile(`(\d+) pages in .*: (\d+) completed, (\d+) failed`).FindStringSubmatch(out)
	if m == nil || m[1] != strconv.Itoa(jobs) || m[2] != strconv.Itoa(jobs) || m[3] != "0" {
		t.Fatalf("summary does not say all %d pages completed:\n%s", jobs, out)
	}
	m = regexp.MustCompile(`(\d+) Chrome recycles, (\d+) Chrome starts, (\d+) consumer process restarts \((\d+) recycles by exit 75`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no recycling summary:\n%s", out)
	}
	recycles, _ := strconv.Atoi(m[1])
	restarts, _ := strconv.Atoi(m[4])
	if recycles < 1 || restarts < 1 {
		t.Fatalf("want at least one Chrome recycle and one consumer restart by exit 75; got %d and %d", recycles, restarts)
	}
	// Each consumer's successor booted while it ended its last jobs, and
	// took over when it exited (fleet.Config.Handoff).
	if fl, _ := os.ReadFile(filepath.Join(dataDir, "logs", "farm-up.log")); !strings.Contains(string(fl), `"successor_standing_by":true`) {
		t.Errorf("no consumer handed over to a successor standing by:\n%s", logs())
	}
	if pids := processesMentioning(tmp); len(pids) > 0 {
		t.Errorf("Chrome processes left running: %v", pids)
	}
	if pids := processesMentioning(dataDir); len(pids) > 0 {
		t.Errorf("PostgreSQL (or other) processes left running on the data dir: %v", pids)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) > 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("temporary files left behind: %v", names)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// withoutFarmSettings drops FARM_* from an environment, so the test runs
// `farm up` with its defaults whatever the developer's shell exports.
func withoutFarmSettings(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "FARM_") {
			out = append(out, kv)
		}
	}
	return out
}

// A FARM_* setting the consumers inherit and would refuse at every restart
// is refused by farm up itself, by the consumer's own check, before it
// starts anything: exit 64 naming the variable, rather than a dashboard
// without nodes (or, before the check, a consumer's exit 64 to look up in
// its log).
func TestUpStopsOnAConsumersBadConfiguration(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds the binary")
	}
	bin := buildFarm(t)
	_, dataDir := upDataDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "up", "--consumers", "1", "--data-dir", dataDir, "--listen", "127.0.0.1:0")
	cmd.Env = append(withoutFarmSettings(os.Environ()), "FARM_MAX_CONSOLE_ERRORS=0")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
		t.Fatalf("farm up with a consumer's bad setting: %v (context %v), want exit %d\n%s", err, ctx.Err(), exitUsage, tail(stderr.String(), 2000))
	}
	if !strings.Contains(stderr.String(), "FARM_MAX_CONSOLE_ERRORS") {
		t.Errorf("farm up does not name the setting:\n%s", tail(stderr.String(), 2000))
	}
	if _, err := os.Stat(filepath.Join(dataDir, "logs", "consumer-1.log")); err == nil {
		t.Errorf("a consumer was started before the setting was refused")
	}
}

// farm up checks what it passes its consumers by the consumers' own rule
// before it starts anything (no PostgreSQL, no producer): a bad value is
// exit 64 naming farm up's flag, or the variable it read it from.
func TestUpChecksTheConsumersOptionsFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"flag", nil, []string{"--allow-destination", "not-an-ip"}, "--allow-destination"},
		{"variable", map[string]string{"FARM_ALLOW_DESTINATION": "not-an-ip"}, nil, "(set by FARM_ALLOW_DESTINATION in the environment"},
		{"deny variable", map[string]string{"FARM_DENY_DESTINATION": "not-an-ip"}, nil, "--deny-destination"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			env := map[string]string{"FARM_DATA_DIR": dir, "FARM_CHROME": "/bin/true", "FARM_LISTEN": "127.0.0.1:0"}
			for k, v := range tc.env {
				env[k] = v
			}
			code, _, errOut := farmRun(t, "", env, append([]string{"up"}, tc.args...)...)
			if code != exitUsage || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "not-an-ip") {
				t.Fatalf("exit %d, %q; want %d and %q", code, errOut, exitUsage, tc.want)
			}
			if tc.env == nil && strings.Contains(errOut, "in the environment") {
				t.Errorf("%q: the flag was on farm up's command line", errOut)
			}
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				t.Errorf("farm up left %v in its data dir: it started something before refusing", entries)
			}
		})
	}
}

// A --chrome or --pg-bin that names no executable is a value the flag
// cannot take: exit 64 naming it, before anything starts, for farm up and
// (--chrome) farm consumer. Only the path is checked.
func TestBrowserAndPostgresPathsChecked(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "chrome")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		chrome, want string // want "": accepted
	}{
		{"/nonexistent", "--chrome /nonexistent: no such file"},
		{t.TempDir(), ": not a file"},
		{notExec, ": not executable"},
		{"no-such-browser-on-path", "--chrome no-such-browser-on-path: no such executable on PATH"},
		{"/bin/true", ""},
		{"true", ""},
	} {
		_, err := parseConsumerFlags([]string{"--chrome", tc.chrome}, nil)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("farm consumer --chrome %s: %v, want %q", tc.chrome, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--chrome", "/nonexistent"}, "--chrome /nonexistent: no such file"},
		{[]string{"--chrome", "/bin/true", "--pg-bin", "/nonexistent"}, "--pg-bin: /nonexistent holds no executable initdb or postgres"},
	} {
		dir := t.TempDir()
		code, _, errOut := farmRun(t, "", map[string]string{"FARM_DATA_DIR": dir, "FARM_LISTEN": "127.0.0.1:0"}, append([]string{"up"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("farm up %v: exit %d, %q; want %d and %q", tc.args, code, errOut, exitUsage, tc.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("farm up %v left %v in its data dir: it started something before refusing", tc.args, entries)
		}
	}
}

// farm up's private cluster has room, by the connection budget, for every
// process it starts: each consumer slot's process and its successor
// standing by, the producer, and the operator's commands beside them; and
// it refuses more consumers than one machine can run.
func TestUpClusterSizedForItsConsumers(t *testing.T) {
	most := maxConsumersPerCPU * runtime.NumCPU()
	for _, n := range []int{1, 2, 4, 50, 99, most} {
		cfg := upClusterConfig(t.TempDir(), "", n, nil)
		got, err := strconv.Atoi(cfg.Settings["max_connections"])
		need := n*2*farm.ConsumerConnBudget + farm.ProducerConnBudget(upPoolSize, false) + upToolConns
		if err != nil || got < need {
			t.Errorf("%d consumers: max_connections %q, want at least %d", n, cfg.Settings["max_connections"], need)
		}
	}
	code, _, errOut := farmRun(t, "", map[string]string{"FARM_DATA_DIR": t.TempDir(), "FARM_CHROME": "/bin/true"},
		"up", "--consumers", strconv.Itoa(most+1))
	if code != exitUsage || !strings.Contains(errOut, fmt.Sprintf("--consumers %d: at most %d on this machine", most+1, most)) {
		t.Errorf("farm up --consumers %d: exit %d, %q; want %d naming the flag and the bound", most+1, code, errOut, exitUsage)
	}
}
