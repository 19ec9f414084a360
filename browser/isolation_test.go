package browser

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"

	"github.com/browserfarm/browserfarm/internal/testsite"
)

// isoState is what /isolation/get reports.
type isoState struct {
	HTTPCacheCount int      `json:"http_cache_count"`
	ServerCookies  []string `json:"server_cookies"`
	ScriptCookies  string   `json:"script_cookies"`
	Local          []string `json:"local"`
	Session        []string `json:"session"`
	IndexedDB      []string `json:"indexeddb"`
	Caches         []string `json:"caches"`
	ServiceWorkers int      `json:"service_workers"`
	Geolocation    string   `json:"geolocation"`
	History        int      `json:"history"`
	WindowName     string   `json:"window_name"`
}

// empty reports whether the state holds nothing a job left.
// The key the reading job asks /isolation/cached/ for was fetched by job A:
// a count of 1 means the answer came from A's HTTP cache.
func (s isoState) empty() bool {
	return s.HTTPCacheCount > 1 && len(s.ServerCookies) == 0 && s.ScriptCookies == "" && len(s.Local) == 0 && len(s.Session) == 0 &&
		len(s.IndexedDB) == 0 && len(s.Caches) == 0 && s.ServiceWorkers == 0 && s.Geolocation == "prompt" && s.WindowName == ""
}

// readState renders an /isolation/get URL on the session and returns the
// state it reports.
func readState(t *testing.T, s *Session, url string, iso Isolation) isoState {
	t.Helper()
	res, err := s.Render(context.Background(), Request{URL: url, Isolation: iso, Wait: Wait{Selector: "#ready"}, Extract: "window.__state"})
	if err != nil {
		t.Fatal(err)
	}
	var st isoState
	unmarshal(t, res.Data, &st)
	return st
}

// withHost is u with its host name replaced, port kept: "localhost" is the
// same server as 127.0.0.1 but another site to the browser.
func withHost(t *testing.T, u, host string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.Host = host + ":" + p.Port()
	return p.String()
}

