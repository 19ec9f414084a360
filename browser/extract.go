package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// extract evaluates the extract expression. With a cap, the expression runs
// inside a wrapper that measures its JSON in the page and answers with the
// size instead of the value when it is over the cap, so a page cannot make
// the node read hundreds of megabytes. JSON.stringify counts UTF-16 units,
// never more than the UTF-8 bytes, so what it lets through is checked again
// in bytes here. A value JSON cannot hold (cyclic, BigInt) is returned as
// before and measured here.
func (t *tab) extract(ctx context.Context, expr string, maxBytes int) (json.RawMessage, error) {
	if maxBytes > 0 {
		expr = fmt.Sprintf(jsExtractCapped, strings.TrimRight(expr, " \t\r\n;"), maxBytes, jsString(extractOverKey))
	}
	v, err := t.eval(ctx, expr, false)
	if err != nil {
		return nil, fmt.Errorf("extract: %w", err)
	}
	if maxBytes > 0 {
		var over map[string]int64
		if json.Unmarshal(v, &over) == nil && len(over) == 1 && over[extractOverKey] > 0 {
			return nil, newErr(ClassTooLarge, false, "extract value is over %d bytes (%d characters of JSON), the cap (result limit data_bytes)",
				maxBytes, over[extractOverKey])
		}
		if len(v) > maxBytes {
			return nil, newErr(ClassTooLarge, false, "extract value is %d bytes, over the cap of %d bytes (result limit data_bytes)", len(v), maxBytes)
		}
	}
	return v, nil
}

// extractOverKey names the size in the capped extract's over-cap answer.
const extractOverKey = "__browserfarm_extract_over_cap__"

// jsExtractCapped wraps an extract expression (%s), its cap (%d) and the
// over-cap key (%s). The expression sits on lines of its own so that a
// trailing line comment cannot swallow the wrapper.
const jsExtractCapped = `(async () => { const v = await (
%s
); let n = 0; try { const s = JSON.stringify(v); n = s === undefined ? 0 : s.length; } catch (e) {}
if (n > %[2]d) { return {[%[3]s]: n}; } return v; })()`

// meta reads title, final URL, HTML and links in one round trip.
func (t *tab) meta(ctx context.Context, j *job, res *Result) error {
	follow := "null"
	if j.FollowSelector != "" {
		follow = jsString(j.FollowSelector)
	}
	// The HTML is cut in the page (in UTF-16 units, a safe upper bound of
	// bytes/1) so that a huge DOM does not cross the pipe whole.
	expr := fmt.Sprintf("(%s)(%t, %d, %s, %d)", jsMeta, j.HTML, j.HTMLMaxBytes, follow, j.FollowMax)
	v, err := t.eval(ctx, expr, false)
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
