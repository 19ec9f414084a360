package browser

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Session is one tab slot of a Browser: it renders one job at a time. By
// default (IsolationWipe) a session keeps one tab in a browser context of
// its own across jobs and wipes that context between them, in the
// background, so that isolation costs neither a renderer start per job nor
// the next job's time; IsolationContext jobs get a brand-new context,
// IsolationShared jobs a tab in Chrome's default context. Close it when
// done; killing the Browser also ends it.
type Session struct {
	b *Browser

	// ctx is the session's life: Close or the browser's end cancels it,
	// and with it every tab and background task.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex // held by Render and Close: one job at a time
	closed bool
	shared *tab      // reusable tab in the default context (IsolationShared)
	left   *prepared // the shared tab, leaving its last job's page (shared is nil meanwhile)
	own    *prepared // the session's own tab (IsolationWipe): being made or wiped, or ready

	bg sync.WaitGroup // background preparation, wiping and disposal

	// retired is set by Retire: no job is expected after the one in
	// progress, so release prepares nothing and disposes of nothing.
	retired atomic.Bool
	// kept are tabs a retired session left as they were; Close closes them.
	kept []*tab
}

// prepared is a tab made ready in the background.
type prepared struct {
	done chan struct{}
	t    *tab
	err  error
}

// NewSession opens a tab slot. It is cheap: the session's tab is made in
// the background, and Render waits for it only if it is not ready yet.
func (b *Browser) NewSession(ctx context.Context) (*Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Class: ClassCanceled, Retriable: true, Err: err}
	}
	if b.Gone() {
		return nil, &Error{Class: ClassCrashed, Retriable: true, Err: errors.New("chrome is gone")}
	}
	sctx, cancel := context.WithCancel(b.rootCtx)
	s := &Session{b: b, ctx: sctx, cancel: cancel}
	s.own = s.background(s.newOwnTab)
	return s, nil
}

// Retire tells the session that its Chrome will take no more jobs: after
// the job in progress, if any, it neither wipes its tab nor prepares or
// disposes of a browser context — work for a Chrome about to be killed,
// six wipes per recycle at the default capacity. A Render that comes anyway
// still gets a clean tab, made when it starts. Safe to call at any time,
// from any goroutine.
func (s *Session) Retire() { s.retired.Store(true) }

// errRetired is the preparation "error" of a tab a retired session kept
// unwiped: acquire replaces the tab.
var errRetired = errors.New("session retired: tab not wiped")

// errSessionClosed is returned by Render after Close.
var errSessionClosed = errors.New("session closed")

// Close ends the session: it waits for a Render in progress (bounded by that
// job's timeout), then closes the session's tabs and disposes of their
// browser contexts. It is idempotent; Render after Close fails with class
// "canceled".
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	// The tabs' readers end with s.ctx: the ready tabs are quieted first.
	// A tab still being prepared shows about:blank or no page yet.
	for _, t := range s.readyTabs() {
		t.quiet()
	}
	// Canceling first stops a preparation in flight at once.
	s.cancel()
	var errs []error
	if p := s.own; p != nil {
		s.own = nil
		<-p.done
		if p.t != nil {
			errs = append(errs, p.t.close())
		}
	}
	if p := s.left; p != nil {
		s.left = nil
		<-p.done
		if p.t != nil {
			errs = append(errs, p.t.close())
		}
	}
	if s.shared != nil {
		errs = append(errs, s.shared.close())
		s.shared = nil
	}
	for _, t := range s.kept {
		errs = append(errs, t.close())
	}
	s.kept = nil
	s.bg.Wait()
	if err := errors.Join(errs...); err != nil {
		if s.b.Gone() {
			// Tear-down errors of a dead Chrome say nothing new.
			return nil
		}
		return fmt.Errorf("browser: closing session: %w", err)
	}
	return nil
}

// readyTabs are the session's tabs that are not being prepared.
func (s *Session) readyTabs() []*tab {
	tabs := slices.Clone(s.kept)
	if s.shared != nil {
		tabs = append(tabs, s.shared)
	}
	if p := s.own; p != nil {
		select {
		case <-p.done:
			if p.t != nil {
				tabs = append(tabs, p.t)
			}
		default:
		}
	}
	return tabs
}

// background runs fn on a goroutine the session owns, bounded by
// tabTimeout and the session's life.
func (s *Session) background(fn func(ctx context.Context) (*tab, error)) *prepared {
	p := &prepared{done: make(chan struct{})}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer close(p.done)
		ctx, cancel := context.WithTimeout(s.ctx, tabTimeout)
		defer cancel()
		p.t, p.err = fn(ctx)
	}()
	return p
}

// tabTimeout bounds making or wiping a tab; a healthy Chrome needs well
// under a second.
const tabTimeout = 20 * time.Second