// TestIsolationModes proves what crosses from one job to the next on the
// same session in each isolation mode. Job A leaves cookies (one
// HttpOnly), local and session storage, IndexedDB, Cache Storage, a service
// worker and a granted permission; a later job reads them back on the same
// host and on another one. Then a job answers an HTTP auth prompt, and a
// later job on the same host must meet the prompt again. In wipe and
// context mode nothing crosses; in shared mode the same host sees all of it
// and another host none (cookies and storage are per host and origin).
func TestIsolationModes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	origin := e.site.URL
	other := withHost(t, origin, "localhost")
	for _, iso := range []Isolation{IsolationWipe, IsolationContext, IsolationShared} {
		t.Run(string(iso), func(t *testing.T) {
			s := e.session(t)
			get := func(base, key string) isoState { return readState(t, s, base+"/isolation/get?key="+key, iso) }
			ownTab := func() *tab { return preparedTab(t, s) }
			// Job A leaves its state twice: without a service worker (the
			// wipe itself must clear it all, keeping the context), then
			// with one (its context is then not reused).
			for _, sw := range []bool{false, true} {
				key := fmt.Sprintf("%s-%t", iso, sw)
				// A permission is granted to the context job A will run in;
				// a brand-new context per job has none to grant it to.
				var before *tab
				switch iso {
				case IsolationWipe:
					before = ownTab()
					grantGeolocation(t, e, before.bcid, origin)
				case IsolationShared:
					grantGeolocation(t, e, "", origin)
				}
				set := origin + "/isolation/set?key=" + key
				if !sw {
					set += "&sw=0"
				}
				res, err := s.Render(ctx, Request{URL: set, Isolation: iso, Wait: Wait{Selector: "#ready"}, Extract: "document.getElementById('ready').textContent"})
				if err != nil || string(res.Data) != `"set"` {
					t.Fatalf("job A: %v, %s", err, resData(res))
				}

				same, otherHost := get(origin, key), get(other, key)
				switch iso {
				case IsolationShared:
					want := isoState{HTTPCacheCount: 1, ServerCookies: []string{"ho", "js"}, ScriptCookies: "js=1", Local: []string{"ls"}, Session: []string{"ss"},
						IndexedDB: []string{"bfdb"}, Caches: []string{"bfcache"}, ServiceWorkers: 1, Geolocation: "granted", WindowName: "bf-name"}
					if !sw {
						want.ServiceWorkers = 0
					}
					slices.Sort(same.ServerCookies)
					if !equalState(same, want) {
						t.Errorf("shared, same host: %+v, want %+v", same, want)
					}
				default:
					if !same.empty() {
						t.Errorf("%s (service worker %t), same host sees job A's state: %+v", iso, sw, same)
					}
					if same.History > 2 {
						t.Errorf("%s: history.length %d: job A's pages are reachable with history.back()", iso, same.History)
					}
				}
				if iso == IsolationShared {
					// The shared tab keeps window.name across sites, as a
					// browser tab does (README: what crosses in shared).
					if otherHost.WindowName != "bf-name" {
						t.Errorf("shared, other host: window.name %q, want job A's (the tab's)", otherHost.WindowName)
					}
					otherHost.WindowName = ""
				}
				if !otherHost.empty() {
					t.Errorf("%s, other host sees job A's state: %+v", iso, otherHost)
				}
				if iso == IsolationWipe && !sw && ownTab() != before {
					t.Errorf("wipe: a job without a service worker or credentials cost its context; want it wiped and reused")
				}
			}

			// HTTP authentication: the credentials of one job's URL.
			authed := strings.Replace(origin, "://", "://"+testsite.AuthUser+":"+testsite.AuthPassword+"@", 1) + "/isolation/auth"
			res, err := s.Render(ctx, Request{URL: authed, Isolation: iso, Wait: Wait{Selector: "#ready"}, Extract: "document.getElementById('ready').textContent"})
			if err != nil || string(res.Data) != `"authed"` {
				t.Fatalf("job with credentials: %v, %s", err, resData(res))
			}
			res, err = s.Render(ctx, Request{URL: origin + "/isolation/auth", Isolation: iso, Timeout: 10 * time.Second})
			switch iso {
			case IsolationShared:
				if err != nil || res.Status != 200 {
					t.Errorf("shared: a later job did not reuse the answered credentials: %v, %s", err, resData(res))
				}
			default:
				if ClassOf(err) != ClassHTTP || res == nil || res.Status != 401 {
					t.Errorf("%s: a later job got past the auth prompt without credentials: %v, %s", iso, err, resData(res))
				}
			}
			// And the session goes on rendering.
			if st := get(origin, string(iso)+"-true"); iso != IsolationShared && !st.empty() {
				t.Errorf("%s: after the auth jobs: %+v", iso, st)
			}
			if iso == IsolationWipe {
				// Five jobs ran in a wiped context (the two reads after
				// each job A, and the job with credentials); the service
				// worker cost one context, the credentials and the 401
				// one each.
				want := ContextStats{Reused: 5}
				want.Replaced[ReplacedWorker] = 1
				want.Replaced[ReplacedAuth] = 2
				if got := e.b.ContextStats(); got != want {
					t.Errorf("context stats %+v (%v), want %+v (%v)", got, got.ByReason(), want, want.ByReason())
				}
			}
		})
	}
}

// TestWipeAfterUnloadHandlers: what a page writes as it is left (pagehide,
// visibilitychange, unload: they run when the next document commits,
// which can be after Page.navigate has answered) is gone for the next job
// on the same host too. Before the wipe waited for about:blank to commit,
// 17 of 20 such pairs leaked a cookie or localStorage.
func TestWipeAfterUnloadHandlers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, iso := range []Isolation{IsolationWipe, IsolationContext} {
		t.Run(string(iso), func(t *testing.T) {
			s := e.session(t)
			for i := range 10 {
				if _, err := s.Render(ctx, Request{URL: e.url("/isolation/leave"), Isolation: iso, Wait: Wait{Selector: "#ready"}}); err != nil {
					t.Fatal(err)
				}
				st := readState(t, s, e.url("/isolation/get"), iso)
				if len(st.ServerCookies) > 0 || st.ScriptCookies != "" || len(st.Local) > 0 || len(st.Session) > 0 || st.WindowName != "" {
					t.Errorf("%s, pair %d: the next job sees what the page wrote as it was left: %+v", iso, i, st)
				}
			}
		})
	}
}

