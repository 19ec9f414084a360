package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Dashboard support: the load samples behind the charts (recorded by the
// leader producer, pruned by age), recent failures grouped by error class,
// and recent finishes for the metrics. Tables: migrations/003_dashboard.sql.

// recordLockKey serializes RecordSamples across producers, so that two
// recorders running at once (a leader change in flight) cannot both write a
// sample for the same moment.
const recordLockKey int64 = 0x6266736d706c6573 // "bfsmples"

// SampleSettle is how far a queue sample's count of finished jobs trails the
// sample's time: a completion whose transaction commits just after the
// sample read the table, with a finished_at just before it, is counted by
// the next sample instead of by none.
const SampleSettle = 2 * time.Second

// QueuePoint is the queue at one sample time, or a bucket of samples.
type QueuePoint struct {
	At         time.Time `json:"at"`
	Pending    int64     `json:"pending"`
	Queued     int64     `json:"queued"`
	Processing int64     `json:"processing"`
	// Completed, Failed and Canceled count the jobs that reached that final
	// state during the sample's interval (for a bucket: during its samples').
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	Canceled  int64 `json:"canceled"`
}

// NodePoint is one node's load at one sample time, or over a bucket of
// samples (then the peaks, except CPU, which is the mean).
type NodePoint struct {
	At                   time.Time `json:"at"`
	NodeID               string    `json:"node_id"`
	Capacity             int       `json:"capacity"`
	BusySessions         int       `json:"busy_sessions"`
	CPUPercent           float64   `json:"cpu_percent"`
	MemUsedBytes         int64     `json:"mem_used_bytes"`
	ChromePSSBytes       int64     `json:"chrome_pss_bytes"`
	JobsSinceChromeStart int64     `json:"jobs_since_chrome_start"`
	ChromeRestarts       int64     `json:"chrome_restarts"`

	// The range of the Chrome PSS over the bucket: each recycle's peak and
	// trough, which one value per sample misses.
	ChromePSSMinBytes int64 `json:"chrome_pss_min_bytes"`
	ChromePSSMaxBytes int64 `json:"chrome_pss_max_bytes"`
}

// SampleReport says what RecordSamples wrote.
type SampleReport struct {
	// Skipped is true when another recorder wrote a sample less than half an
	// interval ago; nothing was written.
	Skipped bool
	// Queue is the queue sample written.
	Queue QueuePoint
	// Nodes is the number of node samples written (one per active or
	// draining node).
	Nodes int64
}

// Returning the finished counts from the insert lets the report show what
// was stored without a second read. $3 is the start of the counting window.
const recordQueueSQL = `
INSERT INTO queue_samples (at, pending, queued, processing, completed, failed, canceled, counted_until)
SELECT $1::timestamptz,
       ` + pendingCountExpr + `,
       (SELECT count(*) FROM jobs WHERE state = 'queued'),
       (SELECT count(*) FROM jobs WHERE state = 'processing'),
       f.completed, f.failed, f.canceled, $2::timestamptz
FROM (SELECT count(*) FILTER (WHERE state = 'completed') AS completed,
             count(*) FILTER (WHERE state = 'failed') AS failed,
             count(*) FILTER (WHERE state = 'canceled') AS canceled
      FROM jobs
      WHERE state IN ('completed', 'failed', 'canceled')
        AND finished_at > $3::timestamptz AND finished_at <= $2::timestamptz) f
RETURNING pending, queued, processing, completed, failed, canceled`

// recordNodesSQL takes each live node's Chrome PSS range gathered since the
// previous sample and clears it, under the row lock, so that a heartbeat
// lands wholly in one sample or the next and no range is counted twice or
// lost. Every column comes from the locked read (taken): a heartbeat that
// committed while the lock was awaited is seen there, not in the snapshot.
const recordNodesSQL = `
WITH taken AS (
    SELECT id, state, capacity, busy_sessions, cpu_percent, mem_used_bytes, chrome_pss_bytes,
           coalesce(chrome_pss_min_bytes, chrome_pss_bytes) AS pss_min,
           coalesce(chrome_pss_max_bytes, chrome_pss_bytes) AS pss_max,
           jobs_since_chrome_start, chrome_restarts
    FROM nodes
    WHERE state IN ('active', 'draining')
    ORDER BY id
    FOR NO KEY UPDATE
), cleared AS (
    UPDATE nodes n SET chrome_pss_min_bytes = NULL, chrome_pss_max_bytes = NULL
    FROM taken t
    WHERE n.id = t.id AND (n.chrome_pss_min_bytes IS NOT NULL OR n.chrome_pss_max_bytes IS NOT NULL)
)
INSERT INTO node_samples (at, node_id, state, capacity, busy_sessions, cpu_percent, mem_used_bytes,
                          chrome_pss_bytes, chrome_pss_min_bytes, chrome_pss_max_bytes,
                          jobs_since_chrome_start, chrome_restarts)
SELECT $1::timestamptz, id, state, capacity, busy_sessions, cpu_percent, mem_used_bytes,
       chrome_pss_bytes, pss_min, pss_max, jobs_since_chrome_start, chrome_restarts
FROM taken`

// RecordSamples writes one queue sample (counts by live state, and the jobs
// finished since the previous sample) and one load sample per active or
// draining node, in one transaction. interval is the recorder's period: a
// sample less than interval/2 after the previous one is skipped (two
// recorders at once write one series, not two interleaved ones), and after
// a gap — the first sample, or a new leader taking over — finishes are
// counted over at most two intervals, so a chart of finishes per interval
// shows a gap rather than one spike holding the whole gap's finishes.
func (q *Queue) RecordSamples(ctx context.Context, interval time.Duration) (SampleReport, error) {
	if interval <= 0 {
		return SampleReport{}, fmt.Errorf("record samples: interval %v must be positive", interval)
	}
	var rep SampleReport
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", recordLockKey); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		// clock_timestamp, not now(): the transaction may have waited for
		// the lock, and the sample is of the moment after it.
		var at time.Time
		var prevAt, prevUntil *time.Time
		err := tx.QueryRow(ctx, `SELECT coalesce($1::timestamptz, clock_timestamp()), max(at), max(counted_until) FROM queue_samples`,
			q.now()).Scan(&at, &prevAt, &prevUntil)
		if err != nil {
			return fmt.Errorf("previous sample: %w", err)
		}
		if prevAt != nil && at.Sub(*prevAt) < interval/2 {
			rep.Skipped = true
			return nil
		}
		until := at.Add(-SampleSettle)
		from := until.Add(-interval)
		if prevUntil != nil {
			from = *prevUntil
		}
		if earliest := until.Add(-2 * interval); from.Before(earliest) {
			from = earliest
		}
		if from.After(until) {
			// The clock went back; count nothing rather than twice.
			from = until
		}
		rep.Queue.At = at
		b := readBatch()
		b.Queue(recordQueueSQL, at, until, from).QueryRow(func(row pgx.Row) error {
			return row.Scan(&rep.Queue.Pending, &rep.Queue.Queued, &rep.Queue.Processing,
				&rep.Queue.Completed, &rep.Queue.Failed, &rep.Queue.Canceled)
		})
		b.Queue(recordNodesSQL, at).Exec(func(tag pgconn.CommandTag) error {
			rep.Nodes = tag.RowsAffected()
			return nil
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("queue and node samples: %w", err)
		}
		return nil
	})
	if err != nil {
		return SampleReport{}, fmt.Errorf("record samples: %w", err)
	}
	return rep, nil
}

