package browser

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// TestReadOneDocument: a page that goes on to another document just after
// its load (a meta refresh, a script) is read whole from one document: the
// extract's own URL and title are the result's, and its HTML is that
// document's. Before, the extract could run on the first page, or on the
// new one before it parsed, while the URL, title and HTML were the new
// page's (QA: 4 of 6 meta refreshes).
func TestReadOneDocument(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	to := e.url("/page/3")
	for _, by := range []string{"meta", "script"} {
		for i := range 8 {
			res, err, _ := render(t, s, Request{
				URL:     e.url("/egress/navigate?by=" + by + "&to=" + url.QueryEscape(to) + "&i=" + string(rune('a'+i))),
				HTML:    true,
				Extract: `({u: location.href, t: document.title, parsed: document.readyState !== 'loading' && !!document.body})`,
			})
			if err != nil {
				t.Fatalf("%s %d: %v", by, i, err)
			}
			var d struct {
				U, T   string
				Parsed bool
			}
			if err := json.Unmarshal(res.Data, &d); err != nil {
				t.Fatal(err)
			}
			if d.U != res.FinalURL || d.T != res.Title || !d.Parsed || !strings.Contains(res.HTML, "<title>"+res.Title+"</title>") {
				t.Errorf("%s %d: the extract read %s (%q, parsed %v); the result says %s (%q), its HTML %.80q",
					by, i, d.U, d.T, d.Parsed, res.FinalURL, res.Title, res.HTML)
			}
		}
	}
	e.usable(t, s)
}