// TestWipeAfterAPageReopenedAsBlank: a page that gave itself about:blank's
// URL (document.open from an about:blank iframe) is still the page, and its
// slow pagehide handler writes a cookie and localStorage as it is left: the
// wipe waits for its own navigation's commit (by loader), not for a URL.
func TestWipeAfterAPageReopenedAsBlank(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.session(t)
	for i := range 3 {
		res, err := s.Render(ctx, Request{URL: e.url("/isolation/reopen"), Wait: Wait{Selector: "#ready"},
			Extract: "document.getElementById('ready').textContent"})
		if err != nil || string(res.Data) != `"about:blank"` {
			t.Fatalf("job A: %v, %s; want the page at about:blank's URL", err, resData(res))
		}
		st := readState(t, s, e.url("/isolation/get"), IsolationWipe)
		if len(st.ServerCookies) > 0 || st.ScriptCookies != "" || len(st.Local) > 0 {
			t.Errorf("pair %d: the next job sees what the reopened page wrote as it was left: %+v", i, st)
		}
	}
}

// lateCookies is the test site behind a front that answers every
// /isolation/cookie request (beacons and keepalive fetches of the
// isolation pages) late, after the wipe has cleared the cookies.
type lateCookies struct {
	url      string
	mu       sync.Mutex
	reached  int
	answered chan struct{}
}

func startLateCookies(t *testing.T, delay time.Duration) *lateCookies {
	t.Helper()
	lc := &lateCookies{answered: make(chan struct{}, 64)}
	inner := testsite.New(testsite.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/isolation/cookie" {
			inner.ServeHTTP(w, r)
			return
		}
		lc.mu.Lock()
		lc.reached++
		lc.mu.Unlock()
		defer func() { lc.answered <- struct{}{} }()
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		http.SetCookie(w, &http.Cookie{Name: r.URL.Query().Get("name"), Value: "1", Path: "/", MaxAge: 3600})
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	lc.url = srv.URL
	return lc
}

