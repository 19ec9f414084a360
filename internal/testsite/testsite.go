// Package testsite is a small JavaScript-heavy web site served on 127.0.0.1
// for the tests, the demo and the benchmarks. Its pages behave like the sites
// the farm scrapes: content that exists only after scripts ran and an API
// answered, infinite lists, forms, redirects, slow and hanging responses, and
// hostile pages (dialogs, popups, downloads, endless loops, huge DOMs, a
// renderer crash). Nothing on it reaches beyond the loopback interface.
package testsite

import (
	"encoding/json"
	"fmt"
	"html"
	"image"
	"image/png"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configures the site. The zero value is usable.
type Options struct {
	// Items is how many list items /page/{n} renders. 0 means 200.
	Items int
	// ScriptDelay is how long the page script waits before it calls the API,
	// like a real site's bundle that boots before it fetches. 0 means 20 ms;
	// a negative value means no delay.
	ScriptDelay time.Duration
	// LeakMB is how many megabytes /leak/{n} retains by default. 0 means 8.
	LeakMB int
	// MaxDelay caps every server-side delay (?delay=, /slow/{ms}). 0 means 60 s.
	MaxDelay time.Duration
}

func (o Options) withDefaults() Options {
	if o.Items <= 0 {
		o.Items = 200
	}
	if o.ScriptDelay == 0 {
		o.ScriptDelay = 20 * time.Millisecond
	}
	if o.ScriptDelay < 0 {
		o.ScriptDelay = 0
	}
	if o.LeakMB <= 0 {
		o.LeakMB = 8
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = time.Minute
	}
	return o
}

// site is the handler. stop ends every delay and hang at once, so that a
// server can close without waiting for a request that never finishes.
type site struct {
	opts Options
	mux  *http.ServeMux
	stop <-chan struct{}
	hits counter // /isolation/cached/{key}
}

// New returns the site's handler. Requests that wait (/hang, /slow, delayed API
// answers) end when their request's context ends.
func New(opts Options) http.Handler {
	return newSite(opts, nil)
}

func newSite(opts Options, stop <-chan struct{}) *site {
	s := &site{opts: opts.withDefaults(), mux: http.NewServeMux(), stop: stop}
	s.routes()
	return s
}

func (s *site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

func (s *site) routes() {
	m := s.mux
	m.HandleFunc("GET /{$}", s.index)
	m.HandleFunc("GET /page/{n}", s.page(kindPage))
	m.HandleFunc("GET /app/{n}", s.page(kindApp))
	m.HandleFunc("GET /static/app.js", s.appScript)
	m.HandleFunc("GET /leak/{n}", s.page(kindLeak))
	m.HandleFunc("GET /api/item/{n}", s.apiItem)
	m.HandleFunc("GET /api/more/{k}", s.apiMore)
	m.HandleFunc("GET /links/{n}", s.links)
	m.HandleFunc("GET /infinite", s.infinite)
	m.HandleFunc("GET /form", s.form)
	m.HandleFunc("GET /wait-targets", s.waitTargets)
	m.HandleFunc("GET /images", s.images)
	m.HandleFunc("GET /img/{name}", s.img)
	m.HandleFunc("GET /echo", s.echo)
	m.HandleFunc("GET /storage", s.storage)
	s.isolationRoutes()
	m.HandleFunc("GET /console", s.console)
	m.HandleFunc("GET /hostile/console-flood", s.hostileConsoleFlood)
	m.HandleFunc("GET /hostile/event-flood", s.hostileEventFlood)
	m.HandleFunc("GET /hostile/worker-log/{n}", s.hostileWorkerLog)
	m.HandleFunc("GET /slow/{ms}", s.slow)
	m.HandleFunc("GET /hang", s.hang)
	m.HandleFunc("GET /status/{code}", s.status)
	m.HandleFunc("GET /typed", s.typed)
	m.HandleFunc("GET /redirect/{n}", s.redirect)
	m.HandleFunc("GET /redirect-loop", s.redirectLoop)
	m.HandleFunc("GET /js-redirect/{n}", s.jsRedirect)
	m.HandleFunc("GET /hostile/alert", s.hostileAlert)
	m.HandleFunc("GET /hostile/beforeunload", s.hostileBeforeUnload)
	m.HandleFunc("GET /hostile/popup", s.hostilePopup)
	m.HandleFunc("GET /hostile/download", s.hostileDownload)
	m.HandleFunc("GET /hostile/autodownload", s.hostileAutoDownload)
	m.HandleFunc("GET /hostile/loop", s.hostileLoop)
	m.HandleFunc("GET /hostile/leave-loop", s.hostileLeaveLoop)
	m.HandleFunc("GET /hostile/dom", s.hostileDOM)
	m.HandleFunc("GET /hostile/crash", s.hostileCrash)
	m.HandleFunc("GET /hostile/workers", s.hostileWorkers)
	m.HandleFunc("GET /hostile/nested-workers", s.hostileNestedWorkers)
	m.HandleFunc("GET /file.pdf", s.pdf)
	m.HandleFunc("GET /egress/redirect", s.egressRedirect)
	m.HandleFunc("GET /redirect-to", s.redirectTo)
	m.HandleFunc("GET /egress/page", s.egressPage)
	m.HandleFunc("GET /egress/links", s.egressLinks)
	m.HandleFunc("GET /egress/navigate", s.egressNavigate)
}

// paths lists the site's pages with a one-line description each, for the
// index page and for documentation.
var paths = [][2]string{
	{"/page/{n}?delay=ms", "JS fetches /api/item/{n} (answered after delay ms) and renders a heading, a list and #ready"},
	{"/app/{n}?delay=ms", "like /page/{n}, after loading /static/app.js (about 330 KB of script, cacheable for a day, that builds 3,000 components), as a site's script bundle"},
	{"/leak/{n}?mb=N", "like /page/{n}, and the script retains N MB of objects"},
	{"/links/{n}", "links to /page/* and a.next to /links/{n+1}"},
	{"/infinite", "infinite list: scrolling to the bottom loads 20 more items"},
	{"/form", "input#q, button#go, button#more (load more), #out, button#once (removes itself when clicked)"},
	{"/wait-targets", "a script adds #empty (an empty div: present, zero size), #hidden (display:none) and #shown"},
	{"/images", "an image; #ready says whether it loaded or was blocked"},
	{"/echo", "the request's headers and cookies as JSON in #data"},
	{"/storage", "counts visits in a cookie and localStorage"},
	{"/isolation/set", "leaves cookies (one HttpOnly), local and session storage, IndexedDB, Cache Storage and a service worker"},
	{"/isolation/leave", "sets a cookie, local and session storage, and sends a beacon and a keepalive fetch that set cookies, from its pagehide, visibilitychange and unload handlers"},
	{"/isolation/keepalive?ms=300", "starts a keepalive fetch answered after ms with a cookie"},
	{"/isolation/cookie?name=n&ms=0", "answers with the cookie n after ms"},
	{"/isolation/get", "window.__state: the state /isolation/set leaves, as this context sees it"},
	{"/isolation/worker?key=k", "a dedicated worker fetches /isolation/cached/k and shows the count it got"},
	{"/isolation/embed?src=URL", "frames URL (/isolation/set or /isolation/get of another site: partitioned storage) and shows what it posts back"},
	{"/isolation/auth", "needs HTTP basic authentication (testsite.AuthUser, AuthPassword)"},
	{"/console", "logs console errors and throws an uncaught exception"},
	{"/hostile/console-flood?mb=N", "logs, console.errors, throws and rejects N MB strings"},
	{"/slow/{ms}", "answers after ms milliseconds"},
	{"/hang", "sends part of a page and never finishes"},
	{"/status/{code}", "answers with that HTTP status (?empty: with no body)"},
	{"/typed?type=MIME&refresh=R", "answers as the Content-Type MIME (default text/plain): an XML type a document whose script adds #ready after its load, any other a line of JSON naming a div#ready; with refresh, a Refresh header of R"},
	{"/redirect/{n}", "n redirects, then /page/0"},
	{"/redirect-loop", "redirects to itself"},
	{"/js-redirect/{n}", "a script replaces the location with /page/{n} while loading"},
	{"/hostile/alert?mb=N", "alert(), confirm() and prompt() while loading (their texts N MB longer)"},
	{"/hostile/beforeunload", "an onbeforeunload prompt"},
	{"/hostile/popup", "window.open on load and on click of #open"},
	{"/hostile/download", "a forced download (Content-Disposition: attachment)"},
	{"/hostile/autodownload", "a page that starts a download from script"},
	{"/hostile/loop", "an infinite JavaScript loop after the first paint"},
	{"/hostile/leave-loop", "an infinite JavaScript loop in its pagehide handler, as it is left"},
	{"/hostile/dom?n=N", "a DOM of N elements (default 100000)"},
	{"/hostile/crash", "allocates until the renderer runs out of memory"},
	{"/hostile/workers", "starts Web Workers without end (the farm lets a document start 256)"},
	{"/hostile/nested-workers", "a Web Worker that starts Web Workers without end, until Chrome's browser process stops answering"},
	{"/file.pdf", "a one-page PDF, served inline"},
	{"/egress/redirect?to=URL", "redirects (302) to URL"},
	{"/redirect-to?to=URL", "redirects (302) to URL, whatever its scheme (view-source:, file:, …)"},
	{"/egress/page?fetch=URL&frame=URL", "fetches and frames the URLs (repeatable); #out says what each fetch got, then #ready"},
	{"/egress/links?to=URL", "links (a.out) to the URLs (repeatable)"},
	{"/egress/navigate?to=URL&by=script&status=200", "goes to URL as it loads: by a script (location = URL), or with by=meta by a meta refresh; answered with status (a soft 404 that sends the page on); no #ready"},
}

func (s *site) index(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	b.WriteString("<!doctype html><html><head><meta charset=\"utf-8\"><title>testsite</title></head><body><h1>testsite</h1><ul>")
	for _, p := range paths {
		fmt.Fprintf(&b, "<li><code>%s</code>: %s</li>", html.EscapeString(p[0]), html.EscapeString(p[1]))
	}
	b.WriteString("</ul></body></html>")
	writeHTML(w, http.StatusOK, b.String())
}

// pageScript renders the API answer into the body. It is shared by /page and
// /leak so that both cost the renderer the same work.
const pageScript = `
(function () {
  var q = new URLSearchParams(location.search);
  var delay = q.get('delay') || '0';
  setTimeout(function () {
    fetch('/api/item/{{N}}?items={{ITEMS}}&delay=' + encodeURIComponent(delay))
      .then(function (r) { return r.json(); })
      .then(function (d) {
        var h = document.createElement('h1');
        h.textContent = d.title;
        document.body.appendChild(h);
        var ul = document.createElement('ul');
        ul.id = 'items';
        var frag = document.createDocumentFragment();
        d.items.forEach(function (it) {
          var li = document.createElement('li');
          li.className = 'item';
          li.dataset.price = it.price;
          li.textContent = it.name;
          frag.appendChild(li);
        });
        ul.appendChild(frag);
        document.body.appendChild(ul);
        {{LEAK}}
        var r = document.createElement('div');
        r.id = 'ready';
        r.textContent = 'ready';
        document.body.appendChild(r);
      });
  }, {{SCRIPTDELAY}});
})();`

// leakScript keeps about the given number of megabytes reachable from window, half as small
// objects on the V8 heap and half as typed-array backing stores.
const leakScript = `
        window.__leak = window.__leak || [];
        for (var m = 0; m < {{MB}}; m++) {
          var objs = new Array(8192);
          for (var k = 0; k < objs.length; k++) { objs[k] = {m: m, k: k, s: 'leak-' + m + '-' + k}; }
          window.__leak.push(objs, new Float64Array(65536));
        }`

// The kinds of page/{n} documents, named in their titles: the page, the
// page whose script also retains memory (/leak/), and the page behind a
// script bundle (/app/): the document a JavaScript-heavy site serves, whose
// shared scripts a browser fetches and compiles once if its HTTP cache keeps
// them.
const (
	kindPage = "Page"
	kindLeak = "Leak"
	kindApp  = "App"
)

func (s *site) page(kind string) http.HandlerFunc {
	head := ""
	if kind == kindApp {
		head = `<script src="/static/app.js"></script>`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		n, ok := intParam(w, r, "n", 0, 1<<31-1)
		if !ok {
			return
		}
		leakJS := ""
		if kind == kindLeak {
			mb := queryInt(r, "mb", 0, 1024, s.opts.LeakMB)
			leakJS = strings.ReplaceAll(leakScript, "{{MB}}", strconv.Itoa(mb))
		}
		js := strings.NewReplacer(
			"{{N}}", strconv.Itoa(n),
			"{{ITEMS}}", strconv.Itoa(s.opts.Items),
			"{{SCRIPTDELAY}}", strconv.FormatInt(s.opts.ScriptDelay.Milliseconds(), 10),
			"{{LEAK}}", leakJS,
		).Replace(pageScript)
		writeHTML(w, http.StatusOK, fmt.Sprintf(
			"<!doctype html><html><head><meta charset=\"utf-8\"><title>%s %d</title>%s</head><body><script>%s</script></body></html>",
			kind, n, head, js))
	}
}

// appJS is /static/app.js: 3,000 component functions registered at load,
// 300 of them run, as a framework and its components would.
var appJS = sync.OnceValue(func() string {
	var b strings.Builder
	b.WriteString("(function () {\nvar reg = {};\n")
	for i := range 3000 {
		fmt.Fprintf(&b, "reg['c%d'] = function (p) { var o = {id: %d, name: 'component-%d', props: p || {}}; "+
			"for (var k = 0; k < %d; k++) { o['f' + k] = (o.id * k + %d) %% 97; } "+
			"if (o.props.deep) { return [o, reg['c%d']({deep: false})]; } return o; };\n", i, i, i, i%7+1, i, (i+1)%3000)
	}
	b.WriteString("var out = [];\nfor (var i = 0; i < 3000; i += 10) { out.push(reg['c' + i]({deep: true})); }\nwindow.__app = {reg: reg, out: out};\n})();\n")
	return b.String()
})

func (s *site) appScript(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/javascript")
	w.Header().Set("Cache-Control", "public, max-age=86400")
	fmt.Fprint(w, appJS())
}

// Item is one entry of the API's answer.
type Item struct {
	Name  string `json:"name"`
	Price int    `json:"price"`
}

// apiItem answers the page script, after ?delay=ms, so that a benchmark can
// make pages latency-bound (a slow backend) or CPU-bound (no delay).
func (s *site) apiItem(w http.ResponseWriter, r *http.Request) {
	n, ok := intParam(w, r, "n", 0, 1<<31-1)
	if !ok {
		return
	}
	items := queryInt(r, "items", 0, 100000, s.opts.Items)
	if !s.sleep(r, queryMillis(r, "delay")) {
		return
	}
	out := struct {
		ID    int    `json:"id"`
		Title string `json:"title"`
		Items []Item `json:"items"`
	}{ID: n, Title: fmt.Sprintf("Item %d", n), Items: make([]Item, items)}
	for i := range out.Items {
		out.Items[i] = Item{Name: fmt.Sprintf("Item %d.%d", n, i), Price: (n*31 + i*7) % 1000}
	}
	writeJSON(w, out)
}

// apiMore is the next chunk of the infinite list and of the form's "load more".
func (s *site) apiMore(w http.ResponseWriter, r *http.Request) {
	k, ok := intParam(w, r, "k", 0, 100000)
	if !ok {
		return
	}
	if !s.sleep(r, queryMillis(r, "delay")) {
		return
	}
	items := make([]Item, 20)
	for i := range items {
		items[i] = Item{Name: fmt.Sprintf("More %d.%d", k, i), Price: i}
	}
	writeJSON(w, items)
}

func (s *site) links(w http.ResponseWriter, r *http.Request) {
	n, ok := intParam(w, r, "n", 0, 1<<20)
	if !ok {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<!doctype html><html><head><meta charset=\"utf-8\"><title>Links %d</title></head><body><ul>", n)
	for i := range 10 {
		fmt.Fprintf(&b, "<li><a class=\"item\" href=\"/page/%d\">page %d</a></li>", n*10+i, n*10+i)
	}
	fmt.Fprintf(&b, "</ul><a class=\"next\" href=\"/links/%d\">next</a><a class=\"ext\" href=\"http://other.invalid/x\">elsewhere</a>", n+1)
	// One link exists only after the script runs, as on real sites.
	fmt.Fprintf(&b, "<script>var a=document.createElement('a');a.className='item js';a.href='/page/%d';a.textContent='js';document.body.appendChild(a);</script>", 1000000+n)
	b.WriteString("<div id=\"ready\">ready</div></body></html>")
	writeHTML(w, http.StatusOK, b.String())
}

func (s *site) infinite(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Infinite</title>
<style>li{height:40px}</style></head><body><ul id="list"></ul><div id="status">idle</div>
<script>
var page = 0, loading = false;
function load() {
  if (loading) return;
  loading = true;
  document.getElementById('status').textContent = 'loading';
  fetch('/api/more/' + page).then(function (r) { return r.json(); }).then(function (items) {
    var ul = document.getElementById('list');
    items.forEach(function (it) { var li = document.createElement('li'); li.textContent = it.name; ul.appendChild(li); });
    page++;
    loading = false;
    document.getElementById('status').textContent = 'idle';
  });
}
window.addEventListener('scroll', function () {
  if (window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 100) load();
});
load();
</script></body></html>`)
}

// waitTargets adds, from a script, elements that are present in the DOM
// but not visible, for the wait conditions.
func (s *site) waitTargets(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Wait targets</title></head><body>
<script>
document.body.insertAdjacentHTML('beforeend',
  '<div id="empty"></div><div id="hidden" style="display:none">hidden</div><p id="shown">shown</p>');
</script></body></html>`)
}

func (s *site) form(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Form</title></head><body>
<input id="q" type="text"><button id="go">go</button><div id="out"></div>
<button id="more">load more</button><ul id="list"></ul><button id="once">once</button>
<script>
// #once removes itself when clicked.
document.getElementById('once').addEventListener('click', function () { this.remove(); });
document.getElementById('go').addEventListener('click', function (e) {
  var v = document.getElementById('q').value;
  fetch('/api/item/1?items=1').then(function () {
    document.getElementById('out').textContent = 'you typed: ' + v + (e.isTrusted ? ' (trusted)' : '');
  });
});
// Each click asks for one more chunk; chunks load one after another, so
// quick clicks are not lost.
var wanted = 0, loaded = 0, busy = false;
function pump() {
  if (busy || loaded >= wanted) return;
  busy = true;
  fetch('/api/more/' + loaded).then(function (r) { return r.json(); }).then(function (items) {
    var ul = document.getElementById('list');
    items.forEach(function (it) { var li = document.createElement('li'); li.textContent = it.name; ul.appendChild(li); });
    loaded++;
    busy = false;
    pump();
  });
}
document.getElementById('more').addEventListener('click', function () { wanted++; pump(); });
</script></body></html>`)
}

func (s *site) images(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Images</title></head><body>
<img id="img" src="/img/1.png" width="10" height="10">
<script>
function done(state) { var d = document.createElement('div'); d.id = 'ready'; d.textContent = state; document.body.appendChild(d); }
var img = document.getElementById('img');
if (img.complete && img.naturalWidth > 0) done('loaded');
else { img.onload = function () { done('loaded'); }; img.onerror = function () { done('blocked'); }; }
</script></body></html>`)
}

