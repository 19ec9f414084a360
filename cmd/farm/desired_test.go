package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

// TestDashboardDesiredNodesOnlyWithDriver: the dashboard shows "desired
// nodes" when /api/stats says autoscale and carries desired_nodes. A
// producer with no driver (--autoscale none, the default) computes the
// count only as a Prometheus gauge, so its stats carry neither; with a
// driver that acts on the count, both.
func TestDashboardDesiredNodesOnlyWithDriver(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		wantDesired bool
	}{
		{"no driver", nil, false},
		{"--autoscale none", []string{"--autoscale", "none"}, false},
		{"exec driver", []string{"--autoscale", "exec", "--autoscale-exec", "true"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, _ := migratedDB(t)
			ctx, cancel := context.WithCancel(context.Background())
			logs := newLogBuffer()
			done := make(chan error, 1)
			go func() {
				done <- runProducer(ctx, testEnv(logs), append([]string{"--database-url", url, "--listen", "127.0.0.1:0",
					"--autoscale-interval", "100ms"}, tt.args...))
			}()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("producer: %v", err)
				}
			})
			waitForLog(t, logs, "dashboard and API listening", done)
			// The desired count is the leader's, once it computed one in
			// its term (set before this line is logged; unknown before).
			waitForLog(t, logs, "became leader", done)
			waitForLog(t, logs, "desired node count", done)
			m := regexp.MustCompile(`"url":"(http://127\.0\.0\.1:\d+/)"`).FindStringSubmatch(logs.String())
			if m == nil {
				t.Fatalf("no dashboard url in the log:\n%s", logs.String())
			}
			resp, err := http.Get(m[1] + "api/stats")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /api/stats: %s", resp.Status)
			}
			var stats map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
				t.Fatal(err)
			}
			_, hasDesired := stats["desired_nodes"]
			if stats["autoscale"] != tt.wantDesired || hasDesired != tt.wantDesired {
				t.Fatalf("stats autoscale=%v desired_nodes present=%v (%v), want both %v", stats["autoscale"], hasDesired,
					stats["desired_nodes"], tt.wantDesired)
			}
		})
	}
}

// TestLeaderAppliesTheDesiredCount: the leader's scaler asks, before each
// call of its driver, whether the producer still leads (the fence wired in
// addProducer); a leading producer is answered yes and its exec command
// runs with the count.
func TestLeaderAppliesTheDesiredCount(t *testing.T) {
	url, _ := migratedDB(t)
	out := filepath.Join(t.TempDir(), "desired")
	ctx, cancel := context.WithCancel(context.Background())
	logs := newLogBuffer()
	done := make(chan error, 1)
	go func() {
		done <- runProducer(ctx, testEnv(logs), []string{"--database-url", url, "--listen", "127.0.0.1:0",
			"--autoscale-interval", "100ms", "--autoscale", "exec", "--autoscale-exec", `echo "$1" > ` + out})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("producer: %v", err)
		}
	})
	waitForLog(t, logs, "became leader", done)
	testutil.Eventually(t, time.Minute, "the exec driver to run", func() bool {
		b, err := os.ReadFile(out)
		return err == nil && strings.TrimSpace(string(b)) == "0"
	})
	if strings.Contains(logs.String(), "driver could not apply") {
		t.Fatalf("the driver call failed:\n%s", logs.String())
	}
}
