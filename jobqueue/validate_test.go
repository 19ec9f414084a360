package jobqueue

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestSpecValidate(t *testing.T) {
	ok := func(mod func(*Spec)) Spec {
		s := Spec{URL: "https://example.com/a"}
		mod(&s)
		return s
	}
	headers := func(n int) map[string]string {
		h := map[string]string{}
		for i := range n {
			h[fmt.Sprintf("X-H%d", i)] = "v"
		}
		return h
	}
	tests := []struct {
		name  string
		spec  Spec
		field string // "" means valid
		msg   string // substring of the message
	}{
		{"minimal", ok(func(*Spec) {}), "", ""},
		{"http with port and query", ok(func(s *Spec) { s.URL = "http://127.0.0.1:8080/x?y=1#z" }), "", ""},
		{"upper-case scheme", ok(func(s *Spec) { s.URL = "HTTPS://Example.COM/" }), "", ""},
		{"ipv6 host", ok(func(s *Spec) { s.URL = "http://[::1]:9000/" }), "", ""},
		// A zone: Chrome's "Cannot navigate to invalid URL", at every attempt.
		{"ipv6 host with a zone", ok(func(s *Spec) { s.URL = "http://[::1%25lo]:18002/" }), "url", "IPv6 address ::1 has a zone (%lo, %25lo in a URL), which browsers refuse"},
		{"link-local ipv6 host with a zone", ok(func(s *Spec) { s.URL = "http://[fe80::1%25eth0]/" }), "url", "has a zone"},
		{"everything", ok(func(s *Spec) {
			s.Wait = &Wait{Selector: "#app", NetworkIdle: true}
			s.Actions = []Action{{Type: "click", Selector: "button.more", Times: 3, Ms: 200},
				{Type: "scroll", Times: 5}, {Type: "type", Selector: "input", Text: "shoes"},
				{Type: "wait", Ms: 500}, {Type: "wait", Selector: ".item"}}
			s.Extract = "[...document.querySelectorAll('.item')].map(e => e.textContent)"
			s.HTML, s.Screenshot = true, true
			s.TimeoutMS = 60_000
			s.Block = []string{"image", "font", "media", "stylesheet"}
			s.Headers = map[string]string{"Accept-Language": "en"}
			s.UserAgent = "bot/1.0"
			s.Viewport = &Viewport{Width: 390, Height: 844, Mobile: true}
			s.Cookies = []Cookie{{Name: "session", Value: "abc", Domain: "example.com", Path: "/"}}
			// Not socks5 with a password: Chrome cannot authenticate to SOCKS.
			s.Proxy = "http://user:pw@proxy.local:3128"
			s.Priority = -1000
			s.MaxAttempts = 20
			s.Follow = &Follow{Selector: "a.next", MaxDepth: 10, MaxLinks: 1000, AnyHost: true}
		}), "", ""},

		{"no url", ok(func(s *Spec) { s.URL = "" }), "url", "is required"},
		{"file scheme", ok(func(s *Spec) { s.URL = "file:///etc/passwd" }), "url", `scheme "file" is not allowed (use http or https)`},
		{"chrome scheme", ok(func(s *Spec) { s.URL = "chrome://settings" }), "url", `scheme "chrome" is not allowed`},
		{"javascript scheme", ok(func(s *Spec) { s.URL = "javascript:alert(1)" }), "url", `scheme "javascript" is not allowed`},
		{"data scheme", ok(func(s *Spec) { s.URL = "data:text/html,<h1>x</h1>" }), "url", `scheme "data" is not allowed`},
		{"about scheme", ok(func(s *Spec) { s.URL = "about:blank" }), "url", `scheme "about" is not allowed`},
		{"ftp scheme", ok(func(s *Spec) { s.URL = "ftp://example.com/" }), "url", `scheme "ftp" is not allowed`},
		{"relative", ok(func(s *Spec) { s.URL = "example.com/a" }), "url", "not an absolute URL"},
		{"malformed", ok(func(s *Spec) { s.URL = "http://exa mple.com/" }), "url", "whitespace"},
		{"bad escape", ok(func(s *Spec) { s.URL = "http://example.com/%zz" }), "url", "malformed URL"},
		{"bad host", ok(func(s *Spec) { s.URL = "http://[::1/" }), "url", "malformed URL"},
		{"missing host", ok(func(s *Spec) { s.URL = "http:///path" }), "url", "missing host"},
		{"opaque http", ok(func(s *Spec) { s.URL = "http:example.com" }), "url", "missing host"},
		{"forbidden host character <", ok(func(s *Spec) { s.URL = "http://a<b.example/" }), "url", "a character a URL's host may not have"},
		{"forbidden host character >", ok(func(s *Spec) { s.URL = "http://a>b.example/" }), "url", "a character a URL's host may not have"},
		{"port out of range", ok(func(s *Spec) { s.URL = "http://example.com:99999/" }), "url", "bad port"},
		{"port zero however written", ok(func(s *Spec) { s.URL = "http://example.com:00/" }), "url", "bad port"},
		// A host whose last label is a number must be an IPv4 address, or
		// the browser refuses the URL.
		{"numeric last label", ok(func(s *Spec) { s.URL = "http://example.123/" }), "url", "not an IPv4 address"},
		{"IPv4 out of range", ok(func(s *Spec) { s.URL = "http://256.1.1.1/" }), "url", "not an IPv4 address"},
		{"five IPv4 parts", ok(func(s *Spec) { s.URL = "http://1.2.3.4.5/" }), "url", "not an IPv4 address"},
		{"not octal", ok(func(s *Spec) { s.URL = "http://08/" }), "url", "not an IPv4 address"},
		// Chrome answers net::ERR_UNSAFE_PORT for these.
		{"unsafe port 6000", ok(func(s *Spec) { s.URL = "http://example.com:6000/" }), "url", "browsers refuse"},
		{"unsafe port 10080", ok(func(s *Spec) { s.URL = "https://example.com:10080/" }), "url", "browsers refuse"},
		{"control char", ok(func(s *Spec) { s.URL = "http://example.com/\x01" }), "url", "control character"},
		{"url too long", ok(func(s *Spec) { s.URL = "http://example.com/" + strings.Repeat("a", MaxURLLength) }), "url", "at most 4096"},

		{"timeout too small", ok(func(s *Spec) { s.TimeoutMS = 999 }), "timeout_ms", "out of range"},
		{"timeout too large", ok(func(s *Spec) { s.TimeoutMS = MaxTimeoutMS + 1 }), "timeout_ms", "out of range"},
		{"timeout negative", ok(func(s *Spec) { s.TimeoutMS = -1 }), "timeout_ms", "out of range"},
		{"max_attempts 21", ok(func(s *Spec) { s.MaxAttempts = 21 }), "max_attempts", "21 is out of range: use 1..20"},
		{"max_attempts negative", ok(func(s *Spec) { s.MaxAttempts = -1 }), "max_attempts", "out of range"},
		{"priority high", ok(func(s *Spec) { s.Priority = 1001 }), "priority", "out of range"},
		{"priority low", ok(func(s *Spec) { s.Priority = -1001 }), "priority", "out of range"},
		{"block unknown", ok(func(s *Spec) { s.Block = []string{"image", "script"} }), "block[1]", `unknown resource type "script"`},
		{"wait selector too long", ok(func(s *Spec) { s.Wait = &Wait{Selector: strings.Repeat("a", MaxSelectorLength+1)} }), "wait.selector", "at most"},
		{"extract too long", ok(func(s *Spec) { s.Extract = strings.Repeat("x", MaxExtractLength+1) }), "extract", "at most"},
		{"extract bad utf8", ok(func(s *Spec) { s.Extract = "\xff" }), "extract", "UTF-8"},
		{"too many actions", ok(func(s *Spec) { s.Actions = make([]Action, MaxActions+1) }), "actions", "at most 50"},
		{"action no type", ok(func(s *Spec) { s.Actions = []Action{{Selector: "a"}} }), "actions[0].type", "is required"},
		{"action bad type", ok(func(s *Spec) { s.Actions = []Action{{Type: "hover", Selector: "a"}} }), "actions[0].type", `unknown action "hover"`},
		{"click no selector", ok(func(s *Spec) { s.Actions = []Action{{Type: "scroll"}, {Type: "click"}} }), "actions[1].selector", "required for click"},
		{"type no text", ok(func(s *Spec) { s.Actions = []Action{{Type: "type", Selector: "input"}} }), "actions[0].text", "required for type"},
		{"type no selector", ok(func(s *Spec) { s.Actions = []Action{{Type: "type", Text: "x"}} }), "actions[0].selector", "required for type"},
		{"text on click", ok(func(s *Spec) { s.Actions = []Action{{Type: "click", Selector: "a", Text: "x"}} }), "actions[0].text", "only type takes text"},
		{"wait nothing", ok(func(s *Spec) { s.Actions = []Action{{Type: "wait"}} }), "actions[0]", "needs a selector or ms"},
		{"times too many", ok(func(s *Spec) { s.Actions = []Action{{Type: "scroll", Times: 101}} }), "actions[0].times", "out of range"},
		{"ms too long", ok(func(s *Spec) { s.Actions = []Action{{Type: "wait", Ms: MaxActionMS + 1}} }), "actions[0].ms", "out of range"},
		{"too many headers", ok(func(s *Spec) { s.Headers = headers(MaxHeaders + 1) }), "headers", "at most 50"},
		{"bad header name", ok(func(s *Spec) { s.Headers = map[string]string{"Bad Name": "v"} }), `headers["Bad Name"]`, "not a valid header name"},
		{"header twice in two cases", ok(func(s *Spec) { s.Headers = map[string]string{"X-A": "1", "x-a": "2"} }), `headers["x-a"]`, `names the same header as "X-A"`},
		{"header newline", ok(func(s *Spec) { s.Headers = map[string]string{"X-A": "v\r\nX-B: w"} }), `headers["X-A"]`, "line break"},
		{"headers too big", ok(func(s *Spec) { s.Headers = map[string]string{"X-A": strings.Repeat("v", MaxHeaderBytes)} }), "headers", "bytes of headers"},
		{"user agent too long", ok(func(s *Spec) { s.UserAgent = strings.Repeat("u", MaxUserAgent+1) }), "user_agent", "at most"},
		{"viewport narrow", ok(func(s *Spec) { s.Viewport = &Viewport{Width: 99, Height: 800} }), "viewport.width", "out of range"},
		{"viewport tall", ok(func(s *Spec) { s.Viewport = &Viewport{Width: 800, Height: MaxViewportHeight + 1} }), "viewport.height", "out of range"},
		{"screenshot of 8K", ok(func(s *Spec) { s.Screenshot, s.Viewport = true, &Viewport{Width: 7680, Height: 4320} }), "viewport", "with a screenshot at most 8294400"},
		{"screenshot of 1080p", ok(func(s *Spec) { s.Screenshot, s.Viewport = true, &Viewport{Width: 1920, Height: 1080} }), "", ""},
		{"screenshot of 4K", ok(func(s *Spec) { s.Screenshot, s.Viewport = true, &Viewport{Width: 3840, Height: 2160} }), "", ""},
		{"screenshot over 4K", ok(func(s *Spec) { s.Screenshot, s.Viewport = true, &Viewport{Width: 3841, Height: 2160} }), "viewport", "with a screenshot at most 8294400"},
		{"8K without a screenshot", ok(func(s *Spec) { s.Viewport = &Viewport{Width: 7680, Height: 4320} }), "", ""},
		{"too many cookies", ok(func(s *Spec) { s.Cookies = make([]Cookie, MaxCookies+1) }), "cookies", "at most 50"},
		{"cookie no name", ok(func(s *Spec) { s.Cookies = []Cookie{{Value: "v"}} }), "cookies[0].name", "is required"},
		{"cookie bad value", ok(func(s *Spec) { s.Cookies = []Cookie{{Name: "a", Value: "x;y"}} }), "cookies[0].value", "';'"},
		{"cookie bad path", ok(func(s *Spec) { s.Cookies = []Cookie{{Name: "a", Path: "x"}} }), "cookies[0].path", "start with /"},
		{"cookie value with a tab", ok(func(s *Spec) { s.Cookies = []Cookie{{Name: "a", Value: "x\ty"}} }), "cookies[0].value", "tab"},
		// Chrome's Network.setCookies: "Invalid cookie fields".
		{"cookie value with a leading space", ok(func(s *Spec) { s.Cookies = []Cookie{{Name: "a", Value: " x"}} }), "cookies[0].value", "space"},
		{"cookie value with a trailing space", ok(func(s *Spec) { s.Cookies = []Cookie{{Name: "a", Value: "x "}} }), "cookies[0].value", "space"},
		{"cookie name and value too long", ok(func(s *Spec) { s.Cookies = []Cookie{{Name: "n", Value: strings.Repeat("v", MaxCookieValue)}} }), "cookies[0]", "together"},
		{"cookie name and value at the limit", ok(func(s *Spec) { s.Cookies = []Cookie{{Name: "n", Value: strings.Repeat("v", MaxCookieValue-1)}} }), "", ""},
		{"__Secure- cookie not secure", ok(func(s *Spec) { s.Cookies = []Cookie{{Name: "__Secure-a", Value: "v"}} }), "cookies[0].secure", "must be secure"},
		{"__Host- cookie with a domain", ok(func(s *Spec) {
			s.Cookies = []Cookie{{Name: "__Host-a", Value: "v", Secure: true, Domain: "example.com", Path: "/"}}
		}), "cookies[0]", "__Host-"},
		{"__Host- cookie on a deep URL without a path", ok(func(s *Spec) {
			s.URL = "https://example.com/a/b"
			s.Cookies = []Cookie{{Name: "__Host-a", Value: "v", Secure: true}}
		}), "cookies[0]", "__Host-"},
		{"__Host- cookie", ok(func(s *Spec) { s.Cookies = []Cookie{{Name: "__Host-a", Value: "v", Secure: true, Path: "/"}} }), "", ""},
		{"NUL in extract", ok(func(s *Spec) { s.Extract = "'a\x00b'" }), "extract", "NUL"},
		{"NUL in typed text", ok(func(s *Spec) {
			s.Actions = []Action{{Type: "type", Selector: "#q", Text: "a\x00"}}
		}), "actions[0].text", "NUL"},
		{"proxy scheme", ok(func(s *Spec) { s.Proxy = "ftp://proxy:21" }), "proxy", `proxy scheme "ftp" is not allowed (use http, https or socks5)`},
		{"proxy no scheme", ok(func(s *Spec) { s.Proxy = "proxy.local:3128" }), "proxy", "scheme"},
		{"proxy no host", ok(func(s *Spec) { s.Proxy = "http://:3128" }), "proxy", "no host"},
		{"proxy without port", ok(func(s *Spec) { s.Proxy = "http://proxy.example" }), "proxy", "needs a port"},
		{"socks5 proxy with credentials", ok(func(s *Spec) { s.Proxy = "socks5://u:p@h:1080" }), "proxy", "cannot authenticate to a SOCKS proxy"},
		{"proxy with a path", ok(func(s *Spec) { s.Proxy = "http://h:3128/x" }), "proxy", "without a path"},
		{"proxy host a list", ok(func(s *Spec) { s.Proxy = "http://a.example,169.254.169.254:80" }), "proxy", "not an IP address or a host name"},
		{"socks5 proxy", ok(func(s *Spec) { s.Proxy = "socks5://h:1080" }), "", ""},
		{"ipv6 proxy", ok(func(s *Spec) { s.Proxy = "http://[2001:db8::1]:3128" }), "", ""},
		{"ipv6 proxy with a zone", ok(func(s *Spec) { s.Proxy = "http://[::1%25lo]:3128" }), "proxy", "IPv6 address ::1 has a zone"},
		// The node resolves a proxy's host itself: these were names to it,
		// "lookup …: no such host" at every attempt.
		{"decimal ipv4 proxy", ok(func(s *Spec) { s.Proxy = "http://2130706433:18002" }), "proxy", `proxy host "2130706433": write the IPv4 address as 127.0.0.1 (four decimal numbers, no trailing dot)`},
		{"ipv4 proxy with a trailing dot", ok(func(s *Spec) { s.Proxy = "http://127.0.0.1.:18002" }), "proxy", "write the IPv4 address as 127.0.0.1"},
		{"short ipv4 proxy", ok(func(s *Spec) { s.Proxy = "http://127.1:3128" }), "proxy", "write the IPv4 address as 127.0.0.1"},
		{"hex ipv4 proxy", ok(func(s *Spec) { s.Proxy = "http://0x7f.0.0.1:3128" }), "proxy", "write the IPv4 address as 127.0.0.1"},
		{"octal ipv4 proxy", ok(func(s *Spec) { s.Proxy = "http://127.000.0.01:3128" }), "proxy", "write the IPv4 address as 127.0.0.1"},
		{"proxy host ending in a number", ok(func(s *Spec) { s.Proxy = "http://proxy.123:3128" }), "proxy", "its last label is a number, but it is not an IPv4 address"},
		{"ipv4 proxy out of range", ok(func(s *Spec) { s.Proxy = "http://127.0.0.256:3128" }), "proxy", "not an IPv4 address"},
		{"ipv4 proxy", ok(func(s *Spec) { s.Proxy = "http://127.0.0.1:3128" }), "", ""},
		{"proxy name with a trailing dot", ok(func(s *Spec) { s.Proxy = "http://proxy.example.:3128" }), "", ""},
		{"proxy name with a digit", ok(func(s *Spec) { s.Proxy = "http://1a.example:3128" }), "", ""},
		{"proxy shared context", ok(func(s *Spec) { s.Proxy = "http://p:1"; s.SharedContext = true }), "proxy", "own browser context"},
		{"proxy isolation shared", ok(func(s *Spec) { s.Proxy = "http://p:1"; s.Isolation = IsolationShared }), "proxy", "own browser context"},
		{"isolation wipe", ok(func(s *Spec) { s.Isolation = IsolationWipe }), "", ""},
		{"isolation context with proxy", ok(func(s *Spec) { s.Isolation = IsolationContext; s.Proxy = "http://p:1" }), "", ""},
		{"isolation shared", ok(func(s *Spec) { s.Isolation = IsolationShared }), "", ""},
		{"unknown isolation", ok(func(s *Spec) { s.Isolation = "fresh" }), "isolation", `unknown value "fresh"`},
		{"isolation contradicts shared_context", ok(func(s *Spec) { s.Isolation = IsolationContext; s.SharedContext = true }), "isolation", "contradicts shared_context"},
		{"cache job", ok(func(s *Spec) { s.Cache = CacheJob }), "", ""},
		{"cache batch", ok(func(s *Spec) { s.Cache = CacheBatch }), "", ""},
		{"cache batch, isolation wipe", ok(func(s *Spec) { s.Cache = CacheBatch; s.Isolation = IsolationWipe }), "", ""},
		{"unknown cache", ok(func(s *Spec) { s.Cache = "crawl" }), "cache", `unknown value "crawl"`},
		{"cache batch, isolation context", ok(func(s *Spec) { s.Cache = CacheBatch; s.Isolation = IsolationContext }), "cache", `isolation "context" has none`},
		{"cache batch, shared_context", ok(func(s *Spec) { s.Cache = CacheBatch; s.SharedContext = true }), "cache", `shared_context (isolation "shared") has none to keep: drop one`},
		{"cache batch with a proxy", ok(func(s *Spec) { s.Cache = CacheBatch; s.Proxy = "http://p:1" }), "cache", "brand-new browser context"},
		{"follow no selector", ok(func(s *Spec) { s.Follow = &Follow{MaxDepth: 1} }), "follow.selector", "is required"},
		{"follow depth 0: the default", ok(func(s *Spec) { s.Follow = &Follow{Selector: "a", MaxDepth: 0} }), "", ""},
		{"follow depth negative", ok(func(s *Spec) { s.Follow = &Follow{Selector: "a", MaxDepth: -1} }), "follow.max_depth", "-1 is out of range: use 1..10 links deep, or 0 for the default (1)"},
		{"follow depth 11", ok(func(s *Spec) { s.Follow = &Follow{Selector: "a", MaxDepth: 11} }), "follow.max_depth", "out of range"},
		{"follow links", ok(func(s *Spec) { s.Follow = &Follow{Selector: "a", MaxDepth: 1, MaxLinks: MaxFollowLinks + 1} }), "follow.max_links", "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("Validate() = %v, want a *SpecError for field %q", err, tt.field)
			}
			if se.Field != tt.field || se.Index != -1 {
				t.Errorf("field %q index %d, want field %q index -1 (%v)", se.Field, se.Index, tt.field, err)
			}
			if !strings.Contains(se.Msg, tt.msg) {
				t.Errorf("message %q does not contain %q", se.Msg, tt.msg)
			}
			want := fmt.Sprintf("field %q: %s", tt.field, se.Msg)
			if err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
		})
	}
}

