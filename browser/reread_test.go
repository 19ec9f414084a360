package browser

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestReadOneDocument: a page that goes on to another document just after
// its load (a meta refresh, a script) is read whole from one document: the
// extract's own URL and title are the result's, and its HTML is that
// document's. Before, the extract could run on the first page, or on the
// new one before it parsed, while the URL, title and HTML were the new
// page's (QA: 4 of 6 meta refreshes).
func TestReadOneDocument(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	to := e.url("/page/3")
	for _, by := range []string{"meta", "script"} {
		for i := range 8 {
			res, err, _ := render(t, s, Request{
				URL:     e.url("/egress/navigate?by=" + by + "&to=" + url.QueryEscape(to) + "&i=" + string(rune('a'+i))),
				HTML:    true,
				Extract: `({u: location.href, t: document.title, parsed: document.readyState !== 'loading' && !!document.body})`,
			})
			if err != nil {
				t.Fatalf("%s %d: %v", by, i, err)
			}
			var d struct {
				U, T   string
				Parsed bool
			}
			if err := json.Unmarshal(res.Data, &d); err != nil {
				t.Fatal(err)
			}
			if d.U != res.FinalURL || d.T != res.Title || !d.Parsed || !strings.Contains(res.HTML, "<title>"+res.Title+"</title>") {
				t.Errorf("%s %d: the extract read %s (%q, parsed %v); the result says %s (%q), its HTML %.80q",
					by, i, d.U, d.T, d.Parsed, res.FinalURL, res.Title, res.HTML)
			}
		}
	}
	e.usable(t, s)
}

// TestReadWhereThePageWent: a page that goes on, as it loads, to a
// document that is no page — Chrome's error page for an address that
// refuses connections, or an HTTP error — fails its job as that document
// would have, with its status. Before, the job completed as Chrome's error
// page, or with the error status and no error.
func TestReadWhereThePageWent(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	dead := closedAddr(t)
	for _, tc := range []struct {
		to, class, says string
		retriable       bool
		status          int
	}{
		{"http://" + dead + "/", ClassNetwork, "ERR_CONNECTION_REFUSED", true, 0},
		{e.url("/status/404"), ClassHTTP, "HTTP 404", false, 404},
		{e.url("/status/503"), ClassHTTP, "HTTP 503", true, 503},
	} {
		res, err, _ := render(t, s, Request{URL: e.url("/egress/navigate?to=" + url.QueryEscape(tc.to))})
		wantClass(t, err, tc.class, tc.retriable)
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("going to %s: %v; want it to say %q", tc.to, err, tc.says)
		}
		if status := 0; res != nil && res.Status != tc.status || res == nil && tc.status != 0 {
			if res != nil {
				status = res.Status
			}
			t.Errorf("going to %s: status %d, want %d", tc.to, status, tc.status)
		}
	}
	e.usable(t, s)
}

// TestWaitEndsWhereThePageWent: a job that waits for a selector, or for
// an action's element, on a page that goes on to a document that is no
// page (Chrome's error page) fails as that document would have as soon as
// it commits. Before, the job waited for the selector to its timeout: a
// session's whole timeout spent on a page that could not be reached, and
// the failure reported (and retried) as a timeout. A page that goes on
// through an HTTP error to a page (a soft 404's script) is waited for
// there: an error answer does not end the wait (a review's finding
// against a first version, which ended it and failed the job as a 404).
func TestWaitEndsWhereThePageWent(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	dead := closedAddr(t)
	goes := e.url("/egress/navigate?to=" + url.QueryEscape("http://"+dead+"/"))
	for _, req := range []Request{
		{URL: goes, Wait: Wait{Selector: "#ready"}},
		{URL: goes, Actions: []Action{{Type: ActionClick, Selector: "#ready"}}},
	} {
		// The timeout is far beyond what the failure takes: a job that ran
		// it out would fail as a timeout, not as the page it went to.
		req.Timeout = time.Minute
		res, err, _ := render(t, s, req)
		wantClass(t, err, ClassNetwork, true)
		if !strings.Contains(err.Error(), "ERR_CONNECTION_REFUSED") {
			t.Errorf("%+v: %v; want it to name ERR_CONNECTION_REFUSED", req, err)
		}
		if res != nil {
			t.Errorf("%+v: status %d kept with the failure; the page it went to answered nothing", req, res.Status)
		}
	}
	// #ready comes 300 ms after the page's load: a wait that was skipped
	// reads the page without it.
	to := e.url("/page/3?delay=300")
	soft404 := e.url("/egress/navigate?status=404&to=" + url.QueryEscape(to))
	res, err, _ := render(t, s, Request{
		URL:     e.url("/egress/navigate?to=" + url.QueryEscape(soft404)),
		Wait:    Wait{Selector: "#ready"},
		Extract: `!!document.querySelector('#ready')`,
		Timeout: time.Minute,
	})
	if err != nil || res.Status != 200 || res.FinalURL != to || string(res.Data) != "true" {
		t.Errorf("through a soft 404 to %s: %v (%+v); want it read there, once #ready is", to, err, res)
	}
	e.usable(t, s)
}
