package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/loopback"
)

// RefusedHeader is set on the proxy's answer to a refused plain-HTTP request:
// the browser tells a refusal from a page's own 403 by it, and names the
// address from it.
const RefusedHeader = "X-Browserfarm-Egress-Refused"

// FailedHeader is set on the proxy's own 502 answer to a plain-HTTP request
// it could not connect (the name did not resolve, the dial failed), with
// the cause: the browser tells it from a site's own 502 by it.
const FailedHeader = "X-Browserfarm-Egress-Failed"

// ViaHeader is the Via value (RFC 9110 7.6.3) the proxy adds to a request it
// forwards to a loopback Host.
const ViaHeader = "1.1 browserfarm-egress"

// Timeouts of the proxy's own work; the job's timeout bounds the rest.
const (
	resolveTimeout = 10 * time.Second
	dialTimeout    = 15 * time.Second
	// maxFailures bounds the memory of recent failures (see Failure).
	maxFailures = 1024
)

// Config configures a Proxy.
type Config struct {
	Policy Policy
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
	// Dial connects to a checked address; nil means a net.Dialer. Tests
	// use it to prove that a refused destination is never dialed.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives refusals (debug) and failures; nil means zap.NewNop().
	Logger *zap.Logger
	// CloseGrace is how long a tunnel one side of which has finished waits
	// for the other side to finish too, before both are closed: a server
	// that never closes its side would otherwise hold the tunnel (two
	// goroutines, two descriptors) until the node exits, once per request
	// a page starts and abandons. Default: DefaultCloseGrace.
	CloseGrace time.Duration
}

// DefaultCloseGrace is Config.CloseGrace's default.
const DefaultCloseGrace = 10 * time.Second

// Proxy is a forward HTTP proxy (absolute-form requests and CONNECT) that
// enforces a Policy on every resolved address. Create it with Listen, run it
// with Serve.
type Proxy struct {
	cfg Config
	ln  net.Listener
	srv *http.Server
	log *zap.Logger
	// tr forwards plain-HTTP requests. Its only dial is dialChecked, so a
	// pooled connection is to an address that was checked when it was
	// dialed: reusing it cannot reach anything a new lookup would refuse.
	tr *http.Transport

	mu       sync.Mutex
	failures map[string]Failure // host:port as asked → why it was not connected
	order    []string
	tunnels  map[net.Conn]struct{} // both ends of every open tunnel
	closed   bool
	wg       sync.WaitGroup // tunnels' copy goroutines
}

// Failure is why the proxy did not connect a destination: the policy
// refused it, or resolving or dialing it failed.
type Failure struct {
	Refused bool   // by the policy, at Addr; else Err says what failed
	Addr    string // the refused address
	Err     string
}

// failureOf is the Failure of a dial error: a refusal, or a resolve or dial
// failure.
func failureOf(err error) Failure {
	var re *RefusedError
	if errors.As(err, &re) {
		return Failure{Refused: true, Addr: re.Addr.String()}
	}
	return Failure{Err: err.Error()}
}

// Listen opens the proxy's listener on addr (e.g. 127.0.0.1:0). Nothing is
// served until Serve.
func Listen(addr string, cfg Config) (*Proxy, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: dialTimeout}
		cfg.Dial = d.DialContext
	}
	if err := cfgrule.Resolve("CloseGrace", &cfg.CloseGrace, DefaultCloseGrace, false); err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	// Not through itself: a policy that allows loopback would let a page
	// tunnel through the proxy again, once per level.
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil {
		cfg.Policy.Deny = append(slices.Clip(cfg.Policy.Deny), HostRule(ap.Addr(), ap.Port()))
	}
	p := &Proxy{cfg: cfg, ln: ln, log: cfg.Logger, failures: map[string]Failure{}, tunnels: map[net.Conn]struct{}{}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, ErrorLog: zap.NewStdLog(cfg.Logger)}
	p.tr = &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return p.dialChecked(ctx, addr, "80")
		},
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
		// The page's own Accept-Encoding is forwarded as it is.
		DisableCompression: true,
	}
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy as Chrome's --proxy-server takes it.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Serve answers requests until ctx ends, then closes the listener and every
// connection (tunnels included) and returns.
func (p *Proxy) Serve(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- p.srv.Serve(p.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("egress proxy: %w", err)
	case <-ctx.Done():
	}
	// Close ends the listener and the HTTP connections; tunnels are
	// hijacked connections it does not know, closed here.
	err := p.srv.Close()
	<-done
	p.tr.CloseIdleConnections()
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// track registers a tunnel's connections; false when the proxy is closing.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range conns {
		p.tunnels[c] = struct{}{}
	}
	p.wg.Add(1)
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	for _, c := range conns {
		delete(p.tunnels, c)
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Done()
}

// Close closes the listener of a proxy that was never served.
func (p *Proxy) Close() error {
	p.tr.CloseIdleConnections()
	return p.srv.Close()
}

// Failure returns why the last request for hostport (host:port as the
// browser asked for it) was not connected, if it was not; a later
// connection to it forgets that. The browser uses it to tell a refused or
// unresolvable tunnel (Chrome reports only that the tunnel failed) from
// an unreachable site, and to name the cause.
func (p *Proxy) Failure(hostport string) (Failure, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, ok := p.failures[strings.ToLower(hostport)]
	return f, ok
}

func (p *Proxy) remember(hostport string, f Failure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := strings.ToLower(hostport)
	if _, ok := p.failures[key]; !ok {
		p.order = append(p.order, key)
		if len(p.order) > maxFailures {
			delete(p.failures, p.order[0])
			p.order = p.order[1:]
		}
	}
	p.failures[key] = f
}

