package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/backoff"
	"github.com/browserfarm/browserfarm/internal/ctxtime"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// Start in any order: on Kubernetes or Docker Compose the database, the
// producer and the consumers start together. A consumer waits for the
// database and then for the schema, which only the producer (or `farm
// migrate`) applies: consumers run with a database role that needs no DDL
// rights, and one process owns migrations. The producer waits for the
// database, then migrates under the advisory lock (jobqueue.Migrate).

// Retry pacing while waiting: quick at first (a database that is seconds away
// from ready), then at most every few seconds; a log line every 10 s.
const (
	startupRetryMin = 250 * time.Millisecond
	startupRetryMax = 5 * time.Second
	startupLogEvery = 10 * time.Second
)

// startupOptions bound the wait for the database at start.
type startupOptions struct {
	wait time.Duration
}

func (o *startupOptions) register(fs *flagSet, what string) {
	fs.nonNegative(&o.wait, "database-wait", 2*time.Minute,
		"at start, how long to wait for the database"+what+" before giving up (0: fail at once)")
}

// waitForPool connects to the database, retrying until it answers or the
// bound passes. A malformed URL fails at once.
func (o *startupOptions) waitForPool(ctx context.Context, db *dbOptions, maxConns int32, log *zap.Logger) (*pgxpool.Pool, error) {
	var pool *pgxpool.Pool
	err := o.retry(ctx, log, "database", "", func() (bool, error) {
		var err error
		pool, err = db.pool(ctx, maxConns)
		var ue *usageError
		return errors.As(err, &ue), err
	})
	return pool, err
}

// waitForSchema returns once the schema is at least at the version this build
// expects, waiting for the producer or `farm migrate` to apply it.
func (o *startupOptions) waitForSchema(ctx context.Context, pool *pgxpool.Pool, log *zap.Logger) error {
	return o.retry(ctx, log, "database schema", "start the producer (it migrates) or run `farm migrate`", func() (bool, error) {
		applied, expected, err := jobqueue.SchemaVersion(ctx, pool)
		switch {
		case err != nil:
			return false, err
		case applied < expected:
			return false, fmt.Errorf("schema at version %d, this build needs %d", applied, expected)
		case applied > expected:
			log.Warn("the database schema is newer than this build (a rolling upgrade?)",
				zap.Int32("schema_version", applied), zap.Int32("expected", expected))
		}
		return false, nil
	})
}

// retry calls try until it succeeds, says its error is final, ctx ends (a
// *stoppedWaiting) or --database-wait passes, logging what it waits for
// every startupLogEvery.
func (o *startupOptions) retry(ctx context.Context, log *zap.Logger, what, hint string, try func() (final bool, err error)) error {
	start := time.Now()
	var lastLog time.Time
	for attempt := 0; ; attempt++ {
		final, err := try()
		if err == nil {
			if attempt > 0 {
				log.Info(what+" is ready", zap.Duration("waited", time.Since(start).Round(time.Millisecond)))
			}
			return nil
		}
		if ctx.Err() != nil {
			return &stoppedWaiting{what: what, waited: time.Since(start), stop: ctx.Err(), err: err}
		}
		if final {
			return err
		}
		if time.Since(start) >= o.wait {
			if hint != "" {
				return fmt.Errorf("gave up waiting for the %s after %s (--database-wait; %s): %w", what, o.wait, hint, err)
			}
			return fmt.Errorf("gave up waiting for the %s after %s (--database-wait): %w", what, o.wait, err)
		}
		if time.Since(lastLog) >= startupLogEvery {
			msg := "waiting for the " + what
			if hint != "" {
				msg += ": " + hint
			}
			log.Warn(msg, zap.Error(err), zap.Duration("waited", time.Since(start).Round(time.Second)),
				zap.Duration("database_wait", o.wait))
			lastLog = time.Now()
		}
		if !ctxtime.Sleep(ctx, backoff.Jitter(backoff.Doubling(attempt, startupRetryMin, startupRetryMax))) {
			return &stoppedWaiting{what: what, waited: time.Since(start), stop: ctx.Err(), err: err}
		}
	}
}

// stoppedWaiting is a wait at start that a stop (SIGTERM/SIGINT) ended.
type stoppedWaiting struct {
	what   string
	waited time.Duration
	stop   error // ctx.Err()
	err    error // the last attempt's
}

func (e *stoppedWaiting) Error() string { return "stopped while waiting for the " + e.what }

func (e *stoppedWaiting) Unwrap() []error { return []error{e.stop, e.err} }

// stoppedAtStart maps an error of the start (the waits for the database and
// its schema, the migration, what opens before the process serves) that a
// stop caused onto nil, logged: a stop exits 0 however early it comes
// (README, exit codes), so that systemctl stop during a database outage
// leaves no failed unit.
func stoppedAtStart(ctx context.Context, err error, log *zap.Logger) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	var sw *stoppedWaiting
	if errors.As(err, &sw) {
		log.Info(sw.Error(), zap.Duration("waited", sw.waited.Round(time.Millisecond)), zap.NamedError("last_error", sw.err))
	} else {
		log.Info("stopped while starting", zap.NamedError("cause", err))
	}
	return nil
}