func TestSpecErrorMessage(t *testing.T) {
	e := &SpecError{Index: 3, Field: "url", Msg: `scheme "file" is not allowed (use http or https)`}
	if got, want := e.Error(), `job 3: field "url": scheme "file" is not allowed (use http or https)`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestPrepareSizeAndDefaults(t *testing.T) {
	// Every field within its own bound, the whole over 64 KiB.
	big := Spec{URL: "https://example.com/", Extract: strings.Repeat("x", MaxExtractLength)}
	for range MaxActions {
		big.Actions = append(big.Actions, Action{Type: "type", Selector: strings.Repeat("s", 1000), Text: "t"})
	}
	if err := big.Validate(); err != nil {
		t.Fatalf("each field is in bounds, Validate() = %v", err)
	}
	_, err := prepare(7, big)
	var se *SpecError
	if !errors.As(err, &se) || se.Index != 7 || se.Field != "(spec)" || !strings.Contains(se.Msg, "at most 65536") {
		t.Fatalf("prepare(oversized) = %v", err)
	}

	p, err := prepare(0, Spec{URL: "HTTP://Example.COM:80/a#frag", Follow: &Follow{Selector: "a", MaxDepth: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if p.host != "example.com" || p.attempts != DefaultAttempts || p.dedupKey == nil || *p.dedupKey != "http://example.com/a" {
		t.Fatalf("prepared = host %q attempts %d dedup %v", p.host, p.attempts, p.dedupKey)
	}
	for _, want := range []string{`"timeout_ms":30000`, `"max_attempts":3`, `"max_links":100`} {
		if !strings.Contains(string(p.json), want) {
			t.Errorf("stored spec %s lacks %s", p.json, want)
		}
	}
}

// A follow without max_depth follows the seed's links (DefaultFollowDepth,
// --follow-depth's default too), stored as such; it was refused as
// "follow.max_depth: 0 is out of range 1..10", a 0 the user never wrote.
func TestFollowMaxDepthDefault(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want int
	}{
		{`{"url":"http://x.example/","follow":{"selector":"a"}}`, DefaultFollowDepth},
		{`{"url":"http://x.example/","follow":{"selector":"a","max_depth":0}}`, DefaultFollowDepth},
		{`{"url":"http://x.example/","follow":{"selector":"a","max_links":5}}`, DefaultFollowDepth},
		{`{"url":"http://x.example/","follow":{"selector":"a","max_depth":3}}`, 3},
	} {
		s, err := DecodeSpec([]byte(tc.spec))
		if err != nil {
			t.Fatalf("DecodeSpec(%s) = %v", tc.spec, err)
		}
		p, err := prepare(0, s)
		if err != nil {
			t.Errorf("%s: %v, want it taken with max_depth %d", tc.spec, err, tc.want)
			continue
		}
		var stored Spec
		if err := json.Unmarshal(p.json, &stored); err != nil || stored.Follow == nil || stored.Follow.MaxDepth != tc.want {
			t.Errorf("%s: stored as %s (%v), want max_depth %d", tc.spec, p.json, err, tc.want)
		}
	}
	if DefaultFollowDepth != 1 {
		t.Errorf("DefaultFollowDepth = %d; README says 1", DefaultFollowDepth)
	}
}

func TestHostAndDedupKey(t *testing.T) {
	tests := []struct{ in, host, key string }{
		{"http://Example.com", "example.com", "http://example.com/"},
		{"https://example.com:443/a/b?x=1&y=2#top", "example.com", "https://example.com/a/b?x=1&y=2"},
		{"http://example.com:8080/", "example.com:8080", "http://example.com:8080/"},
		{"https://example.com:80/", "example.com:80", "https://example.com:80/"},
		{"http://127.0.0.1:9999/p", "127.0.0.1:9999", "http://127.0.0.1:9999/p"},
		{"http://[::1]:80/", "[::1]", "http://[::1]/"},
		{"http://[::1]:81/", "[::1]:81", "http://[::1]:81/"},
		{"http://example.com/a%20b", "example.com", "http://example.com/a%20b"},
		// One server, one key: the root's trailing dot and a Unicode name
		// (IDNA) are the forms Chrome hands back links in.
		{"http://shop.example.com./b", "shop.example.com", "http://shop.example.com/b"},
		{"http://SHOP.example.com.:8080/", "shop.example.com:8080", "http://shop.example.com:8080/"},
		{"http://bücher.test/", "xn--bcher-kva.test", "http://xn--bcher-kva.test/"},
		{"https://BÜCHER.test:8443/a", "xn--bcher-kva.test:8443", "https://xn--bcher-kva.test:8443/a"},
		{"http://XN--BCHER-KVA.test./", "xn--bcher-kva.test", "http://xn--bcher-kva.test/"},
		{"http://b%C3%BCcher.test/", "xn--bcher-kva.test", "http://xn--bcher-kva.test/"},
		{"http://under_score.example/", "under_score.example", "http://under_score.example/"},
		{"http://127.0.0.1./", "127.0.0.1", "http://127.0.0.1/"},
		// What a browser reads as one server is one key: a port with
		// leading zeros, a full stop of another script ending the name,
		// an IPv4 address in its short, decimal, hex or octal forms, an
		// IPv6 address in any of its spellings.
		{"http://shop.test:080/", "shop.test", "http://shop.test/"},
		{"http://shop.test:08080/", "shop.test:8080", "http://shop.test:8080/"},
		{"http://shop.test。/", "shop.test", "http://shop.test/"},
		{"http://shop．test｡/", "shop.test", "http://shop.test/"},
		{"http://2130706433/", "127.0.0.1", "http://127.0.0.1/"},
		{"http://0x7f.1/", "127.0.0.1", "http://127.0.0.1/"},
		{"http://127.1/", "127.0.0.1", "http://127.0.0.1/"},
		{"http://0177.0.0.01:8080/", "127.0.0.1:8080", "http://127.0.0.1:8080/"},
		{"http://0x7F000001./", "127.0.0.1", "http://127.0.0.1/"},
		{"http://[0::1]/", "[::1]", "http://[::1]/"},
		{"http://[0:0:0:0:0:0:0:1]:81/", "[::1]:81", "http://[::1]:81/"},
		{"http://[2001:DB8::1]/", "[2001:db8::1]", "http://[2001:db8::1]/"},
		// Not numbers: names.
		{"http://0x.example/", "0x.example", "http://0x.example/"},
		{"http://1a.example/", "1a.example", "http://1a.example/"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := HostKey(u); got != tt.host {
			t.Errorf("HostKey(%s) = %q, want %q", tt.in, got, tt.host)
		}
		if got := DedupKey(u); got != tt.key {
			t.Errorf("DedupKey(%s) = %q, want %q", tt.in, got, tt.key)
		}
	}
}

func TestValidateNodeID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"n1", true},
		{"ip-10-0-1-23.ec2.internal", true},
		{"host:4", true},
		{strings.Repeat("a", 46), true},
		{strings.Repeat("a", 47), false},
		{"", false},
		{"-lead", false},
		{"has space", false},
		{"quote\"", false},
		{"ünï", false},
	}
	for _, tt := range tests {
		err := ValidateNodeID(tt.id)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateNodeID(%q) = %v, want ok=%v", tt.id, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrBadNodeID) {
			t.Errorf("error %v is not ErrBadNodeID", err)
		}
		if tt.ok && len(NodeChannel(tt.id)) > 63 {
			t.Errorf("channel for %q exceeds 63 bytes", tt.id)
		}
	}
}

