// Command benchcrawlee is the harness behind `scripts/bench.sh crawlee`: it
// compares the rendering throughput of the farm's browser package with
// Crawlee's PuppeteerCrawler at the same concurrency, on the same machine,
// the same Chromium and the same pages (internal/testsite's /page/{n},
// waited for until #ready, li.item counted). Each run is a child process
// tree of its own (this binary's farm worker, or node with
// scripts/crawlee-bench.mjs) with one Chrome; the runs alternate between the
// sides, the warm-up is outside the measure, and the CPU time of the whole
// tree (driver and Chrome) is read from /proc around the measured pages. It
// prints progress on stderr and one JSON line on stdout.
//
//	benchcrawlee -driver DIR/crawlee-bench.mjs [-pages 300] [-rounds 2] [-concurrency 6] [-delays 0,400]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/internal/benchstat"
	"github.com/browserfarm/browserfarm/internal/procstat"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// workerCmd is the hidden first argument that makes this binary the farm
// side's worker.
const workerCmd = "farm-worker"

// crawleeFlags are the Chrome flags of the Crawlee side: what every
// deployment needs (the farm's browser package passes these and more).
// Puppeteer adds its own defaults, which disable much the same features as
// the browser package's list.
var crawleeFlags = []string{
	"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--no-first-run", "--disable-quic",
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func realMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if len(args) == 2 && args[0] == workerCmd {
		var cfg workerConfig
		if err := json.Unmarshal([]byte(args[1]), &cfg); err != nil {
			fmt.Fprintf(stderr, "benchcrawlee %s: config: %v\n", workerCmd, err)
			return 2
		}
		log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.Lock(zapcore.AddSync(stderr)), zapcore.WarnLevel))
		if err := runFarmWorker(ctx, cfg, stdin, stdout, log); err != nil {
			fmt.Fprintf(stderr, "benchcrawlee: %v\n", err)
			return 1
		}
		return 0
	}

	fs := flag.NewFlagSet("benchcrawlee", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pages := fs.Int("pages", 300, "measured pages per run")
	rounds := fs.Int("rounds", 2, "rounds; each runs every side on every page kind, in an order that rotates")
	conc := fs.Int("concurrency", 6, "pages rendered at once on both sides")
	delays := fs.String("delays", "0,400", "API delays in ms of /page/{n}?delay= (0: CPU-bound; 400: latency-bound)")
	page := fs.String("page", pagePlain, "pages rendered: page (/page/{n}, one document and its API call) or app (/app/{n}: the same behind a 330 KB cacheable script bundle, as a JavaScript-heavy site)")
	chrome := fs.String("chrome", "", "browser binary of the farm sides (default: the farm's own default, the headless shell if installed)")
	crawleeChrome := fs.String("crawlee-chrome", "/usr/lib/chromium/chromium", "browser binary of the Crawlee sides (default: full Chromium, what Puppeteer's default headless mode runs)")
	recycle := fs.Int("recycle", 20, "farm sides: a new Chrome every N jobs (0: never)")
	exitAfter := fs.Int("exit-after", 80, "farm sides: a new node, as after the process's exit 75, every N jobs (0: never)")
	sideList := fs.String("sides", "farm,crawlee,farm_shared", "sides to run, alternating: farm (default isolation), farm_cache (default isolation, cache \"batch\"), farm_shared, farm_context, farm_egress (farm behind the egress proxy), farm_one_chrome (default isolation, one Chrome for all the sessions), crawlee, crawlee_incognito")
	node := fs.String("node", "node", "node binary")
	driver := fs.String("driver", "", "path of crawlee-bench.mjs next to a node_modules with @crawlee/puppeteer and puppeteer-core (bench.sh installs them)")
	runTimeout := fs.Duration("run-timeout", 10*time.Minute, "bound of one run, Chrome start to exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ds, err := parseDelays(*delays)
	if err != nil || *pages < 1 || *rounds < 1 || *conc < 1 || *driver == "" || *recycle < 0 || *exitAfter < 0 || (*page != pagePlain && *page != pageApp) {
		fmt.Fprintf(stderr, "benchcrawlee: need -driver, -pages, -rounds, -concurrency ≥ 1, -recycle and -exit-after ≥ 0, -page page or app and -delays as ms,ms… (%v)\n", err)
		return 2
	}
	ss, err := parseSides(*sideList)
	if err != nil {
		fmt.Fprintf(stderr, "benchcrawlee: -sides: %v\n", err)
		return 2
	}
	farmChrome := *chrome
	if farmChrome == "" {
		if farmChrome, err = browser.FindExec(""); err != nil {
			fmt.Fprintf(stderr, "benchcrawlee: %v\n", err)
			return 1
		}
	}
	b := &bench{
		pages: *pages, rounds: *rounds, conc: *conc, delays: ds, sides: ss, page: *page,
		chrome: farmChrome, crawleeChrome: *crawleeChrome, recycle: *recycle, exitAfter: *exitAfter,
		node: *node, driver: *driver, runTimeout: *runTimeout,
		progress: func(format string, a ...any) { fmt.Fprintf(stderr, "benchcrawlee: "+format+"\n", a...) },
		stderr:   stderr,
	}
	out, err := b.run(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "benchcrawlee: %v\n", err)
		return 1
	}
	line, err := json.Marshal(out)
	if err != nil {
		fmt.Fprintf(stderr, "benchcrawlee: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", line)
	return 0
}

func parseDelays(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("delay %q: want milliseconds ≥ 0", f)
		}
		out = append(out, d)
	}
	return out, nil
}

