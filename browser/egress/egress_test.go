package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      bool
	}{
		{"10.1.2.0/24", "10.1.2.0/24", false},
		{"10.1.2.7/24", "10.1.2.0/24", false},
		{"127.0.0.1:8089", "127.0.0.1:8089", false},
		{"127.0.0.2", "127.0.0.2", false},
		{"::1", "::1", false},
		{"[::1]:80", "[::1]:80", false},
		{"fe80::/10", "fe80::/10", false},
		{"10.0.0.0/8:443", "10.0.0.0/8:443", false},
		{"example.com", "", true},
		{"127.0.0.1:0", "", true},
		{"127.0.0.1:70000", "", true},
		{"[::1", "", true},
		{"", "", true},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8", false},
		{"::ffff:10.0.0.0/8", "", true}, // would be ::/8
	} {
		r, err := ParseRule(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("ParseRule(%q) = %v, want an error", tc.in, r)
			}
			continue
		}
		if err != nil || r.String() != tc.want {
			t.Errorf("ParseRule(%q) = %v, %v; want %s", tc.in, r, err, tc.want)
		}
	}
	if rules, err := ParseRules("10.1.2.0/24, 127.0.0.1:8089,"); err != nil || len(rules) != 2 {
		t.Errorf("ParseRules = %v, %v", rules, err)
	}
}

