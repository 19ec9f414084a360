package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/browser/egress"
	farmpkg "github.com/browserfarm/browserfarm/farm"
	"github.com/browserfarm/browserfarm/internal/procstat"
	"github.com/browserfarm/browserfarm/supervisor"
	"go.uber.org/zap"
)

// workerConfig is the JSON argument of both sides' workers (the farm worker
// here, scripts/crawlee-bench.mjs for Crawlee).
type workerConfig struct {
	URL string `json:"url"`
	// Page is the kind of page: pagePlain or pageApp, the path's first
	// segment.
	Page        string `json:"page"`
	Pages       int    `json:"pages"`
	Delay       int    `json:"delay"`
	Concurrency int    `json:"concurrency"`
	Chrome      string `json:"chrome"`
	// ProfileRoot is where the farm side's Chromes keep their profiles.
	ProfileRoot string   `json:"profile_root,omitempty"`
	Flags       []string `json:"flags,omitempty"`
	// Shared runs the farm's jobs with isolation "shared" (Chrome's default
	// context, reused tabs) instead of the default wiped context.
	Shared bool `json:"shared,omitempty"`
	// Context runs them with isolation "context": a brand-new browser
	// context per job.
	Context bool `json:"context,omitempty"`
	// CacheScope runs the default isolation with one cache scope for all
	// jobs (a spec's cache "batch", every job of one batch).
	CacheScope bool `json:"cache_scope,omitempty"`
	// RecycleJobs and ExitAfterJobs are the farm side's recycling: a new
	// Chrome every RecycleJobs jobs, a new node (supervisor and Chromes, as
	// after the process's exit 75) every ExitAfterJobs; 0 is off.
	RecycleJobs   int `json:"recycle_jobs,omitempty"`
	ExitAfterJobs int `json:"exit_after_jobs,omitempty"`
	// Incognito makes Crawlee open each page in a browser context of its
	// own (launchContext.useIncognitoPages) instead of Chrome's default one.
	Incognito bool `json:"incognito,omitempty"`
	// Egress puts the farm's Chrome behind an egress proxy that allows the
	// test site (on loopback, refused by default), as on a farm node.
	Egress bool `json:"egress,omitempty"`
	// OneChrome runs every session on one Chrome (SessionsPerChrome =
	// Concurrency) instead of the default Chrome per session.
	OneChrome bool `json:"one_chrome,omitempty"`
}

// workerResult is the JSON line a worker prints after the measured pages.
type workerResult struct {
	ElapsedMs       float64  `json:"elapsed_ms"`
	OK              int      `json:"ok"`
	Failed          int      `json:"failed"`
	Errors          []string `json:"errors,omitempty"`
	MeanConcurrency float64  `json:"mean_concurrency"`
	MaxConcurrency  int      `json:"max_concurrency"`
	// Versions names the packages a Crawlee worker ran (its driver reads
	// them from its node_modules), so that a run records what it compared.
	Versions map[string]string `json:"versions,omitempty"`
	// Restarts is how many times the farm side's node was replaced (its
	// process exits).
	Restarts int `json:"restarts,omitempty"`
	// SelfCPUMs is the farm worker's own process (supervisor, chromedp and,
	// behind the egress filter, the proxy) over the measured pages, without
	// its Chromes: what the filter costs in Go, told apart from what it
	// costs Chrome.
	SelfCPUMs float64 `json:"self_cpu_ms,omitempty"`
	// AcquireWaitMs and RenderMs split the farm side's time in pages, all
	// sessions summed: waiting for a slot (no Chrome taking sessions) and
	// the rest (rendering, and the session's wait for its tab).
	AcquireWaitMs float64 `json:"acquire_wait_ms,omitempty"`
	RenderMs      float64 `json:"render_ms,omitempty"`
}

const wantItems = "200"

// The kinds of page: the test site's /page/{n} and /app/{n}.
const (
	pagePlain = "page"
	pageApp   = "app"
)

// pageURL is the page both sides render for number n.
func pageURL(base, kind string, n, delay int) string {
	return fmt.Sprintf("%s/%s/%d?delay=%d", base, kind, n, delay)
}

