package browser

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testsite"
)

// slack is added to a timeout for the upper bound of a render that must end
// at its timeout: enough for a loaded 2-core machine, far below "hung".
const slack = 10 * time.Second

// pageCase is one render against the test site and what must come of it.
type pageCase struct {
	name  string
	req   Request
	class string // "" means success
	retry bool   // Retriable, for an error
	min   time.Duration
	max   time.Duration // 0 means 30 s
	check func(t *testing.T, e *env, res *Result)
}

// TestPages renders every page of the test site on one shared Chrome and
// checks the outcome, the error class, the time bound, and, after a failure
// or a hostile page, that the session and Chrome are still usable.
func TestPages(t *testing.T) {
	e := newEnv(t)
	u := e.url
	cases := []pageCase{
		{name: "page", req: Request{URL: u("/page/5"), Wait: Wait{Selector: "#ready"},
			Extract: `({n: document.querySelectorAll('li.item').length, first: document.querySelector('li.item').textContent, h1: document.querySelector('h1').textContent})`},
			check: func(t *testing.T, e *env, res *Result) {
				var d struct {
					N     int
					First string
					H1    string
				}
				unmarshal(t, res.Data, &d)
				if d.N != 200 || d.First != "Item 5.0" || d.H1 != "Item 5" {
					t.Errorf("data %s", res.Data)
				}
				if res.Status != 200 || res.Title != "Page 5" || res.FinalURL != e.url("/page/5") {
					t.Errorf("status %d title %q url %q", res.Status, res.Title, res.FinalURL)
				}
				if res.Timings.Navigation <= 0 || res.Timings.Wait <= 0 || res.Timings.Total < res.Timings.Navigation+res.Timings.Wait {
					t.Errorf("timings %+v", res.Timings)
				}
			}},
		{name: "page/network-idle", req: Request{URL: u("/page/6"), Wait: Wait{NetworkIdle: true}, Extract: `document.querySelectorAll('li.item').length`},
			// Network idle is 500 ms without requests after the API call.
			min: 500 * time.Millisecond,
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != "200" {
					t.Errorf("%s items at network idle, want 200", res.Data)
				}
			}},
		{name: "page/api-delay", req: Request{URL: u("/page/7?delay=400"), Wait: Wait{Selector: "#ready"}, Extract: `document.querySelectorAll('li.item').length`},
			min: 400 * time.Millisecond,
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != "200" {
					t.Errorf("%s items, want 200", res.Data)
				}
			}},
		{name: "page/load-event-only", req: Request{URL: u("/page/8?delay=2000"), Extract: `document.querySelectorAll('li.item').length`},
			// The default wait is the load event: the API answer comes later.
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != "0" {
					t.Errorf("%s items at the load event, want 0", res.Data)
				}
			}},
		{name: "leak", req: Request{URL: u("/leak/1?mb=4"), Wait: Wait{Selector: "#ready"}, Extract: `window.__leak.length`},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != "8" {
					t.Errorf("leak holds %s chunks, want 8", res.Data)
				}
			}},
		{name: "links", req: Request{URL: u("/links/2"), FollowSelector: "a.item"},
			check: func(t *testing.T, e *env, res *Result) {
				if len(res.Links) != 11 || res.Links[0] != e.url("/page/20") || !slices.Contains(res.Links, e.url("/page/1000002")) {
					t.Errorf("links %q", res.Links)
				}
			}},
		{name: "links/max-and-other-host", req: Request{URL: u("/links/2"), FollowSelector: "a.next, a.ext, a.next", FollowMax: 5},
			check: func(t *testing.T, e *env, res *Result) {
				want := []string{e.url("/links/3"), "http://other.invalid/x"}
				if !slices.Equal(res.Links, want) {
					t.Errorf("links %q, want %q", res.Links, want)
				}
			}},
		{name: "links/capped", req: Request{URL: u("/links/2"), FollowSelector: "a", FollowMax: 3},
			check: func(t *testing.T, e *env, res *Result) {
				if len(res.Links) != 3 {
					t.Errorf("links %q, want 3", res.Links)
				}
			}},
		{name: "slow", req: Request{URL: u("/slow/300"), Wait: Wait{Selector: "#ready"}}, min: 300 * time.Millisecond,
			check: func(t *testing.T, e *env, res *Result) {
				if res.Title != "Slow 300" {
					t.Errorf("title %q", res.Title)
				}
			}},
		{name: "slow/timeout", req: Request{URL: u("/slow/60000"), Timeout: time.Second}, class: ClassTimeout, retry: true,
			min: time.Second, max: time.Second + slack},
		{name: "hang", req: Request{URL: u("/hang"), Timeout: time.Second}, class: ClassTimeout, retry: true,
			min: time.Second, max: time.Second + slack,
			check: func(t *testing.T, e *env, _ *Result) { waitTabGone(t, e, "/hang") }},
		{name: "hang/selector", req: Request{URL: u("/hang"), Wait: Wait{Selector: "#partial"}, Timeout: 10 * time.Second},
			check: func(t *testing.T, e *env, res *Result) {
				if res.Title != "Hang" || res.Status != 200 {
					t.Errorf("title %q status %d", res.Title, res.Status)
				}
			}},
		{name: "status/404", req: Request{URL: u("/status/404"), Extract: "1"}, class: ClassHTTP, retry: false,
			check: func(t *testing.T, e *env, res *Result) {
				if res.Status != 404 || res.Title != "Status 404" || res.Data != nil {
					t.Errorf("status %d title %q data %s", res.Status, res.Title, res.Data)
				}
			}},
		{name: "status/503", req: Request{URL: u("/status/503"), Wait: Wait{Selector: "#never"}}, class: ClassHTTP, retry: true,
			check: func(t *testing.T, e *env, res *Result) {
				if res.Status != 503 {
					t.Errorf("status %d", res.Status)
				}
			}},
		{name: "status/200", req: Request{URL: u("/status/200")},
			check: func(t *testing.T, e *env, res *Result) {
				if res.Status != 200 || res.Title != "Status 200" {
					t.Errorf("status %d title %q", res.Status, res.Title)
				}
			}},
		{name: "redirect", req: Request{URL: u("/redirect/3"), Wait: Wait{Selector: "#ready"}},
			check: func(t *testing.T, e *env, res *Result) {
				if res.FinalURL != e.url("/page/0") || res.Status != 200 || res.Title != "Page 0" {
					t.Errorf("final %q status %d title %q", res.FinalURL, res.Status, res.Title)
				}
			}},
		{name: "redirect/js", req: Request{URL: u("/js-redirect/9"), Extract: `document.querySelectorAll('li.item').length`},
			// The load event awaited is the new document's.
			check: func(t *testing.T, e *env, res *Result) {
				if res.FinalURL != e.url("/page/9") || res.Title != "Page 9" || res.Status != 200 {
					t.Errorf("final %q title %q status %d", res.FinalURL, res.Title, res.Status)
				}
			}},
		{name: "redirect/loop", req: Request{URL: u("/redirect-loop")}, class: ClassRedirect, retry: false},
		{name: "network/refused", req: Request{URL: closedPort(t)}, class: ClassNetwork, retry: true},
		{name: "invalid/url", req: Request{URL: "file:///etc/passwd"}, class: ClassInvalid, retry: false},
		{name: "invalid/selector", req: Request{URL: u("/page/1"), Wait: Wait{Selector: "##"}}, class: ClassInvalid, retry: false},
		{name: "extract/throws", req: Request{URL: u("/page/1"), Extract: `(() => { throw new Error('nope') })()`}, class: ClassExtract, retry: false},
		{name: "extract/promise", req: Request{URL: u("/page/1"), Extract: `new Promise(r => setTimeout(() => r({a: [1, "x"]}), 10))`},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != `{"a":[1,"x"]}` {
					t.Errorf("data %s", res.Data)
				}
			}},
		{name: "extract/over-cap", req: Request{URL: u("/page/1"), Extract: `'x'.repeat(3 << 20)`, MaxDataBytes: 1 << 20},
			class: ClassTooLarge, retry: false},
		{name: "extract/over-cap-in-bytes", req: Request{URL: u("/page/1"), Extract: `'é'.repeat(600 << 10)`, MaxDataBytes: 1 << 20},
			class: ClassTooLarge, retry: false},
		{name: "extract/capped-as-before", req: Request{URL: u("/page/1"), MaxDataBytes: 1 << 20,
			Extract: "new Promise(r => r({n: typeof document.title, u: undefined, nan: NaN})) // a comment\n; \n"},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != `{"n":"string","nan":null}` {
					t.Errorf("data %s", res.Data)
				}
			}},
		{name: "extract/capped-unserializable", req: Request{URL: u("/page/1"), Extract: `NaN`, MaxDataBytes: 1 << 20},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != `"NaN"` {
					t.Errorf("data %s", res.Data)
				}
			}},
		{name: "not-html/image", req: Request{URL: u("/img/1.png"), Wait: Wait{Selector: "#ready"}, Timeout: 20 * time.Second},
			class: ClassNotHTML, retry: false, max: 10 * time.Second,
			check: func(t *testing.T, e *env, res *Result) {
				if res == nil || res.Status != 200 {
					t.Errorf("result %+v, want the status the image answered with", res)
				}
			}},
		// The headless shell has no PDF viewer: a PDF arrives as a
		// download there, as a document that is not HTML in full Chrome.
		{name: "not-html/pdf", req: Request{URL: u("/file.pdf"), Wait: Wait{Selector: "#ready"}, Timeout: 20 * time.Second},
			class: pdfClass(t), retry: false, max: 10 * time.Second},
		{name: "extract/undefined", req: Request{URL: u("/page/1"), Extract: `undefined`},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != "null" {
					t.Errorf("data %s", res.Data)
				}
			}},
		{name: "html", req: Request{URL: u("/page/2"), Wait: Wait{Selector: "#ready"}, HTML: true},
			check: func(t *testing.T, e *env, res *Result) {
				if res.HTMLTruncated || !strings.HasPrefix(res.HTML, "<html") || !strings.Contains(res.HTML, "Item 2.199") {
					t.Errorf("html (truncated %v) %.200q", res.HTMLTruncated, res.HTML)
				}
			}},
		{name: "html/capped", req: Request{URL: u("/page/2"), Wait: Wait{Selector: "#ready"}, HTML: true, HTMLMaxBytes: 1000},
			check: func(t *testing.T, e *env, res *Result) {
				if !res.HTMLTruncated || len(res.HTML) > 1000 || len(res.HTML) < 900 {
					t.Errorf("html of %d bytes, truncated %v", len(res.HTML), res.HTMLTruncated)
				}
			}},
		{name: "screenshot", req: Request{URL: u("/page/3"), Wait: Wait{Selector: "#ready"}, Screenshot: true},
			check: func(t *testing.T, e *env, res *Result) {
				if !bytes.HasPrefix(res.Screenshot, []byte("\x89PNG\r\n\x1a\n")) || len(res.Screenshot) < 1000 {
					t.Errorf("screenshot of %d bytes is not a PNG", len(res.Screenshot))
				}
			}},
		{name: "console", req: Request{URL: u("/console"), Wait: Wait{Selector: "#ready"}},
			check: func(t *testing.T, e *env, res *Result) {
				joined := strings.Join(res.ConsoleErrors, "\n")
				if len(res.ConsoleErrors) != 2 || !strings.Contains(joined, "console.error: boom 42") || !strings.Contains(joined, "uncaught: Error: kaboom") {
					t.Errorf("console errors %q", res.ConsoleErrors)
				}
			}},
		{name: "headers-ua-cookies-viewport", req: Request{URL: u("/echo"),
			Headers:   map[string]string{"X-Farm": "yes"},
			UserAgent: "FarmBot/1.0",
			Cookies:   []Cookie{{Name: "c1", Value: "v1"}, {Name: "c2", Value: "v2", Domain: "127.0.0.1", Path: "/"}},
			Viewport:  Viewport{Width: 800, Height: 600},
			Extract:   `({echo: JSON.parse(document.getElementById('data').textContent), vp: document.getElementById('viewport').textContent, ua: navigator.userAgent})`},
			check: func(t *testing.T, e *env, res *Result) {
				var d struct {
					Echo struct {
						Headers map[string]string
						Cookies map[string]string
					}
					VP, UA string
				}
				unmarshal(t, res.Data, &d)
				if d.Echo.Headers["x-farm"] != "yes" || d.Echo.Headers["user-agent"] != "FarmBot/1.0" || d.UA != "FarmBot/1.0" {
					t.Errorf("headers %v ua %q", d.Echo.Headers, d.UA)
				}
				if d.Echo.Cookies["c1"] != "v1" || d.Echo.Cookies["c2"] != "v2" {
					t.Errorf("cookies %v", d.Echo.Cookies)
				}
				if d.VP != "800x600" {
					t.Errorf("viewport %q", d.VP)
				}
			}},
		{name: "defaults-ua-viewport", req: Request{URL: u("/echo"),
			Extract: `({ua: navigator.userAgent, vp: document.getElementById('viewport').textContent})`},
			check: func(t *testing.T, e *env, res *Result) {
				var d struct{ UA, VP string }
				unmarshal(t, res.Data, &d)
				if strings.Contains(d.UA, "Headless") || !strings.Contains(d.UA, "Chrome/") {
					t.Errorf("default user agent %q", d.UA)
				}
				if d.VP != "1280x800" {
					t.Errorf("default viewport %q", d.VP)
				}
			}},
		{name: "block/images", req: Request{URL: u("/images"), Block: []string{"image", "font"}, Wait: Wait{Selector: "#ready"}, Extract: `document.getElementById('ready').textContent`},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != `"blocked"` {
					t.Errorf("image %s, want blocked", res.Data)
				}
			}},
		{name: "block/none", req: Request{URL: u("/images"), Wait: Wait{Selector: "#ready"}, Extract: `document.getElementById('ready').textContent`},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != `"loaded"` {
					t.Errorf("image %s, want loaded", res.Data)
				}
			}},
		{name: "actions/type-click", req: Request{URL: u("/form"), Actions: []Action{
			{Type: ActionType, Selector: "#q", Text: "hello"},
			{Type: ActionClick, Selector: "#go"},
			{Type: ActionWait, Selector: "#out"},
		}, Extract: `document.getElementById('out').textContent`},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != `"you typed: hello (trusted)"` {
					t.Errorf("form says %s", res.Data)
				}
			}},
		{name: "actions/load-more", req: Request{URL: u("/form"), Actions: []Action{
			{Type: ActionClick, Selector: "#more", Times: 2},
			{Type: ActionWait, Selector: "#list li:nth-child(40)"},
		}, Extract: `document.querySelectorAll('#list li').length`},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != "40" {
					t.Errorf("%s items after two clicks, want 40", res.Data)
				}
			}},
		{name: "actions/infinite-scroll", req: Request{URL: u("/infinite"), Wait: Wait{Selector: "#list li"}, Actions: []Action{
			{Type: ActionScroll, Times: 3, Ms: 10000},
		}, Extract: `document.querySelectorAll('#list li').length`},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != "80" {
					t.Errorf("%s items after three scrolls, want 80", res.Data)
				}
			}},
		{name: "actions/wait-ms", req: Request{URL: u("/page/1"), Actions: []Action{{Type: ActionWait, Ms: 300}}},
			min: 300 * time.Millisecond},
		{name: "actions/type-into-div", req: Request{URL: u("/page/1?delay=0"), Wait: Wait{Selector: "#ready"}, Actions: []Action{{Type: ActionType, Selector: "#ready", Text: "x"}}},
			class: ClassAction, retry: false},
		{name: "actions/missing-element", req: Request{URL: u("/page/1"), Timeout: time.Second, Actions: []Action{{Type: ActionClick, Selector: "#nope"}}},
			class: ClassTimeout, retry: true, min: time.Second, max: time.Second + slack},
		{name: "isolation", req: Request{URL: u("/storage"), Wait: Wait{Selector: "#ready"}, Extract: `document.getElementById('out').textContent`},
			// Every job has a fresh context: no earlier visit is seen, though
			// this page (and the usable check) ran before on the session.
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != `"cookie=1 local=1"` {
					t.Errorf("storage %s, want a first visit", res.Data)
				}
			}},
		{name: "hostile/alert", req: Request{URL: u("/hostile/alert"), Wait: Wait{Selector: "#ready"}, Extract: `document.getElementById('ready').textContent`},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != `"confirm=false prompt=null"` || res.Dialogs != 3 {
					t.Errorf("page says %s after %d dialogs", res.Data, res.Dialogs)
				}
			}},
		{name: "hostile/alert-over-the-bound", req: Request{URL: u("/hostile/alert?mb=5"), Wait: Wait{Selector: "#ready"}, Extract: `document.getElementById('ready').textContent`},
			// Their events are over the pipe's bound: without their type,
			// the page would wait for an answer until the job's timeout.
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != `"confirm=false prompt=null"` || res.Dialogs != 3 {
					t.Errorf("page says %s after %d dialogs", res.Data, res.Dialogs)
				}
			}},
		{name: "hostile/beforeunload", req: Request{URL: u("/hostile/beforeunload"), Actions: []Action{{Type: ActionClick, Selector: "#touch"}}, Extract: `document.getElementById('ready').textContent`},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != `"touched"` {
					t.Errorf("page says %s", res.Data)
				}
			}},
		{name: "hostile/popup", req: Request{URL: u("/hostile/popup"), Actions: []Action{{Type: ActionClick, Selector: "#open"}}, Extract: `document.getElementById('ready').textContent`},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != `"opened"` {
					t.Errorf("page says %s", res.Data)
				}
				waitNoPopups(t, e)
			}},
		{name: "hostile/download", req: Request{URL: u("/hostile/download")}, class: ClassDownload, retry: false},
		{name: "hostile/autodownload", req: Request{URL: u("/hostile/autodownload"), Wait: Wait{Selector: "#ready"}, Extract: `document.getElementById('ready').textContent`},
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != `"clicked"` {
					t.Errorf("page says %s", res.Data)
				}
			}},
		{name: "hostile/loop", req: Request{URL: u("/hostile/loop"), Timeout: 2 * time.Second}, class: ClassTimeout, retry: true,
			min: 2 * time.Second, max: 2*time.Second + slack,
			check: func(t *testing.T, e *env, _ *Result) { waitTabGone(t, e, "/hostile/loop") }},
		{name: "hostile/loop-selector", req: Request{URL: u("/hostile/loop"), Timeout: 2 * time.Second, Wait: Wait{Selector: "#before"}}, class: ClassTimeout, retry: true,
			min: 2 * time.Second, max: 2*time.Second + slack},
		{name: "hostile/dom", req: Request{URL: u("/hostile/dom?n=30000"), Timeout: time.Minute, Wait: Wait{Selector: "#ready"}, HTML: true, HTMLMaxBytes: 50000,
			Extract: `document.querySelectorAll('div.n').length`},
			max: time.Minute,
			check: func(t *testing.T, e *env, res *Result) {
				if string(res.Data) != "30000" || !res.HTMLTruncated || len(res.HTML) > 50000 {
					t.Errorf("%s nodes, html %d bytes (truncated %v)", res.Data, len(res.HTML), res.HTMLTruncated)
				}
			}},
		{name: "hostile/crash", req: Request{URL: u("/hostile/crash"), Timeout: time.Minute}, class: ClassCrashed, retry: true,
			max: time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := e.session(t)
			res, err, took := render(t, s, tc.req)
			if tc.class == "" {
				if err != nil {
					t.Fatalf("render: %v", err)
				}
			} else {
				wantClass(t, err, tc.class, tc.retry)
				// A failure keeps what the page answered, if it answered.
				if tc.class == ClassHTTP && res == nil || res != nil && res.Status == 0 {
					t.Fatalf("result %v with a %s error", res, tc.class)
				}
			}
			hi := tc.max
			if hi == 0 {
				hi = 30 * time.Second
			}
			wantDuration(t, took, tc.min, hi)
			if tc.check != nil {
				tc.check(t, e, res)
			}
			if tc.class != "" || strings.HasPrefix(tc.name, "hostile/") {
				// After a failure or a hostile page, the session and
				// Chrome must still work.
				e.usable(t, s)
			}
		})
	}
	t.Run("no-download-written", func(t *testing.T) {
		// After the download pages: nothing may have been written where
		// Chrome saves downloads.
		t.Parallel()
		s := e.session(t)
		if _, err := s.Render(context.Background(), Request{URL: e.url("/hostile/autodownload"), Wait: Wait{Selector: "#ready"}}); err != nil {
			t.Fatal(err)
		}
		home, _ := os.UserHomeDir()
		for _, dir := range []string{e.root, filepath.Join(home, "Downloads"), "."} {
			filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err == nil && strings.Contains(d.Name(), testsite.DownloadName) {
					t.Errorf("download written to %s", path)
				}
				return nil
			})
		}
	})
}

