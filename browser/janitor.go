package browser

import (
	"context"
	"sync"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
	"go.uber.org/zap"
)

// janitor watches the browser-wide target events. It closes popups (pages
// that a page opened: they would take CPU and memory from the job and
// outlive it in a shared context) and tells tabs that their renderer crashed.
// Event callbacks must not block, so closing happens on the janitor's own
// goroutine.
type janitor struct {
	b *Browser

	mu       sync.Mutex
	queue    []target.ID
	crashes  map[target.ID]func(status string)
	untraced map[cdp.BrowserContextID]func(ReplaceReason) // called when a context gets a page or worker no tab's wipe reaches
	closed   int
	wake     chan struct{}
}

func newJanitor(b *Browser) *janitor {
	return &janitor{b: b, crashes: map[target.ID]func(string){}, untraced: map[cdp.BrowserContextID]func(ReplaceReason){}, wake: make(chan struct{}, 1)}
}

func (j *janitor) onEvent(ev any) {
	switch ev := ev.(type) {
	case *target.EventTargetCreated:
		info := ev.TargetInfo
		if info != nil && (info.Type == "service_worker" || info.Type == "shared_worker") {
			j.mu.Lock()
			fn := j.untraced[info.BrowserContextID]
			j.mu.Unlock()
			if fn != nil {
				fn(ReplacedWorker)
			}
			return
		}
		if info == nil || info.Type != "page" || (info.OpenerID == "" && info.OpenerFrameID == "") {
			return
		}
		// A popup lives, and may write to its context, until it is closed,
		// which is not ordered with a wipe of its opener's tab.
		j.mu.Lock()
		j.queue = append(j.queue, info.TargetID)
		fn := j.untraced[info.BrowserContextID]
		j.mu.Unlock()
		if fn != nil {
			fn(ReplacedPopup)
		}
		select {
		case j.wake <- struct{}{}:
		default:
		}
	case *target.EventTargetCrashed:
		j.mu.Lock()
		fn := j.crashes[ev.TargetID]
		j.mu.Unlock()
		if fn != nil {
			fn(ev.Status)
		}
	}
}

// watchCrash registers fn to be called (from the event loop: it must not
// block) when the target's renderer crashes. The returned func unregisters.
func (j *janitor) watchCrash(id target.ID, fn func(status string)) func() {
	j.mu.Lock()
	j.crashes[id] = fn
	j.mu.Unlock()
	return func() {
		j.mu.Lock()
		delete(j.crashes, id)
		j.mu.Unlock()
	}
}

// watchContext registers fn to be called (from the event loop: it must not
// block) when a service worker, a shared worker or a popup starts in the
// browser context: something that writes to the context and that a wipe of
// its tab does not reach. The returned func unregisters.
func (j *janitor) watchContext(id cdp.BrowserContextID, fn func(ReplaceReason)) func() {
	j.mu.Lock()
	j.untraced[id] = fn
	j.mu.Unlock()
	return func() {
		j.mu.Lock()
		delete(j.untraced, id)
		j.mu.Unlock()
	}
}

// popupsClosed is how many popups the janitor has closed.
func (j *janitor) popupsClosed() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.closed
}

func (j *janitor) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-j.wake:
		}
		j.mu.Lock()
		ids := j.queue
		j.queue = nil
		j.mu.Unlock()
		for _, id := range ids {
			cctx, cancel := context.WithTimeout(ctx, closeWait)
			_, err := cdp.Call(cctx, j.b.cdpB, target.CloseTarget, target.CloseTargetParams{TargetID: id})
			cancel()
			if err != nil {
				// The popup may be gone already, with its context.
				j.b.log.Debug("closing a popup", zap.String("target", string(id)), zap.Error(err))
				continue
			}
			j.mu.Lock()
			j.closed++
			j.mu.Unlock()
			j.b.log.Debug("closed a popup", zap.String("target", string(id)))
		}
	}
}
