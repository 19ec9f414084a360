package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser/egress"
	"github.com/browserfarm/browserfarm/farm"
	"github.com/browserfarm/browserfarm/internal/pglocal"
	"github.com/browserfarm/browserfarm/internal/procstat"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

// env is what every run shares: the database server, the site, a scratch
// directory, the logger.
type env struct {
	cluster  *pglocal.Cluster
	site     *testsite.Server
	dir      string
	log      *zap.Logger
	progress func(format string, a ...any)
}

// withEnv starts the environment, runs f, and tears everything down.
func withEnv(ctx context.Context, log *zap.Logger, progress func(string, ...any), f func(*env) (any, error)) (out any, err error) {
	dir, err := os.MkdirTemp("", "benchfarm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The server may run as another account when the harness runs as root.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	progress("starting a private PostgreSQL")
	cluster, stop, err := pglocal.StartTemp(ctx, "benchfarm-pg-", pglocal.Config{Ephemeral: true})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, stop(ctx)) }()
	site, err := testsite.Start(ctx, testsite.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, site.Close()) }()
	return f(&env{cluster: cluster, site: site, dir: dir, log: log, progress: progress})
}

// nodeRun describes one run of one node over a fresh database.
type nodeRun struct {
	name         string
	paths        []string // page paths, relative to the site
	recycleEvery int      // 0: never
	isolation    string   // the jobs' spec isolation ("" = the default, wipe)
	lead         int      // the supervisor's ReplacementLead; negative: its default
	perChrome    int      // the supervisor's SessionsPerChrome; 0: its default
	// exitAfter is the supervisor's ExitAfterJobs (0: off): the run's
	// length, to run the node as a process that exits after the run's
	// last job, whose Chromes boot no replacement for a start it will not
	// make.
	exitAfter   int
	sampleEvery time.Duration
	// sample, if set, is called every sampleEvery while the node runs.
	sample func(st supervisor.Stats, profiles string)
}

// runResult is what one run measured.
type runResult struct {
	wall        time.Duration // node start to last completion
	pagesPerSec float64       // between the first and the last completion
	stats       supervisor.Stats
	chromeCPU   time.Duration // CPU of every Chrome process tree of the run
	// machine is the machine's CPU over the wall time: the node, its
	// Chromes and the kernel's work around them (a killed Chrome's
	// teardown, which chromeCPU misses), the test site and PostgreSQL.
	machine procstat.Machine
}

// run starts a node with the run's recycling, feeds it every job, and waits
// until all are completed. Any failed job fails the run: a benchmark of
// failures measures nothing.
func (e *env) run(ctx context.Context, r nodeRun) (runResult, error) {
	pool, cleanup, err := e.freshDB(ctx)
	if err != nil {
		return runResult{}, err
	}
	defer cleanup()
	q := jobqueue.New(pool, jobqueue.Config{Logger: e.log.Named("queue")})
	specs := make([]jobqueue.Spec, len(r.paths))
	for i, p := range r.paths {
		specs[i] = jobqueue.Spec{URL: e.site.URL + p, Wait: &jobqueue.Wait{Selector: "#ready"}, MaxAttempts: 1, Isolation: r.isolation}
	}
	batch, _, err := q.Enqueue(ctx, specs)
	if err != nil {
		return runResult{}, err
	}

	profiles, err := os.MkdirTemp(e.dir, "profiles-")
	if err != nil {
		return runResult{}, err
	}
	cfg := farm.DefaultConsumerConfig(q)
	cfg.NodeID = "bench-" + r.name
	// The assigner below needs the node's capacity; 0 would mean "the
	// supervisor's default" to the consumer but "no slots" to it.
	cfg.Capacity = supervisor.DefaultConfig().Capacity
	cfg.Logger = e.log.Named(r.name)
	cfg.Supervisor.ChromeRecycleJobs = offIfZero(r.recycleEvery)
	cfg.Supervisor.ExitAfterJobs = offIfZero(r.exitAfter)
	cfg.Supervisor.SessionsPerChrome = r.perChrome
	cfg.Supervisor.Browser.ProfileRoot = profiles
	// The test site is on loopback, which the default egress policy refuses.
	siteURL, err := url.Parse(e.site.URL)
	if err != nil {
		return runResult{}, err
	}
	siteRule, err := egress.ParseRule(siteURL.Host)
	if err != nil {
		return runResult{}, err
	}
	cfg.Egress.Allow = []egress.Rule{siteRule}
	if r.lead >= 0 {
		cfg.Supervisor.ReplacementLead = offIfZero(r.lead)
	}
	if r.sampleEvery > 0 {
		cfg.Supervisor.MemoryInterval = r.sampleEvery
	}
	node, err := farm.NewConsumer(cfg)
	if err != nil {
		return runResult{}, err
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	runErr := make(chan error, 1)
	m0, err := procstat.ReadMachine()
	if err != nil {
		return runResult{}, err
	}
	t0 := time.Now()
	wg.Go(func() { runErr <- node.Run(runCtx) })
	wg.Go(func() { assign(runCtx, q, cfg.NodeID, cfg.Capacity, e.log) })
	cpu := &procstat.Meter{Marker: procstat.ProfileMarker(profiles), Interval: 100 * time.Millisecond}
	stopCPU := cpu.Start(ctx)
	defer stopCPU()
	if r.sample != nil {
		wg.Go(func() {
			t := time.NewTicker(r.sampleEvery)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
					r.sample(node.SupervisorStats(), profiles)
				}
			}
		})
	}

	// Completion is polled: the run takes seconds, a poll costs microseconds.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastReport := time.Now()
	exited := false
	for {
		c, err := q.BatchCounts(ctx, batch)
		if err != nil {
			return runResult{}, err
		}
		if n := c.By[jobqueue.StateFailed] + c.By[jobqueue.StateCanceled]; n > 0 {
			return runResult{}, fmt.Errorf("%s: %d jobs failed", r.name, n)
		}
		if c.By[jobqueue.StateCompleted] == int64(len(specs)) {
			break
		}
		if exited {
			return runResult{}, fmt.Errorf("%s: the node's process exited with %d of %d jobs completed", r.name, c.By[jobqueue.StateCompleted], len(specs))
		}
		if time.Since(lastReport) > 10*time.Second {
			e.progress("  %s: %d/%d done", r.name, c.By[jobqueue.StateCompleted], len(specs))
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return runResult{}, ctx.Err()
		case err := <-runErr:
			if !errors.Is(err, farm.ErrRecycle) || exited {
				return runResult{}, fmt.Errorf("%s: node stopped early: %v", r.name, err)
			}
			// The process's exit was due: it completed its jobs before it
			// returned, which the next count sees.
			exited = true
			continue
		case <-tick.C:
		}
	}
	wall := time.Since(t0)
	m1, err := procstat.ReadMachine()
	if err != nil {
		return runResult{}, err
	}
	st := node.SupervisorStats()
	stop()
	if !exited {
		if err := <-runErr; err != nil && !errors.Is(err, farm.ErrRecycle) {
			return runResult{}, fmt.Errorf("%s: node: %w", r.name, err)
		}
	}
	stopCPU()
	rate, err := completionRate(ctx, q, batch)
	if err != nil {
		return runResult{}, err
	}
	return runResult{wall: wall, pagesPerSec: rate, stats: st, chromeCPU: cpu.Total(), machine: m1.Sub(m0)}, nil
}