// side is one contender.
type side string

const (
	// farm is the farm's default: isolation wipe.
	farm side = "farm"
	// farmCache is the default with cache "batch": every job of the run
	// is of one batch, whose jobs share the HTTP cache.
	farmCache   side = "farm_cache"
	farmShared  side = "farm_shared"
	farmContext side = "farm_context"
	crawlee     side = "crawlee"
	// crawleeIncognito is Crawlee with useIncognitoPages: a browser
	// context per page.
	crawleeIncognito side = "crawlee_incognito"
	// farmEgress is farm behind the node's egress proxy (package
	// browser/egress, allowing the test site), as a farm node runs: the
	// difference to farm is the policy's cost.
	farmEgress side = "farm_egress"
	// farmOneChrome is the default on one Chrome for all the node's
	// sessions (SessionsPerChrome = concurrency), the layout before the
	// default became a Chrome per session.
	farmOneChrome side = "farm_one_chrome"
)

func parseSides(s string) ([]side, error) {
	var out []side
	for f := range strings.SplitSeq(s, ",") {
		switch sd := side(strings.TrimSpace(f)); sd {
		case farm, farmCache, farmShared, farmContext, farmEgress, farmOneChrome, crawlee, crawleeIncognito:
			out = append(out, sd)
		default:
			return nil, fmt.Errorf("unknown side %q", f)
		}
	}
	return out, nil
}

type bench struct {
	pages, rounds, conc int
	page                string
	delays              []int
	sides               []side
	chrome, node        string
	crawleeChrome       string
	recycle, exitAfter  int
	driver              string
	runTimeout          time.Duration
	progress            func(format string, a ...any)
	stderr              io.Writer
}

// runRecord is one run in the output.
type runRecord struct {
	Round        int     `json:"round"`
	Side         side    `json:"side"`
	DelayMs      int     `json:"delay_ms"`
	PagesPerS    float64 `json:"pages_per_s"`
	CPUMsPerPage float64 `json:"cpu_ms_per_page"`
	// SelfCPUMsPerPage is the farm worker's own Go process, a part of
	// CPUMsPerPage (farm sides only).
	SelfCPUMsPerPage float64 `json:"self_cpu_ms_per_page,omitempty"`
	// AcquireWaitMsPerPage and RenderMsPerPage: a farm page's mean wait for
	// a slot and its mean time after it (farm sides only).
	AcquireWaitMsPerPage float64 `json:"acquire_wait_ms_per_page,omitempty"`
	RenderMsPerPage      float64 `json:"render_ms_per_page,omitempty"`
	MeanConcurrency      float64 `json:"mean_concurrency"`
	MaxConcurrency       int     `json:"max_concurrency"`
	Load1                float64 `json:"load1"`
}

