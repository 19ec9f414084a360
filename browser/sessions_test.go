package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

// visitStorage renders the test site's /storage in s's shared tab and
// returns the visits it counted in a cookie and in localStorage.
func visitStorage(t *testing.T, e *env, s *Session) string {
	t.Helper()
	res, err := s.Render(context.Background(), Request{URL: e.url("/storage"), Isolation: IsolationShared, Wait: Wait{Selector: "#ready"}, Extract: `document.getElementById('out').textContent`})
	if err != nil {
		t.Fatal(err)
	}
	var out string
	unmarshal(t, res.Data, &out)
	return out
}

// TestSharedContext checks the opt-out of isolation: a session reuses its
// tab in the default context, so storage persists, and a page with an
// onbeforeunload prompt does not stop the next job.
func TestSharedContext(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	ctx := context.Background()
	visit := func() string { t.Helper(); return visitStorage(t, e, s) }
	if first, second := visit(), visit(); first != "cookie=1 local=1" || second != "cookie=2 local=2" {
		t.Fatalf("visits %q then %q, want the second to see the first", first, second)
	}
	shared := s.shared
	// A fresh job in between sees none of it and leaves the shared tab be.
	res, err := s.Render(ctx, Request{URL: e.url("/storage"), Wait: Wait{Selector: "#ready"}, Extract: `document.getElementById('out').textContent`})
	if err != nil || string(res.Data) != `"cookie=1 local=1"` {
		t.Fatalf("fresh job: %v, %s", err, res.Data)
	}
	if got := visit(); got != "cookie=3 local=3" || s.shared != shared {
		t.Fatalf("third shared visit %q (same tab %v)", got, s.shared == shared)
	}

	// beforeunload: a click gives the page a user gesture, so Chrome would
	// ask before leaving it; the session answers as the tab leaves the page
	// after its job (not in the next job's time), and the next job runs.
	if _, err := s.Render(ctx, Request{URL: e.url("/hostile/beforeunload"), Isolation: IsolationShared, Actions: []Action{{Type: ActionClick, Selector: "#touch"}}}); err != nil {
		t.Fatal(err)
	}
	res, err, took := render(t, s, Request{URL: e.url("/page/4"), Isolation: IsolationShared, Wait: Wait{Selector: "#ready"}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("leaving a beforeunload page: %v", err)
	}
	wantDuration(t, took, 0, 20*time.Second)
	if res.Title != "Page 4" || res.Dialogs != 0 || s.shared != shared {
		t.Fatalf("title %q after %d dialogs (same tab %v)", res.Title, res.Dialogs, s.shared == shared)
	}

	// Settings of one job do not leak into the next on the same tab.
	if _, err := s.Render(ctx, Request{URL: e.url("/echo"), Isolation: IsolationShared, UserAgent: "One/1", Headers: map[string]string{"X-One": "1"}, Viewport: Viewport{Width: 500, Height: 500}, Block: []string{"image"}}); err != nil {
		t.Fatal(err)
	}
	res, err = s.Render(ctx, Request{URL: e.url("/echo"), Isolation: IsolationShared,
		Extract: `({h: JSON.parse(document.getElementById('data').textContent).headers, vp: document.getElementById('viewport').textContent})`})
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		H  map[string]string
		VP string
	}
	unmarshal(t, res.Data, &d)
	if d.H["x-one"] != "" || d.H["user-agent"] == "One/1" || d.VP != "1280x800" {
		t.Fatalf("the previous job's settings leaked: headers %v viewport %q", d.H, d.VP)
	}
	res, err = s.Render(ctx, Request{URL: e.url("/images"), Isolation: IsolationShared, Wait: Wait{Selector: "#ready"}, Extract: `document.getElementById('ready').textContent`})
	if err != nil || string(res.Data) != `"loaded"` {
		t.Fatalf("blocking leaked into the next job: %v %s", err, res.Data)
	}

	// A timeout leaves the shared tab unusable (the page may still run):
	// the next shared job gets a new tab, in the same context.
	_, err = s.Render(ctx, Request{URL: e.url("/hostile/loop"), Isolation: IsolationShared, Timeout: time.Second})
	wantClass(t, err, ClassTimeout, true)
	if s.shared != nil {
		t.Fatal("the shared tab is kept after a timeout")
	}
	if got := visit(); got != "cookie=4 local=4" {
		t.Fatalf("after a new shared tab: %q", got)
	}
}

