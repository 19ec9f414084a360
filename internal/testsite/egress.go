package testsite

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"strings"
)

// Pages that try to reach other addresses, for the egress policy's tests.
// They only point the browser somewhere; the farm's policy decides whether
// it gets there.

// egressRedirect answers 302 to ?to=.
func (s *site) egressRedirect(w http.ResponseWriter, r *http.Request) {
	to := r.URL.Query().Get("to")
	if !strings.HasPrefix(to, "http://") && !strings.HasPrefix(to, "https://") {
		http.Error(w, "want ?to=http(s)://…", http.StatusBadRequest)
		return
	}
	http.Redirect(w, r, to, http.StatusFound)
}

// redirectTo redirects (302) to ?to=, whatever its scheme: the Location
// header as given, which http.Redirect would make relative.
func (s *site) redirectTo(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Location", r.URL.Query().Get("to"))
	w.WriteHeader(http.StatusFound)
}

// egressPage fetches every ?fetch= and frames every ?frame=, then writes
// what each fetch got into #out (one line each: the URL and "ok <status>
// <body>" or "error") and shows #ready.
func (s *site) egressPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	urls, err := json.Marshal(q["fetch"])
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><title>egress</title></head><body><pre id="out"></pre>`)
	for _, f := range q["frame"] {
		fmt.Fprintf(&b, `<iframe src="%s"></iframe>`, html.EscapeString(f))
	}
	// json.Marshal escapes < and >, so the list cannot end the script.
	fmt.Fprintf(&b, `<script type="application/json" id="urls">%s</script>`, urls)
	b.WriteString(`<script>
const urls = JSON.parse(document.getElementById('urls').textContent) || [];
Promise.all(urls.map(u => fetch(u, {mode: 'no-cors'}).then(r => u + ' ok ' + r.status, () => u + ' error'))).then(lines => {
  document.getElementById('out').textContent = lines.join('\n');
  const d = document.createElement('div'); d.id = 'ready'; d.textContent = 'ready'; document.body.append(d);
});
</script></body></html>`)
	writeHTML(w, http.StatusOK, b.String())
}

// egressNavigate sends the page to ?to= once it is parsed: by a script
// (location = to), or with ?by=meta by a meta refresh. It has no #ready.
func (s *site) egressNavigate(w http.ResponseWriter, r *http.Request) {
	to := r.URL.Query().Get("to")
	if !strings.HasPrefix(to, "http://") && !strings.HasPrefix(to, "https://") {
		http.Error(w, "want ?to=http(s)://…", http.StatusBadRequest)
		return
	}
	how := fmt.Sprintf(`<script>location = %s;</script>`, jsQuote(to))
	if r.URL.Query().Get("by") == "meta" {
		how = fmt.Sprintf(`<meta http-equiv="refresh" content="0; url=%s">`, html.EscapeString(to))
	}
	writeHTML(w, queryInt(r, "status", 200, 599, http.StatusOK), `<!doctype html><html><head><meta charset="utf-8"><title>navigating</title>`+how+
		`</head><body>navigating</body></html>`)
}

// jsQuote is s as a JavaScript string literal that cannot end a script
// element (json.Marshal escapes <, > and &).
func jsQuote(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		return `""`
	}
	return string(b)
}

// egressLinks links to every ?to= with class "out".
func (s *site) egressLinks(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><title>links out</title></head><body><ul>`)
	for _, to := range r.URL.Query()["to"] {
		fmt.Fprintf(&b, `<li><a class="out" href="%s">%s</a></li>`, html.EscapeString(to), html.EscapeString(to))
	}
	b.WriteString(`</ul><div id="ready">ready</div></body></html>`)
	writeHTML(w, http.StatusOK, b.String())
}

// onePagePDF is a minimal valid one-page PDF.
const onePagePDF = "%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n" +
	"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n" +
	"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 200]>>endobj\n" +
	"trailer<</Root 1 0 R>>\n%%EOF\n"

// pdf serves onePagePDF inline: a page that is not HTML.
func (s *site) pdf(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/pdf")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = io.WriteString(w, onePagePDF)
}