func (b *bench) run(ctx context.Context) (map[string]any, error) {
	site, err := testsite.Start(ctx, testsite.Options{})
	if err != nil {
		return nil, err
	}
	defer site.Close()
	storage, err := os.MkdirTemp("", "benchcrawlee-")
	if err != nil {
		return nil, fmt.Errorf("crawlee storage dir: %w", err)
	}
	defer os.RemoveAll(storage)

	load0 := procstat.LoadAvg()
	b.progress("%d %s pages per run, concurrency %d, %d rounds, delays %v ms; load average %s", b.pages, b.page, b.conc, b.rounds, b.delays, load0)
	var runs []runRecord
	var versions map[string]string
	for r := range b.rounds {
		// Rotating the order spreads a change of the machine's load over
		// every side alike.
		order := append(slices.Clone(b.sides[r%len(b.sides):]), b.sides[:r%len(b.sides)]...)
		for _, d := range b.delays {
			for _, s := range order {
				cfg := workerConfig{URL: site.URL, Page: b.page, Pages: b.pages, Delay: d, Concurrency: b.conc, Chrome: b.chrome,
					Shared: s == farmShared, CacheScope: s == farmCache, Context: s == farmContext, Incognito: s == crawleeIncognito, Egress: s == farmEgress, OneChrome: s == farmOneChrome,
					RecycleJobs: b.recycle, ExitAfterJobs: b.exitAfter}
				if s == crawlee || s == crawleeIncognito {
					cfg.Chrome = b.crawleeChrome
				}
				res, cpu, err := b.runWorker(ctx, s, cfg, storage)
				if err != nil {
					return nil, fmt.Errorf("round %d, %s, delay %d ms: %w", r+1, s, d, err)
				}
				rec := runRecord{
					Round: r + 1, Side: s, DelayMs: d,
					PagesPerS:            float64(res.OK) / (res.ElapsedMs / 1000),
					CPUMsPerPage:         float64(cpu.Milliseconds()) / float64(b.pages),
					SelfCPUMsPerPage:     res.SelfCPUMs / float64(b.pages),
					AcquireWaitMsPerPage: res.AcquireWaitMs / float64(b.pages),
					RenderMsPerPage:      res.RenderMs / float64(b.pages),
					MeanConcurrency:      res.MeanConcurrency,
					MaxConcurrency:       res.MaxConcurrency,
					Load1:                load1(),
				}
				runs = append(runs, rec)
				if len(res.Versions) > 0 {
					versions = res.Versions
				}
				b.progress("round %d/%d delay=%dms %-13s %.2f pages/s, %.0f CPU-ms/page%s, concurrency mean %.2f max %d, load1 %.1f%s",
					r+1, b.rounds, d, s, rec.PagesPerS, rec.CPUMsPerPage, farmSelf(rec), rec.MeanConcurrency, rec.MaxConcurrency, rec.Load1, farmTimes(rec))
			}
		}
	}
	out := map[string]any{"bench": "crawlee", "page": b.page, "pages": b.pages, "concurrency": b.conc, "rounds": b.rounds,
		"farm_chrome": b.chrome, "crawlee_chrome": b.crawleeChrome, "farm_recycle_jobs": b.recycle, "farm_exit_after_jobs": b.exitAfter,
		"loadavg_start": load0, "loadavg_end": procstat.LoadAvg(), "runs": runs}
	if versions != nil {
		out["crawlee_versions"] = versions
	}
	for _, d := range b.delays {
		suffix := ""
		if d > 0 {
			suffix = fmt.Sprintf("_api%dms", d)
		}
		for _, s := range b.sides {
			var pps, cpu, conc []float64
			for _, r := range runs {
				if r.Side == s && r.DelayMs == d {
					pps = append(pps, r.PagesPerS)
					cpu = append(cpu, r.CPUMsPerPage)
					conc = append(conc, r.MeanConcurrency)
				}
			}
			out[string(s)+suffix+"_pages_per_s"] = round2(benchstat.Median(pps))
			out[string(s)+suffix+"_cpu_ms_per_page"] = round2(benchstat.Median(cpu))
			out[string(s)+suffix+"_mean_concurrency"] = round2(benchstat.Median(conc))
			if s != b.sides[0] {
				pr, cr := pairedRatios(runs, b.sides[0], s, d)
				out[string(s)+suffix+"_pages_per_s_paired_ratio"] = round3(benchstat.Median(pr))
				out[string(s)+suffix+"_cpu_ms_per_page_paired_ratio"] = round3(benchstat.Median(cr))
			}
		}
	}
	return out, nil
}

