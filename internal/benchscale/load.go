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
	state, class, lastError string
	finished                time.Time
	attempts                int
}

func genRow(i, n int64, end time.Time, span time.Duration) historyRow {
	r := historyRow{state: "completed", attempts: 1,
		finished: end.Add(-time.Duration(float64(span) * float64(n-i) / float64(n)))}
	switch m := i % 100; {
	case m < 4:
		r.state, r.class, r.attempts = "failed", historyClasses[i%int64(len(historyClasses))], 3
		r.lastError = fmt.Sprintf("%s error on attempt 3 of job %d", r.class, i)
	case m == 99:
		r.state, r.attempts = "canceled", 0
	}
	return r
}

// loadHistory COPYs n finished jobs, the completed ones with a result, in
// chunks, and moves the id sequence past them.
func loadHistory(ctx context.Context, pool *pgxpool.Pool, q *jobqueue.Queue, n int64, span time.Duration, progress func(string, ...any)) error {
	end := time.Now().Add(-time.Minute)
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
				r := genRow(i, n, end, span)
				var batch [16]byte
				b := i / 1000
				for k := range 8 {
					batch[15-k] = byte(b >> (8 * k))
				}
				batch[6], batch[8] = 0x40, 0x80 // a version 4, RFC 4122 UUID
				host := fmt.Sprintf("shop%d.example.com", i%50)
				url := fmt.Sprintf("https://%s/items?page=%d", host, i)
				spec := fmt.Sprintf(`{"url":%q,"extract":"document.title","block":["image","font"]}`, url)
				started := r.finished.Add(-1500 * time.Millisecond)
				var lastErr, class any
				if r.state == "failed" {
					lastErr, class = r.lastError, r.class
				}
				return []any{i, batch, r.state, spec, host, fmt.Sprintf("hist-node-%02d", i%100), r.attempts, 3,
					started.Add(-2 * time.Second), started.Add(-2 * time.Second), started.Add(-time.Second), started,
					r.finished, lastErr, class, i}, nil
			}))
			if err != nil {
				return fmt.Errorf("copy jobs: %w", err)
			}
			i = from - 1
			_, err = tx.CopyFrom(ctx, pgx.Identifier{"results"}, resCols, pgx.CopyFromFunc(func() ([]any, error) {
				for i < to {
					i++
					r := genRow(i, n, end, span)
					if r.state != "completed" {
						continue
					}
					return []any{i, fmt.Sprintf("hist-node-%02d", i%100),
						fmt.Sprintf("https://shop%d.example.com/items?page=%d", i%50, i), 200,
						fmt.Sprintf("Items, page %d", i), r.finished}, nil
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
	if n > 0 {
		if _, err := pool.Exec(ctx, "SELECT setval('jobs_id_seq', $1)", n); err != nil {
			return err
		}
	}
	return settle(ctx, pool, q)
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