// PruneSamples deletes queue and node samples older than cutoff, at most
// batchSize rows per statement (default 5000) so that a large backlog of old
// samples never holds locks for long, and returns how many it deleted.
func (q *Queue) PruneSamples(ctx context.Context, cutoff time.Time, batchSize int) (int64, error) {
	if batchSize <= 0 {
		batchSize = 5000
	}
	var total int64
	for _, sql := range []string{
		`DELETE FROM node_samples WHERE (at, node_id) IN
             (SELECT at, node_id FROM node_samples WHERE at < $1 ORDER BY at LIMIT $2)`,
		`DELETE FROM queue_samples WHERE at IN
             (SELECT at FROM queue_samples WHERE at < $1 ORDER BY at LIMIT $2)`,
	} {
		for {
			tag, err := q.pool.Exec(ctx, sql, cutoff, batchSize)
			if err != nil {
				return total, fmt.Errorf("prune samples: %w", err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < int64(batchSize) {
				break
			}
			if err := ctx.Err(); err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

// Buckets align to the Unix epoch, so that a client polling with since set
// to its last bucket gets the same bucket boundaries back and can replace
// that bucket, which was still filling, with its complete value.
const queueSamplesSQL = `
SELECT date_bin(make_interval(secs => $2::float8), at, timestamptz 'epoch') AS b,
       (array_agg(pending ORDER BY at DESC))[1], (array_agg(queued ORDER BY at DESC))[1],
       (array_agg(processing ORDER BY at DESC))[1],
       sum(completed)::bigint, sum(failed)::bigint, sum(canceled)::bigint
FROM queue_samples
WHERE at >= $1
GROUP BY b
ORDER BY b`

// $3 is the nodes to return, NULL for all.
const nodeSamplesSQL = `
SELECT date_bin(make_interval(secs => $2::float8), at, timestamptz 'epoch') AS b, node_id,
       max(capacity), max(busy_sessions), avg(cpu_percent), max(mem_used_bytes), max(chrome_pss_bytes),
       min(coalesce(chrome_pss_min_bytes, chrome_pss_bytes)), max(coalesce(chrome_pss_max_bytes, chrome_pss_bytes)),
       max(jobs_since_chrome_start), max(chrome_restarts)
FROM node_samples
WHERE at >= $1 AND ($3::text[] IS NULL OR node_id = ANY($3::text[]))
GROUP BY b, node_id
ORDER BY b, node_id`

// Samples returns the queue and node samples taken at or after since, in
// buckets of step (at least one second) aligned to the Unix epoch, oldest
// first. A queue bucket holds the last live counts of its samples and the
// sums of their finishes; a node bucket holds the peaks of its samples
// (peak PSS is what shows the recycling sawtooth), the range of the PSS and
// the mean CPU. Since is rounded down to its bucket's start. nodes, when
// not nil, are the only nodes whose samples are returned (ChartNodes).
func (q *Queue) Samples(ctx context.Context, since time.Time, step time.Duration, nodes []string) ([]QueuePoint, []NodePoint, error) {
	if step < time.Second {
		step = time.Second
	}
	since = bucketStart(since, step)
	var qp []QueuePoint
	var np []NodePoint
	b := &pgx.Batch{}
	b.Queue(queueSamplesSQL, since, step.Seconds()).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var p QueuePoint
			if err := rows.Scan(&p.At, &p.Pending, &p.Queued, &p.Processing, &p.Completed, &p.Failed, &p.Canceled); err != nil {
				return err
			}
			qp = append(qp, p)
		}
		return rows.Err()
	})
	b.Queue(nodeSamplesSQL, since, step.Seconds(), nodes).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var p NodePoint
			if err := rows.Scan(&p.At, &p.NodeID, &p.Capacity, &p.BusySessions, &p.CPUPercent, &p.MemUsedBytes,
				&p.ChromePSSBytes, &p.ChromePSSMinBytes, &p.ChromePSSMaxBytes, &p.JobsSinceChromeStart, &p.ChromeRestarts); err != nil {
				return err
			}
			np = append(np, p)
		}
		return rows.Err()
	})
	if err := q.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, fmt.Errorf("samples since %s: %w", since.Format(time.RFC3339), err)
	}
	return qp, np, nil
}

