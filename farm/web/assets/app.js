// browserfarm dashboard: polls the producer's JSON API and draws the nodes
// table, the queue tiles, the charts (uPlot) and the failures. Everything
// that comes from jobs (URLs, titles, errors) is untrusted page data, so the
// DOM is built with textContent only, never innerHTML.
(function () {
  "use strict";

  const NODES_EVERY_MS = 2000;
  const SAMPLES_EVERY_MS = 5000;
  const FAILURES_EVERY_MS = 10000;
  const WINDOW_S = 3600;
  const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2",
    "#ca8a04", "#db2777", "#4b5563", "#65a30d", "#7c3aed", "#0d9488"];

  // State shared by the views; exposed for tests and for operators poking
  // at the console.
  const state = {
    nodes: [], stats: null,
    sort: {key: "id", desc: false},
    step: 0, queueRows: new Map(), nodeRows: new Map(),
    charts: {}, pssNodes: "", errors: {},
  };
  window.farmDashboard = state;
  // The helpers other views of the dashboard (jobs.js) build on; they may
  // set ext.jobActions to add controls to the job detail.
  const ext = {};
  window.farmDashboardUI = ext;

  // ---- helpers ----
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === "class") e.className = v;
        else if (k === "text") e.textContent = v;
        else if (k.startsWith("data-")) e.setAttribute(k, v);
        else e[k] = v;
      }
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  const $ = (id) => document.getElementById(id);

  // A producer that listens beyond loopback wants a bearer token for reads
  // (FARM_READ_TOKEN or FARM_API_TOKEN): asked for once, kept for this tab.
  // A 401 for a request sent before the token was entered is just sent again.
  const tokenKey = "browserfarm-token";
  let declined = false; // the user cancelled the prompt: do not ask again
  async function authedFetch(path, accept, retried) {
    const headers = {Accept: accept};
    const token = sessionStorage.getItem(tokenKey);
    if (token) headers.Authorization = "Bearer " + token;
    const r = await fetch(path, {cache: "no-store", headers});
    if (r.status === 401 && !retried) {
      const now = sessionStorage.getItem(tokenKey);
      if (now && now !== token) return authedFetch(path, accept, true);
      if (!declined) {
        const t = window.prompt("This farm needs a token to show its jobs (FARM_READ_TOKEN):");
        if (t && t.trim()) {
          sessionStorage.setItem(tokenKey, t.trim());
          return authedFetch(path, accept, true);
        }
        declined = true;
      }
    }
    return r;
  }

  // Reads the page's own links and images would make carry no token: they
  // are fetched with it and shown from blob: URLs instead.
  async function authedBlobURL(path, accept) {
    const r = await authedFetch(path, accept);
    if (!r.ok) throw new Error(r.status + " " + r.statusText);
    return URL.createObjectURL(await r.blob());
  }

  // apiLink opens an API read in a new tab, with the token.
  function apiLink(path, text) {
    const a = el("a", {href: path, target: "_blank"}, text);
    a.addEventListener("click", (ev) => {
      ev.preventDefault();
      const w = window.open("", "_blank"); // now, while the click lets it
      authedBlobURL(path, "application/json").then((u) => {
        if (w) w.location = u;
        setTimeout(() => URL.revokeObjectURL(u), 60000);
      }, (e) => {
        if (w) w.close();
        window.alert(path + ": " + e.message);
      });
    });
    return a;
  }

  async function getJSON(path) {
    const r = await authedFetch(path, "application/json");
    let body = null;
    try { body = await r.json(); } catch (e) { /* not JSON: reported below */ }
    if (!r.ok) throw new Error((body && body.error) || (r.status + " " + r.statusText));
    return body;
  }

  function fmtBytes(n) {
    if (n === null || n === undefined) return "–";
    if (n >= 1 << 30) return (n / (1 << 30)).toFixed(1) + " GiB";
    if (n >= 1 << 20) return (n / (1 << 20)).toFixed(0) + " MiB";
    if (n >= 1 << 10) return (n / (1 << 10)).toFixed(0) + " KiB";
    return n + " B";
  }
  function fmtAge(s) {
    if (s < 60) return Math.round(s) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + Math.round(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }
  function fmtTime(t) {
    if (!t) return "–";
    const d = new Date(t);
    return isNaN(d) ? String(t) : d.toLocaleString();
  }
  function meter(frac) {
    const f = Math.max(0, Math.min(1, frac || 0));
    return el("span", {class: "meter" + (f >= 1 ? " full" : "")}, el("span", {style: "width:" + (f * 100).toFixed(0) + "%"}));
  }

  function setError(source, err) {
    if (err) state.errors[source] = err.message || String(err);
    else delete state.errors[source];
    const msgs = Object.values(state.errors);
    const b = $("banner");
    b.hidden = msgs.length === 0;
    b.textContent = msgs.length ? "Cannot reach the producer: " + msgs[0] : "";
  }

  // poll runs fn now and then every ms after it finished, so slow answers
  // never pile up.
  function poll(name, fn, ms) {
    const run = async () => {
      try {
        await fn();
        setError(name, null);
      } catch (e) {
        setError(name, e);
      }
      setTimeout(run, ms);
    };
    run();
  }

  // ---- nodes and stats ----
  function nodeKey(n, key) {
    const l = n.load || {};
    switch (key) {
      case "id": return n.id;
      case "state": return n.state;
      case "busy": return l.busy_sessions / Math.max(1, n.capacity);
      case "held": return n.queued + n.processing;
      case "cpu": return l.cpu_percent;
      case "mem": return l.mem_total_bytes ? l.mem_used_bytes / l.mem_total_bytes : 0;
      case "pss": return l.chrome_pss_bytes;
      case "sinceChrome": return l.jobs_since_chrome_start;
      case "sinceProcess": return l.jobs_since_process_start;
      case "chromeRestarts": return lifeRecycles(n.lifetime || {});
      case "processRestarts": return n.process_restarts;
      case "contexts": return lifeReplacedShare(n.lifetime || {});
      case "age": return n.heartbeat_age_seconds;
    }
    return 0;
  }

  // A node id's lifetime counters (all time, across its process restarts).
  function lifeRecycles(lt) { return (lt.chrome_recycles || 0) + (lt.chrome_memory_recycles || 0); }
  function lifeRecycleText(lt) {
    let s = String(lifeRecycles(lt));
    if (lt.chrome_memory_recycles) s += " (" + lt.chrome_memory_recycles + " memory)";
    if (lt.chrome_crashes) s += " · " + lt.chrome_crashes + " crashed";
    return s;
  }
  // The share of the wiped contexts (isolation wipe) given up for new ones
  // after their jobs: what a site's service workers, auth, popups or long
  // polls cost in new contexts.
  function lifeReplacedShare(lt) {
    const reused = lt.contexts_reused || 0, replaced = lt.contexts_replaced || 0;
    return reused + replaced ? replaced / (reused + replaced) : 0;
  }
  function lifeContextText(lt) {
    const reused = lt.contexts_reused || 0, replaced = lt.contexts_replaced || 0;
    if (!reused && !replaced) return "–";
    return replaced + " of " + (reused + replaced) + " (" + (100 * lifeReplacedShare(lt)).toFixed(0) + "%)";
  }
  function lifeRestartText(lt, total) {
    const parts = [];
    if (lt.restarts_recycle) parts.push(lt.restarts_recycle + " recycle");
    if (lt.restarts_stop) parts.push(lt.restarts_stop + " stop");
    if (lt.restarts_crash) parts.push(lt.restarts_crash + " crash");
    return String(total) + (parts.length ? " (" + parts.join(", ") + ")" : "");
  }

  function renderNodes() {
    const {key, desc} = state.sort;
    const nodes = state.nodes.slice().sort((a, b) => {
      const x = nodeKey(a, key), y = nodeKey(b, key);
      const c = x < y ? -1 : x > y ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
      return desc ? -c : c;
    });
    const rows = nodes.map((n) => {
      const l = n.load || {};
      const cls = [n.state];
      if (n.overloaded) cls.push("overloaded");
      if (n.stale) cls.push("stale");
      const memFrac = l.mem_total_bytes ? l.mem_used_bytes / l.mem_total_bytes : 0;
      return el("tr", {class: cls.join(" "), "data-node": n.id, "data-busy": String(l.busy_sessions), "data-state": n.state},
        el("td", {title: (n.hostname || "") + (n.version ? " · " + n.version : "")}, n.id),
        el("td", {class: "state " + n.state}, n.state + (n.stale ? " (no heartbeat)" : "")),
        el("td", {class: l.busy_sessions > n.capacity ? "bad" : ""}, l.busy_sessions + "/" + n.capacity, meter(l.busy_sessions / n.capacity)),
        el("td", {title: n.queued + " queued, " + n.processing + " processing"}, n.queued + " + " + n.processing),
        el("td", {class: l.cpu_percent >= 90 ? "bad" : ""}, (l.cpu_percent || 0).toFixed(0) + "%"),
        el("td", {class: memFrac >= 0.9 ? "bad" : ""}, l.mem_total_bytes ? fmtBytes(l.mem_used_bytes) + " / " + fmtBytes(l.mem_total_bytes) : "–"),
        el("td", null, l.chrome_pss_bytes ? fmtBytes(l.chrome_pss_bytes) : "–"),
        ofThreshold("since-chrome", l.jobs_since_chrome_start, n.chrome_recycle_jobs, "Chrome recycle"),
        ofThreshold("since-process", l.jobs_since_process_start, n.exit_after_jobs, "process exit"),
        el("td", {class: "life-recycles", title: "all time, across process restarts; the current process: " + l.chrome_restarts + " Chrome restarts"},
          lifeRecycleText(n.lifetime || {})),
        el("td", {class: "life-restarts", title: "process restarts after exit 75 (recycle), a stop, or a crash/kill/loss"},
          lifeRestartText(n.lifetime || {}, n.process_restarts)),
        el("td", {class: "life-contexts", title: "wiped contexts given up for new ones after their jobs, of all wiped contexts, all time; the node's log lines say why"},
          lifeContextText(n.lifetime || {})),
        el("td", {class: n.stale ? "bad" : ""}, fmtAge(n.heartbeat_age_seconds) + " ago"));
    });
    $("nodes").tBodies[0].replaceChildren(...rows);
    $("nodes-empty").hidden = nodes.length > 0;
    for (const th of $("nodes").tHead.rows[0].cells) {
      th.classList.toggle("sorted", th.dataset.key === key);
      th.classList.toggle("desc", th.dataset.key === key && desc);
    }
    const counts = {};
    for (const n of state.nodes) counts[n.state] = (counts[n.state] || 0) + 1;
    const lost = counts.lost || 0, over = state.nodes.filter((n) => n.overloaded).length;
    $("node-summary").textContent = Object.entries(counts).map(([s, c]) => c + " " + s).join(", ") +
      (over ? " · " + over + " overloaded" : "") + (lost ? " · " + lost + " lost" : "");
  }

  // A job count against the node's own threshold, as the node reported it
  // when it registered (0: the threshold is off).
  function ofThreshold(cls, count, limit, what) {
    if (!limit) return el("td", {class: cls, title: "no " + what + " threshold on this node"}, count + " / –");
    return el("td", {class: cls, title: what + " after " + limit + " jobs on this node"}, count + " / " + limit, meter(count / limit));
  }

  // The thresholds of the live nodes for a column header: one value when
  // they agree, else each distinct one.
  function thresholds(key) {
    const vs = new Set();
    for (const n of state.nodes) if (n.state === "active" || n.state === "draining") vs.add(n[key] ? String(n[key]) : "off");
    return vs.size ? " (of " + Array.from(vs).sort().join(" / ") + ")" : "";
  }

  function tile(label, value, bad) {
    return el("div", {class: "tile" + (bad ? " bad" : "")}, el("div", {class: "v"}, value), el("div", {class: "k"}, label));
  }

  function renderStats() {
    const s = state.stats;
    if (!s) return;
    const j = s.jobs || {};
    let busy = 0, cap = 0, active = 0;
    for (const n of state.nodes) {
      if (n.state !== "active" && n.state !== "draining") continue;
      active++;
      busy += n.load.busy_sessions;
      cap += n.capacity;
    }
    const oldest = s.oldest_pending ? fmtAge(Math.max(0, (Date.parse(s.now) - Date.parse(s.oldest_pending)) / 1000)) : "–";
    const tiles = [
      tile("pending (" + s.ready + " ready)", j.pending),
      tile("queued", j.queued),
      tile("processing", j.processing),
      tile("completed / min", s.completed_last_minute),
      tile("failed / min", s.failed_last_minute, s.failed_last_minute > 0),
      tile("completed (all time)", s.lifetime.jobs_completed),
      tile("failed (all time)", s.lifetime.jobs_failed, s.lifetime.jobs_failed > 0),
      tile("canceled", j.canceled),
      tile("oldest pending", oldest),
      tile("sessions busy", busy + "/" + cap),
      tile("nodes up", String(active)),
    ];
    if (s.autoscale) tiles.push(tile("desired nodes", String(s.desired_nodes)));
    $("tiles").replaceChildren(...tiles);
    const role = $("role");
    role.textContent = s.leader ? "leader" : "standby (read-only)";
    role.className = "badge " + (s.leader ? "leader" : "standby");
    $("version").textContent = s.version;
  }

  async function refreshNodes() {
    const [nodes, stats] = await Promise.all([getJSON("/api/nodes"), getJSON("/api/stats")]);
    state.nodes = nodes.nodes || [];
    state.stats = stats;
    $("th-since-chrome").textContent = "Jobs / Chrome" + thresholds("chrome_recycle_jobs");
    $("th-since-process").textContent = "Jobs / process" + thresholds("exit_after_jobs");
    renderNodes();
    renderStats();
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  }

  // ---- charts ----
  function chartSize(id) {
    const box = $(id);
    return {width: Math.max(300, box.clientWidth), height: 220};
  }

  function makeChart(id, series, yFmt, data, extra) {
    const size = chartSize(id);
    const opts = {...extra,
      width: size.width, height: size.height,
      scales: {x: {time: true}},
      series: [{}].concat(series),
      axes: [{}, {size: 72, values: (u, vals) => vals.map(yFmt)}],
      legend: {live: true},
    };
    $(id).replaceChildren();
    return new uPlot(opts, data, $(id));
  }

  const intFmt = (v) => (v === null || v === undefined ? "" : Math.round(v) === v ? String(v) : v.toFixed(1));
  const mibFmt = (v) => (v === null || v === undefined ? "" : v >= 1000 ? (v / 1024).toFixed(1) + " GiB" : v.toFixed(0) + " MiB");

  function renderCharts() {
    const ts = Array.from(state.queueRows.keys()).sort((a, b) => a - b);
    const q = ts.map((t) => state.queueRows.get(t));
    const thr = [ts, q.map((r) => r.completed), q.map((r) => r.failed)];
    const back = [ts, q.map((r) => r.pending), q.map((r) => r.queued), q.map((r) => r.processing)];
    const stepped = uPlot.paths && uPlot.paths.stepped ? uPlot.paths.stepped({align: 1}) : undefined;
    if (!state.charts.throughput) {
      state.charts.throughput = makeChart("chart-throughput", [
        {label: "completed", stroke: "#16a34a", fill: "rgba(22,163,74,.12)", width: 1.5, paths: stepped},
        {label: "failed", stroke: "#dc2626", fill: "rgba(220,38,38,.12)", width: 1.5, paths: stepped},
      ], intFmt, thr);
    } else {
      state.charts.throughput.setData(thr);
    }
    if (!state.charts.backlog) {
      state.charts.backlog = makeChart("chart-backlog", [
        {label: "pending", stroke: "#ea580c", width: 1.5},
        {label: "queued", stroke: "#2563eb", width: 1.5},
        {label: "processing", stroke: "#9333ea", width: 1.5},
      ], intFmt, back);
    } else {
      state.charts.backlog.setData(back);
    }

    const nts = Array.from(state.nodeRows.keys()).sort((a, b) => a - b);
    const ids = new Set();
    for (const t of nts) for (const id of state.nodeRows.get(t).keys()) ids.add(id);
    const nodeIDs = Array.from(ids).sort();
    // Per node three series: the line (the peak of each sample), then the
    // range the node saw over the sample, drawn as a band between its max
    // and min — a Chrome recycled between two samples shows as a tall band.
    const mib = (v) => (v === null || v === undefined ? null : v / (1 << 20));
    const pss = [nts];
    for (const id of nodeIDs) {
      const pts = nts.map((t) => state.nodeRows.get(t).get(id));
      pss.push(pts.map((p) => (p ? mib(p.pss) : null)));
      pss.push(pts.map((p) => (p ? mib(p.pssMax) : null)));
      pss.push(pts.map((p) => (p ? mib(p.pssMin) : null)));
    }
    const sig = nodeIDs.join("\n");
    if (!state.charts.pss || state.pssNodes !== sig) {
      if (state.charts.pss) state.charts.pss.destroy();
      const series = [], bands = [];
      nodeIDs.forEach((id, i) => {
        const c = PALETTE[i % PALETTE.length];
        series.push({label: id, stroke: c, width: 1.5});
        series.push({label: id + " max", stroke: c + "55", width: 0.5, points: {show: false}});
        series.push({label: id + " min", stroke: c + "55", width: 0.5, points: {show: false}});
        bands.push({series: [3 * i + 2, 3 * i + 3], fill: c + "2e"});
      });
      state.charts.pss = makeChart("chart-pss", series, mibFmt, pss, {bands});
      state.pssNodes = sig;
    } else {
      state.charts.pss.setData(pss);
    }
  }

  async function refreshSamples() {
    let url = "/api/samples";
    const last = Math.max(-Infinity, ...state.queueRows.keys(), ...state.nodeRows.keys());
    if (state.step && isFinite(last)) url += "?since=" + last + "&step=" + state.step;
    const s = await getJSON(url);
    if (s.step_seconds !== state.step) {
      state.step = s.step_seconds;
      state.queueRows.clear();
      state.nodeRows.clear();
    }
    const from = Math.floor(Date.parse(s.since) / 1000 / state.step) * state.step;
    for (const m of [state.queueRows, state.nodeRows]) {
      for (const t of Array.from(m.keys())) if (t >= from) m.delete(t);
    }
    const q = s.queue;
    q.t.forEach((t, i) => state.queueRows.set(t, {
      completed: q.completed[i], failed: q.failed[i], pending: q.pending[i], queued: q.queued[i], processing: q.processing[i],
    }));
    const n = s.nodes;
    n.t.forEach((t, i) => {
      const row = new Map();
      for (const [id, ser] of Object.entries(n.series)) {
        if (ser.chrome_pss_bytes[i] === null) continue;
        row.set(id, {pss: ser.chrome_pss_bytes[i], pssMin: ser.chrome_pss_min_bytes[i], pssMax: ser.chrome_pss_max_bytes[i],
          busy: ser.busy_sessions[i], cpu: ser.cpu_percent[i]});
      }
      state.nodeRows.set(t, row);
    });
    // A fleet larger than the chart shows the nodes with the highest PSS
    // over the chart window (the producer's maxChartNodes). When that set
    // changes, the chart loads the window again: a node that joined it gets
    // its earlier samples, and one that left it leaves the chart.
    const chosen = $("pss-chosen");
    chosen.hidden = !n.chosen;
    const chosenSig = n.chosen ? n.chosen_ids.join("\n") : "";
    if (chosenSig !== state.chosenSig) {
      const reload = state.chosenSig !== undefined;
      state.chosenSig = chosenSig;
      if (reload) {
        state.step = 0;
        return refreshSamples();
      }
    }
    if (n.chosen) {
      chosen.textContent = "Showing the " + n.chosen_ids.length + " of " + n.total +
        " nodes with the highest Chrome PSS in the last " + fmtAge(n.chosen_over_seconds) + ".";
    }
    const cutoff = Date.parse(s.now) / 1000 - WINDOW_S;
    for (const m of [state.queueRows, state.nodeRows]) {
      for (const t of Array.from(m.keys())) if (t < cutoff) m.delete(t);
    }
    $("step-note").textContent = "— jobs per " + state.step + " s";
    renderCharts();
  }

  // ---- failures ----
  function jobLink(id) {
    return el("a", {href: "#job/" + id}, "#" + id);
  }

  async function refreshFailures() {
    const f = await getJSON("/api/failures");
    const groups = f.groups.map((g) => el("div", {class: "fgroup", "data-class": g.error_class},
      el("div", {class: "fgroup-head"},
        el("span", {class: "cls"}, g.error_class),
        el("span", null, g.count + (g.count === 1 ? " job" : " jobs")),
        el("span", {class: "muted"}, "last " + fmtTime(g.last_at))),
      el("ul", null, ...g.recent.map((j) => el("li", null,
        jobLink(j.id), " ", j.url, j.node_id ? " on " + j.node_id : "", " — ",
        el("span", {class: "err"}, j.error))))));
    $("failures").replaceChildren(...groups);
    $("failures-empty").hidden = groups.length > 0;
  }

  // ---- job detail ----
  function kv(pairs) {
    const dl = el("dl", {class: "kv"});
    for (const [k, v] of pairs) {
      if (v === undefined || v === null || v === "") continue;
      dl.append(el("dt", null, k), el("dd", null, v));
    }
    return dl;
  }

  async function showJob(id) {
    $("job-view").hidden = false;
    $("job-title").textContent = "Job #" + id;
    const body = $("job-body");
    body.replaceChildren(el("p", {class: "muted"}, "loading…"));
    let d;
    try {
      d = await getJSON("/api/jobs/" + encodeURIComponent(id));
    } catch (e) {
      body.replaceChildren(el("p", {class: "state-failed"}, e.message));
      return;
    }
    const j = d.job;
    const parts = [
      kv([
        ["State", el("span", {class: "state-" + j.state}, j.state)],
        ["URL", j.spec.url],
        ["Attempts", j.attempts + " of " + j.max_attempts],
        ["Node", j.node_id],
        ["Batch", apiLink("/api/jobs?batch=" + encodeURIComponent(j.batch_id), j.batch_id)],
        ["Priority", String(j.priority)],
        ["Created", fmtTime(j.created_at)],
        ["Queued", j.queued_at && fmtTime(j.queued_at)],
        ["Started", j.started_at && fmtTime(j.started_at)],
        ["Finished", j.finished_at && fmtTime(j.finished_at)],
        ["Error class", j.error_class],
        ["Last error", j.last_error],
        ["Crawl", j.parent_id ? el("span", null, "depth " + j.depth + ", parent ", jobLink(j.parent_id)) : null],
      ]),
    ];
    parts.push(el("h3", null, "Spec"), el("pre", null, JSON.stringify(j.spec, null, 2)));
    const r = d.result;
    if (r) {
      const t = r.timings || {};
      parts.push(el("h3", null, "Result"), kv([
        ["Final URL", r.final_url],
        ["HTTP status", String(r.status)],
        ["Title", r.title],
        ["Timings", "total " + t.total_ms + " ms (navigation " + t.navigation_ms + ", wait " + t.wait_ms +
          ", actions " + t.actions_ms + ", extract " + t.extract_ms + ")"],
        ["HTML", r.html_bytes ? fmtBytes(r.html_bytes) + (r.html_truncated ? " (cut at the node's cap)" : "") : null],
        ["Links found", r.links ? String(r.links) : null],
        ["Links over the limit", r.links_over_limit ? r.links_over_limit + " not followed (follow.max_links)" : null],
        ["Full result", apiLink("/api/jobs/" + j.id + "/result", "JSON")],
      ]));
      if (r.data !== undefined) parts.push(el("h4", null, "Extracted data"), el("pre", null, JSON.stringify(r.data, null, 2)));
      if (r.console_errors && r.console_errors.length) {
        parts.push(el("h4", null, "Console errors"), el("pre", null, r.console_errors.join("\n")));
      }
      if (r.has_screenshot) {
        const img = el("img", {class: "shot", alt: "screenshot of job " + j.id});
        authedBlobURL("/api/jobs/" + j.id + "/screenshot", "image/*").then((u) => {
          img.addEventListener("load", () => URL.revokeObjectURL(u), {once: true});
          img.src = u;
        }, (e) => { img.alt = "screenshot of job " + j.id + ": " + e.message; });
        parts.push(el("h4", null, "Screenshot"), img);
      }
    }
    if (ext.jobActions) parts.push(ext.jobActions(j, () => showJob(id)));
    body.replaceChildren(...parts);
  }

  function route() {
    const m = /^#job\/(\d+)$/.exec(location.hash);
    if (m) showJob(m[1]);
    else $("job-view").hidden = true;
  }

  Object.assign(ext, {el, $, getJSON, jobLink, apiLink, fmtTime, fmtAge, poll});

  // ---- wiring ----
  function init() {
    for (const th of $("nodes").tHead.rows[0].cells) {
      th.addEventListener("click", () => {
        const k = th.dataset.key;
        state.sort = {key: k, desc: state.sort.key === k ? !state.sort.desc : false};
        renderNodes();
      });
    }
    $("open-job").addEventListener("submit", (e) => {
      e.preventDefault();
      const id = $("open-job-id").value.trim().replace(/^#/, "");
      if (/^\d+$/.test(id)) location.hash = "#job/" + id;
    });
    $("job-view").addEventListener("click", (e) => {
      if (e.target === $("job-view")) location.hash = "";
    });
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && !$("job-view").hidden) location.hash = "";
    });
    window.addEventListener("hashchange", route);
    let resizeTimer = 0;
    window.addEventListener("resize", () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => {
        for (const [name, c] of Object.entries(state.charts)) {
          c.setSize(chartSize({throughput: "chart-throughput", backlog: "chart-backlog", pss: "chart-pss"}[name]));
        }
      }, 150);
    });
    route();
    poll("nodes", refreshNodes, NODES_EVERY_MS);
    poll("samples", refreshSamples, SAMPLES_EVERY_MS);
    poll("failures", refreshFailures, FAILURES_EVERY_MS);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
