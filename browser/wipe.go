package browser

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/domstorage"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/storage"
)

// noteOrigin records a document origin of the tab's context, whose storage
// the next wipe clears. Opaque origins ("null") store nothing.
func (t *tab) noteOrigin(origin string) {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return
	}
	t.mu.Lock()
	if t.origins == nil {
		t.origins = map[string]bool{}
	}
	t.origins[u.Scheme+"://"+u.Host] = true
	t.mu.Unlock()
}

// notePartitionedFrame records the storage key a subframe of another site
// stores under: its origin, partitioned by the top page's site, which
// clearing its origin does not reach. Chrome serializes such a key as the
// origin's URL, "^0", and the top-level site (the test of the wipe checks
// that clearing it clears the frame's storage). A frame of the top page's
// site under a frame of another site stores under a key of its own (the
// cross-site ancestor bit), which is not derived here: the context cannot
// be vouched for. Only the tab's own context needs them.
func (t *tab) notePartitionedFrame(f *cdp.Frame) {
	site := frameSite(f)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.own {
		return
	}
	if t.frameSites == nil {
		t.frameSites = map[cdp.FrameID]string{}
	}
	t.frameSites[f.ID] = site
	if f.ParentID == "" {
		t.topSite = site
		return
	}
	u, err := url.Parse(f.SecurityOrigin)
	if err != nil || site == "" || t.topSite == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return
	}
	if site == t.topSite {
		if parent := t.frameSites[f.ParentID]; parent != "" && parent != t.topSite {
			t.taintLocked(ReplacedFrame)
		}
		return
	}
	if t.storageKeys == nil {
		t.storageKeys = map[string]bool{}
	}
	t.storageKeys[u.Scheme+"://"+u.Host+"/^0"+t.topSite] = true
}

// frameSite is a frame's site: scheme and registrable domain (or the host,
// for an IP address or a name without one), no port; "" for a frame that
// is not http(s).
func frameSite(f *cdp.Frame) string {
	u, err := url.Parse(f.SecurityOrigin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return ""
	}
	host := f.DomainAndRegistry
	if host == "" {
		host = u.Hostname()
	}
	if strings.Contains(host, ":") { // IPv6
		host = "[" + host + "]"
	}
	return u.Scheme + "://" + host
}

// takeStorageKeys returns the recorded partitioned storage keys, sorted,
// and forgets them.
func (t *tab) takeStorageKeys() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Sorted(maps.Keys(t.storageKeys))
	t.storageKeys = nil
	t.frameSites = nil
	return out
}

// taint marks the tab's context as holding state a wipe cannot clear: it is
// disposed of after the job instead of reused.
func (t *tab) taint(why ReplaceReason) {
	t.mu.Lock()
	t.taintLocked(why)
	t.mu.Unlock()
}

func (t *tab) taintLocked(why ReplaceReason) {
	if !t.tainted {
		t.tainted, t.taintReason = true, why
	}
}

func (t *tab) isTainted() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tainted
}

// wipeStorageTypes is every kind of origin-keyed storage Chrome's
// Storage.clearDataForOrigin knows: local storage, IndexedDB, Cache
// Storage, service worker registrations, file systems, shared storage,
// storage buckets and the origin's cookies.
const wipeStorageTypes = "all"

var errUnreached = errors.New("the context holds state no wipe reaches")

// blockRequests blocks every request of the tab.
func (t *tab) blockRequests(ctx context.Context) error {
	_, err := cdp.Call(ctx, t.t, network.SetBlockedURLs, network.SetBlockedURLsParams{
		URLPatterns: []*network.BlockPattern{{URLPattern: "*://*:*/*", Block: true}},
	})
	return wrapStep("Network.setBlockedURLs", err)
}

// unblockRequests lets the tab's requests through again by emptying its
// list of patterns, rather than leaving a pattern that lets everything
// through, which the tab kept for all its later jobs (Chrome checks their
// requests against the list): with the list emptied BenchmarkRender6's
// isolated variant rendered 2% more pages a second (median of 8 alternated
// pairs, 0.94–1.09: within the noise).
func (t *tab) unblockRequests(ctx context.Context) error {
	_, err := cdp.Call(ctx, t.t, setNoBlockedURLs, noBlockedURLs{URLPatterns: []*network.BlockPattern{}})
	return wrapStep("Network.setBlockedURLs", err)
}

