package jobqueue

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/browserfarm/browserfarm/internal/jobspec"
	"golang.org/x/net/idna"
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
	// Go's parser lets through host characters the URL standard forbids in
	// a domain, which Chrome then refuses: the job would fail every attempt.
	h := u.Hostname()
	if strings.ContainsAny(h, forbiddenDomainChars) {
		return nil, specErr("url", "host %q has a character a URL's host may not have (one of %s)", h, forbiddenDomainChars)
	}
	host, err := CanonicalHost(h)
	if err != nil {
		// A number that is no IPv4 address, or a name IDNA refuses: a
		// browser cannot load either.
		return nil, specErr("url", "%v", err)
	}
	if _, aerr := netip.ParseAddr(host); aerr != nil {
		// A name that cannot be in DNS would fail as the egress proxy's
		// opaque 502 after the render started.
		if err := jobspec.CheckHostName(host); err != nil {
			return nil, specErr("url", "%v", err)
		}
	}
	if p := u.Port(); p != "" {
		if !portInRange(p) {
			return nil, specErr("url", "bad port %q", p)
		}
		if jobspec.BadPort(portNumber(p)) {
			return nil, specErr("url", "port %s is one browsers refuse to load (the Fetch standard's bad ports)", p)
		}
	}
	return u, nil
}

// forbiddenDomainChars are the characters Go's URL parser accepts in a host
// that Chrome does not ("Cannot navigate to invalid URL", an internal
// error, retried): the URL standard's forbidden domain code points < and >.
const forbiddenDomainChars = `<>`

func portNumber(p string) int {
	n := 0
	for _, c := range p {
		n = n*10 + int(c-'0')
	}
	return n
}

// portInRange reports whether a port of decimal digits is 1-65535, written
// in at most 5 of them.
func portInRange(p string) bool {
	n := portNumber(p)
	return len(p) <= 5 && n >= 1 && n <= 65535
}

// unwrapURLError drops url.Error's "parse <url>:" prefix, which repeats the input.
func unwrapURLError(err error) string {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err.Error()
	}
	return err.Error()
}

// HostKey is the host[:port] of u in its canonical form (see CanonicalHost),
// with the scheme's default port dropped: the unit of per-host politeness.
// The spellings of one server — upper case, a trailing dot, a Unicode name or
// its punycode, the default port — are one key, so one bucket and one crawl
// key: Chrome hands links back in the ASCII form.
func HostKey(u *url.URL) string {
	// A name IDNA refuses keeps its lower-cased form: Chrome cannot load it,
	// so no other spelling of it will come back.
	host, _ := CanonicalHost(u.Hostname())
	port := canonicalPort(u.Port())
	scheme := strings.ToLower(u.Scheme)
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	return hostPort(host, port)
}

// canonicalPort is a port as its number (":080" is port 80, as a browser
// reads it), "" for none.
func canonicalPort(p string) string {
	if p == "" {
		return ""
	}
	return strconv.Itoa(portNumber(p))
}

// hostPort joins a canonical host name and a port (none if empty) into a
// host key, with an IPv6 address in brackets.
func hostPort(host, port string) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == "" {
		return host
	}
	return host + ":" + port
}

// idnaProfile maps a host name to ASCII the way a browser's URL parser does
// (the WHATWG URL standard's "domain to ASCII": UTS 46 non-transitional
// mapping, the Bidi and joiner rules, but neither STD3's letters-digits-
// hyphens rule nor the hyphen checks, so "under_score.example" stays as it
// is). An *idna.Profile is read-only.
var idnaProfile = idna.New(idna.MapForLookup(), idna.BidiRule(), idna.Transitional(false),
	idna.StrictDomainName(false), idna.CheckHyphens(false))

