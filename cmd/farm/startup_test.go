package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/pglocal"
	"github.com/browserfarm/browserfarm/internal/pgtest"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// waitForLog polls a command's log until it holds want, failing if the
// command ends first.
func waitForLog(t *testing.T, logs *lockedBuffer, want string, ended <-chan error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if strings.Contains(logs.String(), want) {
			return
		}
		select {
		case err := <-ended:
			t.Fatalf("command ended (%v) before logging %q", err, want)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log after a minute", want)
		}
	}
}

func newLogBuffer() *lockedBuffer { return &lockedBuffer{b: &bytes.Buffer{}} }

func testEnv(stderr *lockedBuffer) *environment {
	return &environment{stdout: &bytes.Buffer{}, stderr: stderr, getenv: func(string) string { return "" }}
}

// TestStartEverythingAtOnce starts a consumer and a producer before their
// database exists: both log that they wait, the database comes up, the
// producer migrates, the consumer finds the schema, and a submitted job is
// rendered — no process restarted.
func TestStartEverythingAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and runs Chromium")
	}
	// A short data dir keeps the socket inside it, so its URL is known before the server starts.
	parent, err := os.MkdirTemp("", "fpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	_ = os.Chmod(parent, 0o755)
	dataDir := filepath.Join(parent, "d")
	url := "host=" + dataDir + " port=5432 user=postgres dbname=postgres sslmode=disable"
	site := testutil.StartSite(t, testsite.Options{Items: 5})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	consumerLog, producerLog := newLogBuffer(), newLogBuffer()
	consumerDone, producerDone := make(chan error, 1), make(chan error, 1)
	go func() {
		consumerDone <- runConsumer(ctx, testEnv(consumerLog), []string{"--database-url", url, "--node-id", "at-once",
			"--capacity", "1", "--database-wait", "3m", "--chrome-profile-root", t.TempDir(), "--heartbeat-interval", "1s",
			"--allow-destination", strings.TrimPrefix(site.URL, "http://")})
	}()
	go func() {
		producerDone <- runProducer(ctx, testEnv(producerLog), []string{"--database-url", url, "--listen", "127.0.0.1:0",
			"--database-wait", "3m", "--tick", "100ms"})
	}()
	waitForLog(t, consumerLog, "waiting for the database", consumerDone)
	waitForLog(t, producerLog, "waiting for the database", producerDone)

	cluster, err := pglocal.Start(ctx, pglocal.Config{DataDir: dataDir, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cluster.Stop(context.Background()) }()
	if cluster.SocketDir() != dataDir {
		t.Fatalf("socket in %s, want %s", cluster.SocketDir(), dataDir)
	}
	waitForLog(t, producerLog, "database is ready", producerDone)
	waitForLog(t, consumerLog, "database is ready", consumerDone)

	pool, err := openPool(ctx, url, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	q := jobqueue.New(pool, jobqueue.Config{})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		applied, expected, err := jobqueue.SchemaVersion(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		if applied == expected {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the producer did not migrate: schema at %d of %d\n%s", applied, expected, producerLog.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, ids, err := q.Enqueue(ctx, []jobqueue.Spec{{URL: site.URL + "/page/1", Wait: &jobqueue.Wait{Selector: "#ready"}}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		j, err := q.Get(ctx, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if j.State == jobqueue.StateCompleted {
			break
		}
		if j.State.Finished() || time.Now().After(deadline) {
			t.Fatalf("job is %s\nconsumer:\n%s\nproducer:\n%s", j.State, tail(consumerLog.String(), 3000), tail(producerLog.String(), 3000))
		}
		select {
		case err := <-consumerDone:
			t.Fatalf("consumer ended: %v\n%s", err, tail(consumerLog.String(), 3000))
		case err := <-producerDone:
			t.Fatalf("producer ended: %v\n%s", err, tail(producerLog.String(), 3000))
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-consumerDone; err != nil {
		t.Errorf("consumer: %v", err)
	}
	if err := <-producerDone; err != nil {
		t.Errorf("producer: %v", err)
	}
}

// TestStartupWaitIsBounded: an unreachable database and a database without
// the schema each end the wait after --database-wait with an error that says
// what was awaited and what to do.
func TestStartupWaitIsBounded(t *testing.T) {
	ctx := context.Background()
	logs := newLogBuffer()
	err := runConsumer(ctx, testEnv(logs), []string{"--database-url", "host=" + t.TempDir() + " port=5432 user=x dbname=x",
		"--database-wait", "300ms"})
	if err == nil || !strings.Contains(err.Error(), "gave up waiting for the database after 300ms") {
		t.Errorf("unreachable database: err = %v", err)
	}
	if !strings.Contains(logs.b.String(), "waiting for the database") {
		t.Errorf("no waiting log line:\n%s", logs.b.String())
	}

	url := pgtest.NewDB(t) // exists, no schema
	logs = newLogBuffer()
	err = runConsumer(ctx, testEnv(logs), []string{"--database-url", url, "--database-wait", "300ms"})
	if err == nil || !strings.Contains(err.Error(), "gave up waiting for the database schema") || !strings.Contains(err.Error(), "farm migrate") {
		t.Errorf("no schema: err = %v", err)
	}
	if !strings.Contains(logs.b.String(), "waiting for the database schema") {
		t.Errorf("no waiting log line:\n%s", logs.b.String())
	}

	// Once migrated, the schema check passes at once.
	url, _ = migratedDB(t)
	pool, err := openPool(ctx, url, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	so := startupOptions{wait: 0}
	if err := so.waitForSchema(ctx, pool, zap.NewNop()); err != nil {
		t.Errorf("migrated database: %v", err)
	}
	applied, expected, err := jobqueue.SchemaVersion(ctx, pool)
	if err != nil || applied != expected {
		t.Errorf("SchemaVersion = %d, %d, %v", applied, expected, err)
	}
}
