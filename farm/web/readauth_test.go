package web

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// TestReadAuth: with ReadAuth every API read needs the read token or the API
// token; the dashboard page, health and metrics stay open; without ReadAuth
// reads are open as before. Either way no read shows a proxy password or
// URL userinfo.
func TestReadAuth(t *testing.T) {
	t.Parallel()
	const readToken = "read-only-token"
	guarded := newFixture(t, func(c *Config) { c.ReadAuth, c.ReadToken = true, readToken })
	none := newFixture(t, func(c *Config) { c.ReadAuth, c.Token = true, "" })
	open := newFixture(t, nil)
	var ids []int64
	for _, f := range []*fixture{guarded, open} {
		f.register("n1", 6)
		_, ids = f.enqueue(jobqueue.Spec{URL: "http://user:url-pass@a.example/", Proxy: "http://bob:proxy-pass@10.0.0.1:3128"})
	}
	reads := []string{"/api/nodes", "/api/stats", "/api/jobs", "/api/jobs?state=pending", fmt.Sprintf("/api/jobs/%d", ids[0]),
		"/api/samples", "/api/failures"}
	for _, path := range reads {
		for _, tok := range []string{"", "wrong"} {
			if code, _, b := guarded.do("GET", path, tok, ""); code != http.StatusUnauthorized {
				t.Errorf("GET %s with token %q: %d %s, want 401", path, tok, code, b)
			}
		}
		for _, tok := range []string{readToken, testToken} {
			if code, _, b := guarded.do("GET", path, tok, ""); code != http.StatusOK {
				t.Errorf("GET %s with token %q: %d %s, want 200", path, tok, code, b)
			}
		}
		if code, _, b := none.do("GET", path, "anything", ""); code != http.StatusForbidden || !strings.Contains(string(b), "FARM_READ_TOKEN") {
			t.Errorf("GET %s with no token configured: %d %s, want 403 naming FARM_READ_TOKEN", path, code, b)
		}
		for _, f := range []*fixture{guarded, open} {
			code, _, b := f.do("GET", path, testToken, "")
			if code != http.StatusOK {
				t.Errorf("GET %s: %d", path, code)
			}
			for _, secret := range []string{"url-pass", "proxy-pass", "user:"} {
				if strings.Contains(string(b), secret) {
					t.Errorf("GET %s shows %q: %s", path, secret, b)
				}
			}
		}
	}
	// The read token cannot change the farm.
	if code, _, _ := guarded.do("POST", "/api/jobs", readToken, specsJSON("http://b.example/")); code != http.StatusUnauthorized {
		t.Errorf("POST with the read token: %d, want 401", code)
	}
	for _, path := range []string{"/", "/healthz", "/metrics"} {
		if code, _, _ := guarded.do("GET", path, "", ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200", path, code)
		}
	}
}

// TestOpenReadsNeedALoopbackHost: without ReadAuth (a producer on loopback)
// reads answer only requests that name loopback, so that a page rebinding
// its own name to 127.0.0.1 cannot read the farm through a browser.
func TestOpenReadsNeedALoopbackHost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, tc := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:8080", http.StatusOK},
		{"localhost:8080", http.StatusOK},
		{"LOCALHOST", http.StatusOK},
		{"farm.localhost:8080", http.StatusOK},
		{"[::1]:8080", http.StatusOK},
		{"127.1.2.3", http.StatusOK},
		{"rebind.example:8080", http.StatusForbidden},
		{"10.0.0.5:8080", http.StatusForbidden},
		{"localhost.example.com", http.StatusForbidden},
	} {
		req, err := http.NewRequest("GET", f.url+"/api/stats", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET /api/stats with Host %q: %d, want %d", tc.host, resp.StatusCode, tc.want)
		}
	}
}

// TestOpenReadsRefuseAProxy: a reverse proxy on the producer's machine
// connects from loopback and may forward a loopback Host; what it adds to
// say whom it forwards for makes open reads refuse the request.
func TestOpenReadsRefuseAProxy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, tc := range []struct {
		header, value string
		token         string
		want          int
	}{
		{"", "", "", http.StatusOK},
		{"X-Forwarded-For", "203.0.113.7", "", http.StatusForbidden},
		// Through the proxy with the API token: the operator's request.
		{"X-Forwarded-For", "203.0.113.7", testToken, http.StatusOK},
		{"X-Forwarded-For", "203.0.113.7", "not-the-token", http.StatusForbidden},
		{"Forwarded", "for=203.0.113.7", "", http.StatusForbidden},
		{"X-Real-IP", "203.0.113.7", "", http.StatusForbidden},
		{"X-Forwarded-Host", "farm.example", "", http.StatusForbidden},
		{"Via", "1.1 nginx", "", http.StatusForbidden},
	} {
		req, err := http.NewRequest("GET", f.url+"/api/stats", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "127.0.0.1"
		if tc.header != "" {
			req.Header.Set(tc.header, tc.value)
		}
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET /api/stats with %s: %q: %d %s, want %d", tc.header, tc.value, resp.StatusCode, body, tc.want)
		}
	}
	// With a read token the proxy is the operator's choice.
	g := newFixture(t, func(c *Config) { c.ReadAuth, c.ReadToken = true, "read-token-0123456789" })
	req, err := http.NewRequest("GET", g.url+"/api/stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header.Set("Authorization", "Bearer read-token-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a proxied read with the read token: %d, want 200", resp.StatusCode)
	}
}