func TestCleanText(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"plain", 0, "plain"},
		{"nul\x00byte", 0, "nulbyte"},
		{"bad\xffutf8", 0, "bad\uFFFDutf8"},
		{"héllo", 2, "h"}, // does not cut inside é
		{"héllo", 3, "hé"},
		{"abc", 3, "abc"},
	}
	for _, tt := range tests {
		if got := cleanText(tt.in, tt.max); got != tt.want {
			t.Errorf("cleanText(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

func TestJSONBSafe(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"a":"b"}`, `{"a":"b"}`},
		{`"x\u0000y"`, `"x\ufffdy"`},
		{`"x\\u0000y"`, `"x\\u0000y"`}, // an escaped backslash, then literal text
		{`["\\\u0000"]`, `["\\\ufffd"]`},
		// Surrogates: a lone half (JSON.stringify's escape for half an
		// emoji) is refused by jsonb; a pair is a character.
		{`"\ud83d"`, `"\ufffd"`},
		{`"\uD83D x"`, `"\ufffd x"`},
		{`"\ude00"`, `"\ufffd"`},
		{`"\ud83d\ude00"`, `"\ud83d\ude00"`},
		{`"\ud83d\u0041"`, `"\ufffd\u0041"`},
		{`"\ud83d\ud83d\ude00"`, `"\ufffd\ud83d\ude00"`},
		{`{"\udc00":1}`, `{"\ufffd":1}`},
		{`"\\ud83d"`, `"\\ud83d"`}, // literal text after an escaped backslash
		{`"\ud83d`, `"\ufffd`},     // cut short: still no lone half
		{`"\u00e9\ud"`, `"\u00e9\ud"`},
	}
	for _, tt := range tests {
		if got := string(jsonbSafe([]byte(tt.in))); got != tt.want {
			t.Errorf("jsonbSafe(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
