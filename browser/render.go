package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"go.uber.org/zap"
)

// Result is what a render produced.
type Result struct {
	// FinalURL is the page's URL after redirects (location.href).
	FinalURL string
	// Status is the HTTP status of the main document; 0 if none was seen.
	Status int
	// Title is document.title.
	Title string
	// Data is the JSON value of Request.Extract; nil without Extract.
	Data json.RawMessage
	// HTML is the outer HTML when asked for, cut at Request.HTMLMaxBytes.
	HTML string
	// HTMLTruncated reports that HTML was cut.
	HTMLTruncated bool
	// Screenshot is a PNG of the viewport when asked for.
	Screenshot []byte
	// ConsoleErrors are console.error/assert messages and uncaught
	// exceptions, in order, capped.
	ConsoleErrors []string
	// Links are the absolute URLs matched by Request.FollowSelector.
	Links []string
	// LinksOmitted counts the distinct matched URLs past Request.FollowMax.
	LinksOmitted int
	// Dialogs is how many JavaScript dialogs were dismissed.
	Dialogs int
	// Timings of the render's phases.
	Timings Timings
}

// Timings are the durations of a render's phases.
type Timings struct {
	// Setup: getting the tab (fresh context) and applying the job's
	// headers, cookies, user agent, viewport and blocking.
	Setup time.Duration
	// Navigation: Page.navigate until the document committed.
	Navigation time.Duration
	// Wait: until the wait condition held.
	Wait time.Duration
	// Actions: running the actions.
	Actions time.Duration
	// Extract: the extract expression, title, HTML, links, screenshot.
	Extract time.Duration
	// Total: the whole Render call.
	Total time.Duration
}

const (
	maxConsoleLen = 1000
	// errorPageWait bounds the wait for an HTTP error page to be parsed
	// before its title is read.
	errorPageWait = 5 * time.Second
	// healthProbe bounds the check, after a job timed out, of whether
	// Chrome itself still answers.
	healthProbe = 2 * time.Second
)

// Render loads req.URL in the session's tab and returns what the request
// asks for. Errors are *Error: see the Class constants for which are
// retriable. When the page answered before the render failed (an HTTP error
// status, content that is not HTML, a refused redirect) the Result is
// returned too, with at least its Status. The render is bounded by
// req.Timeout and by ctx.
func (s *Session) Render(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	j, err := req.prepare()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, &Error{Class: ClassCanceled, Retriable: true, Err: errSessionClosed}
	}
	if s.b.gone() {
		return nil, &Error{Class: ClassCrashed, Retriable: true, Err: errors.New("chrome is gone")}
	}

	tctx, cancelTimeout := context.WithTimeoutCause(ctx, j.Timeout, errJobTimeout)
	defer cancelTimeout()
	jctx, abort := context.WithCancelCause(tctx)
	defer abort(nil)

	t, err := s.acquire(jctx, j)
	if err != nil {
		return nil, s.classify(ctx, jctx, fmt.Errorf("getting a tab: %w", err))
	}
	st := newJobState(j, abort)
	t.beginJob(st)
	if j.userinfo {
		// Credentials in the URL end in Chrome's HTTP auth cache.
		t.taint()
	}
	res := &Result{}
	res.Timings.Setup = time.Since(start)
	err = s.run(jctx, t, j, st, res)
	res.ConsoleErrors, res.Dialogs = st.consoleAndDialogs()
	if err != nil {
		err = s.classify(ctx, jctx, err)
		var e *Error
		if errors.As(err, &e) && !tabSurvives(e.Class) {
			t.markBroken()
		}
	}
	s.release(t)
	res.Timings.Total = time.Since(start)
	if err != nil {
		s.b.log.Debug("render failed", zap.String("url", j.shown), zap.Error(err))
		if res.Status != 0 {
			// The page answered: what it answered is kept with the failure.
			return res, err
		}
		return nil, err
	}
	return res, nil
}

// errJobTimeout is the cause of a job's context ending at its timeout.
var errJobTimeout = errors.New("job timeout")

// tabSurvives reports whether a shared tab is still usable after an error of
// the class: the page answered, it just was not what the job wanted.
func tabSurvives(class string) bool {
	switch class {
	case ClassHTTP, ClassExtract, ClassAction, ClassRedirect, ClassDownload, ClassNetwork, ClassInvalid,
		ClassDestinationRefused, ClassTooLarge, ClassNotHTML:
		return true
	}
	return false
}

