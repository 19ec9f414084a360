package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/browserfarm/browserfarm/internal/backoff"
	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"github.com/browserfarm/browserfarm/internal/ctxtime"
	"github.com/browserfarm/browserfarm/internal/outage"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// Notification is one NOTIFY received by a Listener.
type Notification struct {
	Channel string
	Payload string
}

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// Channels to LISTEN on (ChannelProducer, NodeChannel(id), …). Required.
	Channels []string
	// Logger; default zap.NewNop().
	Logger *zap.Logger
	// Buffer is how many notifications may wait for the reader; beyond it
	// new ones are dropped (the waiting ones already wake the reader).
	// Default 64.
	Buffer int
	// Deliver, if set, receives every notification on the listener's own
	// goroutine instead of C, none dropped: for a reader to whom each
	// notification says something of its own (ChannelAssigned names the
	// nodes to wake). It must not block.
	Deliver func(Notification)
	// RetryMin and RetryMax bound the pause between reconnection attempts,
	// which doubles from RetryMin. Defaults: 100 ms and 5 s.
	RetryMin, RetryMax time.Duration
	// ProbeIdle is how long the listener waits for a notification before
	// it asks its connection to answer a query, and ProbeTimeout how long
	// that answer may take before the connection is given up for a new
	// one. A connection cut without a word (a NAT or a firewall that forgot
	// an idle flow, a server host gone) gives a reader no error until TCP's
	// keepalive, two hours by default, and the node would hear nothing
	// meanwhile, waking only at its fallback poll. Defaults: 30 s and 10 s.
	ProbeIdle, ProbeTimeout time.Duration
}

// Listener owns one dedicated connection, taken out of the pool, that
// LISTENs on a set of channels, and delivers what arrives on C (or through
// Wait). When the connection breaks it reconnects with backoff and then
// delivers a PayloadReconnected notification, since anything sent meanwhile
// was lost. Run drives it; it stops and closes its connection when Run's
// context ends.
type Listener struct {
	pool     *pgxpool.Pool
	cfg      ListenerConfig
	log      *zap.Logger
	c        chan Notification
	ready    chan struct{}
	readyOne sync.Once
	// listening is whether a connection is LISTENing now.
	listening atomic.Bool
}

// NewListener returns a Listener; call Run to start it. A negative field
// is a programming error: it panics naming the field.
func NewListener(pool *pgxpool.Pool, cfg ListenerConfig) *Listener {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	mustResolve("ListenerConfig",
		cfgrule.Resolve("Buffer", &cfg.Buffer, 64, false),
		cfgrule.Resolve("RetryMin", &cfg.RetryMin, 100*time.Millisecond, false),
		cfgrule.Resolve("RetryMax", &cfg.RetryMax, max(5*time.Second, cfg.RetryMin), false),
		cfgrule.Resolve("ProbeIdle", &cfg.ProbeIdle, 30*time.Second, false),
		cfgrule.Resolve("ProbeTimeout", &cfg.ProbeTimeout, 10*time.Second, false),
	)
	// A ceiling under the floor would make the backoff shrink.
	cfg.RetryMax = max(cfg.RetryMax, cfg.RetryMin)
	return &Listener{
		pool:  pool,
		cfg:   cfg,
		log:   cfg.Logger,
		c:     make(chan Notification, cfg.Buffer),
		ready: make(chan struct{}),
	}
}

// C delivers the notifications (none with ListenerConfig.Deliver).
func (l *Listener) C() <-chan Notification { return l.c }

// Ready is closed once the Listener first listens on all its channels;
// notifications sent before that are not seen.
func (l *Listener) Ready() <-chan struct{} { return l.ready }

// Listening reports whether the listener holds a LISTENing connection now:
// false before Run first listens and while it reconnects, when what is
// sent on its channels is not heard.
func (l *Listener) Listening() bool { return l.listening.Load() }

// Wait returns the next notification, or ctx's error.
func (l *Listener) Wait(ctx context.Context) (Notification, error) {
	select {
	case n := <-l.c:
		return n, nil
	case <-ctx.Done():
		return Notification{}, ctx.Err()
	}
}

// Run listens until ctx ends, reconnecting whenever the connection is lost.
// It returns nil after ctx ends, or an error when the configuration is
// unusable (no channels).
func (l *Listener) Run(ctx context.Context) error {
	if len(l.cfg.Channels) == 0 {
		return errors.New("listener: no channels")
	}
	pause := l.cfg.RetryMin
	connected := false
	var out outage.Tracker // one line when the failures start, then a minute
	for {
		conn, err := l.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			retryIn := backoff.Jitter(pause)
			if out.Fail(time.Now()) != outage.Nothing {
				l.log.Warn("listener: cannot listen; retrying", zap.Error(err), zap.Duration("in", retryIn),
					zap.Int64("failures", out.Failures()))
			}
			if !ctxtime.Sleep(ctx, retryIn) {
				return nil
			}
			pause = min(2*pause, l.cfg.RetryMax)
			continue
		}
		pause = l.cfg.RetryMin
		if failures, lasted, ended := out.Succeed(time.Now()); ended {
			l.log.Info("listener: the database answers again", zap.Int64("failures", failures), zap.Duration("failed_for", lasted))
		}
		// Listening before the reconnection is announced: whoever acts on
		// the announcement (the producer: hearsAssigned) sees it listen.
		l.listening.Store(true)
		if connected {
			l.deliver(Notification{Payload: PayloadReconnected})
			l.log.Info("listener: reconnected", zap.Strings("channels", l.cfg.Channels))
		}
		connected = true
		l.readyOne.Do(func() { close(l.ready) })

		err = l.receive(ctx, conn)
		l.listening.Store(false)
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockReleaseTimeout)
		_ = conn.Close(closeCtx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		l.log.Warn("listener: connection lost; reconnecting", zap.Error(err))
	}
}

// connect takes a connection out of the pool for good and LISTENs on it.
func (l *Listener) connect(ctx context.Context) (*pgx.Conn, error) {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire: %w", err)
	}
	conn := pc.Hijack()
	for _, ch := range l.cfg.Channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockReleaseTimeout)
			_ = conn.Close(closeCtx)
			cancel()
			return nil, fmt.Errorf("listen %s: %w", ch, err)
		}
	}
	return conn, nil
}

// receive delivers what conn hears until it fails, and probes it after
// every ProbeIdle of silence. The wait's deadline leaves the connection
// usable (pgconn closes it on any read error but a timeout); notifications
// that arrive during the probe are kept by pgx for the next wait.
func (l *Listener) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, l.cfg.ProbeIdle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err == nil {
			l.deliver(Notification{Channel: n.Channel, Payload: n.Payload})
			continue
		}
		if ctx.Err() != nil || !pgconn.Timeout(err) {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, l.cfg.ProbeTimeout)
		_, err = conn.Exec(pctx, "SELECT 1")
		cancel()
		if err != nil {
			return fmt.Errorf("no answer to a probe after %s without a notification: %w", l.cfg.ProbeIdle, err)
		}
	}
}

func (l *Listener) deliver(n Notification) {
	if l.cfg.Deliver != nil {
		l.cfg.Deliver(n)
		return
	}
	select {
	case l.c <- n:
	default:
		// The reader is behind; the notifications it has not read yet will
		// wake it, and it re-reads the queue anyway.
	}
}
