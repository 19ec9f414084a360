package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/internal/benchstat"
	"github.com/browserfarm/browserfarm/internal/pglocal"
	"github.com/browserfarm/browserfarm/internal/procstat"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// sizeRun is what one retained size measured.
type sizeRun struct {
	Retained int64   `json:"retained"`
	LoadS    float64 `json:"load_s"`
	// Reads: p50/p99 in ms of each read.
	Reads map[string]latency `json:"reads"`
	// LifecycleJobsPerS is enqueue → assign → claim → complete: the median
	// of LifecycleRounds, run one after another (each round's jobs stay, so
	// a later round runs beside a few more finished jobs than the first).
	LifecycleJobsPerS float64   `json:"lifecycle_jobs_per_s"`
	LifecycleRounds   []float64 `json:"lifecycle_rounds_jobs_per_s"`
	// LifecycleMaintenance is, per round, the autovacuums and autoanalyzes
	// of jobs that ended during it. A vacuum of jobs reads all of its
	// indexes, the history's too: with 10M retained, one took 3.7 CPU-s
	// inside a round of about 4 s. This says whether a slow round had one.
	LifecycleMaintenance []maintenance `json:"lifecycle_rounds_jobs_maintenance"`
	// LifecycleWALPerJob is, per round, the WAL bytes the server wrote
	// per job. A job's rows and index entries are a few kB; far more means
	// its writes land on pages not yet written since the last checkpoint,
	// each then logged whole (full_page_writes): rows spread over a large
	// table rather than on a few hot pages.
	LifecycleWALPerJob []float64 `json:"lifecycle_rounds_wal_bytes_per_job"`
	// Purged and PurgeDeletesPerS: the retention purge on the oldest jobs.
	Purged           int64   `json:"purged"`
	PurgeDeletesPerS float64 `json:"purge_deletes_per_s,omitempty"`
	DBSizeMB         float64 `json:"db_size_mb"`
	LoadAvg          string  `json:"loadavg"`
}

// maintenance is autovacuum's work on jobs during one lifecycle round.
type maintenance struct {
	Vacuums  int64 `json:"vacuums"`
	Analyzes int64 `json:"analyzes"`
}

// roundMarks are the server's counters a lifecycle round is measured
// between: autovacuum's and autoanalyze's runs on jobs, and the WAL
// position.
type roundMarks struct {
	vacuums, analyzes int64
	wal               float64
}

// roundMarksSQL: the vacuum counters move when a run ends, and a statement
// outside a transaction reads them fresh; the WAL position is exact at
// once, unlike pg_stat_wal, which other backends flush up to seconds late.
const roundMarksSQL = `SELECT autovacuum_count, autoanalyze_count, (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8
FROM pg_stat_user_tables WHERE relname = 'jobs'`

func readRoundMarks(ctx context.Context, pool *pgxpool.Pool) (roundMarks, error) {
	var m roundMarks
	err := pool.QueryRow(ctx, roundMarksSQL).Scan(&m.vacuums, &m.analyzes, &m.wal)
	return m, err
}

type latency struct {
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
}

// runAll starts the private PostgreSQL and measures each size on a fresh
// database of its own, dropped afterwards.
func runAll(ctx context.Context, o options, progress func(string, ...any)) (runs []sizeRun, err error) {
	progress("starting a private PostgreSQL")
	settings := map[string]string{"shared_buffers": "1GB", "maintenance_work_mem": "512MB", "max_wal_size": "8GB"}
	maps.Copy(settings, o.pgSettings)
	cluster, stop, err := pglocal.StartTemp(ctx, "benchscale-", pglocal.Config{Ephemeral: true, Settings: settings})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, stop(ctx)) }()
	for _, n := range o.retained {
		r, err := runSize(ctx, cluster, o, n, progress)
		if err != nil {
			return nil, fmt.Errorf("%d retained: %w", n, err)
		}
		runs = append(runs, r)
	}
	return runs, nil
}