// noBlockedURLs are Network.setBlockedURLs' parameters with the empty list
// of patterns spelled out: cdproto's own type leaves an empty list out of
// the call, which Chrome (156) also takes for none, but only by omission.
type noBlockedURLs struct {
	URLPatterns []*network.BlockPattern `json:"urlPatterns"`
}

var setNoBlockedURLs = cdp.Command[noBlockedURLs, cdp.Empty]{Method: network.CommandSetBlockedURLs}

// outlivingGrace is how long a wipe waits for the page's fetches and
// beacons to end before it gives the context up: an ordinary fetch still
// in flight when the job ends usually ends within it, a keepalive fetch to
// a slow server does not — and neither do, in CDP's view, a fetch whose
// body the page never reads, a stream or a long poll, whose jobs therefore
// cost their context as in IsolationContext.
const outlivingGrace = 100 * time.Millisecond

// outlives reports whether a request of this type may go on after its page
// is left (keepalive): fetches (CDP does not say which are keepalive ones),
// beacons and <a ping>s, and CSP violation reports, which Chromium 156
// reports as Other (TestWipeAfterALateCSPReport). CDP reports each of them
// failed (net::ERR_ABORTED) as the page is left, though the network
// service still sends it and stores the cookies of its answer: only one
// that ended before the wipe left the page has ended. A request of another
// type ends with its page.
func outlives(typ network.ResourceType) bool {
	switch typ {
	case network.ResourceTypeFetch, network.ResourceTypePing, network.ResourceTypeCSPViolationReport, network.ResourceTypeOther:
		return true
	}
	return false
}

func (t *tab) requestStarted(id network.RequestID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.own {
		// Only a wiped context needs them; a shared tab would keep, until
		// Chrome's end, the ones that never end.
		return
	}
	if t.outliving == nil {
		t.outliving = map[network.RequestID]bool{}
	}
	if len(t.outliving) == 0 {
		t.settled = make(chan struct{})
	}
	t.outliving[id] = true
}

func (t *tab) requestEnded(id network.RequestID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.outliving[id] {
		return
	}
	delete(t.outliving, id)
	if len(t.outliving) == 0 {
		close(t.settled)
	}
}

// awaitOutliving waits up to grace for the fetches and beacons in flight to
// end (the tab's requests are blocked by then, so no new one starts). A
// keepalive fetch or a beacon goes on after its page is left, and no CDP
// call tells them from the fetches the navigation cancels, so any still in
// flight then is an error: the context cannot be vouched for.
func (t *tab) awaitOutliving(ctx context.Context, grace time.Duration) error {
	timer := time.NewTimer(grace)
	defer timer.Stop()
	for {
		t.mu.Lock()
		n, settled := len(t.outliving), t.settled
		t.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-settled:
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return fmt.Errorf("%w %v after the job (%d), which may outlive the page", errInFlight, grace, n)
		}
	}
}

// leave ends a shared tab's page after its job, for about:blank: the next
// shared job finds no earlier page still running its scripts, timers,
// workers or requests (a finished page's fetches would reach its site past
// the host's limits, its loops hold the renderer), and a page that does not
// let go of its renderer (an endless loop after load, a handler of leaving
// that never returns) is found here, within wipeTimeout, its tab given up,
// rather than by the next job. What the shared context keeps — cookies,
// storage, cache — stays; the tab's own (session storage, window.name,
// history) stays with the tab.
func (t *tab) leave(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, wipeTimeout)
	defer cancel()
	return t.toBlank(ctx)
}

