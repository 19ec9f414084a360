package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/chromedp/cdproto/runtime"

	"github.com/browserfarm/browserfarm/internal/jobspec"
)

// extract evaluates the extract expression in the page's world (it reads
// the page's variables) inside a wrapper that answers only with a primitive:
// the value's JSON text, measured in the page, when it is at most maxBytes
// UTF-16 units, else that size as a number. A primitive string's length is
// the one thing a page cannot fake, and Chrome sends the string as it is,
// so no more than the cap crosses into Go however the page replaced
// JSON.stringify, toJSON or getters; what JSON.stringify answers is the
// value (toJSON honoured). The text is checked here again in bytes (a
// UTF-16 unit is up to three), and for being JSON: a page may replace
// JSON.stringify, and lie about its own data, but not hand the node
// something else. Top-level NaN, ±Infinity, -0 and bigints, which JSON
// cannot hold, come back as their names ("NaN", "12n"); a value
// JSON.stringify throws on (a cycle, a nested bigint) fails the job with
// ClassExtract. maxBytes must be positive (prepare's default).
func (t *tab) extract(ctx context.Context, expr string, maxBytes int) (json.RawMessage, error) {
	expr = jobspec.WrapExtract(expr, maxBytes)
	r, err := t.evalIn(ctx, "", expr)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("extract: its promise did not settle before the job's timeout (or its script did not end): %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("extract: %w", err)
	}
	switch {
	case r.Type == runtime.RemoteObjectTypeString:
		var s string
		if err := json.Unmarshal(r.Value, &s); err != nil {
			return nil, fmt.Errorf("extract: reading the JSON text: %w", err)
		}
		if len(s) > maxBytes {
			return nil, newErr(ClassTooLarge, false, "extract value is %d bytes, over the cap of %d bytes (result limit data_bytes)", len(s), maxBytes)
		}
		if !json.Valid([]byte(s)) {
			return nil, newErr(ClassExtract, false, "extract: the page's JSON.stringify answered %d bytes that are not JSON", len(s))
		}
		return json.RawMessage(s), nil
	case r.Type == runtime.RemoteObjectTypeNumber && r.UnserializableValue == "":
		var n int64
		if err := json.Unmarshal(r.Value, &n); err != nil {
			return nil, fmt.Errorf("extract: reading the size of the value: %w", err)
		}
		return nil, newErr(ClassTooLarge, false, "extract value is over %d bytes (%d characters of JSON), the cap (result limit data_bytes)", maxBytes, n)
	case r.Type == runtime.RemoteObjectTypeUndefined, r.UnserializableValue != "":
		return remoteValue(r), nil
	}
	return nil, fmt.Errorf("extract: the wrapper answered a %s", r.Type)
}

// maxMetaText bounds the title and the final URL a page can send, in UTF-16
// units.
const maxMetaText = 16 << 10

// meta reads title, final URL, HTML and links in one round trip.
func (t *tab) meta(ctx context.Context, j *job, res *Result) error {
	follow := "null"
	if j.FollowSelector != "" {
		follow = jsString(j.FollowSelector)
	}
	// The HTML is cut in the page (in UTF-16 units, a safe upper bound of
	// bytes/1) so that a huge DOM does not cross the pipe whole.
	expr := fmt.Sprintf("(%s)(%t, %d, %s, %d, %d, %d)", jsMeta, j.HTML, j.HTMLMaxBytes, follow, j.FollowMax, maxMetaText, jobspec.MaxURLLength)
	v, err := t.evalFarm(ctx, expr)
	if err != nil {
		return selectorError(err)
	}
	var m struct {
		Title     string   `json:"title"`
		URL       string   `json:"url"`
		HTML      string   `json:"html"`
		Truncated bool     `json:"truncated"`
		Links     []string `json:"links"`
		More      int      `json:"more"`
	}
	if err := json.Unmarshal(v, &m); err != nil {
		return fmt.Errorf("reading the page's metadata: %w", err)
	}
	res.Title, res.FinalURL, res.Links, res.LinksOmitted = m.Title, m.URL, m.Links, m.More
	if j.HTML {
		res.HTML, res.HTMLTruncated = m.HTML, m.Truncated
		if len(res.HTML) > j.HTMLMaxBytes {
			res.HTML, res.HTMLTruncated = cutUTF8(res.HTML, j.HTMLMaxBytes), true
		}
	}
	return nil
}

// cutUTF8 cuts s to at most n bytes without splitting a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
