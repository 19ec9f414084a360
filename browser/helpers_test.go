package browser

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) {
	// Every goroutine started by a Browser or Session must end with Kill
	// and Close: the whole package's tests end with none left.
	goleak.VerifyTestMain(m)
}

// testKind is the browser the tests drive: $FARM_TEST_BROWSER (shell or
// chrome), else the default discovery (the shell if installed). The test
// script runs the package once with each.
func testKind(t testing.TB) Kind {
	k, err := ParseKind(os.Getenv("FARM_TEST_BROWSER"))
	if err != nil {
		t.Fatalf("FARM_TEST_BROWSER: %v", err)
	}
	return k
}

// testFlags are the extra Chrome flags of the tests' browsers. The heap cap
// makes /hostile/crash run out of memory in about a second instead of after
// gigabytes.
var testFlags = []string{"--js-flags=--max-old-space-size=256"}

// env is one Chrome and one test site shared by a group of tests.
type env struct {
	site *testsite.Server
	b    *Browser
	root string // profile root of this env's Chrome
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{site: testutil.StartSite(t, testsite.Options{}), root: t.TempDir()}
	e.b = launch(t, Options{ProfileRoot: e.root, Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))})
	return e
}

// launch starts the tests' browser (testKind, testFlags, a profile root of
// the test's own unless opts has one) and kills it when the test ends.
func launch(t testing.TB, opts Options) *Browser {
	t.Helper()
	opts.Kind = testKind(t)
	opts.ExtraFlags = append(append([]string(nil), testFlags...), opts.ExtraFlags...)
	if opts.ProfileRoot == "" {
		opts.ProfileRoot = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Launch(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Kill(); err != nil {
			t.Errorf("kill: %v", err)
		}
	})
	return b
}

func (e *env) url(path string) string { return e.site.URL + path }

func (e *env) session(t testing.TB) *Session {
	t.Helper()
	return openSession(t, e.b)
}

// procArgs returns the words of process pid's command line, nil once it is
// gone. Chrome's helpers rewrite theirs as one space-separated string, so
// it is split on spaces as well as NULs.
func procArgs(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil
	}
	return strings.Fields(strings.ReplaceAll(string(data), "\x00", " "))
}

// openSession opens a session on b and closes it when the test ends.
func openSession(t testing.TB, b *Browser) *Session {
	t.Helper()
	s, err := b.NewSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close session: %v", err)
		}
	})
	return s
}

// usable checks that Chrome answers and that the session still renders a
// page with its JavaScript: what must hold after every hostile page.
func (e *env) usable(t *testing.T, s *Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.b.Healthy(ctx); err != nil {
		t.Fatalf("chrome unhealthy afterwards: %v", err)
	}
	res, err := s.Render(ctx, Request{URL: e.url("/page/1"), Wait: Wait{Selector: "#ready"}, Extract: "document.querySelectorAll('li.item').length"})
	if err != nil {
		t.Fatalf("session unusable afterwards: %v", err)
	}
	if string(res.Data) != "200" {
		t.Fatalf("afterwards /page/1 rendered %s items, want 200", res.Data)
	}
}

// waitPrepared waits until the session's own tab is ready for the next
// job: the wipe that follows a job runs in the background.
func waitPrepared(t *testing.T, s *Session) {
	t.Helper()
	s.mu.Lock()
	p := s.own
	s.mu.Unlock()
	if p == nil {
		t.Fatal("the session prepares no tab")
	}
	select {
	case <-p.done:
	case <-time.After(tabTimeout):
		t.Fatalf("the session's tab not ready after %v", tabTimeout)
	}
	if p.err != nil || p.t == nil {
		t.Fatalf("preparing the session's tab: %v", p.err)
	}
}

// render runs one request and returns its result, error and duration.
func render(t *testing.T, s *Session, req Request) (*Result, error, time.Duration) {
	t.Helper()
	start := time.Now()
	res, err := s.Render(context.Background(), req)
	return res, err, time.Since(start)
}

func wantClass(t *testing.T, err error, class string, retriable bool) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want class %q", class)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is %T, want *Error", err, err)
	}
	if e.Class != class || e.Retriable != retriable {
		t.Fatalf("error %v: class %q retriable %v, want %q retriable %v", err, e.Class, e.Retriable, class, retriable)
	}
}

// wantDuration checks a render's duration bounds. The lower bound is a fact
// (a timeout cannot end early); the upper bound is generous: it catches a
// render that hangs past its timeout, not a slow machine.
func wantDuration(t *testing.T, d, lo, hi time.Duration) {
	t.Helper()
	if d < lo || d > hi {
		t.Fatalf("took %v, want between %v and %v", d, lo, hi)
	}
}

func unmarshal(t *testing.T, data json.RawMessage, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
}

// testProxy is a forward HTTP proxy that demands basic credentials (when
// user is set), marks what it forwards with X-Via-Proxy and counts requests.
type testProxy struct {
	*httptest.Server
	served  atomic.Int32
	refused atomic.Int32 // requests answered 407
}

func newTestProxy(t *testing.T, user, pass string) *testProxy {
	p := &testProxy{}
	transport := &http.Transport{Proxy: nil}
	t.Cleanup(transport.CloseIdleConnections)
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect || !r.URL.IsAbs() {
			http.Error(w, "plain HTTP forward proxy only", http.StatusMethodNotAllowed)
			return
		}
		if user != "" && r.Header.Get("Proxy-Authorization") != want {
			p.refused.Add(1)
			w.Header().Set("Proxy-Authenticate", `Basic realm="farm"`)
			http.Error(w, "proxy auth required", http.StatusProxyAuthRequired)
			return
		}
		p.served.Add(1)
		out, err := http.NewRequestWithContext(r.Context(), r.Method, r.URL.String(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		out.Header.Del("Proxy-Authorization")
		out.Header.Del("Proxy-Connection")
		out.Header.Set("X-Via-Proxy", "farm-test")
		resp, err := transport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		// A client that went away ends the copy; nothing to report.
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(p.Server.Close)
	return p
}

// closedAddr is a loopback address where nothing listens: a port taken
// and let go again, which refuses connections.
func closedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