// TestRenderErrorPageTitleIsNotKept: an error status with no body shows
// Chrome's own error page, whose title (the URL, on both browsers) is not
// the site's.
func TestRenderErrorPageTitleIsNotKept(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	req := Request{URL: e.url("/status/503?empty"), Wait: Wait{Selector: "#ready"}}
	res, err, _ := render(t, s, req)
	wantClass(t, err, ClassHTTP, true)
	if res == nil || res.Status != 503 || res.FinalURL != req.URL || res.Title != "" {
		t.Fatalf("result %+v; want status 503, final URL %s, no title", res, req.URL)
	}
}

// TestRedirectAwayIsInvalid: a page the server redirects to a URL the
// browser does not load as a page fails for good as invalid, naming where —
// Chrome aborts view-source:, ftp:, javascript: and mailto: (net::ERR_ABORTED,
// which reads as a network failure and was retried) and refuses file: and
// data: itself (ERR_UNSAFE_REDIRECT).
func TestRedirectAwayIsInvalid(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	for _, to := range []string{"view-source:" + e.url("/page/1"), "ftp://ftp.example.com/", "javascript:1", "mailto:a@example.com", "file:///etc/passwd", "data:text/html,hi"} {
		_, err, _ := render(t, s, Request{URL: e.url("/redirect-to?to=" + url.QueryEscape(to)), Timeout: 10 * time.Second})
		if ClassOf(err) != ClassInvalid || IsRetriable(err) {
			t.Errorf("redirect to %s: %v; want invalid, permanent", to, err)
		}
	}
}

