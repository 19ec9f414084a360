package jobqueue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

// Two electors on one database: exactly one leads; when its process "dies"
// (its context ends, its session closes) the other takes over.
func TestElectorFailover(t *testing.T) {
	_, pool := newTestQueue(t, Config{})
	cfg := ElectorConfig{Key: 4242, RetryInterval: 20 * time.Millisecond, CheckInterval: 20 * time.Millisecond}
	a, b := NewElector(pool, cfg), NewElector(pool, cfg)

	var mu sync.Mutex
	leading := map[string]int{}
	maxConcurrent := 0
	leadFn := func(name string) func(context.Context) {
		return func(ctx context.Context) {
			mu.Lock()
			leading[name]++
			n := 0
			for _, c := range leading {
				n += c
			}
			maxConcurrent = max(maxConcurrent, n)
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			leading[name]--
			mu.Unlock()
		}
	}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	doneA, doneB := make(chan error), make(chan error)
	go func() { doneA <- a.Run(ctxA, leadFn("a")) }()
	testutil.Eventually(t, 10*time.Second, "a leads", a.IsLeader)
	go func() { doneB <- b.Run(ctxB, leadFn("b")) }()

	// b keeps trying while a leads; give it several retry intervals.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if b.IsLeader() {
			t.Fatal("standby became leader while the leader was alive")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopA()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "b takes over", b.IsLeader)
	if a.IsLeader() {
		t.Fatal("a still claims leadership after stopping")
	}
	stopB()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxConcurrent != 1 {
		t.Fatalf("%d leaders at once", maxConcurrent)
	}
}

// A leader whose lock connection is killed by the server steps down, and a
// standby takes over.
func TestElectorStepsDownWhenConnectionDies(t *testing.T) {
	_, pool := newTestQueue(t, Config{})
	cfg := ElectorConfig{Key: 4343, RetryInterval: 20 * time.Millisecond, CheckInterval: 20 * time.Millisecond}
	a := NewElector(pool, cfg)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	lost := make(chan struct{})
	var once sync.Once
	go a.Run(ctx, func(lctx context.Context) { <-lctx.Done(); once.Do(func() { close(lost) }) })
	testutil.Eventually(t, 10*time.Second, "a leads", a.IsLeader)
	// Kill the backend holding the lock, as a network failure or an admin would.
	if _, err := pool.Exec(context.Background(), `
		SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND objid = 4343 AND granted`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("leader did not step down after its lock connection died")
	}
	b := NewElector(pool, cfg)
	go b.Run(ctx, func(lctx context.Context) { <-lctx.Done() })
	testutil.Eventually(t, 10*time.Second, "someone leads again", func() bool { return a.IsLeader() || b.IsLeader() })
}

// A leader whose work ends on its own (a failed leader actor) gives up the
// lock, so that a standby takes over instead of the farm having a leader
// that does nothing.
func TestElectorStepsDownWhenLeadReturns(t *testing.T) {
	_, pool := newTestQueue(t, Config{})
	cfg := ElectorConfig{Key: 4444, RetryInterval: 50 * time.Millisecond, CheckInterval: 20 * time.Millisecond}
	a, b := NewElector(pool, cfg), NewElector(pool, cfg)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var once sync.Once
	aLed := make(chan struct{})
	quit := make(chan struct{})
	go a.Run(ctx, func(lctx context.Context) {
		once.Do(func() { close(aLed) })
		select { // a's work fails at once, every time it leads
		case <-quit:
		case <-lctx.Done():
		}
	})
	<-aLed
	bLeads := make(chan struct{})
	var bOnce sync.Once
	go b.Run(ctx, func(lctx context.Context) { bOnce.Do(func() { close(bLeads) }); <-lctx.Done() })
	close(quit)
	select {
	case <-bLeads:
	case <-time.After(10 * time.Second):
		t.Fatal("the standby never took over from a leader whose work had ended")
	}
}

// Confirm asks the database, not the elector's own view: right after the
// server ends the lock session, before the leader's check notices (here it
// never does: the check runs once an hour), Confirm says it does not lead.
// The key is negative, so that its high half has the sign bit pg_locks
// shows as an unsigned classid.
func TestElectorConfirm(t *testing.T) {
	_, pool := newTestQueue(t, Config{})
	const key = -0x0123456789abcdef
	a := NewElector(pool, ElectorConfig{Key: key, RetryInterval: time.Hour, CheckInterval: time.Hour})
	ctx := t.Context()
	if err := a.Confirm(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Confirm before leading: %v, want ErrNotLeader", err)
	}
	q := New(pool, Config{})
	if held, err := q.LeaderHeld(ctx, key); err != nil || held {
		t.Fatalf("LeaderHeld before anyone leads = %v, %v; want false", held, err)
	}
	leading := make(chan struct{})
	go a.Run(ctx, func(lctx context.Context) { close(leading); <-lctx.Done() })
	<-leading
	if err := a.Confirm(ctx); err != nil {
		t.Fatalf("Confirm while leading: %v", err)
	}
	if held, err := q.LeaderHeld(ctx, key); err != nil || !held {
		t.Fatalf("LeaderHeld while leading = %v, %v; want true", held, err)
	}
	if held, err := q.LeaderHeld(ctx, key+1); err != nil || held {
		t.Fatalf("LeaderHeld of another key = %v, %v; want false", held, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objid = ($1::int8 & 4294967295)::oid`, int64(key)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("ending the lock session: %d ended, %v", n, err)
	}
	// pg_terminate_backend only signals: the session is gone once the
	// server no longer lists it.
	testutil.Eventually(t, 10*time.Second, "the lock session to end", func() bool {
		err := a.Confirm(ctx)
		if err != nil && !errors.Is(err, ErrNotLeader) {
			t.Fatalf("Confirm after the session ended: %v", err)
		}
		return err != nil
	})
	if !a.IsLeader() {
		t.Fatal("the elector noticed the lost lock on its own: the test no longer shows that Confirm asks the database")
	}
}
