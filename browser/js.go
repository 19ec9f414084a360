package browser

// The scripts below run in the farm's isolated world of the page
// (world.go) with Runtime.evaluate, each as one round trip; they are
// function expressions called with JSON-quoted arguments. jsPageGuard
// alone runs in the page's own world.

// jsWhyHidden says why an element is not visible (empty when it is): hidden
// by style, or rendered without a width or a height.
const jsWhyHidden = `function (el) {
  if (typeof el.checkVisibility === 'function') {
    if (!el.checkVisibility({visibilityProperty: true})) return 'hidden (display:none or visibility:hidden, itself or an ancestor)';
  } else {
    var cs = getComputedStyle(el);
    if (cs.display === 'none') return 'hidden (display:none)';
    if (cs.visibility === 'hidden') return 'hidden (visibility:hidden)';
  }
  var r = el.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) return 'has zero size (' + r.width + 'x' + r.height + ')';
  return '';
}`

// jsDescribeWait says what a page has for a wait selector, for the error of
// a wait that timed out: not in the DOM, or present but why it is not visible.
const jsDescribeWait = `function (sel) {
  var el, n;
  try { el = document.querySelector(sel); n = document.querySelectorAll(sel).length; } catch (e) { return 'the selector is invalid'; }
  if (!el) return 'no element matches it (document.readyState ' + document.readyState + ')';
  var why = (` + jsWhyHidden + `)(el);
  var what = n > 1 ? n + ' elements match; the first is present' : 'it is present';
  return why === '' ? what + ' and visible' : what + ' but ' + why;
}`

// jsWaitFor resolves with true when the selector matches an element — any,
// or with visible set a visible one: rendered (checkVisibility: not
// display:none, not visibility:hidden, not in a hidden subtree) and with a
// width and a height (an empty div is not visible). It looks on every DOM
// mutation and every 100 ms (styles can change without a mutation). An
// invalid selector rejects with "bad selector". With textType set (a MIME
// type Chrome shows as text), a document of that type that has loaded
// without a match resolves with false: no script runs in it, so its DOM
// will not change (a document of another type, after a navigation, is
// waited on as any).
const jsWaitFor = `function (sel, visible, textType) {
  return new Promise(function (resolve, reject) {
    var done = false, mo = null, iv = 0;
    function stop() {
      done = true;
      if (mo) mo.disconnect();
      if (iv) clearInterval(iv);
    }
    function look() {
      if (done) return true;
      var el;
      try { el = document.querySelector(sel); } catch (e) { stop(); reject(new Error('bad selector: ' + sel)); return true; }
      if (!el) return false;
      if (visible && (` + jsWhyHidden + `)(el) !== '') return false;
      stop();
      resolve(true);
      return true;
    }
    if (look()) return;
    if (textType && String(document.contentType).toLowerCase() === textType) {
      var settle = function () {
        if (document.readyState === 'complete' && !look()) { stop(); resolve(false); }
      };
      document.addEventListener('readystatechange', settle);
      settle();
      if (done) return;
    }
    mo = new MutationObserver(look);
    mo.observe(document, {childList: true, subtree: true, attributes: true});
    iv = setInterval(look, 100);
  });
}`

// jsClickPoint waits for the element, scrolls it to the middle of the
// viewport and returns the viewport coordinates of its centre once the
// element stands still (same box twice, 20 ms apart) and is what a click
// there would hit. An element that stays covered (an overlay) or moving for
// 2 s gets a synthetic el.click() instead, and null is returned.
const jsClickPoint = `async function (sel) {
  await (` + jsWaitFor + `)(sel, true);
  var el = document.querySelector(sel);
  el.scrollIntoView({block: 'center', inline: 'center'});
  var last = '', deadline = Date.now() + 2000;
  while (Date.now() < deadline) {
    el = document.querySelector(sel) || el;
    var r = el.getBoundingClientRect();
    var x = r.left + r.width / 2, y = r.top + r.height / 2;
    if (x < 0 || y < 0 || x >= innerWidth || y >= innerHeight) {
      el.scrollIntoView({block: 'center', inline: 'center'});
    } else {
      var box = [r.left, r.top, r.width, r.height].join(',');
      var hit = document.elementFromPoint(x, y);
      if (box === last && hit && (hit === el || el.contains(hit))) return {x: x, y: y};
      last = box;
    }
    await new Promise(function (res) { setTimeout(res, 20); });
  }
  el.click();
  return null;
}`

