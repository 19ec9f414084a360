package farm

import (
	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// SpecRequest maps a job's spec to the browser's render request; batchID
// is the job's batch, the cache scope of a spec with cache "batch". The
// spec was validated at submit, where the queue also stored its defaults;
// the timeout is the spec's (jobqueue.Spec.Timeout), so a render is bounded
// the same on every node.
func SpecRequest(s jobqueue.Spec, batchID string) browser.Request {
	req := browser.Request{
		URL:        s.URL,
		Extract:    s.Extract,
		HTML:       s.HTML,
		Screenshot: s.Screenshot,
		Timeout:    s.Timeout(),
		Block:      s.Block,
		Headers:    s.Headers,
		UserAgent:  s.UserAgent,
		Proxy:      s.Proxy,
		Isolation:  browser.Isolation(s.EffectiveIsolation()),
	}
	if s.Cache == jobqueue.CacheBatch {
		req.CacheScope = "batch " + batchID
	}
	if s.Wait != nil {
		req.Wait = browser.Wait{Selector: s.Wait.Selector, Visible: s.Wait.Visible, NetworkIdle: s.Wait.NetworkIdle}
	}
	for _, a := range s.Actions {
		req.Actions = append(req.Actions, browser.Action{
			Type: a.Type, Selector: a.Selector, Text: a.Text, Times: a.Times, Ms: a.Ms,
		})
	}
	if s.Viewport != nil {
		req.Viewport = browser.Viewport{Width: s.Viewport.Width, Height: s.Viewport.Height, Mobile: s.Viewport.Mobile}
	}
	for _, ck := range s.Cookies {
		req.Cookies = append(req.Cookies, browser.Cookie{
			Name: ck.Name, Value: ck.Value, Domain: ck.Domain, Path: ck.Path, Secure: ck.Secure, HTTPOnly: ck.HTTPOnly,
		})
	}
	if s.Follow != nil {
		// The queue keeps the first MaxLinks links that pass its host and
		// duplicate filters, so the page is asked for some more than that.
		limit := s.Follow.MaxLinks
		if limit == 0 {
			limit = jobqueue.DefaultMaxLinks
		}
		req.FollowSelector = s.Follow.Selector
		req.FollowMax = min(jobqueue.LinksAskedPerFollowed*limit, jobqueue.MaxCollectedLinks)
	}
	return req
}

// limitRequest holds a render to the node's result limits: the browser
// enforces them in the page, the queue again before storing.
func limitRequest(req *browser.Request, l jobqueue.ResultLimits) {
	req.MaxDataBytes = l.DataBytes
	req.MaxScreenshotBytes = l.ScreenshotBytes
	req.MaxConsoleErrors = l.ConsoleErrors
}

// messageBound is the largest answer from Chrome a node reads
// (browser.Options.MaxMessageBytes): the browser's default, or more when a
// result cap lets an answer exceed it. The page measures an extract's JSON
// against its cap, and Chrome sends that JSON as a string: escaped, up to
// 6 bytes a character (\u00XX). A screenshot comes as base64: 4 bytes for
// every 3 of the PNG.
func messageBound(l jobqueue.ResultLimits) int {
	return max(browser.DefaultMaxMessageBytes, 6*l.DataBytes+1<<20, (l.ScreenshotBytes+2)/3*4+1<<20)
}

// ResultRecord maps a render's result to the queue's result row.
func ResultRecord(r *browser.Result) jobqueue.Result {
	return jobqueue.Result{
		FinalURL:      r.FinalURL,
		Status:        r.Status,
		Title:         r.Title,
		Data:          r.Data,
		HTML:          r.HTML,
		HTMLTruncated: r.HTMLTruncated,
		Screenshot:    r.Screenshot,
		ConsoleErrors: r.ConsoleErrors,
		Links:         r.Links,
		// Links the page had past FollowMax: the queue adds those past max_links.
		LinksOverLimit: r.LinksOmitted,
		Timings: jobqueue.Timings{
			NavigationMS: r.Timings.Navigation.Milliseconds(),
			WaitMS:       r.Timings.Wait.Milliseconds(),
			ActionsMS:    r.Timings.Actions.Milliseconds(),
			ExtractMS:    r.Timings.Extract.Milliseconds(),
			TotalMS:      r.Timings.Total.Milliseconds(),
		},
	}
}