// classify turns err into an *Error, looking at why the job's context ended
// and whether Chrome is still there.
func (s *Session) classify(parent, jctx context.Context, err error) error {
	cause := context.Cause(jctx)
	var e *Error
	if errors.As(cause, &e) {
		// The renderer crashed (set by the crash event).
		return e
	}
	if s.b.gone() {
		return &Error{Class: ClassCrashed, Retriable: true, Err: fmt.Errorf("chrome exited: %w", err)}
	}
	if errors.As(err, &e) {
		return e
	}
	if jctx.Err() != nil {
		if parent.Err() != nil && !errors.Is(context.Cause(parent), context.DeadlineExceeded) {
			return &Error{Class: ClassCanceled, Retriable: true, Err: err}
		}
		// The job ran out of time: a slow or hostile page, or a Chrome that
		// stopped answering altogether.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(parent), healthProbe)
		herr := s.b.Healthy(pctx)
		cancel()
		if herr != nil {
			return &Error{Class: ClassUnresponsive, Retriable: true, Err: fmt.Errorf("%w (and chrome did not answer: %v)", err, herr)}
		}
		return &Error{Class: ClassTimeout, Retriable: true, Err: err}
	}
	return &Error{Class: ClassInternal, Retriable: true, Err: err}
}

// run does the render on tab t. Every call is bounded by ctx.
func (s *Session) run(ctx context.Context, t *tab, j *job, st *jobState, res *Result) error {
	mark := time.Now()
	if err := t.setup(ctx, j); err != nil {
		return err
	}
	res.Timings.Setup += time.Since(mark)
	mark = time.Now()
	nav, err := cdp.Call(ctx, t.t, page.Navigate, page.NavigateParams{URL: j.URL})
	if err != nil {
		return fmt.Errorf("navigating: %w", err)
	}
	res.Timings.Navigation = time.Since(mark)
	if nav.ErrorText != "" {
		if nav.IsDownload {
			what := "a download"
			if resp := st.doc(nav.LoaderID); resp != nil && resp.MimeType != "" {
				what = "a download (" + resp.MimeType + ")"
			}
			return newErr(ClassDownload, false, "%s is %s, not a page", j.shown, what)
		}
		if resp := st.doc(nav.LoaderID); resp != nil && resp.Status >= 400 && strings.Contains(nav.ErrorText, "HTTP_RESPONSE_CODE_FAILURE") {
			// An error status with an empty body: Chrome shows its own
			// error page. Report the status.
			res.Status = int(resp.Status)
			res.FinalURL = resp.URL
			return newErr(ClassHTTP, httpRetriable(res.Status), "HTTP %d", res.Status)
		}
		if strings.Contains(nav.ErrorText, "ERR_INVALID_AUTH_CREDENTIALS") {
			// The site asked for credentials the job did not give (full
			// Chrome cancels the prompt instead of showing the 401 page).
			res.Status = 401
			res.FinalURL = j.shown
			return newErr(ClassHTTP, false, "HTTP 401: %s asks for credentials", j.shown)
		}
		if err := s.refusedTunnel(j, st, nav.ErrorText); err != nil {
			return err
		}
		class, retriable := classifyNetError(nav.ErrorText)
		return newErr(class, retriable, "loading %s: %s", j.shown, nav.ErrorText)
	}
	if resp := st.doc(nav.LoaderID); resp != nil {
		res.Status = int(resp.Status)
		if err := refusedResponse(resp); err != nil {
			return err
		}
		if err := notHTML(j, resp); err != nil {
			res.FinalURL = resp.URL
			return err
		}
	}

	httpErr := error(nil)
	if res.Status >= 400 {
		// The page answered with an error: do not wait for content that
		// will not come; report what it shows, once it is parsed (briefly:
		// an error page that never finishes is reported as it stands).
		httpErr = newErr(ClassHTTP, httpRetriable(res.Status), "HTTP %d", res.Status)
		if nav.LoaderID != "" {
			pctx, cancel := context.WithTimeout(ctx, errorPageWait)
			_ = st.waitLifecycle(pctx, nav.LoaderID, "DOMContentLoaded")
			cancel()
		}
	} else {
		mark = time.Now()
		if err := s.wait(ctx, t, j, st, nav.LoaderID); err != nil {
			return err
		}
		res.Timings.Wait = time.Since(mark)
		if resp := st.doc(nav.LoaderID); res.Status == 0 && resp != nil {
			// The response event came after Page.navigate's answer.
			res.Status = int(resp.Status)
			if err := refusedResponse(resp); err != nil {
				return err
			}
			if res.Status >= 400 {
				httpErr = newErr(ClassHTTP, httpRetriable(res.Status), "HTTP %d", res.Status)
			}
		}
	}
	if httpErr == nil {
		mark = time.Now()
		for i, a := range j.Actions {
			if err := t.act(ctx, a); err != nil {
				return wrapAction(i, a, err)
			}
		}
		res.Timings.Actions = time.Since(mark)
	}

	mark = time.Now()
	if j.Extract != "" && httpErr == nil {
		data, err := t.extract(ctx, j.Extract, j.MaxDataBytes)
		if err != nil {
			return err
		}
		res.Data = data
	}
	if err := t.meta(ctx, j, res); err != nil {
		return err
	}
	if res.Status == 0 {
		// No document response was seen (e.g. served from memory); the
		// page loaded, so it was a success.
		res.Status = 200
	}
	if j.Screenshot {
		shot, err := cdp.Call(ctx, t.t, page.CaptureScreenshot, page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng})
		if err != nil {
			return fmt.Errorf("screenshot: %w", err)
		}
		if j.MaxScreenshotBytes > 0 && len(shot.Data) > j.MaxScreenshotBytes {
			return newErr(ClassTooLarge, false, "screenshot is %d bytes, over the cap of %d bytes (result limit screenshot_bytes)",
				len(shot.Data), j.MaxScreenshotBytes)
		}
		res.Screenshot = shot.Data
	}
	res.Timings.Extract = time.Since(mark)
	return httpErr
}