// awaitAnswers waits until n requests have been answered (or given up by
// the browser) and returns how many had reached the server by then.
func (lc *lateCookies) awaitAnswers(t *testing.T, n int) int {
	t.Helper()
	for i := range n {
		select {
		case <-lc.answered:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d requests answered after 30 s", i, n)
		}
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.reached
}

func (lc *lateCookies) reachedSoFar() int {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.reached
}

// cookiesOf renders /isolation/get on base and returns the cookies the
// server and the page saw.
func cookiesOf(t *testing.T, s *Session, base string) ([]string, string) {
	t.Helper()
	st := readState(t, s, base+"/isolation/get", IsolationWipe)
	return st.ServerCookies, st.ScriptCookies
}

// TestWipeBlocksRequestsOfLeaving: a beacon or keepalive fetch sent by the
// page's handlers of leaving goes on after the page, and a slow answer
// would set its cookie after the wipe. The wipe lets no request start while
// it leaves the page, and keeps the context; should one reach the server
// anyway, the next job, run once it has been answered, must not see its
// cookie.
func TestWipeBlocksRequestsOfLeaving(t *testing.T) {
	lc := startLateCookies(t, 300*time.Millisecond)
	e := newEnv(t)
	s := e.session(t)
	cookiesOf(t, s, lc.url)
	before := preparedTab(t, s)
	if _, err := s.Render(context.Background(), Request{URL: lc.url + "/isolation/leave", Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatal(err)
	}
	if preparedTab(t, s) != before {
		t.Errorf("a page whose requests of leaving were blocked cost its context")
	}
	n := lc.awaitAnswers(t, lc.reachedSoFar())
	if server, script := cookiesOf(t, s, lc.url); len(server) > 0 || script != "" {
		t.Errorf("%d requests of leaving reached the server, and the next job sees their cookies: %q, %q", n, server, script)
	}
}

// TestWipeAfterALateCSPReport: Chrome sends a page's CSP violation report
// as a keepalive request, which goes on after the page is left (CDP calls it
// aborted then), and a slow answer set its cookie after the wipe. A report
// still in flight after the job now costs the context.
func TestWipeAfterALateCSPReport(t *testing.T) {
	lc := startLateCookies(t, 300*time.Millisecond)
	e := newEnv(t)
	s := e.session(t)
	cookiesOf(t, s, lc.url)
	if _, err := s.Render(context.Background(), Request{URL: lc.url + "/isolation/csp", Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatal(err)
	}
	n := lc.awaitAnswers(t, lc.reachedSoFar())
	if n != 1 {
		t.Fatalf("%d CSP reports reached the server, want 1", n)
	}
	if server, script := cookiesOf(t, s, lc.url); len(server) > 0 || script != "" {
		t.Errorf("the next job sees the cookie of the CSP report's answer: %q, %q", server, script)
	}
	if got := e.b.ContextStats().Replaced[ReplacedInFlight]; got != 1 {
		t.Errorf("contexts replaced for a request in flight: %d, want 1 (%v)", got, e.b.ContextStats().ByReason())
	}
}

// TestWipeGivesUpContextWithPopups: a popup writes to its opener's context
// until the janitor has closed it, unordered with the opener's wipe, so a
// context that had one is not reused; one that had none is.
func TestWipeGivesUpContextWithPopups(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.session(t)
	ownTab := func() *tab { return preparedTab(t, s) }
	if _, err := s.Render(ctx, Request{URL: e.url("/page/1"), Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatal(err)
	}
	before := ownTab()
	if _, err := s.Render(ctx, Request{URL: e.url("/page/2"), Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatal(err)
	}
	if ownTab() != before {
		t.Fatalf("a job without a popup cost its context")
	}
	res, err := s.Render(ctx, Request{URL: e.url("/hostile/popup"), Actions: []Action{{Type: ActionClick, Selector: "#open"}}, Extract: `document.getElementById('ready').textContent`})
	if err != nil || string(res.Data) != `"opened"` {
		t.Fatalf("popup job: %v, %s", err, resData(res))
	}
	if ownTab() == before {
		t.Errorf("the context was wiped and reused after its page opened popups")
	}
	want := ContextStats{Reused: 2}
	want.Replaced[ReplacedPopup] = 1
	if got := e.b.ContextStats(); got != want {
		t.Errorf("context stats %+v (%v), want %+v (%v)", got, got.ByReason(), want, want.ByReason())
	}
}

// TestWipeGivesUpContextWithRequestsInFlight: a keepalive fetch still in
// flight when the job ends goes on after the page is left, and its answer
// sets a cookie; no CDP call tells it from the fetches the navigation
// cancels. The wipe gives such a context up (the next job gets a new one)
// instead of vouching for it, and the next job, run once the fetch has been
// answered, does not see the cookie. A page whose fetches all ended keeps
// its context. fetchLater, whose request the browser sends only as the
// page is left, is off.
func TestWipeGivesUpContextWithRequestsInFlight(t *testing.T) {
	lc := startLateCookies(t, 300*time.Millisecond)
	e := newEnv(t)
	ctx := context.Background()
	s := e.session(t)
	res, err := s.Render(ctx, Request{URL: lc.url + "/page/1", Wait: Wait{Selector: "#ready"}, Extract: "typeof fetchLater"})
	if err != nil || string(res.Data) != `"undefined"` {
		t.Fatalf("typeof fetchLater: %v, %s; want it off", err, resData(res))
	}
	before := preparedTab(t, s)
	if _, err := s.Render(ctx, Request{URL: lc.url + "/isolation/keepalive", Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatal(err)
	}
	if preparedTab(t, s) == before {
		t.Errorf("the context was wiped and reused with a keepalive fetch still in flight")
	}
	if got := e.b.ContextStats(); got.Replaced[ReplacedInFlight] != 1 || got.ReplacedTotal() != 1 {
		t.Errorf("context stats %v, want one context replaced for a fetch in flight", got.ByReason())
	}
	lc.awaitAnswers(t, 1)
	if server, script := cookiesOf(t, s, lc.url); len(server) > 0 || script != "" {
		t.Errorf("the next job sees the keepalive fetch's cookie: %q, %q", server, script)
	}
	before = preparedTab(t, s)
	if _, err := s.Render(ctx, Request{URL: lc.url + "/page/3", Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatal(err)
	}
	if preparedTab(t, s) != before {
		t.Errorf("a page whose fetches had all ended cost its context")
	}
}

// preparedTab waits for the session's own tab for its next job (the wipe
// of the last one's, or a new one) and returns it.
// TestWipeCountsALeftOrigin: a page that sends its main frame to another
// origin (a script's redirect) leaves session storage of the first origin
// in the tab, which only a live frame of it could clear: the context is
// replaced, and counted as origin_left, not as a wipe that failed.
func TestWipeCountsALeftOrigin(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.session(t)
	other := strings.Replace(e.url("/page/2"), "127.0.0.1", "localhost", 1)
	if other == e.url("/page/2") {
		t.Fatalf("the test site is not on 127.0.0.1: %s", e.site.URL)
	}
	if _, err := s.Render(ctx, Request{URL: e.url("/egress/navigate?by=script&to=" + url.QueryEscape(other)), Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatal(err)
	}
	preparedTab(t, s)
	if got := e.b.ContextStats(); got.Replaced[ReplacedOriginLeft] != 1 || got.ReplacedTotal() != 1 {
		t.Errorf("context stats %v, want one context replaced for a left origin", got.ByReason())
	}
}

func preparedTab(t *testing.T, s *Session) *tab {
	t.Helper()
	p := s.own
	<-p.done
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.t
}

func equalState(a, b isoState) bool {
	return a.HTTPCacheCount == b.HTTPCacheCount && slices.Equal(a.ServerCookies, b.ServerCookies) && a.ScriptCookies == b.ScriptCookies &&
		slices.Equal(a.Local, b.Local) && slices.Equal(a.Session, b.Session) && slices.Equal(a.IndexedDB, b.IndexedDB) &&
		slices.Equal(a.Caches, b.Caches) && a.ServiceWorkers == b.ServiceWorkers && a.Geolocation == b.Geolocation &&
		a.WindowName == b.WindowName
}

func resData(res *Result) string {
	if res == nil {
		return "no result"
	}
	return string(res.Data)
}

func grantGeolocation(t *testing.T, e *env, bcid cdp.BrowserContextID, origin string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cdp.Call(ctx, e.b.cdpB, browser.SetPermission, browser.SetPermissionParams{
		Permission: &browser.PermissionDescriptor{Name: "geolocation"}, Setting: browser.PermissionSettingGranted,
		Origin: origin, BrowserContextID: bcid,
	}); err != nil {
		t.Fatalf("granting geolocation: %v", err)
	}
}

// TestHostileInEveryIsolation: hostile pages end in a terminal state in
// every isolation mode, and the session renders the next page.
func TestHostileInEveryIsolation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, iso := range []Isolation{IsolationWipe, IsolationContext, IsolationShared} {
		t.Run(string(iso), func(t *testing.T) {
			s := e.session(t)
			for _, req := range []Request{
				{URL: e.url("/hostile/alert")},
				{URL: e.url("/hostile/beforeunload"), Actions: []Action{{Type: ActionClick, Selector: "#touch"}}},
				{URL: e.url("/hostile/popup")},
				{URL: e.url("/hostile/loop"), Timeout: time.Second},
				{URL: e.url("/hostile/crash"), Timeout: time.Minute},
			} {
				req.Isolation = iso
				if _, err := s.Render(ctx, req); err != nil && !slices.Contains([]string{ClassTimeout, ClassCrashed}, ClassOf(err)) {
					t.Errorf("%s: %v", req.URL, err)
				}
				res, err := s.Render(ctx, Request{URL: e.url("/page/3"), Isolation: iso, Wait: Wait{Selector: "#ready"}, Extract: "document.querySelectorAll('li.item').length", Timeout: 30 * time.Second})
				if err != nil || string(res.Data) != "200" {
					t.Fatalf("after %s: %v %s", req.URL, err, resData(res))
				}
			}
		})
	}
}

// TestConsoleFloodIsCutInThePage: a page that logs, console.errors,
// asserts, rejects and throws 16 MB strings, logs objects whose text is
// 16 MB (an Error, a Symbol, a RegExp, a function), posts a 16 MB body and
// fetches a 16 MB data: URL renders, and every message it leaves is cut;
// the uncaught ones are reported as such. What reaches the node from Chrome
// stays small: the guard cuts in the page, POST bodies stay out of Network
// events, and the pipe drops the data: URL's event unread.
func TestConsoleFloodIsCutInThePage(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	passed0, dropped0 := e.b.pipe.read.Load()-e.b.pipe.droppedBytes.Load(), e.b.pipe.dropped.Load()
	res, err := s.Render(context.Background(), Request{URL: e.url("/hostile/console-flood?mb=16"), Wait: Wait{Selector: "#ready"}, Timeout: time.Minute,
		Extract: "String(console.error).includes('[native code]')"})
	if err != nil {
		t.Fatal(err)
	}
	if passed := e.b.pipe.read.Load() - e.b.pipe.droppedBytes.Load() - passed0; passed > 4<<20 {
		t.Errorf("%d MB of Chrome's messages reached the node during the job (dropped: %d events); want under 4 MB", passed>>20, e.b.pipe.dropped.Load())
	}
	// Only the data: URL's two events (its request and its response) are
	// dropped: no console event and no POST body reached the bound.
	if d := e.b.pipe.dropped.Load() - dropped0; d != 2 {
		t.Errorf("%d events dropped, want the data: URL's 2", d)
	}
	if string(res.Data) != "false" {
		t.Errorf("console.error is Chrome's own, not the guard: strings cross CDP whole")
	}
	var uncaught, errs int
	for _, m := range res.ConsoleErrors {
		if len(m) > maxConsoleLen+len("…")+len("console.assert: ") {
			t.Errorf("a console message of %d bytes was kept", len(m))
		}
		switch {
		case strings.HasPrefix(m, "uncaught: Error: ttt"), strings.HasPrefix(m, "uncaught: Error: ppp"):
			uncaught++
		case strings.HasPrefix(m, "console.error: eee"), strings.HasPrefix(m, "console.assert: aaa"):
			errs++
		default:
			t.Errorf("unexpected console message %.80q", m)
		}
	}
	if uncaught != 2 || errs != 2 {
		t.Errorf("%d uncaught and %d console errors reported, want 2 and 2: %.200q", uncaught, errs, res.ConsoleErrors)
	}
}

// TestRetiredSessionSkipsTheWipe checks Retire: the job that ends after it
// leaves its tab as it was (no wipe runs for a next job that should never
// come), yet a job that comes anyway still finds nothing of the earlier
// one, in the same context, wiped when it starts.
func TestRetiredSessionSkipsTheWipe(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.session(t)
	origin := e.site.URL
	res, err := s.Render(ctx, Request{URL: origin + "/isolation/set?key=retired&sw=0", Wait: Wait{Selector: "#ready"}, Extract: "document.getElementById('ready').textContent"})
	if err != nil || string(res.Data) != `"set"` {
		t.Fatalf("job A: %v, %s", err, resData(res))
	}
	<-s.own.done
	before := s.own.t
	s.Retire()
	res, err = s.Render(ctx, Request{URL: origin + "/isolation/set?key=retired2&sw=0", Wait: Wait{Selector: "#ready"}, Extract: "document.getElementById('ready').textContent"})
	if err != nil || string(res.Data) != `"set"` {
		t.Fatalf("job B: %v, %s", err, resData(res))
	}
	p := s.own
	<-p.done
	if !errors.Is(p.err, errRetired) || p.t != before {
		t.Fatalf("after a retired session's job: own tab %p (was %p), err %v; want the same tab, unwiped", p.t, before, p.err)
	}
	before.mu.Lock()
	left := len(before.origins)
	before.mu.Unlock()
	if left == 0 {
		t.Fatal("the retired session's tab was wiped (no origins left to clear)")
	}
	res, err = s.Render(ctx, Request{URL: origin + "/isolation/get?key=retired2", Wait: Wait{Selector: "#ready"}, Extract: "window.__state"})
	if err != nil {
		t.Fatal(err)
	}
	var st isoState
	unmarshal(t, res.Data, &st)
	if !st.empty() {
		t.Errorf("a job after Retire sees the earlier job's state: %+v", st)
	}
	if s.own != nil {
		<-s.own.done
		if s.own.t != before {
			t.Errorf("a job after Retire cost the context; want it wiped at the job's start and reused")
		}
	}
}

// TestWipeClearsPartitionedStorage: a frame of another site stores under a
// key partitioned by the top page's site (local storage, IndexedDB, Cache
// Storage), which clearing the frame's origin does not reach. The next job
// embedding the same frame finds nothing, and the context is kept.
func TestWipeClearsPartitionedStorage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.session(t)
	top, frame := e.site.URL, withHost(t, e.site.URL, "localhost")
	embed := func(src string) string { return top + "/isolation/embed?src=" + url.QueryEscape(src) }
	if _, err := s.Render(ctx, Request{URL: top + "/page/1", Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatal(err)
	}
	before := preparedTab(t, s)
	res, err := s.Render(ctx, Request{URL: embed(frame + "/isolation/set?sw=0&key=partitioned"), Wait: Wait{Selector: "#ready"},
		Extract: "document.getElementById('ready').textContent"})
	if err != nil || string(res.Data) != `"set"` {
		t.Fatalf("job A: %v, %s", err, resData(res))
	}
	if preparedTab(t, s) != before {
		t.Errorf("a page with another site's frame cost its context; want it wiped and reused")
	}
	res, err = s.Render(ctx, Request{URL: embed(frame + "/isolation/get"), Wait: Wait{Selector: "#ready"}, Extract: "window.__state"})
	if err != nil {
		t.Fatal(err)
	}
	var st isoState
	unmarshal(t, res.Data, &st)
	if len(st.Local) > 0 || len(st.IndexedDB) > 0 || len(st.Caches) > 0 || len(st.Session) > 0 || st.ScriptCookies != "" {
		t.Errorf("the next job's frame of the same site sees job A's frame's state: %+v", st)
	}
}

// TestWipeClearsSessionStorageOfAnOriginLeft: a page stores session storage
// on one site and goes on to another that embeds a frame of the first.
// Session storage is cleared through a live frame of its origin, and the
// only one left is partitioned under the other site: the first site's own
// area must go too (a review suspected it stayed). In shared mode it stays.
func TestWipeClearsSessionStorageOfAnOriginLeft(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	top, other := e.site.URL, withHost(t, e.site.URL, "localhost")
	embed := top + "/isolation/embed?src=" + url.QueryEscape(other+"/isolation/get")
	for _, iso := range []Isolation{IsolationWipe, IsolationShared} {
		s := e.session(t)
		res, err := s.Render(ctx, Request{URL: other + "/isolation/hop?to=" + url.QueryEscape(embed), Isolation: iso,
			Wait: Wait{Selector: "#ready"}, Extract: "location.href"})
		if err != nil || string(res.Data) != strconv.Quote(embed) {
			t.Fatalf("%s, job A: %v, %s; want it at %s", iso, err, resData(res), embed)
		}
		st := readState(t, s, other+"/isolation/get", iso)
		if want := iso == IsolationShared; slices.Contains(st.Session, "hop") != want {
			t.Errorf("%s: the next job on the first site sees session storage %v; want job A's: %t", iso, st.Session, want)
		}
	}
}

// TestWipeClearsTheHTTPCacheWorkersRead: the session's tab never reads the
// HTTP cache, but a page's dedicated worker does; the next job's worker
// must not get this job's cached answer.
func TestWipeClearsTheHTTPCacheWorkersRead(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.session(t)
	count := func() string {
		t.Helper()
		res, err := s.Render(ctx, Request{URL: e.url("/isolation/worker?key=worker-cache"), Wait: Wait{Selector: "#ready"},
			Extract: "document.getElementById('ready').textContent"})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Data)
	}
	if got := count(); got != `"1"` {
		t.Fatalf("job A's worker got %s, want the server's first answer", got)
	}
	if got := count(); got != `"2"` {
		t.Errorf("job B's worker got %s, want the server's second answer: job A's answer came from the HTTP cache", got)
	}
}

// TestDedicatedWorkerCostsTheContext: a dedicated worker's requests belong
// to its own target, out of the tab's Network events. A worker that
// answered an HTTP auth challenge with XHR credentials filled the context's
// auth cache unseen, and the next job on the session got past the prompt
// without credentials. A dedicated worker now costs the context.
func TestDedicatedWorkerCostsTheContext(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.session(t)
	worker := `new Promise(ok => {
  const src = "const x = new XMLHttpRequest(); x.open('GET', '" + location.origin + "/isolation/auth', false, '` +
		testsite.AuthUser + `', '` + testsite.AuthPassword + `'); x.send(); postMessage(x.status)";
  const w = new Worker(URL.createObjectURL(new Blob([src], {type: 'text/javascript'})));
  w.onmessage = ev => ok(ev.data);
  w.onerror = ev => ok('error: ' + ev.message);
})`
	res, err := s.Render(ctx, Request{URL: e.url("/page/1"), Wait: Wait{Selector: "#ready"}, Extract: worker})
	if err != nil || string(res.Data) != "200" {
		t.Fatalf("job A's worker: %v, %s; want its authenticated request's 200", err, resData(res))
	}
	res, err = s.Render(ctx, Request{URL: e.url("/isolation/auth"), Timeout: 10 * time.Second})
	if ClassOf(err) != ClassHTTP || res == nil || res.Status != 401 {
		t.Errorf("job B got past the auth prompt with job A's worker's credentials: %v, %s", err, resData(res))
	}
	if got := e.b.ContextStats().Replaced[ReplacedWorker]; got != 1 {
		t.Errorf("contexts replaced for a worker: %d, want 1 (%v)", got, e.b.ContextStats().ByReason())
	}
}

// TestPageThatLoopsAsItIsLeft: a page whose pagehide handler never returns
// holds its renderer as it is left; the next job on the session gets a
// clean tab within its own short timeout, not after the wipe's. A shared
// tab leaves its page after the job too, and is given up when it cannot:
// the next shared job gets a new tab in the same context.
func TestPageThatLoopsAsItIsLeft(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, iso := range []Isolation{IsolationWipe, IsolationContext, IsolationShared} {
		t.Run(string(iso), func(t *testing.T) {
			s := e.session(t)
			if _, err := s.Render(ctx, Request{URL: e.url("/hostile/leave-loop"), Isolation: iso, Wait: Wait{Selector: "#ready"}}); err != nil {
				t.Fatal(err)
			}
			res, err := s.Render(ctx, Request{URL: e.url("/page/3"), Isolation: iso, Wait: Wait{Selector: "#ready"},
				Extract: "document.querySelectorAll('li.item').length", Timeout: 8 * time.Second})
			if err != nil || string(res.Data) != "200" {
				t.Fatalf("the next job: %v %s", err, resData(res))
			}
		})
	}
}

// TestCacheScope: jobs of one cache scope share the session's HTTP cache,
// and nothing else; a job of another scope or of none finds nothing of
// theirs — neither in the HTTP cache nor in the renderer's memory cache,
// which serves a script without asking the HTTP cache.
func TestCacheScope(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.session(t)
	steps := []struct {
		scope string
		want  string // the script's count as the job saw it
	}{
		{"", `"1"`},
		{"", `"2"`},  // a job without a scope never reads the cache
		{"a", `"3"`}, // nor does a scope see what one without left
		{"a", `"3"`}, // the scope's second job gets its first's script
		{"b", `"4"`}, // another scope finds nothing of a's
		{"b", `"4"`},
		{"a", `"5"`}, // b's jobs came between: a's cache is gone
		{"", `"6"`},
		{"b", `"7"`},
	}
	for i, st := range steps {
		res, err := s.Render(ctx, Request{URL: e.url("/isolation/scripted?key=scope"), CacheScope: st.scope,
			Wait: Wait{Selector: "#ready"}, Extract: "document.getElementById('ready').textContent"})
		if err != nil {
			t.Fatalf("job %d (scope %q): %v", i, st.scope, err)
		}
		if got := string(res.Data); got != st.want {
			t.Errorf("job %d (scope %q) saw the script's count %s, want %s", i, st.scope, got, st.want)
		}
	}

	// Only the cache crosses: the rest of what a job leaves is wiped for
	// the next job of its scope as for any other.
	set := e.url("/isolation/set?key=scoped&sw=0")
	if _, err := s.Render(ctx, Request{URL: set, CacheScope: "c", Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Render(ctx, Request{URL: e.url("/isolation/get?key=scoped"), CacheScope: "c",
		Wait: Wait{Selector: "#ready"}, Extract: "window.__state"})
	if err != nil {
		t.Fatal(err)
	}
	var st isoState
	unmarshal(t, res.Data, &st)
	if st.HTTPCacheCount != 1 {
		t.Errorf("the scope's second job fetched the cached answer anew (count %d): the cache was not kept", st.HTTPCacheCount)
	}
	st.HTTPCacheCount = 2 // the one thing meant to cross
	if !st.empty() {
		t.Errorf("the scope's second job saw more than the cache: %+v", st)
	}
}

func TestCacheScopeNeedsAWipedContext(t *testing.T) {
	for _, r := range []Request{
		{URL: "http://127.0.0.1/", CacheScope: "a", Isolation: IsolationContext},
		{URL: "http://127.0.0.1/", CacheScope: "a", Isolation: IsolationShared},
		{URL: "http://127.0.0.1/", CacheScope: "a", Proxy: "http://127.0.0.1:3128"},
	} {
		err := r.Check()
		var be *Error
		if !errors.As(err, &be) || be.Class != ClassInvalid || !strings.Contains(err.Error(), "cache scope") {
			t.Errorf("Check(%+v) = %v, want an invalid-request error naming the cache scope", r, err)
		}
	}
}
