package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// loadChunk is the rows of one COPY (one transaction): the count triggers'
// transition tables hold a chunk, not the whole history.
const loadChunk = 500_000

// historyClasses are the failed jobs' error classes, spread evenly.
var historyClasses = []string{"http", "timeout", "net", "blocked", "script"}

// historyRow is generated job i (1-based) of n: ids in finished_at order,
// finished evenly over span before end; 95% completed, 4% failed, 1%
// canceled.
type historyRow struct {
	state, class string
	finished     time.Time
	attempts     int
}

func genRow(i, n int64, end time.Time, span time.Duration) historyRow {
	r := historyRow{state: "completed", attempts: 1,
		finished: end.Add(-time.Duration(float64(span) * float64(n-i) / float64(n)))}
	switch m := i % 100; {
	case m < 4:
		// The failures in order, each to the next class.
		nth := i/100*4 + m
		r.state, r.class, r.attempts = "failed", historyClasses[nth%int64(len(historyClasses))], 3
	case m == 99:
		r.state, r.attempts = "canceled", 0
	}
	return r
}

// pageURL is generated job id's host and URL, also its result's final URL.
func pageURL(id int64) (host, url string) {
	host = fmt.Sprintf("shop%d.example.com", id%50)
	return host, fmt.Sprintf("https://%s/items?page=%d", host, id)
}

// copyJobs COPYs n finished jobs with ids after the id sequence's last
// value, the completed ones with a result, finished evenly over span before
// end, in chunks, and moves the sequence past them.
func copyJobs(ctx context.Context, pool *pgxpool.Pool, n int64, end time.Time, span time.Duration, progress func(string, ...any)) error {
	if n == 0 {
		return nil
	}
	var base int64
	// is_called is false on a fresh sequence: its last_value not yet used.
	if err := pool.QueryRow(ctx, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM jobs_id_seq").Scan(&base); err != nil {
		return fmt.Errorf("id sequence: %w", err)
	}
	jobCols := []string{"id", "batch_id", "state", "spec", "host", "node_id", "attempts", "max_attempts",
		"run_after", "created_at", "queued_at", "started_at", "finished_at", "last_error", "error_class", "crawl_id"}
	resCols := []string{"job_id", "node_id", "final_url", "status", "title", "created_at"}
	last := time.Now()
	for from := int64(1); from <= n; from += loadChunk {
		to := min(from+loadChunk-1, n)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			i := from - 1
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"jobs"}, jobCols, pgx.CopyFromFunc(func() ([]any, error) {
				if i == to {
					return nil, nil
				}
				i++
				r, id := genRow(i, n, end, span), base+i
				var batch [16]byte
				b := id / 1000
				for k := range 8 {
					batch[15-k] = byte(b >> (8 * k))
				}
				batch[6], batch[8] = 0x40, 0x80 // a version 4, RFC 4122 UUID
				host, url := pageURL(id)
				spec := fmt.Sprintf(`{"url":%q,"extract":"document.title","block":["image","font"]}`, url)
				started := r.finished.Add(-1500 * time.Millisecond)
				var lastErr, class any
				if r.state == "failed" {
					lastErr, class = fmt.Sprintf("%s error on attempt 3 of job %d", r.class, id), r.class
				}
				return []any{id, batch, r.state, spec, host, fmt.Sprintf("hist-node-%02d", id%100), r.attempts, 3,
					started.Add(-2 * time.Second), started.Add(-2 * time.Second), started.Add(-time.Second), started,
					r.finished, lastErr, class, id}, nil
			}))
			if err != nil {
				return fmt.Errorf("copy jobs: %w", err)
			}
			i = from - 1
			_, err = tx.CopyFrom(ctx, pgx.Identifier{"results"}, resCols, pgx.CopyFromFunc(func() ([]any, error) {
				for i < to {
					i++
					r, id := genRow(i, n, end, span), base+i
					if r.state != "completed" {
						continue
					}
					_, url := pageURL(id)
					return []any{id, fmt.Sprintf("hist-node-%02d", id%100), url, 200,
						fmt.Sprintf("Items, page %d", id), r.finished}, nil
				}
				return nil, nil
			}))
			if err != nil {
				return fmt.Errorf("copy results: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if time.Since(last) > 10*time.Second || to == n {
			progress("  loaded %d of %d jobs", to, n)
			last = time.Now()
		}
	}
	if _, err := pool.Exec(ctx, "SELECT setval('jobs_id_seq', $1)", base+n); err != nil {
		return fmt.Errorf("id sequence: %w", err)
	}
	return nil
}

// settle does what the recorder and autovacuum do after a bulk insert: the
// counts' deltas folded, statistics, and the visibility map that
// index-only scans rely on. Then a checkpoint, so that writing the dirty
// pages out does not land in the measurements.
func settle(ctx context.Context, pool *pgxpool.Pool, q *jobqueue.Queue) error {
	if _, err := q.CompactCounts(ctx); err != nil {
		return err
	}
	for _, sql := range []string{"VACUUM (ANALYZE)", "CHECKPOINT"} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}
