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

// Forwarded are the signals the init passes on to its command: the stop
// signals runtimes and terminals send, and the user signals. Others are
// either the kernel's own (SIGCHLD, SIGURG, which Go's scheduler uses) or
// cannot be caught.
var Forwarded = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

// Command is what the init runs.
type Command struct {
	// Path is the program's resolved path; Args its argv, Args[0] included.
	Path string
	Args []string
	// Env is the command's environment, KEY=value.
	Env []string
	// Stdin, Stdout and Stderr are given to the command as they are. When
	// Stdin is a terminal the command's process group becomes the
	// terminal's foreground group, so Ctrl-C reaches it once, from the
	// terminal, instead of from the terminal and again from the init.
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
	// passed on, and an exit from then on is noticed.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, Forwarded...)...)
	defer signal.Stop(sigs)

	sys := &syscall.SysProcAttr{Setpgid: true}
	if isTerminal(c.Stdin) {
		sys.Foreground, sys.Ctty = true, int(c.Stdin.Fd())
	}
	pid, err := syscall.ForkExec(c.Path, c.Args, &syscall.ProcAttr{
		Env:   c.Env,
		Files: []uintptr{fd(c.Stdin), fd(c.Stdout), fd(c.Stderr)},
		Sys:   sys,
	})
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
		case s := <-sigs:
			if s == syscall.SIGCHLD {
				continue
			}
			// ESRCH: the command is gone and its SIGCHLD is on the way.
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

func fd(f *os.File) uintptr {
	if f == nil {
		return ^uintptr(0) // closed in the child
	}
	return f.Fd()
}

func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
