package jobqueue

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/browserfarm/browserfarm/internal/ctxtime"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// versionTable records the applied schema version (tern's bookkeeping).
const versionTable = "public.browserfarm_schema_version"

// undefinedTable is PostgreSQL's SQLSTATE for a relation that does not exist.
const undefinedTable = "42P01"

// migrateLockKey is the advisory lock that serializes Migrate across
// processes. tern takes its own lock per step too; holding ours for the whole
// run also covers creating the version table, so two processes starting at
// once cannot both decide the schema is missing.
const migrateLockKey int64 = 0x62666d6967726174 // "bfmigrat"

// Migrate brings the database schema up to date. It is idempotent and safe to
// call from several processes at once: the first applies the missing versions
// under a PostgreSQL advisory lock while the others wait, then find nothing to do.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	if err := takeMigrateLock(ctx, conn); err != nil {
		return err
	}
	defer func() {
		// Unlock on a context of its own: when ctx is already canceled the
		// session lock must still go, or the pooled connection keeps it.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockReleaseTimeout)
		defer cancel()
		if _, uerr := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", migrateLockKey); uerr != nil {
			// A connection that may still hold the lock must not go back to the pool.
			_ = conn.Hijack().Close(uctx)
		}
	}()

	m, err := migrate.NewMigrator(ctx, conn.Conn(), versionTable)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := m.LoadMigrations(sub); err != nil {
		return fmt.Errorf("migrate: load embedded migrations: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: apply: %w", err)
	}
	return nil
}

// migrateLockPoll is how often a process waiting for another's migration
// asks for the lock again.
const migrateLockPoll = 200 * time.Millisecond

// takeMigrateLock takes the migration lock, asking for it again every
// migrateLockPoll instead of blocking in pg_advisory_lock: a session
// blocked in a statement holds a snapshot, and a migration that builds an
// index concurrently (018) waits for every older snapshot to go — the
// waiter's too, which waits for the lock: a deadlock.
func takeMigrateLock(ctx context.Context, conn *pgxpool.Conn) error {
	for {
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", migrateLockKey).Scan(&got); err != nil {
			return fmt.Errorf("migrate: take advisory lock: %w", err)
		}
		if got {
			return nil
		}
		if !ctxtime.Sleep(ctx, migrateLockPoll) {
			return fmt.Errorf("migrate: waiting for another process's migration: %w", context.Cause(ctx))
		}
	}
}

// SchemaVersion reports the applied schema version and the version this build
// expects (the number of embedded migrations). A database no migration has
// touched yet is at version 0.
func SchemaVersion(ctx context.Context, pool *pgxpool.Pool) (applied, expected int32, err error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return 0, 0, err
	}
	expected = int32(len(names))
	err = pool.QueryRow(ctx, "SELECT version FROM "+versionTable).Scan(&applied)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == undefinedTable {
		return 0, expected, nil
	}
	if err != nil {
		return 0, expected, fmt.Errorf("schema version: %w", err)
	}
	return applied, expected, nil
}