// ChartNodes returns the n nodes with the highest Chrome PSS sampled at or
// after since, highest first (ties by id), and how many nodes have samples
// there: what a per-node chart of a fleet shows when it cannot show every
// node. Its cost is the samples since since, a node's each interval.
func (q *Queue) ChartNodes(ctx context.Context, since time.Time, n int) (ids []string, total int, err error) {
	err = q.pool.QueryRow(ctx, `
WITH peaks AS (
    SELECT node_id, max(coalesce(chrome_pss_max_bytes, chrome_pss_bytes)) AS pss
    FROM node_samples WHERE at >= $1 GROUP BY node_id
)
SELECT coalesce((SELECT array_agg(node_id ORDER BY pss DESC, node_id)
                 FROM (SELECT node_id, pss FROM peaks ORDER BY pss DESC, node_id LIMIT $2) t), '{}'),
       (SELECT count(*) FROM peaks)`, since, n).Scan(&ids, &total)
	if err != nil {
		return nil, 0, fmt.Errorf("chart nodes since %s: %w", since.Format(time.RFC3339), err)
	}
	return ids, total, nil
}

// bucketStart rounds t down to a multiple of step since the Unix epoch, the
// origin of the buckets.
func bucketStart(t time.Time, step time.Duration) time.Time {
	ns, d := t.UnixNano(), step.Nanoseconds()
	r := ns % d
	if r < 0 {
		r += d
	}
	return time.Unix(0, ns-r).In(t.Location())
}

// Unclassified is the error class shown for a failure recorded without one.
const Unclassified = "unclassified"

// FailedJob is one failed job as listed under its error class.
type FailedJob struct {
	ID         int64     `json:"id"`
	URL        string    `json:"url"`
	NodeID     string    `json:"node_id,omitempty"`
	Attempts   int       `json:"attempts"`
	Error      string    `json:"error"` // cut to 500 characters
	FinishedAt time.Time `json:"finished_at"`
}