// TestSharedTabLeavesItsPage: a shared job's page does not go on running
// after its job (its scripts, timers and requests would, until the next
// shared job navigated the tab, though other jobs ran on the session in
// between): the tab leaves it for about:blank in the background, and the
// next shared job still finds what the context keeps.
func TestSharedTabLeavesItsPage(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	ctx := context.Background()
	visit := func() string { t.Helper(); return visitStorage(t, e, s) }
	if got := visit(); got != "cookie=1 local=1" {
		t.Fatalf("first visit %q", got)
	}
	// A job of the default isolation, on the session's own tab.
	if _, err := s.Render(ctx, Request{URL: e.url("/page/1"), Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the shared job's page to be left", func() bool {
		return !slices.ContainsFunc(pageTargets(t, e), func(info *target.Info) bool {
			return strings.HasSuffix(info.URL, "/storage")
		})
	})
	if got := visit(); got != "cookie=2 local=2" {
		t.Fatalf("the next shared visit %q, want it to see the first", got)
	}
}

// TestCloseAfterAFailedContextJob: the supervisor closes a session after
// its job failed, while the job's brand-new context is being disposed of
// in the background. The tab's last call waits for an answer its reader,
// ended by the close, could no longer bring: it must end with the reader,
// not at its closeWait bound (5 s of a failed job's slot, one close in two).
func TestCloseAfterAFailedContextJob(t *testing.T) {
	e := newEnv(t)
	for i := range 8 {
		s, err := e.b.NewSession(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		_, err, _ = render(t, s, Request{URL: e.url(fmt.Sprintf("/status/404?job=%d", i)), Isolation: IsolationContext, Timeout: 20 * time.Second})
		wantClass(t, err, ClassHTTP, false)
		start := time.Now()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took >= closeWait {
			t.Fatalf("close %d took %v: a wait ran into its closeWait bound (%v)", i, took, closeWait)
		}
	}
}

// TestProxy runs jobs behind per-job proxies, with and without
// credentials.
func TestProxy(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	ctx := context.Background()
	echo := `JSON.parse(document.getElementById('data').textContent).headers`

	open := newTestProxy(t, "", "")
	res, err := s.Render(ctx, Request{URL: e.url("/echo"), Proxy: open.URL, Extract: echo})
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]string
	unmarshal(t, res.Data, &h)
	if h["x-via-proxy"] != "farm-test" || open.served.Load() == 0 {
		t.Fatalf("not proxied: headers %v, proxy served %d", h, open.served.Load())
	}

	authed := newTestProxy(t, "farm", "s3cret")
	u := strings.Replace(authed.URL, "http://", "http://farm:s3cret@", 1)
	res, err = s.Render(ctx, Request{URL: e.url("/page/2"), Proxy: u, Wait: Wait{Selector: "#ready"}, Extract: `document.querySelectorAll('li.item').length`})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Data) != "200" || authed.served.Load() < 2 {
		t.Fatalf("through the authenticating proxy: %s items, %d requests", res.Data, authed.served.Load())
	}

	// Wrong credentials: the proxy refuses them, and the job fails for
	// good with its 407, after the credentials were tried once (Chrome
	// would retry them about 35 times, then fail as a network error).
	bad := strings.Replace(authed.URL, "http://", "http://farm:wrong@", 1)
	refused := authed.refused.Load()
	res, err = s.Render(ctx, Request{URL: e.url("/page/2"), Proxy: bad, Timeout: 20 * time.Second})
	if err == nil {
		t.Fatalf("wrong proxy credentials rendered %+v", res)
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.Class != ClassHTTP || pe.Retriable || !strings.Contains(err.Error(), "407") {
		t.Fatalf("wrong proxy credentials: %v, want a permanent HTTP 407", err)
	}
	if n := authed.refused.Load() - refused; n > 3 {
		t.Errorf("the proxy refused %d requests of the job, want the page's first and its credentials once", n)
	}

	// The proxy is the job's only: the next job goes direct.
	before := open.served.Load() + authed.served.Load()
	res, err = s.Render(ctx, Request{URL: e.url("/echo"), Extract: echo})
	if err != nil {
		t.Fatal(err)
	}
	var direct map[string]string
	unmarshal(t, res.Data, &direct)
	if direct["x-via-proxy"] != "" || open.served.Load()+authed.served.Load() != before {
		t.Fatalf("a job without proxy was proxied: %v", direct)
	}
}

