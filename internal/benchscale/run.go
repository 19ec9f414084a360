package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/farm/web"
	"github.com/browserfarm/browserfarm/internal/benchstat"
	"github.com/browserfarm/browserfarm/internal/pglocal"
	"github.com/browserfarm/browserfarm/internal/procstat"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// sizeRun is what one retained size measured.
type sizeRun struct {
	Retained int64 `json:"retained"`
	// HistoryJobs ran through the lifecycle after the load (-history-jobs).
	HistoryJobs int64   `json:"history_jobs,omitempty"`
	LoadS       float64 `json:"load_s"`
	// Reads: p50/p99 in ms of each read, over the read rounds.
	Reads map[string]latency `json:"reads"`
	// ReadRatios: each read's p50 over the first size's, round by round
	// (the rounds alternate between the sizes), the median of the rounds.
	// Absent on the first size, the baseline.
	ReadRatios map[string]float64 `json:"reads_p50_ratio_to_baseline,omitempty"`
	// BacklogReads: the same reads beside -backlog pending jobs.
	Backlog      int                `json:"backlog,omitempty"`
	BacklogReads map[string]latency `json:"backlog_reads,omitempty"`
	// LifecycleJobsPerS is enqueue → assign → claim → complete: the median
	// of LifecycleRounds (each round's jobs stay, so a later round runs
	// beside a few more finished jobs than the first).
	LifecycleJobsPerS float64   `json:"lifecycle_jobs_per_s"`
	LifecycleRounds   []float64 `json:"lifecycle_rounds_jobs_per_s"`
	// LifecycleRatios are each round's jobs/s over the first size's in the
	// same round (the rounds alternate between the sizes, see runAll), and
	// LifecycleRatio their median: what the history costs the lifecycle,
	// paired. Absent on the first size, the baseline.
	LifecycleRatio  float64   `json:"lifecycle_ratio_to_baseline,omitempty"`
	LifecycleRatios []float64 `json:"lifecycle_rounds_ratio_to_baseline,omitempty"`
	// LifecycleMaintenance is, per round, the autovacuums and autoanalyzes
	// of jobs that ended during it, in this size's database and in the
	// others'. A vacuum of jobs reads all of its indexes, the history's
	// too: with 10M retained, one took 3.7 CPU-s inside a round of about
	// 4 s. This says whether a slow round had one beside it.
	LifecycleMaintenance []maintenance `json:"lifecycle_rounds_jobs_maintenance"`
	// LifecycleWALPerJob is, per round, the WAL bytes the server wrote
	// per job (the server's, so another database's autovacuum in the round
	// adds to it). A job's rows and index entries are a few kB; far more means
	// its writes land on pages not yet written since the last checkpoint,
	// each then logged whole (full_page_writes): rows spread over a large
	// table rather than on a few hot pages.
	LifecycleWALPerJob []float64 `json:"lifecycle_rounds_wal_bytes_per_job"`
	// LifecycleServerCPUPerJob is, per round, the CPU the PostgreSQL
	// server's processes spent during it, in µs per job: the backends',
	// and autovacuum's and the checkpointer's, whichever database they
	// worked on. It says where a slow round's time went (a vacuum beside
	// it shows as CPU, a busy machine as time); it grows on a busy machine
	// too (on 2 cores one run's rounds went from 191 to 380 µs a job as
	// their jobs/s halved), so it is compared round by round, as jobs/s are.
	LifecycleServerCPUPerJob []float64 `json:"lifecycle_rounds_server_cpu_us_per_job"`
	// Purged and PurgeDeletesPerS: the retention purge on the oldest jobs.
	Purged           int64   `json:"purged"`
	PurgeDeletesPerS float64 `json:"purge_deletes_per_s,omitempty"`
	DBSizeMB         float64 `json:"db_size_mb"`
	// LoadAvg is the machine's after the size's last read round.
	LoadAvg string `json:"loadavg"`
}

