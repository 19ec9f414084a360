package browser

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/browserfarm/browserfarm/browser/egress"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
)

// TestEgressProxyLaunch: a Chrome launched behind an egress proxy sends
// loopback hosts through it too (Chrome bypasses proxies for loopback by
// default), so the policy refuses another loopback address, and WebRTC sends
// no UDP that does not go through the proxy (a STUN server on loopback
// receives nothing).
func TestEgressProxyLaunch(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site := testutil.StartSite(t, testsite.Options{})
	proxy := serveSiteProxy(t, site.URL)

	// A STUN "server" on another loopback address counts what reaches it.
	udp, err := net.ListenPacket("udp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	packets := make(chan struct{}, 64)
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			select {
			case packets <- struct{}{}:
			default:
			}
		}
	}()

	b := launch(t, Options{EgressProxy: proxy.URL(), EgressFailure: proxy.Failure, Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))})
	s := openSession(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	forbidden, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer forbidden.Close()
	_, err = s.Render(ctx, Request{URL: "http://" + forbidden.Addr().String() + "/"})
	var e *Error
	if !errors.As(err, &e) || e.Class != ClassDestinationRefused {
		t.Fatalf("render of another loopback address: %v, want %s", err, ClassDestinationRefused)
	}

	stun := udp.LocalAddr().String()
	res, err := s.Render(ctx, Request{URL: site.URL + "/page/1", Wait: Wait{Selector: "#ready"}, Extract: fmt.Sprintf(`(async () => {
  const pc = new RTCPeerConnection({iceServers: [{urls: 'stun:%s'}]});
  pc.createDataChannel('x');
  const kinds = [];
  pc.onicecandidate = e => { if (e.candidate) kinds.push(e.candidate.type); };
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise(r => setTimeout(r, 2000));
  pc.close();
  return kinds;
})()`, stun)})
	if err != nil {
		t.Fatalf("WebRTC page: %v", err)
	}
	select {
	case <-packets:
		t.Errorf("a UDP packet reached %s past the proxy (candidates %s)", stun, res.Data)
	default:
	}
}

