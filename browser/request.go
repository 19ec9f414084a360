package browser

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/chromedp/cdproto/network"

	"github.com/browserfarm/browserfarm/internal/jobspec"
)

// Request is one page to render and what to take from it. It mirrors the
// job spec of the queue (jobqueue.Spec); the consumer maps one to the other.
type Request struct {
	// URL is the page to load; http and https only.
	URL string
	// Wait says when the page counts as loaded. With neither field set, the
	// load event of the page. With a Selector, as soon as it matches an
	// element — present in the DOM, or rendered with a size when Visible is
	// set (the load event is not awaited, so a page that never finishes
	// loading still renders). With NetworkIdle, when no request has been in flight for
	// 500 ms. With both, both.
	Wait Wait
	// Actions run in order after the wait and before extraction.
	Actions []Action
	// Extract is a JavaScript expression; its value, as JSON, is Result.Data.
	// A promise is awaited. A throw is a permanent error of class "extract".
	Extract string
	// HTML asks for the page's outer HTML, capped at HTMLMaxBytes.
	HTML bool
	// HTMLMaxBytes caps Result.HTML. 0 means 2 MiB.
	HTMLMaxBytes int
	// Screenshot asks for a PNG of the viewport.
	Screenshot bool
	// Timeout bounds the whole render: tab, navigation, wait, actions,
	// extraction. 0 means the job spec's default (jobspec.DefaultTimeoutMS).
	Timeout time.Duration
	// Block lists resource types not to load: image, font, media,
	// stylesheet (also: script, xhr, fetch, websocket, texttrack, other).
	Block []string
	// Headers are extra HTTP request headers.
	Headers map[string]string
	// UserAgent overrides the user agent. "" means Chrome's own, with
	// "HeadlessChrome" spelled "Chrome".
	UserAgent string
	// Viewport sets the window size; the zero value means 1280x800.
	Viewport Viewport
	// Cookies are set in the job's browser context before navigation.
	Cookies []Cookie
	// Proxy is a proxy for this job only: http://[user:pass@]host:port,
	// https://…, or socks5://host:port (jobspec.ParseProxy). The job gets a
	// brand-new browser context behind it (loopback included), whatever its
	// Isolation; a proxy's authentication challenge is answered with the
	// URL's credentials. It cannot be combined with IsolationShared.
	Proxy string
	// Isolation says what the job may see of the jobs before it on the same
	// session. "" means IsolationWipe.
	Isolation Isolation
	// CacheScope lets IsolationWipe jobs share the HTTP cache (and the
	// compiled scripts Chrome keeps with it): a job finds what the jobs
	// before it on the session left there as long as they all had this
	// same, non-empty scope, and nothing of any other job. "" (the
	// default): the job's own cache only, cleared after it. Everything else
	// the wipe clears is cleared either way. Only with IsolationWipe and
	// no Proxy.
	CacheScope string
	// FollowSelector picks links (elements with an href) whose absolute
	// http(s) URLs, without fragment and de-duplicated, go to Result.Links.
	FollowSelector string
	// FollowMax caps Result.Links, at most jobspec.MaxCollectedLinks. 0
	// means jobspec.DefaultMaxLinks.
	FollowMax int
	// MaxDataBytes caps the JSON of Extract's value; the page measures it
	// before it is sent, so an over-cap value never crosses into Go. Over
	// the cap the render fails with ClassTooLarge. 0 means
	// jobspec.DefaultMaxDataBytes.
	MaxDataBytes int
	// MaxScreenshotBytes caps the screenshot's PNG (ClassTooLarge over it).
	// 0 means jobspec.DefaultMaxScreenshotBytes.
	MaxScreenshotBytes int
	// MaxConsoleErrors caps Result.ConsoleErrors; later ones are dropped.
	// 0 means jobspec.DefaultMaxConsoleErrors.
	MaxConsoleErrors int
}

// Isolation is how a job is kept apart from the other jobs of a session.
type Isolation string

