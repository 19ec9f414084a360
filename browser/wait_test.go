package browser

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// A wait selector waits for presence in the DOM unless Visible is set, and
// a wait that times out says which condition was unmet and what the page had.
func TestWaitPresentOrVisible(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	for _, tc := range []struct {
		name  string
		wait  Wait
		found string // "" means the render succeeds
	}{
		{"empty div is present", Wait{Selector: "#empty"}, ""},
		{"hidden element is present", Wait{Selector: "#hidden"}, ""},
		{"shown element is visible", Wait{Selector: "#shown", Visible: true}, ""},
		{"empty div is never visible", Wait{Selector: "#empty", Visible: true},
			`waiting for "#empty" to be visible: ` + "\x00" + `found: it is present but has zero size`},
		{"hidden element is never visible", Wait{Selector: "#hidden", Visible: true},
			`waiting for "#hidden" to be visible: ` + "\x00" + `found: it is present but hidden`},
		{"missing element", Wait{Selector: "#missing"},
			`waiting for "#missing" to be present in the DOM: ` + "\x00" + `found: no element matches it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Long enough for a loaded machine to reach the page; the
			// waits that cannot succeed run out of it.
			timeout := 30 * time.Second
			if tc.found != "" {
				timeout = 6 * time.Second
			}
			res, err, _ := render(t, s, Request{URL: e.url("/wait-targets"), Wait: tc.wait, Timeout: timeout,
				Extract: "document.title"})
			if tc.found == "" {
				if err != nil || string(res.Data) != `"Wait targets"` {
					t.Fatalf("render = %v, %v", res, err)
				}
				return
			}
			wantClass(t, err, ClassTimeout, true)
			// The message starts with the unmet condition and ends with
			// what was found; the timeout's own words are in between.
			head, tail, _ := strings.Cut(tc.found, "\x00")
			if msg := err.Error(); !strings.Contains(msg, head) || !strings.Contains(msg, tail) {
				t.Fatalf("error %q, want it to contain %q and %q", msg, head, tail)
			}
		})
	}
	e.usable(t, s)
}

// TestWaitOnAPageShownAsText: a page Chrome shows as text (plain text,
// JSON, CSS, JavaScript), in which no script runs, fails not_html once it
// has loaded without the awaited element, naming its type and the
// selector, rather than at the job's timeout; a selector that matches the
// DOM Chrome makes of it (pre, body) is waited on as on any page. An XML
// document (SVG, XHTML) runs its scripts and is waited on, and so is a text
// page whose Refresh header takes the tab to a page that has the element.
func TestWaitOnAPageShownAsText(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	typed := func(typ string) string { return e.url("/typed?type=" + url.QueryEscape(typ)) }
	for _, tc := range []struct {
		url   string
		wait  Wait
		says  string // "" means the render succeeds
		final string // the final URL wanted on success, when not url
	}{
		{url: typed("text/plain"), wait: Wait{Selector: "#ready"},
			says: `the page is text/plain, shown as text, not HTML: "#ready" is not present in the DOM once it loaded`},
		{url: typed("application/json"), wait: Wait{Selector: "#ready"},
			says: `the page is application/json, shown as text, not HTML: "#ready" is not present`},
		{url: typed("text/css"), wait: Wait{Selector: "#ready"}, says: `the page is text/css, shown as text`},
		{url: typed("text/javascript"), wait: Wait{Selector: "#ready"}, says: `the page is text/javascript, shown as text`},
		{url: typed("text/plain"), wait: Wait{Selector: "head", Visible: true},
			says: `"head" is not visible once it loaded, and no script runs in it to change that; found: it is present but hidden`},
		{url: typed("text/plain"), wait: Wait{Selector: "pre"}},
		{url: typed("application/json"), wait: Wait{Selector: "body", Visible: true}},
		{url: typed("application/x-javascript"), wait: Wait{Selector: "pre"}},
		{url: typed("image/svg+xml"), wait: Wait{Selector: "#ready"}},
		{url: typed("application/xhtml+xml"), wait: Wait{Selector: "#ready"}},
		{url: typed("text/xml"), wait: Wait{Selector: "#ready"}},
		{url: typed("text/plain") + "&refresh=" + url.QueryEscape("1; url=/page/1"), wait: Wait{Selector: "#ready"}, final: e.url("/page/1")},
	} {
		res, err, _ := render(t, s, Request{URL: tc.url, Wait: tc.wait, Timeout: 20 * time.Second})
		if tc.says == "" {
			want := tc.final
			if want == "" {
				want = tc.url
			}
			if err != nil || res.FinalURL != want {
				t.Errorf("%s, %+v: %v; want success at %s", tc.url, tc.wait, err, want)
			}
			continue
		}
		wantClass(t, err, ClassNotHTML, false)
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s, %+v: error %q; want it to say %q", tc.url, tc.wait, err, tc.says)
		}
		if res == nil || res.Status != 200 || res.FinalURL != tc.url {
			t.Errorf("%s, %+v: result %+v; want status 200 at the page's URL", tc.url, tc.wait, res)
		}
	}
	e.usable(t, s)
}

// TestActionAndExtractTimeoutsSayWhy: an action that waits out the job's
// timeout for its element (type, click, wait) names the selector and what
// the page had, as the job's own wait does — a click of several names the
// one that waited — and an extract whose promise never settles says so.
func TestActionAndExtractTimeoutsSayWhy(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	for _, tc := range []struct {
		req  Request
		says []string
	}{
		{Request{URL: e.url("/form"), Actions: []Action{{Type: ActionType, Selector: "#nothing", Text: "x"}}},
			[]string{`action 0 (type): waiting for "#nothing" to be visible: `, `; found: no element matches it`}},
		{Request{URL: e.url("/form"), Actions: []Action{{Type: ActionClick, Selector: "#go"}, {Type: ActionClick, Selector: "#once", Times: 3}}},
			[]string{`action 1 (click): click 2 of 3: waiting for "#once" to be visible: `, `; found: no element matches it`}},
		{Request{URL: e.url("/wait-targets"), Actions: []Action{{Type: ActionWait, Selector: "#hidden"}}},
			[]string{`action 0 (wait): waiting for "#hidden" to be visible: `, `; found: it is present but hidden`}},
		{Request{URL: e.url("/page/1"), Extract: `new Promise(() => {})`},
			[]string{`extract: its promise did not settle before the job's timeout`}},
		// A page whose renderer never yields is not looked at for longer
		// than describeWaitTimeout, and says so.
		{Request{URL: e.url("/hostile/loop"), Wait: Wait{Selector: "#ready"}},
			[]string{`waiting for "#ready" to be present in the DOM: `, `; found: nothing: the page did not answer a look at it within 2s (its renderer busy)`}},
	} {
		tc.req.Timeout = 3 * time.Second
		_, err, _ := render(t, s, tc.req)
		wantClass(t, err, ClassTimeout, true)
		for _, want := range tc.says {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q; want it to say %q", tc.req.URL, err, want)
			}
		}
	}
	e.usable(t, s)
}

// TestFailedWaitKeepsItsTime: a job whose selector never showed keeps, with
// its failure, how long it waited (QA: wait_ms 0 beside a total of 4 s).
func TestFailedWaitKeepsItsTime(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	res, err, _ := render(t, s, Request{URL: e.url("/page/1"), Wait: Wait{Selector: "#never"}, Timeout: 2 * time.Second})
	wantClass(t, err, ClassTimeout, true)
	if res == nil || res.Status != 200 {
		t.Fatalf("the failure kept %+v, want the page's answer", res)
	}
	if res.Timings.Wait < time.Second || res.Timings.Wait > res.Timings.Total {
		t.Errorf("timings %+v: want the wait's 2 s timeout in Wait", res.Timings)
	}
}