// TestEgressRefusedLaterNavigation: a page that sends the tab on to a
// refused destination — by a script, by a meta refresh, through a redirect
// of an allowed page, or to an https address whose tunnel is refused —
// fails its job at once, permanently, with class destination_refused naming
// the address, as a refused job URL does; nothing reaches the address.
// Without it the job would wait for #ready on the egress proxy's refusal
// page (or Chrome's error page) until its timeout, or complete there.
func TestEgressRefusedLaterNavigation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site := testutil.StartSite(t, testsite.Options{})
	proxy := serveSiteProxy(t, site.URL)
	forbidden := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("%s reached the refused destination", r.URL)
		fmt.Fprint(w, `<div id="ready">reached</div>`)
	}))
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	forbidden.Listener = ln
	forbidden.Start()
	defer forbidden.Close()
	addr := ln.Addr().String()

	b := launch(t, Options{EgressProxy: proxy.URL(), EgressFailure: proxy.Failure, Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))})
	s := openSession(t, b)
	to := func(u string) string { return url.QueryEscape(u) }
	for _, u := range []string{
		site.URL + "/egress/navigate?to=" + to("http://"+addr+"/script"),
		site.URL + "/egress/navigate?by=meta&to=" + to("http://"+addr+"/meta"),
		site.URL + "/egress/navigate?to=" + to(site.URL+"/egress/redirect?to="+to("http://"+addr+"/redirected")),
		site.URL + "/egress/navigate?to=" + to("https://"+addr+"/tunnel"),
	} {
		_, err, _ := render(t, s, Request{URL: u, Wait: Wait{Selector: "#ready"}, Timeout: 20 * time.Second})
		wantClass(t, err, ClassDestinationRefused, false)
		if !strings.Contains(err.Error(), "destination "+addr+" refused") {
			t.Errorf("%s: error %q; want it to name %s", u, err, addr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Render(ctx, Request{URL: site.URL + "/page/1", Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatalf("the session afterwards: %v", err)
	}
}

// TestEgressFailureNamed: a page the egress proxy could not resolve or
// connect fails as a retriable network error naming the cause, over http
// (the proxy's own 502) and https (a tunnel Chrome reports only as
// failed); a site's own 502 stays an HTTP 502, whatever headers it sends.
func TestEgressFailureNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site := testutil.StartSite(t, testsite.Options{})
	u, err := url.Parse(site.URL)
	if err != nil {
		t.Fatal(err)
	}
	dead := closedAddr(t)
	// A site that answers 502 as if it were the proxy.
	forger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(egress.FailedHeader, "forged: no such host")
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, "bad gateway")
	}))
	defer forger.Close()
	rules, err := egress.ParseRules(u.Host + "," + dead + "," + strings.TrimPrefix(forger.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := egress.Listen("127.0.0.1:0", egress.Config{Policy: egress.Policy{Allow: rules}, Resolver: noNames{}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Background(t, "proxy", proxy.Serve)
	b := launch(t, Options{EgressProxy: proxy.URL(), EgressFailure: proxy.Failure, Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))})
	s := openSession(t, b)
	goesTo := func(by, to string) string {
		return site.URL + "/egress/navigate?by=" + by + "&to=" + url.QueryEscape(to)
	}
	// status: the site's answer kept with the failure; the filter's own
	// 502 is no site's answer (QA: network failures said 502).
	for _, tc := range []struct {
		url, class, says string
		retriable        bool
		status           int
	}{
		{"http://nowhere.test/", ClassNetwork, "no such host", true, 0},
		{"https://nowhere.test/", ClassNetwork, "no such host", true, 0},
		{"http://" + dead + "/", ClassNetwork, "connection refused", true, 0},
		{forger.URL + "/", ClassHTTP, "HTTP 502", true, 502},
		// A page that goes on, as it loads, to where the proxy cannot
		// reach: the job fails as the page it went to (QA: it completed as
		// the proxy's 502 page, status 502).
		{goesTo("script", "http://nowhere.test/"), ClassNetwork, "no such host", true, 0},
		{goesTo("script", "http://"+dead+"/"), ClassNetwork, "connection refused", true, 0},
		{goesTo("script", "https://nowhere.test/"), ClassNetwork, "no such host", true, 0},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := s.Render(ctx, Request{URL: tc.url})
		cancel()
		var e *Error
		if !errors.As(err, &e) || e.Class != tc.class || e.Retriable != tc.retriable || !strings.Contains(e.Error(), tc.says) {
			t.Errorf("render of %s: %v; want %s (retriable %v) saying %q", tc.url, err, tc.class, tc.retriable, tc.says)
		}
		if status := 0; res != nil && res.Status != tc.status || res == nil && tc.status != 0 {
			if res != nil {
				status = res.Status
			}
			t.Errorf("render of %s: status %d kept with the failure, want %d", tc.url, status, tc.status)
		}
	}
	// Waiting for a selector the filter's answer will never show: the job
	// fails as the filter's answer commits, not at its timeout.
	for _, to := range []string{"http://nowhere.test/", "https://nowhere.test/"} {
		u := goesTo("script", to)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err := s.Render(ctx, Request{URL: u, Wait: Wait{Selector: "#ready"}, Timeout: time.Minute})
		cancel()
		var e *Error
		if !errors.As(err, &e) || e.Class != ClassNetwork || !e.Retriable || !strings.Contains(e.Error(), "no such host") {
			t.Errorf("render of %s waiting for #ready: %v; want %s (retriable) saying %q", u, err, ClassNetwork, "no such host")
		}
	}
}

// noNames is a resolver under which no name exists.
type noNames struct{}

func (noNames) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// serveSiteProxy serves an egress proxy that allows only the site at
// siteURL (on loopback, refused by default), as a node's filter would, until
// the test ends.
func serveSiteProxy(tb testing.TB, siteURL string) *egress.Proxy {
	tb.Helper()
	u, err := url.Parse(siteURL)
	if err != nil {
		tb.Fatal(err)
	}
	rule, err := egress.ParseRule(u.Host)
	if err != nil {
		tb.Fatal(err)
	}
	proxy, err := egress.Listen("127.0.0.1:0", egress.Config{Policy: egress.Policy{Allow: []egress.Rule{rule}}})
	if err != nil {
		tb.Fatal(err)
	}
	testutil.Background(tb, "proxy", proxy.Serve)
	return proxy
}