// runFarmWorker is the farm side: a node's supervisor (the consumer's
// rendering path without the queue) with cfg.Concurrency sessions, recycling
// Chrome every cfg.RecycleJobs jobs and, every cfg.ExitAfterJobs jobs,
// draining and replacing the whole supervisor as the process exit and
// restart would. It speaks the workers' line protocol: "ready" after the
// warm-up, then the measured pages once a line arrives on in, then one JSON
// line.
func runFarmWorker(ctx context.Context, cfg workerConfig, in io.Reader, out io.Writer, log *zap.Logger) (err error) {
	iso := browser.IsolationWipe
	switch {
	case cfg.Shared:
		iso = browser.IsolationShared
	case cfg.Context:
		iso = browser.IsolationContext
	}
	scope := ""
	if cfg.CacheScope {
		scope = "bench"
	}
	scfg := supervisor.DefaultConfig()
	scfg.Capacity = cfg.Concurrency
	if cfg.OneChrome {
		scfg.SessionsPerChrome = cfg.Concurrency
	}
	// The worker's 0 is off; the supervisor's 0 is its default.
	scfg.ChromeRecycleJobs, scfg.ExitAfterJobs = supervisor.Off, supervisor.Off
	if cfg.RecycleJobs > 0 {
		scfg.ChromeRecycleJobs = cfg.RecycleJobs
	}
	if cfg.ExitAfterJobs > 0 {
		scfg.ExitAfterJobs = cfg.ExitAfterJobs
	}
	scfg.Browser = browser.Options{ExecPath: cfg.Chrome, ProfileRoot: cfg.ProfileRoot, Logger: log}
	scfg.Logger = log
	if cfg.Egress {
		u, err := url.Parse(cfg.URL)
		if err != nil {
			return fmt.Errorf("farm worker: %w", err)
		}
		rule, err := egress.ParseRule(u.Host)
		if err != nil {
			return fmt.Errorf("farm worker: the site's address: %w", err)
		}
		proxy, err := egress.Listen("127.0.0.1:0", egress.Config{Policy: egress.Policy{Allow: []egress.Rule{rule}}, Logger: log})
		if err != nil {
			return fmt.Errorf("farm worker: %w", err)
		}
		pctx, stop := context.WithCancel(ctx)
		served := make(chan error, 1)
		go func() { served <- proxy.Serve(pctx) }()
		defer func() {
			stop()
			err = errors.Join(err, <-served)
		}()
		scfg.Browser.EgressProxy, scfg.Browser.EgressFailure = proxy.URL(), proxy.Failure
	}
	nodes, err := startNodes(ctx, scfg)
	if err != nil {
		return fmt.Errorf("farm worker: %w", err)
	}
	defer func() { err = errors.Join(err, nodes.stop()) }()

	// acquireWait is the time pages spent waiting for a slot: with every
	// session busy, none; a page that waits found no Chrome taking sessions
	// (a recycle's replacement not ready yet, or a node's restart).
	var acquireWait atomic.Int64
	render := func(n int) error {
		for {
			g := nodes.current()
			t0 := time.Now()
			slot, err := g.sup.Acquire(ctx)
			acquireWait.Add(int64(time.Since(t0)))
			if errors.Is(err, supervisor.ErrExitDue) || errors.Is(err, supervisor.ErrStopping) {
				// The "process" is due to exit, or already draining (the
				// keeper drains it as soon as its exit is due; a page that
				// took it as current just before asks a stopping one):
				// wait for its successor.
				if err := nodes.waitNext(ctx, g); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("page %d: %w", n, err)
			}
			res, err := slot.Render(ctx, browser.Request{
				URL:        pageURL(cfg.URL, cfg.Page, n, cfg.Delay),
				Wait:       browser.Wait{Selector: "#ready"},
				Extract:    "document.querySelectorAll('li.item').length",
				Timeout:    30 * time.Second,
				Isolation:  iso,
				CacheScope: scope,
			})
			slot.Release()
			if err != nil {
				return fmt.Errorf("page %d: %w", n, err)
			}
			if string(res.Data) != wantItems {
				return fmt.Errorf("page %d: li.item: %s, want %s", n, res.Data, wantItems)
			}
			return nil
		}
	}

	// Warm-up: one page per session, outside the measure, with the same
	// page numbers as the Crawlee side's warm-up.
	var wg sync.WaitGroup
	warm := make([]error, cfg.Concurrency)
	for i := range warm {
		wg.Go(func() { warm[i] = render(100_000 + i) })
	}
	wg.Wait()
	if err := errors.Join(warm...); err != nil {
		return fmt.Errorf("farm worker: warm-up: %w", err)
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return fmt.Errorf("farm worker: %w", err)
	}
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return fmt.Errorf("farm worker: waiting for go: %w", err)
	}

	var (
		next   atomic.Int64
		busy   atomic.Int64 // nanoseconds spent inside render, all sessions
		mu     sync.Mutex
		result workerResult
	)
	start, cpu0 := time.Now(), procstat.SelfCPU()
	acquireWait.Store(0)
	for range cfg.Concurrency {
		wg.Go(func() {
			for n := next.Add(1); n <= int64(cfg.Pages); n = next.Add(1) {
				t := time.Now()
				err := render(int(n))
				busy.Add(int64(time.Since(t)))
				mu.Lock()
				if err != nil {
					result.Failed++
					if len(result.Errors) < 5 {
						result.Errors = append(result.Errors, err.Error())
					}
				} else {
					result.OK++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	result.SelfCPUMs = float64((procstat.SelfCPU() - cpu0).Microseconds()) / 1000
	result.AcquireWaitMs = float64(time.Duration(acquireWait.Load()).Microseconds()) / 1000
	result.RenderMs = float64(time.Duration(busy.Load()).Microseconds())/1000 - result.AcquireWaitMs
	result.ElapsedMs = float64(elapsed.Microseconds()) / 1000
	// Little's law: the time spent rendering over the wall time is the mean
	// number of pages in flight.
	result.MeanConcurrency = float64(busy.Load()) / float64(elapsed)
	result.MaxConcurrency = cfg.Concurrency
	result.Restarts = nodes.restarts()
	line, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("farm worker: %w", err)
	}
	if _, err := fmt.Fprintf(out, "%s\n", line); err != nil {
		return fmt.Errorf("farm worker: %w", err)
	}
	return nil
}

// node is one life of the node's process: a supervisor and its Run.
type node struct {
	sup  *supervisor.Supervisor
	stop context.CancelFunc
	done chan error
}

// nodes keeps one node running: when the current one's ExitDue fires it is
// drained and stopped, and a new one started, as the consumer's exit 75 and
// its restart would.
type nodes struct {
	cfg supervisor.Config

	mu      sync.Mutex
	cur     *node
	changed chan struct{} // closed when cur is replaced
	lives   int
	err     error

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startNode(ctx context.Context, cfg supervisor.Config) (*node, error) {
	sup, err := supervisor.New(cfg)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	n := &node{sup: sup, stop: cancel, done: make(chan error, 1)}
	go func() { n.done <- sup.Run(rctx) }()
	return n, nil
}

func startNodes(ctx context.Context, cfg supervisor.Config) (*nodes, error) {
	ctx, cancel := context.WithCancel(ctx)
	n, err := startNode(ctx, cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	ns := &nodes{cfg: cfg, cur: n, changed: make(chan struct{}), lives: 1, cancel: cancel}
	ns.wg.Go(func() { ns.keep(ctx) })
	return ns, nil
}

func (ns *nodes) keep(ctx context.Context) {
	// A consumer takes its supervisor's PSS range at every heartbeat, and
	// what a recycle samples depends on it (one kill per range reads the
	// trees): the worker does the same.
	beat := time.NewTicker(farmpkg.DefaultHeartbeatInterval)
	defer beat.Stop()
	for {
		ns.mu.Lock()
		cur := ns.cur
		ns.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			cur.sup.TakePSSRange()
			continue
		case <-cur.sup.ExitDue():
		}
		err := cur.sup.Drain(ctx)
		cur.stop()
		err = errors.Join(err, <-cur.done)
		next, nerr := startNode(ctx, ns.cfg)
		ns.mu.Lock()
		if err != nil || nerr != nil {
			ns.err = errors.Join(ns.err, err, nerr)
		}
		if next != nil {
			ns.cur = next
			ns.lives++
		}
		close(ns.changed)
		ns.changed = make(chan struct{})
		ns.mu.Unlock()
		if nerr != nil {
			return
		}
	}
}

func (ns *nodes) current() *node {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.cur
}

// waitNext waits until the node after g runs.
func (ns *nodes) waitNext(ctx context.Context, g *node) error {
	for {
		ns.mu.Lock()
		cur, ch, err := ns.cur, ns.changed, ns.err
		ns.mu.Unlock()
		if cur != g {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (ns *nodes) restarts() int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.lives - 1
}

// stop ends the keeper and the current node, killing its Chromes.
func (ns *nodes) stop() error {
	ns.cancel()
	ns.wg.Wait()
	ns.mu.Lock()
	cur := ns.cur
	err := ns.err
	ns.mu.Unlock()
	cur.stop()
	return errors.Join(err, <-cur.done)
}