// TestNoPageAnswerIsAnHTTPFailure: an answer Chrome shows no page for and
// aborts the navigation on — 204, 205, and 304 to a request with nothing
// cached — fails the job for good as an HTTP failure naming the status,
// which the result keeps with the final URL (after a redirect too), as for
// an error status; it is no retriable network failure.
func TestNoPageAnswerIsAnHTTPFailure(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	for _, tc := range []struct {
		url, final string
		status     int
	}{
		{e.url("/status/204"), e.url("/status/204"), 204},
		{e.url("/status/205"), e.url("/status/205"), 205},
		{e.url("/status/304"), e.url("/status/304"), 304},
		{e.url("/egress/redirect?to=" + url.QueryEscape(e.url("/status/204"))), e.url("/status/204"), 204},
	} {
		res, err, _ := render(t, s, Request{URL: tc.url, Wait: Wait{Selector: "#ready"}})
		wantClass(t, err, ClassHTTP, false)
		if want := fmt.Sprintf("HTTP %d: the server answered with no page", tc.status); !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q, want it to say %q", tc.url, err, want)
		}
		if res == nil || res.Status != tc.status || res.FinalURL != tc.final || res.Title != "" {
			t.Errorf("%s: result %+v; want status %d, final URL %s, no title", tc.url, res, tc.status, tc.final)
		}
	}
	e.usable(t, s)
}