// newOwnTab makes the session's own tab: a browser context of its own that
// IsolationWipe jobs share one after another, wiped in between.
func (s *Session) newOwnTab(ctx context.Context) (*tab, error) {
	t, err := s.newTab(ctx, nil, false)
	if err != nil {
		return nil, err
	}
	// The tab's requests do not read the HTTP cache (scopeCache turns it on
	// for the jobs of a cache scope), so a job finds none of an earlier
	// job's responses there (as in a brand-new context). Its dedicated
	// workers do read it, past the tab's setting: the wipe clears the
	// cache too (about 3% of a light page's Chrome CPU). Service and
	// shared workers fetch past the tab's setting, and popups write to the
	// context until the janitor has closed them: a context that had one is
	// not reused.
	unwatch := s.b.janitor.watchContext(t.bcid, t.taint)
	t.mu.Lock()
	t.own = true // under mu: the tab's event listener reads it
	t.unwatchContext = unwatch
	t.mu.Unlock()
	if err := t.setCacheDisabled(ctx, true); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// acquire returns the tab for a job.
func (s *Session) acquire(ctx context.Context, j *job) (*tab, error) {
	switch {
	case j.proxy != nil || j.Isolation == IsolationContext:
		return s.newTab(ctx, j.proxy, false)
	case j.Isolation == IsolationShared:
		if p := s.left; p != nil {
			s.left = nil
			if err := s.await(ctx, p); err != nil {
				return nil, err
			}
			if p.err != nil {
				s.b.log.Debug("leaving a shared tab's page failed; replacing the tab", zap.Error(p.err))
			} else {
				s.shared = p.t
			}
		}
		if s.shared != nil && !s.shared.isBroken() {
			return s.shared, nil
		}
		if s.shared != nil {
			s.disposeLater(s.shared)
			s.shared = nil
		}
		t, err := s.newTab(ctx, nil, true)
		if err != nil {
			return nil, err
		}
		s.shared = t
		return t, nil
	}
	p := s.own
	s.own = nil
	if p != nil {
		if err := s.await(ctx, p); err != nil {
			return nil, err
		}
		if p.err == nil || errors.Is(p.err, errRetired) {
			// Tainted after its wipe (a worker or popup the janitor saw
			// late): not reused.
			usable := !p.t.isBroken() && !p.t.isTainted()
			var err error
			if usable && p.err != nil {
				// A job after Retire: the wipe the session skipped runs now.
				err = p.t.wipe(ctx)
			}
			if usable && err == nil {
				s.countReuse(p.t)
				return p.t, nil
			}
			s.b.contexts.replaced(p.t.replaceReason(err))
		}
		if p.t != nil {
			s.disposeLater(p.t)
		}
		if p.err != nil {
			s.b.log.Debug("preparing the session's tab", zap.Error(p.err))
		}
	}
	return s.newOwnTab(ctx)
}

// await waits for a tab being prepared. If ctx ends first, the preparation
// goes on, and whatever it makes is disposed of.
func (s *Session) await(ctx context.Context, p *prepared) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			<-p.done
			if p.t != nil {
				p.t.close()
			}
		}()
		return ctx.Err()
	}
}

// release hands a tab back after a job. The session's own tab is wiped in
// the background for the next job, or replaced by a new one if the job left
// it unusable or left state in it that no wipe reaches; the shared tab,
// unless broken, leaves its page in the background (given up if it cannot);
// a brand-new context is disposed of.
func (s *Session) release(t *tab) {
	t.endJob()
	if s.retired.Load() && !s.closed {
		s.keep(t)
		return
	}
	switch {
	case t.own:
		if !t.isBroken() && !t.isTainted() && !s.closed {
			s.own = s.background(func(ctx context.Context) (*tab, error) {
				if err := t.wipe(ctx); err != nil {
					t.close()
					if s.ctx.Err() != nil {
						// The session is closing: no replacement (a context
						// created under a canceled call would be lost).
						return nil, err
					}
					s.b.contexts.replaced(t.replaceReason(err))
					s.b.log.Debug("wiping a browser context failed; replacing it", zap.Error(err))
					return s.newOwnTab(ctx)
				}
				return t, nil
			})
			return
		}
		s.disposeLater(t)
		if !s.closed {
			s.b.contexts.replaced(t.replaceReason(nil))
			s.own = s.background(s.newOwnTab)
		}
	case t.shared && t == s.shared && !t.isBroken():
		if !s.closed {
			s.shared = nil
			s.left = s.background(func(ctx context.Context) (*tab, error) {
				if err := t.leave(ctx); err != nil {
					t.close()
					return nil, err
				}
				return t, nil
			})
		}
	default:
		if t == s.shared {
			s.shared = nil
		}
		s.disposeLater(t)
	}
}

// keep leaves t as the job left it, for a retired session: its own tab
// stays its own, unwiped (acquire replaces it should a job come), a shared
// tab stays shared, and a brand-new context waits for Close or Chrome's end.
func (s *Session) keep(t *tab) {
	switch {
	case t.own:
		done := make(chan struct{})
		close(done)
		s.own = &prepared{done: done, t: t, err: errRetired}
	case t.shared && t == s.shared && !t.isBroken():
	default:
		if t == s.shared {
			s.shared = nil
		}
		s.kept = append(s.kept, t)
	}
}

// countReuse counts a job given the session's own tab t, if a wipe
// readied it (not a session's first context).
func (s *Session) countReuse(t *tab) {
	t.mu.Lock()
	wiped := t.wiped
	t.mu.Unlock()
	if wiped {
		s.b.contexts.reused()
	}
}

func (s *Session) disposeLater(t *tab) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		if err := t.close(); err != nil {
			s.b.log.Debug("disposing of a tab", zap.String("target", string(t.id)), zap.Error(err))
		}
	}()
}
