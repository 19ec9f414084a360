package browser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
)

// Gone reports whether Chrome has exited or its connection is lost. It looks
// at the sources of Done directly, since Done closes a moment later: a
// render that failed because Chrome died may return before Done closes,
// never before Gone says so.
func (b *Browser) Gone() bool {
	select {
	case <-b.gone.Done():
		return true
	case <-b.exited:
		return true
	case <-b.cdpB.LostConnection:
		return true
	default:
		return false
	}
}

// Healthy makes one CDP round trip to the browser process. It fails when
// Chrome is gone or does not answer before ctx ends.
func (b *Browser) Healthy(ctx context.Context) error {
	if b.Gone() {
		return &Error{Class: ClassCrashed, Retriable: true, Err: errors.New("chrome is gone")}
	}
	if _, err := cdp.Call(ctx, b.cdpB, browser.GetVersion, cdp.Empty{}); err != nil {
		if b.Gone() {
			return &Error{Class: ClassCrashed, Retriable: true, Err: fmt.Errorf("chrome is gone: %w", err)}
		}
		return &Error{Class: ClassUnresponsive, Retriable: true, Err: fmt.Errorf("chrome did not answer: %w", err)}
	}
	return nil
}

// Kill ends Chrome: SIGKILL to its whole process group (and to any process
// of its tree that left the group), reaps the main process, waits until no
// process of the group is left, and removes the profile directory. Each
// wait is bounded (10 s): a process stuck in uninterruptible sleep makes
// Kill return an error, not block, and the goroutine reaping it ends when
// the kernel lets it go. It is idempotent and safe to call concurrently;
// every call returns the first call's result once the work is done.
func (b *Browser) Kill() error {
	b.killOnce.Do(func() {
		defer close(b.killed)
		b.killErr = b.kill()
	})
	<-b.killed
	return b.killErr
}

func (b *Browser) kill() error {
	var errs []error
	if b.pid > 0 {
		// Processes that left the group (none are known to, but a zygote
		// could call setsid) are found through the parent links before the
		// main process dies and its children are re-parented.
		tree, ticks := descendantsCPU(b.pid)
		b.orphanedTicks.Store(ticks)
		if err := syscall.Kill(-b.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("browser: killing process group %d: %w", b.pid, err))
		}
		for _, p := range tree {
			// Errors mean the process is already gone.
			_ = syscall.Kill(int(p), syscall.SIGKILL)
		}
		select {
		case <-b.exited:
			// The reaper has nothing left to do but return.
			b.reaper.Wait()
		case <-time.After(b.killWait):
			// Stuck in uninterruptible sleep: cmd.Wait cannot be
			// interrupted, so its goroutine is left to end on its own
			// when the kernel lets the process go, rather than block
			// Kill, and the supervisor's actor with it, indefinitely.
			errs = append(errs, fmt.Errorf("browser: chrome %d not reaped %v after SIGKILL", b.pid, b.killWait))
		}
		if err := waitGone(b.pid, tree, b.profileDir, b.exeDir, b.killWait); err != nil {
			errs = append(errs, err)
		}
	} else {
		// The start failed before the process ran: the reaper closed
		// exited and returns.
		b.reaper.Wait()
	}
	if b.cancel != nil {
		// Ends the CDP connection, which the janitor and the done watcher
		// (bg) end with, whether or not the process was reaped.
		b.cancel()
	}
	b.bg.Wait()
	if b.output != nil {
		_ = b.output.close() // the log is for people; its errors change nothing here
	}
	if err := removeAllRetry(b.profileDir); err != nil {
		errs = append(errs, fmt.Errorf("browser: removing the profile directory: %w", err))
	}
	if b.extraTmp != "" {
		if err := removeAllRetry(b.extraTmp); err != nil {
			errs = append(errs, fmt.Errorf("browser: removing chrome's temp dir: %w", err))
		}
	}
	if b.pid > 0 {
		b.log.Info("chrome killed")
	}
	return errors.Join(errs...)
}

// removeAllRetry removes dir; a dying child can still create a file in it
// for a moment after the group is gone from /proc.
func removeAllRetry(dir string) error {
	var err error
	for range 5 {
		if err = removeOwned(dir, os.RemoveAll); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// removeOwned removes dir with removeAll, its owner mark (ownerFile) last:
// a removal cut short — the process killed in the middle, or an entry that
// will not go — leaves the mark with what is left, for SweepStaleProfiles
// to find once the owner is gone, instead of an unmarked directory no sweep
// touches again.
func removeOwned(dir string, removeAll func(string) error) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == ownerFile {
			continue
		}
		if err := removeAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return removeAll(dir)
}

// OrphanedCPUTicks is the CPU time, in /proc ticks (1/100 s), that Chrome's
// helpers and renderers had used, with the children they had reaped, when
// Kill killed them: 0 before Kill. This process reaps only Chrome's main
// process; the others, orphaned by the SIGKILL, are reaped by init, and
// their CPU leaves this process's cutime/cstime with them. A node that
// measures the CPU of its own process tree adds it back.
func (b *Browser) OrphanedCPUTicks() uint64 { return b.orphanedTicks.Load() }