const (
	// IsolationWipe, the default: the job runs on the session's own tab in
	// the session's own browser context, which is wiped between jobs —
	// cookies, HTTP cache, local and session storage, IndexedDB, Cache
	// Storage, service workers, permissions and the tab's history are
	// cleared, so no state of one job is visible to the next. A job that
	// met an HTTP authentication challenge leaves its context to be
	// disposed of (Chrome keeps answered credentials where no CDP call
	// clears them); the next job gets a brand-new one.
	IsolationWipe Isolation = jobspec.IsolationWipe
	// IsolationContext gives the job a brand-new browser context (and tab,
	// and renderer), disposed of after it: the strongest isolation, at the
	// price of a renderer start per job.
	IsolationContext Isolation = jobspec.IsolationContext
	// IsolationShared opts out: the job runs in Chrome's default context,
	// on a tab the session reuses, where cookies, storage, cache, service
	// workers, permissions and HTTP credentials persist between jobs (as in
	// a scraper's session). Only the job's own settings (headers, user
	// agent, viewport, blocking) are undone for the next job.
	IsolationShared Isolation = jobspec.IsolationShared
)

// ParseIsolation checks an isolation name; "" is the default, IsolationWipe.
func ParseIsolation(s string) (Isolation, error) {
	switch i := Isolation(s); i {
	case "":
		return IsolationWipe, nil
	case IsolationWipe, IsolationContext, IsolationShared:
		return i, nil
	}
	return "", fmt.Errorf("unknown isolation %q (want wipe, context or shared)", s)
}

// Wait is the load condition of a page.
type Wait struct {
	Selector    string
	Visible     bool // the Selector's element must also be rendered, with a width and a height
	NetworkIdle bool
}

// Action types.
const (
	ActionClick  = jobspec.ActionClick
	ActionScroll = jobspec.ActionScroll
	ActionType   = jobspec.ActionType
	ActionWait   = jobspec.ActionWait
)

// Action is one step performed on the page before extraction.
type Action struct {
	// Type is click, scroll, type or wait.
	Type string
	// Selector is the element to click or type into (it is waited for until
	// visible), or for wait, the element to wait for.
	Selector string
	// Text is what type types.
	Text string
	// Times repeats click and scroll; 0 means 1.
	Times int
	// Ms: for wait without a selector, the pause. For click, the pause
	// after each click. For scroll, the longest wait after each scroll for
	// the page to grow (it ends as soon as it does); 0 means 1000 ms.
	Ms int
}

// Viewport is the window size.
type Viewport struct {
	Width  int
	Height int
	Mobile bool
}

// Cookie is set before navigation. Domain "" means the URL's host.
type Cookie struct {
	Name     string
	Value    string
	Domain   string
	Path     string
	Secure   bool
	HTTPOnly bool
}

// The bounds and defaults a job spec shares with the queue come from
// internal/jobspec, their one home, so that what the queue accepts the
// browser renders.
const (
	defaultTimeout      = jobspec.DefaultTimeoutMS * time.Millisecond
	defaultHTMLMaxBytes = 2 << 20
	defaultFollowMax    = jobspec.DefaultMaxLinks
	// The result caps' defaults apply to direct users of the package; a
	// farm node passes its own limits.
	defaultMaxConsoleErrors = jobspec.DefaultMaxConsoleErrors
	maxFollow               = jobspec.MaxCollectedLinks
	defaultScrollWaitMs     = jobspec.DefaultScrollWaitMS
	maxTimes                = jobspec.MaxActionTimes
	maxActionMs             = jobspec.MaxActionMS
)