// notHTML fails a job that waits for a selector on a response no selector
// can appear in (an image, a PDF, a binary file) at once, instead of at its
// timeout. Text, JSON, XML and SVG are documents Chrome builds a DOM for.
func notHTML(j *job, resp *network.Response) error {
	if j.Wait.Selector == "" || resp.Status >= 400 {
		return nil
	}
	mt := strings.ToLower(strings.TrimSpace(resp.MimeType))
	switch {
	case mt == "", strings.HasPrefix(mt, "text/"), mt == "application/xhtml+xml", mt == "application/json",
		strings.HasSuffix(mt, "/xml"), strings.HasSuffix(mt, "+xml"), strings.HasSuffix(mt, "+json"), mt == "application/javascript":
		return nil
	}
	return newErr(ClassNotHTML, false, "the page is %s, not HTML: %q cannot appear in it (HTTP %d)", mt, j.Wait.Selector, resp.Status)
}

// egressRefusedHeader is egress.RefusedHeader: the egress proxy's mark on
// its answer to a refused plain-HTTP request (a test checks they agree).
const egressRefusedHeader = "X-Browserfarm-Egress-Refused"

// refusedResponse is the error of a main document the egress proxy refused
// (the page's URL or where it redirected), or nil.
func refusedResponse(resp *network.Response) error {
	if resp.Status != 403 {
		return nil
	}
	for k, v := range resp.Headers {
		if strings.EqualFold(k, egressRefusedHeader) {
			return newErr(ClassDestinationRefused, false, "destination %v refused by the egress policy (%s)", v, resp.URL)
		}
	}
	return nil
}

// refusedTunnel is the error of an https page whose tunnel the egress proxy
// refused — the job's URL or where it redirected: Chrome reports only that
// the tunnel failed, the proxy says why.
func (s *Session) refusedTunnel(j *job, st *jobState, errText string) error {
	if s.b.opts.EgressRefused == nil || j.proxy != nil || !strings.Contains(errText, "ERR_TUNNEL_CONNECTION_FAILED") {
		return nil
	}
	target := j.URL
	if d := st.lastDocURL(); d != "" {
		target = d
	}
	u, err := url.Parse(target)
	if err != nil {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	if addr, ok := s.b.opts.EgressRefused(net.JoinHostPort(u.Hostname(), port)); ok {
		return newErr(ClassDestinationRefused, false, "destination %s refused by the egress policy (%s)", addr, j.shown)
	}
	return nil
}

func wrapAction(i int, a Action, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return &Error{Class: e.Class, Retriable: e.Retriable, Err: fmt.Errorf("action %d (%s): %w", i, a.Type, e.Err)}
	}
	return fmt.Errorf("action %d (%s): %w", i, a.Type, err)
}

