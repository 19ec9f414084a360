// Package jobspec is the one home of what the two ends of a job check alike:
// the bounds, defaults and names of a job spec that jobqueue enforces when a
// job is submitted and browser enforces when it renders, and the rules for
// a per-job proxy URL, CSS selectors (CheckSelector), request header names
// (CheckHeaderName, CheckHeaderConflict), a job's fixed pauses against its
// timeout (CheckPauses), host names (CheckHostName) and the extract script
// (WrapExtract, CheckExtract; the browser does not re-parse it). With both reading the same values, a job the queue
// accepts is one the browser can render (farm's TestAcceptedSpecsRender and
// FuzzAcceptedSpecsRender hold the two to that).
//
// It is a leaf: it imports nothing of the project, so jobqueue and browser,
// which import nothing else of the project, stay leaves of the import graph.
// Bounds only the queue checks (sizes of texts, headers, cookies, the spec's
// JSON) stay in jobqueue; capabilities only the browser has (the resource
// types it can block beyond the spec's) stay in browser.
package jobspec

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Bounds and defaults of a spec that the browser also applies.
const (
	// DefaultTimeoutMS bounds a render whose spec sets no timeout_ms. The
	// queue stores it in the spec at submit, so every node renders a job with
	// the same timeout.
	DefaultTimeoutMS = 30_000
	MinTimeoutMS     = 1000
	MaxTimeoutMS     = 300_000
	// MaxURLLength bounds a URL the farm takes: a job's url (and proxy) at
	// submit, and a followed link, which the browser counts over the limit
	// instead of collecting when it is longer (it would be refused as a
	// job's url).
	MaxURLLength = 4096
	// MaxActionTimes bounds an action's times (repeats of click and scroll).
	MaxActionTimes = 100
	// MaxActionMS bounds an action's ms: one pause or wait.
	MaxActionMS = 60_000
	// The viewport's sides, in CSS pixels: 8K at most.
	MinViewport       = 100
	MaxViewportWidth  = 7680
	MaxViewportHeight = 4320
	// MaxScreenshotPixels bounds the viewport (width × height) of a job
	// that takes a screenshot: 4K UHD, 3840×2160. Chrome sends a
	// screenshot's PNG whole before a node can measure it, and a page can
	// paint noise no compression shrinks, about 3 bytes a pixel (7680×4320
	// of it: a 99 MB PNG, 825 MB allocated reading it); within the bound at
	// most about 25 MB crosses before the node's cap (--max-screenshot-bytes,
	// 8 MiB by default) refuses it, while the screenshots users take (1080p,
	// 1440p, 4K) stay allowed. Raising the cap does not raise this bound.
	MaxScreenshotPixels = 3840 * 2160
	// DefaultMaxLinks is follow.max_links when a spec leaves it 0, and the
	// links a render returns when its caller sets no cap.
	DefaultMaxLinks = 100
	// MaxFollowLinks bounds follow.max_links: the children one page may
	// enqueue, all in the transaction that completes it.
	MaxFollowLinks = 10_000
	// LinksAskedPerFollowed is how many links a page is asked for per link
	// it may follow, so that the host and duplicate filters still leave
	// max_links to follow.
	LinksAskedPerFollowed = 4
	// MaxCollectedLinks is the most links taken from one page: the browser
	// is asked for no more, and the result keeps no more.
	MaxCollectedLinks = LinksAskedPerFollowed * MaxFollowLinks
	// Default result caps, unless the node is told otherwise (farm consumer
	// --max-extract-bytes, --max-screenshot-bytes, --max-console-errors):
	// the JSON of the extract expression's value, a screenshot's PNG, and
	// how many console errors a result keeps.
	DefaultMaxDataBytes       = 4 << 20
	DefaultMaxScreenshotBytes = 8 << 20
	DefaultMaxConsoleErrors   = 50
	// MaxConsoleErrors is the most console errors a result may be set to
	// keep; the browser forwards no more than that from one document.
	MaxConsoleErrors = 1000
)

// Isolation names: what a job may see of the jobs before it on the same
// browser session. "" means IsolationWipe.
const (
	IsolationWipe    = "wipe"
	IsolationContext = "context"
	IsolationShared  = "shared"
)

// Cache names: which jobs' HTTP cache a job of isolation wipe may read.
// "" means CacheJob.
const (
	// CacheJob: the job's own only; the cache is cleared after it.
	CacheJob = "job"
	// CacheBatch: the cache is kept between jobs of the same batch that
	// follow each other on a browser session.
	CacheBatch = "batch"
)

// Action types.
const (
	ActionClick  = "click"
	ActionScroll = "scroll"
	ActionType   = "type"
	ActionWait   = "wait"
)

// ActionTypes returns the action types a spec may use.
func ActionTypes() []string { return []string{ActionClick, ActionScroll, ActionType, ActionWait} }

// BlockTypes returns the resource types a spec may block.
func BlockTypes() []string { return []string{"image", "font", "media", "stylesheet"} }