// TestConcurrentSessions renders on six sessions of one Chrome at once.
func TestConcurrentSessions(t *testing.T) {
	e := newEnv(t)
	const sessions, each = 6, 3
	errs := make(chan error, sessions*each)
	results := make(chan json.RawMessage, sessions*each)
	done := make(chan struct{})
	for i := range sessions {
		s := e.session(t)
		go func() {
			defer func() { done <- struct{}{} }()
			for k := range each {
				res, err := s.Render(context.Background(), Request{
					URL:       e.url("/page/" + strings.Repeat("1", i+1)),
					Wait:      Wait{Selector: "#ready"},
					Isolation: map[bool]Isolation{true: IsolationShared}[k == 1],
					Extract:   "document.querySelectorAll('li.item').length",
				})
				if err != nil {
					errs <- err
					continue
				}
				results <- res.Data
			}
		}()
	}
	for range sessions {
		<-done
	}
	close(errs)
	close(results)
	for err := range errs {
		t.Error(err)
	}
	n := 0
	for d := range results {
		n++
		if string(d) != "200" {
			t.Errorf("rendered %s items, want 200", d)
		}
	}
	if n != sessions*each {
		t.Fatalf("%d renders succeeded, want %d", n, sessions*each)
	}
}

// TestClosingARetiredSessionEndsItsPages: a retired session leaves its tabs
// as its last job left them (no wipe for a job that should never come);
// Close, which the supervisor calls as soon as such a job ends while its
// Chrome stays up for others, closes them, so that none of the finished
// pages goes on running in the Chrome.
func TestClosingARetiredSessionEndsItsPages(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, iso := range []Isolation{IsolationWipe, IsolationContext, IsolationShared} {
		s := e.session(t)
		s.Retire()
		path := "/page/7?iso=" + string(iso)
		if _, err := s.Render(ctx, Request{URL: e.url(path), Isolation: iso, Wait: Wait{Selector: "#ready"}}); err != nil {
			t.Fatalf("%s: %v", iso, err)
		}
		open := func() bool {
			for _, info := range pageTargets(t, e) {
				if strings.HasSuffix(info.URL, path) {
					return true
				}
			}
			return false
		}
		if !open() {
			t.Fatalf("%s: the retired session's finished page is not open before Close; the test checks nothing", iso)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("%s: close: %v", iso, err)
		}
		// Target.closeTarget answers before the page is gone.
		waitTabGone(t, e, path)
	}
}