// TestRenderFailureKeepsTheAnswer: a render that fails after the page
// answered — its extract throws or is over its cap, an action fails, the
// awaited selector never shows, the page is not HTML, or its script hangs
// the renderer — returns with its error what the page answered: its
// status, final URL and title, read also from a hung page without delaying
// the failure past its timeout.
func TestRenderFailureKeepsTheAnswer(t *testing.T) {
	e := newEnv(t)
	u := e.url
	for _, tc := range []struct {
		name  string
		req   Request
		class string
		url   string // the final URL wanted; the request's when ""
		title string
		// orTitle is also accepted, when set.
		orTitle string
		hi      time.Duration
	}{
		{name: "extract throws", req: Request{URL: u("/page/31"), Wait: Wait{Selector: "#ready"}, Extract: `null.x`},
			class: ClassExtract, title: "Page 31"},
		{name: "wait times out", req: Request{URL: u("/page/32"), Wait: Wait{Selector: "#nope"}, Timeout: 3 * time.Second},
			class: ClassTimeout, title: "Page 32", hi: 3*time.Second + slack},
		{name: "result too large", req: Request{URL: u("/page/33"), Wait: Wait{Selector: "#ready"}, Extract: `'y'.repeat(5000000)`, MaxDataBytes: 1 << 20},
			class: ClassTooLarge, title: "Page 33"},
		{name: "action fails", req: Request{URL: u("/page/34?delay=0"), Wait: Wait{Selector: "#ready"}, Actions: []Action{{Type: ActionType, Selector: "#ready", Text: "x"}}},
			class: ClassAction, title: "Page 34"},
		{name: "not html", req: Request{URL: u("/img/1.png"), Wait: Wait{Selector: "#ready"}, Timeout: 20 * time.Second},
			// Chrome may have committed the image's document before the
			// failure (its title is then the image's), or not (none yet).
			class: ClassNotHTML, title: "", orTitle: "1.png (10×10)"},
		{name: "untitled", req: Request{URL: u("/page/35"), Wait: Wait{Selector: "#ready"}, Extract: `(document.title = '', null.x)`},
			class: ClassExtract, title: ""},
		{name: "navigated on", req: Request{URL: u("/js-redirect/36"), Wait: Wait{Selector: "#ready"}, Extract: `null.x`},
			class: ClassExtract, url: u("/page/36"), title: "Page 36"},
		{name: "renderer hangs", req: Request{URL: u("/hostile/loop"), Wait: Wait{Selector: "#before"}, Timeout: 2 * time.Second},
			class: ClassTimeout, title: "Loop", hi: 2*time.Second + slack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := e.session(t)
			res, err, took := render(t, s, tc.req)
			wantClass(t, err, tc.class, tc.class == ClassTimeout)
			if res == nil {
				t.Fatalf("no result with the %s error", tc.class)
			}
			want := tc.url
			if want == "" {
				want = tc.req.URL
			}
			if res.Status != 200 || res.FinalURL != want || res.Title != tc.title && (tc.orTitle == "" || res.Title != tc.orTitle) {
				t.Errorf("status %d, final URL %q, title %q; want 200, %q, %q", res.Status, res.FinalURL, res.Title, want, tc.title)
			}
			hi := tc.hi
			if hi == 0 {
				hi = 30 * time.Second
			}
			wantDuration(t, took, 0, hi)
			e.usable(t, s)
		})
	}
}
