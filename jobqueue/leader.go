package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"github.com/browserfarm/browserfarm/internal/outage"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// DefaultLeaderKey is the advisory lock that makes one producer the leader.
const DefaultLeaderKey int64 = 0x62666c6561646572 // "bfleader"

// ElectorConfig configures leader election. Zero values take the defaults.
type ElectorConfig struct {
	// Key is the advisory lock key. Default: DefaultLeaderKey.
	Key int64
	// RetryInterval is how often a standby tries to take the lock, and so
	// bounds how long a dead leader goes unreplaced. Default: 1 s.
	RetryInterval time.Duration
	// CheckInterval is how often the leader checks that its lock connection
	// is alive. Default: 1 s.
	CheckInterval time.Duration
	Logger        *zap.Logger
}

// Elector makes at most one of several processes the leader, with a
// session-level advisory lock held on a dedicated connection: when the
// leader dies, PostgreSQL drops the session and the lock, and a standby
// takes it on its next try. A leader that loses its connection stops leading
// at once (its context is canceled) and campaigns again.
type Elector struct {
	pool *pgxpool.Pool
	cfg  ElectorConfig
	log  *zap.Logger
	// term is the lock session of the current term, nil while not leading.
	term atomic.Pointer[lockSession]
}

// lockSession names the server session holding the lock: its process id
// and start time (a later session may reuse the id).
type lockSession struct {
	pid     uint32
	started time.Time
}

// ErrNotLeader is Confirm's answer for a process that does not lead.
var ErrNotLeader = errors.New("not the leader")

// NewElector returns an Elector campaigning on pool. A negative interval
// is a programming error: it panics naming the field.
func NewElector(pool *pgxpool.Pool, cfg ElectorConfig) *Elector {
	if cfg.Key == 0 {
		cfg.Key = DefaultLeaderKey
	}
	mustResolve("ElectorConfig",
		cfgrule.Resolve("RetryInterval", &cfg.RetryInterval, time.Second, false),
		cfgrule.Resolve("CheckInterval", &cfg.CheckInterval, time.Second, false),
	)
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Elector{pool: pool, cfg: cfg, log: log}
}

// IsLeader reports whether this process leads now.
func (e *Elector) IsLeader() bool { return e.term.Load() != nil }

// Confirm asks the database whether this process's lock session still
// holds the leader lock. IsLeader learns of a lost lock only at the next
// check of the lock connection (CheckInterval, then the ping's timeout),
// and a standby may lead before that: after a failover to a replica, or
// once the server ended the lock session. An action that two leaders must
// not take at once (the autoscaler's call to the orchestrator) confirms
// first; what is left is the window of the action itself. It asks on a
// pooled connection: the lock's belongs to the leader's check. The error
// wraps ErrNotLeader when the lock is not held.
func (e *Elector) Confirm(ctx context.Context) error {
	t := e.term.Load()
	if t == nil {
		return ErrNotLeader
	}
	var held bool
	if err := e.pool.QueryRow(ctx, confirmSQL, int64(t.pid), t.started, e.cfg.Key).Scan(&held); err != nil {
		return fmt.Errorf("confirm leadership: %w", err)
	}
	if !held {
		return fmt.Errorf("%w: the lock session (server process %d) no longer holds the leader lock", ErrNotLeader, t.pid)
	}
	return nil
}

// confirmSQL: a bigint advisory lock is listed with its key's high half in
// classid, its low half in objid, and objsubid 1.
const confirmSQL = `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.pid = $1 AND a.backend_start = $2
      AND ((l.classid::int8 << 32) | l.objid::int8) = $3)`

// LeaderHeld reports whether any session holds the leader lock key in
// the queue's database: whether a producer leads, for farm status, which
// runs none.
func (q *Queue) LeaderHeld(ctx context.Context, key int64) (bool, error) {
	var held bool
	if err := q.pool.QueryRow(ctx, leaderHeldSQL, key).Scan(&held); err != nil {
		return false, fmt.Errorf("is there a leader: %w", err)
	}
	return held, nil
}

// leaderHeldSQL is confirmSQL for any session.
const leaderHeldSQL = `SELECT EXISTS (SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND ((l.classid::int8 << 32) | l.objid::int8) = $1)`

// Run campaigns until ctx ends. Each time it wins, it runs lead with a
// context canceled when leadership is lost or ctx ends, and waits for lead to
// return before campaigning again. It returns nil when ctx ends.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context)) error {
	var out outage.Tracker // one line when the failures start, then a minute
	for {
		conn, started, err := e.tryLock(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if out.Fail(time.Now()) != outage.Nothing {
				e.log.Warn("leader election: cannot reach the database", zap.Error(err), zap.Int64("failures", out.Failures()))
			}
		case err == nil:
			if failures, lasted, ended := out.Succeed(time.Now()); ended {
				e.log.Info("leader election: the database answers again", zap.Int64("failures", failures), zap.Duration("failed_for", lasted))
			}
		}
		if conn != nil {
			e.hold(ctx, conn, started, lead)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(e.cfg.RetryInterval):
		}
	}
}

