package testsite

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"strings"
	"sync"
)

// The isolation pages let a test leave every kind of state a page can leave
// in a browser context, and read it back from a later job.

// Basic-auth credentials of /isolation/auth.
const (
	AuthUser     = "farm"
	AuthPassword = "s3cret"
)

func (s *site) isolationRoutes() {
	m := s.mux
	m.HandleFunc("GET /isolation/set", s.isolationSet)
	m.HandleFunc("GET /isolation/get", s.isolationGet)
	m.HandleFunc("GET /isolation/embed", s.isolationEmbed)
	m.HandleFunc("GET /isolation/worker", s.isolationWorker)
	m.HandleFunc("GET /isolation/worker.js", s.isolationWorkerJS)
	m.HandleFunc("GET /isolation/leave", s.isolationLeave)
	m.HandleFunc("GET /isolation/reopen", s.isolationReopen)
	m.HandleFunc("GET /isolation/csp", s.isolationCSP)
	m.HandleFunc("GET /isolation/hop", s.isolationHop)
	m.HandleFunc("GET /isolation/keepalive", s.isolationKeepalive)
	m.HandleFunc("/isolation/cookie", s.isolationCookie)
	m.HandleFunc("GET /isolation/sw.js", s.isolationSW)
	m.HandleFunc("GET /isolation/auth", s.isolationAuth)
	m.HandleFunc("GET /isolation/cached/{key}", s.isolationCached)
	m.HandleFunc("GET /isolation/script/{key}", s.isolationScript)
	m.HandleFunc("GET /isolation/scripted", s.isolationScripted)
}

// isolationScript is a script, cacheable for an hour, that sets
// window.__hits to how many times it was asked for this key (the count of
// /isolation/cached/{key}). A script, unlike a fetch, may also be served
// from the renderer's memory cache.
func (s *site) isolationScript(w http.ResponseWriter, r *http.Request) {
	n := s.hits.Add(r.PathValue("key"))
	w.Header().Set("Content-Type", "application/javascript")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	fmt.Fprintf(w, "window.__hits = %d;\n", n)
}

// isolationScripted loads /isolation/script/{key} (?key=) and shows the
// count it set in #ready.
func (s *site) isolationScripted(w http.ResponseWriter, r *http.Request) {
	key := html.EscapeString(r.URL.Query().Get("key"))
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Scripted</title>
<script src="/isolation/script/`+key+`"></script></head><body>
<script>const d = document.createElement('div'); d.id = 'ready'; d.textContent = String(window.__hits); document.body.appendChild(d);</script>
</body></html>`)
}

// isolationCached answers with how many times it was asked for this key,
// cacheable for an hour: a browser that answers from its HTTP cache shows an
// older count.
func (s *site) isolationCached(w http.ResponseWriter, r *http.Request) {
	n := s.hits.Add(r.PathValue("key"))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_ = json.NewEncoder(w).Encode(map[string]int{"n": n})
}

// isolationSet sets an HttpOnly cookie (in its response) and, from its
// script, a cookie, window.name, localStorage, sessionStorage, an IndexedDB database, a
// Cache Storage entry, an HTTP cache entry (/isolation/cached/{key}) and,
// unless ?sw=0, a service worker; #ready appears when all are in place.
func (s *site) isolationSet(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: "ho", Value: "1", Path: "/", HttpOnly: true, MaxAge: 3600})
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Set state</title></head><body>
<script>
(async () => {
  document.cookie = 'js=1; path=/; max-age=3600';
  window.name = 'bf-name';
  localStorage.setItem('ls', '1');
  sessionStorage.setItem('ss', '1');
  await new Promise((ok, fail) => {
    const req = indexedDB.open('bfdb', 1);
    req.onupgradeneeded = () => req.result.createObjectStore('s');
    req.onsuccess = () => { const tx = req.result.transaction('s', 'readwrite'); tx.objectStore('s').put('v', 'k'); tx.oncomplete = () => { req.result.close(); ok(); }; tx.onerror = fail; };
    req.onerror = fail;
  });
  const c = await caches.open('bfcache');
  await c.put('/isolation/cached', new Response('x'));
  await fetch('/isolation/cached/' + new URLSearchParams(location.search).get('key'));
  if (new URLSearchParams(location.search).get('sw') !== '0') {
    await navigator.serviceWorker.register('/isolation/sw.js');
    await navigator.serviceWorker.ready;
  }
  const d = document.createElement('div'); d.id = 'ready'; d.textContent = 'set'; document.body.appendChild(d);
  if (window.parent !== window) parent.postMessage({ready: 'set'}, '*');
})().catch(e => {
  const d = document.createElement('div'); d.id = 'ready'; d.textContent = 'error: ' + e; document.body.appendChild(d);
  if (window.parent !== window) parent.postMessage({ready: 'error: ' + e}, '*');
});
</script></body></html>`)
}