// FailureGroup is the failures of one error class.
type FailureGroup struct {
	ErrorClass string      `json:"error_class"`
	Count      int64       `json:"count"`
	LastAt     time.Time   `json:"last_at"`
	Recent     []FailedJob `json:"recent"` // newest first
}

// MaxFailureGroups bounds the classes FailureGroups returns.
const MaxFailureGroups = 50

// failureGroupsSQL counts each class's failures in the window from the
// per-minute counts alone (finishedCountsSQL's rule: $1 is a whole minute)
// and lists each of the largest classes' newest failures from the index of
// failed jobs by class: the cost is the window's minutes and classes times
// perClass, not the history. $2 is perClass, $3 the most classes.
const failureGroupsSQL = `
WITH counts AS (
    SELECT class, sum(n)::bigint AS n FROM finished_minutes
    WHERE state = 'failed' AND minute >= $1
    GROUP BY class HAVING sum(n) > 0
    ORDER BY n DESC, class
    LIMIT $3
)
SELECT c.class, c.n, r.id, r.url, r.node_id, r.attempts, r.err, r.finished_at, r.proxy, r.headers, r.cookies
FROM counts c
CROSS JOIN LATERAL (
    SELECT j.id, j.spec ->> 'url' AS url, coalesce(j.spec ->> 'proxy', '') AS proxy, coalesce(j.node_id, '') AS node_id,
           j.spec -> 'headers' AS headers, j.spec -> 'cookies' AS cookies,
           j.attempts, left(coalesce(j.last_error, ''), 500) AS err, j.finished_at
    FROM jobs j
    WHERE j.state = 'failed' AND coalesce(j.error_class, '') = c.class AND j.finished_at >= $1
    ORDER BY coalesce(j.error_class, ''), j.finished_at DESC, j.id DESC
    LIMIT $2) r
ORDER BY c.n DESC, c.class, r.finished_at DESC, r.id DESC`

// FailureGroups returns the jobs that failed (for good: attempts exhausted
// or a permanent error) from WindowStart(since) on, grouped by error
// class, the largest group first, with up to perClass (1..100, default 5)
// of each class's newest jobs. At most MaxFailureGroups classes are
// returned.
func (q *Queue) FailureGroups(ctx context.Context, since time.Time, perClass int) ([]FailureGroup, error) {
	if perClass <= 0 {
		perClass = 5
	}
	perClass = min(perClass, 100)
	var groups []FailureGroup
	err := q.readQuery(ctx, func(rows pgx.Rows) error {
		for rows.Next() {
			var class string
			var n int64
			var fj FailedJob
			var secretsOf Spec // the fields that hold secrets
			if err := rows.Scan(&class, &n, &fj.ID, &fj.URL, &fj.NodeID, &fj.Attempts, &fj.Error, &fj.FinishedAt,
				&secretsOf.Proxy, &secretsOf.Headers, &secretsOf.Cookies); err != nil {
				return err
			}
			if class == "" {
				class = Unclassified
			}
			if len(groups) == 0 || groups[len(groups)-1].ErrorClass != class {
				// At most MaxFailureGroups classes: the statement's LIMIT.
				// Newest first: the group's first job is its last failure.
				groups = append(groups, FailureGroup{ErrorClass: class, Count: n, LastAt: fj.FinishedAt})
			}
			g := &groups[len(groups)-1]
			secretsOf.URL = fj.URL
			fj.URL, fj.Error = redactURL(fj.URL, false), RedactText(fj.Error, secretsOf.Secrets()...)
			g.Recent = append(g.Recent, fj)
		}
		return rows.Err()
	}, failureGroupsSQL, WindowStart(since), perClass, MaxFailureGroups)
	if err != nil {
		return nil, fmt.Errorf("failure groups: %w", err)
	}
	return groups, nil
}

// FinishedCount is how many jobs reached one final state (and, for failed
// jobs, with one error class) in a window.
type FinishedCount struct {
	State      State
	ErrorClass string // "" unless State is failed; Unclassified when a failure has none
	Count      int64
}

// Ping checks that the database answers.
func (q *Queue) Ping(ctx context.Context) error {
	if err := q.pool.Ping(ctx); err != nil {
		return fmt.Errorf("database ping: %w", err)
	}
	return nil
}

// Screenshot returns the PNG of a job's result, without loading the rest of
// it: nil when the spec asked for none, ErrNotFound when there is no result.
func (q *Queue) Screenshot(ctx context.Context, jobID int64) ([]byte, error) {
	var png []byte
	err := q.pool.QueryRow(ctx, "SELECT screenshot FROM results WHERE job_id = $1", jobID).Scan(&png)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("result of job %d: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("screenshot of job %d: %w", jobID, err)
	}
	return png, nil
}
