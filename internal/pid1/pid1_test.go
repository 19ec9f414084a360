package pid1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

// The tests run the init in a child process (this test binary, re-executed
// by helperEnv), since it reaps every child of the process it runs in and
// takes the signals sent to it.
const (
	helperEnv = "PID1_TEST_HELPER_SCRIPT"
	// helperFailed is the helper's exit code when Run itself fails.
	helperFailed = 200
)

func TestMain(m *testing.M) {
	if script := os.Getenv(helperEnv); script != "" {
		status, err := Run(context.Background(), Command{
			Path: "/bin/sh", Args: []string{"sh", "-c", script}, Env: os.Environ(),
			Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(helperFailed)
		}
		os.Exit(status)
	}
	os.Exit(m.Run())
}

// initRunning is the init running script, and what the script writes.
type initRunning struct {
	cmd   *exec.Cmd
	out   io.Reader
	lines *bufio.Scanner
	stdin io.WriteCloser
}

func startInit(t *testing.T, script string) *initRunning {
	t.Helper()
	cmd := helper(script)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &initRunning{cmd: cmd, out: out, lines: bufio.NewScanner(out)}
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A test whose signal or orphan never arrives ends here rather than at
	// the suite's timeout: the script's output ends early.
	watchdog := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill(); _ = out.Close() })
	t.Cleanup(func() { watchdog.Stop(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return r
}

// helper is this test binary set to run script under the init.
func helper(script string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// Under -race a process waits a second at exit by default.
	cmd.Env = append(os.Environ(), helperEnv+"="+script, "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	return cmd
}

// line is the script's next line of output.
func (r *initRunning) line(t *testing.T) string {
	t.Helper()
	if !r.lines.Scan() {
		t.Fatalf("the script's output ended early (%v)", r.lines.Err())
	}
	return r.lines.Text()
}

// exitCode waits for the init to exit and returns its code.
func (r *initRunning) exitCode(t *testing.T) int {
	t.Helper()
	_, _ = io.Copy(io.Discard, r.out)
	return testutil.ExitCode(t, r.cmd.Wait())
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"exit 75", 75},
		{"kill -KILL $$", 128 + 9},
		{"kill -TERM $$", 128 + 15},
	} {
		t.Run(tc.script, func(t *testing.T) {
			r := startInit(t, tc.script)
			if got := r.exitCode(t); got != tc.want {
				t.Errorf("exit code %d, want %d", got, tc.want)
			}
		})
	}
}

// The signals a container gets reach the command, each once, and the
// init's exit code is the command's: the user signals, SIGALRM and SIGPWR,
// which the first list of forwarded signals left out, and SIGRTMIN+3, which
// stops a systemd running in a container.
func TestForwardsSignals(t *testing.T) {
	sent := []syscall.Signal{syscall.SIGUSR1, syscall.SIGALRM, syscall.SIGPWR, sigRTMIN + 3, syscall.SIGTERM}
	var traps strings.Builder
	for _, s := range sent[:len(sent)-1] {
		fmt.Fprintf(&traps, "trap 'echo %d' %d\n", s, s)
	}
	r := startInit(t, traps.String()+`
		sleep 60 >/dev/null 2>&1 & s=$!
		trap 'kill $s; wait $s; echo 15; exit 7' TERM
		echo ready
		while kill -0 $s 2>/dev/null; do wait $s; done`)
	if got := r.line(t); got != "ready" {
		t.Fatalf("first line %q", got)
	}
	for _, s := range sent {
		if err := r.cmd.Process.Signal(s); err != nil {
			t.Fatal(err)
		}
		if got, want := r.line(t), strconv.Itoa(int(s)); got != want {
			t.Fatalf("after signal %d the command wrote %q, want %q", s, got, want)
		}
	}
	if got := r.exitCode(t); got != 7 {
		t.Errorf("exit code %d, want the command's 7", got)
	}
}

// sigRTMIN is the first real-time signal as glibc and the shell number it
// (the kernel's first two are glibc's own).
const sigRTMIN = syscall.Signal(34)

// What the init passes on: what whoever stops the container may send, not
// what this process gets from its own kernel or runtime.
func TestForwarded(t *testing.T) {
	forwarded := []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR2,
		syscall.SIGWINCH, syscall.SIGTSTP, syscall.SIGCONT, syscall.SIGXCPU, sigRTMIN, 64}
	kept := []syscall.Signal{syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPROF, syscall.SIGPIPE, syscall.SIGTTIN,
		syscall.SIGSEGV, syscall.SIGABRT, syscall.SIGKILL, syscall.SIGSTOP, 32, 33}
	for want, sigs := range map[bool][]syscall.Signal{true: forwarded, false: kept} {
		for _, sig := range sigs {
			if got := slices.Contains(Forwarded, os.Signal(sig)); got != want {
				t.Errorf("signal %d (%s) forwarded: %v, want %v", sig, unix.SignalName(sig), got, want)
			}
		}
	}
}