// tryLock returns a dedicated connection holding the lock, or nil, and when
// its server session started. The try runs on a pooled connection, which
// goes back to the pool when the lock is taken elsewhere: a standby costs no
// new server session per try.
func (e *Elector) tryLock(ctx context.Context) (*pgx.Conn, time.Time, error) {
	pc, err := e.pool.Acquire(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	var got bool
	if err := pc.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", e.cfg.Key).Scan(&got); err != nil {
		// The session's state is unknown: it must not go back to the pool.
		_ = pc.Hijack().Close(context.WithoutCancel(ctx))
		return nil, time.Time{}, fmt.Errorf("try leader lock: %w", err)
	}
	if !got {
		pc.Release()
		return nil, time.Time{}, nil
	}
	// The lock belongs to the session: keep this connection out of the pool
	// for as long as it leads, and close it (dropping the lock) when done.
	conn := pc.Hijack()
	// The server drops the session, and the lock with it, once this end
	// stops answering: without keepalives a connection whose network path
	// died would hold the lock until the operating system gave up on it
	// (hours), and no producer would lead meanwhile. (Ignored on a Unix
	// socket, where there is no path to die.)
	var started time.Time
	if err := conn.QueryRow(ctx, leaderKeepaliveSQL).Scan(&started); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, time.Time{}, fmt.Errorf("leader lock session keepalives: %w", err)
	}
	return conn, started, nil
}

// leaderKeepaliveSQL has the server probe the leader's lock session after
// 10 s of silence, every 5 s, 3 times, and give up on data unacknowledged
// for 30 s: a dead leader's lock is free within about half a minute. It
// returns when the session started, which tells it from a later session of
// the same server process id.
const leaderKeepaliveSQL = `SELECT backend_start FROM pg_stat_activity, (SELECT
    set_config('tcp_keepalives_idle', '10', false), set_config('tcp_keepalives_interval', '5', false),
    set_config('tcp_keepalives_count', '3', false), set_config('tcp_user_timeout', '30000', false)) s
WHERE pid = pg_backend_pid()`

// hold leads until the lock connection fails, lead returns on its own (a
// leader that stopped leading must let a standby take over), or ctx ends.
func (e *Elector) hold(ctx context.Context, conn *pgx.Conn, started time.Time, lead func(context.Context)) {
	leadCtx, stop := context.WithCancel(ctx)
	leadDone := make(chan struct{})
	// The lock session, for Confirm and to end from another connection if
	// this one stops answering (see below).
	sess := &lockSession{pid: conn.PgConn().PID(), started: started}
	lost := false
	e.term.Store(sess)
	e.log.Info("became leader")
	go func() {
		defer close(leadDone)
		lead(leadCtx)
	}()
	tick := time.NewTicker(e.cfg.CheckInterval)
	defer tick.Stop()
	for leadCtx.Err() == nil {
		select {
		case <-leadCtx.Done():
		case <-leadDone:
			if ctx.Err() == nil {
				e.log.Warn("leader work ended on its own; stepping down")
			}
			stop()
		case <-tick.C:
			pctx, cancel := context.WithTimeout(leadCtx, 2*e.cfg.CheckInterval+time.Second)
			err := conn.Ping(pctx)
			cancel()
			if err != nil && leadCtx.Err() == nil {
				e.log.Error("lost the leader lock connection; stepping down", zap.Error(err))
				lost = true
				stop()
			}
		}
	}
	e.term.Store(nil)
	stop()
	<-leadDone
	// Closing the session releases the lock; an explicit unlock first makes
	// a clean hand-over immediate even if the close is slow.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = conn.Exec(cctx, "SELECT pg_advisory_unlock($1)", e.cfg.Key)
	_ = conn.Close(cctx)
	if lost {
		// The unlock and the close may not have reached the server: a
		// half-open session keeps the lock until the keepalives give up.
		// Another connection ends it now, if the database is reachable.
		// By process id and start time: the id may belong to another
		// session by now (a standby's, now leading).
		if _, err := e.pool.Exec(cctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE pid = $1 AND backend_start = $2`, sess.pid, sess.started); err != nil {
			e.log.Warn("could not end the lost leader lock session; the server's TCP keepalives will end it", zap.Uint32("pid", sess.pid), zap.Error(err))
		}
	}
	e.log.Info("stopped leading")
}
