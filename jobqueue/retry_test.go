package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestRetryDeadlocks(t *testing.T) {
	deadlock := fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "40P01"})
	serialization := &pgconn.PgError{Code: "40001"}
	unique := &pgconn.PgError{Code: "23505"}
	other := errors.New("connection refused")
	tests := []struct {
		name      string
		errs      []error // returned by successive runs; nil after the list ends
		wantRuns  int
		wantError error
	}{
		{"success at once", nil, 1, nil},
		{"one deadlock then success", []error{deadlock}, 2, nil},
		{"serialization failure is retried", []error{serialization, deadlock}, 3, nil},
		{"other PostgreSQL errors are not", []error{unique}, 1, unique},
		{"nor other errors", []error{other}, 1, other},
		{"gives up after maxTxAttempts", []error{deadlock, deadlock, deadlock, deadlock, deadlock, deadlock}, maxTxAttempts, deadlock},
	}
	q := New(nil, Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs := 0
			err := q.retryDeadlocks(context.Background(), "test", func() error {
				runs++
				if runs <= len(tt.errs) {
					return tt.errs[runs-1]
				}
				return nil
			})
			if runs != tt.wantRuns || !errors.Is(err, tt.wantError) {
				t.Fatalf("runs %d err %v, want %d runs err %v", runs, err, tt.wantRuns, tt.wantError)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	runs := 0
	_ = q.retryDeadlocks(ctx, "test", func() error { runs++; return deadlock })
	if runs != 1 {
		t.Fatalf("a canceled context still retried (%d runs)", runs)
	}
}