// farmSelf is the farm worker's own process CPU per page, for the progress
// line; empty for Crawlee, whose driver does not report it.
func farmSelf(r runRecord) string {
	if r.SelfCPUMsPerPage == 0 {
		return ""
	}
	return fmt.Sprintf(" (worker process %.1f)", r.SelfCPUMsPerPage)
}

// farmTimes is a farm page's mean wait for a slot and time after it, for
// the progress line; empty for Crawlee.
func farmTimes(r runRecord) string {
	if r.RenderMsPerPage == 0 {
		return ""
	}
	return fmt.Sprintf(", per page: %.1f ms waiting for a slot, %.0f ms after", r.AcquireWaitMsPerPage, r.RenderMsPerPage)
}

// pairedRatios returns, for every round, side s's pages/s and CPU-ms/page
// over base's in the same round. Neighbouring runs share the machine's
// state of the moment, so the median of these ratios resists a load that
// drifts during the bench better than a ratio of the sides' medians.
func pairedRatios(runs []runRecord, base, s side, delay int) (pps, cpu []float64) {
	byRound := map[int]map[side]runRecord{}
	for _, r := range runs {
		if r.DelayMs != delay {
			continue
		}
		if byRound[r.Round] == nil {
			byRound[r.Round] = map[side]runRecord{}
		}
		byRound[r.Round][r.Side] = r
	}
	for _, m := range byRound {
		b, ok1 := m[base]
		o, ok2 := m[s]
		if ok1 && ok2 && b.PagesPerS > 0 && b.CPUMsPerPage > 0 {
			pps = append(pps, o.PagesPerS/b.PagesPerS)
			cpu = append(cpu, o.CPUMsPerPage/b.CPUMsPerPage)
		}
	}
	return pps, cpu
}

func round3(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 3, 64), 64)
	return v
}

