package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
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
	// LinksOmitted counts the distinct matched URLs past Request.FollowMax
	// and those longer than jobspec.MaxURLLength, which are not collected.
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
	// noPageWait bounds the wait, after a navigation Chrome aborted, for
	// the status its document request had on the wire.
	noPageWait = 500 * time.Millisecond
	// healthProbe bounds the check, after a job timed out, of whether
	// Chrome itself still answers.
	healthProbe = 2 * time.Second
	// answerWait bounds the read, after a failure, of the page's final URL
	// and title (answered). The browser process answers it, also for a
	// page whose renderer hangs: milliseconds, unless Chrome itself hangs.
	answerWait = 500 * time.Millisecond
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
	return s.render(ctx, start, j)
}

// render is Render of a prepared request.
func (s *Session) render(ctx context.Context, start time.Time, j *job) (*Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, &Error{Class: ClassCanceled, Retriable: true, Err: errSessionClosed}
	}
	if s.b.Gone() {
		return nil, &Error{Class: ClassCrashed, Retriable: true, Err: errors.New("chrome is gone")}
	}

	tctx, cancelTimeout := context.WithTimeoutCause(ctx, j.Timeout, errJobTimeout)
	defer cancelTimeout()
	jctx, abort := context.WithCancelCause(tctx)
	defer abort(nil)
	// A dead Chrome answers nothing: a CDP call fails on the lost
	// connection, but a wait for a page event (load, network idle) or an
	// action's pause would go on to the job's timeout.
	stopWatch := context.AfterFunc(s.b.gone, func() {
		abort(&Error{Class: ClassCrashed, Retriable: true, Err: errors.New("chrome is gone")})
	})
	defer stopWatch()

	t, err := s.acquire(jctx, j)
	if err != nil {
		return nil, MarkBeforePage(s.classify(ctx, jctx, fmt.Errorf("getting a tab: %w", err)))
	}
	st := newJobState(j, abort)
	if s.egressed(j) {
		st.watchEgress(s.b.opts.EgressFailure)
	}
	t.beginJob(st)
	if j.userinfo {
		// Credentials in the URL end in Chrome's HTTP auth cache.
		t.taint(ReplacedAuth)
	}
	res := &Result{}
	err = t.setup(jctx, j)
	res.Timings.Setup = time.Since(start)
	early := err != nil
	if !early {
		err = s.run(jctx, t, j, st, res)
	}
	res.ConsoleErrors, res.Dialogs = st.consoleAndDialogs()
	if err != nil {
		err = s.classify(ctx, jctx, err)
		if early {
			err = MarkBeforePage(err)
		}
		var e *Error
		if errors.As(err, &e) && !tabSurvives(e.Class) {
			t.markBroken()
		}
		if res.Status != 0 && keepsAnswer(ClassOf(err)) {
			s.answered(ctx, t, st, res)
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

// keepsAnswer reports whether a failure of the class, after the page's
// response, leaves a page whose final URL and title are worth reading
// (answered): the page answered, it just was not what the job wanted, or
// did not show it in time. A lost Chrome, a canceled job or a failure of
// the farm's own has none to read.
func keepsAnswer(class string) bool {
	switch class {
	case ClassHTTP, ClassTimeout, ClassExtract, ClassAction, ClassTooLarge, ClassNotHTML:
		return true
	}
	return false
}

// answered fills in what the failed render had not read of the page that
// answered: its final URL and title. They come from the browser process's
// record of the tab (Target.getTargetInfo), not from the page, so that a
// page whose renderer hangs (a job that timed out in an endless script)
// delays its failure by nothing; the call is bounded by answerWait besides,
// and skipped on a Chrome that is gone. Chrome's title of a page without
// one is its URL, and its record can lag the commit it reported (standInTitle):
// neither is a title; and before the job's document committed (a response
// that is no page, say) its title is the page's before the job's: not read.
func (s *Session) answered(ctx context.Context, t *tab, st *jobState, res *Result) {
	if res.FinalURL != "" && res.Title != "" || s.b.Gone() {
		return
	}
	actx, cancel := context.WithTimeout(ctx, answerWait)
	defer cancel()
	ret, err := cdp.Call(actx, s.b.cdpB, target.GetTargetInfo, target.GetTargetInfoParams{TargetID: t.id})
	if err != nil || ret.TargetInfo == nil {
		s.b.log.Debug("reading a failed page's URL and title", zap.Error(err))
		return
	}
	info := ret.TargetInfo
	if res.FinalURL == "" {
		res.FinalURL = cutUTF8(info.URL, maxMetaText)
	}
	// The title is the document's at info.URL: the job's only when that is
	// where the job ended.
	if res.Title == "" && st.committed() && info.URL == res.FinalURL &&
		!standInTitle(info.Title, info.URL) {
		res.Title = cutUTF8(info.Title, maxMetaText)
	}
}

// standInTitle reports whether title, in Chrome's record of a tab at u, is
// no page's own: what Chrome shows for a page at u that has none (u itself,
// without "http://", and without the slash of a bare host's path), or the
// page's before it, which the record can still hold after the commit it
// reported — on a session's tab always about:blank (the wipe's, or a new
// tab's).
func standInTitle(title, u string) bool {
	if title == "about:blank" {
		return true
	}
	for _, v := range []string{u, strings.TrimPrefix(u, "http://")} {
		if title == v || title == strings.TrimSuffix(v, "/") {
			return true
		}
	}
	return false
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
	if s.b.Gone() {
		return &Error{Class: ClassCrashed, Retriable: true, Err: fmt.Errorf("chrome exited: %w", err)}
	}
	if errors.As(err, &e) {
		return e
	}
	if ce := (*cdproto.Error)(nil); errors.As(err, &ce) && ce.Code == errCodeTooLarge {
		// What the page made Chrome answer (its links, its title) is over
		// the node's bound: it would be again.
		return &Error{Class: ClassTooLarge, Err: err}
	}
	if jctx.Err() != nil {
		if parent.Err() != nil && !errors.Is(context.Cause(parent), context.DeadlineExceeded) {
			return &Error{Class: ClassCanceled, Retriable: true, Err: err}
		}
		// The job ran out of time: a slow or hostile page, or a Chrome that
		// stopped answering altogether.
		if uerr := s.unresponsive(parent, err); uerr != nil {
			return uerr
		}
		return &Error{Class: ClassTimeout, Retriable: true, Err: err}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// A call bounded on its own (closeWait: making the job's browser
		// context, say) ran out: on a Chrome that stopped answering that
		// is the Chrome's failure, not an unexplained one.
		if uerr := s.unresponsive(parent, err); uerr != nil {
			return uerr
		}
	}
	return &Error{Class: ClassInternal, Retriable: true, Err: err}
}

// unresponsive returns err as ClassUnresponsive if Chrome does not answer
// a health check within healthProbe, nil if it does.
func (s *Session) unresponsive(parent context.Context, err error) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(parent), healthProbe)
	herr := s.b.Healthy(pctx)
	cancel()
	if herr == nil {
		return nil
	}
	return &Error{Class: ClassUnresponsive, Retriable: true, Err: fmt.Errorf("%w (and chrome did not answer: %v)", err, herr)}
}