// blockTypes maps the names a spec may use to CDP resource types.
var blockTypes = map[string]network.ResourceType{
	"image":      network.ResourceTypeImage,
	"font":       network.ResourceTypeFont,
	"media":      network.ResourceTypeMedia,
	"stylesheet": network.ResourceTypeStylesheet,
	"script":     network.ResourceTypeScript,
	"xhr":        network.ResourceTypeXHR,
	"fetch":      network.ResourceTypeFetch,
	"websocket":  network.ResourceTypeWebSocket,
	"texttrack":  network.ResourceTypeTextTrack,
	"manifest":   network.ResourceTypeManifest,
	"other":      network.ResourceTypeOther,
}

// proxySpec is a parsed Request.Proxy.
type proxySpec struct {
	server   string // scheme://host:port, as Chrome's proxyServer takes it
	user     string
	password string
	hasAuth  bool
}

// job is a validated Request with its defaults applied.
type job struct {
	Request
	block    []network.ResourceType
	proxy    *proxySpec
	userinfo bool // the URL carries credentials
	// shown is URL as logs and error texts show it: without userinfo,
	// which may be a secret.
	shown string
}

func invalid(format string, args ...any) *Error {
	return newErr(ClassInvalid, false, format, args...)
}

// prepare validates r and applies the defaults. Its errors name the field.
func (r Request) prepare() (*job, error) {
	j := &job{Request: r}
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, invalid("url: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, invalid("url: scheme %q is not http or https", u.Scheme)
	}
	if u.Host == "" {
		return nil, invalid("url: no host in %q", r.URL)
	}
	j.userinfo = u.User != nil
	j.shown = r.URL
	if u.User != nil {
		u.User = url.User("redacted")
		j.shown = u.String()
	}
	if r.Timeout < 0 {
		return nil, invalid("timeout: negative")
	}
	if j.Timeout == 0 {
		j.Timeout = defaultTimeout
	}
	if r.HTMLMaxBytes < 0 {
		return nil, invalid("html_max_bytes: negative")
	}
	if j.HTMLMaxBytes == 0 {
		j.HTMLMaxBytes = defaultHTMLMaxBytes
	}
	if r.Wait.Selector != "" {
		if msg := jobspec.CheckSelector(r.Wait.Selector); msg != "" {
			return nil, invalid("wait.selector: %s", msg)
		}
	}
	for i, a := range r.Actions {
		if err := a.validate(); err != nil {
			return nil, invalid("actions[%d]: %v", i, err)
		}
	}
	pauses := make([]int, len(r.Actions))
	for i, a := range r.Actions {
		pauses[i] = jobspec.ActionPauseMS(a.Type, a.Selector, a.Times, a.Ms)
	}
	if i, err := jobspec.CheckPauses(max(1, int(j.Timeout.Milliseconds())), r.Wait.NetworkIdle, pauses); err != nil {
		if i < 0 {
			return nil, invalid("wait.network_idle: %v", err)
		}
		return nil, invalid("actions[%d].ms: %v", i, err)
	}
	if r.FollowSelector != "" {
		if msg := jobspec.CheckSelector(r.FollowSelector); msg != "" {
			return nil, invalid("follow selector: %s", msg)
		}
	}
	seen := map[network.ResourceType]bool{}
	for i, b := range r.Block {
		rt, ok := blockTypes[strings.ToLower(strings.TrimSpace(b))]
		if !ok {
			return nil, invalid("block[%d]: unknown resource type %q", i, b)
		}
		if !seen[rt] {
			seen[rt] = true
			j.block = append(j.block, rt)
		}
	}
	// A header the job's cookies or user_agent override (jobspec's
	// CheckHeaderConflict) is refused at submit, not here: Chrome drops it
	// and renders, as it did for the jobs queued before submit refused it.
	for k := range r.Headers {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return nil, invalid("headers: bad header name %q", k)
		}
		if err := jobspec.CheckHeaderName(k); err != nil {
			return nil, invalid("headers[%q]: %v", k, err)
		}
	}
	if strings.ContainsAny(r.UserAgent, "\r\n") {
		return nil, invalid("user_agent: contains a line break")
	}
	if v := r.Viewport; v != (Viewport{}) {
		if v.Width < jobspec.MinViewport || v.Width > jobspec.MaxViewportWidth ||
			v.Height < jobspec.MinViewport || v.Height > jobspec.MaxViewportHeight {
			return nil, invalid("viewport: %dx%d is outside %dx%d..%dx%d", v.Width, v.Height,
				jobspec.MinViewport, jobspec.MinViewport, jobspec.MaxViewportWidth, jobspec.MaxViewportHeight)
		}
		// Chrome sends the PNG whole before its size can be checked: the
		// viewport bounds it (jobspec.MaxScreenshotPixels).
		if r.Screenshot {
			if err := jobspec.CheckScreenshotViewport(v.Width, v.Height); err != nil {
				return nil, invalid("viewport: %v", err)
			}
		}
	}
	for i, c := range r.Cookies {
		if c.Name == "" {
			return nil, invalid("cookies[%d]: empty name", i)
		}
	}
	iso, err := ParseIsolation(string(r.Isolation))
	if err != nil {
		return nil, invalid("isolation: %v", err)
	}
	j.Isolation = iso
	if r.Proxy != "" {
		if iso == IsolationShared {
			return nil, invalid("proxy: needs a browser context of the job's own, which isolation shared does not have")
		}
		p, err := parseProxy(r.Proxy)
		if err != nil {
			return nil, invalid("proxy: %v", err)
		}
		j.proxy = p
	}
	if r.CacheScope != "" {
		if err := jobspec.CheckCacheBatch(string(iso), j.proxy != nil); err != nil {
			return nil, invalid("cache scope: %v", err)
		}
	}
	if r.MaxDataBytes < 0 || r.MaxScreenshotBytes < 0 || r.MaxConsoleErrors < 0 {
		return nil, invalid("result limits: negative")
	}
	if j.MaxConsoleErrors == 0 {
		j.MaxConsoleErrors = defaultMaxConsoleErrors
	}
	if j.MaxDataBytes == 0 {
		j.MaxDataBytes = jobspec.DefaultMaxDataBytes
	}
	if j.MaxScreenshotBytes == 0 {
		j.MaxScreenshotBytes = jobspec.DefaultMaxScreenshotBytes
	}
	if r.FollowMax < 0 || r.FollowMax > maxFollow {
		return nil, invalid("follow max: %d is outside 0..%d", r.FollowMax, maxFollow)
	}
	if j.FollowMax == 0 {
		j.FollowMax = defaultFollowMax
	}
	return j, nil
}