// toBlank navigates the tab to about:blank and waits for its commit: the
// page's pagehide, visibilitychange and unload handlers run as about:blank
// commits, which can be after Page.navigate answers.
func (t *tab) toBlank(ctx context.Context) error {
	nav, err := cdp.Call(ctx, t.t, page.Navigate, page.NavigateParams{URL: "about:blank"})
	if err != nil {
		return fmt.Errorf("navigating to about:blank: %w", err)
	}
	if nav.ErrorText != "" {
		return fmt.Errorf("navigating to about:blank: %s", nav.ErrorText)
	}
	if err := t.awaitCommit(ctx, nav.LoaderID); err != nil {
		return fmt.Errorf("waiting for about:blank: %w", err)
	}
	return nil
}

// wipeTimeout bounds a wipe: a page that holds its renderer (an endless
// loop in a handler of leaving, or still running) does not let it leave,
// and its context is given up for a new one, made in what is left of
// tabTimeout, rather than the next job waiting for it.
const wipeTimeout = 5 * time.Second

// wipe makes the tab's browser context as a brand-new one would be for the
// next job: no cookie, storage, service worker, permission or history of the
// jobs before it is left, nor of its HTTP cache unless the job had a cache
// scope (then scopeCache clears it before any job of another). It runs
// between jobs, off the next job's time. An error means the context
// could not be vouched for: the caller disposes of it.
func (t *tab) wipe(ctx context.Context) error {
	if t.isTainted() {
		return errUnreached
	}
	ctx, cancel := context.WithTimeout(ctx, wipeTimeout)
	defer cancel()
	// From here to about:blank's commit no request of the tab may start:
	// the page, still live, could otherwise start another fetch that
	// outlives it, and its handlers of leaving send beacons and keepalive
	// fetches whose answers could set cookies after the wipe.
	if err := t.blockRequests(ctx); err != nil {
		return err
	}
	if err := t.awaitOutliving(ctx, outlivingGrace); err != nil {
		return err
	}
	// Session storage belongs to the tab, not to the origin's storage that
	// clearDataForOrigin clears, and only a live frame of the origin can
	// clear it: before leaving the page. An origin whose frames are gone
	// (the page navigated away from it) cannot be vouched for.
	live := t.takeOrigins()
	for _, o := range live {
		_, err := cdp.Call(ctx, t.t, domstorage.Clear, domstorage.ClearParams{StorageID: &domstorage.StorageID{SecurityOrigin: o, IsLocalStorage: false}})
		if err != nil {
			if o != t.mainOrigin() {
				// Its frame is gone, as far as the main frame says: the
				// page went to another origin (counted apart from wipes
				// that failed).
				return fmt.Errorf("clearing the session storage of %s: %w (%w)", o, errOriginLeft, err)
			}
			return fmt.Errorf("clearing the session storage of %s: %w", o, err)
		}
	}
	// Leaving the page stops its scripts, timers, workers and connections;
	// what its handlers of leaving write is there, once about:blank has
	// committed, for the clearing below.
	if err := t.toBlank(ctx); err != nil {
		return err
	}
	if err := t.unblockRequests(ctx); err != nil {
		return err
	}
	// A popup the page opened just before the job ended is known by now:
	// Chrome reported the new target before it answered the calls above.
	if t.isTainted() {
		return errUnreached
	}
	// A frame the page opened on a new origin while the above ran had its
	// session storage left alone.
	origins := live
	for _, o := range t.takeOrigins() {
		if !slices.Contains(live, o) {
			return fmt.Errorf("the page reached %s while it was being wiped", o)
		}
	}
	// The rest is independent: one round trip's time rather than six.
	steps := []func() error{
		func() error {
			_, err := cdp.Call(ctx, t.b.cdpB, storage.ClearCookies, storage.ClearCookiesParams{BrowserContextID: t.bcid})
			return wrapStep("Storage.clearCookies", err)
		},
		func() error {
			_, err := cdp.Call(ctx, t.b.cdpB, browser.ResetPermissions, browser.ResetPermissionsParams{BrowserContextID: t.bcid})
			return wrapStep("Browser.resetPermissions", err)
		},
		func() error {
			// The next job must not reach this one's pages through
			// history.back().
			_, err := cdp.Call(ctx, t.t, page.ResetNavigationHistory, cdp.Empty{})
			return wrapStep("Page.resetNavigationHistory", err)
		},
		func() error {
			// The context's HTTP cache: the tab's own requests do not read
			// it (newOwnTab), but they write it, and a page's dedicated
			// workers, which the tab's setting does not reach, read and
			// write it: a later job's worker would find this job's
			// responses (private ones too) there. A cache scope's cache is
			// kept for the scope's next job; scopeCache clears it before
			// any other.
			if t.cacheScope != "" {
				return nil
			}
			_, err := cdp.Call(ctx, t.t, network.ClearBrowserCache, cdp.Empty{})
			return wrapStep("Network.clearBrowserCache", err)
		},
		func() error {
			// window.name belongs to the tab, not to a document or an
			// origin: it outlives navigations, to about:blank and on to
			// the next job's page, whatever its site. Reset in
			// about:blank once committed, after the handlers of leaving
			// (which may set it too).
			_, err := t.evalIn(ctx, "", "window.name = ''")
			return wrapStep("resetting window.name", err)
		},
	}
	for _, o := range origins {
		steps = append(steps, func() error {
			_, err := cdp.Call(ctx, t.t, storage.ClearDataForOrigin, storage.ClearDataForOriginParams{Origin: o, StorageTypes: wipeStorageTypes})
			return wrapStep("Storage.clearDataForOrigin "+o, err)
		})
	}
	for _, k := range t.takeStorageKeys() {
		steps = append(steps, func() error {
			_, err := cdp.Call(ctx, t.t, storage.ClearDataForStorageKey, storage.ClearDataForStorageKeyParams{StorageKey: k, StorageTypes: wipeStorageTypes})
			return wrapStep("Storage.clearDataForStorageKey "+k, err)
		})
	}
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	for i, step := range steps {
		wg.Go(func() { errs[i] = step() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	t.mu.Lock()
	t.wiped = true
	t.mu.Unlock()
	return nil
}

// scopeCache readies the HTTP cache of the session's own tab for a job of
// the given Request.CacheScope. The wipe after a job of a scope leaves the
// cache for the scope's next job; a job of another scope, or of none, finds
// it cleared here first. The renderer also keeps a memory cache of its own,
// which serves a script or a style without asking the HTTP cache while
// anything still holds the resource. No case of it serving a later job
// across the wipe's about:blank was found (a review's probes: preloads, a
// renderer swap, the HTTP cache cleared between two jobs), but nothing
// guarantees it, and Network.setCacheDisabled(true) empties it at every
// call: it is called at every change of scope. The tab reads the cache only
// while a scope's jobs run.
func (t *tab) scopeCache(ctx context.Context, scope string) error {
	if scope == t.cacheScope {
		return nil
	}
	if err := t.setCacheDisabled(ctx, true); err != nil {
		return err
	}
	if t.cacheScope != "" {
		if _, err := cdp.Call(ctx, t.t, network.ClearBrowserCache, cdp.Empty{}); err != nil {
			return fmt.Errorf("Network.clearBrowserCache: %w", err)
		}
	}
	t.cacheScope = scope
	if scope == "" {
		return nil
	}
	return t.setCacheDisabled(ctx, false)
}

func (t *tab) setCacheDisabled(ctx context.Context, disabled bool) error {
	if _, err := cdp.Call(ctx, t.t, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: disabled}); err != nil {
		return fmt.Errorf("Network.setCacheDisabled: %w", err)
	}
	return nil
}

// takeOrigins returns the recorded origins, sorted, and forgets them.
func (t *tab) takeOrigins() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Sorted(maps.Keys(t.origins))
	t.origins = nil
	return out
}

func wrapStep(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// awaitCommit waits until the main frame has committed the document of the
// navigation whose loader is given (Page.navigate can answer before the
// commit). By its loader, not its URL: a page can give itself about:blank's
// URL (document.open called from an about:blank iframe) and go on running
// (TestWipeAfterAPageReopenedAsBlank).
func (t *tab) awaitCommit(ctx context.Context, loader cdp.LoaderID) error {
	if loader == "" {
		return errors.New("the navigation has no loader")
	}
	for {
		t.mu.Lock()
		cur, next := t.mainLoader, t.committed
		t.mu.Unlock()
		if cur == loader {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-next:
		}
	}
}
