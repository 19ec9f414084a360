package web

import (
	"net/http"
	"strings"
	"testing"

	"github.com/browserfarm/browserfarm/farm/wake"
)

// TestWakePoll: the nodes' long-poll endpoint answers from the hub, checks
// its input, needs the read token when reads do, and is absent without a
// hub.
func TestWakePoll(t *testing.T) {
	t.Parallel()
	hub := wake.NewHub(wake.HubConfig{})
	f := newFixture(t, func(c *Config) { c.Wake = hub; c.ReadAuth = true; c.ReadToken = "reader" })

	tests := []struct {
		name, path, token string
		status            int
		body              string // a substring of the answer
	}{
		{"no token", "/api/nodes/n1/wake?wait=0s", "", http.StatusUnauthorized, "token"},
		{"bad node id", "/api/nodes/bad%20id/wake?wait=0s", "reader", http.StatusBadRequest, "node id"},
		{"bad wait", "/api/nodes/n1/wake?wait=soon", "reader", http.StatusBadRequest, "wait"},
		{"negative wait", "/api/nodes/n1/wake?wait=-1s", "reader", http.StatusBadRequest, "wait"},
		{"a first poll is answered woken", "/api/nodes/n1/wake?wait=0s", "reader", http.StatusOK, `"woken":true`},
		{"a registered node's zero wait", "/api/nodes/n1/wake?wait=0s", "reader", http.StatusOK, `"woken":false`},
		{"the API token reads too", "/api/nodes/n2/wake?wait=0s", testToken, http.StatusOK, `"woken":true`},
	}
	for _, tt := range tests {
		status, _, body := f.do(http.MethodGet, tt.path, tt.token, "")
		if status != tt.status || !strings.Contains(string(body), tt.body) {
			t.Errorf("%s: %d %s; want %d with %q", tt.name, status, body, tt.status, tt.body)
		}
	}

	// n1 is registered: a wake-up before its next poll answers that poll
	// at once (the default wait is the hub's 25 s).
	hub.Wake("n1")
	if status, _, body := f.do(http.MethodGet, "/api/nodes/n1/wake", "reader", ""); status != http.StatusOK || !strings.Contains(string(body), `"woken":true`) {
		t.Fatalf("poll after a wake-up: %d %s", status, body)
	}

	if status, _, body := f.do(http.MethodGet, "/metrics", "", ""); status != http.StatusOK || !strings.Contains(string(body), "browserfarm_wake_nodes 2") {
		t.Errorf("metrics: %d, want browserfarm_wake_nodes 2 (n1, n2) in\n%s", status, body)
	}

	hub.Close()
	if status, _, body := f.do(http.MethodGet, "/api/nodes/n1/wake", "reader", ""); status != http.StatusServiceUnavailable {
		t.Fatalf("poll of a closed hub: %d %s, want 503", status, body)
	}

	noHub := newFixture(t, nil)
	if status, _, body := noHub.do(http.MethodGet, "/api/nodes/n1/wake?wait=0s", "", ""); status != http.StatusNotFound {
		t.Fatalf("without a hub: %d %s, want 404", status, body)
	}
}
