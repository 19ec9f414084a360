package jobqueue

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/publicsuffix"

	"github.com/browserfarm/browserfarm/internal/jobspec"
)

// SpecError says what is wrong with one spec of a batch.
type SpecError struct {
	// Index is the spec's 0-based position in the submitted batch; -1 when
	// the spec was validated on its own.
	Index int
	// Field is the JSON path of the offending field, e.g. "actions[2].selector";
	// "" when the spec as a whole is wrong (malformed JSON, say).
	Field string
	Msg   string
}

func (e *SpecError) Error() string {
	msg := e.Msg
	if e.Field != "" {
		msg = fmt.Sprintf("field %q: %s", e.Field, e.Msg)
	}
	if e.Index < 0 {
		return msg
	}
	return fmt.Sprintf("job %d: %s", e.Index, msg)
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
			if msg := jobspec.CheckSelector(s.Wait.Selector); msg != "" {
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
	if s.Extract != "" {
		if err := jobspec.CheckExtract(s.Extract); err != nil {
			return specErr("extract", "%v", err)
		}
	}
	if s.TimeoutMS != 0 && (s.TimeoutMS < MinTimeoutMS || s.TimeoutMS > MaxTimeoutMS) {
		return specErr("timeout_ms", "%d is out of range: use %d..%d milliseconds, or 0 for the default (%d)",
			s.TimeoutMS, MinTimeoutMS, MaxTimeoutMS, DefaultTimeoutMS)
	}
	if e := s.checkPauses(); e != nil {
		return e
	}
	for i, b := range s.Block {
		if !slices.Contains(jobspec.BlockTypes(), b) {
			return specErr(fmt.Sprintf("block[%d]", i), "unknown resource type %q (allowed: %s)", b, strings.Join(jobspec.BlockTypes(), ", "))
		}
	}
	if e := validateHeaders(s.Headers, len(s.Cookies) > 0, s.UserAgent != ""); e != nil {
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
		if s.Screenshot {
			if err := jobspec.CheckScreenshotViewport(v.Width, v.Height); err != nil {
				return specErr("viewport", "%v", err)
			}
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
	switch s.Cache {
	case "", CacheJob:
	case CacheBatch:
		if s.SharedContext {
			return specErr("cache", "%q keeps the cache of a wiped browser context between jobs; shared_context (isolation %q) has none to keep: drop one of them", s.Cache, IsolationShared)
		}
		if err := jobspec.CheckCacheBatch(s.EffectiveIsolation(), s.Proxy != ""); err != nil {
			return specErr("cache", "%q: %v", s.Cache, err)
		}
	default:
		return specErr("cache", "unknown value %q (want %s or %s)", s.Cache, CacheJob, CacheBatch)
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
		if msg := jobspec.CheckSelector(f.Selector); msg != "" {
			return specErr("follow.selector", "%s", msg)
		}
		if f.MaxDepth < 0 || f.MaxDepth > MaxFollowDepth {
			return specErr("follow.max_depth", "%d is out of range: use 1..%d links deep, or 0 for the default (%d)",
				f.MaxDepth, MaxFollowDepth, DefaultFollowDepth)
		}
		if f.MaxLinks < 0 || f.MaxLinks > MaxFollowLinks {
			return specErr("follow.max_links", "%d is out of range: use 1..%d, or 0 for the default (%d)",
				f.MaxLinks, MaxFollowLinks, DefaultMaxLinks)
		}
	}
	return nil
}

// checkPauses refuses a spec whose fixed pauses reach its timeout
// (jobspec.CheckPauses), naming the action's ms that reaches it.
func (s *Spec) checkPauses() *SpecError {
	pauses := make([]int, len(s.Actions))
	for i, a := range s.Actions {
		pauses[i] = jobspec.ActionPauseMS(a.Type, a.Selector, a.Times, a.Ms)
	}
	i, err := jobspec.CheckPauses(s.TimeoutMS, s.Wait != nil && s.Wait.NetworkIdle, pauses)
	switch {
	case err == nil:
		return nil
	case i < 0:
		return specErr("wait.network_idle", "%v", err)
	}
	return specErr(fmt.Sprintf("actions[%d].ms", i), "%v", err)
}

func (a *Action) validate(path string) *SpecError {
	if !slices.Contains(jobspec.ActionTypes(), a.Type) {
		if a.Type == "" {
			return specErr(path+".type", "is required (one of: %s)", strings.Join(jobspec.ActionTypes(), ", "))
		}
		return specErr(path+".type", "unknown action %q (allowed: %s)", a.Type, strings.Join(jobspec.ActionTypes(), ", "))
	}
	if e := checkText(path+".selector", a.Selector, MaxSelectorLength); e != nil {
		return e
	}
	if a.Selector != "" {
		if msg := jobspec.CheckSelector(a.Selector); msg != "" {
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
	case jobspec.ActionClick:
		if a.Selector == "" {
			return specErr(path+".selector", "is required for click")
		}
	case jobspec.ActionType:
		if a.Selector == "" {
			return specErr(path+".selector", "is required for type")
		}
		if a.Text == "" {
			return specErr(path+".text", "is required for type")
		}
		if e := checkText(path+".text", a.Text, MaxTypeText); e != nil {
			return e
		}
	case jobspec.ActionWait:
		if a.Selector == "" && a.Ms == 0 {
			return specErr(path, "wait needs a selector or ms")
		}
	}
	if a.Type != jobspec.ActionType && a.Text != "" {
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
	// What Chrome's Network.setCookies refuses ("Invalid cookie fields", no
	// field named) would fail the job for good at its render: refused here.
	if len(c.Name)+len(c.Value) > MaxCookieValue {
		return specErr(path, "name and value are %d bytes together; the browser takes at most %d", len(c.Name)+len(c.Value), MaxCookieValue)
	}
	if strings.ContainsAny(c.Value, ";\r\n\t") || hasControl(c.Value) {
		return specErr(path+".value", "contains a ';', a tab or a control character")
	}
	if strings.Trim(c.Value, " ") != c.Value {
		return specErr(path+".value", "begins or ends with a space, which the browser refuses")
	}
	// The prefixes' rules (RFC 6265bis 4.1.3): __Secure- needs secure;
	// __Host- needs secure, no domain and the path /.
	if strings.HasPrefix(c.Name, "__Secure-") && !c.Secure {
		return specErr(path+".secure", "a __Secure- cookie must be secure")
	}
	if strings.HasPrefix(c.Name, "__Host-") && (!c.Secure || c.Domain != "" || cookiePath(c.Path, pageURL) != "/") {
		return specErr(path, "a __Host- cookie must be secure, with no domain and the path /")
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

func validateHeaders(h map[string]string, cookies, userAgent bool) *SpecError {
	if len(h) > MaxHeaders {
		return specErr("headers", "%d headers; at most %d are allowed", len(h), MaxHeaders)
	}
	size := 0
	for name, v := range h {
		field := fmt.Sprintf("headers[%q]", name)
		if !isToken(name) {
			return specErr(field, "%q is not a valid header name", name)
		}
		if err := jobspec.CheckHeaderName(name); err != nil {
			return specErr(field, "%v", err)
		}
		if err := jobspec.CheckHeaderConflict(name, cookies, userAgent); err != nil {
			return specErr(field, "%v", err)
		}
		if strings.ContainsAny(v, "\r\n") || hasControl(v) {
			return specErr(field, "the value contains a line break or control character")
		}
		size += len(name) + len(v)
	}
	if size > MaxHeaderBytes {
		return specErr("headers", "%d bytes of headers; at most %d are allowed", size, MaxHeaderBytes)
	}
	// Header names are case-insensitive: the browser sends one of two that
	// differ only in case, whichever it meets last.
	names := slices.Sorted(maps.Keys(h))
	seen := make(map[string]string, len(names))
	for _, name := range names {
		if first, ok := seen[strings.ToLower(name)]; ok {
			return specErr(fmt.Sprintf("headers[%q]", name), "names the same header as %q (names are case-insensitive); give it once", first)
		}
		seen[strings.ToLower(name)] = name
	}
	return nil
}

func validateProxy(p string) *SpecError {
	if len(p) > MaxURLLength {
		return specErr("proxy", "%d bytes; at most %d are allowed", len(p), MaxURLLength)
	}
	if _, err := jobspec.ParseProxy(p); err != nil {
		return specErr("proxy", "%s", err)
	}
	return nil
}

func checkText(field, v string, maxLen int) *SpecError {
	if len(v) > maxLen {
		return specErr(field, "%d bytes; at most %d are allowed", len(v), maxLen)
	}
	if !utf8.ValidString(v) {
		return specErr(field, "is not valid UTF-8")
	}
	// PostgreSQL's jsonb, where specs are kept, cannot hold it: the batch
	// would fail as a whole at insert instead of here, naming the field.
	if strings.IndexByte(v, 0) >= 0 {
		return specErr(field, "contains a NUL character (\\u0000)")
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

// cookiePath is the path a cookie set for pageURL gets: its own, or the
// URL's default path (RFC 6265 5.1.4), as the browser derives it.
func cookiePath(p, pageURL string) string {
	if p != "" {
		return p
	}
	u, err := url.Parse(pageURL)
	if err != nil || !strings.HasPrefix(u.Path, "/") || strings.Count(u.Path, "/") == 1 {
		return "/"
	}
	return u.Path[:strings.LastIndexByte(u.Path, '/')]
}

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
