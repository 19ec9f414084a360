package jobqueue

import (
	"context"
	crand "crypto/rand"
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
	"github.com/jackc/pgx/v5/pgtype"
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

// Enqueue validates every spec and inserts them all as one batch, or nothing:
// the first invalid spec makes it return a *SpecError naming the item and
// field. It returns the batch id and the job ids in spec order, then wakes
// the producer.
func (q *Queue) Enqueue(ctx context.Context, specs []Spec) (batchID string, ids []int64, err error) {
	if len(specs) == 0 {
		return "", nil, errors.New("enqueue: no jobs")
	}
	if len(specs) > MaxEnqueue {
		return "", nil, fmt.Errorf("enqueue: %d jobs in one batch; at most %d are allowed", len(specs), MaxEnqueue)
	}
	prepared := make([]preparedSpec, len(specs))
	for i, s := range specs {
		p, err := prepare(i, s)
		if err != nil {
			return "", nil, err
		}
		prepared[i] = p
	}
	var uuid pgtype.UUID
	if _, err := crand.Read(uuid.Bytes[:]); err != nil {
		return "", nil, fmt.Errorf("enqueue: batch id: %w", err)
	}
	uuid.Bytes[6] = uuid.Bytes[6]&0x0f | 0x40 // version 4
	uuid.Bytes[8] = uuid.Bytes[8]&0x3f | 0x80 // RFC 4122 variant
	uuid.Valid = true

	err = pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		// COPY cannot return generated ids, so take them from the sequence
		// first and copy them in explicitly; a root job is its own crawl.
		// The sequence is named, not looked up: pg_get_serial_sequence is
		// only stable, so it ran once per id (7x the cost of the nextval).
		rows, err := tx.Query(ctx, "SELECT nextval('jobs_id_seq'::regclass) FROM generate_series(1, $1)", len(specs))
		if err != nil {
			return fmt.Errorf("reserve ids: %w", err)
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("reserve ids: %w", err)
		}
		now := q.now()
		cols := []string{"id", "batch_id", "priority", "spec", "host", "max_attempts", "crawl_id", "dedup_key"}
		if now != nil {
			cols = append(cols, "created_at", "run_after")
		}
		src := pgx.CopyFromSlice(len(prepared), func(i int) ([]any, error) {
			p := &prepared[i]
			row := []any{ids[i], uuid, p.priority, p.json, p.host, p.attempts, ids[i], p.dedupKey}
			if now != nil {
				row = append(row, now, now)
			}
			return row, nil
		})
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"jobs"}, cols, src); err != nil {
			return fmt.Errorf("copy jobs: %w", err)
		}
		if _, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", ChannelProducer, PayloadSubmitted); err != nil {
			return fmt.Errorf("notify: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("enqueue %d jobs: %w", len(specs), err)
	}
	batchID = formatUUID(uuid.Bytes)
	q.log.Debug("enqueued", zap.String("batch", batchID), zap.Int("jobs", len(ids)))
	return batchID, ids, nil
}

func formatUUID(b [16]byte) string {
	const hexdig = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hexdig[c>>4], hexdig[c&0xf])
	}
	return string(out)
}

const claimSQL = `
WITH picked AS (
    SELECT j.id FROM jobs j
    WHERE j.node_id = $1 AND j.state = 'queued'
      AND EXISTS (SELECT 1 FROM nodes n WHERE n.id = $1 AND n.state IN ('active', 'draining')
                  AND ($7::bigint = 0 OR n.incarnation = $7::bigint))
    ORDER BY j.priority DESC, j.id
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
), claimed AS (
    -- started_at is the clock when the row changes, not now() (the
    -- transaction's start, which can precede the snapshot that saw the job
    -- queued): politeness spaces starts by these stamps.
    UPDATE jobs j SET state = 'processing', attempts = j.attempts + 1,
        started_at = coalesce($3::timestamptz, clock_timestamp()),
        lease_expires_at = coalesce($3::timestamptz, now()) + make_interval(secs => $4::float8)
    FROM picked
    WHERE j.id = picked.id
    RETURNING j.*
), stamped AS (
    -- Politeness: a host with a minimum interval between starts has a row in
    -- hosts; its start is recorded in the statement that starts the job, so
    -- the producer spaces starts by what happened, not by what it assigned.
    -- It also wakes the producer: the host's next job may be assigned once
    -- the interval from this start has passed. (Identical notifications of
    -- one transaction are delivered once.)
    UPDATE hosts h SET last_started_at = greatest(h.last_started_at, coalesce($3::timestamptz, clock_timestamp()))
    WHERE h.host IN (SELECT host FROM claimed)
    RETURNING pg_notify($5, $6)
)
SELECT ` + jobCols + ` FROM claimed j`

