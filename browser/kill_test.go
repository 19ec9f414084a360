package browser

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

// TestKillIsBoundedWhenChromeIsNotReaped: a Chrome stuck in uninterruptible
// sleep is not reaped after SIGKILL, and cmd.Wait cannot be interrupted;
// Kill returns an error after its bound instead of waiting for the
// goroutine in cmd.Wait (the supervisor kills on its one actor goroutine).
// The stand-in for that goroutine returns only when the test lets it.
func TestKillIsBoundedWhenChromeIsNotReaped(t *testing.T) {
	proc := exec.Command("sleep", "1000")
	proc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan struct{})
	b := &Browser{
		log:        zaptest.NewLogger(t),
		pid:        proc.Process.Pid,
		profileDir: filepath.Join(t.TempDir(), "bfc-stuck"),
		exited:     make(chan struct{}),
		killed:     make(chan struct{}),
		killWait:   50 * time.Millisecond,
	}
	b.gone, b.markGone = context.WithCancel(context.Background())
	t.Cleanup(b.markGone)
	b.reaper.Add(1)
	go func() {
		defer b.reaper.Done()
		<-stuck // cmd.Wait on a process the kernel does not let go
		close(b.exited)
	}()
	t.Cleanup(func() {
		close(stuck)
		b.reaper.Wait()
		proc.Wait()
	})

	errc := make(chan error, 1)
	go func() { errc <- b.Kill() }()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "not reaped") {
			t.Fatalf("kill: %v, want the not-reaped error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Kill waits for the goroutine in cmd.Wait: no bound")
	}
}

// TestKillSparesOtherProcessesNamingTheProfile: a process that names the
// profile on its command line but does not run Chrome's executable (an
// operator's tail -f of Chrome's log) is not Chrome's: Kill leaves it alone
// (unprivileged, it could not kill another user's, and spun on EPERM for
// its whole bound).
func TestKillSparesOtherProcessesNamingTheProfile(t *testing.T) {
	b := launch(t, Options{Logger: zaptest.NewLogger(t)})
	tail := exec.Command("tail", "-f", filepath.Join(b.ProfileDir(), "chrome.log"))
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tail.Process.Kill()
		tail.Wait()
	})
	if err := b.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(tail.Process.Pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if st.state == 'Z' || st.state == 'X' {
		t.Fatalf("Kill killed %v, which named the profile but is not Chrome's", tail.Args)
	}
}

// TestChromeLogIsBounded: a page's worker logging 24 MB (which no guard in
// the page reaches) leaves chrome.log at its bound, and the node's last
// view of Chrome's output current. The headless shell writes console
// messages to its output; full Chrome does not, and its log only has to
// stay within the bound.
func TestChromeLogIsBounded(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	if _, err := s.Render(context.Background(), Request{URL: e.url("/hostile/worker-log/24"), Wait: Wait{Selector: "#ready"}, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(e.b.Version(), "HeadlessChrome/") { // the shell's product name
		testutil.Eventually(t, time.Minute, "chrome.log at its bound", func() bool {
			fi, err := os.Stat(filepath.Join(e.b.ProfileDir(), "chrome.log"))
			return err == nil && fi.Size() >= maxLogBytes
		})
		if tail := e.b.output.last(0); !strings.Contains(tail, "www") {
			t.Errorf("the output's tail misses the worker's last messages: %.100q", tail)
		}
	}
	fi, err := os.Stat(filepath.Join(e.b.ProfileDir(), "chrome.log"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > maxLogBytes+200 {
		t.Errorf("chrome.log is %d bytes, over its bound of %d", fi.Size(), maxLogBytes)
	}
}

// TestChromeOutputBound: whatever writes into Chrome's output pipe, the log
// stops at its bound with a note, the tail stays the newest output, and
// close ends the copy though a writer still holds the pipe.
func TestChromeOutputBound(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	path := filepath.Join(t.TempDir(), "chrome.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	o := newChromeOutput(r, f)
	line := strings.Repeat("x", 1023) + "\n"
	for range 3 * maxLogBytes / len(line) {
		if _, err := w.WriteString(line); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.WriteString("the end\n"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the copy to reach the last write", func() bool {
		return strings.Contains(o.last(0), "the end")
	})
	if err := o.close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > maxLogBytes+200 || !strings.Contains(string(data[maxLogBytes:]), "chrome.log stops at") {
		t.Errorf("chrome.log: %d bytes, ending %q; want the bound and the note", len(data), data[max(0, len(data)-120):])
	}
	if tail := o.last(0); len(tail) > outputTailBytes+len("…") || !strings.HasSuffix(tail, "the end\n") {
		t.Errorf("tail %d bytes ending %q", len(tail), tail[max(0, len(tail)-20):])
	}
}
