package jobqueue

// Retention: finished jobs and their results are deleted in batches once
// they are older than the producer's retention.

import (
	"context"
	"fmt"
	"time"
)

// deleteFinishedSQL deletes one batch of finished jobs and their results, and
// returns how many, with the blob keys their results held: the keys CTE
// reads the results in the statement's snapshot, before the delete.
const deleteFinishedSQL = `
WITH doomed AS (
    SELECT id FROM jobs
    WHERE state IN ('completed', 'failed', 'canceled') AND finished_at < $1
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), keys AS (
    SELECT b ->> 'key' AS key
    FROM results r JOIN doomed d ON r.job_id = d.id
    CROSS JOIN LATERAL jsonb_array_elements(coalesce(r.blobs, '[]'::jsonb)) b
), gone AS (
    DELETE FROM jobs j USING doomed d WHERE j.id = d.id RETURNING j.id
), results_gone AS (
    -- No foreign key cascades (migrations/*_results_without_fk.sql).
    DELETE FROM results r USING gone g WHERE r.job_id = g.id
)
SELECT (SELECT count(*) FROM gone), coalesce((SELECT array_agg(key) FROM keys), '{}')`

// DeleteFinishedBefore deletes completed, failed and canceled jobs (and their
// results) that finished before cutoff, batchSize rows per transaction so a
// large purge neither holds locks long nor bloats one transaction, and
// returns how many it deleted. After each batch is committed, blobsGone (if
// not nil) gets the blob-store keys its results held, for the caller to
// delete them too. Deleting a crawl's finished jobs also forgets their URLs,
// so a crawl still running could visit them again.
func (q *Queue) DeleteFinishedBefore(ctx context.Context, cutoff time.Time, batchSize int, blobsGone func(keys []string)) (int64, error) {
	if batchSize <= 0 {
		batchSize = 1000
	}
	var total int64
	for {
		var n int64
		var keys []string
		if err := q.pool.QueryRow(ctx, deleteFinishedSQL, cutoff, batchSize).Scan(&n, &keys); err != nil {
			return total, fmt.Errorf("delete finished jobs: %w", err)
		}
		total += n
		if len(keys) > 0 && blobsGone != nil {
			blobsGone(keys)
		}
		if n < int64(batchSize) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}
