package browser

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A Chrome launched with Options.Background runs every process and thread
// of its tree backgroundNice nicer than this process until Foreground. A
// Chrome that boots and prewarms while another one serves (the supervisor's
// replacement) then takes the CPU the serving one leaves idle instead of
// slowing the pages in flight: against a busy thread of nice 0, one of nice
// 10 gets about a tenth of a core (CFS weights 110 and 1024), and all of it
// when the cores are idle.
const backgroundNice = 10

// niceOf returns the nice value of thread tid (0: the calling thread). The
// raw system call answers 20 - nice, so that it is never negative.
func niceOf(tid int) (int, error) {
	p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return 0, err
	}
	return 20 - p, nil
}

// mayRaisePriority reports whether this process may set a nice value as low
// as base on its children again once it raised it: with CAP_SYS_NICE in the
// initial user namespace (root on the host has it), or where RLIMIT_NICE
// allows it (nice n needs rlim_cur >= 20 - n). Without it a Chrome started
// in the background would have to serve there, at a tenth of a core under
// load, so Launch does not background it.
func mayRaisePriority(base int) bool {
	if hasHostCapSysNice() {
		return true
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NICE, &lim); err != nil {
		return false
	}
	return lim.Cur == unix.RLIM_INFINITY || int64(lim.Cur) >= int64(20-base)
}

// hasHostCapSysNice reports whether the effective CAP_SYS_NICE counts for
// nice values. The kernel checks it in the initial user namespace, so root
// in a user-namespaced container (rootless Podman or Docker, a pod with
// hostUsers: false) holds the bit and still may not lower a nice value: the
// capability counts only where this process's user namespace is the
// initial one, whose uid_map is the identity map of all ids.
func hasHostCapSysNice() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil || data[0].Effective&(1<<unix.CAP_SYS_NICE) == 0 {
		return false
	}
	m, err := os.ReadFile("/proc/self/uid_map")
	return err == nil && isIdentityUIDMap(string(m))
}

// isIdentityUIDMap reports whether a /proc/PID/uid_map maps every id to
// itself, as the initial user namespace's does ("0 0 4294967295").
func isIdentityUIDMap(m string) bool {
	f := strings.Fields(m)
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// backgroundPlan is how a background launch sets the priority of the
// thread that forks Chrome: the nice values to start at and to come back to.
type backgroundPlan struct {
	base, background int
	// raised holds the threads Chrome had set above the background value
	// when holdInBackground moved them, with the value to restore.
	raised map[int]int
}

// foregroundNice is the nice value Foreground gives a thread now at cur,
// and whether it moves at all: a thread held down by holdInBackground gets
// its own value back; any other at the background value or above comes
// back by the background offset, never below base; one below the
// background value was set by Chrome itself and stays.
func (p backgroundPlan) foregroundNice(tid, cur int) (int, bool) {
	if cur < p.background {
		return cur, false
	}
	if v, ok := p.raised[tid]; ok {
		return v, true
	}
	return max(p.base, cur-(p.background-p.base)), true
}

// planBackground decides whether a launch can run in the background, from
// the calling thread's nice value; ok is false when the priority could not
// be restored or there is no room below nice 19.
func planBackground() (backgroundPlan, bool) {
	base, err := niceOf(0)
	if err != nil || base >= 19 || !mayRaisePriority(base) {
		return backgroundPlan{}, false
	}
	return backgroundPlan{base: base, background: min(base+backgroundNice, 19)}, true
}

// startInBackground lowers the priority of the calling thread, the one
// about to fork Chrome, to the background value when b.opts.Background asks
// for it and it can be restored later; Chrome's whole tree inherits it. It
// reports whether it did; restoreThread then undoes it once Chrome is
// forked.
func (b *Browser) startInBackground() (backgroundPlan, bool) {
	if !b.opts.Background {
		return backgroundPlan{}, false
	}
	plan, ok := planBackground()
	if !ok {
		b.log.Debug("chrome starts in the foreground: its priority could not be restored later")
		return backgroundPlan{}, false
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, 0, plan.background); err != nil {
		b.log.Debug("chrome starts in the foreground", zap.Error(err))
		return backgroundPlan{}, false
	}
	b.prioMu.Lock()
	b.bgPlan = &plan
	b.prioMu.Unlock()
	return plan, true
}

// restoreThread gives the thread that forked Chrome its priority back, the
// value base. It reports whether it could; if not, the thread must never
// run another goroutine, and its goroutine ends without unlocking it, so
// that Go ends the thread. (Ending threads is avoided otherwise: a child
// started with Pdeathsig by whatever ran on that thread before would be
// signaled.)
func (b *Browser) restoreThread(base int) bool {
	if err := unix.Setpriority(unix.PRIO_PROCESS, 0, base); err != nil {
		b.log.Warn("the thread that started chrome stays at its lower priority and ends with it", zap.Error(err))
		return false
	}
	return true
}

// holdInBackground moves the threads that Chrome itself raised above the
// background priority during its start (as root it sets its main thread to
// nice -8, "display critical") down to it as well, and remembers their values
// for Foreground: the browser process creates every context and tab of a
// prewarm, a third of a replacement's CPU.
func (b *Browser) holdInBackground() {
	b.prioMu.Lock()
	defer b.prioMu.Unlock()
	if b.bgPlan == nil {
		return
	}
	select {
	case <-b.exited:
		return
	default:
	}
	plan := b.bgPlan
	b.eachThread(func(tid int) {
		cur, err := niceOf(tid)
		if err != nil || cur >= plan.background {
			return
		}
		if unix.Setpriority(unix.PRIO_PROCESS, tid, plan.background) == nil {
			if plan.raised == nil {
				plan.raised = map[int]int{}
			}
			plan.raised[tid] = cur
		}
	})
}

// Foreground ends the background of a Chrome launched with
// Options.Background: the threads holdInBackground moved get their own
// values back, and every other thread of its tree at the background nice
// value or above comes back by the background offset, to this process's
// priority at launch. (Chrome marks some threads of its own as background
// at nice 10; those that are at the background value then come back too.)
// Threads started meanwhile by a thread not yet moved inherit its old
// value, so the tree is walked twice. It is a no-op for a Chrome in the
// foreground, and safe to call concurrently with Kill: a thread that is
// gone is skipped.
func (b *Browser) Foreground() error {
	b.prioMu.Lock()
	defer b.prioMu.Unlock()
	if b.bgPlan == nil {
		return nil
	}
	plan := *b.bgPlan
	b.bgPlan = nil
	select {
	case <-b.exited:
		// Reaped: its pid may name another process by now.
		return nil
	default:
	}
	var errs []error
	for range 2 {
		b.eachThread(func(tid int) {
			cur, err := niceOf(tid)
			if err != nil {
				return
			}
			next, move := plan.foregroundNice(tid, cur)
			if !move {
				return
			}
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, next); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
			}
		})
	}
	if len(errs) > 0 {
		return fmt.Errorf("browser: moving chrome %d to the foreground: %w", b.pid, errors.Join(errs...))
	}
	return nil
}

// eachThread calls f with every thread id of Chrome's main process and its
// descendants.
func (b *Browser) eachThread(f func(tid int)) {
	if b.pid <= 0 {
		return
	}
	for _, p := range append([]int32{int32(b.pid)}, processTree(int32(b.pid))...) {
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(int(p)) + "/task")
		if err != nil {
			continue // gone
		}
		for _, t := range tasks {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				f(tid)
			}
		}
	}
}
