package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"

	"github.com/browserfarm/browserfarm/browser/egress"
)

func TestRequestPrepare(t *testing.T) {
	ok := "http://127.0.0.1:8080/x"
	tests := []struct {
		name    string
		req     Request
		wantErr string // substring of the error; "" means valid
		check   func(t *testing.T, j *job)
	}{
		{name: "defaults", req: Request{URL: ok}, check: func(t *testing.T, j *job) {
			if j.Timeout != defaultTimeout || j.HTMLMaxBytes != defaultHTMLMaxBytes || j.FollowMax != defaultFollowMax || j.proxy != nil {
				t.Errorf("defaults not applied: %+v", j)
			}
		}},
		{name: "https", req: Request{URL: "https://example.com/"}},
		{name: "ftp", req: Request{URL: "ftp://example.com/"}, wantErr: "url: scheme"},
		{name: "javascript url", req: Request{URL: "javascript:alert(1)"}, wantErr: "url: scheme"},
		{name: "no host", req: Request{URL: "http:///path"}, wantErr: "url: no host"},
		{name: "unparsable", req: Request{URL: "http://[::1"}, wantErr: "url:"},
		{name: "negative timeout", req: Request{URL: ok, Timeout: -time.Second}, wantErr: "timeout"},
		{name: "timeout kept", req: Request{URL: ok, Timeout: time.Second}, check: func(t *testing.T, j *job) {
			if j.Timeout != time.Second {
				t.Errorf("timeout %v", j.Timeout)
			}
		}},
		{name: "unknown action", req: Request{URL: ok, Actions: []Action{{Type: "hover"}}}, wantErr: "actions[0]: unknown type"},
		{name: "click without selector", req: Request{URL: ok, Actions: []Action{{Type: "click"}}}, wantErr: "actions[0]: click needs a selector"},
		{name: "type without selector", req: Request{URL: ok, Actions: []Action{{Type: "scroll"}, {Type: "type", Text: "x"}}}, wantErr: "actions[1]: type needs a selector"},
		{name: "empty wait", req: Request{URL: ok, Actions: []Action{{Type: "wait"}}}, wantErr: "wait needs a selector or ms"},
		{name: "negative times", req: Request{URL: ok, Actions: []Action{{Type: "scroll", Times: -1}}}, wantErr: "times"},
		{name: "huge ms", req: Request{URL: ok, Actions: []Action{{Type: "wait", Ms: maxActionMs + 1}}}, wantErr: "ms"},
		{name: "good actions", req: Request{URL: ok, Actions: []Action{{Type: "click", Selector: "a"}, {Type: "scroll", Times: 3}, {Type: "type", Selector: "input", Text: "x"}, {Type: "wait", Ms: 10}}}},
		{name: "block", req: Request{URL: ok, Block: []string{"Image", "font", "image"}}, check: func(t *testing.T, j *job) {
			if len(j.block) != 2 || j.block[0] != network.ResourceTypeImage || j.block[1] != network.ResourceTypeFont {
				t.Errorf("block %v", j.block)
			}
		}},
		{name: "unknown block", req: Request{URL: ok, Block: []string{"ads"}}, wantErr: "block[0]"},
		{name: "bad header", req: Request{URL: ok, Headers: map[string]string{"X Y": "1"}}, wantErr: "headers"},
		{name: "ua newline", req: Request{URL: ok, UserAgent: "a\nb"}, wantErr: "user_agent"},
		{name: "viewport", req: Request{URL: ok, Viewport: Viewport{Width: 390, Height: 844, Mobile: true}}},
		{name: "tiny viewport", req: Request{URL: ok, Viewport: Viewport{Width: 10, Height: 800}}, wantErr: "viewport"},
		{name: "screenshot of 1080p", req: Request{URL: ok, Screenshot: true, Viewport: Viewport{Width: 1920, Height: 1080}}},
		{name: "8K viewport without a screenshot", req: Request{URL: ok, Viewport: Viewport{Width: 7680, Height: 4320}}},
		{name: "screenshot of 8K", req: Request{URL: ok, Screenshot: true, Viewport: Viewport{Width: 7680, Height: 4320}}, wantErr: "with a screenshot at most"},
		{name: "cookie without name", req: Request{URL: ok, Cookies: []Cookie{{Value: "v"}}}, wantErr: "cookies[0]"},
		{name: "proxy", req: Request{URL: ok, Proxy: "http://u:p@127.0.0.1:3128"}, check: func(t *testing.T, j *job) {
			if j.proxy == nil || j.proxy.server != "http://127.0.0.1:3128" || j.proxy.user != "u" || j.proxy.password != "p" || !j.proxy.hasAuth {
				t.Errorf("proxy %+v", j.proxy)
			}
		}},
		{name: "proxy with shared context", req: Request{URL: ok, Proxy: "http://127.0.0.1:3128", Isolation: IsolationShared}, wantErr: "proxy: needs"},
		{name: "bad proxy", req: Request{URL: ok, Proxy: "127.0.0.1:3128"}, wantErr: "proxy:"},
		{name: "follow max", req: Request{URL: ok, FollowSelector: "a", FollowMax: maxFollow + 1}, wantErr: "follow max"},
		{name: "html cap", req: Request{URL: ok, HTMLMaxBytes: -1}, wantErr: "html_max_bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j, err := tc.req.prepare()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				if ClassOf(err) != ClassInvalid || IsRetriable(err) {
					t.Fatalf("err %v: class %q retriable %v, want a permanent %q", err, ClassOf(err), IsRetriable(err), ClassInvalid)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tc.check != nil {
				tc.check(t, j)
			}
		})
	}
}

