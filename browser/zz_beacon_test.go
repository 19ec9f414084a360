package browser

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestZZBeaconLeak(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/beacon":
			time.Sleep(300 * time.Millisecond)
			http.SetCookie(w, &http.Cookie{Name: "bc", Value: "1", Path: "/", MaxAge: 3600})
			w.WriteHeader(204)
			return
		case "/a":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<html><body><div id=ready>a</div><script>
try { fetchLater('/beacon?f=3', {method: 'POST', body: 'z'}); document.title = 'fl ok'; } catch (e) { document.title = 'fl ' + e; }
</script></body></html>`)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><body><div id=ready>b</div></body></html>`)
	}))
	defer srv.Close()
	e := newEnv(t)
	s := e.session(t)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := s.Render(ctx, Request{URL: srv.URL + "/a", Wait: Wait{Selector: "#ready"}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		r0, _ := s.Render(ctx, Request{URL: srv.URL + "/a", Wait: Wait{Selector: "#ready"}, Extract: "document.title"}); t.Logf("a: %s", r0.Data)
		time.Sleep(500 * time.Millisecond)
		res, err := s.Render(ctx, Request{URL: srv.URL + "/b", Wait: Wait{Selector: "#ready"}, Extract: `document.cookie`})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("job B sees: %s", res.Data)
	}
}
