package wake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// endpoint serves a hub the way the producer's GET /api/nodes/{id}/wake
// does (farm/web), minus its auth; while down is set it answers 503, as a
// producer shutting down does, and counts it in refused.
type endpoint struct {
	hub     *Hub
	srv     *httptest.Server
	down    atomic.Bool
	refused atomic.Int64
}

func newEndpoint(t *testing.T, token string) *endpoint {
	e := &endpoint{hub: NewHub(HubConfig{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Route, func(w http.ResponseWriter, r *http.Request) {
		want := ""
		if token != "" {
			want = "Bearer " + token
		}
		if r.Header.Get("Authorization") != want {
			http.Error(w, "wrong token", http.StatusUnauthorized)
			return
		}
		if e.down.Load() {
			e.refused.Add(1)
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		wait, err := time.ParseDuration(r.URL.Query().Get("wait"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		woken, err := e.hub.Wait(r.Context(), r.PathValue("id"), wait)
		if err != nil {
			return
		}
		_ = json.NewEncoder(w).Encode(Answer{Woken: woken})
	})
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	t.Cleanup(e.hub.Close) // runs first: answers the parked polls, which srv.Close waits for
	return e
}

// startClient runs c until the test ends, then checks that Run returned nil.
func startClient(t *testing.T, c *Client) {
	t.Helper()
	testutil.Background(t, "client Run", c.Run)
}

func TestClient(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, "s3cret")
	h := e.hub
	// The test waits for the client to have seen the outage in its log:
	// a refusal counted by the server is not enough, since the transport
	// retries a GET whose connection closed under it, and the retry may
	// find the producer back.
	seen, logs := observer.New(zap.WarnLevel)
	logger := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), seen))
	c, err := NewClient(ClientConfig{URL: e.srv.URL + "/", Token: "s3cret", NodeID: "n1", RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	startClient(t, c)
	expect := func(what, payload string) {
		t.Helper()
		expectNotification(t, c, what, payload)
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
	e.down.Store(true)
	e.srv.CloseClientConnections() // ends a parked poll; the next ones meet the 503
	testutil.Eventually(t, 30*time.Second, "the client saw a poll fail", func() bool {
		return logs.FilterMessageSnippet("wake poll failed").Len() > 0
	})
	e.down.Store(false)
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
	e := newEndpoint(t, "")
	e.down.Store(true)
	c, err := NewClient(ClientConfig{URL: e.srv.URL, NodeID: "n1", RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	startClient(t, c)
	select {
	case <-c.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("not ready after 30 s with the producer down")
	}
	if e.refused.Load() == 0 {
		t.Fatal("ready before any poll was made")
	}
	e.down.Store(false)
	expectNotification(t, c, "after the producer came up", jobqueue.PayloadReconnected)
}

// TestClientKeepsSayingItIsRefused: a wrong token is an error at every
// retry, not a warning once, since it does not heal.
func TestClientKeepsSayingItIsRefused(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, "right")
	core, logs := observer.New(zap.WarnLevel)
	c, err := NewClient(ClientConfig{URL: e.srv.URL, Token: "wrong", NodeID: "n1", RetryMin: time.Millisecond, RetryMax: time.Millisecond,
		Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	startClient(t, c)
	testutil.Eventually(t, 30*time.Second, "three refusals logged as errors", func() bool {
		return logs.FilterLevelExact(zap.ErrorLevel).FilterMessageSnippet("--wake-token").Len() >= 3
	})
}

// TestClientKeepsRemindingWhileNothingListens: a --wake-url whose host or
// port is wrong (connection refused) fails like a producer that is down,
// and heals no more than a wrong path does. The client warns at the first
// failure, reminds once a minute of failing (with the failures, how long,
// and the fallback poll), not at every retry, and says when a producer
// answers again. The clock is the test's: each failure and the recovery
// read it once, and the test steps it 10 s each time and says when the
// producer is back.
func TestClientKeepsRemindingWhileNothingListens(t *testing.T) {
	t.Parallel()
	refusing := closedAddr(t)
	e := newEndpoint(t, "")
	// The producer "moves in" at the address when the test says so: until
	// then every dial meets a real connection refused.
	var up atomic.Bool
	dialer := &net.Dialer{}
	transport := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		if up.Load() {
			return dialer.DialContext(ctx, network, e.srv.Listener.Addr().String())
		}
		return dialer.DialContext(ctx, network, refusing)
	}}
	t.Cleanup(transport.CloseIdleConnections)
	// The client's clock: it asks, and waits for the test's answer.
	asked, ticks := make(chan struct{}), make(chan time.Time)
	now := func() time.Time {
		asked <- struct{}{}
		return <-ticks
	}
	core, logs := observer.New(zap.InfoLevel)
	c, err := NewClient(ClientConfig{URL: "http://" + refusing, NodeID: "n1", RetryMin: time.Millisecond, RetryMax: time.Millisecond,
		HTTP: &http.Client{Transport: transport}, Logger: zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core)),
		FallbackPoll: 10 * time.Second, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	startClient(t, c)
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	const failures = 13 // at 0, 10 s, …, 120 s
	for i := range failures {
		<-asked // after a failed poll
		if i == failures-1 {
			// The client is in its clock after its last failed poll: the
			// next poll reaches the producer.
			up.Store(true)
		}
		ticks <- t0.Add(time.Duration(i) * 10 * time.Second)
	}
	<-asked // the recovery
	ticks <- t0.Add(failures * 10 * time.Second)
	expectNotification(t, c, "after the producer came up", jobqueue.PayloadReconnected)

	type line struct {
		level    zapcore.Level
		msg      string
		failures int64
		dur      time.Duration
	}
	var got []line
	for _, en := range logs.All() {
		m := en.ContextMap()
		l := line{level: en.Level, msg: en.Message}
		l.failures, _ = m["failures"].(int64)
		if d, ok := m["failing_for"].(time.Duration); ok {
			l.dur = d
		}
		if d, ok := m["failed_for"].(time.Duration); ok {
			l.dur = d
		}
		if en.Level == zap.WarnLevel {
			if !strings.Contains(fmt.Sprint(m["error"]), "connection refused") || m["fallback_poll"] != 10*time.Second {
				t.Errorf("%q: fields %v, want the refused connection and the fallback poll", en.Message, m)
			}
		}
		got = append(got, l)
	}
	want := []line{
		{zap.WarnLevel, "wake poll failed; retrying, the node looks for jobs at its fallback poll meanwhile", 1, 0},
		{zap.WarnLevel, "wake poll still failing: check --wake-url if this lasts; the node looks for jobs at its fallback poll meanwhile", 7, time.Minute},
		{zap.WarnLevel, "wake poll still failing: check --wake-url if this lasts; the node looks for jobs at its fallback poll meanwhile", 13, 2 * time.Minute},
		{zap.InfoLevel, "wake poll answered again", 13, 130 * time.Second},
	}
	if !slices.Equal(got, want) {
		t.Errorf("log lines:\n got %+v\nwant %+v", got, want)
	}
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// expectNotification waits up to 30 s for c's next notification and
// wants payload in it.
func expectNotification(t *testing.T, c *Client, what, payload string) {
	t.Helper()
	select {
	case n := <-c.C():
		if n.Payload != payload {
			t.Fatalf("%s: got %+v, want payload %q", what, n, payload)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing after 30 s", what)
	}
}