// maintenance is autovacuum's work on jobs during one lifecycle round.
type maintenance struct {
	Vacuums      int64 `json:"vacuums"`
	Analyzes     int64 `json:"analyzes"`
	OtherVacuums int64 `json:"other_databases_vacuums"`
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

// runAll starts the private PostgreSQL, prepares every size's database
// side by side (loaded, its history run, settled), loads the last hour
// into each, measures the reads (readRounds), then runs the lifecycle
// rounds alternating between them: round i on each size in turn, the order
// reversed every other round. Rounds of a size one after another would
// compare the sizes across minutes of a shared machine, whose load moves
// the lifecycle by more than the goal's 10%; a round of each size in the
// same minute, paired, does not. The first size is the ratios' baseline;
// with an odd number of rounds it leads one round more than the others.
// The server and its databases are removed at the end.
func runAll(ctx context.Context, o options, progress func(string, ...any)) (runs []sizeRun, err error) {
	progress("starting a private PostgreSQL")
	// Every size's pool keeps its lifecycle's connections (about 20) open
	// beside the others'.
	settings := map[string]string{"shared_buffers": "1GB", "maintenance_work_mem": "512MB", "max_wal_size": "8GB",
		"max_connections": strconv.Itoa(100 + poolConns*len(o.retained))}
	maps.Copy(settings, o.pgSettings)
	cluster, stop, err := pglocal.StartTemp(ctx, "benchscale-", pglocal.Config{Ephemeral: true, Settings: settings})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, stop(ctx)) }()
	admin, err := pgx.Connect(ctx, cluster.ConnString("postgres"))
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	sizes := make([]*size, 0, len(o.retained))
	defer func() {
		for _, sz := range sizes {
			sz.pool.Close()
		}
	}()
	for i, n := range o.retained {
		sz, err := prepareSize(ctx, admin, cluster, o, n, o.historyJobs[i], progress)
		if sz != nil {
			sizes = append(sizes, sz)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sizeLabel(n, o.historyJobs[i]), err)
		}
	}
	recentEnd, err := loadRecent(ctx, sizes, o, progress)
	if err != nil {
		return nil, err
	}
	if err := readRounds(ctx, sizes, o, recentEnd, progress); err != nil {
		return nil, err
	}
	if o.backlog > 0 {
		for _, sz := range sizes {
			if err := measureBacklogReads(ctx, sz.pool, sz.q, sz, o, progress); err != nil {
				return nil, fmt.Errorf("%s: backlog: %w", sz.label(), err)
			}
		}
	}
	for i := range o.lifecycleRounds {
		for _, k := range roundOrder(len(sizes), i) {
			if err := lifecycleRound(ctx, sizes, k, o, i, cluster.PID(), progress); err != nil {
				return nil, fmt.Errorf("%s: %w", sizes[k].label(), err)
			}
		}
	}
	for _, sz := range sizes {
		if err := sz.finish(ctx, o, sizes[0], progress); err != nil {
			return nil, fmt.Errorf("%s: %w", sz.label(), err)
		}
		runs = append(runs, sz.run)
	}
	if o.hold {
		// For EXPLAIN by hand: the databases stay until the harness is
		// interrupted.
		for _, sz := range sizes {
			progress("%s: holding the database: psql '%s'", sz.label(), cluster.ConnString(sz.db))
		}
		progress("holding (Ctrl-C ends)")
		<-ctx.Done()
	}
	return runs, nil
}

