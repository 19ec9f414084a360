package jobqueue

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/publicsuffix"
)

// Bounds of a Spec. A job is data a stranger may submit over the HTTP API, so
// every field is bounded before it reaches the database or a browser.
const (
	MaxSpecBytes      = 64 << 10 // the whole spec as JSON
	MaxURLLength      = 4096
	MaxExtractLength  = 32 << 10
	MaxSelectorLength = 1024
	MaxActions        = 50
	MaxActionTimes    = 100
	MaxActionMS       = 60_000 // one wait or pause
	MaxTypeText       = 4096
	MaxHeaders        = 50
	MaxHeaderBytes    = 16 << 10 // names and values together
	MaxCookies        = 50
	MaxCookieValue    = 4096
	MaxUserAgent      = 1024
	MinTimeoutMS      = 1000
	MaxTimeoutMS      = 300_000
	DefaultTimeoutMS  = 30_000
	MinPriority       = -1000
	MaxPriority       = 1000
	MaxMaxAttempts    = 20
	DefaultAttempts   = 3
	MinViewport       = 100
	MaxViewportWidth  = 7680
	MaxViewportHeight = 4320
	MaxFollowDepth    = 10
	// MaxFollowLinks bounds follow.max_links: the children one page may
	// enqueue, all in the transaction that completes it.
	MaxFollowLinks = 10_000
	// DefaultMaxLinks is follow.max_links when a spec leaves it 0: the one
	// default of the spec, the CLI (--follow-max-links) and the API.
	DefaultMaxLinks = 100
	// LinksAskedPerFollowed is how many links a page is asked for per link
	// it may follow, so that the host and duplicate filters still leave
	// max_links to follow.
	LinksAskedPerFollowed = 4
	// MaxCollectedLinks is the most links taken from one page: the browser
	// is asked for no more, and the result keeps no more.
	MaxCollectedLinks = LinksAskedPerFollowed * MaxFollowLinks
)

// BlockTypes returns the resource types a spec may block.
func BlockTypes() []string { return []string{"image", "font", "media", "stylesheet"} }

// ActionTypes returns the action types a spec may use.
func ActionTypes() []string { return []string{"click", "scroll", "type", "wait"} }

// SpecError says what is wrong with one spec of a batch.
type SpecError struct {
	// Index is the spec's 0-based position in the submitted batch; -1 when
	// the spec was validated on its own.
	Index int
	// Field is the JSON path of the offending field, e.g. "actions[2].selector".
	Field string
	Msg   string
}

func (e *SpecError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("field %q: %s", e.Field, e.Msg)
	}
	return fmt.Sprintf("job %d: field %q: %s", e.Index, e.Field, e.Msg)
}

