package jobqueue

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestListenerProbesASilentConnection: a connection whose packets stop
// arriving, with no error (here a relay that drops what it is sent), is
// found out by the probe after ProbeIdle of silence and replaced, and the
// listener hears what is sent after it.
func TestListenerProbesASilentConnection(t *testing.T) {
	t.Parallel()
	_, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	cc := pool.Config().ConnConfig
	network, target := "tcp", net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	if len(cc.Host) > 0 && cc.Host[0] == '/' {
		network, target = "unix", cc.Host+"/.s.PGSQL."+strconv.Itoa(int(cc.Port))
	}
	relay := startRelay(t, network, target)
	cfg := pool.Config().Copy()
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = "127.0.0.1", relay.port(), nil, nil
	relayed, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relayed.Close)

	l := NewListener(relayed, ListenerConfig{Channels: []string{ChannelProducer}, RetryMin: 10 * time.Millisecond,
		ProbeIdle: 100 * time.Millisecond, ProbeTimeout: 2 * time.Second})
	startListener(t, l)
	before := relay.accepted()
	relay.silenceAll()
	testutil.Eventually(t, 30*time.Second, "a new connection after the silence", func() bool {
		return relay.accepted() > before && l.Listening()
	})
	// Heard on the new connection. A notification sent while a probe that
	// was merely slow replaced a connection in turn is lost, as the
	// reconnection announces: another is sent until one is heard.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		payload := "after-" + strconv.Itoa(i)
		if _, err := pool.Exec(ctx, "SELECT pg_notify($1, $2)", ChannelProducer, payload); err != nil {
			t.Fatal(err)
		}
		if heard(l, payload, time.Second) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing sent after the silence was heard in 30 s")
		}
	}
}

// heard reports whether l delivers payload within d.
func heard(l *Listener, payload string, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		n, err := l.Wait(ctx)
		if err != nil {
			return false
		}
		if n.Payload == payload {
			return true
		}
	}
}

// relay forwards TCP connections from a port of 127.0.0.1 to target until
// silenced: from then on the connections it holds drop what either end
// sends, without closing, as a network path that lost its state does;
// connections made after it forward again.
type relay struct {
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	flows  []*atomic.Bool // each held connection's silence
	conns  []net.Conn
	closed bool
	n      atomic.Int64
}

func startRelay(t *testing.T, network, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln}
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.n.Add(1)
			up, err := net.Dial(network, target)
			if err != nil {
				c.Close()
				continue
			}
			silent := new(atomic.Bool)
			r.mu.Lock()
			if r.closed {
				r.mu.Unlock()
				c.Close()
				up.Close()
				return
			}
			r.flows = append(r.flows, silent)
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			r.wg.Go(func() { pump(up, c, silent) })
			r.wg.Go(func() { pump(c, up, silent) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		r.closed = true
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *relay) port() uint16 { return uint16(r.ln.Addr().(*net.TCPAddr).Port) }

func (r *relay) accepted() int64 { return r.n.Load() }

// silenceAll silences the connections the relay holds now.
func (r *relay) silenceAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.flows {
		s.Store(true)
	}
}

// pump copies from src to dst until either fails, dropping what it reads
// once silent.
func pump(dst io.Writer, src io.Reader, silent *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !silent.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
