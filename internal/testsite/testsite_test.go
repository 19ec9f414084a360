package testsite

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, h http.Handler, target string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestRoutes(t *testing.T) {
	h := New(Options{Items: 5})
	tests := []struct {
		path     string
		status   int
		location string
		contains []string
	}{
		{"/", 200, "", []string{"/page/{n}", "/hostile/crash"}},
		{"/page/7", 200, "", []string{"<title>Page 7</title>", "/api/item/7?items=5"}},
		{"/page/x", 400, "", []string{"bad n"}},
		{"/leak/2?mb=3", 200, "", []string{"<title>Leak 2</title>", "m < 3;"}},
		{"/links/4", 200, "", []string{`href="/page/40"`, `href="/page/49"`, `class="next" href="/links/5"`}},
		{"/status/503", 503, "", []string{"Status 503"}},
		{"/status/99", 400, "", nil},
		{"/redirect/2", 302, "/redirect/1", nil},
		{"/redirect/0", 302, "/page/0", nil},
		{"/redirect-loop", 302, "/redirect-loop", nil},
		{"/js-redirect/9", 200, "", []string{"location.replace('/page/9')"}},
		{"/slow/0", 200, "", []string{"slow 0"}},
		{"/hostile/alert", 200, "", []string{"alert(", "confirm("}},
		{"/hostile/beforeunload", 200, "", []string{"beforeunload"}},
		{"/hostile/popup", 200, "", []string{"window.open"}},
		{"/hostile/autodownload", 200, "", []string{"a.download", "/hostile/download"}},
		{"/hostile/loop", 200, "", []string{"for (;;) {}"}},
		{"/hostile/dom?n=10", 200, "", []string{"i < 10;"}},
		{"/hostile/dom?n=-1", 400, "", nil},
		{"/hostile/crash", 200, "", []string{"keep.push"}},
		{"/infinite", 200, "", []string{"/api/more/"}},
		{"/form", 200, "", []string{`id="q"`, `id="more"`}},
		{"/images", 200, "", []string{`src="/img/1.png"`}},
		{"/img/1.png", 200, "", []string{"PNG"}},
		{"/storage", 200, "", []string{"localStorage"}},
		{"/isolation/leave", 200, "", []string{"'pagehide', 'visibilitychange', 'unload'", "sendBeacon"}},
		{"/isolation/keepalive?ms=5", 200, "", []string{"keepalive&ms=5", "keepalive: true"}},
		{"/isolation/cookie?name=x", 204, "", nil},
		{"/isolation/cookie", 400, "", []string{"name is required"}},
		{"/console", 200, "", []string{"console.error", "throw new Error"}},
		{"/nope", 404, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			rec := get(t, h, tc.path, nil)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d; body %q", rec.Code, tc.status, rec.Body.String())
			}
			if got := rec.Header().Get("Location"); got != tc.location {
				t.Errorf("Location %q, want %q", got, tc.location)
			}
			for _, want := range tc.contains {
				if !strings.Contains(rec.Body.String(), want) {
					t.Errorf("body lacks %q:\n%s", want, rec.Body.String())
				}
			}
		})
	}
}

func TestAPIItem(t *testing.T) {
	h := New(Options{})
	rec := get(t, h, "/api/item/3?items=4", nil)
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	var out struct {
		ID    int    `json:"id"`
		Title string `json:"title"`
		Items []Item `json:"items"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.ID != 3 || out.Title != "Item 3" || len(out.Items) != 4 || out.Items[2].Name != "Item 3.2" {
		t.Fatalf("unexpected answer %+v", out)
	}
	// The default item count applies without ?items=.
	rec = get(t, h, "/api/item/1", nil)
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 200 {
		t.Fatalf("%d items by default, want 200", len(out.Items))
	}
}

func TestEcho(t *testing.T) {
	h := New(Options{})
	rec := get(t, h, "/echo", map[string]string{"X-Test": "a</script>b", "Cookie": "k=v", "User-Agent": "UA/1"})
	body := rec.Body.String()
	start := strings.Index(body, `type="application/json">`) + len(`type="application/json">`)
	end := strings.Index(body[start:], "</script>")
	if start < len(`type="application/json">`) || end < 0 {
		t.Fatalf("no data element in %s", body)
	}
	var data struct {
		Headers map[string]string `json:"headers"`
		Cookies map[string]string `json:"cookies"`
	}
	raw := strings.ReplaceAll(body[start:start+end], `<\/`, `</`)
	if err := json.Unmarshal([]byte(raw), &data); err != nil {
		t.Fatalf("%v in %s", err, raw)
	}
	if data.Headers["x-test"] != "a</script>b" || data.Cookies["k"] != "v" || data.Headers["user-agent"] != "UA/1" {
		t.Fatalf("unexpected echo %+v", data)
	}
}

func TestDownloadHeaders(t *testing.T) {
	rec := get(t, New(Options{}), "/hostile/download", nil)
	if cd := rec.Header().Get("Content-Disposition"); !strings.Contains(cd, "attachment") || !strings.Contains(cd, DownloadName) {
		t.Fatalf("Content-Disposition %q", cd)
	}
}

// TestServerEndsHang checks that Close ends a request that would otherwise
// never finish, so tests never wait on the site.
func TestServerEndsHang(t *testing.T) {
	s, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(s.URL + "/hang")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	var got []byte
	for !strings.Contains(string(got), "partial") {
		n, err := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("reading the partial page: %v (got %q)", err, got)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		done <- err
	}()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("/hang did not end after Close")
	}
}

// TestWaitsEndWithRequest checks that every waiting handler returns when
// its request's context ends.
func TestWaitsEndWithRequest(t *testing.T) {
	h := New(Options{})
	for _, p := range []string{"/hang", "/slow/600000", "/api/item/1?delay=600000", "/api/more/1?delay=600000"} {
		t.Run(p, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, p, nil)
			done := make(chan struct{})
			go func() {
				h.ServeHTTP(httptest.NewRecorder(), req)
				close(done)
			}()
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("handler did not return after its request ended")
			}
		})
	}
}

func TestStartStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(s.URL + "/page/1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/page/1")
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("server still serves after its context ended")
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
