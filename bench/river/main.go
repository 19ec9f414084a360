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
//	{"bench":"river","river.insert.jobs/s":…,"river.worked/s":…,"river.insert-then-work.jobs/s":…,"river.concurrent.jobs/s":…}
//
// Two phases of N jobs each. First insert-then-work: N over insert time
// plus work time (until every completion is written: the clients' Stops,
// run at once, wait for River's batched completers); worked/s is N over the
// time from the clients' start to the last job's Work returning. Then, on
// the warm tables, concurrent: the clients started first and the jobs
// inserted in batches while they work, N over the time from the first
// insert to the last completion written — the span and the order of
// jobqueue's BenchmarkLifecycle (enqueue while working, to the last
// completion), which it is the baseline of.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
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
	phase atomic.Pointer[phase]
}

// phase counts the jobs worked in one phase of the run.
type phase struct {
	worked atomic.Int64
	total  int64
	done   chan struct{}
}

func newPhase(n int) *phase { return &phase{total: int64(n), done: make(chan struct{})} }

func (w *pageWorker) Work(ctx context.Context, job *river.Job[pageArgs]) error {
	p := w.phase.Load()
	if p.worked.Add(1) == p.total {
		close(p.done)
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
	// Interrupted, the private cluster is still stopped and removed.
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
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

	w := &pageWorker{}
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	newClients := func(phase string) ([]*river.Client[pgx.Tx], error) {
		cs := make([]*river.Client[pgx.Tx], clients)
		for i := range cs {
			c, err := river.NewClient(driver, &river.Config{
				ID:                fmt.Sprintf("bench-%s-%02d", phase, i),
				Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
				Workers:           ws,
				FetchCooldown:     cooldown,
				FetchPollInterval: pollEvery,
			})
			if err != nil {
				return nil, err
			}
			cs[i] = c
		}
		return cs, nil
	}
	insert := func(client *river.Client[pgx.Tx], from int) error {
		params := make([]river.InsertManyParams, 0, batch)
		for off := 0; off < n; off += batch {
			params = params[:0]
			for i := off; i < min(off+batch, n); i++ {
				params = append(params, river.InsertManyParams{Args: pageArgs{URL: fmt.Sprintf("https://bench.example.com/p/%d", from+i)}})
			}
			if _, err := client.InsertManyFast(ctx, params); err != nil {
				return fmt.Errorf("insert: %w", err)
			}
		}
		return nil
	}
	start := func(cs []*river.Client[pgx.Tx]) error {
		for _, c := range cs {
			if err := c.Start(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	awaitWorked := func(p *phase) error {
		select {
		case <-p.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Minute):
			return fmt.Errorf("only %d of %d jobs worked after 10 minutes", p.worked.Load(), n)
		}
	}
	// stop stops the clients at once; each Stop returns once its
	// completer has written every completion.
	stop := func(cs []*river.Client[pgx.Tx]) error {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		errs := make([]error, len(cs))
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Go(func() { errs[i] = c.Stop(sctx) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("stop: %w", err)
		}
		return nil
	}
	completed := func(want int) error {
		var got int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&got); err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%d of %d jobs completed", got, want)
		}
		return nil
	}

	// Phase 1: insert, then work.
	cs, err := newClients("itw")
	if err != nil {
		return err
	}
	p1 := newPhase(n)
	w.phase.Store(p1)
	fmt.Fprintf(os.Stderr, "river bench: inserting %d jobs in batches of %d\n", n, batch)
	t0 := time.Now()
	if err := insert(cs[0], 0); err != nil {
		return err
	}
	inserted := time.Since(t0)
	fmt.Fprintf(os.Stderr, "river bench: working them with %d client(s) of %d workers\n", clients, workers)
	t1 := time.Now()
	if err := start(cs); err != nil {
		return err
	}
	if err := awaitWorked(p1); err != nil {
		return err
	}
	worked := time.Since(t1)
	if err := stop(cs); err != nil {
		return err
	}
	work := time.Since(t1)
	if err := completed(n); err != nil {
		return err
	}

	// Phase 2: inserted while working, as the lifecycle benchmark does.
	cs, err = newClients("conc")
	if err != nil {
		return err
	}
	p2 := newPhase(n)
	w.phase.Store(p2)
	if err := start(cs); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "river bench: inserting %d more jobs in batches of %d while %d client(s) work\n", n, batch, clients)
	t2 := time.Now()
	if err := insert(cs[0], n); err != nil {
		return err
	}
	if err := awaitWorked(p2); err != nil {
		return err
	}
	if err := stop(cs); err != nil {
		return err
	}
	concurrent := time.Since(t2)
	if err := completed(2 * n); err != nil {
		return err
	}

	out := map[string]any{
		"bench":                         "river",
		"river.jobs":                    n,
		"river.clients":                 clients,
		"river.workers":                 workers,
		"river.insert.jobs/s":           round(float64(n) / inserted.Seconds()),
		"river.worked/s":                round(float64(n) / worked.Seconds()),
		"river.insert-then-work.jobs/s": round(float64(n) / (inserted + work).Seconds()),
		"river.concurrent.jobs/s":       round(float64(n) / concurrent.Seconds()),
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func round(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
