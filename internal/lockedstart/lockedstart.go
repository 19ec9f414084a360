// Package lockedstart starts child processes whose Pdeathsig must last as
// long as they do: PostgreSQL under pglocal, consumers under farm/fleet.
// (browser forks Chrome the same way, with the thread's priority changed
// for the fork, so it keeps its own copy.)
package lockedstart

import (
	"os/exec"
	"runtime"
)

// Start starts cmd from an OS thread that stays locked to one goroutine
// until cmd exits, then calls exited with cmd.Wait's error on that
// goroutine. Pdeathsig fires when the thread that forked the child ends, not
// when the process does, and Go ends a thread whose goroutine exits while
// locked to it: a child forked from any pooled thread could be signalled by
// an unrelated goroutine's end. Start returns cmd.Start's error, and then
// never calls exited.
func Start(cmd *exec.Cmd, exited func(waitErr error)) error {
	started := make(chan error, 1)
	go func() { // ends when the child is reaped
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}
