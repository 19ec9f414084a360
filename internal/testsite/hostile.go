package testsite

// The hostile pages: what a page can do to the browser that renders it —
// floods of CDP events, console output and workers, dialogs, beforeunload
// prompts, popups, downloads, endless loops, huge DOMs, a renderer crash.

import (
	"fmt"
	"net/http"
	"strconv"
)

// hostileEventFlood makes CDP events without end, as fast as the page can:
// console.log calls, or with ?kind=history history.replaceState calls (a
// navigation within the document each). #ready appears at once (?ready=0:
// never).
func (s *site) hostileEventFlood(w http.ResponseWriter, r *http.Request) {
	ready := r.URL.Query().Get("ready") != "0"
	call := "console.log(i)"
	if r.URL.Query().Get("kind") == "history" {
		call = "history.replaceState(null, '', '#' + i)"
	}
	writeHTML(w, http.StatusOK, fmt.Sprintf(`<!doctype html><html><head><meta charset="utf-8"><title>Event flood</title></head><body>
<script>
if (%t) { const d = document.createElement('div'); d.id = 'ready'; d.textContent = 'ready'; document.body.appendChild(d); }
(function flood() { for (let i = 0; i < 5000; i++) %s; setTimeout(flood, 0); })();
</script></body></html>`, ready, call))
}

func (s *site) hostileConsoleFlood(w http.ResponseWriter, r *http.Request) {
	mb := queryInt(r, "mb", 1, 512, 16)
	writeHTML(w, http.StatusOK, fmt.Sprintf(`<!doctype html><html><head><meta charset="utf-8"><title>Console flood</title></head><body>
<script>
const big = c => c.repeat(%d * 1024 * 1024);
console.log(big('l'));
console.error(big('e'), 1);
console.assert(false, big('a'));
// Objects whose description Chrome sends whole: an Error's stack, a
// Symbol's, a RegExp's and a function's source.
console.log(new Error(big('o')), Symbol(big('s')), new RegExp(big('r')), new Function('/*' + big('f') + '*/'));
// Bodies and URLs a Network event would carry whole.
fetch('/nowhere', {method: 'POST', body: big('b')}).catch(() => {});
fetch('data:text/plain,' + big('d')).catch(() => {});
Promise.reject(new Error(big('p')));
setTimeout(() => { throw new Error(big('t')); }, 0);
setTimeout(() => { const d = document.createElement('div'); d.id = 'ready'; d.textContent = 'ready'; document.body.appendChild(d); }, 50);
</script></body></html>`, mb))
}

// hostileWorkerLog: a dedicated worker logs n strings of 1 MB (the page's
// console guard does not run in workers; Chrome writes their messages to
// its output), then the page shows #ready.
func (s *site) hostileWorkerLog(w http.ResponseWriter, r *http.Request) {
	n, ok := intParam(w, r, "n", 1, 1000)
	if !ok {
		return
	}
	writeHTML(w, http.StatusOK, fmt.Sprintf(`<!doctype html><html><head><meta charset="utf-8"><title>Worker log</title></head><body>
<script>
const src = 'const s = "w".repeat(1 << 20); for (let i = 0; i < %d; i++) console.log(s); postMessage("done");';
const wk = new Worker(URL.createObjectURL(new Blob([src], {type: 'text/javascript'})));
wk.onmessage = () => { const d = document.createElement('div'); d.id = 'ready'; d.textContent = 'ready'; document.body.appendChild(d); };
</script></body></html>`, n))
}

func (s *site) hostileAlert(w http.ResponseWriter, r *http.Request) {
	mb := queryInt(r, "mb", 0, 256, 0)
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Alert</title></head><body>
<script>
var pad = 'x'.repeat(`+strconv.Itoa(mb)+` << 20);
alert('hello from a hostile page' + pad);
var ok = confirm('are you sure?' + pad);
var answer = prompt('your name?' + pad, 'default' + pad);
var d = document.createElement('div');
d.id = 'ready';
d.textContent = 'confirm=' + ok + ' prompt=' + answer;
document.body.appendChild(d);
</script></body></html>`)
}

func (s *site) hostileBeforeUnload(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>BeforeUnload</title></head><body>
<button id="touch">touch</button><div id="ready">ready</div>
<script>
window.addEventListener('beforeunload', function (e) { e.preventDefault(); e.returnValue = 'stay'; return 'stay'; });
document.getElementById('touch').addEventListener('click', function () { document.getElementById('ready').textContent = 'touched'; });
</script></body></html>`)
}

