package browser

// A tab's events, as chromedp delivers them on the goroutine that reads the
// tab's messages: what they record for the job and the wipe, and the CDP
// calls some of them ask for, made on goroutines the tab owns.

import (
	"context"
	"strings"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/inspector"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"go.uber.org/zap"
)

// spawn runs a CDP call that an event asks for (dialog, paused request) on
// its own goroutine: event callbacks must not block. The tab owns it.
func (t *tab) spawn(fn func(ctx context.Context)) {
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		return
	}
	t.wg.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.wg.Done()
		ctx, cancel := context.WithTimeout(t.ctx, closeWait)
		defer cancel()
		fn(ctx)
	}()
}

// onEvent is the tab's event listener. chromedp calls it on the goroutine
// that reads the tab's messages, so it must return at once.
func (t *tab) onEvent(ev any) {
	switch e := ev.(type) {
	case *page.EventJavascriptDialogOpening:
		// Leaving a page is allowed; every other dialog is dismissed.
		accept := e.Type == page.DialogTypeBeforeunload
		t.spawn(func(ctx context.Context) {
			_, err := cdp.Call(ctx, t.t, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept})
			if err != nil {
				t.b.log.Debug("dismissing a dialog", zap.Error(err))
			}
		})
		t.withJob(func(j *jobState) { j.dialog() })
	case *page.EventLifecycleEvent:
		if e.FrameID != cdp.FrameID(t.id) {
			return
		}
		t.withJob(func(j *jobState) { j.lifecycle(e.LoaderID, e.Name) })
	case *page.EventFrameNavigated:
		if e.Frame != nil {
			t.noteOrigin(e.Frame.SecurityOrigin)
			t.notePartitionedFrame(e.Frame)
			t.documentChanged(e.Frame)
		}
	case *target.EventAttachedToTarget:
		// A dedicated worker's requests are its own target's: the tab's
		// Network events, request block and in-flight accounting do not
		// see them, so a worker can answer an HTTP auth challenge (XHR
		// credentials) into the context's auth cache, which no CDP call
		// clears, or leave a fetch to land after the wipe.
		if e.TargetInfo != nil && e.TargetInfo.Type == "worker" {
			t.taint(ReplacedWorker)
		}
	case *page.EventFrameDetached:
		// A frame that moved to another renderer (a cross-site iframe under
		// site isolation) stores its data where this tab's agents do not
		// see it: the wipe cannot vouch for it.
		if e.Reason == page.FrameDetachedReasonSwap {
			t.taint(ReplacedFrame)
		}
	case *network.EventLoadingFinished:
		t.requestEnded(e.RequestID)
	case *network.EventLoadingFailed:
		t.requestEnded(e.RequestID)
		if e.Type == network.ResourceTypeDocument {
			t.withJob(func(j *jobState) { j.docFailed(e.RequestID, e.ErrorText) })
		}
	case *network.EventRequestWillBeSent:
		if outlives(e.Type) {
			t.requestStarted(e.RequestID)
		}
		// Every hop of the main document's redirects: where a refused
		// tunnel was going.
		if e.Type == network.ResourceTypeDocument && e.FrameID == cdp.FrameID(t.id) && e.Request != nil {
			t.withJob(func(j *jobState) { j.docRequest(e.RequestID, e.Request.URL) })
		}
	case *network.EventResponseReceivedExtraInfo:
		// Chrome caches answered HTTP credentials per context, and no CDP
		// call clears that cache: a challenge (even one the network stack
		// answered itself, from URL credentials, which no responseReceived
		// reports) or credentials on the wire leave the context tainted.
		if e.StatusCode == 401 || e.StatusCode == 407 {
			t.taint(ReplacedAuth)
		}
		t.withJob(func(j *jobState) { j.extraInfo(e.RequestID, e.StatusCode, e.Headers) })
	case *network.EventRequestWillBeSentExtraInfo:
		for k := range e.Headers {
			if strings.EqualFold(k, "Authorization") || strings.EqualFold(k, "Proxy-Authorization") {
				t.taint(ReplacedAuth)
				break
			}
		}
	case *network.EventResponseReceived:
		if e.Response != nil && (e.Response.Status == 401 || e.Response.Status == 407) {
			t.taint(ReplacedAuth)
		}
		if e.Type != network.ResourceTypeDocument || e.FrameID != cdp.FrameID(t.id) {
			return
		}
		t.withJob(func(j *jobState) { j.response(e.LoaderID, e.Response) })
	case *runtime.EventConsoleAPICalled:
		if e.Type != runtime.ConsoleAPICalledTypeError && e.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		msg := consoleText(e.Args)
		if rest, ok := strings.CutPrefix(msg, uncaughtMarker); ok && e.Type == runtime.ConsoleAPICalledTypeError {
			t.withJob(func(j *jobState) { j.consoleError("uncaught: " + rest) })
			return
		}
		t.withJob(func(j *jobState) { j.consoleError("console." + string(e.Type) + ": " + msg) })
	case *runtime.EventExecutionContextCreated, *runtime.EventExecutionContextDestroyed:
		t.noteContext(ev)
	case *runtime.EventExceptionThrown:
		msg := exceptionText(e.ExceptionDetails)
		t.withJob(func(j *jobState) { j.consoleError("uncaught: " + msg) })
	case *inspector.EventTargetCrashed:
		t.crashed("renderer crashed")
	case *fetch.EventRequestPaused:
		t.onRequestPaused(e)
	case *fetch.EventAuthRequired:
		t.onAuthRequired(e)
	}
}

