package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// Config tunes a Queue. The zero value is usable: every field has a
// default, a 0 takes it, and a negative number is refused (New panics
// naming the field).
type Config struct {
	// Logger receives the queue's logs. Default: zap.NewNop().
	Logger *zap.Logger
	// Now, when set, replaces the database clock (now()) in every statement.
	// Tests use it to move time; in production leave it nil so that all
	// processes share the database server's clock and node clock skew
	// cannot expire leases.
	Now func() time.Time
	// Rand returns uniform draws in [0, 1) for retry jitter. Default: math/rand/v2.
	Rand func() float64
	// BackoffBase is the delay before the second attempt of a failed job;
	// it doubles per attempt. Default: 10 s.
	BackoffBase time.Duration
	// BackoffMax caps the retry delay. Default: 10 min.
	BackoffMax time.Duration
	// Lease is how long a claimed job stays with its node without a
	// renewal (a heartbeat) before RescueLost takes it back.
	// Default: 2 min.
	Lease time.Duration
	// ClaimTimeout is how long a job may stay queued on a node, unclaimed,
	// before RescueLost returns it free for another node: far past a
	// node's claim on its wake-up or at its fallback poll (10 s), so that
	// only a node whose claims stopped while it heartbeats loses them.
	// Default: 1 min.
	ClaimTimeout time.Duration
	// StaleAfter is the heartbeat age past which a node is presumed dead:
	// the producer declares it lost (RescueLost), and Register lets another
	// process take its id. Default: DefaultStaleAfter.
	StaleAfter time.Duration
	// ResultLimits bound every stored result; zero fields take
	// DefaultResultLimits.
	ResultLimits ResultLimits
	// ListWindow bounds the ids one List call searches when no index
	// serves its filter (a host, a node, a time, a finished state): the
	// page then holds the matches among the newest ListWindow ids below its
	// cursor, and Page.Next goes on below them, so that a rare match costs
	// a page at a time instead of a walk through the whole history.
	// Default: DefaultListWindow.
	ListWindow int64
}

// Defaults of Config.
const (
	DefaultBackoffBase  = 10 * time.Second
	DefaultBackoffMax   = 10 * time.Minute
	DefaultLease        = 2 * time.Minute
	DefaultClaimTimeout = time.Minute
	DefaultStaleAfter   = 15 * time.Second
	DefaultListWindow   = 50_000
	// MaxEnqueue bounds one Enqueue call.
	MaxEnqueue = 100_000
	// maxErrorText bounds a stored error message.
	maxErrorText = 8 << 10
	// lockReleaseTimeout bounds cleanup statements run after ctx ended.
	lockReleaseTimeout = 5 * time.Second
)

// withDefaults applies the project's rule for numeric config fields
// (internal/cfgrule): 0 takes the default and a negative value is a
// programming error, which New reports by panicking with the field's name,
// as it would for a nil pool. Nothing here can be off.
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	mustResolve("Config",
		cfgrule.Resolve("BackoffBase", &c.BackoffBase, DefaultBackoffBase, false),
		cfgrule.Resolve("BackoffMax", &c.BackoffMax, DefaultBackoffMax, false),
		cfgrule.Resolve("Lease", &c.Lease, DefaultLease, false),
		cfgrule.Resolve("ClaimTimeout", &c.ClaimTimeout, DefaultClaimTimeout, false),
		cfgrule.Resolve("StaleAfter", &c.StaleAfter, DefaultStaleAfter, false),
		cfgrule.Resolve("ListWindow", &c.ListWindow, DefaultListWindow, false),
	)
	c.ResultLimits = c.ResultLimits.withDefaults()
	return c
}

// mustResolve panics, naming the struct, when a field broke the rule.
func mustResolve(structName string, errs ...error) {
	if err := errors.Join(errs...); err != nil {
		panic(fmt.Sprintf("jobqueue: %s: %v", structName, err))
	}
}

// Queue is the job queue on one PostgreSQL database. It is safe for
// concurrent use; it holds no connection of its own beyond the pool's.
type Queue struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *zap.Logger
	// hostsScanned is how many hosts with pending jobs the last round's
	// host scan found, plus one (0: no scan yet): a round goes straight
	// to the scan while they are few (see fewPendingHosts).
	hostsScanned atomic.Int64
}