func TestParseProxy(t *testing.T) {
	tests := []struct {
		in, server, user, pass string
		auth                   bool
		err                    bool
	}{
		{in: "http://127.0.0.1:8080", server: "http://127.0.0.1:8080"},
		{in: "https://proxy.example:443", server: "https://proxy.example:443"},
		{in: "socks5://10.0.0.1:1080", server: "socks5://10.0.0.1:1080"},
		{in: "http://user:p%40ss@h:1", server: "http://h:1", user: "user", pass: "p@ss", auth: true},
		{in: "http://user@h:1", server: "http://h:1", user: "user", auth: true},
		{in: "socks5://u:p@h:1", err: true},
		{in: "ftp://h:1", err: true},
		{in: "http://h", err: true},
		{in: "http://h:1/path", err: true},
		{in: "http://[2001:db8::1]:3128", server: "http://[2001:db8::1]:3128"},
		{in: "http://under_score.example.:3128", server: "http://under_score.example.:3128"},
		// Chrome would read a list: a.example.com, then 169.254.169.254.
		{in: "http://a.example.com,169.254.169.254:80", err: true},
		{in: "http://a;b:80", err: true},
		{in: "http://a=b:80", err: true},
		{in: "http://-a.example:80", err: true},
		{in: "http://a..example:80", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			p, err := parseProxy(tc.in)
			if tc.err {
				if err == nil {
					t.Fatalf("got %+v, want an error", p)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.server != tc.server || p.user != tc.user || p.password != tc.pass || p.hasAuth != tc.auth {
				t.Fatalf("got %+v", p)
			}
		})
	}
}

func TestClassifyNetError(t *testing.T) {
	tests := []struct {
		text      string
		class     string
		retriable bool
	}{
		{"net::ERR_TOO_MANY_REDIRECTS", ClassRedirect, false},
		{"net::ERR_CONNECTION_REFUSED", ClassNetwork, true},
		{"net::ERR_CONNECTION_RESET", ClassNetwork, true},
		{"net::ERR_NAME_NOT_RESOLVED", ClassNetwork, true},
		{"net::ERR_PROXY_CONNECTION_FAILED", ClassNetwork, true},
		{"net::ERR_CERT_AUTHORITY_INVALID", ClassNetwork, false},
		{"net::ERR_UNSAFE_PORT", ClassInvalid, false},
		{"net::ERR_BLOCKED_BY_CLIENT", ClassNetwork, false},
		{"net::ERR_ABORTED", ClassNetwork, true},
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			c, r := classifyNetError(tc.text)
			if c != tc.class || r != tc.retriable {
				t.Fatalf("got %s/%v, want %s/%v", c, r, tc.class, tc.retriable)
			}
		})
	}
}

func TestHTTPRetriable(t *testing.T) {
	for status, want := range map[int]bool{400: false, 403: false, 404: false, 408: true, 410: false, 425: true, 429: true, 500: true, 502: true, 503: true} {
		if got := httpRetriable(status); got != want {
			t.Errorf("httpRetriable(%d) = %v, want %v", status, got, want)
		}
	}
}

