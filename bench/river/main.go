// Command river measures River (github.com/riverqueue/river), the
// PostgreSQL job queue for Go, on this machine as a baseline for
// jobqueue's BenchmarkLifecycle: insert N jobs, then work them, on a
// private PostgreSQL started with the same settings as the tests' (the
// same internal/pglocal, ephemeral, max_connections 300).
//
// River runs as many workers as the lifecycle benchmark has slots (16
// nodes × 6), tuned for throughput: a fetch cooldown of 2 ms and a poll
// interval of 20 ms instead of the 100 ms and 1 s defaults, which cap 96
// workers at about 960 jobs/s (one fetch of at most 96 jobs per 100 ms).
// Here 10,000 workers (-workers) were slower than 96.
//
// -clients runs that many River clients on the shared pool, each with
// -workers workers, each fetching for itself: "-clients 16 -workers 6"
// has the lifecycle benchmark's shape (16 nodes of 6 slots, each claiming
// its own jobs), where the default single client fetches up to 96 jobs at
// once for all of them.
//
// It is a module of its own so that the product never depends on River.
// Progress goes to stderr; the result is one JSON line on stdout:
//
//	{"bench":"river","river.insert.jobs/s":…,"river.worked/s":…,"river.insert-then-work.jobs/s":…}
//
// insert-then-work is N over insert time plus work time (until every
// completion is written: Stop waits for River's batched completer);
// worked/s is N over the time from the client's start to the last job's
// Work returning.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/browserfarm/browserfarm/internal/pglocal"
)

// pageArgs is a job like the lifecycle benchmark's: a URL to render.
type pageArgs struct {
	URL string `json:"url"`
}

func (pageArgs) Kind() string { return "page" }

type pageWorker struct {
	river.WorkerDefaults[pageArgs]
	worked *atomic.Int64
	total  int64
	done   chan struct{}
}

func (w *pageWorker) Work(ctx context.Context, job *river.Job[pageArgs]) error {
	if w.worked.Add(1) == w.total {
		close(w.done)
	}
	return nil
}

func main() {
	jobs := flag.Int("jobs", 20000, "jobs to insert, then work")
	workers := flag.Int("workers", 96, "River workers per client (the lifecycle benchmark has 16 nodes × 6 = 96 slots)")
	clients := flag.Int("clients", 1, "River clients, each with -workers workers and its own fetches")
	cooldown := flag.Duration("fetch-cooldown", 2*time.Millisecond, "River's FetchCooldown (its default: 100ms)")
	pollEvery := flag.Duration("fetch-poll-interval", 20*time.Millisecond, "River's FetchPollInterval (its default: 1s)")
	batch := flag.Int("batch", 2000, "jobs per InsertManyFast (the lifecycle benchmark enqueues 2,000 at a time)")
	dsn := flag.String("database-url", "", "an empty database to use instead of a private cluster")
	flag.Parse()
	if *clients < 1 || *workers < 1 {
		fmt.Fprintln(os.Stderr, "river bench: -clients and -workers must be at least 1")
		os.Exit(2)
	}
	if err := run(*jobs, *clients, *workers, *batch, *cooldown, *pollEvery, *dsn); err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(1)
	}
}

func run(n, clients, workers, batch int, cooldown, pollEvery time.Duration, dsn string) error {
	ctx := context.Background()
	if dsn == "" {
		cluster, stop, err := pglocal.StartTemp(ctx, "river-bench-", pglocal.Config{Ephemeral: true,
			Settings: map[string]string{"max_connections": "300"}})
		if err != nil {
			return err
		}
		defer func() { _ = stop(ctx) }()
		dsn = cluster.ConnString("postgres")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = 32 // what the lifecycle benchmark's pool (internal/pgtest) has
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}

	w := &pageWorker{worked: new(atomic.Int64), total: int64(n), done: make(chan struct{})}
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	riverClients := make([]*river.Client[pgx.Tx], clients)
	for i := range riverClients {
		c, err := river.NewClient(driver, &river.Config{
			ID:                fmt.Sprintf("bench-client-%02d", i),
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
			Workers:           ws,
			FetchCooldown:     cooldown,
			FetchPollInterval: pollEvery,
		})
		if err != nil {
			return err
		}
		riverClients[i] = c
	}
	client := riverClients[0]

	fmt.Fprintf(os.Stderr, "river bench: inserting %d jobs in batches of %d\n", n, batch)
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: pageArgs{URL: fmt.Sprintf("https://bench.example.com/p/%d", i)}}
	}
	t0 := time.Now()
	for off := 0; off < n; off += batch {
		if _, err := client.InsertManyFast(ctx, params[off:min(off+batch, n)]); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
	}
	insert := time.Since(t0)

	fmt.Fprintf(os.Stderr, "river bench: working them with %d client(s) of %d workers\n", clients, workers)
	t1 := time.Now()
	for _, c := range riverClients {
		if err := c.Start(ctx); err != nil {
			return err
		}
	}
	select {
	case <-w.done:
	case <-time.After(10 * time.Minute):
		return fmt.Errorf("only %d of %d jobs worked after 10 minutes", w.worked.Load(), n)
	}
	worked := time.Since(t1)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, c := range riverClients {
		if err := c.Stop(sctx); err != nil {
			return fmt.Errorf("stop: %w", err)
		}
	}
	work := time.Since(t1)
	var completed int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&completed); err != nil {
		return err
	}
	if completed != n {
		return fmt.Errorf("%d of %d jobs completed", completed, n)
	}
	out := map[string]any{
		"bench":                         "river",
		"river.jobs":                    n,
		"river.clients":                 clients,
		"river.workers":                 workers,
		"river.insert.jobs/s":           round(float64(n) / insert.Seconds()),
		"river.worked/s":                round(float64(n) / worked.Seconds()),
		"river.insert-then-work.jobs/s": round(float64(n) / (insert + work).Seconds()),
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func round(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
