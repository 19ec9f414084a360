package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/farm"
	"github.com/browserfarm/browserfarm/farm/web"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// dashboardLoad is what the dashboard page fetches when it loads
// (farm/web/assets/app.js): the page, then its API calls.
var dashboardLoad = []string{"/api/nodes", "/api/stats", "/api/samples", "/api/failures"}

// reader is a producer and its HTTP server over one size's database, run as
// `farm producer` runs them (in-process, on 127.0.0.1), and the reads timed
// against them, round after round.
type reader struct {
	reads []namedRead
	// took holds each read's durations over every round; roundP50 each
	// round's median, in ms, for the paired ratios.
	took     map[string][]time.Duration
	roundP50 map[string][]float64
	stop     func()
}

type namedRead struct {
	name string
	f    func() error
}

// startReader starts the producer (which leads at once: one per database)
// and its HTTP server. stop ends both.
func startReader(ctx context.Context, pool *pgxpool.Pool, q *jobqueue.Queue) (_ *reader, err error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var closers []func()
	stop := func() {
		cancel()
		for _, c := range closers {
			c()
		}
		wg.Wait()
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	reg := prometheus.NewRegistry()
	metrics := web.NewMetrics(reg)
	recorder := web.NewRecorder(web.RecorderConfig{Queue: q})
	producer, err := farm.NewProducer(farm.ProducerConfig{Queue: q, Pool: pool, StaleAfter: time.Hour, Retention: farm.Off, NodeRetention: farm.Off,
		LeaderActors: []func(context.Context) error{recorder.Run}})
	if err != nil {
		return nil, err
	}
	handler := web.NewServer(web.Config{Queue: q, IsLeader: producer.IsLeader, Metrics: metrics, Gatherer: reg,
		Logger: zap.NewNop(), Version: "bench"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	closers = append(closers, func() { _ = srv.Close() })
	wg.Go(func() { _ = producer.Run(ctx) })
	wg.Go(func() { _ = srv.Serve(ln) })
	for !producer.IsLeader() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The recorder's first sample (and compaction of the counts the load
	// wrote) runs when leadership starts.
	if _, err := q.CompactCounts(ctx); err != nil {
		return nil, err
	}

	base := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: time.Minute}
	closers = append(closers, client.CloseIdleConnections)
	get := func(path string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return nil
	}
	statusPool, err := pgxpool.New(ctx, pool.Config().ConnString())
	if err != nil {
		return nil, err
	}
	closers = append(closers, statusPool.Close)
	status := jobqueue.New(statusPool, jobqueue.Config{})

	rd := &reader{took: map[string][]time.Duration{}, roundP50: map[string][]float64{}, stop: stop}
	rd.reads = []namedRead{
		{"api_stats", func() error { return get("/api/stats") }},
		{"api_failures", func() error { return get("/api/failures") }},
		// WatchQueue drops the scrape cache: every scrape reads the queue.
		{"metrics_uncached", func() error { metrics.WatchQueue(q, zap.NewNop()); return get("/metrics") }},
		{"dashboard_load", func() error {
			if err := get("/"); err != nil {
				return err
			}
			errs := make([]error, len(dashboardLoad))
			var wg sync.WaitGroup
			for i, p := range dashboardLoad {
				wg.Go(func() { errs[i] = get(p) })
			}
			wg.Wait()
			return errors.Join(errs...)
		}},
		// The dashboard's jobs view, as it polls: unfiltered, and filtered by
		// a host no job has (its search bounded by jobqueue.Config.ListWindow).
		{"jobs_view", func() error { return get("/api/jobs?limit=50") }},
		{"jobs_view_absent_host", func() error { return get("/api/jobs?host=absent.example&limit=50") }},
		// `farm status`: the nodes and the stats, on a connection of its own.
		{"farm_status", func() error {
			if _, err := status.ListNodes(ctx); err != nil {
				return err
			}
			_, err := status.Stats(ctx)
			return err
		}},
	}
	for _, r := range rd.reads { // warm the connections and the plan caches
		if err := r.f(); err != nil {
			return nil, fmt.Errorf("%s: %w", r.name, err)
		}
	}
	return rd, nil
}

// round times each read requests times.
func (rd *reader) round(requests int) error {
	for _, r := range rd.reads {
		ds := make([]time.Duration, 0, requests)
		for range requests {
			start := time.Now()
			if err := r.f(); err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			ds = append(ds, time.Since(start))
		}
		rd.took[r.name] = append(rd.took[r.name], ds...)
		// Unrounded: the ratios of sub-millisecond p50s.
		slices.Sort(ds)
		rd.roundP50[r.name] = append(rd.roundP50[r.name], float64(nearestRank(ds, 0.50))/float64(time.Millisecond))
	}
	return nil
}

// latencies are each read's p50/p99 over every round.
func (rd *reader) latencies() map[string]latency {
	out := map[string]latency{}
	for name, ds := range rd.took {
		out[name] = percentiles(slices.Clone(ds))
	}
	return out
}

// measureReads times the reads in one round on a reader of their own.
func measureReads(ctx context.Context, pool *pgxpool.Pool, q *jobqueue.Queue, requests int,
	progress func(string, ...any)) (map[string]latency, error) {
	rd, err := startReader(ctx, pool, q)
	if err != nil {
		return nil, err
	}
	defer rd.stop()
	if err := rd.round(requests); err != nil {
		return nil, err
	}
	out := rd.latencies()
	logLatencies(out, progress)
	return out, ctx.Err()
}

// logLatencies writes one progress line per read.
func logLatencies(ls map[string]latency, progress func(string, ...any)) {
	for _, name := range slices.Sorted(maps.Keys(ls)) {
		progress("  %-16s p50 %.1f ms  p99 %.1f ms", name, ls[name].P50ms, ls[name].P99ms)
	}
}

// percentiles: nearest rank, in ms to 0.01.
func percentiles(ds []time.Duration) latency {
	slices.Sort(ds)
	at := func(p float64) float64 {
		return round(float64(nearestRank(ds, p).Microseconds()) / 1000)
	}
	return latency{P50ms: at(0.50), P99ms: at(0.99)}
}

// nearestRank is the p-th percentile of sorted ds.
func nearestRank(ds []time.Duration, p float64) time.Duration {
	i := int(p*float64(len(ds))+0.999999) - 1
	return ds[max(0, min(i, len(ds)-1))]
}
