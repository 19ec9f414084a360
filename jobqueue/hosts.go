package jobqueue

import (
	"context"
	"fmt"
	"time"
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
