package fleet

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := New(Config{Count: 0, Command: func(int) *exec.Cmd { return nil }}); err == nil || !strings.Contains(err.Error(), "Count") {
		t.Errorf("Count 0: err = %v", err)
	}
	if _, err := New(Config{Count: 1}); err == nil || !strings.Contains(err.Error(), "Command") {
		t.Errorf("no Command: err = %v", err)
	}
}

// A child that exits 75 is restarted at once; one that crashes is restarted
// after backoff. Each child appends a line to a file per start, so the test
// counts incarnations from what the children did, not from the fleet's own counters.
func TestRestartsRecycledAndCrashedChildren(t *testing.T) {
	dir := t.TempDir()
	script := func(slot int) *exec.Cmd {
		log := filepath.Join(dir, "slot"+strconv.Itoa(slot))
		code := "75"
		if slot == 1 {
			code = "3"
		}
		return exec.Command("sh", "-c", "echo start >> "+log+"; exit "+code)
	}
	f, err := New(Config{Count: 2, Command: script, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	starts := func(slot int) int {
		b, _ := os.ReadFile(filepath.Join(dir, "slot"+strconv.Itoa(slot)))
		return strings.Count(string(b), "start")
	}
	testutil.Eventually(t, 20*time.Second, "5 incarnations of each child", func() bool { return starts(0) >= 5 && starts(1) >= 5 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := f.Stats()
	if s.Recycles < 4 || s.Crashes < 4 {
		t.Errorf("stats = %+v, want ≥4 recycles and ≥4 crashes", s)
	}
	if s.Running != 0 {
		t.Errorf("Running = %d after Run returned", s.Running)
	}
}

// On stop, children get SIGTERM and may drain; one that ignores it is killed
// after StopTimeout. Either way nothing is left running.
func TestStopDrainsThenKills(t *testing.T) {
	dir := t.TempDir()
	pidFile := func(slot int) string { return filepath.Join(dir, "pid"+strconv.Itoa(slot)) }
	cmd := func(slot int) *exec.Cmd {
		if slot == 0 { // drains: exits cleanly on TERM
			return exec.Command("sh", "-c", "trap 'exit 0' TERM; echo $$ > "+pidFile(slot)+".tmp; mv "+pidFile(slot)+".tmp "+pidFile(slot)+"; while :; do sleep 0.05; done")
		}
		// stubborn: ignores TERM
		return exec.Command("sh", "-c", "trap '' TERM; echo $$ > "+pidFile(slot)+".tmp; mv "+pidFile(slot)+".tmp "+pidFile(slot)+"; while :; do sleep 0.05; done")
	}
	f, err := New(Config{Count: 2, Command: cmd, StopTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	var pids []int
	for slot := 0; slot < 2; slot++ {
		testutil.Eventually(t, 20*time.Second, "child pid file", func() bool { _, err := os.Stat(pidFile(slot)); return err == nil })
		b, _ := os.ReadFile(pidFile(slot))
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("child %d still exists after Run returned", pid)
		}
	}
	if s := f.Stats(); s.Starts != 2 || s.Crashes != 0 {
		t.Errorf("stats = %+v, want 2 starts and no crash counted for a requested stop", s)
	}
}

// A child whose exit code StopOn names is not restarted: every child is
// stopped and Run says which one exited how. The failing child exits once
// the other one runs, so that both have started whatever the order of the
// starts.
func TestStopOnUnfixableExit(t *testing.T) {
	dir := t.TempDir()
	up := filepath.Join(dir, "up")
	cmd := func(slot int) *exec.Cmd {
		if slot == 0 {
			return exec.Command("sh", "-c", "echo start >> "+filepath.Join(dir, "bad")+"; until [ -e "+up+" ]; do sleep 0.01; done; exit 2")
		}
		return exec.Command("sh", "-c", "trap 'exit 0' TERM; touch "+up+"; while :; do sleep 0.05; done")
	}
	f, err := New(Config{Count: 2, Command: cmd, MinBackoff: time.Millisecond,
		StopOn: func(code int) bool { return code == 2 }})
	if err != nil {
		t.Fatal(err)
	}
	err = f.Run(context.Background())
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Slot != 0 || ee.Code != 2 {
		t.Fatalf("Run = %v, want an ExitError for slot 0, code 2", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "bad")); strings.Count(string(b), "start") != 1 {
		t.Errorf("the failing child started %d times, want once", strings.Count(string(b), "start"))
	}
	if s := f.Stats(); s.Running != 0 || s.Starts != 2 {
		t.Errorf("stats = %+v, want 2 starts and nothing running", s)
	}
}

// An output writer that holds back a partial line is flushed once the child
// has exited and all of its output is written.
func TestFlushesOutputAfterTheExit(t *testing.T) {
	out := &flushRecorder{}
	f, err := New(Config{Count: 1, StopOn: func(code int) bool { return code == 2 },
		Command: func(int) *exec.Cmd {
			cmd := exec.Command("sh", "-c", "printf 'first\\nlast words'; exit 2")
			cmd.Stdout, cmd.Stderr = out, out
			return cmd
		}})
	if err != nil {
		t.Fatal(err)
	}
	var ee *ExitError
	if err := f.Run(context.Background()); !errors.As(err, &ee) {
		t.Fatalf("Run = %v, want the child's exit 2", err)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if out.written.String() != "first\nlast words" || out.flushes == 0 || out.writesAfterFlush {
		t.Errorf("written %q, %d flushes, a write after a flush: %v; want all the output, then a flush",
			out.written.String(), out.flushes, out.writesAfterFlush)
	}
}

type flushRecorder struct {
	mu               sync.Mutex
	written          strings.Builder
	flushes          int
	writesAfterFlush bool
}

func (r *flushRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writesAfterFlush = r.writesAfterFlush || r.flushes > 0
	return r.written.Write(p)
}

func (r *flushRecorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushes++
	return nil
}

// TestConfigZeroRule: zero durations take their defaults; a negative one is
// an error naming the field.
func TestConfigZeroRule(t *testing.T) {
	cmd := func(int) *exec.Cmd { return exec.Command("true") }
	f, err := New(Config{Count: 1, Command: cmd})
	if err != nil || f.cfg.MinBackoff != 500*time.Millisecond || f.cfg.MaxBackoff != 30*time.Second ||
		f.cfg.HealthyAfter != 30*time.Second || f.cfg.StopTimeout != time.Minute {
		t.Fatalf("zero durations: %+v, %v", f, err)
	}
	for name, c := range map[string]Config{
		"MinBackoff":   {Count: 1, Command: cmd, MinBackoff: -time.Second},
		"MaxBackoff":   {Count: 1, Command: cmd, MaxBackoff: -1},
		"HealthyAfter": {Count: 1, Command: cmd, HealthyAfter: -time.Second},
		"StopTimeout":  {Count: 1, Command: cmd, StopTimeout: -time.Minute},
	} {
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), name+" must not be negative") {
			t.Errorf("%s negative: err = %v", name, err)
		}
	}
}

// TestHandoff: a child that says its exit is near gets its successor
// started before it exits, and the successor starts work only after that
// exit. Each child logs what it does; the test checks the order from the
// log, not from the fleet's counters.
func TestHandoff(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	script := `log=` + log + `
[ "$` + HandoffEnv + `" = 1 ] || exit 9
echo "start $$" >> $log
g=$(head -c1 <&` + strconv.Itoa(GateFD) + `)
if [ -z "$g" ]; then echo "unneeded $$" >> $log; exit 0; fi
echo "go $$" >> $log
n=$(grep -c '^start' $log)
echo n >&` + strconv.Itoa(ExitNearFD) + `
while [ "$(grep -c '^start' $log)" -le "$n" ]; do sleep 0.01; done
echo "exit $$" >> $log
exit 75`
	f, err := New(Config{Count: 1, Handoff: true, StopTimeout: 10 * time.Second,
		Command: func(int) *exec.Cmd { return exec.Command("bash", "-c", script) },
		StopOn:  func(code int) bool { return code == 9 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	lines := func() []string {
		b, _ := os.ReadFile(log)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	testutil.Eventually(t, 30*time.Second, "4 children at work", func() bool {
		return strings.Count(strings.Join(lines(), "\n"), "go ") >= 4
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	at := map[string]int{}
	var gos []string
	for i, l := range lines() {
		at[l] = i
		if pid, ok := strings.CutPrefix(l, "go "); ok {
			gos = append(gos, pid)
		}
	}
	for i := 1; i < len(gos); i++ {
		prev, cur := gos[i-1], gos[i]
		s, sok := at["start "+cur]
		e, eok := at["exit "+prev]
		if !sok || !eok || !(s < e && e < at["go "+cur]) {
			t.Fatalf("child %s: want it started before %s exited and at work only after; log:\n%s", cur, prev, strings.Join(lines(), "\n"))
		}
	}
	if s := f.Stats(); s.Running != 0 || s.Recycles < 3 || s.Crashes != 0 {
		t.Errorf("stats = %+v, want nothing running, ≥3 recycles, no crash", s)
	}
}

// TestStopTermsSuccessorAtOnce: on a stop, a successor standing by is sent
// SIGTERM at once, even one that has not yet read its gate (still checking
// its database, say), not only after its predecessor has drained.
func TestStopTermsSuccessorAtOnce(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	// The first child says its exit is near at once; told to stop, it
	// drains until the successor has been told too. The successor never
	// reads its gate.
	// Each traps SIGTERM before it logs its start, which the test waits for.
	script := `log=` + log + `
if [ ! -s $log ]; then
  trap 'until grep -q "^term " $log; do sleep 0.01; done; echo "drained $$" >> $log; exit 0' TERM
  echo "start $$" >> $log
  echo n >&` + strconv.Itoa(ExitNearFD) + `
else
  trap 'echo "term $$" >> $log; exit 0' TERM
  echo "start $$" >> $log
fi
while :; do sleep 0.01; done`
	f, err := New(Config{Count: 1, Handoff: true, StopTimeout: 20 * time.Second,
		Command: func(int) *exec.Cmd { return exec.Command("bash", "-c", script) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	lines := func() string { b, _ := os.ReadFile(log); return string(b) }
	testutil.Eventually(t, 30*time.Second, "the successor started", func() bool {
		return strings.Count(lines(), "start ") == 2
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lines(), "drained ") {
		t.Fatalf("the predecessor was killed, its drain waiting for the successor's SIGTERM; log:\n%s", lines())
	}
}

// TestHandoffEnvIsTheFleets: a fleet without Handoff does not pass on a
// HandoffEnv of its own environment, whose descriptors its children lack.
func TestHandoffEnvIsTheFleets(t *testing.T) {
	t.Setenv(HandoffEnv, "1")
	out := filepath.Join(t.TempDir(), "env")
	f, err := New(Config{Count: 1,
		Command: func(int) *exec.Cmd {
			return exec.Command("sh", "-c", `echo "${`+HandoffEnv+`:-unset}" > `+out+`; exit 2`)
		},
		StopOn: func(code int) bool { return code == 2 }})
	if err != nil {
		t.Fatal(err)
	}
	var ee *ExitError
	if err := f.Run(context.Background()); !errors.As(err, &ee) {
		t.Fatalf("Run = %v, want the child's exit 2", err)
	}
	if b, _ := os.ReadFile(out); strings.TrimSpace(string(b)) != "unset" {
		t.Errorf("child saw %s=%q, want it unset", HandoffEnv, strings.TrimSpace(string(b)))
	}
}