// Proxy is a parsed per-job proxy URL.
type Proxy struct {
	// Server is scheme://host:port, as Chrome's proxyServer takes it.
	Server   string
	User     string
	Password string
	// HasAuth: the URL carried a user (the password may be empty).
	HasAuth bool
}

// ParseProxy checks a per-job proxy URL, scheme://[user:password@]host:port
// with scheme http, https or socks5, and splits it. Its errors are messages
// for a person, without the field's name (the caller adds it).
func ParseProxy(p string) (Proxy, error) {
	u, err := url.Parse(p)
	if err != nil {
		if ue, ok := err.(*url.Error); ok {
			// url.Error's "parse <url>:" prefix repeats the input.
			err = ue.Err
		}
		return Proxy{}, fmt.Errorf("malformed proxy URL: %v", err)
	}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "http", "https", "socks5":
	case "":
		return Proxy{}, fmt.Errorf("the proxy URL needs a scheme (http, https or socks5), e.g. socks5://host:1080")
	default:
		return Proxy{}, fmt.Errorf("proxy scheme %q is not allowed (use http, https or socks5)", u.Scheme)
	}
	if u.Hostname() == "" {
		return Proxy{}, fmt.Errorf("the proxy URL has no host")
	}
	// Chrome reads its proxy setting as a list (',' and ';' separate
	// entries, '=' names a scheme), which Go's URL parser lets through in a
	// host name: only an IP address or a DNS name passes.
	if err := checkProxyHost(u.Hostname()); err != nil {
		return Proxy{}, err
	}
	port := u.Port()
	if port == "" {
		return Proxy{}, fmt.Errorf("the proxy URL needs a port, e.g. http://host:3128")
	}
	if n, err := strconv.Atoi(port); err != nil || len(port) > 5 || n < 1 || n > 65535 {
		return Proxy{}, fmt.Errorf("port %q is out of range 1..65535", port)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return Proxy{}, fmt.Errorf("the proxy URL must be scheme://[user:password@]host:port, without a path or query")
	}
	out := Proxy{Server: scheme + "://" + u.Host}
	if u.User != nil {
		if scheme == "socks5" {
			// Chrome has no way to answer a SOCKS proxy's authentication.
			return Proxy{}, fmt.Errorf("chrome cannot authenticate to a SOCKS proxy: drop the user and password, or use an http or https proxy")
		}
		out.User = u.User.Username()
		out.Password, _ = u.User.Password()
		out.HasAuth = true
	}
	return out, nil
}

// checkProxyHost says why h cannot be a proxy's host, or nil: it must be
// an IP address as written in full (an IPv4 one in dotted decimal, an
// IPv6 one without a zone: CheckIPZone) or a DNS name (CheckHostName,
// after one trailing dot) whose last label is no number.
func checkProxyHost(h string) error {
	if a, err := netip.ParseAddr(h); err == nil {
		if err := CheckIPZone(a); err != nil {
			return fmt.Errorf("proxy host: %w", err)
		}
		return nil
	}
	if CheckHostName(strings.TrimSuffix(h, ".")) != nil {
		return fmt.Errorf("proxy host %q is not an IP address or a host name of letters, digits, hyphens and dots", h)
	}
	// A host ending in a number (2130706433, 127.1, 0x7f.0.0.1, 127.0.0.1.)
	// is an IPv4 address to a browser but a name to the node, which
	// resolves the proxy's host itself: "no such host", retried at every
	// attempt. No DNS name ends in a number; the address is taken in the
	// one form both read alike.
	if EndsInANumber(h) {
		if a, ok := ParseIPv4(h); ok {
			return fmt.Errorf("proxy host %q: write the IPv4 address as %s (four decimal numbers, no trailing dot)", h, a)
		}
		return fmt.Errorf("proxy host %q: its last label is a number, but it is not an IPv4 address", h)
	}
	return nil
}

// CheckCacheBatch is the rule a job that keeps its batch's HTTP cache
// (CacheBatch) must keep, given its effective isolation ("" is wipe) and
// whether it has a per-job proxy: only a wiped browser context keeps its
// cache between jobs; a brand-new one (isolation context's, a proxy's) has
// none, and isolation shared's is shared anyway. The caller names the field.
func CheckCacheBatch(isolation string, proxy bool) error {
	if isolation != "" && isolation != IsolationWipe {
		return fmt.Errorf("isolation %q has none to keep: only a wiped browser context (isolation %q) keeps its cache between jobs", isolation, IsolationWipe)
	}
	if proxy {
		return fmt.Errorf("a job with a per-job proxy gets a brand-new browser context, with an empty cache")
	}
	return nil
}

// CheckScreenshotViewport is the rule a viewport of a job that takes a
// screenshot must keep (MaxScreenshotPixels); the caller names the field.
func CheckScreenshotViewport(width, height int) error {
	if width*height > MaxScreenshotPixels {
		return fmt.Errorf("%dx%d is %d pixels; with a screenshot at most %d (3840x2160) are allowed, so that a page painting noise cannot send a PNG far over the screenshot cap",
			width, height, width*height, MaxScreenshotPixels)
	}
	return nil
}
