package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// logLine is the part of a zap JSON line the respawn test reads.
type logLine struct {
	TS       string `json:"ts"`
	Logger   string `json:"logger"`
	Msg      string `json:"msg"`
	PID      int    `json:"pid"`
	ExitCode int    `json:"exit_code"`
}

func parseLogLines(t *testing.T, b []byte) []logLine {
	t.Helper()
	var out []logLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg != "" {
			out = append(out, l)
		}
	}
	return out
}

func (l logLine) time(t *testing.T) time.Time {
	t.Helper()
	ts, err := time.Parse("2006-01-02T15:04:05.000Z0700", l.TS)
	if err != nil {
		t.Fatalf("log time %q: %v", l.TS, err)
	}
	return ts
}

// TestConsumerRespawn is the container's main process: `farm consumer
// --respawn --exit-after-jobs 80` through 200 pages. The outer process never
// exits while it works; its consumer child exits 75 twice and is replaced at
// once each time (no crash backoff) by a successor started before the exit
// (the handoff); SIGTERM to the outer process drains the third child and
// the outer exits 0; every job completed exactly once.
func TestConsumerRespawn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs Chromium")
	}
	bin := buildFarm(t)
	url, q := migratedDB(t)
	site := testutil.StartSite(t, testsite.Options{Items: 10})
	specs := make([]jobqueue.Spec, 200)
	for i := range specs {
		specs[i] = jobqueue.Spec{URL: fmt.Sprintf("%s/page/%d", site.URL, i+1), Wait: &jobqueue.Wait{Selector: "#ready"}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	batch, ids, err := q.Enqueue(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	const node = "respawn-node"
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { keepAssigned(ctx, q, node) })

	profiles := t.TempDir()
	logs := newLogBuffer()
	cmd := exec.Command(bin, "consumer", "--respawn", "--database-url", url, "--node-id", node,
		"--exit-after-jobs", "80", "--chrome-profile-root", profiles, "--heartbeat-interval", "1s", "--log-format", "json",
		"--allow-destination", strings.TrimPrefix(site.URL, "http://"))
	cmd.Env = withoutFarmSettings(os.Environ())
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	dump := func() string { return tail(logs.String(), 4000) }

	deadline := time.Now().Add(5 * time.Minute)
	for {
		c, err := q.BatchCounts(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if c.By[jobqueue.StateCompleted] == 200 {
			break
		}
		if c.By[jobqueue.StateFailed] > 0 {
			t.Fatalf("jobs failed: %v\n%s", c.By, dump())
		}
		select {
		case err := <-exited:
			t.Fatalf("the outer process exited (%v) before the work was done\n%s", err, dump())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done after 5 minutes: %v\n%s", c.By, dump())
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("outer process after SIGTERM: %v, want exit 0\n%s", err, dump())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("outer process did not exit after SIGTERM\n%s", dump())
	}

	lines := parseLogLines(t, []byte(logs.String()))
	var starts, recycles, crashes []logLine
	for _, l := range lines {
		if l.Logger != "respawn" {
			continue
		}
		switch l.Msg {
		case "child started":
			starts = append(starts, l)
		case "child recycled; restarting":
			recycles = append(recycles, l)
		case "child exited unexpectedly; restarting after backoff":
			crashes = append(crashes, l)
		}
	}
	if len(starts) != 3 || len(recycles) != 2 || len(crashes) != 0 {
		t.Fatalf("child starts/recycles/crashes = %d/%d/%d, want 3/2/0\n%s", len(starts), len(recycles), len(crashes), dump())
	}
	if starts[0].PID == starts[1].PID || starts[1].PID == starts[2].PID {
		t.Errorf("children were not replaced: pids %d, %d, %d", starts[0].PID, starts[1].PID, starts[2].PID)
	}

	// Every job completed once; the time from each recycle to the next claim.
	started := make([]time.Time, 0, len(ids))
	for _, id := range ids {
		j, err := q.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != jobqueue.StateCompleted || j.Attempts != 1 || j.StartedAt == nil {
			t.Errorf("job %d: state %s, %d attempts; want completed at the first attempt", id, j.State, j.Attempts)
			continue
		}
		started = append(started, *j.StartedAt)
	}
	for i, r := range recycles {
		exitAt := r.time(t)
		var next time.Time
		for _, s := range started {
			if s.After(exitAt) && (next.IsZero() || s.Before(next)) {
				next = s
			}
		}
		if next.IsZero() {
			t.Errorf("no job started after recycle %d", i+1)
			continue
		}
		ahead := exitAt.Sub(starts[i+1].time(t))
		if ahead <= 0 {
			t.Errorf("recycle %d: the next child started %s after the exit, want before it (the handoff)", i+1, -ahead)
		}
		t.Logf("recycle %d: child exited 75 at %s; the next child had started %s before; next job claimed %s after the exit",
			i+1, exitAt.Format("15:04:05.000"), ahead.Round(time.Millisecond), next.Sub(exitAt).Round(time.Millisecond))
	}
	n, err := q.GetNode(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if n.State != jobqueue.NodeExited || n.ProcessRestarts != 2 {
		t.Errorf("node after the run: state %s, %d process restarts; want exited, 2", n.State, n.ProcessRestarts)
	}
	if pids := processesMentioning(profiles); len(pids) > 0 {
		t.Errorf("processes left running: %v", pids)
	}
	if ents, _ := os.ReadDir(profiles); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("profile dirs left behind: %s", strings.Join(names, ", "))
	}
}

// A consumer child that exits exitUsage (bad configuration) is not restarted
// in a loop: the respawn parent exits with it as well, so the orchestrator
// shows it.
func TestConsumerRespawnStopsOnBadConfiguration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildFarm(t)
	cmd := exec.Command(bin, "consumer", "--respawn", "--database-url", "postgres://x:notaport/db", "--log-format", "json")
	cmd.Env = withoutFarmSettings(os.Environ())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
		t.Fatalf("exit: %v, want code %d\n%s", err, exitUsage, out)
	}
	if n := strings.Count(string(out), `"msg":"child started"`); n != 1 {
		t.Errorf("the child started %d times, want once\n%s", n, out)
	}
	if !strings.Contains(string(out), "--database-url") || !strings.Contains(string(out), "not restarting it") {
		t.Errorf("output does not name the problem:\n%s", out)
	}
}

// TestRespawnRestartsAPanickedChild: Go's runtime exits 2 on a panic, the
// code bad usage had until it became 64: the respawn parent stopped for good
// on a consumer's crash, and systemd (RestartPreventExitStatus) did not
// restart it either. A panicking process's code is one the parent restarts.
func TestRespawnRestartsAPanickedChild(t *testing.T) {
	if os.Getenv("FARM_TEST_PANIC") == "1" {
		panic("a crash of the consumer")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestRespawnRestartsAPanickedChild$")
	cmd.Env = append(os.Environ(), "FARM_TEST_PANIC=1")
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the panicking process: %v, want an exit code", err)
	}
	if stopRespawning(ee.ExitCode()) {
		t.Errorf("a child that panicked (exit %d) is not restarted", ee.ExitCode())
	}
	if !stopRespawning(exitUsage) {
		t.Errorf("a child with a bad configuration (exit %d) is restarted", exitUsage)
	}
}