// New returns a Queue on pool. The schema must be in place (Migrate).
func New(pool *pgxpool.Pool, cfg Config) *Queue {
	cfg = cfg.withDefaults()
	return &Queue{pool: pool, cfg: cfg, log: cfg.Logger}
}

// ResultLimits are the bounds CompleteMany holds every result to; a node
// hands them to its browser.
func (q *Queue) ResultLimits() ResultLimits { return q.cfg.ResultLimits }

// Pool is the queue's connection pool.
func (q *Queue) Pool() *pgxpool.Pool { return q.pool }

// now is the statement clock argument: NULL (the database's now()) unless
// the Config replaced the clock.
func (q *Queue) now() any {
	if q.cfg.Now == nil {
		return nil
	}
	return q.cfg.Now()
}

// delays is the retry delay per attempt number (1-based in SQL), each with
// its own jitter draw, in seconds.
func (q *Queue) delays() []float64 {
	d := make([]float64, MaxMaxAttempts)
	for i := range d {
		d[i] = Backoff(i+1, q.cfg.BackoffBase, q.cfg.BackoffMax, q.cfg.Rand()).Seconds()
	}
	return d
}

// jobCols is the column list scanned by scanJob; the table alias must be j.
const jobCols = `j.id, j.batch_id::text, j.state, j.priority, j.spec, j.host, coalesce(j.node_id, ''),
    j.attempts, j.max_attempts, j.run_after, j.lease_expires_at, j.created_at, j.queued_at,
    j.started_at, j.finished_at, coalesce(j.last_error, ''), coalesce(j.error_class, ''),
    coalesce(j.parent_id, 0), j.crawl_id, j.depth`

func scanJob(row pgx.Row) (Job, error) {
	var j Job
	err := row.Scan(jobScanDest(&j)...)
	return j, err
}

// jobScanDest lists the scan targets for jobCols, in order; queries that
// select more columns after them append their own.
func jobScanDest(j *Job) []any {
	return []any{&j.ID, &j.BatchID, &j.State, &j.Priority, &j.Spec, &j.Host, &j.NodeID,
		&j.Attempts, &j.MaxAttempts, &j.RunAfter, &j.LeaseExpiresAt, &j.CreatedAt, &j.QueuedAt,
		&j.StartedAt, &j.FinishedAt, &j.LastError, &j.ErrorClass, &j.ParentID, &j.CrawlID, &j.Depth}
}

func collectJobs(rows pgx.Rows) ([]Job, error) {
	defer rows.Close()
	var jobs []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// cleanText makes s storable as PostgreSQL text: valid UTF-8, no NUL bytes,
// at most maxLen bytes (cut at a rune boundary).
func cleanText(s string, maxLen int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "")
	}
	if maxLen > 0 && len(s) > maxLen {
		cut := maxLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// maxTxAttempts bounds re-runs of a statement or batch that lost a deadlock.
const maxTxAttempts = 5

// retryDeadlocks runs f again when it lost a deadlock or a serialization
// conflict. PostgreSQL rolled the whole statement or batch back, so running
// it again is safe; f must set its results afresh on each run. Statements
// that lock many job rows (rescue, reclaim, cancel, batched completion) can
// meet in opposite orders, and PostgreSQL breaks the tie by failing one.
func (q *Queue) retryDeadlocks(ctx context.Context, op string, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || !isRetryableTxError(err) || attempt == maxTxAttempts || ctx.Err() != nil {
			return err
		}
		q.log.Debug("retrying after a deadlock", zap.String("op", op), zap.Int("attempt", attempt), zap.Error(err))
	}
}

