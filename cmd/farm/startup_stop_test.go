package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/browserfarm/browserfarm/internal/pgtest"
)

// cancelOnLog is a log that cancels a context once a line holds want: a
// stop that comes while the command waits, as SIGTERM does.
type cancelOnLog struct {
	mu     sync.Mutex
	b      bytes.Buffer
	want   string
	cancel context.CancelFunc
}

func (c *cancelOnLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if strings.Contains(string(p), c.want) {
		c.cancel()
	}
	return c.b.Write(p)
}

func (c *cancelOnLog) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// TestStopWhileWaitingAtStart: SIGTERM/SIGINT while a consumer or producer
// waits for its database (or the consumer for its schema) is a stop like
// any other: exit 0, logged as one, not an error that leaves a systemd unit
// failed.
func TestStopWhileWaitingAtStart(t *testing.T) {
	unreachable := "postgres://x@127.0.0.1:1/x"
	for _, tc := range []struct {
		name, waitFor string
		run           func(context.Context, *environment, []string) error
		args          func(t *testing.T) []string
	}{
		{"consumer, database", "waiting for the database", runConsumer, func(*testing.T) []string {
			return []string{"--database-url", unreachable}
		}},
		{"consumer, schema", "waiting for the database schema", runConsumer, func(t *testing.T) []string {
			return []string{"--database-url", pgtest.NewDB(t)} // no schema: no producer ever migrates it
		}},
		{"producer, database", "waiting for the database", runProducer, func(*testing.T) []string {
			return []string{"--database-url", unreachable, "--listen", "127.0.0.1:0"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			log := &cancelOnLog{want: tc.waitFor, cancel: cancel}
			env := &environment{stdout: &bytes.Buffer{}, stderr: log, getenv: func(string) string { return "" }}
			args := append(tc.args(t), "--database-wait", "10m", "--log-format", "json")
			if err := tc.run(ctx, env, args); err != nil {
				t.Fatalf("stopped while %s: err = %v, want nil (exit 0); log:\n%s", tc.waitFor, err, log)
			}
			if ctx.Err() == nil {
				t.Fatalf("returned before the stop; log:\n%s", log)
			}
			if !strings.Contains(log.String(), "stopped while "+tc.waitFor) {
				t.Errorf("the log does not say it stopped while %s:\n%s", tc.waitFor, log)
			}
		})
	}
}
