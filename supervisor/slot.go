package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
)

// Slot is the right to run one job on a Chrome. Render at most once, then
// Release. A Slot is used by one goroutine.
type Slot struct {
	s        *Supervisor
	c        *chrome
	at       time.Time // when Acquire handed it out
	rendered bool
	released bool
}

// ChromePID is the pid of the Chrome the slot's job runs on, for logs.
func (sl *Slot) ChromePID() int { return sl.c.pid }

// errSlotUsed reports a second Render or a Render after Release.
var errSlotUsed = errors.New("supervisor: slot already used")

// Render runs req in a session on the slot's Chrome (sessions are reused
// between jobs; each job still gets its fresh browser context). If that Chrome
// crashes, hangs or is killed while the job runs, the error is a retriable
// *browser.Error (class crashed, unresponsive or canceled); other errors,
// and a result that comes with an error, are the browser's own.
func (sl *Slot) Render(ctx context.Context, req browser.Request) (*browser.Result, error) {
	if sl.rendered || sl.released {
		return nil, errSlotUsed
	}
	sl.rendered = true
	c := sl.c
	if be := c.lost(); be != nil {
		// Lost before the job began: its page was never asked for.
		return nil, browser.MarkBeforePage(be)
	}
	if due, ok := ctx.Deadline(); ok {
		sl.s.mu.Lock()
		if due.After(c.jobsDue) {
			c.jobsDue = due
		}
		sl.s.mu.Unlock()
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(c.ctx, func() { cancel(context.Cause(c.ctx)) })
	defer stop()

	sess, err := sl.session(rctx)
	if err != nil {
		return nil, browser.MarkBeforePage(sl.wrap(fmt.Errorf("new session on chrome %d: %w", c.pid, err)))
	}
	res, err := sess.Render(rctx, req)
	// Before putSession: closing a failed session waits on Chrome, for
	// seconds when it hangs.
	sl.noteUnresponsive(err)
	sl.putSession(sess, err == nil)
	if err != nil {
		// Some failures come with a result (an HTTP error status); keep it.
		return res, sl.wrap(err)
	}
	return res, nil
}

// session takes an idle session of the slot's Chrome, or opens one.
func (sl *Slot) session(ctx context.Context) (renderSession, error) {
	s, c := sl.s, sl.c
	s.mu.Lock()
	if n := len(c.idle); n > 0 {
		sess := c.idle[n-1]
		c.idle = c.idle[:n-1]
		s.useLocked(c, sess)
		s.mu.Unlock()
		return sess, nil
	}
	s.mu.Unlock()
	sess, err := c.proc.NewSession(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.useLocked(c, sess)
	s.mu.Unlock()
	return sess, nil
}

// useLocked records sess as running a job on c; a session taken when c
// takes no more jobs after this one is retired at once.
func (s *Supervisor) useLocked(c *chrome, sess renderSession) {
	if c.inUse == nil {
		c.inUse = make(map[renderSession]struct{})
	}
	c.inUse[sess] = struct{}{}
	if s.takesNoJobLocked(c) {
		sess.Retire()
	}
}

// takesNoJobLocked reports whether c will start no job after those in
// flight: it is retiring, or the process has started its last job.
func (s *Supervisor) takesNoJobLocked(c *chrome) bool {
	return c.state != stateCurrent || (s.cfg.ExitAfterJobs > 0 && s.starts >= s.cfg.ExitAfterJobs)
}

// putSession keeps a session for the Chrome's next job, or closes it when
// its job failed (the session's state is then unknown), the Chrome is going
// away, or the Chrome takes no more jobs yet stays up for other jobs still
// in flight. A session retired that way skips its wipe and leaves its tab
// as the job left it: kept until the kill, the finished page would go on
// running its scripts, timers and requests outside any slot, for as long as
// the slowest job on that Chrome (its timeout plus the drain bound), and
// hold its renderer's memory. The session of the Chrome's last job in
// flight is kept: the kill follows its release.
func (sl *Slot) putSession(sess renderSession, ok bool) {
	s, c := sl.s, sl.c
	s.mu.Lock()
	delete(c.inUse, sess)
	// c.inflight still counts this job: the slot is released after.
	heldUp := s.takesNoJobLocked(c) && c.inflight > 1
	if ok && c.state != stateDead && c.ctx.Err() == nil && !heldUp {
		c.idle = append(c.idle, sess)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if err := sess.Close(); err != nil {
		s.log.Debug("session close failed", zap.Int("pid", c.pid), zap.Error(err))
	}
}

// noteUnresponsive hands the actor a session's own verdict, in err, that
// the slot's Chrome does not answer (its probe failed), unless the
// supervisor has given up on that Chrome already: evidence before, or
// beside, a failed health check. The actor makes the Chrome suspect, so it
// gets no new job, and has its monitor check it next (after a check
// already under way) instead of at the next tick; beside a failed check it
// counts towards Config.HealthFailures. With health checks off nothing
// would clear the suspicion, so nothing is sent. It waits for the actor,
// which never waits for a job, or for the Chrome to be given up on: for
// seconds at most, while the actor kills another Chrome.
func (sl *Slot) noteUnresponsive(err error) {
	s, c := sl.s, sl.c
	if s.cfg.HealthInterval <= 0 || browser.ClassOf(err) != browser.ClassUnresponsive || c.lost() != nil || c.gone() {
		return
	}
	select {
	case s.events <- event{c: c, kind: evProbe}:
	case <-c.ctx.Done():
	}
}

// wrap turns any error of a session on a lost Chrome into a retriable one:
// the job did nothing wrong, its Chrome went away under it.
func (sl *Slot) wrap(err error) error {
	c := sl.c
	if be := c.lost(); be != nil {
		return &browser.Error{Class: be.Class, Retriable: true, Err: fmt.Errorf("%w: %w", be.Err, err)}
	}
	if c.gone() {
		return &browser.Error{Class: browser.ClassCrashed, Retriable: true, Err: fmt.Errorf("chrome %d exited: %w", c.pid, err)}
	}
	return err
}

// Release ends the slot and frees it for the next job. A rendered slot counts
// as one finished job whatever its outcome; an unrendered one hands its start
// back. Release is idempotent.
func (sl *Slot) Release() {
	if sl.released {
		return
	}
	sl.released = true
	sl.s.release(sl.c, sl.rendered)
}