// run does the render on tab t. Every call is bounded by ctx.
// The tab is set up for the job already (tab.setup).
func (s *Session) run(ctx context.Context, t *tab, j *job, st *jobState, res *Result) (err error) {
	mark := time.Now()
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
			return httpStatusErr(res.Status)
		}
		if status, u := noPage(ctx, &nav, st); status != 0 {
			res.Status, res.FinalURL = status, u
			return newErr(ClassHTTP, false, "HTTP %d: the server answered with no page", status)
		}
		if err := redirectedAway(&nav, st); err != nil {
			return err
		}
		if strings.Contains(nav.ErrorText, "ERR_INVALID_AUTH_CREDENTIALS") {
			// The site asked for credentials the job did not give (full
			// Chrome cancels the prompt instead of showing the 401 page).
			res.Status = 401
			res.FinalURL = j.shown
			return newErr(ClassHTTP, false, "HTTP 401: %s asks for credentials", j.shown)
		}
		if err := s.egressTunnel(j, st, nav.ErrorText); err != nil {
			return err
		}
		class, retriable := classifyNetError(nav.ErrorText)
		return newErr(class, retriable, "loading %s: %s", j.shown, nav.ErrorText)
	}
	// The document the job reads: the one it navigated to, or the one the
	// page went on to while it was read.
	loader := nav.LoaderID
	defer func() {
		if left := st.leftForNoPage(); err != nil && left != nil && errors.Is(context.Cause(ctx), left) {
			// The job ended as the page went on to a document that
			// answered nothing: the job's answer is that one's.
			res.Status = 0
			return
		}
		if err != nil && res.Status == 0 {
			// A failure after the response, which came after Page.navigate's
			// answer: the page answered, and its status goes with the
			// failure — unless the egress filter answered for it (the site
			// answered nothing).
			if resp := st.doc(loader); resp != nil && s.egressAnswer(j, resp) == nil {
				res.Status = int(resp.Status)
			}
		}
	}()
	if resp := st.doc(nav.LoaderID); resp != nil {
		if err := s.egressAnswer(j, resp); err != nil {
			return err
		}
		res.Status = int(resp.Status)
		if err := notHTML(j, resp); err != nil {
			res.FinalURL = resp.URL
			return err
		}
	}
	// From here a navigation of the main frame that reaches a refused
	// destination (a script's, a meta refresh's), or a document that is no
	// page, ends the job at once. One that answered an HTTP error does not
	// end the wait: the page can go on from it (a soft 404's script, an app
	// served from its 404 page); it is read below if the wait ends there (a
	// selector it never shows still runs out the job's timeout).
	st.arm(func() error { return s.noPageNow(t, j, st) })

	httpErr := error(nil)
	if res.Status >= 400 {
		// The page answered with an error: do not wait for content that
		// will not come; report what it shows, once it is parsed (briefly:
		// an error page that never finishes is reported as it stands).
		httpErr = httpStatusErr(res.Status)
		if nav.LoaderID != "" {
			pctx, cancel := context.WithTimeout(ctx, errorPageWait)
			_ = st.waitLifecycle(pctx, nav.LoaderID, "DOMContentLoaded")
			cancel()
		}
	} else {
		mark = time.Now()
		err := s.wait(ctx, t, j, st, nav.LoaderID)
		// Kept with a failure too: a wait that timed out says how long.
		res.Timings.Wait = time.Since(mark)
		if err != nil {
			return err
		}
		if resp := st.doc(nav.LoaderID); res.Status == 0 && resp != nil {
			// The response event came after Page.navigate's answer.
			if err := s.egressAnswer(j, resp); err != nil {
				return err
			}
			res.Status = int(resp.Status)
			if res.Status >= 400 {
				httpErr = httpStatusErr(res.Status)
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
	// What the job reads — its extract, URL, title, HTML, links, screenshot
	// — is of one document. A page that goes on to another one while it is
	// read (a meta refresh, a script's navigation after load, an action's
	// click) is read again once the new document has loaded, from its
	// start: else the data could be the first page's, or the new one's
	// before it parsed, and the URL and title the new one's.
	if loader == "" {
		// A same-document navigation: the document is the one committed.
		loader = t.mainLoaderID()
	}
	for moves := 0; ; {
		if cur := t.mainLoaderID(); cur != loader && cur != "" {
			if moves++; moves > maxReadHops {
				// A page that keeps navigating itself: as a redirect loop.
				return newErr(ClassRedirect, false, "the page went on to another document %d times while it was being read", moves)
			}
			if err := st.waitLifecycle(ctx, cur, "load"); err != nil {
				return fmt.Errorf("waiting for load of the document the page went on to: %w", err)
			}
			// What the job reports is the new document's: its status, and
			// whether that is an error.
			loader, res.Status, httpErr = cur, 0, nil
			if err := s.leftFor(t, j, st, loader); err != nil {
				return err
			}
			if resp := st.doc(loader); resp != nil && resp.Status != 0 {
				res.Status = int(resp.Status)
				if res.Status >= 400 {
					httpErr = httpStatusErr(res.Status)
				}
			}
		}
		err := t.readPage(ctx, j, res, httpErr == nil)
		if now := t.mainLoaderID(); now != loader && now != "" {
			continue // read across a commit: read the new document
		}
		if err != nil {
			return err
		}
		break
	}
	if res.Status == 0 {
		// No document response was seen (e.g. served from memory); the
		// page loaded, so it was a success.
		res.Status = 200
	}
	res.Timings.Extract = time.Since(mark)
	// A refusal that came before the result was read, though the calls
	// above answered before its abort was seen.
	if err := st.refused(); err != nil {
		return err
	}
	return httpErr
}

// leftFor is the error of the document the page went on to while it was
// read (loader) when that is no page of the site's: the egress proxy's
// answer that it could not resolve or connect it, or Chrome's error page
// for a navigation that failed. The job fails as it would had it been
// sent there; nil for a page.
func (s *Session) leftFor(t *tab, j *job, st *jobState, loader cdp.LoaderID) error {
	if resp := st.doc(loader); resp != nil {
		return s.egressAnswer(j, resp)
	}
	u := t.mainUnreachable(loader)
	if u == "" {
		return nil
	}
	text := st.lastDocErr()
	if text == "" {
		text = "the page could not be loaded"
	}
	if err := s.egressTunnel(j, st, text); err != nil {
		return err
	}
	class, retriable := classifyNetError(text)
	return newErr(class, retriable, "loading %s, where the page went on to: %s", u, text)
}

// noPageNow is leftFor's error for the main frame's committed document,
// as soon as it can be told: Chrome's error page only once its request's
// failure has come in (until then nil), which says why.
func (s *Session) noPageNow(t *tab, j *job, st *jobState) error {
	cur := t.mainLoaderID()
	if cur == "" || t.mainUnreachable(cur) != "" && st.lastDocErr() == "" {
		return nil
	}
	return s.leftFor(t, j, st, cur)
}

// maxReadHops bounds how many times a job's page may go on to another
// document while it is being read (run): a page that keeps navigating
// itself has no document to read, and fails as a redirect loop does.
const maxReadHops = 5

// readPage reads what the job asks of the page: its extract (with
// extract, not for an HTTP error), then URL, title, HTML and links, then
// its screenshot.
func (t *tab) readPage(ctx context.Context, j *job, res *Result, extract bool) error {
	res.Data = nil
	if j.Extract != "" && extract {
		data, err := t.extract(ctx, j.Extract, j.MaxDataBytes)
		if err != nil {
			return err
		}
		res.Data = data
	}
	if err := t.meta(ctx, j, res); err != nil {
		return err
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
	return nil
}

// noPage returns the status and URL of a main document whose answer Chrome
// did not show as a page and aborted the navigation for (net::ERR_ABORTED):
// 204 No Content, 205 Reset Content, and 304 Not Modified to a request that
// had nothing cached to revalidate. Such an answer is the server's, and it
// will be the same the next time: not a network failure. 0 for any other
// failure. A 304 reaches the tab's events only as the status on the wire
// (extraInfo); 204 and 205 are responses too.
func noPage(ctx context.Context, nav *page.NavigateResult, st *jobState) (int, string) {
	if !strings.Contains(nav.ErrorText, "ERR_ABORTED") {
		return 0, ""
	}
	status, u := 0, ""
	if resp := st.doc(nav.LoaderID); resp != nil {
		status, u = int(resp.Status), resp.URL
	} else {
		// Chrome may send the extra info after the navigation's answer
		// (seen on full Chrome, a 304 in about 1 run of 10).
		wctx, cancel := context.WithTimeout(ctx, noPageWait)
		u, status = st.awaitLastDoc(wctx)
		cancel()
	}
	switch status {
	case 204, 205, 304:
		return status, u
	}
	return 0, ""
}

// redirectedAway is the error of a navigation Chrome aborted
// (net::ERR_ABORTED) because the server redirected it to a URL it does not
// load as a page (view-source:, ftp:, javascript:, mailto:, a scheme an
// application would handle), or nil. The server will redirect there again:
// not a network failure. (file:, data: and the like fail with Chrome's own
// ERR_UNSAFE_REDIRECT, invalid already.) Chrome tells where in the
// redirect's extra info (its Location), or by a request for the new URL;
// called after noPage, which waits for either.
func redirectedAway(nav *page.NavigateResult, st *jobState) error {
	if !strings.Contains(nav.ErrorText, "ERR_ABORTED") {
		return nil
	}
	status, to := st.redirectedTo()
	if to == "" {
		if u := st.lastDocURL(); !webURL(u) {
			to = u
		}
	}
	if to == "" || webURL(to) {
		return nil
	}
	if status != 0 {
		return newErr(ClassInvalid, false, "HTTP %d: the server redirected to %q, which the browser does not load as a page", status, to)
	}
	return newErr(ClassInvalid, false, "the server redirected to %q, which the browser does not load as a page", to)
}

// webURL reports whether u is a URL the browser loads as a page: http or
// https, or relative (a Location resolved against the page); "" is one.
func webURL(u string) bool {
	p, err := url.Parse(u)
	return u == "" || err == nil && (p.Scheme == "" || p.Scheme == "http" || p.Scheme == "https")
}

// notHTML fails a job that waits for a selector on a response no selector
// can appear in (an image, a PDF, a binary file) at once, instead of at its
// timeout. HTML and XML (XHTML, SVG) are documents whose scripts may add
// the element; a document Chrome shows as text (isTextType) is waited on
// until it has loaded (wait).
func notHTML(j *job, resp *network.Response) error {
	if j.Wait.Selector == "" || resp.Status >= 400 {
		return nil
	}
	mt := strings.ToLower(strings.TrimSpace(resp.MimeType))
	if mt == "" || isMarkupType(mt) || isTextType(mt) {
		return nil
	}
	return newErr(ClassNotHTML, false, "the page is %s, not HTML: %q cannot appear in it (HTTP %d)", mt, j.Wait.Selector, resp.Status)
}

// isMarkupType reports whether Chrome parses a document of the MIME type mt
// (lower case, no parameters) as markup, whose scripts run: HTML, XHTML and
// XML of any kind (SVG, RSS, text/xsl).
func isMarkupType(mt string) bool {
	return mt == "text/html" || mt == "text/xsl" || strings.HasSuffix(mt, "/xml") || strings.HasSuffix(mt, "+xml")
}

// isTextType reports whether Chrome shows a document of the MIME type mt
// (lower case, no parameters) as text: a <pre> of it in a document Chrome
// makes, in which no script runs (Blink's DOMImplementation::IsTextMIMEType:
// text/* but markup, JavaScript, JSON).
func isTextType(mt string) bool {
	switch {
	case isMarkupType(mt):
		return false
	case strings.HasPrefix(mt, "text/"), mt == "application/json", strings.HasSuffix(mt, "+json"),
		mt == "application/javascript", mt == "application/x-javascript",
		mt == "application/ecmascript", mt == "application/x-ecmascript":
		return true
	}
	return false
}

// setup applies the job's settings to the tab before navigation; on a shared
// tab it also undoes what the previous job set.
func (t *tab) setup(ctx context.Context, j *job) error {
	if t.own {
		if err := t.scopeCache(ctx, j.CacheScope); err != nil {
			return err
		}
	}
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
	// A job's own Accept-Language header names the tab's languages, for a
	// page that picks its language in script to agree with one that picks
	// it on the server: Chrome then sends the header with its own weights,
	// as a browser set to those languages does, and sends it as written only
	// when it names none.
	langs, ownLang := acceptLanguage, false
	for k, v := range j.Headers {
		if strings.EqualFold(k, "Accept-Language") {
			langs, ownLang = headerLanguages(v), true
		}
	}
	if j.UserAgent != "" || ownLang || t.dirtyUA {
		if err := t.setUserAgent(ctx, j.UserAgent, langs); err != nil {
			return err
		}
		t.dirtyUA = j.UserAgent != "" || ownLang
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
