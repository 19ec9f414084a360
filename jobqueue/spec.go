package jobqueue

import "github.com/browserfarm/browserfarm/internal/jobspec"

// Spec is what a user submits: one page to render and what to take from it.
// It is stored as JSON in jobs.spec; the JSON names below are the public API
// (CLI JSON-lines input, HTTP API bodies) and must stay stable.
type Spec struct {
	// URL is the page to load. Only http and https are accepted.
	URL string `json:"url"`
	// Wait says when the page counts as loaded. Nil means: the load event.
	Wait *Wait `json:"wait,omitempty"`
	// Actions run in order after the wait and before extraction.
	Actions []Action `json:"actions,omitempty"`
	// Extract is a JavaScript expression; its JSON value is the result's data.
	Extract string `json:"extract,omitempty"`
	// HTML asks for the page's outer HTML (size-capped).
	HTML bool `json:"html,omitempty"`
	// Screenshot asks for a PNG of the viewport.
	Screenshot bool `json:"screenshot,omitempty"`
	// TimeoutMS bounds the whole render (navigation, wait, actions, extract).
	// 0 means the default, DefaultTimeoutMS.
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// Block lists resource types not to load: image, font, media, stylesheet.
	Block []string `json:"block,omitempty"`
	// Headers are extra HTTP request headers.
	Headers map[string]string `json:"headers,omitempty"`
	// UserAgent overrides Chrome's user agent.
	UserAgent string `json:"user_agent,omitempty"`
	// Viewport sets the window size; nil means 1280x800.
	Viewport *Viewport `json:"viewport,omitempty"`
	// Cookies are set before navigation.
	Cookies []Cookie `json:"cookies,omitempty"`
	// Proxy is a proxy server URL for this job only (http://user:pass@host:port,
	// socks5://host:port). The job gets a brand-new browser context behind
	// it; it cannot be combined with isolation "shared".
	Proxy string `json:"proxy,omitempty"`
	// Isolation is what the job may see of the jobs that ran before it on
	// the same browser session:
	//   "wipe" (the default, also ""): a browser context reused between jobs
	//     and wiped in between — no cookie, storage, cache, service worker,
	//     permission, credential or history of another job is visible;
	//   "context": a brand-new browser context for this job alone;
	//   "shared": none — Chrome's default context, where cookies, storage,
	//     cache and credentials persist between jobs (a scraping session).
	Isolation string `json:"isolation,omitempty"`
	// Cache widens what an isolation "wipe" job may read of the HTTP cache
	// (and the compiled scripts Chrome keeps with it):
	//   "job" (the default, also ""): only its own — the wipe clears it;
	//   "batch": also what the jobs of its batch (a crawl's children are
	//     in the seed's batch) left on the same browser session, so that a
	//     site's scripts, styles and images are fetched and compiled once
	//     per session rather than once per page. Everything else is still
	//     wiped between the jobs. Only with isolation "wipe" and no proxy.
	Cache string `json:"cache,omitempty"`
	// SharedContext is the older spelling of isolation "shared", still
	// accepted.
	SharedContext bool `json:"shared_context,omitempty"`
	// Priority: higher runs first. Range -1000..1000.
	Priority int `json:"priority,omitempty"`
	// MaxAttempts: how many times the job may run. 0 means the default (3); range 1..20.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Follow enqueues links found on the page as child jobs.
	Follow *Follow `json:"follow,omitempty"`
}

// Isolation values of Spec.Isolation; "" means IsolationWipe.
const (
	IsolationWipe    = jobspec.IsolationWipe
	IsolationContext = jobspec.IsolationContext
	IsolationShared  = jobspec.IsolationShared
)

// Cache values of Spec.Cache; "" means CacheJob.
const (
	CacheJob   = jobspec.CacheJob
	CacheBatch = jobspec.CacheBatch
)

// EffectiveIsolation is the spec's isolation with the default applied and
// shared_context folded in.
func (s Spec) EffectiveIsolation() string {
	switch {
	case s.SharedContext:
		return IsolationShared
	case s.Isolation == "":
		return IsolationWipe
	}
	return s.Isolation
}

// Wait is the load condition of a page.
type Wait struct {
	// Selector must match an element: present in the DOM (the default), or
	// with Visible also rendered with a width and a height.
	Selector string `json:"selector,omitempty"`
	// Visible makes the Selector wait for a visible element, not just one in
	// the DOM (an empty div is present but never visible).
	Visible bool `json:"visible,omitempty"`
	// NetworkIdle waits until no request has been in flight for 500 ms.
	NetworkIdle bool `json:"network_idle,omitempty"`
}

// Action is one step performed on the page before extraction.
type Action struct {
	// Type is one of: click, scroll, type, wait.
	Type string `json:"type"`
	// Selector: the element to click or type into; for wait, the element to wait for.
	Selector string `json:"selector,omitempty"`
	// Text is what "type" types.
	Text string `json:"text,omitempty"`
	// Times repeats click or scroll (scroll to the bottom N times, for infinite lists). 0 means 1.
	Times int `json:"times,omitempty"`
	// Ms: for wait without a selector, how long to pause; for scroll and click,
	// the pause after each repetition so new content can arrive.
	Ms int `json:"ms,omitempty"`
}

// Viewport is the browser window size.
type Viewport struct {
	Width  int  `json:"width"`
	Height int  `json:"height"`
	Mobile bool `json:"mobile,omitempty"`
}

// Cookie is set in the job's browser context before navigation.
type Cookie struct {
	Name     string `json:"name"`
	Value    string `json:"value"`
	Domain   string `json:"domain,omitempty"` // default: the URL's host
	Path     string `json:"path,omitempty"`
	Secure   bool   `json:"secure,omitempty"`
	HTTPOnly bool   `json:"http_only,omitempty"`
}

// Follow turns links on a rendered page into child jobs.
type Follow struct {
	// Selector picks the links (elements with an href), e.g. "a.next".
	Selector string `json:"selector"`
	// MaxDepth: children of depth MaxDepth are not followed further. 0
	// means DefaultFollowDepth (1, the seed's links only); at most
	// MaxFollowDepth (10).
	MaxDepth int `json:"max_depth,omitempty"`
	// AnyHost allows links to other hosts; by default only the same host is followed.
	AnyHost bool `json:"any_host,omitempty"`
	// MaxLinks caps the links followed from one page; links past it are
	// counted in the result's links_over_limit. 0 means DefaultMaxLinks
	// (100); at most MaxFollowLinks (10,000).
	MaxLinks int `json:"max_links,omitempty"`
}