// jsFocus waits for the element, focuses it and puts the caret at the end.
// It returns whether the element takes text.
const jsFocus = `async function (sel) {
  await (` + jsWaitFor + `)(sel, true);
  var el = document.querySelector(sel);
  el.scrollIntoView({block: 'center'});
  el.focus();
  if (el.isContentEditable) return document.activeElement === el;
  if (!('value' in el) || typeof el.setSelectionRange !== 'function') return false;
  try { el.setSelectionRange(el.value.length, el.value.length); } catch (e) {}
  return document.activeElement === el;
}`

// jsScroll scrolls to the bottom times times; after each scroll it waits up
// to ms for the page to grow (an infinite list loading more) and goes on as
// soon as it does. It returns the final scroll height.
const jsScroll = `async function (times, ms) {
  var se = document.scrollingElement || document.documentElement;
  for (var i = 0; i < times; i++) {
    var h = se.scrollHeight;
    window.scrollTo(0, se.scrollHeight);
    var until = Date.now() + ms;
    while (Date.now() < until && se.scrollHeight <= h) {
      await new Promise(function (r) { setTimeout(r, 25); });
    }
  }
  return se.scrollHeight;
}`

// jsMeta returns the title and the URL (each cut at maxText UTF-16 units,
// so that a page cannot send megabytes through them), optionally the outer
// HTML (cut at cap units) and the followed links: absolute http(s) URLs
// without fragment, de-duplicated, at most max; more counts those past max
// and those longer than maxURL (the queue would refuse them as jobs' URLs;
// a URL's href is ASCII, so units are bytes). It runs in the farm's
// isolated world (world.go), where the page's replaced built-ins are not.
const jsMeta = `function (wantHTML, cap, follow, max, maxText, maxURL) {
  var out = {title: String(document.title).slice(0, maxText), url: String(location.href).slice(0, maxText)};
  if (wantHTML) {
    var h = document.documentElement ? document.documentElement.outerHTML : '';
    if (h.length > cap) { h = h.slice(0, cap); out.truncated = true; }
    out.html = h;
  }
  if (follow !== null) {
    var els;
    try { els = document.querySelectorAll(follow); } catch (e) { throw new Error('bad selector: ' + follow); }
    var seen = new Set(), links = [], more = 0;
    for (var i = 0; i < els.length; i++) {
      var el = els[i], href = el.href;
      if (typeof href !== 'string') {
        var raw = el.getAttribute && el.getAttribute('href');
        if (!raw) continue;
        try { href = new URL(raw, document.baseURI).href; } catch (e) { continue; }
      }
      if (!/^https?:/i.test(href)) continue;
      var k = href.indexOf('#');
      if (k >= 0) href = href.slice(0, k);
      if (seen.has(href)) continue;
      seen.add(href);
      if (links.length < max && href.length <= maxURL) links.push(href); else more++;
    }
    out.links = links;
    out.more = more;
  }
  return out;
}`