// TestGivenUpSharedTabIsClosed: opening a tab of the default context that
// is given up half-way (its job's time ran out) leaves no tab behind. Such a
// tab has no context of its own whose disposal would close it: before,
// Chrome made it while the call creating it, or chromedp's attach, was
// given up, and it stayed open until Chrome's end (99 of 100 here).
func TestGivenUpSharedTabIsClosed(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	ctx := context.Background()
	ref, err := s.newTab(ctx, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cdp.Call(ctx, e.b.cdpB, target.GetTargetInfo, target.GetTargetInfoParams{TargetID: ref.id})
	if err != nil {
		t.Fatal(err)
	}
	shared := info.TargetInfo.BrowserContextID
	ref.close()
	// Full Chrome keeps the window it started with: the tabs of the
	// default context open now, the reference's closing awaited.
	sharedTabs := func() int {
		t.Helper()
		res, err := cdp.Call(ctx, e.b.cdpB, target.GetTargets, target.GetTargetsParams{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ti := range res.TargetInfos {
			if ti.Type == "page" && ti.BrowserContextID == shared && ti.TargetID != ref.id {
				n++
			}
		}
		return n
	}
	before := sharedTabs()
	gaveUp := 0
	for i := range 100 {
		tctx, cancel := context.WithTimeout(ctx, time.Duration(i)*250*time.Microsecond)
		tb, err := s.newTab(tctx, nil, true)
		cancel()
		if err != nil {
			gaveUp++
			continue
		}
		tb.close()
	}
	if gaveUp == 0 {
		t.Fatal("no attempt was given up: the test proves nothing")
	}
	// Chrome lists a closed tab a little longer.
	deadline := time.Now().Add(10 * time.Second)
	for {
		open := sharedTabs()
		if open == before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 100 openings given up; %d tabs of the default context open, %d before", gaveUp, open, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConsoleLogFloodStopsNoOtherSession: a page that logs to the console
// in a loop sent an event per call, as fast as its renderer ran; the one
// connection's messages of every other session queued behind them, and the
// other session's renders failed, "chrome did not answer" (under the race
// detector always). The console guard forwards no console.log.
func TestConsoleLogFloodStopsNoOtherSession(t *testing.T) {
	e := newEnv(t)
	flooder, other := e.session(t), e.session(t)
	ctx := context.Background()
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := other.Render(ctx, Request{URL: e.url("/page/1"), Wait: Wait{Selector: "#ready"}, Timeout: 15 * time.Second}); err != nil {
				t.Errorf("the other session's render %d: %v", n, err)
				return
			}
			n++
		}
	}()
	for range 3 {
		if _, err := flooder.Render(ctx, Request{URL: e.url("/hostile/event-flood"), Isolation: IsolationContext,
			Wait: Wait{Selector: "#ready"}, Timeout: 15 * time.Second}); err != nil {
			t.Errorf("flood job: %v", err)
		}
	}
	_, err := flooder.Render(ctx, Request{URL: e.url("/hostile/event-flood?ready=0"), Wait: Wait{Selector: "#ready"}, Timeout: 2 * time.Second})
	if ClassOf(err) != ClassTimeout {
		t.Errorf("flood job that times out: %v, want a timeout", err)
	}
	close(stop)
	if n := <-done; n == 0 {
		t.Error("the other session rendered nothing during the floods")
	}
}

// TestHistoryFloodStopsNoOtherSession: a page that calls
// history.replaceState in a loop (a navigation within the document each,
// which the console guard cannot stop) held Chrome's browser process while
// --disable-ipc-flooding-protection, Puppeteer's default, was on: its own job
// and the other session's next render failed, "chrome did not answer".
// With the protection on Chrome throttles the calls.
func TestHistoryFloodStopsNoOtherSession(t *testing.T) {
	e := newEnv(t)
	flooder, other := e.session(t), e.session(t)
	ctx := context.Background()
	for i := range 3 {
		if _, err := flooder.Render(ctx, Request{URL: e.url("/hostile/event-flood?kind=history"), Isolation: IsolationContext,
			Wait: Wait{Selector: "#ready"}, Timeout: 15 * time.Second}); err != nil {
			t.Errorf("flood job %d: %v", i, err)
		}
		if _, err := other.Render(ctx, Request{URL: e.url("/page/1"), Wait: Wait{Selector: "#ready"}, Timeout: 15 * time.Second}); err != nil {
			t.Fatalf("the other session after flood job %d: %v", i, err)
		}
	}
}
