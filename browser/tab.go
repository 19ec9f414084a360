package browser

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/css"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/browserfarm/browserfarm/internal/jobspec"
)

// tab is one page target with its chromedp context, in a browser context of
// its own (fresh) or in the default one (shared).
type tab struct {
	b      *Browser
	ctx    context.Context // the chromedp tab context
	cancel context.CancelFunc
	t      *chromedp.Target
	id     target.ID
	bcid   cdp.BrowserContextID // "" for the default context
	shared bool
	own    bool // the session's reused tab of IsolationWipe
	proxy  *proxySpec
	// proxyChallenged: the requests given the job's proxy credentials
	// (firstProxyChallenge). Guarded by mu.
	proxyChallenged map[fetch.RequestID]bool

	unwatch func()

	mu      sync.Mutex
	closing bool
	broken  bool
	cur     *jobState
	wg      sync.WaitGroup // event-driven CDP calls (dialogs, fetch)

	// What pages did to the context since the last wipe: the origins of
	// its documents (whose storage the wipe clears) and whether any of it
	// is out of the wipe's reach (tainted).
	origins     map[string]bool
	tainted     bool
	taintReason ReplaceReason // the first taint's
	wiped       bool          // a wipe has readied it for a next job
	// The partitioned storage keys of its frames of other sites than the
	// top page's (storage their origin's clearing does not reach), from
	// each frame's site and the top page's.
	storageKeys map[string]bool
	frameSites  map[cdp.FrameID]string
	topSite     string
	// Fetches and beacons in flight on the session's own tab: a keepalive
	// fetch or a beacon outlives its page, and its answer may set cookies
	// after the wipe. settled is closed when the last of them ends.
	outliving map[network.RequestID]bool
	settled   chan struct{}

	unwatchContext func() // set for the session's own tab

	// The Request.CacheScope of the last job on the session's own tab,
	// whose cache the context holds ("" if it had none: the wipe cleared
	// what it left, and the tab does not read the cache). See scopeCache.
	cacheScope string

	// The loader and origin of the main frame's committed document, the
	// URL it failed to load if it is Chrome's error page, and a channel
	// closed at its next commit (awaitCommit).
	mainLoader  cdp.LoaderID
	docOrigin   string
	unreachable string
	committed   chan struct{}

	// The farm's isolated world (world.go): its newest context in the
	// main frame, and the one of the current job's document, once asked
	// for.
	newestWorld worldCtx
	world       worldCtx

	// What the last job changed on a shared tab, to undo for the next one.
	dirtyHeaders, dirtyUA, dirtyViewport bool
	fetchOn                              bool

	closeOnce sync.Once
	closeErr  error
	quietOnce sync.Once
}

// newTab makes a tab: a browser context (unless shared), downloads denied in
// it, a page target attached with chromedp, and the tab's event listener.
func (s *Session) newTab(ctx context.Context, proxy *proxySpec, shared bool) (*tab, error) {
	b := s.b
	t := &tab{b: b, shared: shared, proxy: proxy, committed: make(chan struct{})}
	if !shared {
		params := target.CreateBrowserContextParams{DisposeOnDetach: ptr(true)}
		if proxy != nil {
			params.ProxyServer = proxy.server
			// Chrome bypasses proxies for loopback by default; a job that
			// asks for a proxy gets it for every host.
			params.ProxyBypassList = "<-loopback>"
		}
		cctx, cancel := uncanceled(ctx)
		res, err := cdp.Call(cctx, b.cdpB, target.CreateBrowserContext, params)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("creating a browser context: %w", err)
		}
		t.bcid = res.BrowserContextID
		if err := denyDownloads(ctx, b.cdpB, t.bcid); err != nil {
			t.disposeContext()
			return nil, fmt.Errorf("denying downloads: %w", err)
		}
	}
	opts := []chromedp.ContextOption{chromedp.WithDetachOnCancel()}
	if t.bcid != "" {
		opts = append(opts, chromedp.WithExistingBrowserContext(t.bcid))
	} else {
		// A tab of the default context is not closed with a context of its
		// own: it is made here, so that its id is known to close it should
		// the attach fail or be given up (chromedp keeps the id of a
		// target it made to itself).
		cctx, cancel := uncanceled(ctx)
		res, err := cdp.Call(cctx, b.cdpB, target.CreateTarget, target.CreateTargetParams{URL: "about:blank", NewWindow: ptr(true)})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("creating a tab: %w", err)
		}
		t.id = res.TargetID
		opts = append(opts, chromedp.WithTargetID(t.id))
	}
	tctx, tcancel := chromedp.NewContext(s.ctx, opts...)
	t.ctx, t.cancel = tctx, tcancel
	// The first Run of a chromedp context binds the tab's event loop to the
	// context it is given, so it gets tctx itself; ctx bounds it from here.
	errc := make(chan error, 1)
	go func() { errc <- chromedp.Do(tctx) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		tcancel()
		<-errc
		err = ctx.Err()
	}
	if err == nil {
		if c := chromedp.FromContext(tctx); c != nil && c.Target != nil {
			t.t = c.Target
			t.id = c.Target.TargetID
		} else {
			err = errors.New("chromedp attached no target")
		}
	}
	if err == nil {
		err = chromedp.Listen(tctx, t.onEvent)
	}
	if err == nil {
		t.unwatch = b.janitor.watchCrash(t.id, func(status string) { t.crashed("renderer crashed: " + status) })
		err = t.slim(ctx)
	}
	if err != nil {
		t.close()
		return nil, fmt.Errorf("opening a tab: %w", err)
	}
	return t, nil
}