// setup applies the job's settings to the tab before navigation; on a shared
// tab it also undoes what the previous job set.
func (t *tab) setup(ctx context.Context, j *job) error {
	needFetch := len(j.block) > 0 || (j.proxy != nil && j.proxy.hasAuth)
	if needFetch {
		var patterns []*fetch.RequestPattern
		if j.proxy != nil && j.proxy.hasAuth {
			patterns = []*fetch.RequestPattern{{URLPattern: "*"}}
		} else {
			for _, rt := range j.block {
				patterns = append(patterns, &fetch.RequestPattern{URLPattern: "*", ResourceType: rt})
			}
		}
		if _, err := cdp.Call(ctx, t.t, fetch.Enable, fetch.EnableParams{Patterns: patterns, HandleAuthRequests: ptr(j.proxy != nil && j.proxy.hasAuth)}); err != nil {
			return fmt.Errorf("Fetch.enable: %w", err)
		}
		t.fetchOn = true
	} else if t.fetchOn {
		if _, err := cdp.Call(ctx, t.t, fetch.Disable, cdp.Empty{}); err != nil {
			return fmt.Errorf("Fetch.disable: %w", err)
		}
		t.fetchOn = false
	}
	if len(j.Headers) > 0 || t.dirtyHeaders {
		h := network.Headers{}
		for k, v := range j.Headers {
			h[k] = v
		}
		if _, err := cdp.Call(ctx, t.t, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: h}); err != nil {
			return fmt.Errorf("Network.setExtraHTTPHeaders: %w", err)
		}
		t.dirtyHeaders = len(j.Headers) > 0
	}
	if j.UserAgent != "" || t.dirtyUA {
		if err := t.setUserAgent(ctx, j.UserAgent); err != nil {
			return err
		}
		t.dirtyUA = j.UserAgent != ""
	}
	if j.Viewport != (Viewport{}) || t.dirtyViewport {
		if err := t.setViewport(ctx, j.Viewport); err != nil {
			return err
		}
		t.dirtyViewport = j.Viewport != (Viewport{})
	}
	if len(j.Cookies) > 0 {
		cookies := make([]*network.CookieParam, 0, len(j.Cookies))
		for _, c := range j.Cookies {
			p := &network.CookieParam{Name: c.Name, Value: c.Value, Domain: c.Domain, Path: c.Path, Secure: c.Secure, HTTPOnly: c.HTTPOnly}
			if c.Domain == "" {
				p.URL = j.URL
			}
			cookies = append(cookies, p)
		}
		if _, err := cdp.Call(ctx, t.t, network.SetCookies, network.SetCookiesParams{Cookies: cookies}); err != nil {
			return newErr(ClassInvalid, false, "cookies: %v", err)
		}
	}
	return nil
}

// wait blocks until the job's wait condition holds for the navigation.
func (s *Session) wait(ctx context.Context, t *tab, j *job, st *jobState, loader cdp.LoaderID) error {
	if j.Wait.Selector != "" {
		if err := t.waitFor(ctx, j.Wait.Selector, j.Wait.Visible); err != nil {
			return t.waitError(ctx, j.Wait.Selector, j.Wait.Visible, err)
		}
	}
	event := ""
	switch {
	case j.Wait.NetworkIdle:
		event = "networkIdle"
	case j.Wait.Selector == "":
		event = "load"
	}
	if event != "" && loader != "" {
		// No loader means a same-document navigation (a fragment change on
		// a reused tab): the document is loaded already.
		if err := st.waitLifecycle(ctx, loader, event); err != nil {
			return fmt.Errorf("waiting for %s: %w", event, err)
		}
	}
	return nil
}

// eval runs a JavaScript expression in the page's main world and returns its
// JSON value. Exceptions come back as *Error of class extract.
func (t *tab) eval(ctx context.Context, expr string, userGesture bool) (json.RawMessage, error) {
	r, err := cdp.Call(ctx, t.t, runtime.Evaluate, runtime.EvaluateParams{
		Expression:    expr,
		ReturnByValue: ptr(true),
		AwaitPromise:  ptr(true),
		UserGesture:   ptr(userGesture),
	})
	if err != nil {
		return nil, err
	}
	if r.ExceptionDetails != nil {
		return nil, newErr(ClassExtract, false, "script threw: %s", exceptionText(r.ExceptionDetails))
	}
	return remoteValue(r.Result), nil
}

