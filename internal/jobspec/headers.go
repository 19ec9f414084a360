package jobspec

import (
	"fmt"
	"strings"
)

// refusedHeaders are the request header names Chrome refuses in
// Network.setExtraHTTPHeaders: the page's request fails with
// net::ERR_INVALID_ARGUMENT (a retriable network error, so a job with one
// spent every attempt on it). Measured on Chromium 156, the headless shell
// and Chrome alike, with browser's TestRefusedHeadersFailInChrome; every
// name that starts with "Proxy-" fails too (refusedHeaderPrefix). Names
// Chrome takes and sends as given — Sec-*, Expect, Date, Via, DNT, Origin,
// Referer, Access-Control-Request-*, Cookie — are not refused.
var refusedHeaders = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true, "keep-alive": true,
	"upgrade": true, "te": true, "trailer": true, "cookie2": true, "set-cookie": true,
}

// refusedHeaderPrefix: Chrome refuses every header name with it.
const refusedHeaderPrefix = "proxy-"

// RefusedHeaders returns the header names CheckHeaderName refuses by name
// (canonical case), besides every Proxy-* name.
func RefusedHeaders() []string {
	return []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Upgrade", "TE",
		"Trailer", "Cookie2", "Set-Cookie"}
}

// CheckHeaderName says why a job may not set the request header name, or
// nil. The caller names the field.
func CheckHeaderName(name string) error {
	n := strings.ToLower(name)
	switch {
	case n == "proxy-authorization":
		// Besides Chrome refusing it: the farm's nodes send their traffic
		// through their own egress proxy, toward which a job must not
		// present credentials.
		return fmt.Errorf("%s carries credentials for a proxy; a job may not send any toward the farm's egress proxy (a per-job proxy's credentials go in its URL: proxy http://user:password@host:port), and the browser refuses it", name)
	case strings.HasPrefix(n, refusedHeaderPrefix):
		return fmt.Errorf("%s is a Proxy-* header, which the browser refuses to send (the request would fail with net::ERR_INVALID_ARGUMENT)", name)
	case refusedHeaders[n]:
		return fmt.Errorf("%s is set by the browser from the URL and the connection; it cannot be overridden (the request would fail with net::ERR_INVALID_ARGUMENT)", name)
	}
	return nil
}

// CheckHeaderConflict says why a job may not set the request header name
// beside its other fields (cookies: it sets cookies; userAgent: it sets
// user_agent), or nil; the caller names the field. Each case was a field
// silently dropped:
//   - Cookie with cookies: the server got the cookies only. Cookie alone
//     is sent as given, and stays allowed.
//   - User-Agent: the browser sends its own user agent (or user_agent)
//     in its place, with user_agent or without (measured on both
//     browsers: browser's TestDroppedHeaders).
func CheckHeaderConflict(name string, cookies, userAgent bool) error {
	switch n := strings.ToLower(name); {
	case n == "cookie" && cookies:
		return fmt.Errorf("conflicts with cookies: the browser sends the cookies field's cookies and drops this header; put every cookie in cookies (or all in this header)")
	case n == "user-agent" && userAgent:
		return fmt.Errorf("conflicts with user_agent, which the browser sends in its place: set the user agent once, in user_agent")
	case n == "user-agent":
		return fmt.Errorf("the browser replaces this header with its own user agent: set user_agent instead")
	}
	return nil
}