func TestPolicy(t *testing.T) {
	must := func(s string) Rule {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	pol := Policy{Allow: []Rule{must("127.0.0.1:8089"), must("10.1.2.0/24"), must("93.184.0.0/16:8080")}, Deny: []Rule{must("10.1.2.9"), must("93.184.216.5:8080")}}
	// Everything allowed but what Deny names: 0.0.0.0 and :: are this
	// machine, refused all the same.
	open := Policy{Allow: []Rule{must("0.0.0.0/0"), must("::/0")}, Deny: []Rule{must("127.0.0.0/8:8080"), must("[::1]:8080")}}
	for _, tc := range []struct {
		addr string
		def  bool // under the default policy
		with bool // under pol
	}{
		{"93.184.216.34:80", true, true},
		{"[2606:2800:220:1:248:1893:25c8:1946]:443", true, true},
		{"127.0.0.1:8089", false, true},
		{"127.0.0.1:8080", false, false},
		{"127.0.0.2:8089", false, false},
		{"[::1]:8089", false, false},
		{"[::ffff:127.0.0.1]:8089", false, true},
		{"169.254.169.254:80", false, false},
		{"[fe80::1]:80", false, false},
		{"10.0.0.1:80", false, false},
		{"10.1.2.3:5432", false, true},
		{"10.1.2.9:80", false, false},
		{"172.16.0.1:80", false, false},
		{"192.168.1.1:80", false, false},
		{"100.64.0.1:80", false, false},
		{"0.0.0.0:80", false, false},
		{"[::]:80", false, false},
		{"[fd00::1]:80", false, false},
		{"[64:ff9b::a9fe:a9fe]:80", false, false},
		{"[64:ff9b:1::a9fe:a9fe]:80", false, false},
		{"[::7f00:1]:8089", false, false},
		{"[::a9fe:a9fe]:80", false, false},
		{"[2002:7f00:1::1]:80", false, false},
		{"[2001:0:4136:e378:8000:63bf:3fff:fdd2]:80", false, false},
		{"[fec0::1]:80", false, false},
		{"168.63.129.16:80", false, false},
		{"[2001:db8::1]:80", false, false},
		{"224.0.0.1:80", false, false},
		{"93.184.216.5:8080", true, false},
		{"93.184.216.5:8081", true, true},
		{"93.184.216.6:8080", true, true},
		{"192.0.2.5:80", false, false},
		{"198.51.100.1:80", false, false},
		{"203.0.113.1:80", false, false},
		{"192.88.99.1:80", false, false},
		{"[100::1]:80", false, false},
		{"[::ffff:0:7f00:1]:80", false, false},
		{"[::ffff:0.0.0.0]:80", false, false},
	} {
		ap := netip.MustParseAddrPort(tc.addr)
		if got := (Policy{}).Allowed(ap); got != tc.def {
			t.Errorf("default policy: %s allowed = %v, want %v", tc.addr, got, tc.def)
		}
		if got := pol.Allowed(ap); got != tc.with {
			t.Errorf("policy: %s allowed = %v, want %v", tc.addr, got, tc.with)
		}
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"0.0.0.0:8080", false},
		{"0.0.0.0:80", false},
		{"[::]:8080", false},
		{"[::ffff:0.0.0.0]:8080", false},
		{"127.0.0.1:8080", false},
		{"127.0.0.1:80", true},
		{"10.0.0.1:5432", true},
		{"93.184.216.34:443", true},
	} {
		if got := open.Allowed(netip.MustParseAddrPort(tc.addr)); got != tc.want {
			t.Errorf("allow all: %s allowed = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

// fakeResolver answers from a map.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// lockedResolver is a fakeResolver a test may change while the proxy runs.
type lockedResolver struct {
	mu    sync.Mutex
	names fakeResolver
}

func (l *lockedResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.names.LookupNetIP(ctx, network, host)
}

func (l *lockedResolver) set(host string, addrs ...netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names[host] = addrs
}

// startSite serves "hello from <addr>" on ip:0 and returns its address.
func startSite(t *testing.T, ip string) (addr string, hits func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		fmt.Fprintf(w, "hello from %s", ln.Addr())
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestProxy runs the proxy against sites on 127.0.0.1 and 127.0.0.2: the
// allow-list lets exactly what it names through; a refused destination is
// never dialed — the metadata address included — and a host name is judged
// by what it resolves to.
func TestProxy(t *testing.T) {
	allowed, allowedHits := startSite(t, "127.0.0.1")
	other, otherHits := startSite(t, "127.0.0.2")
	samePortOther := "127.0.0.2:" + strings.Split(allowed, ":")[1]
	rule, err := ParseRule(allowed)
	if err != nil {
		t.Fatal(err)
	}
	var dmu sync.Mutex
	var dialed []string
	d := &net.Dialer{}
	p := serveProxy(t, Config{
		Policy: Policy{Allow: []Rule{rule}},
		Resolver: fakeResolver{
			"site.test":     {netip.MustParseAddr("127.0.0.1")},
			"rebind.test":   {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("127.0.0.2")},
			"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dmu.Lock()
			dialed = append(dialed, addr)
			dmu.Unlock()
			if addr != allowed {
				t.Errorf("dialed %s, which the policy does not allow", addr)
				return nil, fmt.Errorf("test: refusing to dial %s", addr)
			}
			return d.DialContext(ctx, network, addr)
		},
	})
	client := clientThrough(p)

	get := func(target string) (int, string, string) {
		t.Helper()
		resp, err := client.Get(target)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get(RefusedHeader), string(b)
	}
	if code, _, body := get("http://" + allowed + "/"); code != 200 || !strings.Contains(body, allowed) {
		t.Errorf("allowed site: %d %q", code, body)
	}
	port := strings.Split(allowed, ":")[1]
	if code, _, body := get("http://site.test:" + port + "/"); code != 200 || !strings.Contains(body, allowed) {
		t.Errorf("allowed site by name: %d %q", code, body)
	}
	for _, tc := range []struct{ target, refused string }{
		{"http://" + other + "/", other},
		{"http://" + samePortOther + "/", samePortOther},
		{"http://127.0.0.1:1/", "127.0.0.1:1"},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254:80"},
		{"http://metadata.test/", "169.254.169.254:80"},
		{"http://[fe80::1]/", "[fe80::1]:80"},
		{"http://rebind.test:" + port + "/", "127.0.0.2:" + port},
	} {
		code, hdr, body := get(tc.target)
		if code != http.StatusForbidden || hdr != tc.refused || !strings.Contains(body, "refused") {
			t.Errorf("%s: %d, refused %q, %q; want 403 naming %s", tc.target, code, hdr, body, tc.refused)
		}
	}

	// CONNECT, as Chrome tunnels https and wss.
	connect := func(hostport string) string {
		t.Helper()
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("CONNECT %s: %v", hostport, err)
		}
		if resp.StatusCode != 200 {
			return resp.Status
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hostport)
		inner, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("through the tunnel: %v", err)
		}
		b, _ := io.ReadAll(inner.Body)
		return string(b)
	}
	if got := connect(allowed); !strings.Contains(got, "hello from "+allowed) {
		t.Errorf("tunnel to the allowed site: %q", got)
	}
	for _, hp := range []string{other, "169.254.169.254:443", "rebind.test:443"} {
		if got := connect(hp); !strings.HasPrefix(got, "403") {
			t.Errorf("CONNECT %s: %q, want 403", hp, got)
		}
	}
	if f, ok := p.Failure("169.254.169.254:443"); !ok || !f.Refused || f.Addr != "169.254.169.254:443" {
		t.Errorf("Failure(metadata) = %+v, %v; want refused at 169.254.169.254:443", f, ok)
	}
	if f, ok := p.Failure(allowed); ok {
		t.Errorf("the allowed site is remembered as failed: %+v", f)
	}
	if otherHits() != 0 {
		t.Errorf("the refused site on 127.0.0.2 got %d requests", otherHits())
	}
	if allowedHits() != 3 {
		t.Errorf("the allowed site got %d requests, want 3", allowedHits())
	}
	dmu.Lock()
	defer dmu.Unlock()
	for _, a := range dialed {
		if a != allowed {
			t.Errorf("dialed %s", a)
		}
	}
}

// TestProxyNamesWhatFailed: a name that does not resolve and a port that
// does not answer are the proxy's own 502s, marked with FailedHeader and
// the cause on plain HTTP (where a site's 502 is not), and remembered for
// tunnels, whose failure Chrome reports without a cause; a later
// connection to the destination forgets its failure.
func TestProxyNamesWhatFailed(t *testing.T) {
	site, _ := startSite(t, "127.0.0.1")
	port := strings.Split(site, ":")[1]
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := strings.Split(closed.Addr().String(), ":")[1]
	closed.Close() // nothing answers there now
	// A site cannot pass for the proxy.
	forger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(FailedHeader, "forged")
		w.Header().Set(RefusedHeader, "forged")
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(forger.Close)
	rules, err := ParseRules("127.0.0.1/32")
	if err != nil {
		t.Fatal(err)
	}
	res := &lockedResolver{names: fakeResolver{"site.test": {netip.MustParseAddr("127.0.0.1")}}}
	p := serveProxy(t, Config{Policy: Policy{Allow: rules}, Resolver: res})
	client := clientThrough(p)
	for _, tc := range []struct {
		target, failed string // FailedHeader's substring; "" for none
	}{
		{"http://nowhere.test:" + port + "/", "no such host"},
		{"http://127.0.0.1:" + deadPort + "/", "connection refused"},
		{forger.URL + "/", ""},
	} {
		resp, err := client.Get(tc.target)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.target, err)
		}
		resp.Body.Close()
		got := resp.Header.Get(FailedHeader)
		if resp.StatusCode != http.StatusBadGateway || (tc.failed == "") != (got == "") || !strings.Contains(got, tc.failed) ||
			resp.Header.Get(RefusedHeader) != "" {
			t.Errorf("GET %s: %s, %s %q, %s %q; want 502 with %s %q", tc.target, resp.Status,
				FailedHeader, got, RefusedHeader, resp.Header.Get(RefusedHeader), FailedHeader, tc.failed)
		}
		u, _ := url.Parse(tc.target)
		f, ok := p.Failure(u.Host)
		if tc.failed == "" {
			if ok {
				t.Errorf("Failure(%s) = %+v for a site's own 502", u.Host, f)
			}
			continue
		}
		if !ok || f.Refused || !strings.Contains(f.Err, tc.failed) {
			t.Errorf("Failure(%s) = %+v, %v; want %q", u.Host, f, ok, tc.failed)
		}
	}

	// CONNECT, as Chrome tunnels https: the failure is remembered, and
	// forgotten once the name resolves and connects.
	connect := func(hostport string) int {
		c, resp := connectThrough(t, p, hostport)
		c.Close()
		return resp.StatusCode
	}
	later := "later.test:" + port
	if code := connect(later); code != http.StatusBadGateway {
		t.Fatalf("CONNECT %s before it resolves: %d, want 502", later, code)
	}
	if f, ok := p.Failure(later); !ok || !strings.Contains(f.Err, "no such host") {
		t.Fatalf("Failure(%s) = %+v, %v; want no such host", later, f, ok)
	}
	res.set("later.test", netip.MustParseAddr("127.0.0.1"))
	if code := connect(later); code != http.StatusOK {
		t.Fatalf("CONNECT %s once it resolves: %d, want 200", later, code)
	}
	if f, ok := p.Failure(later); ok {
		t.Errorf("Failure(%s) = %+v after it connected, want none", later, f)
	}
}

// TestTunnelEndsWhenOneSideIsDone: a client that closes its tunnel to a
// server that never closes its side (nor reads, nor writes) does not leave
// the tunnel open: the other direction gets CloseGrace, then both go.
func TestTunnelEndsWhenOneSideIsDone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn // the silent server's connections, closed at the end
	var hmu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hmu.Lock()
			held = append(held, c)
			hmu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		hmu.Lock()
		defer hmu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	rule, err := ParseRule(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p := serveProxy(t, Config{Policy: Policy{Allow: []Rule{rule}}, CloseGrace: 50 * time.Millisecond})
	open := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.tunnels)
	}
	const tunnels = 20
	for range tunnels {
		c, resp := connectThrough(t, p, ln.Addr().String())
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		c.Close()
	}
	testutil.Eventually(t, 10*time.Second, "every tunnel closed", func() bool { return open() == 0 })
}

