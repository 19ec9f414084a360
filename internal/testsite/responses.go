package testsite

// How the site's server answers beyond its pages: slow and hanging
// responses, error statuses and redirects, and the helpers every handler
// writes and reads with.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

func (s *site) slow(w http.ResponseWriter, r *http.Request) {
	ms, ok := intParam(w, r, "ms", 0, 1<<31-1)
	if !ok {
		return
	}
	if !s.sleep(r, time.Duration(ms)*time.Millisecond) {
		return
	}
	writeHTML(w, http.StatusOK, fmt.Sprintf(`<!doctype html><html><head><meta charset="utf-8"><title>Slow %d</title></head><body><div id="ready">slow %d</div></body></html>`, ms, ms))
}

// hang sends the start of a page, so the browser commits and shows it, and
// never sends the rest: the load event never fires.
func (s *site) hang(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, `<!doctype html><html><head><meta charset="utf-8"><title>Hang</title></head><body><div id="partial">partial</div>`)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	select {
	case <-r.Context().Done():
	case <-s.stop:
	}
}

func (s *site) status(w http.ResponseWriter, r *http.Request) {
	code, ok := intParam(w, r, "code", 200, 599)
	if !ok {
		return
	}
	if r.URL.Query().Has("empty") {
		// No body: Chrome shows its own error page for an error status.
		w.WriteHeader(code)
		return
	}
	writeHTML(w, code, fmt.Sprintf(`<!doctype html><html><head><meta charset="utf-8"><title>Status %d</title></head><body><div id="ready">status %d</div></body></html>`, code, code))
}

// typed answers with the Content-Type ?type= (text/plain by default), and
// with ?refresh= a Refresh header of its value: for an XML type (SVG,
// XHTML, XML) a document whose script adds #ready after its load event,
// for any other a line of JSON that names a div#ready, which a browser
// shows as text.
func (s *site) typed(w http.ResponseWriter, r *http.Request) {
	typ := r.URL.Query().Get("type")
	if typ == "" {
		typ = "text/plain"
	}
	w.Header().Set("Content-Type", typ)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if v := r.URL.Query().Get("refresh"); v != "" {
		w.Header().Set("Refresh", v)
	}
	switch {
	case strings.Contains(typ, "svg"):
		fmt.Fprint(w, `<svg xmlns="http://www.w3.org/2000/svg"><script>addEventListener('load', function () { setTimeout(function () {
  var el = document.createElementNS('http://www.w3.org/2000/svg', 'rect'); el.id = 'ready'; document.documentElement.appendChild(el);
}, 50); });</script></svg>`)
	case strings.Contains(typ, "xml"):
		fmt.Fprint(w, `<html xmlns="http://www.w3.org/1999/xhtml"><head><title>typed</title></head><body><script>addEventListener('load', function () { setTimeout(function () {
  var el = document.createElement('div'); el.id = 'ready'; document.body.appendChild(el);
}, 50); });</script></body></html>`)
	default:
		fmt.Fprint(w, `{"note": "<div id=\"ready\">shown as text</div>"}`+"\n")
	}
}

func (s *site) redirect(w http.ResponseWriter, r *http.Request) {
	n, ok := intParam(w, r, "n", 0, 1000)
	if !ok {
		return
	}
	if n == 0 {
		http.Redirect(w, r, "/page/0", http.StatusFound)
		return
	}
	http.Redirect(w, r, fmt.Sprintf("/redirect/%d", n-1), http.StatusFound)
}

func (s *site) redirectLoop(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/redirect-loop", http.StatusFound)
}

func (s *site) jsRedirect(w http.ResponseWriter, r *http.Request) {
	n, ok := intParam(w, r, "n", 0, 1<<31-1)
	if !ok {
		return
	}
	writeHTML(w, http.StatusOK, fmt.Sprintf(`<!doctype html><html><head><meta charset="utf-8"><title>JS redirect</title>
<script>location.replace('/page/%d');</script></head><body>redirecting</body></html>`, n))
}

// sleep waits d (capped by MaxDelay) and reports whether the request should
// still be answered.
func (s *site) sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	d = min(d, s.opts.MaxDelay)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	case <-s.stop:
		return false
	}
}

func queryMillis(r *http.Request, name string) time.Duration {
	v, err := strconv.Atoi(r.URL.Query().Get(name))
	if err != nil || v < 0 {
		return 0
	}
	return time.Duration(v) * time.Millisecond
}

// queryInt is the query parameter name as an integer in [lo, hi], or def
// when it is absent or not one.
func queryInt(r *http.Request, name string, lo, hi, def int) int {
	v, err := strconv.Atoi(r.URL.Query().Get(name))
	if err != nil || v < lo || v > hi {
		return def
	}
	return v
}

func intParam(w http.ResponseWriter, r *http.Request, name string, lo, hi int) (int, bool) {
	v, err := strconv.Atoi(r.PathValue(name))
	if err != nil || v < lo || v > hi {
		http.Error(w, fmt.Sprintf("bad %s: want an integer in [%d, %d]", name, lo, hi), http.StatusBadRequest)
		return 0, false
	}
	return v, true
}

func writeHTML(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprint(w, body)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		// The client went away; there is nobody to tell.
		return
	}
}
