package browser

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/browserfarm/browserfarm/browser/egress"
	"github.com/browserfarm/browserfarm/internal/procstat"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
)

// chromeCPU is the CPU time of Chrome's tree so far, counting the reaped
// children of each process (renderers of disposed contexts) through
// cutime/cstime. Clock ticks are 100 per second on Linux.
func chromeCPU(b *Browser) time.Duration {
	tree := processTree(int32(b.PID()))
	var ticks int64
	for _, pid := range append(tree, int32(b.PID())) {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		// Fields 14-17 of stat (utime stime cutime cstime) are 11-14 here.
		for _, v := range f[11:15] {
			n, _ := strconv.ParseInt(v, 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// pssMeter reports the peak PSS of Chrome's tree while a benchmark renders,
// and that peak's share per session above the idle Chrome. A sample reads
// smaps_rollup of every process of the tree, a page-table walk by the
// kernel of about 3 ms a process of a busy Chrome: sampled every 200 ms,
// it took 8% of this machine's CPU from the renders of the variants that
// reported a peak, and the naive loop, which did not, looked 10-20% faster
// against them than it was. So it samples every 500 ms, and every variant
// of BenchmarkRender6, the naive loop too, carries it.
type pssMeter struct {
	idle uint64
	stop chan struct{}
	peak chan uint64
}

const pssSampleInterval = 500 * time.Millisecond

// newPSSMeter measures the idle Chrome: call it before the sessions open.
func newPSSMeter(b *testing.B, br *Browser) *pssMeter {
	idle, err := br.Memory(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return &pssMeter{idle: idle.PSSBytes}
}

// start samples until report.
func (m *pssMeter) start(br *Browser) {
	m.stop, m.peak = make(chan struct{}), make(chan uint64, 1)
	go func() {
		var peak uint64
		tick := time.NewTicker(pssSampleInterval)
		defer tick.Stop()
		for {
			if mem, err := br.Memory(context.Background()); err == nil && mem.PSSBytes > peak {
				peak = mem.PSSBytes
			}
			select {
			case <-m.stop:
				m.peak <- peak
				return
			case <-tick.C:
			}
		}
	}()
}

// report stops the sampling and reports the peak and the PSS per session.
func (m *pssMeter) report(b *testing.B, sessions int) {
	close(m.stop)
	p := <-m.peak
	b.ReportMetric(float64(p)/(1<<20), "peak_pss_MB")
	if p > m.idle {
		b.ReportMetric(float64(p-m.idle)/(1<<20)/float64(sessions), "pss_MB/session")
	}
}

// BenchmarkRender6 is the throughput of one Chrome with six sessions
// rendering /page/{n} (JavaScript fetches the API, renders 200 items) at
// once. Variants: a fresh browser context per job (the default), the shared
// context (tab reuse), and a latency-bound page whose API answers after
// 400 ms; and, as the pages of a JavaScript-heavy site, /app/{n} (the same
// page behind a 330 KB script bundle a browser may cache) with the naive
// loop, the default, the default with a cache scope (Request.CacheScope,
// the spec's cache "batch") and the shared context. It also reports the
// peak PSS of the tree and PSS per session (peak minus the idle Chrome,
// over six).
func BenchmarkRender6(b *testing.B) {
	modes := []struct {
		name  string
		iso   Isolation
		delay int
		path  string
		scope string
	}{
		{"isolated", IsolationWipe, 0, "/page/", ""},
		{"context", IsolationContext, 0, "/page/", ""},
		{"shared", IsolationShared, 0, "/page/", ""},
		{"isolated-api400ms", IsolationWipe, 400, "/page/", ""},
		{"app/isolated", IsolationWipe, 0, "/app/", ""},
		{"app/isolated-cache-scope", IsolationWipe, 0, "/app/", "bench"},
		{"app/shared", IsolationShared, 0, "/app/", ""},
	}
	b.Run("naive-chromedp", func(b *testing.B) { benchNaiveChromedp(b, "/page/") })
	b.Run("app/naive-chromedp", func(b *testing.B) { benchNaiveChromedp(b, "/app/") })
	for _, mode := range modes {
		b.Run(mode.name, func(b *testing.B) {
			e := newEnv(b)
			ctx := context.Background()
			pss := newPSSMeter(b, e.b)
			const n = 6
			sessions := make([]*Session, n)
			for i := range sessions {
				sessions[i] = e.session(b)
			}
			req := func(i int64) Request {
				return Request{
					URL:        e.url(fmt.Sprintf("%s%d?delay=%d", mode.path, i%1000, mode.delay)),
					Wait:       Wait{Selector: "#ready"},
					Extract:    "document.querySelectorAll('li.item').length",
					Isolation:  mode.iso,
					CacheScope: mode.scope,
				}
			}
			// Warm up: one render per session, outside the measure.
			var wg sync.WaitGroup
			for _, s := range sessions {
				wg.Go(func() {
					if _, err := s.Render(ctx, req(0)); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			pss.start(e.b)
			cpu0 := chromeCPU(e.b)
			var next atomic.Int64
			var failed atomic.Int64
			b.ResetTimer()
			for _, s := range sessions {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						res, err := s.Render(ctx, req(i))
						if err != nil || string(res.Data) != "200" {
							failed.Add(1)
							b.Errorf("render %d: %v", i, err)
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			elapsed := b.Elapsed()
			cpu := chromeCPU(e.b) - cpu0
			pss.report(b, n)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pages/s")
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "chrome_cpu_ms/page")
		})
	}
}

// BenchmarkColdStart is Chrome's launch to the first usable session: Launch,
// NewSession, and a first render of a small page. Kill is not measured.
func BenchmarkColdStart(b *testing.B) {
	e := newEnv(b) // only for the site; its Chrome stays idle
	root := b.TempDir()
	ctx := context.Background()
	starts := 0
	for b.Loop() {
		starts++
		br, err := Launch(ctx, Options{ProfileRoot: root})
		if err != nil {
			b.Fatal(err)
		}
		s, err := br.NewSession(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Render(ctx, Request{URL: e.url("/status/200")}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close()
		if err := br.Kill(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(starts), "ms/start")
}

// BenchmarkIsolation is the per-job cost of isolation: one session renders
// a small page back to back, on a reused tab in the shared context, in a
// fresh browser context prepared while the previous job ran (the default),
// and in a fresh browser context made when the job starts.
func BenchmarkIsolation(b *testing.B) {
	modes := []struct {
		name string
		iso  Isolation
	}{
		{"shared-tab", IsolationShared},
		{"wipe", IsolationWipe},
		{"context", IsolationContext},
	}
	for _, mode := range modes {
		b.Run(mode.name, func(b *testing.B) {
			e := newEnv(b)
			br := e.b
			s, err := br.NewSession(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			req := Request{URL: e.url("/status/200"), Isolation: mode.iso}
			if _, err := s.Render(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			var setup time.Duration
			jobs := 0
			cpu0 := chromeCPU(br)
			for b.Loop() {
				res, err := s.Render(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				setup += res.Timings.Setup
				jobs++
			}
			cpu := chromeCPU(br) - cpu0
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(jobs), "ms/job")
			b.ReportMetric(float64(setup.Microseconds())/1000/float64(jobs), "setup_ms/job")
			b.ReportMetric(float64(cpu.Milliseconds())/float64(jobs), "chrome_cpu_ms/job")
		})
	}
}

// benchNaiveChromedp is the baseline of BenchmarkRender6: the plain chromedp
// loop a scraper would write — one Chrome (the same binary and flags), six
// tabs reused from page to page, no isolation, no recycling, no result
// handling beyond the extract — rendering the same pages (path: /page/ or
// /app/).
func benchNaiveChromedp(b *testing.B, path string) {
	e := newEnv(b)
	pss := newPSSMeter(b, e.b)
	const n = 6
	tabs := make([]context.Context, n)
	for i := range tabs {
		ctx, cancel := chromedp.NewContext(e.b.rootCtx)
		b.Cleanup(cancel)
		if err := chromedp.Do(ctx); err != nil {
			b.Fatal(err)
		}
		tabs[i] = ctx
	}
	render := func(ctx context.Context, i int64) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err := chromedp.Do(ctx,
			chromedp.Navigate(e.url(fmt.Sprintf("%s%d?delay=0", path, i%1000))),
			chromedp.WaitVisible("#ready"),
		)
		if err != nil {
			return err
		}
		items, err := chromedp.Run(ctx, chromedp.Evaluate[int]("document.querySelectorAll('li.item').length"))
		if err == nil && items != 200 {
			err = fmt.Errorf("%d items", items)
		}
		return err
	}
	var wg sync.WaitGroup
	for _, t := range tabs {
		wg.Go(func() {
			if err := render(t, 0); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	pss.start(e.b)
	cpu0 := chromeCPU(e.b)
	var next atomic.Int64
	b.ResetTimer()
	for _, t := range tabs {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := render(t, i); err != nil {
					b.Errorf("render %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu := chromeCPU(e.b) - cpu0
	pss.report(b, n)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "chrome_cpu_ms/page")
}

// BenchmarkChromeLife is where a recycled Chrome's CPU goes, per life of 20
// jobs on six sessions (the default recycle point and capacity): the boot
// to the first CDP answer, the six sessions' tabs (a browser context and a
// renderer each), the first job of each session, the next 14, and then 20
// jobs on the same warm Chrome for comparison. Chrome's tree and this
// process (chromedp's side) are measured apart. The egress sub-benchmark
// puts the Chrome behind an egress proxy that allows the site, as on a
// node. The two run one after the other (with -count N, N of the one,
// then N of the other), not alternating: compare them at a steady load.
func BenchmarkChromeLife(b *testing.B) {
	site := testutil.StartSite(b, testsite.Options{})
	b.Run("direct", func(b *testing.B) { benchChromeLife(b, site, nil) })
	proxy := serveSiteProxy(b, site.URL)
	b.Run("egress", func(b *testing.B) { benchChromeLife(b, site, proxy) })
}

func benchChromeLife(b *testing.B, site *testsite.Server, proxy *egress.Proxy) {
	root := b.TempDir()
	ctx := context.Background()
	const capacity, life = 6, 20
	var boot, tabs, first, next, warm, goTabs, goWarm time.Duration
	lives := 0
	req := func(i int64) Request {
		return Request{URL: site.URL + fmt.Sprintf("/page/%d", i%1000), Wait: Wait{Selector: "#ready"},
			Extract: "document.querySelectorAll('li.item').length"}
	}
	run := func(sessions []*Session, n int64) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for _, s := range sessions {
			wg.Go(func() {
				for i := next.Add(1); i <= n; i = next.Add(1) {
					if _, err := s.Render(ctx, req(i)); err != nil {
						b.Error(err)
					}
				}
			})
		}
		wg.Wait()
	}
	for b.Loop() {
		lives++
		opts := Options{Kind: testKind(b), ProfileRoot: root, ExtraFlags: testFlags}
		if proxy != nil {
			opts.EgressProxy, opts.EgressFailure = proxy.URL(), proxy.Failure
		}
		br, err := Launch(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		c0, g0 := chromeCPU(br), procstat.SelfCPU()
		boot += c0
		sessions := make([]*Session, capacity)
		for i := range sessions {
			if sessions[i], err = br.NewSession(ctx); err != nil {
				b.Fatal(err)
			}
		}
		for _, s := range sessions {
			<-s.own.done // the tab NewSession prepares in the background
		}
		c1 := chromeCPU(br)
		tabs += c1 - c0
		goTabs += procstat.SelfCPU() - g0
		run(sessions, capacity)
		c2 := chromeCPU(br)
		first += c2 - c1
		run(sessions, life-capacity)
		c3, g3 := chromeCPU(br), procstat.SelfCPU()
		next += c3 - c2
		run(sessions, life)
		warm += chromeCPU(br) - c3
		goWarm += procstat.SelfCPU() - g3
		for _, s := range sessions {
			s.Close()
		}
		if err := br.Kill(); err != nil {
			b.Fatal(err)
		}
	}
	ms := func(d time.Duration, per int) float64 { return float64(d.Microseconds()) / 1000 / float64(lives*per) }
	b.ReportMetric(ms(boot, 1), "boot_cpu_ms")
	b.ReportMetric(ms(tabs, 1), "tabs_cpu_ms")
	b.ReportMetric(ms(first, capacity), "first_job_cpu_ms")
	b.ReportMetric(ms(next, life-capacity), "next_job_cpu_ms")
	b.ReportMetric(ms(warm, life), "warm_job_cpu_ms")
	b.ReportMetric(ms(goTabs, 1), "go_tabs_cpu_ms")
	b.ReportMetric(ms(goWarm, life), "go_warm_job_cpu_ms")
	// What one life costs beyond 20 jobs on a warm Chrome, as a share of them.
	extra := boot + tabs + first + next - warm
	b.ReportMetric(100*float64(extra)/float64(warm), "life_overhead_%")
}

// BenchmarkEgress is the cost of the egress filter: two Chromes with six
// sessions each render /page/{n}, one reaching the test site directly, one
// through an egress proxy that allows only the site (every request of the
// page then crosses the proxy, in this process). They take turns, in
// rounds of 30 pages, so that both see the same machine; each renders b.N
// pages. Go CPU is this whole process's during each side's rounds.
func BenchmarkEgress(b *testing.B) {
	site := testutil.StartSite(b, testsite.Options{})
	ctx := context.Background()
	type side struct {
		name     string
		br       *Browser
		sessions []*Session
		pages    int
		elapsed  time.Duration
		chrome   time.Duration
		goCPU    time.Duration
	}
	launch := func(name string, proxy *egress.Proxy) *side {
		opts := Options{Kind: testKind(b), ProfileRoot: b.TempDir(), ExtraFlags: testFlags}
		if proxy != nil {
			opts.EgressProxy, opts.EgressFailure = proxy.URL(), proxy.Failure
		}
		br, err := Launch(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { br.Kill() })
		sd := &side{name: name, br: br}
		for range 6 {
			s, err := br.NewSession(ctx)
			if err != nil {
				b.Fatal(err)
			}
			sd.sessions = append(sd.sessions, s)
		}
		return sd
	}
	sides := []*side{launch("direct", nil), launch("egress", serveSiteProxy(b, site.URL))}

	req := func(i int) Request {
		return Request{URL: site.URL + fmt.Sprintf("/page/%d", i%1000), Wait: Wait{Selector: "#ready"},
			Extract: "document.querySelectorAll('li.item').length"}
	}
	run := func(sd *side, n int) {
		c0, g0, t0 := chromeCPU(sd.br), procstat.SelfCPU(), time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for _, s := range sd.sessions {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					if res, err := s.Render(ctx, req(sd.pages+int(i))); err != nil || string(res.Data) != "200" {
						b.Errorf("%s render: %v", sd.name, err)
					}
				}
			})
		}
		wg.Wait()
		sd.elapsed += time.Since(t0)
		sd.chrome += chromeCPU(sd.br) - c0
		sd.goCPU += procstat.SelfCPU() - g0
		sd.pages += n
	}
	for _, sd := range sides {
		run(sd, 6) // warm: one page per session
		*sd = side{name: sd.name, br: sd.br, sessions: sd.sessions}
	}
	const round = 30
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		for _, sd := range sides {
			run(sd, n)
		}
	}
	b.StopTimer()
	for _, sd := range sides {
		b.ReportMetric(float64(sd.pages)/sd.elapsed.Seconds(), sd.name+"_pages/s")
		b.ReportMetric(float64(sd.chrome.Microseconds())/1000/float64(sd.pages), sd.name+"_chrome_cpu_ms/page")
		b.ReportMetric(float64(sd.goCPU.Microseconds())/1000/float64(sd.pages), sd.name+"_go_cpu_ms/page")
	}
	d, e := sides[0], sides[1]
	b.ReportMetric(100*(float64(e.pages)/e.elapsed.Seconds()/(float64(d.pages)/d.elapsed.Seconds())-1), "egress_pages/s_%")
	b.ReportMetric(100*(float64(e.chrome+e.goCPU)/float64(d.chrome+d.goCPU)-1), "egress_cpu_%")
}