// TestProxyRefusesItself: under a policy that allows loopback, a page still
// cannot tunnel through the proxy to the proxy again.
func TestProxyRefusesItself(t *testing.T) {
	p := serveProxy(t, Config{Policy: Policy{Allow: []Rule{{Prefix: netip.MustParsePrefix("127.0.0.0/8")}}}})
	c, resp := connectThrough(t, p, p.Addr())
	c.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(RefusedHeader) != p.Addr() {
		t.Errorf("CONNECT to the proxy itself: %s, refused %q; want 403 naming %s", resp.Status, resp.Header.Get(RefusedHeader), p.Addr())
	}
}

// serveProxy listens on loopback with cfg and serves until the test ends.
func serveProxy(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return p
}

// clientThrough is a client that sends its requests through p.
func clientThrough(p *Proxy) *http.Client {
	proxyURL, _ := url.Parse(p.URL())
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
}

// connectThrough sends CONNECT target to p and returns the connection and
// the proxy's answer (its body, if any, unread).
func connectThrough(t *testing.T, p *Proxy, target string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	return c, resp
}

// TestProxyStreams: each part of an answer of unknown length reaches the
// page as the site sends it — an event stream never ends, and a page or
// fetch read as a stream must not wait for the proxy's buffer to fill.
// The site sends its second part only once the client has read the first;
// an event stream's headers (its open event) come before any event, the
// site sending its first only once the client has them.
func TestProxyStreams(t *testing.T) {
	for _, ct := range []string{"text/event-stream", "text/html"} {
		t.Run(ct, func(t *testing.T) { testProxyStreams(t, ct) })
	}
}

