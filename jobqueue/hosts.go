package jobqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// HostActivity is one host as farm-wide politeness sees it now.
type HostActivity struct {
	Host       string `json:"host"`
	Queued     int64  `json:"queued"`     // assigned to a node, not started
	Processing int64  `json:"processing"` // running
	// LastStartedAt is the last job start on the host, for a host with a
	// minimum interval between starts (nil otherwise).
	LastStartedAt *time.Time `json:"last_started_at,omitempty"`
}

// MaxHostActivity bounds HostActivity's answer.
const MaxHostActivity = 500

// HostActivity lists the hosts that have jobs in flight (queued or
// processing) or a job start within the last recent, busiest first, at most
// MaxHostActivity. It reads the in-flight jobs (an index bounded by the
// farm's capacity) and the hosts rows, never the finished history.
func (q *Queue) HostActivity(ctx context.Context, recent time.Duration) ([]HostActivity, error) {
	rows, err := q.pool.Query(ctx, `
        WITH flight AS (
            SELECT host, count(*) FILTER (WHERE state = 'queued') AS queued,
                   count(*) FILTER (WHERE state = 'processing') AS processing
            FROM jobs WHERE state IN ('queued', 'processing') GROUP BY host
        )
        SELECT coalesce(f.host, h.host), coalesce(f.queued, 0), coalesce(f.processing, 0),
               CASE WHEN h.last_started_at > '-infinity' THEN h.last_started_at END
        FROM flight f
        FULL JOIN (SELECT host, last_started_at FROM hosts
                   WHERE last_started_at > coalesce($1::timestamptz, now()) - make_interval(secs => $2::float8)) h
          ON h.host = f.host
        ORDER BY coalesce(f.processing, 0) + coalesce(f.queued, 0) DESC, h.last_started_at DESC NULLS LAST, 1
        LIMIT $3`, q.now(), recent.Seconds(), MaxHostActivity)
	if err != nil {
		return nil, fmt.Errorf("host activity: %w", err)
	}
	defer rows.Close()
	out := []HostActivity{}
	for rows.Next() {
		var h HostActivity
		if err := rows.Scan(&h.Host, &h.Queued, &h.Processing, &h.LastStartedAt); err != nil {
			return nil, fmt.Errorf("host activity: %w", err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host activity: %w", err)
	}
	return out, nil
}

// deleteIdleHostsSQL deletes one batch of the hosts rows DeleteIdleHosts
// forgets, in key order after $3. A host's in-flight jobs are read once (the
// queued and processing jobs are bounded by the fleet's capacity), its
// pending ones through the pending index by host.
const deleteIdleHostsSQL = `
WITH active AS (
    SELECT DISTINCT host FROM jobs WHERE state IN ('queued', 'processing')
), doomed AS (
    SELECT h.host FROM hosts h
    WHERE h.host > $3 AND h.last_started_at < $1
      AND NOT EXISTS (SELECT 1 FROM active a WHERE a.host = h.host)
      AND NOT EXISTS (SELECT 1 FROM jobs p WHERE p.state = 'pending' AND p.host = h.host)
    ORDER BY h.host
    LIMIT $2
), gone AS (
    DELETE FROM hosts h USING doomed d WHERE h.host = d.host RETURNING h.host
)
SELECT count(*), coalesce(max(host), '') FROM gone`

// DeleteIdleHosts deletes the politeness rows (hosts) of hosts that started
// no job since cutoff and have none pending, queued or processing, batchSize
// rows per transaction, and returns how many it deleted. Such a row keeps
// only a last start older than any minimum interval; without pruning, a
// broad crawl leaves one row per host it ever visited. Each batch holds the
// assignment rounds' lock, so no round is between reading a host's row and
// assigning its jobs (whose starts Claim stamps only on a row that exists);
// the next round that assigns the host creates its row again.
func (q *Queue) DeleteIdleHosts(ctx context.Context, cutoff time.Time, batchSize int) (int64, error) {
	if batchSize <= 0 {
		batchSize = 1000
	}
	var total int64
	after := ""
	for {
		var n int64
		err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, lockAssignSQL, assignLockKey); err != nil {
				return err
			}
			return tx.QueryRow(ctx, deleteIdleHostsSQL, cutoff, batchSize, after).Scan(&n, &after)
		})
		if err != nil {
			return total, fmt.Errorf("delete idle hosts: %w", err)
		}
		total += n
		if n < int64(batchSize) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}