func TestErrorHelpers(t *testing.T) {
	base := errors.New("boom")
	tests := []struct {
		name      string
		err       error
		class     string
		retriable bool
	}{
		{"nil", nil, "", false},
		{"plain", base, ClassInternal, true},
		{"typed", &Error{Class: ClassExtract, Err: base}, ClassExtract, false},
		{"wrapped", fmt.Errorf("job 7: %w", &Error{Class: ClassTimeout, Retriable: true, Err: base}), ClassTimeout, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClassOf(tc.err); got != tc.class {
				t.Errorf("ClassOf = %q, want %q", got, tc.class)
			}
			if got := IsRetriable(tc.err); got != tc.retriable {
				t.Errorf("IsRetriable = %v, want %v", got, tc.retriable)
			}
		})
	}
	e := &Error{Class: ClassTimeout, Retriable: true, Err: base}
	if !errors.Is(e, base) {
		t.Error("Error does not unwrap to its cause")
	}
	if !strings.Contains(e.Error(), "timeout (retriable): boom") {
		t.Errorf("message %q", e.Error())
	}
}

// TestMarkBeforePage: only a lost Chrome's failure is marked, the error
// given left as it was (a lost Chrome's error is shared by all its jobs),
// keeping its class, retriability and cause.
func TestMarkBeforePage(t *testing.T) {
	base := errors.New("boom")
	for _, tc := range []struct {
		name   string
		err    error
		marked bool
	}{
		{"nil", nil, false},
		{"plain", base, false},
		{"crashed", &Error{Class: ClassCrashed, Retriable: true, Err: base}, true},
		{"unresponsive, wrapped", fmt.Errorf("new session: %w", &Error{Class: ClassUnresponsive, Retriable: true, Err: base}), true},
		{"timeout", &Error{Class: ClassTimeout, Retriable: true, Err: base}, false},
		{"canceled", &Error{Class: ClassCanceled, Retriable: true, Err: base}, false},
		{"invalid", &Error{Class: ClassInvalid, Err: base}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := MarkBeforePage(tc.err)
			if FailedBeforePage(got) != tc.marked {
				t.Fatalf("FailedBeforePage(MarkBeforePage(%v)) = %v, want %v", tc.err, !tc.marked, tc.marked)
			}
			if FailedBeforePage(tc.err) {
				t.Errorf("the error given was marked itself: %v", tc.err)
			}
			if ClassOf(got) != ClassOf(tc.err) || IsRetriable(got) != IsRetriable(tc.err) {
				t.Errorf("marked %v: class %q retriable %v, want %q %v", got, ClassOf(got), IsRetriable(got), ClassOf(tc.err), IsRetriable(tc.err))
			}
			if tc.err != nil && !errors.Is(got, base) {
				t.Errorf("marked %v lost its cause", got)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		in   string
		want procStat
		err  bool
	}{
		{in: "123 (chromium) S 1 123 123 0 -1", want: procStat{state: 'S', ppid: 1, pgrp: 123}},
		{in: "7 (a) b (c)) Z 5 6 6 0", want: procStat{state: 'Z', ppid: 5, pgrp: 6}},
		{in: "8 (x y) R 2 3", want: procStat{state: 'R', ppid: 2, pgrp: 3}},
		{in: "garbage", err: true},
		{in: "9 (x) S", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseStat([]byte(tc.in))
			if tc.err {
				if err == nil {
					t.Fatalf("got %+v, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestCutUTF8(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 3, "hel"},
		{"héllo", 2, "h"}, // é is two bytes: never split it
		{"héllo", 3, "hé"},
		{"日本", 4, "日"},
		{"日本", 0, ""},
	}
	for _, tc := range tests {
		if got := cutUTF8(tc.in, tc.n); got != tc.want {
			t.Errorf("cutUTF8(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestRemoteValue(t *testing.T) {
	tests := []struct {
		name string
		in   *runtime.RemoteObject
		want string
	}{
		{"nil", nil, "null"},
		{"undefined", &runtime.RemoteObject{Type: runtime.RemoteObjectTypeUndefined}, "null"},
		{"object", &runtime.RemoteObject{Type: runtime.RemoteObjectTypeObject, Value: []byte(`{"a":1}`)}, `{"a":1}`},
		{"NaN", &runtime.RemoteObject{Type: runtime.RemoteObjectTypeNumber, UnserializableValue: "NaN"}, `"NaN"`},
		{"bigint", &runtime.RemoteObject{Type: runtime.RemoteObjectTypeBigint, UnserializableValue: "12n"}, `"12n"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := remoteValue(tc.in)
			if string(got) != tc.want || !json.Valid(got) {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestConsoleText(t *testing.T) {
	args := []*runtime.RemoteObject{
		{Type: runtime.RemoteObjectTypeString, Value: []byte(`"boom"`)},
		{Type: runtime.RemoteObjectTypeNumber, Value: []byte(`42`)},
		{Type: runtime.RemoteObjectTypeObject, Description: "HTMLDivElement"},
		{Type: runtime.RemoteObjectTypeNumber, UnserializableValue: "Infinity"},
		{Type: runtime.RemoteObjectTypeUndefined},
	}
	if got, want := consoleText(args), "boom 42 HTMLDivElement Infinity undefined"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestJobStateConsoleCap(t *testing.T) {
	j, err := Request{URL: "http://x.test/", MaxConsoleErrors: 7}.prepare()
	if err != nil {
		t.Fatal(err)
	}
	st := newJobState(j, func(error) {})
	long := strings.Repeat("x", 3*maxConsoleLen)
	for range 7 + 5 {
		st.consoleError(long)
	}
	msgs, _ := st.consoleAndDialogs()
	if len(msgs) != 7 {
		t.Fatalf("%d messages kept, want 7 (MaxConsoleErrors)", len(msgs))
	}
	if len(msgs[0]) > maxConsoleLen+len("…") {
		t.Fatalf("message of %d bytes kept", len(msgs[0]))
	}
}

func TestNamesProfile(t *testing.T) {
	dir := "/tmp/bfc-12"
	flag, inside := []byte("--user-data-dir="+dir), []byte(dir+"/")
	tests := []struct {
		cmdline string
		want    bool
	}{
		{"chromium\x00--type=renderer\x00--user-data-dir=/tmp/bfc-12\x00", true},
		{"chrome_crashpad_handler\x00--database=/tmp/bfc-12/xdg-config/chromium/Crash Reports\x00", true},
		{"chromium\x00--user-data-dir=/tmp/bfc-123\x00", false},
		{"chrome_crashpad_handler\x00--database=/tmp/bfc-123/xdg-config\x00", false},
		{"bash\x00-c\x00ls\x00", false},
		{"/usr/lib/chromium/chromium --type=renderer --user-data-dir=/tmp/bfc-12 --lang=en-US", true},
		{"/usr/lib/chromium/chromium --type=renderer --user-data-dir=/tmp/bfc-12", true},
		{"/usr/lib/chromium/chromium --type=renderer --user-data-dir=/tmp/bfc-123 --lang=en-US", false},
	}
	for _, tc := range tests {
		if got := namesProfile([]byte(tc.cmdline), flag, inside); got != tc.want {
			t.Errorf("namesProfile(%q) = %v, want %v", tc.cmdline, got, tc.want)
		}
	}
}

func TestMergeFeatureFlags(t *testing.T) {
	tests := []struct {
		in, want []string
	}{
		{[]string{"--headless", "--disable-features=A,B", "--x"}, []string{"--headless", "--disable-features=A,B", "--x"}},
		{[]string{"--disable-features=A", "--y", "--disable-features=C", "--enable-features=E", "--enable-features=F"},
			[]string{"--disable-features=A,C", "--y", "--enable-features=E,F"}},
		{[]string{"--disable-features=A", "--disable-features="}, []string{"--disable-features=A"}},
		{[]string{"--disable-features-foo=1", "--disable-features-foo=2"}, []string{"--disable-features-foo=1", "--disable-features-foo=2"}},
	}
	for _, tc := range tests {
		if got := mergeFeatureFlags(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("mergeFeatureFlags(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestEgressHeadersAgree(t *testing.T) {
	if egressRefusedHeader != egress.RefusedHeader {
		t.Errorf("browser looks for %q, the egress proxy sets %q", egressRefusedHeader, egress.RefusedHeader)
	}
	if egressFailedHeader != egress.FailedHeader {
		t.Errorf("browser looks for %q, the egress proxy sets %q", egressFailedHeader, egress.FailedHeader)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestFailedLaunchLeaksNothing: a launch that fails making Chrome's temp dir
// (a TMPDIR too long for Chrome's socket path) leaves no descriptor open and
// no directory behind, the temp dir with its owner mark included.
func TestFailedLaunchLeaksNothing(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("x", 80))
	if err := os.MkdirAll(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	before := openFDs(t)
	for range 5 {
		_, err := Launch(context.Background(), Options{ProfileRoot: long, ExecPath: "/bin/true"})
		if err == nil || !strings.Contains(err.Error(), "too long") {
			t.Fatalf("launch: %v, want the temp dir error", err)
		}
	}
	if after := openFDs(t); after != before {
		t.Errorf("open descriptors: %d before 5 failed launches, %d after", before, after)
	}
	ents, err := os.ReadDir(long)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left under the profile root: %s", e.Name())
	}
}

func TestContextStats(t *testing.T) {
	var a, b ContextStats
	a.Reused, a.Replaced[ReplacedWorker], a.Replaced[ReplacedInFlight] = 3, 1, 2
	b.Reused, b.Replaced[ReplacedWorker], b.Replaced[ReplacedAuth] = 4, 5, 1
	a.Add(b)
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"reused", a.Reused, int64(7)},
		{"total", a.ReplacedTotal(), int64(9)},
		{"by reason", fmt.Sprint(a.ByReason()), "map[auth:1 in_flight:2 worker:6]"},
		{"none", fmt.Sprint(ContextStats{Reused: 2}.ByReason()), "map[]"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// Every reason has a name of its own: log fields and the README use them.
	names := map[string]bool{}
	for r := range numReplaceReasons {
		n := r.String()
		if n == "unknown" || names[n] {
			t.Errorf("reason %d: name %q", r, n)
		}
		names[n] = true
	}
}

// TestNoBlockedURLsSendsTheEmptyList: lifting the wipe's block sends an
// empty list of patterns, not a call without the field.
func TestNoBlockedURLsSendsTheEmptyList(t *testing.T) {
	b, err := json.Marshal(noBlockedURLs{URLPatterns: []*network.BlockPattern{}})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"urlPatterns":[]}` {
		t.Fatalf("lifting the block sends %s", b)
	}
}

func TestEnviron(t *testing.T) {
	environ := []string{"PATH=/usr/bin", "FARM_DATABASE_URL=postgres://u:pw@db/farm", "TZ=UTC", "LC_ALL=C",
		"https_proxy=http://user:pw@proxy:3128", "NO_PROXY=.internal", "XDG_DATA_DIRS=/usr/share", "CHROMIUM_FLAGS=--x",
		"FONTCONFIG_FILE=/etc/f.conf", "FARM_API_TOKEN=t", "PGPASSWORD=pw", "AWS_SECRET_ACCESS_KEY=k",
		"DATABASE_URL=postgres://x", "tz=lower", "WRAPPER_HOME=/opt/w", "=odd", "NOEQUALS"}
	read := []string{"PATH=/usr/bin", "TZ=UTC", "LC_ALL=C", "XDG_DATA_DIRS=/usr/share", "CHROMIUM_FLAGS=--x", "FONTCONFIG_FILE=/etc/f.conf"}
	tests := []struct {
		name    string
		environ []string
		extra   []string
		want    []string
	}{
		{"what Chrome reads", environ, nil, read},
		{"and what the caller names", environ, []string{"WRAPPER_HOME", "MISSING"}, append(slices.Clone(read), "WRAPPER_HOME=/opt/w")},
		// Empty, not nil: nil would be Options.Env's default.
		{"nothing Chrome reads", []string{"FARM_API_TOKEN=t"}, nil, []string{}},
		{"no environment", nil, nil, []string{}},
	}
	for _, tc := range tests {
		got := Environ(tc.environ, tc.extra...)
		if !slices.Equal(got, tc.want) || got == nil {
			t.Errorf("%s: Environ = %#v, want %#v", tc.name, got, tc.want)
		}
	}
}

func TestHeaderLanguages(t *testing.T) {
	for _, tc := range []struct{ header, want string }{
		{"fr-CH, fr;q=0.9, en;q=0.8, *;q=0.5", "fr-CH,fr,en"},
		{"de;q=0.2, it-IT , *;q=0.1", "it-IT,de"},
		{"da, en-GB;q=0.8, en;q=0.8", "da,en-GB,en"}, // equal weights keep their order
		{"en;Q=0.3,ja", "ja,en"},
		{"ja;q=0, ko", "ko"}, // q=0: not wanted
		{"nl;q=x", "nl"},     // a weight that is no number counts as 1
		{"*", ""},            // names no language
		{" , ,", ""},
		{"", ""},
	} {
		if got := headerLanguages(tc.header); got != tc.want {
			t.Errorf("headerLanguages(%q) = %q, want %q", tc.header, got, tc.want)
		}
	}
}
