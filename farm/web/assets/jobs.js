// browserfarm dashboard, second part: the jobs view (filters, a batch's
// progress with its ETA), the hosts view (politeness) and the retry/cancel
// controls of the job detail. Built on the helpers app.js exposes; page data
// goes into the DOM as text only.
(function () {
  "use strict";

  const JOBS_EVERY_MS = 5000;
  const HOSTS_EVERY_MS = 5000;
  // The batch rate is measured over the progress seen in this window.
  const RATE_WINDOW_MS = 120000;
  const TOKEN_KEY = "browserfarm-api-token";

  const ui = window.farmDashboardUI;
  const {el, $, getJSON, jobLink, apiLink, fmtTime, fmtAge, poll} = ui;
  const progress = {batch: "", seen: []};
  // What the last retry or cancel of a job did, shown again when its
  // detail is redrawn with the job's new state.
  const actionDone = new Map();

  function filterQuery() {
    const q = new URLSearchParams();
    for (const k of ["state", "batch", "host", "node"]) {
      const v = $("jf-" + k).value.trim();
      if (v) q.set(k, v);
    }
    return q;
  }

  async function refreshJobs() {
    const q = filterQuery();
    q.set("limit", "50");
    const page = await getJSON("/api/jobs?" + q.toString());
    const rows = page.jobs.map((j) => el("tr", {"data-job": String(j.id), "data-state": j.state},
      el("td", null, jobLink(j.id)),
      el("td", {class: "state-" + j.state}, j.state),
      el("td", {class: "url"}, j.spec.url),
      el("td", null, j.host),
      el("td", null, j.node_id || "–"),
      el("td", null, j.attempts + "/" + j.max_attempts),
      el("td", null, fmtTime(j.created_at)),
      el("td", null, j.finished_at ? fmtTime(j.finished_at) : "–"),
      el("td", {class: "err"}, j.last_error || "")));
    $("jobs").tBodies[0].replaceChildren(...rows);
    // A filter no index serves searches a window of the newest jobs per
    // page (jobqueue.Page.SearchedDownTo); say so, and where older ones are.
    const searched = $("jobs-searched");
    searched.hidden = !page.searched_down_to;
    $("jobs-empty").hidden = rows.length > 0 || !searched.hidden;
    if (page.searched_down_to) {
      const older = new URLSearchParams(q);
      older.set("after", String(page.next));
      searched.replaceChildren((rows.length ? "These" : "No job") + " matches among the jobs down to #" +
        page.searched_down_to + "; older ones may: ", apiLink("/api/jobs?" + older.toString(), "the next page (JSON)"), ".");
    }
    await refreshBatch(q.get("batch") || "");
  }

  // refreshBatch shows the filtered batch's progress; the rate, and from it
  // the ETA, come from the progress seen over the last two minutes.
  async function refreshBatch(batch) {
    const box = $("batch-progress");
    if (!batch) {
      box.hidden = true;
      progress.batch = "";
      return;
    }
    if (progress.batch !== batch) {
      progress.batch = batch;
      progress.seen = [];
    }
    box.hidden = false;
    let b;
    try {
      b = await getJSON("/api/batches/" + encodeURIComponent(batch));
    } catch (e) {
      box.replaceChildren(el("span", {class: "err"}, e.message));
      return;
    }
    const t = Date.parse(b.now);
    progress.seen.push({t, finished: b.finished});
    progress.seen = progress.seen.filter((p) => t - p.t <= RATE_WINDOW_MS);
    const first = progress.seen[0];
    const rate = t > first.t ? (b.finished - first.finished) / ((t - first.t) / 1000) : 0;
    const left = b.total - b.finished;
    let eta;
    if (left === 0) eta = "done";
    else if (rate > 0) eta = "ETA " + fmtAge(left / rate) + " at " + rate.toFixed(1) + " jobs/s";
    else eta = progress.seen.length < 2 ? "ETA: measuring…" : "ETA: unknown, no job of it finished in the last 2 minutes";
    const s = b.by_state;
    const frac = b.total ? b.finished / b.total : 0;
    box.replaceChildren(
      el("strong", null, "Batch " + batch.slice(0, 8) + "…"), " ",
      el("span", {class: "meter wide"}, el("span", {style: "width:" + (100 * frac).toFixed(1) + "%"})), " ",
      el("span", {class: "progress-text"}, b.finished + " / " + b.total + " finished (" + s.completed + " completed, " +
        s.failed + " failed, " + s.canceled + " canceled; " + (s.pending + s.queued + s.processing) + " to go) · "),
      el("span", {class: "eta"}, eta));
  }

  async function refreshHosts() {
    const d = await getJSON("/api/hosts");
    const now = Date.parse(d.now);
    const rows = d.hosts.map((h) => {
      const running = h.queued + h.processing;
      const limit = h.max_concurrent ? String(h.max_concurrent) : "∞";
      const next = h.next_start_at ? "in " + fmtAge(Math.max(0, (Date.parse(h.next_start_at) - now) / 1000)) : "now";
      return el("tr", {class: h.at_limit ? "at-limit" : "", "data-host": h.host},
        el("td", null, h.host),
        el("td", {class: h.at_limit ? "bad" : ""}, running + " / " + limit + (h.at_limit ? " (at the limit)" : "")),
        el("td", null, String(h.queued)),
        el("td", null, String(h.processing)),
        el("td", null, h.min_interval_ms ? h.min_interval_ms + " ms" : "–"),
        el("td", null, h.last_started_at ? fmtTime(h.last_started_at) : "–"),
        el("td", null, next));
    });
    $("hosts").tBodies[0].replaceChildren(...rows);
    $("hosts-empty").hidden = rows.length > 0;
  }

  // jobActions are the job detail's retry and cancel controls; the API
  // token is kept for the browser session only.
  function jobActions(j, reload) {
    const live = j.state === "pending" || j.state === "queued" || j.state === "processing";
    const retriable = j.state === "failed" || j.state === "canceled";
    const token = el("input", {type: "password", id: "job-token", placeholder: "API token", size: 20,
      value: sessionStorage.getItem(TOKEN_KEY) || ""});
    const msg = el("span", {class: "muted", id: "job-action-msg"}, actionDone.get(j.id) || "");
    const act = async (what) => {
      sessionStorage.setItem(TOKEN_KEY, token.value);
      msg.textContent = what + "…";
      try {
        const r = await fetch("/api/jobs/" + j.id + "/" + what, {method: "POST",
          headers: {Authorization: "Bearer " + token.value, Accept: "application/json"}});
        let body = null;
        try { body = await r.json(); } catch (e) { /* reported below */ }
        if (!r.ok) throw new Error((body && body.error) || (r.status + " " + r.statusText));
        actionDone.set(j.id, what === "retry" ? "queued again" : "canceled");
        reload();
      } catch (e) {
        msg.textContent = e.message;
        msg.className = "err";
      }
    };
    const buttons = [];
    if (retriable) buttons.push(el("button", {type: "button", id: "job-retry", onclick: () => act("retry")}, "Retry"));
    if (live) buttons.push(el("button", {type: "button", id: "job-cancel", onclick: () => act("cancel")}, "Cancel"));
    if (!buttons.length) return el("p", {class: "muted", id: "job-action-msg"}, actionDone.get(j.id) || "A completed job is final.");
    return el("div", {class: "job-actions"}, token, " ", ...buttons, " ", msg);
  }
  ui.jobActions = jobActions;

  function init() {
    $("job-filter").addEventListener("submit", (e) => {
      e.preventDefault();
      refreshJobs().catch(() => {});
    });
    poll("jobs", refreshJobs, JOBS_EVERY_MS);
    poll("hosts", refreshHosts, HOSTS_EVERY_MS);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