// runWorker runs one side's worker as a child process and returns its
// result and the CPU time of its whole process tree over the measured pages.
func (b *bench) runWorker(ctx context.Context, s side, cfg workerConfig, storage string) (workerResult, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, b.runTimeout)
	defer cancel()
	// Every Chrome of the run keeps its profile under this dir: the CPU
	// meter finds them by it, also after they left the worker's tree.
	profile, err := os.MkdirTemp(storage, "chrome-")
	if err != nil {
		return workerResult{}, 0, err
	}
	defer killMentioning(profile)
	cfg.ProfileRoot = profile
	var cmd *exec.Cmd
	if s == crawlee || s == crawleeIncognito {
		// Puppeteer starts Chrome detached (a session of its own), so a driver
		// that dies leaves it behind. Its profile dirs go into a temp dir of
		// this run's (a fixed --user-data-dir would clash when Crawlee
		// starts its next browser before the retired one has exited),
		// which lets the sweep below find every process it started.
		cfg.Flags = append([]string(nil), crawleeFlags...)
		arg, err := json.Marshal(cfg)
		if err != nil {
			return workerResult{}, 0, err
		}
		cmd = exec.CommandContext(ctx, b.node, b.driver, string(arg))
		cmd.Env = append(os.Environ(), "CRAWLEE_STORAGE_DIR="+storage, "CRAWLEE_PERSIST_STORAGE=false", "TMPDIR="+profile)
	} else {
		arg, err := json.Marshal(cfg)
		if err != nil {
			return workerResult{}, 0, err
		}
		self, err := os.Executable()
		if err != nil {
			return workerResult{}, 0, fmt.Errorf("finding this binary: %w", err)
		}
		cmd = exec.CommandContext(ctx, self, workerCmd, string(arg))
	}
	// Its own process group, so that a Ctrl-C on the terminal reaches the
	// harness only, which then asks the worker to stop (the workers kill
	// their Chrome on SIGTERM).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	cmd.Stderr = b.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return workerResult{}, 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return workerResult{}, 0, err
	}
	if err := cmd.Start(); err != nil {
		return workerResult{}, 0, fmt.Errorf("starting the worker: %w", err)
	}
	lines := make(chan string)
	readDone := make(chan struct{})
	stopRead := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stopRead:
				// Keep draining, so that the worker never blocks on a
				// full pipe; the pipe closes when it exits.
			}
		}
	}()
	res, cpu, runErr := b.converse(ctx, cmd.Process.Pid, profile, lines, stdin)
	close(stopRead)
	stdin.Close()
	waitErr := cmd.Wait()
	<-readDone
	if runErr != nil {
		return workerResult{}, 0, errors.Join(runErr, waitErr)
	}
	if waitErr != nil {
		return workerResult{}, 0, fmt.Errorf("worker exit: %w", waitErr)
	}
	if res.Failed > 0 {
		return workerResult{}, 0, fmt.Errorf("%d of %d pages failed: %s", res.Failed, res.Failed+res.OK, strings.Join(res.Errors, "; "))
	}
	return res, cpu, nil
}

// converse drives the workers' line protocol: wait for "ready", start
// metering the CPU of the worker's tree and of every Chrome with a profile
// under profile, say go, read the result line, stop metering.
func (b *bench) converse(ctx context.Context, pid int, profile string, lines <-chan string, stdin io.Writer) (workerResult, time.Duration, error) {
	next := func() (string, error) {
		select {
		case l, ok := <-lines:
			if !ok {
				return "", errors.New("the worker ended early (its errors are above)")
			}
			return l, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	for {
		l, err := next()
		if err != nil {
			return workerResult{}, 0, err
		}
		if l == "ready" {
			break
		}
		fmt.Fprintf(b.stderr, "worker: %s\n", l)
	}
	meter := &procstat.Meter{Root: pid, Marker: procstat.ProfileMarker(profile)}
	stopMeter := meter.Start(ctx)
	defer stopMeter()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return workerResult{}, 0, fmt.Errorf("telling the worker to go: %w", err)
	}
	for {
		l, err := next()
		if err != nil {
			return workerResult{}, 0, err
		}
		if !strings.HasPrefix(l, "{") {
			fmt.Fprintf(b.stderr, "worker: %s\n", l)
			continue
		}
		stopMeter()
		cpu := meter.Total()
		var res workerResult
		if err := json.Unmarshal([]byte(l), &res); err != nil {
			return workerResult{}, 0, fmt.Errorf("worker result %q: %w", l, err)
		}
		return res, cpu, nil
	}
}

func round2(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 2, 64), 64)
	return v
}

func load1() float64 {
	f := strings.Fields(procstat.LoadAvg())
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// killMentioning SIGKILLs every process whose command line contains s and
// waits (up to 10 s) until none is left.
func killMentioning(s string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		pids := pidsMentioning(s)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pidsMentioning(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}