// Claim starts up to n of the jobs queued on the node: they become processing
// under a lease of Config.Lease, and their attempt counter goes up. A lost or
// exited node claims nothing. This is the form bound to no incarnation; a
// node's process uses Incarnation.Claim.
func (q *Queue) Claim(ctx context.Context, nodeID string, n int) ([]Job, error) {
	return q.claim(ctx, nodeID, 0, n)
}

func (q *Queue) claim(ctx context.Context, nodeID string, inc int64, n int) ([]Job, error) {
	if n <= 0 {
		return nil, nil
	}
	// Two claims stamping the same hosts rows in different orders can
	// deadlock; the loser is rolled back whole and simply runs again.
	var jobs []Job
	err := q.retryDeadlocks(ctx, "claim", func() error {
		b, claim := nodeBatch(claimSQL, nodeID, n, q.now(), q.cfg.Lease.Seconds(), ChannelProducer, PayloadSlots, inc)
		claim.Query(func(rows pgx.Rows) error {
			var err error
			jobs, err = collectJobs(rows)
			return err
		})
		return q.pool.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, fmt.Errorf("claim for node %q: %w", nodeID, err)
	}
	if len(jobs) == 0 {
		// Nothing queued, or nothing for this incarnation any more.
		if err := q.fenceErr(ctx, nodeID, inc); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
	}
	return jobs, nil
}

// unclaimSQL puts the jobs processing on node $1 (at incarnation $3) but
// not in $2 back in its queue, their attempt given back: the jobs of a
// claim whose answer the node never had. They are queued anew as of now
// ($4, or the database's clock), the claim that follows being the node's
// answer to them: their first assignment's time would have them returned
// free as unclaimed (RescueLost) when the lost answer came after a long
// outage. Processing and queued are not counted in job_counts: nothing
// to count.
var unclaimSQL = `
UPDATE jobs j SET state = 'queued', attempts = greatest(j.attempts - 1, 0),
    started_at = NULL, lease_expires_at = NULL, queued_at = coalesce($4::timestamptz, now())
WHERE j.node_id = $1 AND j.state = 'processing' AND NOT (j.id = ANY($2::bigint[]))
  AND ` + fence("$1", "$3") + `
RETURNING j.id`

func (q *Queue) unclaim(ctx context.Context, nodeID string, inc int64, keep []int64) ([]int64, error) {
	if keep == nil {
		keep = []int64{} // NULL would match no job
	}
	var ids []int64
	err := q.sendBatch(ctx, "unclaim", func(b *pgx.Batch) {
		b.Queue(noJITSQL)
		// The node row first, as every statement that changes a node's
		// jobs locks it (heartbeat).
		b.Queue(heartbeatLockSQL, nodeID, inc)
		b.Queue(unclaimSQL, nodeID, keep, inc, q.now()).Query(func(rows pgx.Rows) error {
			var err error
			ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("unclaim for node %q: %w", nodeID, err)
	}
	if len(ids) == 0 {
		if err := q.fenceErr(ctx, nodeID, inc); err != nil {
			return nil, fmt.Errorf("unclaim: %w", err)
		}
	}
	return ids, nil
}

// renewSQL locks the jobs it renews in id order first, the order
// CompleteMany locks them in: an UPDATE alone would lock them in the order
// its scan meets them, and a heartbeat and a completion of the same jobs
// could then deadlock.
const renewSQL = `
WITH locked AS (
    SELECT j.id FROM jobs j
    WHERE j.node_id = $1 AND j.state = 'processing'
      AND ($5::bigint[] IS NULL OR j.id = ANY($5::bigint[]))
      AND EXISTS (SELECT 1 FROM nodes n WHERE n.id = $1 AND n.state IN ('active', 'draining')
                  AND ($4::bigint = 0 OR n.incarnation = $4::bigint))
    ORDER BY j.id
    FOR NO KEY UPDATE OF j
)
UPDATE jobs j SET lease_expires_at = coalesce($2::timestamptz, now()) + make_interval(secs => $3::float8)
FROM locked l
WHERE j.id = l.id AND j.state = 'processing' AND j.node_id = $1
RETURNING j.id`

// failSQL ends the attempt of a job processing on the node: pending again
// after a backoff while attempts remain and the error is retriable, else
// failed. $5 holds the delay per attempt number. With $11 the attempt is
// given back (the node's fault, not the job's): pending again whatever its
// count, which goes down by one.
var failSQL = failCTEs + failSelect

// failKeepingSQL is failSQL that also stores, in the same statement, what
// the page answered ($12-$16: final URL, status, title, console errors,
// timings) as the result of a job it fails for good: a job is never final
// without the answer it failed with, and retention, which deletes a failed
// job with its result, cannot come between the two (the UPDATE holds the
// job's row). A result left by an earlier failure (before a Retry) is
// replaced; no data, HTML or screenshot is kept.
var failKeepingSQL = failCTEs + `, kept AS (
    INSERT INTO results (job_id, node_id, final_url, status, title, console_errors, timings, created_at)
    SELECT $1, $2, $12, $13, $14, $15::jsonb, $16::jsonb, coalesce($4::timestamptz, now())
    FROM upd WHERE upd.state = 'failed'
    ON CONFLICT (job_id) DO UPDATE SET node_id = EXCLUDED.node_id, final_url = EXCLUDED.final_url,
        status = EXCLUDED.status, title = EXCLUDED.title, data = NULL, html = NULL, html_truncated = false, screenshot = NULL,
        console_errors = EXCLUDED.console_errors, timings = EXCLUDED.timings, links = '[]',
        links_over_limit = 0, created_at = EXCLUDED.created_at
)` + failSelect

const failSelect = `
SELECT u.state, (SELECT count(*) FROM woken) FROM upd u`

var failCTEs = `
WITH upd AS (
    UPDATE jobs j SET
        state       = CASE WHEN ` + failRetries + ` THEN 'pending' ELSE 'failed' END,
        node_id     = CASE WHEN ` + failRetries + ` THEN NULL ELSE j.node_id END,
        queued_at   = CASE WHEN ` + failRetries + ` THEN NULL ELSE j.queued_at END,
        run_after   = CASE WHEN ` + failRetries + `
                           THEN coalesce($4::timestamptz, now())
                                + make_interval(secs => ($5::float8[])[least(greatest(j.attempts, 1), 20)])
                           ELSE j.run_after END,
        finished_at = CASE WHEN ` + failRetries + ` THEN NULL ELSE coalesce($4::timestamptz, now()) END,
        attempts    = CASE WHEN $11 THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
        lease_expires_at = NULL,
        last_error  = $6,
        error_class = $7
    WHERE j.id = $1 AND j.state = 'processing' AND j.node_id = $2 AND ` + fence("$2", "$10") + `
    RETURNING j.state, j.finished_at, j.error_class
), counted AS (
    ` + bumpNodeCounterSQL("jobs_failed", "SELECT $2, 1 FROM upd WHERE state = 'failed'") +
	stateCountsSQL("SELECT state, finished_at, error_class, 1 AS d FROM upd") + `
), woken AS (
    SELECT pg_notify($8, $9) FROM upd HAVING count(*) > 0
)`

// failRetries is failSQL's rule for a job going back to pending.
const failRetries = `$3 AND ($11 OR j.attempts < j.max_attempts)`

// fail is Incarnation.Fail, GiveBack and FailKeeping: answer, when not nil,
// is kept as the result if the job fails for good.
func (q *Queue) fail(ctx context.Context, jobID int64, nodeID string, inc int64, errText, class string, retriable, giveBack bool, answer *Result) (State, error) {
	var st State
	var notified int64
	var held bool
	sql, args := failSQL, []any{jobID, nodeID, retriable, q.now(), q.delays(),
		cleanText(errText, maxErrorText), cleanText(class, 64), ChannelProducer, PayloadSlots, inc, giveBack}
	if answer != nil {
		r := Result{FinalURL: answer.FinalURL, Status: answer.Status, Title: answer.Title,
			ConsoleErrors: answer.ConsoleErrors, Timings: answer.Timings}
		var a completeArgs
		if err := a.add(Completion{JobID: jobID, NodeID: nodeID, Result: r}, q.cfg.ResultLimits); err != nil {
			// What is left of an answer (no data, HTML or screenshot)
			// is within every limit; the failure itself must be kept.
			q.log.Warn("the failed job's answer cannot be kept", zap.Int64("job", jobID), zap.Error(err))
		} else {
			sql = failKeepingSQL
			args = append(args, a.finalURLs[0], a.statuses[0], a.titles[0], a.consoleErrors[0], a.timings[0])
		}
	}
	b, failed := nodeBatch(sql, args...)
	// No row is an answer, not an error: an error would make pgx drop the
	// connection's prepared statements of the batch.
	failed.Query(func(rows pgx.Rows) error {
		if held = rows.Next(); held {
			return rows.Scan(&st, &notified)
		}
		return rows.Err()
	})
	if err := q.pool.SendBatch(ctx, b).Close(); err != nil {
		return "", fmt.Errorf("fail job %d: %w", jobID, err)
	}
	if !held {
		if ferr := q.fenceErr(ctx, nodeID, inc); ferr != nil {
			return "", fmt.Errorf("fail job %d: %w", jobID, ferr)
		}
		return "", q.whyNotHeld(ctx, jobID, nodeID)
	}
	return st, nil
}

// whyNotHeld explains why a job was not processing on the node.
func (q *Queue) whyNotHeld(ctx context.Context, jobID int64, nodeID string) error {
	var st State
	var holder string
	err := q.pool.QueryRow(ctx, "SELECT state, coalesce(node_id, '') FROM jobs WHERE id = $1", jobID).Scan(&st, &holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("job %d: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("job %d: %w", jobID, err)
	}
	if st.Finished() {
		return &FinishedError{JobID: jobID, State: st}
	}
	return fmt.Errorf("job %d is %s on node %q, not processing on %q: %w", jobID, st, holder, nodeID, ErrNotHeld)
}

var releaseSQL = releaseQueuedSQL("$4") + `
), woken AS (
    SELECT pg_notify($2, $3) FROM upd HAVING count(*) > 0
)
SELECT count(*), (SELECT count(*) FROM woken) FROM upd`

// release is Incarnation.Release.
func (q *Queue) release(ctx context.Context, nodeID string, inc int64) (int64, error) {
	var n, notified int64
	err := q.retryDeadlocks(ctx, "release", func() error {
		b, release := nodeBatch(releaseSQL, nodeID, ChannelProducer, PayloadSlots, inc)
		release.QueryRow(func(row pgx.Row) error { return row.Scan(&n, &notified) })
		return q.pool.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return 0, fmt.Errorf("release jobs of node %q: %w", nodeID, err)
	}
	if n == 0 {
		if err := q.fenceErr(ctx, nodeID, inc); err != nil {
			return 0, fmt.Errorf("release: %w", err)
		}
	}
	return n, nil
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