func (s *site) hostilePopup(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Popup</title></head><body>
<button id="open">open</button><div id="ready">ready</div>
<script>
for (var i = 0; i < 3; i++) { window.open('/page/' + (900 + i), '_blank'); }
document.getElementById('open').addEventListener('click', function () {
  for (var i = 0; i < 3; i++) { window.open('/page/' + (910 + i), 'popup' + i, 'width=300,height=300'); }
  document.getElementById('ready').textContent = 'opened';
});
</script></body></html>`)
}

// DownloadName is the file name the download pages offer.
const DownloadName = "testsite-payload.bin"

func (s *site) hostileDownload(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", "attachment; filename=\""+DownloadName+"\"")
	w.WriteHeader(http.StatusOK)
	w.Write(make([]byte, 64<<10))
}

func (s *site) hostileAutoDownload(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>AutoDownload</title></head><body>
<script>
var a = document.createElement('a');
a.href = '/hostile/download';
a.download = '`+DownloadName+`';
document.body.appendChild(a);
a.click();
var d = document.createElement('div'); d.id = 'ready'; d.textContent = 'clicked'; document.body.appendChild(d);
</script></body></html>`)
}

// hostileLoop paints, then spins for ever in a task that starts before the
// load event, so neither the load event nor any later script ever runs.
func (s *site) hostileLoop(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Loop</title></head><body>
<div id="before">before</div>
<script>for (;;) {}</script>
<div id="ready">never</div></body></html>`)
}

func (s *site) hostileLeaveLoop(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Leave loop</title></head><body>
<div id="ready">shown</div>
<script>window.addEventListener('pagehide', () => { for (;;) {} });</script>
</body></html>`)
}

func (s *site) hostileDOM(w http.ResponseWriter, r *http.Request) {
	n := 100000
	if v := r.URL.Query().Get("n"); v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x < 0 || x > 5000000 {
			http.Error(w, "bad n", http.StatusBadRequest)
			return
		}
		n = x
	}
	writeHTML(w, http.StatusOK, fmt.Sprintf(`<!doctype html><html><head><meta charset="utf-8"><title>DOM</title></head><body><div id="root"></div>
<script>
var root = document.getElementById('root'), frag = document.createDocumentFragment();
for (var i = 0; i < %d; i++) { var d = document.createElement('div'); d.className = 'n'; d.textContent = 'node ' + i; frag.appendChild(d); }
root.appendChild(frag);
var r = document.createElement('div'); r.id = 'ready'; r.textContent = 'ready'; document.body.appendChild(r);
</script></body></html>`, n))
}

// hostileCrash allocates arrays on the V8 heap until V8 gives up, which
// kills the renderer process (Chrome's "Aw, Snap" out of memory). How fast
// that comes depends on the renderer's heap limit: seconds with
// --js-flags=--max-old-space-size=256, much longer with the default.
func (s *site) hostileCrash(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Crash</title></head><body><div id="before">before</div>
<script>
setTimeout(function () {
  var keep = [];
  for (var i = 0; ; i++) { keep.push(new Array(1 << 24).fill(i)); }
}, 0);
</script></body></html>`)
}

// workerFlood is a script that starts 50 dedicated workers every 10 ms,
// for as long as it lives. Chrome sets no limit on them, and each one costs
// the browser process (not only the page's renderer) work on its main
// thread: within seconds that thread falls behind and Chrome stops
// answering CDP, for every tab, until it is killed. Killing the page's
// renderer alone did not bring it back within 20 s here.
const workerFlood = `const src = URL.createObjectURL(new Blob(['setInterval(() => {}, 1000)'], {type: 'text/javascript'}));
const workers = [];
setInterval(() => {
  for (let i = 0; i < 50; i++) { try { workers.push(new Worker(src)); } catch (e) {} }
}, 10);`

// hostileWorkers runs workerFlood in the page.
func (s *site) hostileWorkers(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Workers</title></head><body>
<div id="before">before</div>
<script>
`+workerFlood+`
</script></body></html>`)
}

// hostileNestedWorkers runs workerFlood in a worker of the page: no script
// a page's documents get (the farm's guard that bounds their workers) runs
// there.
func (s *site) hostileNestedWorkers(w http.ResponseWriter, r *http.Request) {
	writeHTML(w, http.StatusOK, `<!doctype html><html><head><meta charset="utf-8"><title>Nested workers</title></head><body>
<div id="before">before</div>
<script>
new Worker(URL.createObjectURL(new Blob([`+strconv.Quote(workerFlood)+`], {type: 'text/javascript'})));
</script></body></html>`)
}