// CanonicalHost is the form of a host name (no port, an IPv6 address without
// brackets) that host keys use: lower case, one trailing dot dropped, a
// Unicode name in its ASCII (punycode) form, an IPv4 address in dotted
// decimal however it was written (2130706433, 0x7f.1 and 127.1 are
// 127.0.0.1 to a browser) and an IPv6 address in its shortest form. It is
// the one home of that rule: HostKey applies it to URLs, NormalizeHostKey
// to host keys written by operators. The error is for a Unicode name IDNA
// refuses, a name whose last label is a number but that is no IPv4
// address (errNotIPv4), or an IPv6 address with a zone
// (jobspec.CheckIPZone): a browser refuses each; the lower-cased name
// comes with it.
func CanonicalHost(name string) (string, error) {
	if strings.Contains(name, ":") { // an IPv6 address
		a, err := netip.ParseAddr(name)
		if err != nil {
			return strings.ToLower(name), nil
		}
		if err := jobspec.CheckIPZone(a); err != nil {
			return strings.ToLower(name), fmt.Errorf("host %q: %w", name, err)
		}
		return a.String(), nil
	}
	name = strings.TrimSuffix(name, ".")
	a := strings.ToLower(name)
	if !isASCII(name) {
		var err error
		if a, err = idnaProfile.ToASCII(name); err != nil {
			return strings.ToLower(name), fmt.Errorf("host %q is not a valid internationalized domain name: %w", name, err)
		}
		// A full stop of another script ends it: U+3002 maps to ".".
		a = strings.TrimSuffix(a, ".")
	}
	if jobspec.EndsInANumber(a) {
		ip, ok := jobspec.ParseIPv4(a)
		if !ok {
			return a, fmt.Errorf("host %q: %w", name, errNotIPv4)
		}
		return ip.String(), nil
	}
	return a, nil
}

// errNotIPv4: a host whose last label is a number must be an IPv4 address.
var errNotIPv4 = errors.New("its last label is a number, but it is not an IPv4 address (browsers refuse it)")

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// NormalizeHostKey is the host key of a host as an operator writes it, without
// a scheme: "host", "host:port", "[IPv6]" or "[IPv6]:port", in any of the
// spellings HostKey folds (see CanonicalHost). Port 80 and port 443 are
// dropped, since a key without a scheme cannot tell which one's default it
// is: "shop.example.com:443" is the key of https://shop.example.com/. The
// error says what is wrong with s.
func NormalizeHostKey(s string) (string, error) {
	if strings.ContainsAny(s, "/?#@ \t") {
		return "", fmt.Errorf("host %q is not a host (write it without scheme or path, e.g. shop.example.com)", s)
	}
	name, port, hasPort := s, "", false
	if rest, ok := strings.CutPrefix(s, "["); ok {
		addr, after, ok := strings.Cut(rest, "]")
		if !ok || strings.Count(addr, ":") < 2 || net.ParseIP(addr) == nil {
			return "", fmt.Errorf("host %q: an IPv6 address goes in brackets, e.g. [2001:db8::1]", s)
		}
		name = addr
		if after != "" {
			if port, hasPort = strings.CutPrefix(after, ":"); !hasPort {
				return "", fmt.Errorf("host %q: want [IPv6]:port", s)
			}
		}
	} else {
		if strings.Count(s, ":") > 1 {
			return "", fmt.Errorf("host %q: an IPv6 address goes in brackets, e.g. [2001:db8::1]", s)
		}
		name, port, hasPort = strings.Cut(s, ":")
		if strings.ContainsAny(name, "[]") {
			return "", fmt.Errorf("host %q: an IPv6 address goes in brackets, e.g. [2001:db8::1]", s)
		}
	}
	if hasPort && (port == "" || strings.Trim(port, "0123456789") != "" || !portInRange(port)) {
		return "", fmt.Errorf("host %q: bad port %q (want 1-65535)", s, port)
	}
	if port = canonicalPort(port); port == "80" || port == "443" {
		port = ""
	}
	host, err := CanonicalHost(name)
	switch {
	case err != nil:
		return "", err
	case host == "":
		return "", fmt.Errorf("host %q: empty host", s)
	case !strings.Contains(host, ":") && (strings.HasPrefix(host, ".") || strings.Contains(host, "..")):
		return "", fmt.Errorf("host %q: empty label", s)
	}
	return hostPort(host, port), nil
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