// isolationLeave leaves nothing while it is shown: its pagehide,
// visibilitychange and unload handlers set a cookie, localStorage and
// sessionStorage as it is left, and send a beacon and a keepalive fetch
// whose answers set cookies, each named after the event.
func (s *site) isolationLeave(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Leave state</title></head><body>
<div id="ready">shown</div>
<script>
// The first handler takes 30 ms first: a wipe that clears before the
// page has been left (its handlers run then) clears too early.
window.addEventListener('pagehide', () => { const until = performance.now() + 30; while (performance.now() < until) {} });
for (const ev of ['pagehide', 'visibilitychange', 'unload']) {
  window.addEventListener(ev, () => {
    document.cookie = 'left_' + ev + '=1; path=/; max-age=3600';
    window.name = 'left_' + ev;
    if (window.cookieStore) cookieStore.set({name: 'left_store_' + ev, value: '1', path: '/', expires: Date.now() + 3600e3});
    localStorage.setItem('left_' + ev, '1');
    sessionStorage.setItem('left_' + ev, '1');
    navigator.sendBeacon('/isolation/cookie?name=beacon_' + ev, 'x');
    fetch('/isolation/cookie?name=keepalive_' + ev, {method: 'POST', body: 'x', keepalive: true});
  });
}
</script></body></html>`)
}

// isolationReopen takes about:blank's URL while it is shown — a
// same-origin about:blank iframe calls document.open() on it, which gives
// the page the iframe's URL — and its pagehide handler, 300 ms long, sets a
// cookie and localStorage as it is left: a wipe that took the URL for its
// own navigation's commit would clear before the handler writes.
func (s *site) isolationReopen(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Reopen</title></head><body>
<iframe src="about:blank"></iframe>
<script>
const f = document.querySelector('iframe');
f.contentWindow.setTimeout(f.contentWindow.Function('parent.document.open()'), 0);
setTimeout(() => {
  document.write('<!doctype html><title>Reopened</title><div id="ready">' + location.href + '</div>');
  document.close();
  addEventListener('pagehide', () => {
    const until = performance.now() + 300; while (performance.now() < until) {}
    document.cookie = 'reopened=1; path=/; max-age=3600';
    localStorage.setItem('reopened', '1');
  });
}, 100);
</script></body></html>`)
}

// isolationCSP forbids images and shows one: Chrome reports the violation
// to /isolation/cookie, whose answer sets the cookie csp_report. #ready
// appears once the report has been sent.
func (s *site) isolationCSP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "img-src 'none'; report-uri /isolation/cookie?name=csp_report")
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>CSP</title></head><body>
<script>
document.addEventListener('securitypolicyviolation', () => setTimeout(() => {
  const d = document.createElement('div'); d.id = 'ready'; d.textContent = 'reported'; document.body.appendChild(d);
}, 20));
</script>
<img src="/img/a.png">
</body></html>`)
}

// isolationHop sets sessionStorage's hop on its origin and goes on to ?to=.
func (s *site) isolationHop(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Hop</title></head><body>
<script>sessionStorage.setItem('hop', '1'); location.href = `+jsQuote(r.URL.Query().Get("to"))+`;</script></body></html>`)
}

// isolationKeepalive starts, as it loads, a keepalive fetch, which outlives
// the page, answered after ?ms= (default 300) with a cookie.
func (s *site) isolationKeepalive(w http.ResponseWriter, r *http.Request) {
	ms := 300
	if r.URL.Query().Has("ms") {
		ms = int(queryMillis(r, "ms").Milliseconds())
	}
	writeHTML(w, http.StatusOK, fmt.Sprintf(`<!doctype html><html><head><meta charset="utf-8"><title>Keepalive</title></head><body>
<script>
fetch('/isolation/cookie?name=keepalive&ms=%d', {method: 'POST', body: 'x', keepalive: true});
const d = document.createElement('div'); d.id = 'ready'; d.textContent = 'sent'; document.body.appendChild(d);
</script></body></html>`, ms))
}

// isolationCookie answers, after ?ms= (default 0), with a cookie named
// ?name= (any method: beacons and keepalive fetches POST).
func (s *site) isolationCookie(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if name == "" {
		http.Error(w, "name is required", http.StatusBadRequest)
		return
	}
	if !s.sleep(r, queryMillis(r, "ms")) {
		return
	}
	http.SetCookie(w, &http.Cookie{Name: name, Value: "1", Path: "/", MaxAge: 3600})
	w.WriteHeader(http.StatusNoContent)
}