// completionRate is the pages per second between the batch's first and last
// completion: the first Chrome's boot, the same for every run, is left out.
func completionRate(ctx context.Context, q *jobqueue.Queue, batch string) (float64, error) {
	page, err := q.List(ctx, jobqueue.ListFilter{BatchID: batch, States: []jobqueue.State{jobqueue.StateCompleted}, Limit: 1000})
	if err != nil {
		return 0, err
	}
	if page.Next != 0 || len(page.Jobs) < 2 {
		return 0, fmt.Errorf("rate: %d jobs in one page; use 2..1000 jobs per run", len(page.Jobs))
	}
	var first, last time.Time
	for _, j := range page.Jobs {
		if j.FinishedAt == nil {
			continue
		}
		if first.IsZero() || j.FinishedAt.Before(first) {
			first = *j.FinishedAt
		}
		if j.FinishedAt.After(last) {
			last = *j.FinishedAt
		}
	}
	span := last.Sub(first).Seconds()
	if span <= 0 {
		return 0, errors.New("rate: no time between the first and last completion")
	}
	return float64(len(page.Jobs)-1) / span, nil
}

// assign stands in for the producer: it fills the node's free slots whenever
// the queue reports free slots, and on a short tick.
func assign(ctx context.Context, q *jobqueue.Queue, node string, capacity int, log *zap.Logger) {
	l := jobqueue.NewListener(q.Pool(), jobqueue.ListenerConfig{Channels: []string{jobqueue.ChannelProducer}})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _ = l.Run(ctx) })
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := q.Assign(ctx, node, capacity); err != nil && ctx.Err() == nil && !errors.Is(err, jobqueue.ErrNotFound) {
			log.Warn("assign failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-l.C():
		case <-tick.C:
		}
	}
}

// freshDB creates a migrated database of its own for one run.
func (e *env) freshDB(ctx context.Context) (*pgxpool.Pool, func(), error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, nil, err
	}
	name := "bench_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, e.cluster.ConnString("postgres"))
	if err != nil {
		return nil, nil, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, nil, err
	}
	pool, err := pgxpool.New(ctx, e.cluster.ConnString(name))
	if err != nil {
		return nil, nil, err
	}
	if err := jobqueue.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, pool.Close, nil
}

// offIfZero maps the harness's "0: never" onto the supervisor's Off (its 0
// is the default).
func offIfZero(n int) int {
	if n == 0 {
		return supervisor.Off
	}
	return n
}
