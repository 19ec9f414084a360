package jobqueue

import (
	"context"
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/browserfarm/browserfarm/internal/pgtest"
)

// migrateBefore applies the embedded migrations up to, not including, the
// one whose file name ends in suffix (found by name: numbers change when
// branches merge).
func migrateBefore(t *testing.T, pool *pgxpool.Pool, suffix string) {
	t.Helper()
	ctx := context.Background()
	names, err := fs.Glob(migrationFiles, "migrations/*"+suffix)
	if err != nil || len(names) != 1 {
		t.Fatalf("migration *%s: %v, %v", suffix, names, err)
	}
	num, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(names[0], "migrations/"), "_", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	m, err := migrate.NewMigrator(ctx, conn.Conn(), versionTable)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(sub); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, int32(num-1)); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeToCountsInStatements upgrades a database that holds jobs in
// every state, their counts kept by the UPDATE trigger and results tied to
// them by the foreign key, to the schema where the statements count final
// states and retention deletes results itself; the counts stay exact through
// the upgrade and every change of state after it, and the purge leaves no
// result behind, the upgraded ones included.
func TestUpgradeToCountsInStatements(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	migrateBefore(t, pool, "_count_in_statements.sql")
	q := New(pool, Config{Now: clock.Now, Lease: 10 * time.Second})

	// Before the upgrade: jobs in every state, the final ones (and their
	// results) written as the old schema saw them, by plain SQL.
	ids := mustEnqueue(t, q, pageSpecs(12, "u.test")...)
	// The node as that schema's Register left it (today's Register writes
	// columns of later migrations).
	for _, sql := range []string{
		`INSERT INTO nodes (id, hostname, capacity, state, incarnation) VALUES ('n1', 'test', 8, 'active', 1)`,
		`INSERT INTO node_counters (node_id) VALUES ('n1')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	for _, sql := range []string{
		`UPDATE jobs SET state = 'completed', node_id = 'n1', finished_at = $2 WHERE id = ANY($1)`,
		`UPDATE jobs SET state = 'failed', node_id = 'n1', finished_at = $2, error_class = 'http' WHERE id = ANY($1)`,
		`UPDATE jobs SET state = 'canceled', finished_at = $2 WHERE id = ANY($1)`,
	} {
		if _, err := pool.Exec(ctx, sql, ids[:2], clock.Now()); err != nil {
			t.Fatal(err)
		}
		ids = ids[2:]
		clock.Advance(time.Minute)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO results (job_id, node_id) SELECT id, 'n1' FROM jobs WHERE state IN ('completed', 'failed')`); err != nil {
		t.Fatal(err)
	}

	if err := Migrate(ctx, pool); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	checkCounts(t, q, pool, "after the upgrade")
	if n := countRows(t, pool, `SELECT count(*) FROM job_counts WHERE state IN ('queued', 'processing')`); n != 0 {
		t.Errorf("job_counts keeps %d rows of live states after the upgrade", n)
	}

	// After it: every change of state the statements count.
	if _, err := q.Assign(ctx, "n1", 6); err != nil {
		t.Fatal(err)
	}
	jobs, err := q.Claim(ctx, "n1", 6)
	if err != nil || len(jobs) != 6 {
		t.Fatalf("claim = %d, %v", len(jobs), err)
	}
	checkCounts(t, q, pool, "claim")
	if _, err := q.CompleteMany(ctx, []Completion{{JobID: jobs[0].ID, NodeID: "n1"}, {JobID: jobs[1].ID, NodeID: "n1"}}); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, q, pool, "complete")
	clock.Advance(time.Minute)
	if _, err := q.Fail(ctx, jobs[2].ID, "n1", "gone", "http", false); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, q, pool, "fail")
	if n, err := q.Retry(ctx, jobs[2].ID, ids[0]); err != nil || n != 1 {
		t.Fatalf("retry = %d, %v", n, err)
	}
	checkCounts(t, q, pool, "retry")
	// The node restarts while it runs the other three: charged an attempt
	// each, and with max_attempts 1 they fail.
	if _, err := pool.Exec(ctx, `UPDATE jobs SET max_attempts = 1 WHERE id = ANY($1)`, []int64{jobs[3].ID, jobs[4].ID}); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, q, pool, "max attempts lowered")
	mustRegister(t, q, "n1", 8)
	checkCounts(t, q, pool, "node restarted")
	if _, err := q.Cancel(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, q, pool, "cancel")

	clock.Advance(time.Hour)
	if n, err := q.DeleteFinishedBefore(ctx, clock.Now(), 3, nil); err != nil || n == 0 {
		t.Fatalf("purge = %d, %v", n, err)
	}
	checkCounts(t, q, pool, "purge")
	if n := countRows(t, pool, `SELECT count(*) FROM results r WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job_id)`); n != 0 {
		t.Errorf("%d results outlived their jobs", n)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM results`); n != 0 {
		t.Errorf("%d results left after everything finished was purged", n)
	}
}
