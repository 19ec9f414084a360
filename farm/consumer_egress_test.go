package farm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/browser/egress"
	"github.com/browserfarm/browserfarm/internal/jobspec"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// forbiddenSite is a server no job may reach; it counts what reaches it.
func forbiddenSite(t *testing.T, ip string) (addr string, hits *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	hits = new(atomic.Int64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><title>secret</title><div id="ready">secret</div></html>`)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), hits
}

// TestConsumerEgressPolicy runs jobs on a node whose policy allows exactly the
// test site's address and port. A job to another loopback address or port,
// a page redirecting there, a page fetching and framing loopback and
// link-local addresses, a job proxy on loopback and followed links to
// private and loopback addresses are each refused, and nothing reaches the
// forbidden servers; the allowed site renders.
func TestConsumerEgressPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site := testutil.StartSite(t, testsite.Options{Items: 20})
	siteURL, _ := url.Parse(site.URL)
	allow, err := egress.ParseRule(siteURL.Host) // 127.0.0.1:PORT, that port only
	if err != nil {
		t.Fatal(err)
	}
	other, otherHits := forbiddenSite(t, "127.0.0.2")   // another loopback address
	samePort, sameHits := forbiddenSite(t, "127.0.0.1") // the allowed address, another port
	_, otherPort, _ := net.SplitHostPort(other)

	db := newTestDB(t)
	q := func(v string) string { return url.QueryEscape(v) }
	specs := []jobqueue.Spec{
		{URL: "http://" + other + "/"},
		{URL: "http://" + samePort + "/"},
		{URL: site.URL + "/egress/redirect?to=" + q("http://"+other+"/")},
		{URL: site.URL + "/egress/page?fetch=" + q("http://"+other+"/") + "&fetch=" + q("http://"+samePort+"/") +
			"&fetch=" + q("http://[fe80::1]:"+otherPort+"/") + "&fetch=" + q(site.URL+"/status/204") +
			"&frame=" + q("http://"+other+"/") + "&frame=" + q("http://[fe80::1]:"+otherPort+"/"),
			Wait: &jobqueue.Wait{Selector: "#ready"}, Extract: `document.getElementById('out').textContent`},
		{URL: site.URL + "/page/1", Proxy: "http://" + other},
		{URL: site.URL + "/egress/links?to=" + q("http://10.1.2.3/a") + "&to=" + q("http://"+other+"/b") +
			"&to=" + q("http://[::1]:"+otherPort+"/c") + "&to=" + q(site.URL+"/page/3"),
			Follow: &jobqueue.Follow{Selector: "a.out", MaxDepth: 1, AnyHost: true}},
		{URL: "https://" + other + "/"}, // a tunnel (CONNECT) refused
		// Not refusals: failures that keep what the page answered.
		{URL: site.URL + "/status/404"},
		{URL: site.URL + "/img/1.png", Wait: &jobqueue.Wait{Selector: "#ready"}, TimeoutMS: 60_000},
		{URL: site.URL + "/egress/redirect?to=" + q("https://"+other+"/")}, // a redirect to a refused tunnel
	}
	for i := range specs {
		specs[i].MaxAttempts = 1
	}
	batch, ids, err := db.q.Enqueue(context.Background(), specs)
	if err != nil {
		t.Fatal(err)
	}
	const node = "node-egress"
	db.startAssigner(t, node, defaultCapacity())
	rc := startConsumer(t, db, node, shortProfileRoot(t), func(c *ConsumerConfig) {
		c.Egress = egress.Policy{Allow: []egress.Rule{allow}}
	})
	testutil.Eventually(t, 2*time.Minute, "every job final", func() bool {
		c := db.counts(t, batch)
		return c.Finished() == c.Total
	})
	get := func(id int64) jobqueue.Job {
		j, err := db.q.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	for i, refused := range map[int]string{0: other, 1: samePort, 2: other, 4: other, 6: other, 9: other} {
		j := get(ids[i])
		if j.State != jobqueue.StateFailed || j.ErrorClass != "destination_refused" || !strings.Contains(j.LastError, refused) {
			t.Errorf("job %d (%s): %s, class %q, error %q; want failed destination_refused naming %s",
				i, specs[i].URL, j.State, j.ErrorClass, j.LastError, refused)
		}
	}
	if j := get(ids[3]); j.State != jobqueue.StateCompleted {
		t.Errorf("page with refused subresources: %s %q, want completed", j.State, j.LastError)
	} else {
		r, err := db.q.GetResult(context.Background(), ids[3])
		if err != nil {
			t.Fatal(err)
		}
		var out string
		if err := json.Unmarshal(r.Data, &out); err != nil {
			t.Fatalf("data %s: %v", r.Data, err)
		}
		// Cross-origin no-cors answers are opaque (status 0) whatever
		// they were: the forbidden servers' counters and the proxy's
		// record of refusals say what happened to them.
		if !strings.Contains(out, site.URL+"/status/204 ok 204") {
			t.Errorf("the allowed fetch did not succeed: %q", out)
		}
		for _, hp := range []string{other, samePort, "[fe80::1]:" + otherPort} {
			if f, ok := rc.c.egress.Failure(hp); !ok || !f.Refused {
				t.Errorf("the proxy has no refusal of %s on record", hp)
			}
		}
	}
	// Only the allowed link became a child, and it rendered.
	page, err := db.q.List(context.Background(), jobqueue.ListFilter{BatchID: batch})
	if err != nil {
		t.Fatal(err)
	}
	var children []string
	for _, j := range page.Jobs {
		if j.ParentID == ids[5] {
			children = append(children, j.Spec.URL)
			if j.State != jobqueue.StateCompleted {
				t.Errorf("child %s: %s %q", j.Spec.URL, j.State, j.LastError)
			}
		}
	}
	if len(children) != 1 || children[0] != site.URL+"/page/3" {
		t.Errorf("children %v, want only %s/page/3", children, site.URL)
	}
	for i, want := range map[int]struct {
		class  string
		status int
	}{7: {"http", 404}, 8: {"not_html", 200}} {
		j := get(ids[i])
		if j.State != jobqueue.StateFailed || j.ErrorClass != want.class {
			t.Errorf("job %d: %s %q %q, want failed %s", i, j.State, j.ErrorClass, j.LastError, want.class)
		}
		if j.FinishedAt.Sub(*j.StartedAt) > 30*time.Second {
			t.Errorf("job %d took %v to fail; it should fail at once", i, j.FinishedAt.Sub(*j.StartedAt))
		}
		r, err := db.q.GetResult(context.Background(), ids[i])
		if err != nil || r.Status != want.status {
			t.Errorf("job %d: result %+v, %v; want the status %d kept", i, r, err, want.status)
		}
	}
	if n := otherHits.Load() + sameHits.Load(); n != 0 {
		t.Errorf("the forbidden servers got %d requests", n)
	}
}

// TestPinProxy: a job's http or socks5 proxy reaches Chrome as the address
// the egress check approved, so that Chrome never resolves the name again
// (a rebinding name could answer a private address then); an https proxy
// keeps its name for its certificate; a refused proxy fails the job.
func TestPinProxy(t *testing.T) {
	approved := map[string]netip.Addr{
		"proxy.example": netip.MustParseAddr("203.0.113.7"),
		"v6.example":    netip.MustParseAddr("2001:db8::1"),
	}
	check := func(_ context.Context, host string, port uint16) (netip.AddrPort, error) {
		if a, err := netip.ParseAddr(host); err == nil {
			return netip.AddrPortFrom(a, port), nil
		}
		if a, ok := approved[host]; ok {
			return netip.AddrPortFrom(a, port), nil
		}
		return netip.AddrPort{}, &egress.RefusedError{Host: host, Addr: netip.MustParseAddrPort("169.254.169.254:80")}
	}
	for _, tc := range []struct {
		in, want, class string
	}{
		{in: "", want: ""},
		{in: "http://proxy.example:3128", want: "http://203.0.113.7:3128"},
		{in: "http://user:p%40ss@proxy.example:3128", want: "http://user:p%40ss@203.0.113.7:3128"},
		{in: "socks5://v6.example:1080", want: "socks5://[2001:db8::1]:1080"},
		{in: "https://proxy.example:443", want: "https://proxy.example:443"},
		{in: "http://198.51.100.2:8080", want: "http://198.51.100.2:8080"},
		{in: "http://rebind.example:80", class: browser.ClassDestinationRefused},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := pinProxy(context.Background(), check, tc.in)
			if tc.class != "" {
				var be *browser.Error
				if !errors.As(err, &be) || be.Class != tc.class {
					t.Fatalf("pinProxy = %q, %v; want class %s", got, err, tc.class)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("pinProxy = %q, %v; want %q", got, err, tc.want)
			}
			// What Chrome gets must still be a proxy it takes.
			if _, err := jobspec.ParseProxy(got); got != "" && err != nil {
				t.Errorf("the pinned proxy %q does not parse: %v", got, err)
			}
		})
	}
}
