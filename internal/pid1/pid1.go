// Package pid1 is a container's init process: it runs one command, passes
// on the signals the container gets, reaps every orphan handed to it, and
// ends with the command's exit status. The image runs `farm init -- farm …`
// as PID 1 in place of tini: the init holds the environment the runtime gave
// the container, and a farm process is non-dumpable, so a page that took
// over a Chrome running without its sandbox (the image's default) cannot
// read that environment from /proc/1/environ as it could tini's.
//
// Why not os/exec: an init must wait for any child (wait4(-1)), which would
// steal the status os/exec waits for; here one loop reaps everything and
// picks out the command's own status.
package pid1

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// Forwarded are the signals the init passes on to its command: every
// signal a process can catch (the real-time ones too: a systemd in a
// container stops on SIGRTMIN+3), as tini does, but for those this process
// may get from its own kernel or runtime rather than from whoever stops the
// container — SIGCHLD (the init's own), SIGURG (Go's scheduler preempts
// with it), SIGPROF (Go's profiler), SIGPIPE, SIGTTIN and SIGTTOU, and the
// faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT) — and
// signals 32 and 33, which glibc and Go's runtime keep for themselves.
var Forwarded = forwarded()

func forwarded() []os.Signal {
	var out []os.Signal
	for s := syscall.Signal(1); s <= 64; s++ {
		switch s {
		case syscall.SIGKILL, syscall.SIGSTOP,
			syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPROF, syscall.SIGPIPE, syscall.SIGTTIN, syscall.SIGTTOU,
			syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGSYS, syscall.SIGABRT,
			32, 33:
			continue
		}
		out = append(out, s)
	}
	return out
}

// Command is what the init runs.
type Command struct {
	// Path is the program's resolved path; Args its argv, Args[0] included.
	Path string
	Args []string
	// Env is the command's environment, KEY=value.
	Env []string
	// Stdin, Stdout and Stderr are given to the command as they are; nil is
	// the null device. When Stdin is the init's controlling terminal and the
	// init is in its foreground, the command's process group takes the
	// foreground, so Ctrl-C reaches it once, from the terminal, instead of
	// from the terminal and again from the init.
	Stdin, Stdout, Stderr *os.File
}

// Run starts c and returns its exit status once it has exited: its exit
// code, or 128+n when signal n ended it (the shell's convention, and
// tini's). Meanwhile it passes every Forwarded signal this process gets to
// the command and reaps every process that ends as its child: as PID 1 the
// kernel hands it all orphans; elsewhere it makes itself a child subreaper
// so that orphaned descendants of the command come to it rather than to the
// machine's init. Canceling ctx sends the command SIGTERM, as a container
// stop does; Run still returns only once the command has exited.
func Run(ctx context.Context, c Command) (int, error) {
	if len(c.Args) == 0 {
		return 0, errors.New("pid1: no command")
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("pid1: prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	// Registered before the command starts: a signal from then on is
	// passed on, and an exit from then on is noticed. SIGCHLD has a channel
	// of its own: os/signal drops what a full channel cannot take, and a
	// burst of exits (a Chrome tree ending) must not crowd out a SIGTERM.
	sigs, exits := make(chan os.Signal, 8), make(chan os.Signal, 1)
	signal.Notify(sigs, Forwarded...)
	signal.Notify(exits, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	defer signal.Stop(exits)

	files := make([]uintptr, 3)
	for i, f := range []*os.File{c.Stdin, c.Stdout, c.Stderr} {
		if f == nil {
			null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				return 0, fmt.Errorf("pid1: %w", err)
			}
			defer null.Close()
			f = null
		}
		files[i] = f.Fd()
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	if inForeground(c.Stdin) {
		sys.Foreground, sys.Ctty = true, int(c.Stdin.Fd())
	}
	pid, err := syscall.ForkExec(c.Path, c.Args, &syscall.ProcAttr{Env: c.Env, Files: files, Sys: sys})
	if err != nil {
		return 0, fmt.Errorf("pid1: starting %s: %w", c.Path, err)
	}
	done := ctx.Done()
	for {
		status, exited, err := reap(pid)
		if err != nil {
			return 0, err
		}
		if exited {
			return status, nil
		}
		select {
		case <-exits:
		case s := <-sigs:
			// ESRCH: the command is gone and its SIGCHLD is on the way. It
			// stays a zombie until reap, so its pid is not reused before.
			_ = syscall.Kill(pid, s.(syscall.Signal))
		case <-done:
			done = nil
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
}

// reap collects every child that has ended, without blocking, and reports
// the command's status if it was among them.
func reap(command int) (status int, exited bool, err error) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ECHILD):
			if !exited {
				// Only another waiter in this process could have taken it.
				return 0, false, fmt.Errorf("pid1: the command (pid %d) was reaped elsewhere: %w", command, err)
			}
			return status, exited, nil
		case err != nil:
			return 0, false, fmt.Errorf("pid1: wait4: %w", err)
		case pid == 0:
			return status, exited, nil
		case pid == command:
			exited = true
			status = ws.ExitStatus()
			if ws.Signaled() {
				status = 128 + int(ws.Signal())
			}
		}
	}
}

// inForeground reports whether f is this process's controlling terminal
// and this process is in its foreground group: only then may the command's
// group take the foreground (elsewhere the ioctl fails, and a background
// init would take the terminal from its shell).
func inForeground(f *os.File) bool {
	if f == nil {
		return false
	}
	pgrp, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}
