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

const assignSQL = `
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
), woken AS (
    SELECT pg_notify($4, count(*)::text) FROM assigned HAVING count(*) > 0
)
SELECT a.id, (SELECT count(*) FROM woken) FROM assigned a ORDER BY a.id`

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
	b.Queue(assignSQL, nodeID, n, q.now(), NodeChannel(nodeID)).Query(func(rows pgx.Rows) error {
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

// lockActiveNodesSQL locks every active node row in id order (the order every
// multi-node locker uses, so they cannot deadlock), for the same reason as
// assignLockSQL.
const lockActiveNodesSQL = `SELECT id FROM nodes WHERE state = 'active' ORDER BY id FOR UPDATE`

// assignFreeSQL deals pending jobs to the free slots of all active nodes:
// each node's free slots are numbered by the load the node would have after
// taking them, so the least-loaded nodes are served first and a short supply
// is spread evenly.
const assignFreeSQL = `
WITH free AS (
    SELECT n.id, n.capacity, n.capacity - count(h.id) AS free
    FROM nodes n
    LEFT JOIN jobs h ON h.node_id = n.id AND h.state IN ('queued', 'processing')
    WHERE n.state = 'active'
    GROUP BY n.id, n.capacity
    HAVING n.capacity - count(h.id) > 0
), slots AS (
    SELECT f.id AS node_id,
           row_number() OVER (ORDER BY (f.capacity - f.free + s.k)::float8 / f.capacity, f.id) AS slot
    FROM free f, generate_series(1, f.free) AS s(k)
), picked AS (
    SELECT p.id, row_number() OVER (ORDER BY p.priority DESC, p.id) AS slot
    FROM (SELECT j.id, j.priority FROM jobs j
          WHERE j.state = 'pending' AND j.run_after <= coalesce($2::timestamptz, now())
          ORDER BY j.priority DESC, j.id
          LIMIT least($1::int, (SELECT coalesce(sum(free), 0) FROM free))
          FOR UPDATE SKIP LOCKED) p
), assigned AS (
    UPDATE jobs j SET state = 'queued', node_id = s.node_id, queued_at = coalesce($2::timestamptz, now())
    FROM picked p JOIN slots s ON s.slot = p.slot
    WHERE j.id = p.id
    RETURNING j.id, j.node_id
), woken AS (
    SELECT pg_notify($3 || a.node_id, count(*)::text) FROM assigned a GROUP BY a.node_id
)
SELECT a.node_id, a.id, (SELECT count(*) FROM woken) FROM assigned a ORDER BY a.node_id, a.id`

// AssignFree fills the free capacity of every active node with pending jobs
// (priority, then age; none in backoff), at most limit jobs in all, the
// least-loaded nodes first, and wakes each node that got work. It returns the
// job ids per node. One round trip, whatever the number of nodes.
func (q *Queue) AssignFree(ctx context.Context, limit int) (map[string][]int64, error) {
	if limit <= 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	b.Queue(lockActiveNodesSQL)
	out := make(map[string][]int64)
	b.Queue(assignFreeSQL, limit, q.now(), NodeChannelPrefix).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var node string
			var id, notified int64
			if err := rows.Scan(&node, &id, &notified); err != nil {
				return err
			}
			out[node] = append(out[node], id)
		}
		return rows.Err()
	})
	if err := q.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("assign free slots: %w", err)
	}
	return out, nil
}