// uncanceled bounds a CDP call that makes something in Chrome by closeWait,
// not by ctx: given up half-way, the call would leave what Chrome made
// unknown, and open until Chrome's end. The caller checks ctx after it.
func uncanceled(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), closeWait)
}

// slim turns off what chromedp enables on attach that the render path does
// not use: the DOM and CSS agents (chromedp would fetch the document on every
// navigation), the Log domain (its entries repeat console messages, workers'
// too, whole), POST bodies in Network events (a page decides their size),
// target discovery and auto-attach but to dedicated workers (every tab would
// get every target's events); and it sets the default viewport and user
// agent.
func (t *tab) slim(ctx context.Context) error {
	guard := fmt.Sprintf(jsPageGuard, maxConsoleLen, uncaughtMarker, jobspec.MaxConsoleErrors, MaxPageWorkers)
	if _, err := cdp.Call(ctx, t.t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: guard}); err != nil {
		return fmt.Errorf("Page.addScriptToEvaluateOnNewDocument: %w", err)
	}
	if _, err := cdp.Call(ctx, t.t, css.Disable, cdp.Empty{}); err != nil {
		return fmt.Errorf("CSS.disable: %w", err)
	}
	if _, err := cdp.Call(ctx, t.t, dom.Disable, cdp.Empty{}); err != nil {
		return fmt.Errorf("DOM.disable: %w", err)
	}
	if _, err := cdp.Call(ctx, t.t, cdplog.Disable, cdp.Empty{}); err != nil {
		return fmt.Errorf("Log.disable: %w", err)
	}
	// Network.enable again, as chromedp did, with no POST body of more
	// than a byte in the events (TestConsoleFloodIsCutInThePage posts
	// 16 MB and sees no event near that size).
	if _, err := cdp.Call(ctx, t.t, network.Enable, network.EnableParams{MaxPostDataSize: ptr[int64](1)}); err != nil {
		return fmt.Errorf("Network.enable: %w", err)
	}
	// Auto-attach for dedicated workers only, to learn of them (onEvent):
	// nothing is enabled on their sessions, and chromedp drops their
	// messages.
	if _, err := cdp.Call(ctx, t.t, target.SetAutoAttach, target.SetAutoAttachParams{AutoAttach: true, Flatten: ptr(true),
		Filter: target.Filter{{Type: "worker"}, {Exclude: true}}}); err != nil {
		return fmt.Errorf("Target.setAutoAttach: %w", err)
	}
	if _, err := cdp.Call(ctx, t.t, target.SetDiscoverTargets, target.SetDiscoverTargetsParams{Discover: false}); err != nil {
		return fmt.Errorf("Target.setDiscoverTargets: %w", err)
	}
	if err := t.setViewport(ctx, Viewport{}); err != nil {
		return err
	}
	return t.setUserAgent(ctx, "", acceptLanguage)
}

// setViewport sets the page's viewport; the zero Viewport is the default
// 1280x800 (the window is that size, but its browser UI takes a part).
func (t *tab) setViewport(ctx context.Context, v Viewport) error {
	if v == (Viewport{}) {
		v = Viewport{Width: windowWidth, Height: windowHeight}
	}
	_, err := cdp.Call(ctx, t.t, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
		Width: int64(v.Width), Height: int64(v.Height), DeviceScaleFactor: 1, Mobile: v.Mobile,
	})
	if err != nil {
		return fmt.Errorf("Emulation.setDeviceMetricsOverride: %w", err)
	}
	return nil
}

// acceptLanguage is the languages every tab says it reads, in the
// Accept-Language header and navigator.languages: full Chrome's own here
// ("en-US,en;q=0.9", ["en-US", "en"]). The headless shell sends no
// Accept-Language at all and lists ["en-US"], which sites that look for
// headless browsers read as one.
const acceptLanguage = "en-US,en"

// setUserAgent sets the tab's user agent ("": the browser's default) and the
// languages it reports in navigator.languages and, unless a job's own
// header is sent, the Accept-Language header: langs, a comma-separated list
// without weights (acceptLanguage, or a job's own header's languages).
func (t *tab) setUserAgent(ctx context.Context, ua, langs string) error {
	if ua == "" {
		ua = t.b.userAgent
	}
	if ua == "" {
		return nil
	}
	_, err := cdp.Call(ctx, t.t, emulation.SetUserAgentOverride, emulation.SetUserAgentOverrideParams{UserAgent: ua, AcceptLanguage: langs})
	if err != nil {
		return fmt.Errorf("Emulation.setUserAgentOverride: %w", err)
	}
	return nil
}