// isolationGet reports, as the JSON value of window.__state, what the
// context holds: cookies the server saw (HttpOnly ones included) and the
// script sees, storage of every kind, service workers, the geolocation
// permission, the tab's history length and, with ?key=, the count
// /isolation/cached/{key} answers (1: from the HTTP cache of an earlier
// fetch).
func (s *site) isolationGet(w http.ResponseWriter, r *http.Request) {
	var names []string
	for _, c := range r.Cookies() {
		names = append(names, c.Name)
	}
	server, err := json.Marshal(names)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Get state</title></head><body>
<script>
window.__state = (async () => {
  const dbs = indexedDB.databases ? (await indexedDB.databases()).map(d => d.name) : [];
  const regs = await navigator.serviceWorker.getRegistrations();
  let perm = 'unknown';
  try { perm = (await navigator.permissions.query({name: 'geolocation'})).state; } catch (e) { perm = 'error: ' + e; }
  const key = new URLSearchParams(location.search).get('key');
  const cached = key ? (await (await fetch('/isolation/cached/' + key)).json()).n : 0;
  const st = {
    http_cache_count: cached,
    server_cookies: `+string(server)+` || [],
    script_cookies: document.cookie,
    local: Object.keys(localStorage),
    session: Object.keys(sessionStorage),
    indexeddb: dbs,
    caches: await caches.keys(),
    service_workers: regs.length,
    controlled: !!navigator.serviceWorker.controller,
    geolocation: perm,
    history: history.length,
    window_name: window.name,
  };
  const d = document.createElement('div'); d.id = 'ready'; d.textContent = 'got'; document.body.appendChild(d);
  if (window.parent !== window) parent.postMessage({ready: 'got', state: st}, '*');
  return st;
})();
</script></body></html>`)
}

// isolationEmbed frames ?src= (typically /isolation/set or /isolation/get
// of another site, whose storage is then partitioned under this page's
// site) and shows what the frame posts back: #ready with its ready text,
// window.__state with its state.
func (s *site) isolationEmbed(w http.ResponseWriter, r *http.Request) {
	src := r.URL.Query().Get("src")
	if !strings.HasPrefix(src, "http://") && !strings.HasPrefix(src, "https://") {
		http.Error(w, "src must be an http(s) URL", http.StatusBadRequest)
		return
	}
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Embed</title></head><body>
<script>
window.__state = new Promise(ok => window.addEventListener('message', ev => {
  const d = document.createElement('div'); d.id = 'ready'; d.textContent = ev.data.ready; document.body.appendChild(d);
  ok(ev.data.state || null);
}, {once: true}));
</script>
<iframe src="`+html.EscapeString(src)+`"></iframe>
</body></html>`)
}

// isolationWorker starts a dedicated worker that fetches
// /isolation/cached/{?key=} and shows its count as #ready: 1 the first time
// the key is asked, more when it reached the server again, not an earlier
// job's answer in the HTTP cache (a tab's cache setting does not reach its
// workers).
func (s *site) isolationWorker(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Worker</title></head><body>
<script>
const w = new Worker('/isolation/worker.js');
w.onmessage = ev => { const d = document.createElement('div'); d.id = 'ready'; d.textContent = String(ev.data); document.body.appendChild(d); };
w.postMessage(new URLSearchParams(location.search).get('key'));
</script></body></html>`)
}

func (s *site) isolationWorkerJS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/javascript")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(`onmessage = async ev => {
  try { postMessage((await (await fetch('/isolation/cached/' + ev.data)).json()).n); } catch (e) { postMessage('error: ' + e); }
};
`))
}

func (s *site) isolationSW(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/javascript")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(`self.addEventListener('install', e => self.skipWaiting());
self.addEventListener('activate', e => e.waitUntil(self.clients.claim()));
self.addEventListener('fetch', () => {});
`))
}

// isolationAuth needs HTTP basic authentication as AuthUser/AuthPassword.
func (s *site) isolationAuth(w http.ResponseWriter, r *http.Request) {
	if u, p, ok := r.BasicAuth(); !ok || u != AuthUser || p != AuthPassword {
		w.Header().Set("WWW-Authenticate", `Basic realm="browserfarm"`)
		writeHTML(w, http.StatusUnauthorized, `<!doctype html><title>401</title><p>authentication required</p>`)
		return
	}
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><title>Authed</title></head><body><div id="ready">authed</div></body></html>`)
}

// counter counts by key; its zero value is ready.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) Add(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	return c.n[key]
}
