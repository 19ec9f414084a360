package jobqueue

import (
	"context"
	"fmt"
)

// StorageSize is how much disk the queue's data takes, TOAST and indexes
// included.
type StorageSize struct {
	Jobs     int64 `json:"jobs_bytes"`
	Results  int64 `json:"results_bytes"`
	Database int64 `json:"database_bytes"`
}

// Storage measures the queue's tables and its whole database.
func (q *Queue) Storage(ctx context.Context) (StorageSize, error) {
	var s StorageSize
	err := q.pool.QueryRow(ctx, `SELECT pg_total_relation_size('jobs'), pg_total_relation_size('results'),
        pg_database_size(current_database())`).Scan(&s.Jobs, &s.Results, &s.Database)
	if err != nil {
		return s, fmt.Errorf("storage size: %w", err)
	}
	return s, nil
}