func testProxyStreams(t *testing.T, contentType string) {
	firstRead, headersRead := make(chan struct{}), make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	events := contentType == "text/event-stream"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		if events {
			w.(http.Flusher).Flush()
			select {
			case <-headersRead:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-firstRead:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: 2\n\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	rule, err := ParseRule(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p := serveProxy(t, Config{Policy: Policy{Allow: []Rule{rule}}})
	// Only a proxy that held the stream back lets this deadline pass.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/events", nil)
	resp, err := clientThrough(p).Do(req)
	if err != nil {
		t.Fatalf("the answer's headers did not come through: %v", err)
	}
	defer resp.Body.Close()
	close(headersRead)
	br := bufio.NewReader(resp.Body)
	for i, want := range []string{"data: 1\n", "\n", "data: 2\n"} {
		line, err := br.ReadString('\n')
		if err != nil || line != want {
			t.Fatalf("line %d: %q, %v; want %q", i, line, err, want)
		}
		if i == 1 {
			close(firstRead)
		}
	}
}

// TestProxyMarksLoopbackRequests: a request forwarded to a loopback Host
// carries the filter's Via (the producer answers reads without a token
// only to direct local clients, and refuses proxied ones); one to any other
// name, the same address behind it, does not, as sites would read it as a
// mark of a proxy.
func TestProxyMarksLoopbackRequests(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Header.Get("Via"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	rule, err := ParseRule(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	port := strings.Split(ln.Addr().String(), ":")[1]
	p := serveProxy(t, Config{Policy: Policy{Allow: []Rule{rule}},
		Resolver: fakeResolver{"localhost": {netip.MustParseAddr("127.0.0.1")}, "site.example": {netip.MustParseAddr("127.0.0.1")}}})
	c := clientThrough(p)
	for _, tc := range []struct{ host, via string }{
		{"127.0.0.1", ViaHeader},
		{"localhost", ViaHeader},
		{"site.example", ""},
	} {
		resp, err := c.Get("http://" + tc.host + ":" + port + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != tc.via {
			t.Errorf("%s: the site got Via %q, want %q", tc.host, body, tc.via)
		}
	}
}
