package jobqueue

import "github.com/browserfarm/browserfarm/internal/jobspec"

// Bounds of a Spec. A job is data a stranger may submit over the HTTP API, so
// every field is bounded before it reaches the database or a browser. The
// bounds and defaults the browser applies too are defined once, in
// internal/jobspec, and named here; the rest are the queue's own.
const (
	MaxSpecBytes      = 64 << 10 // the whole spec as JSON
	MaxURLLength      = jobspec.MaxURLLength
	MaxExtractLength  = 32 << 10
	MaxSelectorLength = 1024
	MaxActions        = 50
	MaxActionTimes    = jobspec.MaxActionTimes
	MaxActionMS       = jobspec.MaxActionMS // one wait or pause
	MaxTypeText       = 4096
	MaxHeaders        = 50
	MaxHeaderBytes    = 16 << 10 // names and values together
	MaxCookies        = 50
	MaxCookieValue    = 4096
	MaxUserAgent      = 1024
	MinTimeoutMS      = jobspec.MinTimeoutMS
	MaxTimeoutMS      = jobspec.MaxTimeoutMS
	DefaultTimeoutMS  = jobspec.DefaultTimeoutMS
	MinPriority       = -1000
	MaxPriority       = 1000
	MaxMaxAttempts    = 20
	DefaultAttempts   = 3
	MinViewport       = jobspec.MinViewport
	MaxViewportWidth  = jobspec.MaxViewportWidth
	MaxViewportHeight = jobspec.MaxViewportHeight
	// MaxScreenshotPixels bounds width × height of a viewport with a
	// screenshot.
	MaxScreenshotPixels = jobspec.MaxScreenshotPixels
	MaxFollowDepth      = 10
	// DefaultFollowDepth is follow.max_depth when a spec leaves it 0 (or
	// out): the one default of the spec, the CLI (--follow-depth) and the
	// API.
	DefaultFollowDepth = 1
	// MaxFollowLinks bounds follow.max_links.
	MaxFollowLinks = jobspec.MaxFollowLinks
	// DefaultMaxLinks is follow.max_links when a spec leaves it 0: the one
	// default of the spec, the CLI (--follow-max-links) and the API.
	DefaultMaxLinks = jobspec.DefaultMaxLinks
	// LinksAskedPerFollowed is how many links a page is asked for per link
	// it may follow.
	LinksAskedPerFollowed = jobspec.LinksAskedPerFollowed
	// MaxCollectedLinks is the most links taken from one page.
	MaxCollectedLinks = jobspec.MaxCollectedLinks
)
