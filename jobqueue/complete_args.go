package jobqueue

// What one CompleteMany statement carries: each completion's result made
// storable (bounded, valid UTF-8 and JSON) and laid out as the statement's
// column arrays.

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf16"
)

// completeArgs are the column arrays of one CompleteMany statement.
type completeArgs struct {
	jobIDs        []int64
	nodeIDs       []string
	finalURLs     []string
	statuses      []int32
	titles        []string
	data          []*string
	html          []*string
	htmlTruncated []bool
	screenshots   [][]byte
	consoleErrors []string
	timings       []string
	links         []string
	incarnations  []int64
	linksOver     []int32
	blobs         []*string
	// followed links, flattened
	linkJob  []int64
	linkURL  []string
	linkHost []string
	linkKey  []string
	linkOrd  []int32
	// linkOnFinal: the link is on the host of the page's final URL (its
	// job's after a redirect to another host), which a crawl follows too.
	linkOnFinal []bool
}

// add appends one completion to the arrays, after making its fields storable.
func (a *completeArgs) add(c Completion, lim ResultLimits) error {
	if err := ValidateNodeID(c.NodeID); err != nil {
		return err
	}
	r := c.Result
	if len(r.Data) > lim.DataBytes {
		return tooLarge("data_bytes", len(r.Data), lim.DataBytes)
	}
	if len(r.Screenshot) > lim.ScreenshotBytes {
		return tooLarge("screenshot_bytes", len(r.Screenshot), lim.ScreenshotBytes)
	}
	var data *string
	if len(bytes.TrimSpace(r.Data)) > 0 {
		if !json.Valid(r.Data) {
			return &ResultError{Class: ClassResultInvalid, Msg: "result data is not valid JSON"}
		}
		s := string(jsonbSafe(r.Data))
		data = &s
	}
	var html *string
	if r.HTML != "" {
		s := cleanText(r.HTML, 0)
		html = &s
	}
	console := make([]string, 0, min(len(r.ConsoleErrors), lim.ConsoleErrors))
	for i, line := range r.ConsoleErrors {
		if i == lim.ConsoleErrors {
			break
		}
		console = append(console, cleanText(line, maxConsoleLine))
	}
	consoleJSON, err := json.Marshal(console)
	if err != nil {
		return err
	}
	timingsJSON, err := json.Marshal(r.Timings)
	if err != nil {
		return err
	}
	links, over := r.Links, r.LinksOverLimit
	if len(links) > MaxCollectedLinks {
		links, over = links[:MaxCollectedLinks], over+len(links)-MaxCollectedLinks
	}
	finalHost := "" // only a page with links needs it
	if len(links) > 0 {
		if fu, err := ParseJobURL(r.FinalURL); err == nil {
			finalHost = HostKey(fu)
		}
	}
	kept := make([]string, 0, len(links))
	keys := make(map[string]bool, len(links))
	for _, l := range links {
		if len(l) > MaxURLLength {
			// Cut short it would be another page, followed and stored as
			// this one: left out, and counted with the links over the
			// limit.
			over++
			continue
		}
		l = cleanText(l, MaxURLLength)
		kept = append(kept, l)
		u, perr := ParseJobURL(l)
		if perr != nil {
			continue // not a page the farm may render (mailto:, javascript:, …)
		}
		u.Fragment, u.RawFragment = "", ""
		key := DedupKey(u)
		if keys[key] {
			continue
		}
		keys[key] = true
		a.linkJob = append(a.linkJob, c.JobID)
		a.linkURL = append(a.linkURL, u.String())
		a.linkHost = append(a.linkHost, HostKey(u))
		a.linkKey = append(a.linkKey, key)
		a.linkOrd = append(a.linkOrd, int32(len(keys)))
		a.linkOnFinal = append(a.linkOnFinal, finalHost != "" && a.linkHost[len(a.linkHost)-1] == finalHost)
	}
	linksJSON, err := json.Marshal(kept)
	if err != nil {
		return err
	}

	a.jobIDs = append(a.jobIDs, c.JobID)
	a.nodeIDs = append(a.nodeIDs, c.NodeID)
	a.finalURLs = append(a.finalURLs, cleanText(r.FinalURL, maxFinalURL))
	a.statuses = append(a.statuses, int32(r.Status))
	a.titles = append(a.titles, cleanText(r.Title, maxTitle))
	a.data = append(a.data, data)
	a.html = append(a.html, html)
	a.htmlTruncated = append(a.htmlTruncated, r.HTMLTruncated)
	a.screenshots = append(a.screenshots, r.Screenshot)
	a.consoleErrors = append(a.consoleErrors, string(consoleJSON))
	a.timings = append(a.timings, string(timingsJSON))
	a.links = append(a.links, string(linksJSON))
	a.incarnations = append(a.incarnations, c.Incarnation)
	a.linksOver = append(a.linksOver, int32(min(over, 1<<30)))
	var blobs *string
	if len(r.Blobs) > 0 {
		b, err := json.Marshal(r.Blobs)
		if err != nil {
			return err
		}
		s := string(b)
		blobs = &s
	}
	a.blobs = append(a.blobs, blobs)
	return nil
}

// jsonbSafe rewrites the escapes jsonb refuses to \ufffd, as the other text
// of a result is cleaned: \u0000, and a surrogate escape that is not one
// half of a pair (JSON.stringify writes a string's lone surrogate, such as
// half an emoji cut by slice, that way). Escaped backslashes are respected:
// in `\\u0000` the u0000 is literal text.
func jsonbSafe(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u0000`)) && !bytes.Contains(b, []byte(`\ud`)) && !bytes.Contains(b, []byte(`\uD`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		v, ok := unicodeEscape(b[i:])
		switch {
		case !ok:
			out = append(out, b[i], b[i+1])
			i++
		case v == 0 || utf16.IsSurrogate(v) && (v >= 0xdc00 || !lowSurrogateAt(b[i+6:])):
			out = append(out, `\ufffd`...)
			i += 5
		case utf16.IsSurrogate(v):
			// A pair: both halves as they are.
			out = append(out, b[i:i+12]...)
			i += 11
		default:
			out = append(out, b[i:i+6]...)
			i += 5
		}
	}
	return out
}

// unicodeEscape reads the \uXXXX escape b begins with, if it does.
func unicodeEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[2:6]), 16, 16)
	return rune(v), err == nil
}

// lowSurrogateAt reports whether b begins with the escape of a low
// surrogate, the second half of a pair.
func lowSurrogateAt(b []byte) bool {
	v, ok := unicodeEscape(b)
	return ok && v >= 0xdc00 && v <= 0xdfff
}