func runSize(ctx context.Context, cluster *pglocal.Cluster, o options, n int64, progress func(string, ...any)) (sizeRun, error) {
	r := sizeRun{Retained: n}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return r, err
	}
	name := "scale_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, cluster.ConnString("postgres"))
	if err != nil {
		return r, err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return r, err
	}
	defer func() {
		if _, err := admin.Exec(context.WithoutCancel(ctx), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			progress("dropping %s: %v", name, err)
		}
	}()
	cfg, err := pgxpool.ParseConfig(cluster.ConnString(name))
	if err != nil {
		return r, err
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return r, err
	}
	defer pool.Close()
	if err := jobqueue.Migrate(ctx, pool); err != nil {
		return r, err
	}

	q := jobqueue.New(pool, jobqueue.Config{})
	progress("%d retained: loading", n)
	start := time.Now()
	if err := loadHistory(ctx, pool, q, n, time.Duration(o.days)*24*time.Hour, progress); err != nil {
		return r, err
	}
	r.LoadS = round(time.Since(start).Seconds())
	if err := pool.QueryRow(ctx, "SELECT pg_database_size(current_database()) / 1048576.0").Scan(&r.DBSizeMB); err != nil {
		return r, err
	}
	r.DBSizeMB = round(r.DBSizeMB)
	progress("%d retained: loaded in %.1f s (%.0f MB)", n, r.LoadS, r.DBSizeMB)

	nodes := make([]string, lifecycleNodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("bench-node-%02d", i)
		if _, _, err := q.Register(ctx, jobqueue.NodeInfo{ID: nodes[i], Hostname: "bench", Capacity: lifecycleCapacity}); err != nil {
			return r, err
		}
	}
	if o.historyJobs > 0 {
		progress("%d retained: %d jobs through the lifecycle first", n, o.historyJobs)
		if _, err := lifecycle(ctx, pool, q, nodes, o.historyJobs); err != nil {
			return r, err
		}
		if err := settle(ctx, pool, q); err != nil {
			return r, err
		}
	}
	if r.Reads, err = measureReads(ctx, pool, q, o.requests, progress); err != nil {
		return r, err
	}
	for i := range o.lifecycleRounds {
		progress("%d retained: lifecycle of %d jobs, round %d of %d", n, o.lifecycleJobs, i+1, o.lifecycleRounds)
		before, err := readRoundMarks(ctx, pool)
		if err != nil {
			return r, err
		}
		perS, err := lifecycle(ctx, pool, q, nodes, o.lifecycleJobs)
		if err != nil {
			return r, err
		}
		after, err := readRoundMarks(ctx, pool)
		if err != nil {
			return r, err
		}
		m := maintenance{Vacuums: after.vacuums - before.vacuums, Analyzes: after.analyzes - before.analyzes}
		wal := round((after.wal - before.wal) / float64(o.lifecycleJobs))
		r.LifecycleRounds = append(r.LifecycleRounds, round(perS))
		r.LifecycleMaintenance = append(r.LifecycleMaintenance, m)
		r.LifecycleWALPerJob = append(r.LifecycleWALPerJob, wal)
		progress("%d retained: round %d: %.0f jobs/s; autovacuums of jobs ended in it: %d, autoanalyzes: %d; WAL per job: %.0f bytes",
			n, i+1, perS, m.Vacuums, m.Analyzes, wal)
	}
	r.LifecycleJobsPerS = round(benchstat.Median(r.LifecycleRounds))
	if purge := min(o.purge, n); purge > 0 {
		// The oldest purge jobs: the history is in finished_at order by id,
		// each finish at its own microsecond.
		var cutoff time.Time
		if err := pool.QueryRow(ctx, "SELECT finished_at + interval '1 microsecond' FROM jobs WHERE id = $1", purge).Scan(&cutoff); err != nil {
			return r, err
		}
		progress("%d retained: purging the oldest %d", n, purge)
		start := time.Now()
		deleted, err := q.DeleteFinishedBefore(ctx, cutoff, 0, nil)
		if err != nil {
			return r, err
		}
		r.Purged, r.PurgeDeletesPerS = deleted, round(float64(deleted)/time.Since(start).Seconds())
	}
	r.LoadAvg = procstat.LoadAvg()
	if o.hold {
		// For EXPLAIN by hand: the database stays until the harness is
		// interrupted.
		progress("%d retained: holding the database: psql '%s' (Ctrl-C ends)", n, cluster.ConnString(name))
		<-ctx.Done()
	}
	progress("%d retained: %+v", n, r)
	return r, nil
}