func (s *site) img(w http.ResponseWriter, r *http.Request) {
	img := image.NewNRGBA(image.Rect(0, 0, 10, 10))
	for i := range img.Pix {
		img.Pix[i] = 0x80
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "no-store")
	if err := png.Encode(w, img); err != nil {
		// The client went away; there is nobody to tell.
		return
	}
}

// echo shows what the server received, so that a test can check headers,
// the user agent and cookies end to end.
func (s *site) echo(w http.ResponseWriter, r *http.Request) {
	hdr := map[string]string{}
	for k, v := range r.Header {
		hdr[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	cookies := map[string]string{}
	for _, c := range r.Cookies() {
		cookies[c.Name] = c.Value
	}
	data, err := json.Marshal(map[string]any{"headers": hdr, "cookies": cookies, "method": r.Method, "path": r.URL.Path})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// The JSON sits in a script element of an unknown type, so the browser
	// neither runs nor renders it; "</" is escaped so that it cannot end it.
	js := strings.ReplaceAll(string(data), "</", "<\\/")
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Echo</title></head><body>
<script id="data" type="application/json">`+js+`</script><div id="ready">ready</div>
<div id="viewport"></div><script>document.getElementById('viewport').textContent = innerWidth + 'x' + innerHeight;</script></body></html>`)
}

func (s *site) storage(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Storage</title></head><body><div id="out"></div>
<script>
var m = document.cookie.match(/(?:^|; )visits=(\d+)/);
var c = m ? parseInt(m[1], 10) + 1 : 1;
document.cookie = 'visits=' + c + '; path=/; max-age=3600';
var l = parseInt(localStorage.getItem('visits') || '0', 10) + 1;
localStorage.setItem('visits', String(l));
var out = document.getElementById('out');
out.textContent = 'cookie=' + c + ' local=' + l;
var d = document.createElement('div'); d.id = 'ready'; d.textContent = 'ready'; document.body.appendChild(d);
</script></body></html>`)
}

func (s *site) console(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Console</title></head><body>
<script>
console.error('boom', 42);
console.log('not an error');
setTimeout(function () { throw new Error('kaboom'); }, 0);
setTimeout(function () { var d = document.createElement('div'); d.id = 'ready'; d.textContent = 'ready'; document.body.appendChild(d); }, 10);
</script></body></html>`)
}