// A process orphaned under the command is handed to the init (a subreaper
// when it is not PID 1) and reaped when it ends: it does not stay a zombie.
func TestReapsOrphans(t *testing.T) {
	r := startInit(t, `
		pid=$( (sleep 60 >/dev/null 2>&1 & echo $!) )
		echo $pid
		read done || :`)
	pid, err := strconv.Atoi(r.line(t))
	if err != nil {
		t.Fatal(err)
	}
	initPid := strconv.Itoa(r.cmd.Process.Pid)
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("orphan %d handed to the init %s", pid, initPid), func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		return err == nil && strings.Contains(string(b), "\nPPid:\t"+initPid+"\n")
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("orphan %d reaped", pid), func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return errors.Is(err, os.ErrNotExist)
	})
	_ = r.stdin.Close()
	if got := r.exitCode(t); got != 0 {
		t.Errorf("exit code %d, want 0", got)
	}
}

// On a terminal the command's process group is the foreground one, so the
// terminal's Ctrl-C reaches it once, and not the init, which would pass it
// on a second time (and a farm command exits at once on a second signal).
func TestTerminalForeground(t *testing.T) {
	tty := openTerminal(t)
	cmd := helper(`set -- $(cat /proc/$$/stat); echo "$5 $8"`)
	cmd.Stdin, cmd.Stderr = tty, os.Stderr
	// A session of its own, with the terminal as its controlling terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		t.Fatalf("output %q", out)
	}
	if f[0] != f[1] {
		t.Errorf("the command's process group %s, the terminal's foreground group %s; want the same", f[0], f[1])
	}
}

// A terminal on stdin that is not the init's controlling terminal is left
// alone: the command starts, its group not put in the foreground (the
// ioctl would fail there and the start with it).
func TestTerminalNotControlling(t *testing.T) {
	tty := openTerminal(t)
	cmd := helper(`echo started`)
	cmd.Stdin, cmd.Stderr = tty, os.Stderr
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "started" {
		t.Fatalf("init with a terminal not its own on stdin: %v, output %q; want the command run", err, out)
	}
}

// openTerminal opens a new pseudo-terminal and returns its terminal side.
func openTerminal(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return tty
}

// Canceling Run's context stops the command as a container stop does.
// In this process, which Run makes a subreaper for good: safe only while no
// test of this package runs in parallel with it (none calls t.Parallel), as
// Run reaps every child of its process.
func TestCancelSendsTERM(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		status int
		err    error
	}
	done := make(chan result, 1)
	go func() {
		status, err := Run(ctx, Command{
			Path: "/bin/sh", Args: []string{"sh", "-c", `sleep 60 >/dev/null 2>&1 & s=$!; trap 'kill $s; wait $s; exit 9' TERM; echo ready; while kill -0 $s 2>/dev/null; do wait $s; done`},
			Stdout: pw, Stderr: os.Stderr,
		})
		pw.Close()
		done <- result{status, err}
	}()
	lines := bufio.NewScanner(pr)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("no ready line (%v)", lines.Err())
	}
	cancel()
	select {
	case r := <-done:
		if r.err != nil || r.status != 9 {
			t.Errorf("Run = %d, %v; want 9, nil", r.status, r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the command did not end a minute after the cancel")
	}
}