func (a Action) validate() error {
	if a.Times < 0 || a.Times > maxTimes {
		return fmt.Errorf("times: %d is outside 0..%d", a.Times, maxTimes)
	}
	if a.Ms < 0 || a.Ms > maxActionMs {
		return fmt.Errorf("ms: %d is outside 0..%d", a.Ms, maxActionMs)
	}
	switch a.Type {
	case ActionClick, ActionType:
		if a.Selector == "" {
			return fmt.Errorf("%s needs a selector", a.Type)
		}
	case ActionScroll:
	case ActionWait:
		if a.Selector == "" && a.Ms == 0 {
			return fmt.Errorf("wait needs a selector or ms")
		}
	default:
		return fmt.Errorf("unknown type %q (want click, scroll, type or wait)", a.Type)
	}
	if a.Selector != "" {
		if msg := jobspec.CheckSelector(a.Selector); msg != "" {
			return fmt.Errorf("selector: %s", msg)
		}
	}
	return nil
}

func parseProxy(s string) (*proxySpec, error) {
	p, err := jobspec.ParseProxy(s)
	if err != nil {
		return nil, err
	}
	return &proxySpec{server: p.Server, user: p.User, password: p.Password, hasAuth: p.HasAuth}, nil
}

// jsString quotes s as a JavaScript string literal (JSON is a subset).
func jsString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		// json.Marshal of a string cannot fail; keep the compiler honest.
		return `""`
	}
	return string(b)
}