// forget drops hostport's failure once it was connected.
func (p *Proxy) forget(hostport string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := strings.ToLower(hostport)
	if _, ok := p.failures[key]; !ok {
		return
	}
	delete(p.failures, key)
	p.order = slices.DeleteFunc(p.order, func(k string) bool { return k == key })
}

// Check resolves host and checks every address against the policy. It
// returns the address to dial: the first one, all having passed. A host with
// any refused address is refused as a whole, so that which address Chrome's
// and the proxy's resolvers pick cannot matter.
func (p *Proxy) Check(ctx context.Context, host string, port uint16) (netip.AddrPort, error) {
	return check(ctx, p.cfg.Resolver, p.cfg.Policy, host, port)
}

func check(ctx context.Context, res interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}, pol Policy, host string, port uint16) (netip.AddrPort, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		addrs = []netip.Addr{a}
	} else {
		rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		defer cancel()
		addrs, err = res.LookupNetIP(rctx, "ip", host)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("resolving %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return netip.AddrPort{}, fmt.Errorf("resolving %s: no address", host)
		}
	}
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a.Unmap(), port)
		if !pol.Allowed(ap) {
			return netip.AddrPort{}, &RefusedError{Host: host, Addr: ap}
		}
	}
	return netip.AddrPortFrom(addrs[0].Unmap(), port), nil
}

// ServeHTTP is the proxy: CONNECT opens a tunnel, an absolute-form request
// is forwarded; anything else is refused.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "this is a forward proxy: absolute-form http:// requests and CONNECT only", http.StatusBadRequest)
		return
	}
	p.forward(w, r)
}

// dialChecked resolves hostport, checks it and dials the checked address.
func (p *Proxy) dialChecked(ctx context.Context, hostport, defaultPort string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		host, portStr = hostport, defaultPort
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("bad port in %q", hostport)
	}
	key := net.JoinHostPort(host, portStr)
	ap, err := p.Check(ctx, host, uint16(port))
	if err == nil {
		var conn net.Conn
		if conn, err = p.cfg.Dial(ctx, "tcp", ap.String()); err == nil {
			p.forget(key)
			return conn, nil
		}
	}
	// A request the page gave up on is no finding about its destination.
	if ctx.Err() == nil {
		f := failureOf(err)
		p.remember(key, f)
		if f.Refused {
			p.log.Debug("egress refused", zap.String("host", host), zap.String("addr", f.Addr))
		}
	}
	return nil, err
}

func (p *Proxy) refuse(w http.ResponseWriter, err error) bool {
	var re *RefusedError
	if !errors.As(err, &re) {
		return false
	}
	w.Header().Set(RefusedHeader, re.Addr.String())
	http.Error(w, re.Error(), http.StatusForbidden)
	return true
}

func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	upstream, err := p.dialChecked(r.Context(), r.Host, "443")
	if err != nil {
		if !p.refuse(w, err) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		}
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		upstream.Close()
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		client.Close()
		upstream.Close()
		return
	}
	// Bytes the client sent after its CONNECT are in buf already.
	if n := buf.Reader.Buffered(); n > 0 {
		pending, _ := buf.Reader.Peek(n)
		if _, err := upstream.Write(pending); err != nil {
			client.Close()
			upstream.Close()
			return
		}
	}
	if !p.track(client, upstream) {
		client.Close()
		upstream.Close()
		return
	}
	defer p.untrack(client, upstream)
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		} else {
			dst.Close()
		}
		// The other direction reads dst: it gets CloseGrace to finish.
		_ = dst.SetReadDeadline(time.Now().Add(p.cfg.CloseGrace))
	}
	wg.Add(2)
	go pipe(upstream, client)
	go pipe(client, upstream)
	wg.Wait()
}

// hopHeaders are not forwarded (RFC 9110 7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	if c := r.Header.Get("Connection"); c != "" {
		for _, f := range strings.Split(c, ",") {
			out.Header.Del(strings.TrimSpace(f))
		}
	}
	if loopback.Host(out.URL.Host) || loopback.Host(out.Host) {
		// A service on the node's loopback (the producer answers reads
		// without a token there) must not take a job's page for a local
		// client: the request says it came through a proxy. Only there:
		// sites would read the header as a mark of a proxy.
		out.Header.Add("Via", ViaHeader)
	}
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		if !p.refuse(w, err) {
			w.Header().Set(FailedHeader, headerSafe(err.Error()))
			http.Error(w, err.Error(), http.StatusBadGateway)
		}
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	// Only the proxy says what it refused or could not connect.
	resp.Header.Del(RefusedHeader)
	resp.Header.Del(FailedHeader)
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	eventStream := strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "text/event-stream")
	if resp.ContentLength >= 0 && !eventStream {
		// An answer of known length goes out as the server's buffer fills
		// and at its end, as one write where it is small: sending its
		// headers apart cost Chrome 2 ms of CPU a page (BenchmarkEgress).
		_, _ = io.Copy(w, resp.Body)
		return
	}
	copyFlushing(w, resp.Body, eventStream)
}

// copyBufs are copyFlushing's buffers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyFlushing passes an answer of unknown length (chunked, or ended by the
// connection's close) on as it arrives, as Go's reverse proxy does: an
// event stream, a page sent in parts or a fetch read as a stream must not
// wait for the server's buffer to fill, or for an end an event stream
// never reaches. The headers go ahead of the body only for an event
// stream, whose open event is the headers; others go with their first
// part. A read returns what has arrived, so a fast answer still goes out in
// large writes.
func copyFlushing(w http.ResponseWriter, body io.Reader, headersFirst bool) {
	rc := http.NewResponseController(w)
	if headersFirst && rc.Flush() != nil {
		return
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil || rc.Flush() != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// headerSafe is s as a header value: one line of printable ASCII.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' {
			return ' '
		}
		return r
	}, s)
}
