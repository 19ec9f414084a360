package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/farm/fleet"
	"github.com/browserfarm/browserfarm/internal/lockedstart"
	"github.com/browserfarm/browserfarm/internal/pgtest"
)

// signalRoleEnv makes this test binary play the parent or the child of
// TestParentDeathDoesNotCutTheDrain.
const signalRoleEnv = "FARM_TEST_SIGNAL_ROLE"

// A process draining after a stop signal goes on draining when its parent
// dies (farm up and --respawn give their children fleet.ParentGoneSignal), also with
// its output a pipe nobody reads any more; a second signal from anyone
// else still ends it at once.
func TestParentDeathDoesNotCutTheDrain(t *testing.T) {
	switch os.Getenv(signalRoleEnv) {
	case "parent":
		signalHelperParent(t)
		return
	case "child":
		signalHelperChild()
		return
	}
	for _, tc := range []struct {
		name       string
		killParent bool
		want       string
	}{
		{"the parent dies", true, "the parent process is gone; the drain goes on"},
		{"a second signal", false, "second signal; exiting now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startSignalHelpers(t)
			if err := syscall.Kill(h.child, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			h.expect("draining")
			if tc.killParent {
				if err := h.parent.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				_ = h.parent.Wait()
			} else if err := syscall.Kill(h.child, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			h.expect(tc.want)
			if !tc.killParent {
				return
			}
			// Nobody reads its standard output now: its next write there
			// fails, and must not kill it.
			_ = h.childStdout.Close()
			if _, err := io.WriteString(h.stdin, "finish\n"); err != nil {
				t.Fatal(err)
			}
			h.expect("drained, after a write to a closed pipe")
		})
	}
}

type signalHelpers struct {
	t           *testing.T
	parent      *exec.Cmd
	child       int
	stdin       io.Writer // the child's standard input
	childStdout io.Closer // the read end of its standard output, which the test closes
	lines       chan string
}

// startSignalHelpers starts this binary as the parent, which starts it as
// the child; both write their lines to one pipe, read here.
func startSignalHelpers(t *testing.T) *signalHelpers {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestParentDeathDoesNotCutTheDrain$")
	parent.Env = append(os.Environ(), signalRoleEnv+"=parent", pgtest.EnvURL+"=unused")
	parent.Stdin, parent.Stdout, parent.Stderr = inR, outW, errW
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*os.File{inR, outW, errW} {
		_ = f.Close()
	}
	h := &signalHelpers{t: t, parent: parent, stdin: inW, childStdout: outR, lines: make(chan string, 16)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(errR)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if h.child > 0 {
			_ = syscall.Kill(h.child, syscall.SIGKILL)
		}
		_ = parent.Process.Kill()
		_ = parent.Wait()
		_ = inW.Close()
		_ = outR.Close()
		_ = errR.Close()
	})
	// The parent names its child, which says it is ready, in either order.
	for _, line := range []string{h.next(), h.next()} {
		if line == "ready" {
			continue
		}
		if _, err := fmt.Sscanf(line, "child %d", &h.child); err != nil {
			t.Fatalf("the helpers said %q, want the child's pid or ready", line)
		}
	}
	if h.child == 0 {
		t.Fatal("the parent did not name its child")
	}
	return h
}

// next is the helpers' next line; a generous bound turns a hang into a
// failure.
func (h *signalHelpers) next() string {
	h.t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			h.t.Fatal("the helpers closed their output")
		}
		return l
	case <-time.After(time.Minute):
		h.t.Fatal("no line from the helpers in a minute")
	}
	return ""
}

func (h *signalHelpers) expect(want string) {
	h.t.Helper()
	if got := h.next(); !strings.Contains(got, want) {
		h.t.Fatalf("the helpers said %q, want %q", got, want)
	}
}

// signalHelperParent starts the child as farm/fleet starts a consumer (its
// own process group, the parent-death signal), names it, and waits for it.
func signalHelperParent(t *testing.T) {
	child := exec.Command(os.Args[0], "-test.run=^TestParentDeathDoesNotCutTheDrain$")
	child.Env = append(os.Environ(), signalRoleEnv+"=child")
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: fleet.ParentGoneSignal}
	exited := make(chan struct{})
	if err := lockedstart.Start(child, func(error) { close(exited) }); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "child %d\n", child.Process.Pid)
	<-exited
	os.Exit(0)
}

// signalHelperChild drains from its first stop signal until its standard
// input says to finish.
func signalHelperChild() {
	ctx, stop := signalContext(os.Stderr)
	defer stop()
	fmt.Fprintln(os.Stderr, "ready")
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "draining")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	fmt.Fprintln(os.Stdout, "drained")
	fmt.Fprintln(os.Stderr, "drained, after a write to a closed pipe")
	os.Exit(0)
}