func specErr(field, format string, args ...any) *SpecError {
	return &SpecError{Index: -1, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks s against the bounds above. It returns nil or a *SpecError
// (with Index -1) naming the first offending field.
func (s *Spec) Validate() error {
	if err := s.validate(); err != nil {
		return err
	}
	return nil
}

func (s *Spec) validate() *SpecError {
	if _, err := ParseJobURL(s.URL); err != nil {
		return specErr("url", "%s", err.Msg)
	}
	if s.Wait != nil {
		if e := checkText("wait.selector", s.Wait.Selector, MaxSelectorLength); e != nil {
			return e
		}
		if s.Wait.Visible && strings.TrimSpace(s.Wait.Selector) == "" {
			return specErr("wait.visible", "needs wait.selector: the element that must be visible")
		}
		if s.Wait.Selector != "" {
			if msg := checkSelector(s.Wait.Selector); msg != "" {
				return specErr("wait.selector", "%s", msg)
			}
		}
	}
	if len(s.Actions) > MaxActions {
		return specErr("actions", "%d actions; at most %d are allowed", len(s.Actions), MaxActions)
	}
	for i, a := range s.Actions {
		if e := a.validate(fmt.Sprintf("actions[%d]", i)); e != nil {
			return e
		}
	}
	if e := checkText("extract", s.Extract, MaxExtractLength); e != nil {
		return e
	}
	if s.TimeoutMS != 0 && (s.TimeoutMS < MinTimeoutMS || s.TimeoutMS > MaxTimeoutMS) {
		return specErr("timeout_ms", "%d is out of range: use %d..%d milliseconds, or 0 for the default (%d)",
			s.TimeoutMS, MinTimeoutMS, MaxTimeoutMS, DefaultTimeoutMS)
	}
	for i, b := range s.Block {
		if !contains(BlockTypes(), b) {
			return specErr(fmt.Sprintf("block[%d]", i), "unknown resource type %q (allowed: %s)", b, strings.Join(BlockTypes(), ", "))
		}
	}
	if e := validateHeaders(s.Headers); e != nil {
		return e
	}
	if e := checkText("user_agent", s.UserAgent, MaxUserAgent); e != nil {
		return e
	}
	if hasControl(s.UserAgent) || strings.ContainsAny(s.UserAgent, "\r\n") {
		return specErr("user_agent", "contains a line break or control character")
	}
	if v := s.Viewport; v != nil {
		if v.Width < MinViewport || v.Width > MaxViewportWidth {
			return specErr("viewport.width", "%d is out of range %d..%d", v.Width, MinViewport, MaxViewportWidth)
		}
		if v.Height < MinViewport || v.Height > MaxViewportHeight {
			return specErr("viewport.height", "%d is out of range %d..%d", v.Height, MinViewport, MaxViewportHeight)
		}
	}
	if len(s.Cookies) > MaxCookies {
		return specErr("cookies", "%d cookies; at most %d are allowed", len(s.Cookies), MaxCookies)
	}
	for i, c := range s.Cookies {
		if e := c.validate(fmt.Sprintf("cookies[%d]", i), s.URL); e != nil {
			return e
		}
	}
	switch s.Isolation {
	case "", IsolationWipe, IsolationContext, IsolationShared:
	default:
		return specErr("isolation", "unknown value %q (want %s, %s or %s)", s.Isolation, IsolationWipe, IsolationContext, IsolationShared)
	}
	if s.SharedContext && s.Isolation != "" && s.Isolation != IsolationShared {
		return specErr("isolation", "%q contradicts shared_context (the older spelling of isolation %q): drop one", s.Isolation, IsolationShared)
	}
	if s.Proxy != "" {
		if e := validateProxy(s.Proxy); e != nil {
			return e
		}
		if s.SharedContext {
			return specErr("proxy", "a per-job proxy needs the job's own browser context; drop shared_context")
		}
		if s.Isolation == IsolationShared {
			return specErr("proxy", "a per-job proxy needs the job's own browser context, which isolation %q does not have", IsolationShared)
		}
	}
	if s.Priority < MinPriority || s.Priority > MaxPriority {
		return specErr("priority", "%d is out of range %d..%d", s.Priority, MinPriority, MaxPriority)
	}
	if s.MaxAttempts != 0 && (s.MaxAttempts < 1 || s.MaxAttempts > MaxMaxAttempts) {
		return specErr("max_attempts", "%d is out of range: use 1..%d, or 0 for the default (%d)",
			s.MaxAttempts, MaxMaxAttempts, DefaultAttempts)
	}
	if f := s.Follow; f != nil {
		if strings.TrimSpace(f.Selector) == "" {
			return specErr("follow.selector", "is required: a CSS selector of the links to follow")
		}
		if e := checkText("follow.selector", f.Selector, MaxSelectorLength); e != nil {
			return e
		}
		if msg := checkSelector(f.Selector); msg != "" {
			return specErr("follow.selector", "%s", msg)
		}
		if f.MaxDepth < 1 || f.MaxDepth > MaxFollowDepth {
			return specErr("follow.max_depth", "%d is out of range 1..%d", f.MaxDepth, MaxFollowDepth)
		}
		if f.MaxLinks < 0 || f.MaxLinks > MaxFollowLinks {
			return specErr("follow.max_links", "%d is out of range: use 1..%d, or 0 for the default (%d)",
				f.MaxLinks, MaxFollowLinks, DefaultMaxLinks)
		}
	}
	return nil
}

func (a *Action) validate(path string) *SpecError {
	if !contains(ActionTypes(), a.Type) {
		if a.Type == "" {
			return specErr(path+".type", "is required (one of: %s)", strings.Join(ActionTypes(), ", "))
		}
		return specErr(path+".type", "unknown action %q (allowed: %s)", a.Type, strings.Join(ActionTypes(), ", "))
	}
	if e := checkText(path+".selector", a.Selector, MaxSelectorLength); e != nil {
		return e
	}
	if a.Selector != "" {
		if msg := checkSelector(a.Selector); msg != "" {
			return specErr(path+".selector", "%s", msg)
		}
	}
	if a.Times < 0 || a.Times > MaxActionTimes {
		return specErr(path+".times", "%d is out of range 0..%d", a.Times, MaxActionTimes)
	}
	if a.Ms < 0 || a.Ms > MaxActionMS {
		return specErr(path+".ms", "%d is out of range 0..%d", a.Ms, MaxActionMS)
	}
	switch a.Type {
	case "click":
		if a.Selector == "" {
			return specErr(path+".selector", "is required for click")
		}
	case "type":
		if a.Selector == "" {
			return specErr(path+".selector", "is required for type")
		}
		if a.Text == "" {
			return specErr(path+".text", "is required for type")
		}
		if len(a.Text) > MaxTypeText {
			return specErr(path+".text", "%d bytes; at most %d are allowed", len(a.Text), MaxTypeText)
		}
	case "wait":
		if a.Selector == "" && a.Ms == 0 {
			return specErr(path, "wait needs a selector or ms")
		}
	}
	if a.Type != "type" && a.Text != "" {
		return specErr(path+".text", "only type takes text")
	}
	return nil
}

func (c *Cookie) validate(path, pageURL string) *SpecError {
	if c.Name == "" {
		return specErr(path+".name", "is required")
	}
	if !isToken(c.Name) {
		return specErr(path+".name", "%q is not a valid cookie name", c.Name)
	}
	if len(c.Value) > MaxCookieValue {
		return specErr(path+".value", "%d bytes; at most %d are allowed", len(c.Value), MaxCookieValue)
	}
	if strings.ContainsAny(c.Value, ";\r\n") || hasControl(c.Value) {
		return specErr(path+".value", "contains a ';' or a control character")
	}
	if c.Domain != "" && (len(c.Domain) > 253 || strings.ContainsAny(c.Domain, " /;:\r\n") || hasControl(c.Domain)) {
		return specErr(path+".domain", "%q is not a domain", c.Domain)
	}
	if c.Domain != "" {
		if msg := cookieDomainProblem(c.Domain, pageURL); msg != "" {
			return specErr(path+".domain", "%s", msg)
		}
	}
	if c.Path != "" && (!strings.HasPrefix(c.Path, "/") || len(c.Path) > 1024 || strings.ContainsAny(c.Path, ";\r\n") || hasControl(c.Path)) {
		return specErr(path+".path", "must start with / and hold no ';' or control character")
	}
	return nil
}

func validateHeaders(h map[string]string) *SpecError {
	if len(h) > MaxHeaders {
		return specErr("headers", "%d headers; at most %d are allowed", len(h), MaxHeaders)
	}
	size := 0
	for name, v := range h {
		field := fmt.Sprintf("headers[%q]", name)
		if !isToken(name) {
			return specErr(field, "%q is not a valid header name", name)
		}
		if browserHeaders[strings.ToLower(name)] {
			return specErr(field, "%s is set by the browser from the URL and the connection; it cannot be overridden", name)
		}
		if strings.ContainsAny(v, "\r\n") || hasControl(v) {
			return specErr(field, "the value contains a line break or control character")
		}
		size += len(name) + len(v)
	}
	if size > MaxHeaderBytes {
		return specErr("headers", "%d bytes of headers; at most %d are allowed", size, MaxHeaderBytes)
	}
	return nil
}

func validateProxy(p string) *SpecError {
	u, err := url.Parse(p)
	if err != nil {
		return specErr("proxy", "malformed proxy URL: %s", unwrapURLError(err))
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https", "socks5":
	case "":
		return specErr("proxy", "the proxy URL needs a scheme (http, https or socks5), e.g. socks5://host:1080")
	default:
		return specErr("proxy", "proxy scheme %q is not allowed (use http, https or socks5)", u.Scheme)
	}
	if u.Hostname() == "" {
		return specErr("proxy", "the proxy URL has no host")
	}
	if p := u.Port(); p == "" {
		return specErr("proxy", "the proxy URL needs a port, e.g. http://host:3128")
	} else if len(p) > 5 || portNumber(p) < 1 || portNumber(p) > 65535 {
		return specErr("proxy", "port %q is out of range 1..65535", p)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
		return specErr("proxy", "the proxy URL must be scheme://[user:password@]host:port, without a path or query")
	}
	if len(p) > MaxURLLength {
		return specErr("proxy", "%d bytes; at most %d are allowed", len(p), MaxURLLength)
	}
	return nil
}

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

// WithDefaults returns s with zero fields that have a default filled in:
// timeout_ms, max_attempts and follow.max_links. The queue stores specs this
// way, so a consumer reads the effective values.
func (s Spec) WithDefaults() Spec {
	if s.TimeoutMS == 0 {
		s.TimeoutMS = DefaultTimeoutMS
	}
	if s.MaxAttempts == 0 {
		s.MaxAttempts = DefaultAttempts
	}
	if s.Follow != nil && s.Follow.MaxLinks == 0 {
		f := *s.Follow
		f.MaxLinks = DefaultMaxLinks
		s.Follow = &f
	}
	return s
}

// Timeout is the effective render timeout of s.
func (s *Spec) Timeout() time.Duration {
	if s.TimeoutMS == 0 {
		return DefaultTimeoutMS * time.Millisecond
	}
	return time.Duration(s.TimeoutMS) * time.Millisecond
}

// preparedSpec is a validated spec ready for insertion.
type preparedSpec struct {
	json     []byte
	host     string
	dedupKey *string // set for crawl roots (spec.follow)
	priority int
	attempts int
}

// prepare validates s, applies defaults and encodes it. The error is a
// *SpecError carrying index.
func prepare(index int, s Spec) (preparedSpec, error) {
	if e := s.validate(); e != nil {
		e.Index = index
		return preparedSpec{}, e
	}
	u, _ := ParseJobURL(s.URL)
	s = s.WithDefaults()
	b, err := json.Marshal(s)
	if err != nil {
		return preparedSpec{}, &SpecError{Index: index, Field: "", Msg: "cannot encode: " + err.Error()}
	}
	if len(b) > MaxSpecBytes {
		return preparedSpec{}, &SpecError{Index: index, Field: "(spec)",
			Msg: fmt.Sprintf("the spec is %d bytes as JSON; at most %d are allowed", len(b), MaxSpecBytes)}
	}
	p := preparedSpec{json: b, host: HostKey(u), priority: s.Priority, attempts: s.MaxAttempts}
	if s.Follow != nil {
		k := DedupKey(u)
		p.dedupKey = &k
	}
	return p, nil
}

func checkText(field, v string, maxLen int) *SpecError {
	if len(v) > maxLen {
		return specErr(field, "%d bytes; at most %d are allowed", len(v), maxLen)
	}
	if !utf8.ValidString(v) {
		return specErr(field, "is not valid UTF-8")
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return true
		}
	}
	return false
}

// browserHeaders are request headers the browser sets itself: a job that
// set them would be refused by Chrome or would break the request.
var browserHeaders = map[string]bool{"host": true, "content-length": true, "transfer-encoding": true,
	"connection": true, "keep-alive": true, "upgrade": true, "te": true, "trailer": true, "proxy-connection": true}

// cookieDomainProblem says why a cookie's domain cannot be set for a job on
// pageURL, or "": it must be the page's host or a parent of it, and not a
// public suffix (".", "com", "co.uk", "github.io"), on which Chrome refuses to
// set a cookie and which would hand the cookie to every site under it.
func cookieDomainProblem(domain, pageURL string) string {
	d := strings.ToLower(strings.TrimPrefix(domain, "."))
	if d == "" || strings.HasSuffix(d, ".") || strings.Contains(d, "..") {
		return fmt.Sprintf("%q is not a domain", domain)
	}
	u, err := url.Parse(pageURL)
	if err != nil {
		return ""
	}
	host := strings.ToLower(u.Hostname())
	if d == host {
		return ""
	}
	if !strings.HasSuffix(host, "."+d) || net.ParseIP(host) != nil {
		return fmt.Sprintf("%q is not the job's host %s or a parent domain of it: the browser would not send the cookie there", domain, host)
	}
	if _, err := publicsuffix.EffectiveTLDPlusOne(d); err != nil {
		return fmt.Sprintf("%q is a public suffix: a cookie there would go to every site under it", domain)
	}
	return ""
}

// tokenRE is RFC 9110's token: the characters allowed in header and cookie names.
var tokenRE = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")

func isToken(s string) bool { return len(s) <= 256 && tokenRE.MatchString(s) }

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// nodeIDRE bounds node ids so that a node's NOTIFY channel name
// ("browserfarm_node." + id) fits PostgreSQL's 63-byte identifier limit.
var nodeIDRE = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,%d}$`, MaxNodeIDLength-1))

// MaxNodeIDLength is the longest node id.
const MaxNodeIDLength = 46

// ValidateNodeID checks a node id: 1..MaxNodeIDLength characters of letters,
// digits and ". _ : -", starting with a letter or digit.
func ValidateNodeID(id string) error {
	if !nodeIDRE.MatchString(id) {
		return fmt.Errorf("%w %q: use 1..%d letters, digits, '.', '_', ':' or '-', starting with a letter or digit", ErrBadNodeID, id, MaxNodeIDLength)
	}
	return nil
}