// roundOrder is the order in which round i visits n sizes: first to last,
// last to first in every other round.
func roundOrder(n, i int) []int {
	order := make([]int, n)
	for k := range order {
		order[k] = k
	}
	if i%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// pairedRatios are each round's figure over the baseline's of the same
// round.
func pairedRatios(rounds, baseline []float64) []float64 {
	out := make([]float64, len(rounds))
	for i, v := range rounds {
		out[i] = v / baseline[i]
	}
	return out
}

// lastHour is the reads' window (the charts' and the failures' default,
// web.DefaultChartWindow): the COPY-loaded history ends before it, and the
// -recent jobs fill it, the same at every size. recentSpan, what they
// finish over, leaves the read rounds minutes before its first jobs leave
// the window.
const (
	lastHour   = web.DefaultChartWindow
	recentSpan = lastHour - 5*time.Minute
)

// historyChunk bounds one lifecycle run of -history-jobs.
const historyChunk = 1_000_000

// poolConns is each size's pool bound: the lifecycle's 16 nodes, its
// producer, completer and submitter, and the reads' producer.
const poolConns = 40

// size is one retained size's database, kept until the harness ends.
type size struct {
	db    string
	pool  *pgxpool.Pool
	q     *jobqueue.Queue
	nodes []string
	run   sizeRun
}

func (sz *size) label() string { return sizeLabel(sz.run.Retained, sz.run.HistoryJobs) }

// sizeLabel names a size in progress lines and errors.
func sizeLabel(retained, historyJobs int64) string {
	if historyJobs == 0 {
		return fmt.Sprintf("%d retained", retained)
	}
	return fmt.Sprintf("%d retained + %d through the lifecycle", retained, historyJobs)
}

// prepareSize creates a database, loads n finished jobs into it, runs its
// history, and settles it. A non-nil size is returned whenever its pool
// was opened, for the caller to close.
func prepareSize(ctx context.Context, admin *pgx.Conn, cluster *pglocal.Cluster, o options, n, historyJobs int64, progress func(string, ...any)) (*size, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	name := "scale_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(cluster.ConnString(name))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = poolConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	sz := &size{db: name, pool: pool, run: sizeRun{Retained: n, HistoryJobs: historyJobs}}
	r := &sz.run
	if err := jobqueue.Migrate(ctx, pool); err != nil {
		return sz, err
	}
	q := jobqueue.New(pool, jobqueue.Config{})
	sz.q = q
	progress("%s: loading", sz.label())
	start := time.Now()
	// The history ends before the last hour, which the recent jobs fill
	// (loadRecent).
	if err := copyJobs(ctx, pool, n, time.Now().Add(-time.Minute-lastHour), time.Duration(o.days)*24*time.Hour, progress); err != nil {
		return sz, err
	}
	if err := settle(ctx, pool, q); err != nil {
		return sz, err
	}
	r.LoadS = round(time.Since(start).Seconds())
	if err := pool.QueryRow(ctx, "SELECT pg_database_size(current_database()) / 1048576.0").Scan(&r.DBSizeMB); err != nil {
		return sz, err
	}
	r.DBSizeMB = round(r.DBSizeMB)
	progress("%s: loaded in %.1f s (%.0f MB)", sz.label(), r.LoadS, r.DBSizeMB)

	sz.nodes = make([]string, lifecycleNodes)
	for i := range sz.nodes {
		sz.nodes[i] = fmt.Sprintf("bench-node-%02d", i)
		if _, _, err := q.Register(ctx, jobqueue.NodeInfo{ID: sz.nodes[i], Hostname: "bench", Capacity: lifecycleCapacity}); err != nil {
			return sz, err
		}
	}
	if historyJobs > 0 {
		// In runs of at most historyChunk: a run enqueues all its jobs
		// first, and holds their specs in memory.
		for done := int64(0); done < historyJobs; done += historyChunk {
			chunk := min(historyChunk, historyJobs-done)
			perS, err := lifecycle(ctx, pool, q, sz.nodes, int(chunk))
			if err != nil {
				return sz, err
			}
			progress("%s: history: %d of %d jobs through the lifecycle (%.0f jobs/s)", sz.label(), done+chunk, historyJobs, perS)
		}
		if err := settle(ctx, pool, q); err != nil {
			return sz, err
		}
	}
	return sz, nil
}

// loadRecent loads the -recent jobs into every size with one end, right
// before the reads, so that each read's window holds the same jobs at
// every size: what a busy farm's last hour holds beside any history. A
// history the queue wrote (-history-jobs) is in the window too: it ran
// minutes ago. It returns the jobs' end: the windows shorter than the hour
// (/metrics' five minutes, Stats' last minute) hold the newest of them
// while the read rounds last, fewer as they go, alike for the sizes of a
// round.
func loadRecent(ctx context.Context, sizes []*size, o options, progress func(string, ...any)) (time.Time, error) {
	end := time.Now()
	if o.recent == 0 {
		return end, nil
	}
	progress("loading the last hour's %d jobs into every size", o.recent)
	for _, sz := range sizes {
		if err := copyJobs(ctx, sz.pool, o.recent, end, recentSpan, progress); err != nil {
			return end, fmt.Errorf("%s: recent jobs: %w", sz.label(), err)
		}
		if err := settle(ctx, sz.pool, sz.q); err != nil {
			return end, fmt.Errorf("%s: %w", sz.label(), err)
		}
	}
	return end, nil
}

// readRounds times the reads on every size in rounds that alternate
// between them, as the lifecycle's do (runAll), each size's producer kept
// running meanwhile: reads of one size a minute after another's would
// compare the machine's load in those minutes. Each size gets each read's
// p50/p99 over all rounds and, against the first size, the median of the
// rounds' p50 ratios.
//
// The rounds must end while the hour's window still holds every recent job
// (loaded up to recentEnd over recentSpan); a run that would not is an
// error, not a figure.
func readRounds(ctx context.Context, sizes []*size, o options, recentEnd time.Time, progress func(string, ...any)) (err error) {
	readers := make([]*reader, len(sizes))
	defer func() {
		for _, rd := range readers {
			if rd != nil {
				rd.stop()
			}
		}
	}()
	for k, sz := range sizes {
		if readers[k], err = startReader(ctx, sz.pool, sz.q); err != nil {
			return fmt.Errorf("%s: %w", sz.label(), err)
		}
	}
	for i := range o.readRounds {
		progress("reads, round %d of %d", i+1, o.readRounds)
		for _, k := range roundOrder(len(sizes), i) {
			if err := readers[k].round(o.requests); err != nil {
				return fmt.Errorf("%s: %w", sizes[k].label(), err)
			}
			sizes[k].run.LoadAvg = procstat.LoadAvg()
		}
		// A window starts at a whole minute: a minute's margin.
		if o.recent > 0 && time.Since(recentEnd) > lastHour-recentSpan-time.Minute {
			return fmt.Errorf("reads, round %d: the last hour's first jobs have left the reads' window (%s after they were loaded): fewer -requests or -read-rounds",
				i+1, time.Since(recentEnd).Round(time.Second))
		}
	}
	for k, sz := range sizes {
		r := &sz.run
		r.Reads = readers[k].latencies()
		progress("%s: reads over %d rounds", sz.label(), o.readRounds)
		logLatencies(r.Reads, progress)
		if k == 0 {
			continue
		}
		r.ReadRatios = map[string]float64{}
		for name, p50s := range readers[k].roundP50 {
			r.ReadRatios[name] = round(benchstat.Median(pairedRatios(p50s, readers[0].roundP50[name])))
		}
		progress("%s: p50 over the first size's, median of the rounds: %v", sz.label(), r.ReadRatios)
	}
	return nil
}

// backlogBatch is the jobs of one Enqueue of the backlog.
const backlogBatch = 10000

// measureBacklogReads enqueues o.backlog pending jobs, measures the reads
// beside them, then deletes them (the table held no live job before) and
// settles the table for the lifecycle. The bench's nodes are taken out of
// the way first: the reads' producer would otherwise assign their capacity.
func measureBacklogReads(ctx context.Context, pool *pgxpool.Pool, q *jobqueue.Queue, sz *size, o options, progress func(string, ...any)) error {
	r := &sz.run
	r.Backlog = o.backlog
	if _, err := pool.Exec(ctx, "UPDATE nodes SET state = 'draining'"); err != nil {
		return err
	}
	progress("%s: enqueueing a backlog of %d pending jobs", sz.label(), o.backlog)
	specs := make([]jobqueue.Spec, backlogBatch)
	for done := 0; done < o.backlog; done += backlogBatch {
		n := min(backlogBatch, o.backlog-done)
		for i := range n {
			specs[i] = jobqueue.Spec{URL: fmt.Sprintf("http://backlog-%d.example.com/page/%d", (done+i)%100, done+i)}
		}
		if _, _, err := q.Enqueue(ctx, specs[:n]); err != nil {
			return err
		}
	}
	var err error
	if r.BacklogReads, err = measureReads(ctx, pool, q, o.requests, progress); err != nil {
		return err
	}
	for _, sql := range []string{
		"DELETE FROM jobs WHERE state IN ('pending', 'queued', 'processing')",
		"UPDATE nodes SET state = 'active'",
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return settle(ctx, pool, q)
}

// lifecycleRound runs round i of the lifecycle on sizes[k]'s database. The
// server's counters are read on every size's database around it: the
// autovacuums of another size's jobs (a 10M history's takes seconds of CPU)
// run beside this round and slow it, and pg_stat_user_tables shows each
// database only its own. server is the postmaster's pid, whose
// descendants' CPU the round meters.
func lifecycleRound(ctx context.Context, sizes []*size, k int, o options, i, server int, progress func(string, ...any)) error {
	sz := sizes[k]
	r := &sz.run
	progress("%s: lifecycle of %d jobs, round %d of %d", sz.label(), o.lifecycleJobs, i+1, o.lifecycleRounds)
	marks := func() ([]roundMarks, error) {
		out := make([]roundMarks, len(sizes))
		for j, other := range sizes {
			m, err := readRoundMarks(ctx, other.pool)
			if err != nil {
				return nil, err
			}
			out[j] = m
		}
		return out, nil
	}
	before, err := marks()
	if err != nil {
		return err
	}
	// The server's processes, the postmaster's descendants, sampled: an
	// autovacuum worker that ends within the round keeps its CPU.
	meter := &procstat.Meter{Root: server}
	stopMeter := meter.Start(ctx)
	perS, err := lifecycle(ctx, sz.pool, sz.q, sz.nodes, o.lifecycleJobs)
	stopMeter()
	if err != nil {
		return err
	}
	serverCPU := float64(meter.Total().Microseconds()) / float64(o.lifecycleJobs)
	after, err := marks()
	if err != nil {
		return err
	}
	m := maintenance{Vacuums: after[k].vacuums - before[k].vacuums, Analyzes: after[k].analyzes - before[k].analyzes}
	for j := range sizes {
		if j != k {
			m.OtherVacuums += after[j].vacuums - before[j].vacuums
		}
	}
	// The WAL position is the server's, in every database's read alike:
	// the reads nearest the round on either side.
	wal := round((after[0].wal - before[len(before)-1].wal) / float64(o.lifecycleJobs))
	r.LifecycleRounds = append(r.LifecycleRounds, round(perS))
	r.LifecycleMaintenance = append(r.LifecycleMaintenance, m)
	r.LifecycleWALPerJob = append(r.LifecycleWALPerJob, wal)
	r.LifecycleServerCPUPerJob = append(r.LifecycleServerCPUPerJob, round(serverCPU))
	progress("%s: round %d: %.0f jobs/s; autovacuums of jobs ended in it: %d (other sizes' databases: %d), autoanalyzes: %d; WAL per job: %.0f bytes; server CPU per job: %.0f µs; load %s",
		sz.label(), i+1, perS, m.Vacuums, m.OtherVacuums, m.Analyzes, wal, serverCPU, procstat.LoadAvg())
	return nil
}

// finish reports the size's lifecycle against the baseline's (the first
// size) and measures the retention purge.
func (sz *size) finish(ctx context.Context, o options, baseline *size, progress func(string, ...any)) error {
	r := &sz.run
	r.LifecycleJobsPerS = round(benchstat.Median(r.LifecycleRounds))
	if sz != baseline {
		ratios := pairedRatios(r.LifecycleRounds, baseline.run.LifecycleRounds)
		r.LifecycleRatio = round(benchstat.Median(ratios))
		r.LifecycleRatios = roundAll(ratios)
	}
	if purge := min(o.purge, r.Retained); purge > 0 {
		// The oldest purge jobs: the history is in finished_at order by id,
		// each finish at its own microsecond.
		var cutoff time.Time
		if err := sz.pool.QueryRow(ctx, "SELECT finished_at + interval '1 microsecond' FROM jobs WHERE id = $1", purge).Scan(&cutoff); err != nil {
			return err
		}
		progress("%s: purging the oldest %d", sz.label(), purge)
		start := time.Now()
		deleted, err := sz.q.DeleteFinishedBefore(ctx, cutoff, 0, nil)
		if err != nil {
			return err
		}
		r.Purged, r.PurgeDeletesPerS = deleted, round(float64(deleted)/time.Since(start).Seconds())
	}
	progress("%s: %+v", sz.label(), *r)
	return nil
}

func roundAll(vs []float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = round(v)
	}
	return out
}