// remoteValue is the JSON of a by-value remote object: undefined is null,
// values JSON cannot hold (NaN, Infinity, -0, bigint) are strings.
func remoteValue(o *runtime.RemoteObject) json.RawMessage {
	if o == nil {
		return json.RawMessage("null")
	}
	if o.UnserializableValue != "" {
		return json.RawMessage(jsString(string(o.UnserializableValue)))
	}
	if len(o.Value) == 0 {
		return json.RawMessage("null")
	}
	return json.RawMessage(o.Value)
}

// evalRetry is eval for scripts that wait: if the page navigates meanwhile
// (a client-side redirect), the script's context dies and it runs again in
// the new document.
func (t *tab) evalRetry(ctx context.Context, expr string) (json.RawMessage, error) {
	for {
		v, err := t.eval(ctx, expr, false)
		if err == nil || !contextLost(err) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func contextLost(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Execution context was destroyed") ||
		strings.Contains(s, "Cannot find default execution context") ||
		strings.Contains(s, "Inspected target navigated or closed")
}

func (t *tab) waitFor(ctx context.Context, sel string, visible bool) error {
	_, err := t.evalRetry(ctx, fmt.Sprintf("(%s)(%s, %t)", jsWaitFor, jsString(sel), visible))
	return selectorError(err)
}

// describeWaitTimeout bounds the look at the page after a wait timed out.
const describeWaitTimeout = 2 * time.Second

// waitError names the unmet condition of a failed selector wait and, when
// the wait ran out of time, what the page had: "present but has zero size".
func (t *tab) waitError(ctx context.Context, sel string, visible bool, err error) error {
	cond := "present in the DOM"
	if visible {
		cond = "visible"
	}
	if ctx.Err() == nil {
		return fmt.Errorf("waiting for %q to be %s: %w", sel, cond, err)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), describeWaitTimeout)
	defer cancel()
	found := "the page could not be read"
	if v, derr := t.eval(dctx, "("+jsDescribeWait+")("+jsString(sel)+")", false); derr == nil {
		_ = json.Unmarshal(v, &found)
	}
	return fmt.Errorf("waiting for %q to be %s: %w; found: %s", sel, cond, err, found)
}

// selectorError turns a script's bad-selector exception into ClassInvalid.
func selectorError(err error) error {
	var e *Error
	if errors.As(err, &e) && e.Class == ClassExtract && strings.Contains(e.Err.Error(), "bad selector") {
		return &Error{Class: ClassInvalid, Retriable: false, Err: e.Err}
	}
	if errors.As(err, &e) && e.Class == ClassExtract {
		return &Error{Class: ClassAction, Retriable: false, Err: e.Err}
	}
	return err
}

// act performs one action.
func (t *tab) act(ctx context.Context, a Action) error {
	times := max(a.Times, 1)
	switch a.Type {
	case ActionClick:
		for range times {
			if err := t.click(ctx, a.Selector); err != nil {
				return err
			}
			if err := sleep(ctx, time.Duration(a.Ms)*time.Millisecond); err != nil {
				return err
			}
		}
	case ActionScroll:
		ms := a.Ms
		if ms == 0 {
			ms = defaultScrollWaitMs
		}
		_, err := t.eval(ctx, fmt.Sprintf("(%s)(%d, %d)", jsScroll, times, ms), false)
		return selectorError(err)
	case ActionType:
		v, err := t.evalRetry(ctx, "("+jsFocus+")("+jsString(a.Selector)+")")
		if err != nil {
			return selectorError(err)
		}
		if string(v) != "true" {
			return newErr(ClassAction, false, "%q is not an element that takes text", a.Selector)
		}
		if _, err := cdp.Call(ctx, t.t, input.InsertText, input.InsertTextParams{Text: a.Text}); err != nil {
			return fmt.Errorf("Input.insertText: %w", err)
		}
	case ActionWait:
		if a.Selector != "" {
			return t.waitFor(ctx, a.Selector, true)
		}
		return sleep(ctx, time.Duration(a.Ms)*time.Millisecond)
	}
	return nil
}

// click scrolls the element into view and clicks its centre with real mouse
// events, which count as a user gesture for the page (popups, beforeunload,
// isTrusted checks).
func (t *tab) click(ctx context.Context, sel string) error {
	v, err := t.evalRetry(ctx, "("+jsClickPoint+")("+jsString(sel)+")")
	if err != nil {
		return selectorError(err)
	}
	if string(v) == "null" {
		// Covered or moving: the page got a synthetic click instead.
		return nil
	}
	var pt struct{ X, Y float64 }
	if err := json.Unmarshal(v, &pt); err != nil {
		return fmt.Errorf("reading the click point %s: %w", v, err)
	}
	for _, typ := range []input.DispatchMouseEventType{input.DispatchMouseEventTypeMouseMoved, input.DispatchMouseEventTypeMousePressed, input.DispatchMouseEventTypeMouseReleased} {
		p := input.DispatchMouseEventParams{Type: typ, X: pt.X, Y: pt.Y}
		if typ != input.DispatchMouseEventTypeMouseMoved {
			p.Button = input.MouseButtonLeft
			p.ClickCount = 1
		}
		if _, err := cdp.Call(ctx, t.t, input.DispatchMouseEvent, p); err != nil {
			return fmt.Errorf("Input.dispatchMouseEvent: %w", err)
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// extract evaluates the extract expression. With a cap, the expression runs
// inside a wrapper that measures its JSON in the page and answers with the
// size instead of the value when it is over the cap, so a page cannot make
// the node read hundreds of megabytes. JSON.stringify counts UTF-16 units,
// never more than the UTF-8 bytes, so what it lets through is checked again
// in bytes here. A value JSON cannot hold (cyclic, BigInt) is returned as
// before and measured here.
func (t *tab) extract(ctx context.Context, expr string, maxBytes int) (json.RawMessage, error) {
	if maxBytes > 0 {
		expr = fmt.Sprintf(jsExtractCapped, strings.TrimRight(expr, " \t\r\n;"), maxBytes, jsString(extractOverKey))
	}
	v, err := t.eval(ctx, expr, false)
	if err != nil {
		return nil, fmt.Errorf("extract: %w", err)
	}
	if maxBytes > 0 {
		var over map[string]int64
		if json.Unmarshal(v, &over) == nil && len(over) == 1 && over[extractOverKey] > 0 {
			return nil, newErr(ClassTooLarge, false, "extract value is over %d bytes (%d characters of JSON), the cap (result limit data_bytes)",
				maxBytes, over[extractOverKey])
		}
		if len(v) > maxBytes {
			return nil, newErr(ClassTooLarge, false, "extract value is %d bytes, over the cap of %d bytes (result limit data_bytes)", len(v), maxBytes)
		}
	}
	return v, nil
}

// extractOverKey names the size in the capped extract's over-cap answer.
const extractOverKey = "__browserfarm_extract_over_cap__"

// jsExtractCapped wraps an extract expression (%s), its cap (%d) and the
// over-cap key (%s). The expression sits on lines of its own so that a
// trailing line comment cannot swallow the wrapper.
const jsExtractCapped = `(async () => { const v = await (
%s
); let n = 0; try { const s = JSON.stringify(v); n = s === undefined ? 0 : s.length; } catch (e) {}
if (n > %[2]d) { return {[%[3]s]: n}; } return v; })()`

// meta reads title, final URL, HTML and links in one round trip.
func (t *tab) meta(ctx context.Context, j *job, res *Result) error {
	follow := "null"
	if j.FollowSelector != "" {
		follow = jsString(j.FollowSelector)
	}
	// The HTML is cut in the page (in UTF-16 units, a safe upper bound of
	// bytes/1) so that a huge DOM does not cross the pipe whole.
	expr := fmt.Sprintf("(%s)(%t, %d, %s, %d)", jsMeta, j.HTML, j.HTMLMaxBytes, follow, j.FollowMax)
	v, err := t.eval(ctx, expr, false)
	if err != nil {
		return selectorError(err)
	}
	var m struct {
		Title     string   `json:"title"`
		URL       string   `json:"url"`
		HTML      string   `json:"html"`
		Truncated bool     `json:"truncated"`
		Links     []string `json:"links"`
		More      int      `json:"more"`
	}
	if err := json.Unmarshal(v, &m); err != nil {
		return fmt.Errorf("reading the page's metadata: %w", err)
	}
	res.Title, res.FinalURL, res.Links, res.LinksOmitted = m.Title, m.URL, m.Links, m.More
	if j.HTML {
		res.HTML, res.HTMLTruncated = m.HTML, m.Truncated
		if len(res.HTML) > j.HTMLMaxBytes {
			res.HTML, res.HTMLTruncated = cutUTF8(res.HTML, j.HTMLMaxBytes), true
		}
	}
	return nil
}

// cutUTF8 cuts s to at most n bytes without splitting a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// jobState is what the tab's events tell about the current job.
type jobState struct {
	abort      func(error)
	block      map[network.ResourceType]bool
	maxConsole int

	mu      sync.Mutex
	latest  cdp.LoaderID // main-frame loader of the last "init"
	events  map[cdp.LoaderID]map[string]bool
	docs    map[cdp.LoaderID]*network.Response
	docURL  string // the main frame's last document request: the URL, or where it redirected
	console []string
	dialogs int
	changed chan struct{}
}

func newJobState(j *job, abort func(error)) *jobState {
	st := &jobState{
		abort:      abort,
		maxConsole: j.MaxConsoleErrors,
		events:     map[cdp.LoaderID]map[string]bool{},
		docs:       map[cdp.LoaderID]*network.Response{},
		changed:    make(chan struct{}, 1),
	}
	if len(j.block) > 0 {
		st.block = map[network.ResourceType]bool{}
		for _, rt := range j.block {
			st.block[rt] = true
		}
	}
	return st
}

func (st *jobState) poke() {
	select {
	case st.changed <- struct{}{}:
	default:
	}
}

func (st *jobState) lifecycle(loader cdp.LoaderID, name string) {
	st.mu.Lock()
	if name == "init" {
		st.latest = loader
	}
	m := st.events[loader]
	if m == nil {
		m = map[string]bool{}
		st.events[loader] = m
	}
	m[name] = true
	st.mu.Unlock()
	st.poke()
}

func (st *jobState) docRequest(u string) {
	st.mu.Lock()
	st.docURL = u
	st.mu.Unlock()
}

func (st *jobState) lastDocURL() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.docURL
}

func (st *jobState) response(loader cdp.LoaderID, r *network.Response) {
	st.mu.Lock()
	st.docs[loader] = r
	st.mu.Unlock()
	st.poke()
}

func (st *jobState) doc(loader cdp.LoaderID) *network.Response {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.docs[loader]
}

// seen reports whether the main frame's current document has fired the
// lifecycle event. The current document is the one the job navigated to,
// or a newer one if the page navigated on (a client-side redirect): a
// document starts with "init", and this job's navigation is the first one
// the job's state sees.
func (st *jobState) seen(nav cdp.LoaderID, name string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	cur := nav
	if st.latest != "" {
		cur = st.latest
	}
	return st.events[cur][name]
}

func (st *jobState) waitLifecycle(ctx context.Context, nav cdp.LoaderID, name string) error {
	for !st.seen(nav, name) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-st.changed:
		}
	}
	return nil
}

func (st *jobState) blocks(rt network.ResourceType) bool {
	return st.block[rt]
}

func (st *jobState) dialog() {
	st.mu.Lock()
	st.dialogs++
	st.mu.Unlock()
}

func (st *jobState) consoleError(msg string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.console) >= st.maxConsole {
		return
	}
	if len(msg) > maxConsoleLen {
		msg = cutUTF8(msg, maxConsoleLen) + "…"
	}
	st.console = append(st.console, msg)
}

func (st *jobState) consoleAndDialogs() ([]string, int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]string(nil), st.console...), st.dialogs
}

func consoleText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		switch {
		case a == nil:
		case a.Type == runtime.RemoteObjectTypeString:
			var s string
			if json.Unmarshal(a.Value, &s) == nil {
				parts = append(parts, s)
				continue
			}
			parts = append(parts, string(a.Value))
		case len(a.Value) > 0:
			parts = append(parts, string(a.Value))
		case a.UnserializableValue != "":
			parts = append(parts, string(a.UnserializableValue))
		case a.Description != "":
			parts = append(parts, a.Description)
		default:
			parts = append(parts, string(a.Type))
		}
	}
	return strings.Join(parts, " ")
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d == nil {
		return "unknown exception"
	}
	if d.Exception != nil && d.Exception.Description != "" {
		return d.Exception.Description
	}
	return d.Text
}
