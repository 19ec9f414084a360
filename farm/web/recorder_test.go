package web

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/browserfarm/browserfarm/jobqueue"
)

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

// sampleCount counts the queue samples of the last two hours.
func sampleCount(t *testing.T, q *jobqueue.Queue) int {
	t.Helper()
	qp, _, err := q.Samples(context.Background(), time.Now().Add(-2*time.Hour), time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	return len(qp)
}

// TestRecorderRun: the recorder samples at once and then every interval,
// and returns nil when its context ends.
func TestRecorderRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.register("n1", 6)
	r := NewRecorder(RecorderConfig{Queue: f.q, Interval: 1100 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr = r.Run(ctx)
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()
	deadline := time.Now().Add(30 * time.Second)
	for sampleCount(t, f.q) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 2 samples after 30 s")
		}
		// Polling a condition: the recorder writes on its own schedule.
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Fatalf("Run returned %v, want nil", runErr)
	}
	_, np, err := f.q.Samples(context.Background(), time.Now().Add(-time.Hour), time.Second, nil)
	if err != nil || len(np) < 2 || np[0].NodeID != "n1" {
		t.Fatalf("node samples: %+v, %v", np, err)
	}
}

// TestRecorderPrunes: a tick drops the samples past the retention.
func TestRecorderPrunes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.register("n1", 6)
	ctx := context.Background()
	var at time.Time
	past := jobqueue.New(f.pool, jobqueue.Config{Now: func() time.Time { return at }})
	// Every 5 minutes from 178 to 33 minutes ago.
	start := time.Now().Add(-3*time.Hour + 2*time.Minute)
	for i := range 30 {
		at = start.Add(time.Duration(i) * 5 * time.Minute)
		if _, err := past.RecordSamples(ctx, 5*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	r := NewRecorder(RecorderConfig{Queue: f.q, Interval: time.Second, Retention: time.Hour, PruneBatch: 4})
	rep, err := r.Tick(ctx)
	if err != nil || rep.Skipped || rep.Nodes != 1 {
		t.Fatalf("tick: %+v, %v", rep, err)
	}
	qp, np, err := f.q.Samples(ctx, start.Add(-time.Hour), time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-time.Hour)
	for _, p := range qp {
		if p.At.Before(cutoff.Add(-time.Minute)) {
			t.Fatalf("queue sample at %v survived the prune (cutoff %v)", p.At, cutoff)
		}
	}
	// Those 58 .. 33 minutes old remain (6), and the tick's.
	if len(qp) != 7 || len(np) != 7 {
		t.Fatalf("%d queue and %d node samples left", len(qp), len(np))
	}
}

// TestRecorderSurvivesErrors: a failing database makes Run log and keep
// going, not return; only the first failure of a run is a warning.
func TestRecorderSurvivesErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.pool.Close()
	core, logs := observer.New(zap.DebugLevel)
	r := NewRecorder(RecorderConfig{Queue: f.q, Interval: 10 * time.Millisecond, Logger: zap.New(core)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for logs.FilterMessage("dashboard samples not recorded").Len() < 3 {
		select {
		case err := <-done:
			t.Fatalf("Run returned after a failed tick: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("fewer than 3 failed ticks in 30 s")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	entries := logs.FilterMessage("dashboard samples not recorded").All()
	if entries[0].Level != zap.WarnLevel || entries[1].Level != zap.DebugLevel || entries[2].Level != zap.DebugLevel {
		t.Fatalf("log levels %v %v %v, want warn then debug", entries[0].Level, entries[1].Level, entries[2].Level)
	}
}