// headerLanguages is the languages of an Accept-Language header, most
// wanted first, without their weights ("fr-CH, fr;q=0.9, *;q=0.5" is
// "fr-CH,fr"), for navigator.languages to agree with a job's header: a page
// that picks its language in script reads navigator.languages. "" when the
// header names none (only "*", or weights of 0).
func headerLanguages(header string) string {
	type lang struct {
		tag string
		q   float64
	}
	var langs []lang
	for part := range strings.SplitSeq(header, ",") {
		tag, params, _ := strings.Cut(part, ";")
		tag = strings.TrimSpace(tag)
		q := 1.0
		for p := range strings.SplitSeq(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				}
			}
		}
		if tag == "" || tag == "*" || q <= 0 {
			continue
		}
		langs = append(langs, lang{tag, q})
	}
	slices.SortStableFunc(langs, func(a, b lang) int { return cmp.Compare(b.q, a.q) })
	tags := make([]string, len(langs))
	for i, l := range langs {
		tags[i] = l.tag
	}
	return strings.Join(tags, ",")
}

func (t *tab) isBroken() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.broken
}

func (t *tab) markBroken() {
	t.mu.Lock()
	t.broken = true
	t.mu.Unlock()
}

// crashed is called from an event loop when the renderer died.
func (t *tab) crashed(why string) {
	t.mu.Lock()
	t.broken = true
	j := t.cur
	t.mu.Unlock()
	if j != nil {
		j.abort(&Error{Class: ClassCrashed, Retriable: true, Err: errors.New(why)})
	}
}

func (t *tab) beginJob(j *jobState) {
	t.mu.Lock()
	t.cur = j
	// The job's scripts run in a world made in its own document, never
	// in one left from the document before (which may still be alive).
	t.world = worldCtx{}
	t.mu.Unlock()
}

func (t *tab) endJob() {
	t.mu.Lock()
	t.cur = nil
	t.mu.Unlock()
}

// quiet mutes the tab's events and drains what is queued of them, once:
// the tab's chromedp reader must outlive its events (pipeConn.mute), so it
// runs before the reader's context is canceled (close, Session.Close).
// The answer to Target.getTargetInfo, which the browser process gives even
// for a hung renderer (TestPageThatLoopsAsItIsLeft), comes after every
// event queued before it.
func (t *tab) quiet() {
	t.quietOnce.Do(func() {
		if t.t == nil || t.b.pipe == nil {
			return
		}
		t.b.pipe.mute(t.t.SessionID)
		if t.ctx.Err() != nil {
			// Its reader is gone (a session closed while the tab was being
			// prepared): no answer would come.
			return
		}
		ctx, cancel := context.WithTimeout(t.b.ctx, closeWait)
		// A reader that ends during the call (Session.Close cancels the
		// session while a tab of its last job is being disposed of in the
		// background) takes the answer with it: the wait ends with it, not
		// at closeWait, which a failed job's slot held for 5 s.
		stop := context.AfterFunc(t.ctx, cancel)
		_, _ = cdp.Call(ctx, t.t, target.GetTargetInfo, target.GetTargetInfoParams{})
		stop()
		cancel()
	})
}

// close quiets the tab, waits for its event-driven calls, disposes of its
// browser context (which closes the tab) or, for a shared tab, closes the
// target, and then detaches. It is idempotent.
func (t *tab) close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closing = true
		t.mu.Unlock()
		if t.unwatch != nil {
			t.unwatch()
		}
		t.mu.Lock()
		unwatchContext := t.unwatchContext
		t.mu.Unlock()
		if unwatchContext != nil {
			unwatchContext()
		}
		t.quiet()
		t.wg.Wait()
		defer func() {
			if t.cancel != nil {
				// Detaches (WithDetachOnCancel) what closing left.
				t.cancel()
			}
		}()
		if t.bcid != "" {
			t.closeErr = t.disposeContext()
		} else if t.id != "" {
			ctx, cancel := context.WithTimeout(t.b.ctx, closeWait)
			_, err := cdp.Call(ctx, t.b.cdpB, target.CloseTarget, target.CloseTargetParams{TargetID: t.id})
			cancel()
			if err != nil && !targetGone(err) {
				t.closeErr = fmt.Errorf("closing tab %s: %w", t.id, err)
			}
		}
	})
	return t.closeErr
}

func (t *tab) disposeContext() error {
	ctx, cancel := context.WithTimeout(t.b.ctx, closeWait)
	defer cancel()
	_, err := cdp.Call(ctx, t.b.cdpB, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: t.bcid})
	if err != nil && !targetGone(err) {
		return fmt.Errorf("disposing of browser context %s: %w", t.bcid, err)
	}
	return nil
}

// targetGone reports whether a tear-down call failed because there is
// nothing left to tear down.
func targetGone(err error) bool {
	s := err.Error()
	return strings.Contains(s, "No target with given id") ||
		strings.Contains(s, "Failed to find context") ||
		strings.Contains(s, "No browser context with given id")
}

func ptr[T any](v T) *T { return &v }
