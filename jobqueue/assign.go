package jobqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// assignLockSQL serializes Assign calls for one node: the capacity check that
// follows, in its own statement and so its own snapshot, then sees every
// assignment committed before the lock was granted.
const assignLockSQL = `SELECT state FROM nodes WHERE id = $1 FOR UPDATE`

// assignSQL wakes the node on its own channel and names it on
// ChannelAssigned, as a round does (politeUpdateSQL).
var assignSQL = `
WITH node AS (
    SELECT n.capacity - (SELECT count(*) FROM jobs h
                         WHERE h.node_id = n.id AND h.state IN ('queued', 'processing')) AS free
    FROM nodes n
    WHERE n.id = $1 AND n.state = 'active'
), picked AS (
    SELECT j.id FROM jobs j
    WHERE j.state = 'pending' AND j.run_after <= coalesce($3::timestamptz, now())
    ORDER BY j.priority DESC, j.id
    LIMIT greatest(0, least($2::int, coalesce((SELECT free FROM node), 0)))
    FOR UPDATE SKIP LOCKED
), assigned AS (
    UPDATE jobs j SET state = 'queued', node_id = $1, queued_at = coalesce($3::timestamptz, now())
    FROM picked
    WHERE j.id = picked.id
    RETURNING j.id
` + pendingCountSQL("SELECT -1 AS d FROM assigned") + `
), woken AS (
    SELECT pg_notify($4, count(*)::text) FROM assigned HAVING count(*) > 0
), relay AS (
    SELECT pg_notify($5, $1) FROM assigned HAVING count(*) > 0
)
SELECT a.id, (SELECT count(*) FROM woken) + (SELECT count(*) FROM relay) FROM assigned a ORDER BY a.id`

// Assign moves up to n pending jobs (highest priority first, then oldest;
// none whose run_after is in the future) to the node, within its free
// capacity (capacity − queued − processing), and wakes the node. A node that
// is not active gets nothing; an unknown node is ErrNotFound. Concurrent
// calls for one node are serialized on its row.
func (q *Queue) Assign(ctx context.Context, nodeID string, n int) ([]int64, error) {
	if n <= 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	var nodeState string
	b.Queue(assignLockSQL, nodeID).QueryRow(func(row pgx.Row) error { return row.Scan(&nodeState) })
	var ids []int64
	b.Queue(assignSQL, nodeID, n, q.now(), NodeChannel(nodeID), ChannelAssigned).Query(func(rows pgx.Rows) error {
		var err error
		ids, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (int64, error) {
			var id, notified int64
			err := row.Scan(&id, &notified)
			return id, err
		})
		return err
	})
	if err := q.pool.SendBatch(ctx, b).Close(); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("assign to node %q: %w", nodeID, ErrNotFound)
		}
		return nil, fmt.Errorf("assign to node %q: %w", nodeID, err)
	}
	return ids, nil
}