// noJITSQL turns JIT compilation off for the rest of its transaction. The
// queue's statements each touch a few rows through an index, but their
// estimated cost follows the backlog: with 500,000 jobs pending the round's
// pick (a generic plan, estimated at 540,000) passed PostgreSQL's default
// thresholds for JIT with inlining and optimization, and compiled itself
// again at every round: 44 ms a round (97 ms of JIT for a 0.5 ms scan under
// EXPLAIN ANALYZE), and the lifecycle fell to 983 jobs/s. None of these
// statements lasts long enough to gain from compiling it
// (BenchmarkLifecycle: no measurable cost with it off). Set per transaction
// rather than per connection, so that it holds behind PgBouncer's
// transaction pooling (which refuses a startup parameter it does not know,
// and would leave a session SET on a server connection other clients get).
//
// Known and left: a node's connection keeps a prepared statement's generic
// plan until the next ANALYZE of jobs, and one made on an empty, analyzed
// table reads the whole table at every claim and completion once it has
// filled, until autovacuum analyzes it again (39 claims of 80 ms in one
// scale-bench run). Planning them afresh at every call
// (plan_cache_mode = force_custom_plan) ends that, but cost a fifth of
// BenchmarkLifecycle's throughput and a third more server CPU per job
// (198-202 against 147-150 µs), and turning sequential scans off does not
// (on an empty table's statistics a full index scan costs as little).
const noJITSQL = `SELECT set_config('jit', 'off', true)`

// indexScansOnlySQL turns sequential and bitmap scans off for the rest of
// its transaction, for statements whose every read of jobs has an index
// made for it (roundSettings, readSettings): the statistics of a queue
// table lag its backlog by design, and a plan made on them, before an
// ANALYZE, took a full scan the index would have spared.
const indexScansOnlySQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)`

// readSettings open the transaction of a read of the queue's state that
// runs a few times a second at most (Stats, ListNodes, the sample
// recorder, the windows of finishes: FinishedSince, FailureGroups), for the
// rest of it: plans made afresh at every call, on the statistics and the
// table's size of the moment (planning is cheap at that rate); index scans
// only, as in a round (roundSettings), since every read of jobs there has
// an index made for it; and no JIT (noJITSQL).
//
// On the scale bench's empty table, before autovacuum analyzed a 500,000-job
// enqueue: generic plans kept from the empty table read every pending row
// with a sequential scan and a sort for each probe of Stats (0.29 s a
// call), and the whole table for ListNodes' count of what each node holds
// (0.24 s); a window read's generic plan kept from a small finished_minutes
// scanned all of its rows once it held a month (TestWindowReadsPlanAfresh).
// With fresh plans alone, Stats' own count of what each node holds still
// chose a sequential scan of the whole table (60 ms a call) on the default
// estimates of an unanalyzed table.
var readSettings = []string{
	`SELECT set_config('plan_cache_mode', 'force_custom_plan', true)`,
	indexScansOnlySQL,
	noJITSQL,
}

// readBatch is a batch that opens with readSettings.
func readBatch() *pgx.Batch {
	b := &pgx.Batch{}
	for _, sql := range readSettings {
		b.Queue(sql)
	}
	return b
}

// readQuery runs one read statement after readSettings, in one round trip,
// and hands its rows to fn.
func (q *Queue) readQuery(ctx context.Context, fn func(pgx.Rows) error, sql string, args ...any) error {
	b := readBatch()
	b.Queue(sql, args...).Query(fn)
	return q.pool.SendBatch(ctx, b).Close()
}

// nodeBatch is a node's statement sql after noJITSQL, for one round trip
// and one implicit transaction (a pipeline's statements up to its sync):
// the caller reads the statement's results through the queued query, then
// sends the batch.
func nodeBatch(sql string, args ...any) (*pgx.Batch, *pgx.QueuedQuery) {
	b := &pgx.Batch{}
	b.Queue(noJITSQL)
	return b, b.Queue(sql, args...)
}

// sendBatch builds a batch with build and sends it as one implicit
// transaction, again from scratch if it lost a deadlock (a batch object is
// not reused: its statements may be bound to the first connection).
func (q *Queue) sendBatch(ctx context.Context, op string, build func(b *pgx.Batch)) error {
	return q.retryDeadlocks(ctx, op, func() error {
		b := &pgx.Batch{}
		build(b)
		return q.pool.SendBatch(ctx, b).Close()
	})
}

// isRetryableTxError reports PostgreSQL errors after which the same
// transaction may simply be run again.
func isRetryableTxError(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40P01" || pgErr.Code == "40001" // deadlock_detected, serialization_failure
	}
	return false
}
