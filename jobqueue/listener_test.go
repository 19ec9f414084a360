package jobqueue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

func TestListenerWakeUpsAndReconnect(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)

	l := NewListener(pool, ListenerConfig{Channels: []string{ChannelProducer, NodeChannel("n1")}, RetryMin: 10 * time.Millisecond})
	if l.Listening() {
		t.Error("Listening() = true before Run")
	}
	startListener(t, l)
	if !l.Listening() {
		t.Error("Listening() = false once ready")
	}
	expect := func(channel, payload string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		n, err := l.Wait(wctx)
		if err != nil {
			t.Fatalf("waiting for %s %q: %v", channel, payload, err)
		}
		if n.Channel != channel || n.Payload != payload {
			t.Fatalf("got %s %q, want %s %q", n.Channel, n.Payload, channel, payload)
		}
	}

	ids := mustEnqueue(t, q, pageSpecs(4, "l.test")...)
	expect(ChannelProducer, PayloadSubmitted)
	if got, err := q.Assign(ctx, "n1", 2); err != nil || len(got) != 2 {
		t.Fatalf("assign %v, %v", got, err)
	}
	expect(NodeChannel("n1"), "2")
	if _, err := assignRound(ctx, q, 10); err != nil {
		t.Fatal(err)
	}
	expect(NodeChannel("n1"), "2")
	if _, err := q.Claim(ctx, "n1", 6); err != nil {
		t.Fatal(err)
	}
	// A completion with no job pending wakes nobody: the next notification
	// is a marker sent after it committed.
	if _, err := q.Complete(ctx, ids[3], "n1", Result{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "SELECT pg_notify($1, 'marker')", ChannelProducer); err != nil {
		t.Fatal(err)
	}
	expect(ChannelProducer, "marker")
	// With a job pending, it wakes the producer.
	mustEnqueue(t, q, pageSpecs(1, "l.test")...)
	expect(ChannelProducer, PayloadSubmitted)
	if _, err := q.Complete(ctx, ids[0], "n1", Result{}); err != nil {
		t.Fatal(err)
	}
	expect(ChannelProducer, PayloadSlots)
	if _, err := q.Fail(ctx, ids[1], "n1", "x", "x", true); err != nil {
		t.Fatal(err)
	}
	expect(ChannelProducer, PayloadSlots)
	if _, err := q.Cancel(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
	expect(ChannelProducer, PayloadSlots)

	// Kill the listening backend: the listener reconnects, says so, and hears again.
	var killed int
	err := pool.QueryRow(ctx, `
        SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listening backends (%v), want 1", killed, err)
	}
	expect("", PayloadReconnected)
	if !l.Listening() {
		t.Error("Listening() = false after the reconnection")
	}
	mustEnqueue(t, q, pageSpecs(1, "l.test")...)
	expect(ChannelProducer, PayloadSubmitted)
}

func TestListenerNeedsChannels(t *testing.T) {
	t.Parallel()
	l := NewListener(nil, ListenerConfig{})
	if err := l.Run(context.Background()); err == nil {
		t.Fatal("Run without channels returned nil")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a canceled context = %v", err)
	}
}

// TestListenerDeliverDropsNothing: with Deliver, a burst far over the
// buffer arrives whole; through C it would be cut to the buffer.
func TestListenerDeliverDropsNothing(t *testing.T) {
	t.Parallel()
	_, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	var mu sync.Mutex
	got := map[string]bool{}
	l := NewListener(pool, ListenerConfig{Channels: []string{ChannelAssigned}, Buffer: 1, Deliver: func(n Notification) {
		mu.Lock()
		got[n.Payload] = true
		mu.Unlock()
	}})
	startListener(t, l)
	const burst = 200
	if _, err := pool.Exec(ctx, "SELECT pg_notify($1, i::text) FROM generate_series(1, $2) i", ChannelAssigned, burst); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the whole burst delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == burst
	})
}

// startListener runs l until the test ends (then checks that Run returned
// nil) and returns once it listens.
func startListener(t *testing.T, l *Listener) {
	t.Helper()
	ended := testutil.Background(t, "listener Run", l.Run)
	select {
	case <-l.Ready():
	case <-ended:
		t.Fatal("listener stopped before it listened (its error is reported at cleanup)")
	case <-time.After(30 * time.Second):
		t.Fatal("listener not ready after 30 s")
	}
}
