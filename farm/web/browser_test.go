package web

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/chromedp"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// TestDashboardInBrowser opens the dashboard in a real headless Chromium
// while work goes on (a worker completes and starts jobs and heartbeats, the
// recorder samples), and checks what an operator sees: the node rows with
// their busy sessions, live updates, lost and overloaded nodes standing out,
// sorting, the three charts drawn with data, the failures by class, and a
// job's detail view with its screenshot.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chrome")
	}
	t.Parallel()
	chrome := findChrome(t)
	f := newFixture(t, func(c *Config) {
		// The farm's default politeness; shop.test starts a job a minute at most.
		c.HostPolicy = func(host string) jobqueue.HostPolicy {
			if host == "shop.test" {
				return jobqueue.HostPolicy{MaxConcurrent: 20, MinInterval: time.Minute}
			}
			return jobqueue.HostPolicy{MaxConcurrent: 4}
		}
	})
	ctx := context.Background()
	if _, err := f.pool.Exec(ctx, "INSERT INTO hosts (host) VALUES ('shop.test')"); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"web-node-1", "web-node-2"}
	failedID := history(t, f, nodes)

	// A lost node, an overloaded one, and a completed job with a screenshot.
	f.register("web-node-lost", 6)
	if _, err := f.q.SetNodeState(ctx, "web-node-lost", jobqueue.NodeExited); err != nil {
		t.Fatal(err)
	}
	past := jobqueue.New(f.pool, jobqueue.Config{Now: func() time.Time { return time.Now().Add(-10 * time.Minute) }})
	if _, _, err := past.Register(ctx, jobqueue.NodeInfo{ID: "web-node-lost", Capacity: 6}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.q.RescueLost(ctx, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	// The hot node runs its own policy: a Chrome every 30 jobs, no exit.
	if _, _, err := f.q.Register(ctx, jobqueue.NodeInfo{ID: "web-node-hot", Hostname: "host-hot", Capacity: 6, Version: "v1",
		ChromeRecycleJobs: 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.q.Incarnation(jobqueue.Node{ID: "web-node-hot"}).Heartbeat(ctx, jobqueue.NodeLoad{CPUPercent: 98, MemUsedBytes: 7 << 30, MemTotalBytes: 8 << 30,
		ChromePSSBytes: 1900 << 20, BusySessions: 6, JobsSinceChromeStart: 19, JobsSinceProcessStart: 79, ChromeRestarts: 3}); err != nil {
		t.Fatal(err)
	}
	shotID := f.runOne("web-node-hot", "http://shop.test/item/42", jobqueue.Result{FinalURL: "http://shop.test/item/42", Status: 200,
		Title: "Item 42", Data: []byte(`{"price": 19.99, "stock": 3}`), Screenshot: pagePNG(t),
		Timings: jobqueue.Timings{NavigationMS: 310, WaitMS: 120, ExtractMS: 4, TotalMS: 440}}, "")

	// Live work: a backlog, jobs processing on both nodes, a worker that
	// finishes one and starts the next, and the recorder.
	backlog := make([]jobqueue.Spec, 12)
	for i := range backlog {
		backlog[i] = jobqueue.Spec{URL: fmt.Sprintf("http://shop.test/live/%d", i)}
	}
	f.enqueue(backlog...)
	f.start("web-node-1", 3)
	f.start("web-node-2", 5)
	var busy1 atomic.Int64
	busy1.Store(3)
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopWork()
		wg.Wait()
	}()
	wg.Add(2)
	go func() {
		defer wg.Done()
		rec := NewRecorder(RecorderConfig{Queue: f.q, Interval: time.Second})
		if err := rec.Run(workCtx); err != nil {
			t.Errorf("recorder: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for n := int64(0); ; n++ {
			select {
			case <-workCtx.Done():
				return
			case <-tick.C:
			}
			err := func() error {
				for _, node := range nodes {
					busy := int64(5)
					if node == "web-node-1" {
						busy = busy1.Load()
					}
					if _, err := f.q.Incarnation(jobqueue.Node{ID: node}).Heartbeat(workCtx, jobqueue.NodeLoad{CPUPercent: 60, MemUsedBytes: 4 << 30, MemTotalBytes: 8 << 30,
						ChromePSSBytes: (300 + n%20*30) << 20, BusySessions: int(busy), JobsSinceChromeStart: n % 20, JobsSinceProcessStart: n % 80}); err != nil {
						return err
					}
				}
				page, err := f.q.List(workCtx, jobqueue.ListFilter{NodeID: "web-node-1", States: []jobqueue.State{jobqueue.StateProcessing}, Limit: 1})
				if err != nil || len(page.Jobs) == 0 {
					return err
				}
				if err := completeJob(workCtx, f.q, page.Jobs[0].ID, "web-node-1", jobqueue.Result{Status: 200, Title: "live"}); err != nil {
					return err
				}
				if _, _, err := f.q.Enqueue(workCtx, []jobqueue.Spec{{URL: fmt.Sprintf("http://shop.test/more/%d", n)}}); err != nil {
					return err
				}
				if _, err := f.q.Assign(workCtx, "web-node-1", 1); err != nil {
					return err
				}
				_, err = f.q.Claim(workCtx, "web-node-1", 1)
				return err
			}()
			if err != nil && workCtx.Err() == nil {
				t.Errorf("worker: %v", err)
				return
			}
		}
	}()

	// Chrome, with a profile directory of our own so that the test can
	// check that no process of it outlives the test.
	profile, err := os.MkdirTemp("", "farm-web-test-chrome-")
	if err != nil {
		t.Fatal(err)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.DisableGPU,
		chromedp.UserDataDir(profile),
		// Chrome's config and crash database go in the profile too, not in $HOME.
		chromedp.Env("XDG_CONFIG_HOME="+filepath.Join(profile, "xdg-config"), "XDG_CACHE_HOME="+filepath.Join(profile, "xdg-cache")),
		chromedp.WindowSize(1440, 1000),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("hide-scrollbars", true),
	)
	defer func() {
		cancelAlloc() // kills Chrome and waits for it
		deadline := time.Now().Add(10 * time.Second)
		for left := chromeLeftovers(profile); len(left) > 0; left = chromeLeftovers(profile) {
			if time.Now().After(deadline) {
				for _, pid := range left {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				t.Errorf("Chrome processes %v outlived the allocator", left)
				break
			}
			time.Sleep(20 * time.Millisecond) // polling for the kernel to finish the kills
		}
		if err := os.RemoveAll(profile); err != nil {
			t.Errorf("remove the profile: %v", err)
		}
	}()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, 90*time.Second)
	defer cancelTimeout()

	// Console errors, uncaught exceptions and browser log errors (a CSP
	// violation, a failed asset) all fail the test.
	var consoleErrors []string
	var consoleMu sync.Mutex
	err = chromedp.Listen(bctx, func(ev any) {
		if s := consoleError(ev); s != "" {
			consoleMu.Lock()
			consoleErrors = append(consoleErrors, s)
			consoleMu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("start Chrome: %v", err)
	}
	if err := chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdplog.Enable, cdp.Empty{})
		return err
	})); err != nil {
		t.Fatalf("enable the log domain: %v", err)
	}

	poll := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond),
			chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			// What the page knows, to tell a slow page from a broken one.
			state, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.stringify((() => {
				const d = window.farmDashboard || {};
				const c = d.charts || {};
				return {errors: d.errors, step: d.step, queueRows: d.queueRows && d.queueRows.size,
					nodeRows: d.nodeRows && d.nodeRows.size, nodes: (d.nodes || []).length,
					charts: Object.fromEntries(Object.entries(c).map(([k, u]) => [k, u.data.map(s => s.length)]))};
			})())`))
			consoleMu.Lock()
			defer consoleMu.Unlock()
			t.Fatalf("waiting for %s: %v\npage state: %s\nconsole errors: %q", what, err, state, consoleErrors)
		}
	}
	eval := func(expr string, out any) {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.stringify(`+expr+`)`))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		if err := json.Unmarshal([]byte(v), out); err != nil {
			t.Fatalf("evaluate %s: %v (%s)", expr, err, v)
		}
	}
	dir := artifactDir(t)
	shoot := func(name string, full bool) {
		t.Helper()
		shot := chromedp.CaptureScreenshot()
		if full {
			shot = chromedp.FullScreenshot(100)
		}
		png, err := chromedp.Run(bctx, shot)
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}

	if err := chromedp.Do(bctx, chromedp.Navigate(f.url+"/")); err != nil {
		t.Fatalf("open the dashboard: %v", err)
	}
	poll("the node rows with busy sessions", `(() => {
		const r = document.querySelector('tr[data-node="web-node-1"]');
		const r2 = document.querySelector('tr[data-node="web-node-2"]');
		return !!r && !!r2 && Number(r.dataset.busy) > 0 && Number(r2.dataset.busy) > 0;
	})()`)
	poll("the charts with data", `(() => {
		const c = window.farmDashboard && window.farmDashboard.charts;
		return !!c && !!c.throughput && !!c.backlog && !!c.pss &&
			c.throughput.data[0].length >= 100 && c.throughput.data[1].some(v => v > 0) &&
			c.backlog.data[1].some(v => v > 0) &&
			c.pss.series.length === 10 && c.pss.data[1].filter(v => v !== null).length >= 100;
	})()`)
	// The PSS chart carries each node's range as a band between its max and
	// min series, and the band of a recycle spans the old Chrome's peak
	// down to the new one's trough.
	var band struct {
		Bands    [][]int
		Labels   []string
		Recycles int
	}
	eval(`(() => {
		const c = window.farmDashboard.charts.pss;
		let recycles = 0;
		c.data[2].forEach((hi, i) => {
			const lo = c.data[3][i], line = c.data[1][i];
			if (hi !== null && lo !== null && hi - lo > 600 && lo <= line && line <= hi) recycles++;
		});
		return {Bands: c.bands.map(b => b.series), Labels: c.series.map(s => s.label || ""), Recycles: recycles};
	})()`, &band)
	if fmt.Sprint(band.Bands) != "[[2 3] [5 6] [8 9]]" || band.Labels[2] != "web-node-1 max" || band.Labels[3] != "web-node-1 min" {
		t.Errorf("PSS chart bands %v over series %q, want each node's max and min", band.Bands, band.Labels)
	}
	if band.Recycles < 5 {
		t.Errorf("%d samples of node 1 have a band spanning a recycle, want at least 5 (one per 20 samples)", band.Recycles)
	}
	poll("the failures by class", `document.querySelectorAll('#failures .fgroup').length === 2`)

	var rows []struct {
		Node, State, Busy, Class string
	}
	eval(`Array.from(document.querySelectorAll('#nodes tbody tr')).map(r => ({
		Node: r.dataset.node, State: r.dataset.state, Busy: r.dataset.busy, Class: r.className}))`, &rows)
	byNode := map[string]string{}
	for _, r := range rows {
		byNode[r.Node] = r.State + " busy=" + r.Busy + " class=" + r.Class
	}
	if !strings.Contains(byNode["web-node-lost"], "class=lost") {
		t.Errorf("the lost node does not stand out: %q", byNode["web-node-lost"])
	}
	if !strings.Contains(byNode["web-node-hot"], "overloaded") || !strings.Contains(byNode["web-node-hot"], "busy=6") {
		t.Errorf("the overloaded node does not stand out: %q", byNode["web-node-hot"])
	}
	if len(rows) != 4 {
		t.Errorf("node rows: %v", byNode)
	}
	// Job counts stand against each node's own thresholds, and the headers
	// list the live nodes' thresholds.
	var policy struct{ HotChrome, HotProcess, Node1Chrome, HeadChrome, HeadProcess string }
	eval(`(() => {
		const cell = (node, cls) => document.querySelector('tr[data-node="' + node + '"] td.' + cls).textContent;
		return {HotChrome: cell("web-node-hot", "since-chrome"), HotProcess: cell("web-node-hot", "since-process"),
			Node1Chrome: cell("web-node-1", "since-chrome"),
			HeadChrome: document.getElementById("th-since-chrome").textContent,
			HeadProcess: document.getElementById("th-since-process").textContent};
	})()`, &policy)
	if policy.HotChrome != "19 / 30" || policy.HotProcess != "79 / –" || !strings.HasSuffix(policy.Node1Chrome, " / 20") ||
		policy.HeadChrome != "Jobs / Chrome (of 20 / 30)" || policy.HeadProcess != "Jobs / process (of 80 / off)" {
		t.Errorf("per-node thresholds on the dashboard: %+v", policy)
	}

	// "desired nodes" is a tile only while an autoscale driver acts on the
	// count: none so far, and it appears once the producer has a driver.
	var tiles []string
	eval(`Array.from(document.querySelectorAll('#tiles .tile .k')).map(e => e.textContent)`, &tiles)
	if len(tiles) == 0 || strings.Contains(strings.Join(tiles, "|"), "desired nodes") {
		t.Errorf("tiles without a driver: %q; want no desired nodes", tiles)
	}
	f.desired.Store(3)
	poll("the desired-nodes tile with a driver", `Array.from(document.querySelectorAll('#tiles .tile')).some(e =>
		e.querySelector('.k').textContent === 'desired nodes' && e.querySelector('.v').textContent === '3')`)

	// Every chart drew its lines: pixels of each series' stroke colour are
	// on the canvas (not merely axes and grid).
	var pixels map[string]int
	eval(`(() => {
		const count = (id, rgb, translucent) => {
			const c = document.querySelector('#' + id + ' canvas');
			const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
			let n = 0;
			for (let i = 0; i < d.length; i += 4) {
				const a = d[i + 3], opaque = translucent ? a > 20 && a < 90 : a > 200;
				if (opaque && Math.abs(d[i] - rgb[0]) + Math.abs(d[i + 1] - rgb[1]) + Math.abs(d[i + 2] - rgb[2]) < 60) n++;
			}
			return n;
		};
		return {
			completed: count('chart-throughput', [22, 163, 74]),
			failed: count('chart-throughput', [220, 38, 38]),
			pending: count('chart-backlog', [234, 88, 12]),
			pssNode1: count('chart-pss', [37, 99, 235]),
			pssNode2: count('chart-pss', [220, 38, 38]),
			pssBandNode1: count('chart-pss', [37, 99, 235], true),
		};
	})()`, &pixels)
	for series, n := range pixels {
		if n < 50 {
			t.Errorf("chart series %s drew %d pixels", series, n)
		}
	}
	t.Logf("series pixels: %v", pixels)

	// Live: a heartbeat with more busy sessions shows up without a reload.
	busy1.Store(6)
	poll("the live update of busy sessions", `document.querySelector('tr[data-node="web-node-1"]')?.dataset.busy === "6"`)

	// Sorting: Chrome PSS, largest first, puts the overloaded node on top.
	if err := chromedp.Do(bctx, chromedp.Click(`th[data-key="pss"]`), chromedp.Click(`th[data-key="pss"]`)); err != nil {
		t.Fatalf("sort: %v", err)
	}
	poll("sorting by Chrome PSS", `document.querySelector('#nodes tbody tr')?.dataset.node === "web-node-hot" &&
		document.querySelector('th[data-key="pss"]').classList.contains('desc')`)
	shoot("dashboard.png", true)

	// A failure links to its job's detail.
	poll("the failure link", fmt.Sprintf(`!!document.querySelector('#failures a[href="#job/%d"]')`, failedID))
	if err := chromedp.Do(bctx, chromedp.Click(fmt.Sprintf(`#failures a[href="#job/%d"]`, failedID))); err != nil {
		t.Fatalf("open a failed job: %v", err)
	}
	poll("the failed job's detail", `!document.getElementById('job-view').hidden &&
		document.getElementById('job-body').textContent.includes('navigation timeout after 30s')`)

	// A completed job's detail shows its result and screenshot.
	if err := chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = "#job/%d"`, shotID))); err != nil {
		t.Fatal(err)
	}
	poll("the completed job's screenshot", `(() => {
		const img = document.querySelector('#job-body img.shot');
		const body = document.getElementById('job-body').textContent;
		return !!img && img.complete && img.naturalWidth === 480 && body.includes('Item 42') && body.includes('19.99');
	})()`)
	// The detail is an overlay fixed to the viewport: a viewport
	// screenshot, tall enough for the whole panel, shows it as a user sees it.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1440, 1500)); err != nil {
		t.Fatal(err)
	}
	shoot("job.png", false)

	// The jobs view: filtered by state and batch, with the batch's progress
	// and ETA; a failed job's detail retries it with the token.
	row, err := f.q.Get(ctx, failedID)
	if err != nil {
		t.Fatal(err)
	}
	liveBatch := row.BatchID
	if err := chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](`location.hash = ""`),
		chromedp.EmulateViewport(1440, 900),
		chromedp.SetValue("#jf-state", "failed"),
		chromedp.SetValue("#jf-batch", liveBatch),
		chromedp.Click(`#job-filter button[type="submit"]`)); err != nil {
		t.Fatalf("filter the jobs: %v", err)
	}
	poll("the filtered jobs and the batch progress", fmt.Sprintf(`(() => {
		const rows = [...document.querySelectorAll('#jobs tbody tr')];
		const p = document.getElementById('batch-progress');
		return rows.length > 0 && rows.every(r => r.dataset.state === "failed") &&
			rows.some(r => r.dataset.job === "%d") && !p.hidden && /\d+ \/ \d+ finished/.test(p.textContent) &&
			/ETA|done/.test(p.textContent);
	})()`, failedID))
	// The hosts view: shop.test runs jobs of its limit of 20 and, started
	// within the minute, may start again only later.
	poll("the hosts view", `(() => {
		const r = document.querySelector('#hosts tr[data-host="shop.test"]');
		return !!r && / \/ 20/.test(r.cells[1].textContent) && /^in /.test(r.cells[6].textContent);
	})()`)
	if err := chromedp.Do(bctx, chromedp.ScrollIntoView("#jobs")); err != nil {
		t.Fatal(err)
	}
	shoot("jobs-hosts.png", true)
	if err := chromedp.Do(bctx, chromedp.Click(fmt.Sprintf(`#jobs a[href="#job/%d"]`, failedID))); err != nil {
		t.Fatalf("open the failed job from the jobs view: %v", err)
	}
	poll("the retry control", `!!document.getElementById('job-retry')`)
	if err := chromedp.Do(bctx, chromedp.SetValue("#job-token", testToken), chromedp.Click("#job-retry")); err != nil {
		t.Fatalf("retry: %v", err)
	}
	// The live worker may pick the retried job up at once: it is live again.
	// The detail is rebuilt after the answer ("loading…" in between): a
	// predicate that throws would end chromedp's in-page poll for good.
	poll("the retry's answer", `document.getElementById('job-action-msg')?.textContent === 'queued again'`)
	shoot("job-retried.png", false)
	if j, err := f.q.Get(ctx, failedID); err != nil || j.State.Finished() {
		t.Fatalf("after Retry in the dashboard the job is %s, %v", j.State, err)
	}

	// A host filter searches a window of the newest ids per page: with
	// early.test's job further down than that, the page is empty and says
	// how far it searched, with a link to the next. (The live worker goes on
	// adding shop.test jobs.)
	if _, _, err := f.q.Enqueue(ctx, []jobqueue.Spec{{URL: "http://early.test/"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, "SELECT setval('jobs_id_seq', nextval('jobs_id_seq') + $1)", jobqueue.DefaultListWindow); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.q.Enqueue(ctx, []jobqueue.Spec{{URL: "http://late.test/"}}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](`location.hash = "";
			document.getElementById('jf-state').value = "";
			document.getElementById('jf-batch').value = "";
			document.getElementById('jf-host').value = "early.test"`),
		chromedp.Click(`#job-filter button[type="submit"]`)); err != nil {
		t.Fatalf("filter the jobs by host: %v", err)
	}
	poll("the searched window", `(() => {
		const s = document.getElementById('jobs-searched');
		return document.querySelectorAll('#jobs tbody tr').length === 0 && !s.hidden &&
			/down to #\d+/.test(s.textContent) && /after=\d+/.test(s.querySelector('a')?.getAttribute('href') || '');
	})()`)

	consoleMu.Lock()
	defer consoleMu.Unlock()
	if len(consoleErrors) > 0 {
		t.Errorf("console errors on the dashboard: %q", consoleErrors)
	}
}
