package wake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// testEndpoint serves a hub the way the producer's GET
// /api/nodes/{id}/wake does (farm/web), minus its auth; while down is set
// it answers 503, as a producer shutting down does.
func testEndpoint(t *testing.T, h *Hub, token string, down *atomic.Bool, refused *atomic.Int64) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/nodes/{id}/wake", func(w http.ResponseWriter, r *http.Request) {
		want := ""
		if token != "" {
			want = "Bearer " + token
		}
		if r.Header.Get("Authorization") != want {
			http.Error(w, "wrong token", http.StatusUnauthorized)
			return
		}
		if down.Load() {
			refused.Add(1)
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		wait, err := time.ParseDuration(r.URL.Query().Get("wait"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		woken, err := h.Wait(r.Context(), r.PathValue("id"), wait)
		if err != nil {
			return
		}
		_ = json.NewEncoder(w).Encode(Answer{Woken: woken})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestClient(t *testing.T) {
	t.Parallel()
	h := NewHub(HubConfig{})
	var down atomic.Bool
	var refused atomic.Int64
	srv := testEndpoint(t, h, "s3cret", &down, &refused)
	c, err := NewClient(ClientConfig{URL: srv.URL + "/", Token: "s3cret", NodeID: "n1", RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		h.Close() // the parked poll would otherwise hold srv.Close
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	expect := func(what, payload string) {
		t.Helper()
		select {
		case n := <-c.C():
			if n.Payload != payload {
				t.Fatalf("%s: got %+v, want payload %q", what, n, payload)
			}
		case err := <-done:
			t.Fatalf("%s: Run returned %v", what, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: nothing after 30 s", what)
		}
	}

	select {
	case <-c.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("not ready after 30 s")
	}
	// The first poll is answered woken (the hub did not know the node).
	expect("first poll", "n1")
	// Registered: a wake-up now is not lost, parked poll or not.
	h.Wake("n1")
	expect("woken", "n1")
	h.Wake("n2")
	h.Wake("n1")
	expect("woken again", "n1")

	// The producer goes away and comes back without knowing the node: the
	// client registers again and says wake-ups may have been missed.
	down.Store(true)
	srv.CloseClientConnections() // ends a parked poll; the next ones meet the 503
	testutil.Eventually(t, 30*time.Second, "a poll refused", func() bool { return refused.Load() > 0 })
	down.Store(false)
	expect("back", jobqueue.PayloadReconnected)
	h.Wake("n1")
	expect("woken after the outage", "n1")
}

func TestClientRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ url, node string }{
		{"", "n1"},
		{"producer:8080", "n1"},
		{"ftp://producer", "n1"},
		{"http://producer:8080?x=1", "n1"},
		{"http://producer:8080", "bad id"},
	} {
		_, err := NewClient(ClientConfig{URL: tt.url, NodeID: tt.node})
		switch {
		case err == nil:
			t.Errorf("NewClient(%q, %q) accepted", tt.url, tt.node)
		case tt.node == "n1" && !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.url)):
			t.Errorf("NewClient(%q): %v does not name the URL", tt.url, err)
		case tt.node != "n1" && !errors.Is(err, jobqueue.ErrBadNodeID):
			t.Errorf("NewClient(node %q): %v, want ErrBadNodeID", tt.node, err)
		}
	}
}

// TestClientReadyWhileProducerDown: a node whose producer does not answer
// is ready anyway (it must claim what it already holds without one), and
// once a producer answers it is told that wake-ups may have been missed.
func TestClientReadyWhileProducerDown(t *testing.T) {
	t.Parallel()
	h := NewHub(HubConfig{})
	var down atomic.Bool
	var refused atomic.Int64
	down.Store(true)
	srv := testEndpoint(t, h, "", &down, &refused)
	c, err := NewClient(ClientConfig{URL: srv.URL, NodeID: "n1", RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		h.Close()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-c.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("not ready after 30 s with the producer down")
	}
	if refused.Load() == 0 {
		t.Fatal("ready before any poll was made")
	}
	down.Store(false)
	select {
	case n := <-c.C():
		if n.Payload != jobqueue.PayloadReconnected {
			t.Fatalf("got %+v, want %s", n, jobqueue.PayloadReconnected)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no notification after the producer came up")
	}
}

// TestClientKeepsSayingItIsRefused: a wrong token is an error at every
// retry, not a warning once, since it does not heal.
func TestClientKeepsSayingItIsRefused(t *testing.T) {
	t.Parallel()
	h := NewHub(HubConfig{})
	var down atomic.Bool
	var refused atomic.Int64
	srv := testEndpoint(t, h, "right", &down, &refused)
	core, logs := observer.New(zap.WarnLevel)
	c, err := NewClient(ClientConfig{URL: srv.URL, Token: "wrong", NodeID: "n1", RetryMin: time.Millisecond, RetryMax: time.Millisecond,
		Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	testutil.Eventually(t, 30*time.Second, "three refusals logged as errors", func() bool {
		return logs.FilterLevelExact(zap.ErrorLevel).FilterMessageSnippet("--wake-token").Len() >= 3
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
