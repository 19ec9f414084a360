package browser

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/jobspec"
)

// renderWithHeaders renders req with headers set on the prepared job, past
// the checks that would refuse some of them, within 20 s.
func renderWithHeaders(t *testing.T, s *Session, req Request, headers map[string]string) (*Result, error) {
	t.Helper()
	j, err := req.prepare()
	if err != nil {
		t.Fatal(err)
	}
	j.Headers = headers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return s.render(ctx, time.Now(), j)
}

// TestRefusedHeadersFailInChrome keeps jobspec's refused header names
// honest: Chrome fails a page's request that carries any of them with
// net::ERR_INVALID_ARGUMENT (sent past Check, which refuses them), and
// sends the names jobspec leaves alone that look as if it might not.
func TestRefusedHeadersFailInChrome(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	try := func(name, value string) error {
		_, err := renderWithHeaders(t, s, Request{URL: e.url("/echo"), Timeout: 10 * time.Second}, map[string]string{name: value})
		return err
	}
	refused := append(jobspec.RefusedHeaders(), "Proxy-Authorization", "Proxy-Connection", "proxy-x")
	for _, name := range refused {
		if jobspec.CheckHeaderName(name) == nil {
			t.Errorf("jobspec accepts %s", name)
		}
		value := "x"
		if name == "Content-Length" {
			value = "0"
		}
		if err := try(name, value); err == nil || !strings.Contains(err.Error(), "ERR_INVALID_ARGUMENT") {
			t.Errorf("header %s: render = %v, want net::ERR_INVALID_ARGUMENT (else it needs no refusing)", name, err)
		}
	}
	for _, name := range []string{"Proxy", "Sec-Fetch-Mode", "Sec-Foo", "Expect", "Date", "Via", "DNT", "Origin", "Referer",
		"Access-Control-Request-Method", "Access-Control-Request-Headers", "Cookie"} {
		if err := jobspec.CheckHeaderName(name); err != nil {
			t.Errorf("jobspec refuses %s: %v", name, err)
		}
		value := "x"
		if name == "Expect" {
			value = "100-continue" // the test site answers another with 417
		}
		if err := try(name, value); err != nil {
			t.Errorf("header %s: render = %v, want it rendered", name, err)
		}
	}
}

// TestDroppedHeaders keeps jobspec.CheckHeaderConflict honest: what it
// refuses at submit, Chrome drops, and a Cookie header alone, which it
// allows, reaches the server. The browser's own check lets the conflicts
// through, so that jobs queued before submit refused them still render.
func TestDroppedHeaders(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	echo := func(req Request, headers map[string]string) (h, cookies map[string]string) {
		t.Helper()
		res, err := renderWithHeaders(t, s, req, headers)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Headers map[string]string `json:"headers"`
			Cookies map[string]string `json:"cookies"`
		}
		unmarshal(t, res.Data, &d)
		return d.Headers, d.Cookies
	}
	const data = "JSON.parse(document.getElementById('data').textContent)"
	u := e.url("/echo")
	if jobspec.CheckHeaderConflict("User-Agent", false, false) == nil {
		t.Error("jobspec allows a User-Agent header")
	}
	if h, _ := echo(Request{URL: u, Extract: data}, map[string]string{"User-Agent": "Header/1"}); h["user-agent"] == "Header/1" {
		t.Error("Chrome sends a User-Agent header: it needs no refusing")
	}
	if h, _ := echo(Request{URL: u, Extract: data, UserAgent: "Field/1"}, map[string]string{"user-agent": "Header/1"}); h["user-agent"] != "Field/1" {
		t.Errorf("with user_agent and a header, the server got %q, want the field's", h["user-agent"])
	}
	if jobspec.CheckHeaderConflict("cookie", true, false) == nil {
		t.Error("jobspec allows a Cookie header beside cookies")
	}
	host := strings.TrimPrefix(strings.Split(e.site.URL, ":")[1], "//")
	if _, c := echo(Request{URL: u, Extract: data, Cookies: []Cookie{{Name: "f", Value: "1", Domain: host}}}, map[string]string{"Cookie": "h=2"}); c["h"] == "2" {
		t.Errorf("with cookies and a Cookie header, the server got %v: the header reaches it, it needs no refusing", c)
	}
	if err := jobspec.CheckHeaderConflict("Cookie", false, false); err != nil {
		t.Errorf("jobspec refuses a Cookie header alone: %v", err)
	}
	if _, c := echo(Request{URL: u, Extract: data}, map[string]string{"Cookie": "h=2"}); c["h"] != "2" {
		t.Errorf("a Cookie header alone: the server got %v, want h=2", c)
	}
}

// TestDefaultLanguages: every tab says it reads the languages full Chrome
// does, on either browser — the headless shell on its own sends no
// Accept-Language and lists one language, a mark of a headless browser —
// also on the session's next job after one with its own Accept-Language
// header (sent as given) or user agent.
func TestDefaultLanguages(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	const header = "JSON.parse(document.getElementById('data').textContent).headers['accept-language'] ?? null"
	const probe = "[navigator.languages, " + header + "]"
	langs := func(req Request, headers map[string]string) string {
		t.Helper()
		req.URL = e.url("/echo")
		if req.Extract == "" {
			req.Extract = probe
		}
		res, err := renderWithHeaders(t, s, req, headers)
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Data)
	}
	const chrome = `[["en-US","en"],"en-US,en;q=0.9"]`
	for _, tc := range []struct {
		name    string
		req     Request
		headers map[string]string
		want    string
	}{
		{"default", Request{}, nil, chrome},
		{"a job's header", Request{}, map[string]string{"accept-language": "fr-CH,fr;q=0.5"}, `[["fr-CH","fr"],"fr-CH,fr;q=0.9"]`},
		{"a job's weights out of order", Request{}, map[string]string{"Accept-Language": "de;q=0.2, it-IT , *;q=0.1"}, `[["it-IT","de"],"it-IT,de;q=0.9"]`},
		// navigator.languages is then the browser's own, which differ.
		{"a job's header naming no language", Request{Extract: header}, map[string]string{"Accept-Language": "*"}, `"*"`},
		{"the next job", Request{}, nil, chrome},
		{"a job's user agent", Request{UserAgent: "Field/1"}, nil, chrome},
		{"the job after it", Request{}, nil, chrome},
	} {
		if got := langs(tc.req, tc.headers); got != tc.want {
			t.Errorf("%s: navigator.languages and the header = %s, want %s", tc.name, got, tc.want)
		}
	}
}