// jsPageGuard runs in every frame of a tab before the page's scripts
// (Page.addScriptToEvaluateOnNewDocument). Chrome sends a console call's
// string arguments and an uncaught exception's text over CDP whole, and the
// description of an object argument too (an Error's stack, a function's
// source, a RegExp's), so a page logging or throwing 100 MB would push
// 100 MB into the consumer before any cap: the guard cuts strings in the
// page, at maxConsoleLen characters (the format's first argument), and
// passes every other argument but numbers, booleans, null and undefined as
// its text, cut the same way. An
// uncaught exception or rejection is taken over (its default report
// canceled) and reported by console.error with the uncaughtMarker, cut the
// same way. The farm keeps only console errors and failed assertions:
// every other console method does nothing, and a document forwards at most
// jobspec.MaxConsoleErrors of those, the most a result may keep. A page
// logging in a loop would otherwise send the node an event per call, as fast
// as its renderer runs, ahead of every other session's messages on the one
// connection (TestConsoleLogFloodStopsNoOtherSession). A page that finds a
// console the guard never saw (a frame's before its first script) can still
// get past it: the cap in Go still bounds what is kept, not what crosses.
// The guard also bounds the dedicated workers a document may start
// (MaxPageWorkers).
const jsPageGuard = `(() => {
  const max = %d, marker = %q, budget = %d, maxWorkers = %d;
  const cutText = s => s.length > max ? s.slice(0, max) + '…' : s;
  const text = v => {
    try {
      if (v instanceof Error) return String(v.stack || v);
      return String(v);
    } catch (e) {
      return 'unprintable';
    }
  };
  const cut = v => {
    const t = typeof v;
    if (v === null || t === 'undefined' || t === 'number' || t === 'boolean' || t === 'bigint') return v;
    return cutText(t === 'string' ? v : text(v));
  };
  const W = globalThis.Worker;
  if (typeof W === 'function') {
    let workers = 0;
    globalThis.Worker = new Proxy(W, {construct(target, args, newTarget) {
      if (++workers > maxWorkers) {
        throw new DOMException('browserfarm: this document may start at most ' + maxWorkers + ' workers', 'QuotaExceededError');
      }
      return Reflect.construct(target, args, newTarget);
    }});
  }
  const c = globalThis.console;
  if (!c) return;
  let left = budget;
  for (const name of ['error', 'assert']) {
    const orig = c[name];
    if (typeof orig !== 'function') continue;
    c[name] = {[name](...args) {
      if ((name === 'assert' && args[0]) || left <= 0) return;
      left--;
      return orig.apply(this, args.map(cut));
    }}[name];
  }
  // The methods that send the node an event and return nothing.
  for (const name of ['log', 'info', 'warn', 'debug', 'dir', 'dirxml', 'table', 'trace', 'group', 'groupCollapsed',
                      'groupEnd', 'clear', 'count', 'countReset', 'timeLog', 'timeEnd']) {
    if (typeof c[name] === 'function') c[name] = {[name]() {}}[name];
  }
  const report = c.error;
  globalThis.addEventListener('error', e => {
    if (!(e instanceof ErrorEvent)) return; // a resource's load error
    e.preventDefault();
    report.call(c, marker + cutText(e.error !== undefined ? text(e.error) : String(e.message)));
  }, true);
  globalThis.addEventListener('unhandledrejection', e => {
    e.preventDefault();
    report.call(c, marker + cutText(text(e.reason)));
  }, true);
})()`

// MaxPageWorkers bounds the dedicated workers one document may start: the
// next construction throws QuotaExceededError, as a browser out of a
// resource would. Chrome sets no limit, and each start is work on the
// browser process's main thread: a page starting them in a loop (the test
// site's /hostile/workers, 5,000 a second) held that thread until Chrome
// stopped answering CDP for every tab, and the health check then replaced
// the Chrome with every job on it; with the bound its job ends at its own
// timeout, its Chrome unhurt (TestRealChromeWorkerFlood). Not bounded:
// workers started by workers, where no script of the farm's runs
// (TestRealChromeNestedWorkerFlood), and a frame's Worker taken before the
// guard ran in it (as for the console).
const MaxPageWorkers = 256

// uncaughtMarker starts a console.error of jsPageGuard that reports an
// uncaught exception.
const uncaughtMarker = "\u2063browserfarm-uncaught\u2063"
