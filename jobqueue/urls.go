package jobqueue

import (
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/browserfarm/browserfarm/internal/jobspec"
)

// ParseJobURL parses a job URL and reports why it is not an acceptable page to
// render: only absolute http and https URLs with a host are.
func ParseJobURL(raw string) (*url.URL, *SpecError) {
	if raw == "" {
		return nil, specErr("url", "is required")
	}
	if len(raw) > MaxURLLength {
		return nil, specErr("url", "%d bytes; at most %d are allowed", len(raw), MaxURLLength)
	}
	if !utf8.ValidString(raw) || hasControl(raw) || strings.ContainsAny(raw, " \t") {
		return nil, specErr("url", "contains whitespace or a control character")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, specErr("url", "malformed URL: %s", unwrapURLError(err))
	}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "http", "https":
	case "":
		return nil, specErr("url", "%q is not an absolute URL (it needs http:// or https://)", raw)
	default:
		return nil, specErr("url", "scheme %q is not allowed (use http or https)", scheme)
	}
	if u.Opaque != "" || u.Host == "" || u.Hostname() == "" {
		return nil, specErr("url", "missing host in %q", raw)
	}
	if p := u.Port(); p != "" {
		if len(p) > 5 || p == "0" || portNumber(p) > 65535 {
			return nil, specErr("url", "bad port %q", p)
		}
		if jobspec.BadPort(portNumber(p)) {
			return nil, specErr("url", "port %s is one browsers refuse to load (the Fetch standard's bad ports)", p)
		}
	}
	return u, nil
}

func portNumber(p string) int {
	n := 0
	for _, c := range p {
		n = n*10 + int(c-'0')
	}
	return n
}

// unwrapURLError drops url.Error's "parse <url>:" prefix, which repeats the input.
func unwrapURLError(err error) string {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err.Error()
	}
	return err.Error()
}

// HostKey is the lower-cased host[:port] of u with the scheme's default port
// dropped: the unit of per-host politeness.
func HostKey(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	scheme := strings.ToLower(u.Scheme)
	if port == "" || (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// DedupKey is the normalized form under which a URL is crawled at most once per
// crawl: scheme and host lower-cased, default port and fragment dropped, an
// empty path made "/". The query is kept as given (its order can matter).
func DedupKey(u *url.URL) string {
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	k := strings.ToLower(u.Scheme) + "://" + HostKey(u) + path
	if u.RawQuery != "" {
		k += "?" + u.RawQuery
	}
	return k
}
