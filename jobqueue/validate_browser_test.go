package jobqueue

import (
	"errors"
	"strings"
	"testing"
)

// TestSpecValidateWhatTheBrowserCanDo: submit refuses what the browser
// would refuse or mishandle, naming the field.
func TestSpecValidateWhatTheBrowserCanDo(t *testing.T) {
	base := func(mod func(*Spec)) Spec {
		s := Spec{URL: "https://shop.example.com/a"}
		mod(&s)
		return s
	}
	for _, tc := range []struct {
		name  string
		spec  Spec
		field string // "" means valid
		msg   string
	}{
		{"user agent with CRLF", base(func(s *Spec) { s.UserAgent = "bot\r\nX-Evil: 1" }), "user_agent", "line break"},
		{"user agent with NUL", base(func(s *Spec) { s.UserAgent = "bot\x00" }), "user_agent", "NUL"},
		{"plain user agent", base(func(s *Spec) { s.UserAgent = "Mozilla/5.0 (bot)" }), "", ""},
		{"Host header", base(func(s *Spec) { s.Headers = map[string]string{"Host": "internal.example"} }), `headers["Host"]`, "cannot be overridden"},
		{"host header lower-case", base(func(s *Spec) { s.Headers = map[string]string{"host": "x"} }), `headers["host"]`, "cannot be overridden"},
		{"Content-Length header", base(func(s *Spec) { s.Headers = map[string]string{"Content-Length": "5"} }), `headers["Content-Length"]`, "cannot"},
		{"Proxy-Authorization header", base(func(s *Spec) { s.Headers = map[string]string{"Proxy-Authorization": "Basic eA=="} }), `headers["Proxy-Authorization"]`, "egress proxy"},
		{"proxy-authorization lower-case", base(func(s *Spec) { s.Headers = map[string]string{"proxy-authorization": "Basic eA=="} }), `headers["proxy-authorization"]`, "credentials"},
		{"Proxy-Connection header", base(func(s *Spec) { s.Headers = map[string]string{"Proxy-Connection": "keep-alive"} }), `headers["Proxy-Connection"]`, "Proxy-*"},
		{"any Proxy-* header", base(func(s *Spec) { s.Headers = map[string]string{"Proxy-Foo": "1"} }), `headers["Proxy-Foo"]`, "Proxy-*"},
		{"Cookie2 header", base(func(s *Spec) { s.Headers = map[string]string{"Cookie2": "a"} }), `headers["Cookie2"]`, "cannot be overridden"},
		{"Set-Cookie header", base(func(s *Spec) { s.Headers = map[string]string{"Set-Cookie": "a=b"} }), `headers["Set-Cookie"]`, "cannot be overridden"},
		{"Trailer header", base(func(s *Spec) { s.Headers = map[string]string{"Trailer": "x"} }), `headers["Trailer"]`, "cannot be overridden"},
		{"Transfer-Encoding header", base(func(s *Spec) { s.Headers = map[string]string{"Transfer-Encoding": "chunked"} }), `headers["Transfer-Encoding"]`, "cannot be overridden"},
		{"headers Chrome sends", base(func(s *Spec) {
			s.Headers = map[string]string{"Sec-Fetch-Mode": "x", "Expect": "100-continue", "Date": "x", "Via": "x", "DNT": "1", "Origin": "http://a.example",
				"Referer": "http://a.example/", "Access-Control-Request-Method": "GET", "Proxy": "x"}
		}), "", ""},
		{"wait longer than the timeout", base(func(s *Spec) { s.TimeoutMS = 1000; s.Actions = []Action{{Type: "wait", Ms: 30000}} }), "actions[0].ms", "timeout of 1000 ms"},
		{"wait equal to the timeout", base(func(s *Spec) { s.TimeoutMS = 5000; s.Actions = []Action{{Type: "wait", Ms: 5000}} }), "actions[0].ms", "add up to 5000 ms"},
		{"waits add up past the default timeout", base(func(s *Spec) {
			s.Actions = []Action{{Type: "wait", Ms: 20000}, {Type: "scroll"}, {Type: "wait", Ms: 10000}}
		}), "actions[2].ms", "timeout of 30000 ms"},
		{"click pauses times repeats", base(func(s *Spec) {
			s.TimeoutMS = 10000
			s.Actions = []Action{{Type: "click", Selector: "a.more", Times: 5, Ms: 2000}}
		}), "actions[0].ms", "add up to 10000 ms"},
		{"network idle counts", base(func(s *Spec) {
			s.TimeoutMS = 2000
			s.Wait = &Wait{NetworkIdle: true}
			s.Actions = []Action{{Type: "wait", Ms: 1500}}
		}), "actions[0].ms", "add up to 2000 ms"},
		{"waits under the timeout", base(func(s *Spec) {
			s.TimeoutMS = 10000
			s.Wait = &Wait{NetworkIdle: true}
			s.Actions = []Action{{Type: "wait", Ms: 4000}, {Type: "click", Selector: "a", Times: 2, Ms: 2000}, {Type: "wait", Selector: "#x", Ms: 60000}, {Type: "wait", Ms: 1499}}
		}), "", ""},
		{"scroll ms is a bound, not a pause", base(func(s *Spec) {
			s.TimeoutMS = 5000
			s.Actions = []Action{{Type: "scroll", Times: 100, Ms: 10000}}
		}), "", ""},
		{"Cookie header with cookies", base(func(s *Spec) {
			s.Headers = map[string]string{"Cookie": "a=b"}
			s.Cookies = []Cookie{{Name: "c", Value: "d"}}
		}), `headers["Cookie"]`, "conflicts with cookies"},
		{"cookie header lower-case with cookies", base(func(s *Spec) {
			s.Headers = map[string]string{"cookie": "a=b"}
			s.Cookies = []Cookie{{Name: "c", Value: "d"}}
		}), `headers["cookie"]`, "conflicts with cookies"},
		{"Cookie header alone", base(func(s *Spec) { s.Headers = map[string]string{"Cookie": "a=b"} }), "", ""},
		{"user-agent header with user_agent", base(func(s *Spec) {
			s.Headers = map[string]string{"user-agent": "X"}
			s.UserAgent = "Y"
		}), `headers["user-agent"]`, "conflicts with user_agent"},
		{"User-Agent header alone", base(func(s *Spec) { s.Headers = map[string]string{"User-Agent": "X"} }), `headers["User-Agent"]`, "set user_agent instead"},
		{"host with an empty label", Spec{URL: "http://a..b/"}, "url", "empty label"},
		{"host label with hyphens at both ends", Spec{URL: "http://-bad-.example/"}, "url", "hyphen"},
		{"host label ending in a hyphen", Spec{URL: "http://bad-.example/"}, "url", "hyphen"},
		{"host with a leading dot", Spec{URL: "http://.example.com/"}, "url", "empty label"},
		{"host with two trailing dots", Spec{URL: "http://example.com../"}, "url", "empty label"},
		{"host label of 64 bytes", Spec{URL: "http://" + strings.Repeat("a", 64) + ".example/"}, "url", "at most 63"},
		{"host of 254 bytes", Spec{URL: "http://" + strings.Repeat(strings.Repeat("a", 50)+".", 5) + "abc/"}, "url", "at most 253"},
		{"host with a star", Spec{URL: "http://a*b.example/"}, "url", "only letters, digits"},
		{"host with a bang", Spec{URL: "http://a!b.example/"}, "url", "only letters, digits"},
		{"host IDNA refuses", Spec{URL: "http://a\u200d.example/"}, "url", ""},
		{"host with an underscore", Spec{URL: "http://a_b.example.com/"}, "", ""},
		{"IDN host", Spec{URL: "http://bücher.test/"}, "", ""},
		{"punycode host", Spec{URL: "http://xn--bcher-kva.test/"}, "", ""},
		{"single-label host with port", Spec{URL: "http://localhost:8080/"}, "", ""},
		{"single-label host", Spec{URL: "http://intranet/"}, "", ""},
		{"host with a trailing dot", Spec{URL: "http://example.com./"}, "", ""},
		{"host label of 63 bytes", Spec{URL: "http://" + strings.Repeat("a", 63) + ".example/"}, "", ""},
		{"host of 253 bytes", Spec{URL: "http://" + strings.Repeat(strings.Repeat("a", 50)+".", 4) + strings.Repeat("b", 49) + "/"}, "", ""},
		{"IPv4 in short form", Spec{URL: "http://127.1/"}, "", ""},
		{"IPv6 host", Spec{URL: "http://[2001:db8::1]:8080/"}, "", ""},
		{"extract a statement", base(func(s *Spec) { s.Extract = "return 1" }), "extract", "not a JavaScript expression"},
		{"extract unfinished", base(func(s *Spec) { s.Extract = "1 +" }), "extract", "not a JavaScript expression"},
		{"extract statements", base(func(s *Spec) { s.Extract = "var x = 1; x" }), "extract", "wrap statements in"},
		{"extract only whitespace", base(func(s *Spec) { s.Extract = "   " }), "extract", "only whitespace"},
		{"extract modern", base(func(s *Spec) {
			s.Extract = "[...document.querySelectorAll('li')].map(e => e.textContent?.trim() ?? '').filter(t => /\\d/.test(t))"
		}), "", ""},
		{"extract async with trailing semicolon", base(func(s *Spec) { s.Extract = "(async () => (await fetch(location.href)).status)();\n" }), "", ""},
		{"ordinary header", base(func(s *Spec) { s.Headers = map[string]string{"Accept-Language": "de"} }), "", ""},
		{"proxy port 0", base(func(s *Spec) { s.Proxy = "http://p.example:0" }), "proxy", "out of range"},
		{"proxy port 70000", base(func(s *Spec) { s.Proxy = "http://p.example:70000" }), "proxy", "out of range"},
		{"proxy without port", base(func(s *Spec) { s.Proxy = "http://p.example" }), "proxy", "needs a port"},
		{"proxy with path", base(func(s *Spec) { s.Proxy = "http://p.example:3128/x" }), "proxy", "without a path"},
		{"proxy ok", base(func(s *Spec) { s.Proxy = "http://u:p@p.example:3128" }), "", ""},
		{"cookie domain .", base(func(s *Spec) { s.Cookies = []Cookie{{Name: "a", Value: "1", Domain: "."}} }), "cookies[0].domain", "not a domain"},
		{"cookie domain .com", base(func(s *Spec) { s.Cookies = []Cookie{{Name: "a", Value: "1", Domain: ".com"}} }), "cookies[0].domain", ""},
		{"cookie domain co.uk", func() Spec {
			s := Spec{URL: "https://shop.example.co.uk/", Cookies: []Cookie{{Name: "a", Value: "1", Domain: "co.uk"}}}
			return s
		}(), "cookies[0].domain", "public suffix"},
		{"cookie domain another site's", base(func(s *Spec) { s.Cookies = []Cookie{{Name: "a", Value: "1", Domain: "bank.example"}} }), "cookies[0].domain", "not the job's host"},
		{"cookie domain a lookalike", base(func(s *Spec) { s.Cookies = []Cookie{{Name: "a", Value: "1", Domain: "p.example.com"}} }), "cookies[0].domain", "not the job's host"},
		{"cookie domain parent", base(func(s *Spec) { s.Cookies = []Cookie{{Name: "a", Value: "1", Domain: ".example.com"}} }), "", ""},
		{"cookie domain host", base(func(s *Spec) { s.Cookies = []Cookie{{Name: "a", Value: "1", Domain: "shop.example.com"}} }), "", ""},
		{"cookie domain on an IP host", func() Spec {
			return Spec{URL: "http://127.0.0.1:8080/", Cookies: []Cookie{{Name: "a", Value: "1", Domain: "127.0.0.1"}}}
		}(), "", ""},
		{"bad wait selector", base(func(s *Spec) { s.Wait = &Wait{Selector: "##"} }), "wait.selector", "not a valid CSS selector"},
		{"bad action selector", base(func(s *Spec) { s.Actions = []Action{{Type: "click", Selector: "a["}} }), "actions[0].selector", "not a valid CSS selector"},
		{"bad follow selector", base(func(s *Spec) { s.Follow = &Follow{Selector: "a,,b", MaxDepth: 1} }), "follow.selector", "not a valid CSS selector"},
		{"non-standard pseudo-class", base(func(s *Spec) { s.Wait = &Wait{Selector: "div:contains('x')"} }), "wait.selector", "not a standard"},
		{"unknown pseudo-class after a known one", base(func(s *Spec) { s.Wait = &Wait{Selector: "#ready:hover:unknownpseudo"} }), "wait.selector", ":unknownpseudo is not a pseudo-class the browser knows"},
		{"unknown pseudo-class alone", base(func(s *Spec) { s.Wait = &Wait{Selector: "#ready:unknownpseudo"} }), "wait.selector", "not a pseudo-class the browser knows"},
		{"unknown pseudo-class in an action", base(func(s *Spec) { s.Actions = []Action{{Type: "click", Selector: "a:focus:bogus"}} }), "actions[0].selector", "not a pseudo-class"},
		{"unknown pseudo-class in a wait action", base(func(s *Spec) { s.Actions = []Action{{Type: "wait", Selector: "p:bogus"}} }), "actions[0].selector", "not a pseudo-class"},
		{"unknown pseudo-class in follow", base(func(s *Spec) { s.Follow = &Follow{Selector: "a.next:hover:bogus", MaxDepth: 1} }), "follow.selector", "not a pseudo-class"},
		{"unknown pseudo-class inside :not()", base(func(s *Spec) { s.Wait = &Wait{Selector: "li:not(:bogus)"} }), "wait.selector", "in :not()"},
		{"pseudo-class after ::before", base(func(s *Spec) { s.Wait = &Wait{Selector: "p::before:hover"} }), "wait.selector", "nothing may follow"},
		{"known pseudo-classes chained", base(func(s *Spec) { s.Wait = &Wait{Selector: "#ready:hover:focus-visible:not(.x)"} }), "", ""},
		{"modern selectors", base(func(s *Spec) {
			s.Wait = &Wait{Selector: "main :is(h1, h2):not(.hidden)"}
			s.Follow = &Follow{Selector: "a:has(> img), a.next", MaxDepth: 1}
		}), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want valid", err)
				}
				return
			}
			var se *SpecError
			if !errors.As(err, &se) || se.Field != tc.field || !strings.Contains(se.Msg, tc.msg) {
				t.Fatalf("Validate = %v, want an error on %s mentioning %q", err, tc.field, tc.msg)
			}
		})
	}
}
