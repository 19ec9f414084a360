package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// measureReads runs a producer and its HTTP server as `farm producer`
// does, on 127.0.0.1, and times each read requests times.
func measureReads(ctx context.Context, pool *pgxpool.Pool, q *jobqueue.Queue, requests int,
	progress func(string, ...any)) (map[string]latency, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
	var wg sync.WaitGroup
	wg.Go(func() { _ = producer.Run(ctx) })
	wg.Go(func() { _ = srv.Serve(ln) })
	defer func() {
		cancel()
		_ = srv.Close()
		wg.Wait()
	}()
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
	defer statusPool.Close()
	status := jobqueue.New(statusPool, jobqueue.Config{})

	reads := []struct {
		name string
		f    func() error
	}{
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
		// `farm status`: the nodes and the stats, on a connection of its own.
		{"farm_status", func() error {
			if _, err := status.ListNodes(ctx); err != nil {
				return err
			}
			_, err := status.Stats(ctx)
			return err
		}},
	}
	out := map[string]latency{}
	for _, rd := range reads {
		if err := rd.f(); err != nil { // warm the connection and the plan cache
			return nil, fmt.Errorf("%s: %w", rd.name, err)
		}
		ds := make([]time.Duration, 0, requests)
		for range requests {
			start := time.Now()
			if err := rd.f(); err != nil {
				return nil, fmt.Errorf("%s: %w", rd.name, err)
			}
			ds = append(ds, time.Since(start))
		}
		out[rd.name] = percentiles(ds)
		progress("  %-16s p50 %.1f ms  p99 %.1f ms", rd.name, out[rd.name].P50ms, out[rd.name].P99ms)
	}
	return out, ctx.Err()
}

// percentiles: nearest rank.
func percentiles(ds []time.Duration) latency {
	slices.Sort(ds)
	at := func(p float64) float64 {
		i := int(p*float64(len(ds))+0.999999) - 1
		i = max(0, min(i, len(ds)-1))
		return round(float64(ds[i].Microseconds()) / 1000)
	}
	return latency{P50ms: at(0.50), P99ms: at(0.99)}
}
