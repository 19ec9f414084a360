package jobqueue

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.uber.org/zap"
)

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