func (t *tab) withJob(fn func(j *jobState)) {
	t.mu.Lock()
	j := t.cur
	t.mu.Unlock()
	if j != nil {
		fn(j)
	}
}

// onRequestPaused fails blocked resource types and lets the rest through.
// Requests pause only for the blocked types, unless proxy authentication
// needs Fetch to see every request.
func (t *tab) onRequestPaused(e *fetch.EventRequestPaused) {
	blocked := false
	t.withJob(func(j *jobState) { blocked = j.blocks(e.ResourceType) })
	id := e.RequestID
	t.spawn(func(ctx context.Context) {
		var err error
		if blocked {
			_, err = cdp.Call(ctx, t.t, fetch.FailRequest, fetch.FailRequestParams{RequestID: id, ErrorReason: network.ErrorReasonBlockedByClient})
		} else {
			_, err = cdp.Call(ctx, t.t, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id})
		}
		if err != nil {
			t.b.log.Debug("answering a paused request", zap.Error(err))
		}
	})
}

// onAuthRequired answers the proxy's challenge with the job's credentials,
// once a request: a proxy that challenges them again refused them, and
// answering again would go on until Chrome gives up (about 35 requests,
// net::ERR_TOO_MANY_RETRIES, read as a network failure); canceled, the
// request ends with the proxy's 407, a failure that will not change. A
// site's own challenge is left to Chrome's default (no credentials).
func (t *tab) onAuthRequired(e *fetch.EventAuthRequired) {
	resp := &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth}
	if p := t.proxy; p != nil && p.hasAuth && e.AuthChallenge != nil && e.AuthChallenge.Source == fetch.AuthChallengeSourceProxy && t.firstProxyChallenge(e.RequestID) {
		resp = &fetch.AuthChallengeResponse{
			Response: fetch.AuthChallengeResponseResponseProvideCredentials,
			Username: p.user,
			Password: p.password,
		}
	}
	id := e.RequestID
	t.spawn(func(ctx context.Context) {
		_, err := cdp.Call(ctx, t.t, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: id, AuthChallengeResponse: resp})
		if err != nil {
			t.b.log.Debug("answering an auth challenge", zap.Error(err))
		}
	})
}

// firstProxyChallenge reports whether the request has not been answered a
// proxy challenge yet, and records that it has. The tab of a job with a
// proxy is the job's own (IsolationContext), so the record lives one job.
func (t *tab) firstProxyChallenge(id fetch.RequestID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.proxyChallenged[id] {
		return false
	}
	if t.proxyChallenged == nil {
		t.proxyChallenged = map[fetch.RequestID]bool{}
	}
	t.proxyChallenged[id] = true
	return true
}
