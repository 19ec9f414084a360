package farm

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/browserfarm/browserfarm/internal/jobspec"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// checkAcceptedRenders fails the test if the queue accepts spec but the
// browser refuses the request the node makes of it: "accepted" must mean
// "renderable", or a job is taken at submit and fails permanently at render.
// It checks the spec as submitted and as the queue stores it (defaults
// filled), with the node's result limits applied as a consumer applies them.
func checkAcceptedRenders(t *testing.T, spec jobqueue.Spec) {
	t.Helper()
	if spec.Validate() != nil {
		return
	}
	for _, s := range []jobqueue.Spec{spec, spec.WithDefaults()} {
		req := SpecRequest(s, "0b7e3a52-6a8d-4f8e-9c1f-2d4e5f6a7b8c")
		limitRequest(&req, jobqueue.DefaultResultLimits())
		if err := req.Check(); err != nil {
			b, _ := json.Marshal(s)
			t.Errorf("the queue accepts %s but the browser refuses it: %v", b, err)
		}
	}
}

// acceptedSpecs sits at every bound the queue and the browser share, and
// uses every name the spec allows.
func acceptedSpecs() []jobqueue.Spec {
	u := "https://shop.example.com/a"
	specs := []jobqueue.Spec{
		{URL: u},
		{URL: "HTTP://Shop.Example.COM:8080/a?b=1#c"},
		{URL: "http://[::1]:9000/"},
		{URL: "http://a_b.bücher.example./"},
		{URL: "http://intranet:8080/"},
		{URL: "http://user:pw@shop.example.com/"},
		{URL: u, TimeoutMS: jobqueue.MinTimeoutMS},
		{URL: u, TimeoutMS: jobqueue.MaxTimeoutMS},
		{URL: u, Viewport: &jobqueue.Viewport{Width: jobqueue.MinViewport, Height: jobqueue.MinViewport}},
		{URL: u, Viewport: &jobqueue.Viewport{Width: jobqueue.MaxViewportWidth, Height: jobqueue.MaxViewportHeight, Mobile: true}},
		{URL: u, Block: jobspec.BlockTypes()},
		{URL: u, Actions: []jobqueue.Action{
			{Type: "click", Selector: "button.more", Times: jobqueue.MaxActionTimes},
			{Type: "scroll", Times: jobqueue.MaxActionTimes, Ms: jobqueue.MaxActionMS},
			{Type: "type", Selector: "input", Text: "shoes"},
			{Type: "wait", Selector: ".item", Ms: jobqueue.MaxActionMS},
		}},
		// Fixed pauses just under the timeout (jobspec.CheckPauses).
		{URL: u, TimeoutMS: jobqueue.MaxTimeoutMS, Wait: &jobqueue.Wait{NetworkIdle: true}, Actions: []jobqueue.Action{
			{Type: "click", Selector: "button.more", Times: 3, Ms: jobqueue.MaxActionMS},
			{Type: "wait", Ms: jobqueue.MaxActionMS},
			{Type: "wait", Ms: jobqueue.MaxActionMS - jobspec.NetworkIdleQuietMS - 1},
		}},
		{URL: u, Actions: []jobqueue.Action{{Type: "wait", Ms: jobqueue.DefaultTimeoutMS - 1}}},
		{URL: u, Headers: map[string]string{"Accept-Language": "de", "X-A_b.c~": "1"}},
		{URL: u, Headers: map[string]string{"Sec-Fetch-Mode": "x", "Expect": "100-continue", "Origin": "http://a.example", "Referer": "http://a.example/", "Proxy": "x", "Cookie": "a=b"}},
		{URL: u, Wait: &jobqueue.Wait{Selector: "main :is(h1, h2):not(.hidden):hover::before"},
			Actions: []jobqueue.Action{{Type: "click", Selector: "li:nth-child(2n+1 of .item):focus-visible"}},
			Follow:  &jobqueue.Follow{Selector: "a:has(> img):any-link", MaxDepth: 1}},
		{URL: u, UserAgent: "Mozilla/5.0 (bot) \t tabbed"},
		{URL: u, Cookies: []jobqueue.Cookie{{Name: "s", Value: "v", Domain: ".example.com", Path: "/", Secure: true, HTTPOnly: true}}},
		{URL: u, Follow: &jobqueue.Follow{Selector: "a", MaxDepth: jobqueue.MaxFollowDepth, MaxLinks: jobqueue.MaxFollowLinks}},
		{URL: u, Follow: &jobqueue.Follow{Selector: "a", MaxDepth: 1, MaxLinks: 1}},
		{URL: u, Follow: &jobqueue.Follow{Selector: "a", MaxDepth: 1}},
		{URL: u, SharedContext: true},
		{URL: u, SharedContext: true, Isolation: jobqueue.IsolationShared},
		{URL: u, Cache: jobqueue.CacheJob},
		{URL: u, Cache: jobqueue.CacheBatch},
		{URL: u, Cache: jobqueue.CacheBatch, Isolation: jobqueue.IsolationWipe},
		{URL: u, Cache: jobqueue.CacheJob, Isolation: jobqueue.IsolationShared},
		{URL: u, Cache: jobqueue.CacheJob, Proxy: "http://127.0.0.1:3128"},
	}
	for _, iso := range []string{"", jobqueue.IsolationWipe, jobqueue.IsolationContext, jobqueue.IsolationShared} {
		specs = append(specs, jobqueue.Spec{URL: u, Isolation: iso})
	}
	for _, p := range []string{"http://127.0.0.1:3128", "HTTP://proxy.example:3128/", "https://proxy.example:443",
		"socks5://proxy.example:1080", "http://u:p%40ss@proxy.example:3128", "http://u@[::1]:1", "http://h:65535"} {
		specs = append(specs, jobqueue.Spec{URL: u, Proxy: p}, jobqueue.Spec{URL: u, Proxy: p, Isolation: jobqueue.IsolationContext})
	}
	return specs
}

// TestAcceptedSpecsRender: every spec of the table is accepted by the queue
// (the table is meant to sit inside the contract) and renderable.
func TestAcceptedSpecsRender(t *testing.T) {
	for _, spec := range acceptedSpecs() {
		if err := spec.Validate(); err != nil {
			t.Errorf("the table's spec %+v is refused: %v", spec, err)
			continue
		}
		checkAcceptedRenders(t, spec)
	}
}

// TestProxyFormsChromeCannotUseAreRefused: the three proxy forms the
// browser refuses are refused at submit, naming the field.
func TestProxyFormsChromeCannotUseAreRefused(t *testing.T) {
	for _, p := range []string{"http://proxy.example", "socks5://u:p@h:1080", "http://h:3128/x"} {
		req := SpecRequest(jobqueue.Spec{URL: "https://a.example/", Proxy: p}, "")
		if req.Check() == nil {
			t.Errorf("the browser takes proxy %q: the case is no longer one it refuses", p)
		}
		err := (&jobqueue.Spec{URL: "https://a.example/", Proxy: p}).Validate()
		se, ok := err.(*jobqueue.SpecError)
		if !ok || se.Field != "proxy" || !strings.Contains(err.Error(), `field "proxy"`) {
			t.Errorf("proxy %q: submit says %v, want an error naming the field proxy", p, err)
		}
	}
}

// FuzzAcceptedSpecsRender: whatever JSON the queue's one spec decoder and
// its validation accept, the browser renders. `go test` runs it over the
// seeds; `go test -fuzz FuzzAcceptedSpecsRender ./farm` explores.
func FuzzAcceptedSpecsRender(f *testing.F) {
	for _, s := range acceptedSpecs() {
		b, err := json.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, seed := range []string{
		`{"url":"http://proxy.example/","proxy":"http://proxy.example"}`,
		`{"url":"http://a.example/","proxy":"socks5://u:p@h:1080"}`,
		`{"url":"http://a.example/","proxy":"http://h:3128/x"}`,
		`{"url":"http://a.example/","proxy":"socks4://h:1080"}`,
		`{"url":"http://a.example/","viewport":{"width":7681,"height":100}}`,
		`{"url":"http://a.example/","actions":[{"type":"scroll","times":101,"ms":60001}]}`,
		`{"url":"http://a.example/","block":["script"]}`,
		`{"url":"http://a..b/"}`,
		`{"URL":"http://a.example/"}`,
		`{"url":"http://a.example/","url":"http://b.example/"}`,
		`{"url":"http://a.example/","extract":"return 1"}`,
		`{"url":"http://a.example/","extract":"[...document.links].map(a => a.href)"}`,
		`{"url":"http://-bad-.example/"}`,
		`{"url":"http://a.example/","timeout_ms":1000,"actions":[{"type":"wait","ms":30000}]}`,
		`{"url":"http://a.example/","actions":[{"type":"wait","ms":30000}]}`,
		`{"url":"http://a.example/","timeout_ms":5000,"actions":[{"type":"click","selector":"a","times":5,"ms":1000}]}`,
		`{"url":"http://a.example/","isolation":"none"}`,
		`{"url":"http://a.example/","cache":"batch","isolation":"context"}`,
		`{"url":"http://a.example/","cache":"batch","shared_context":true}`,
		`{"url":"http://a.example/","cache":"batch","proxy":"http://h:3128"}`,
		`{"url":"http://a.example/","headers":{"Bad Name":"x"}}`,
		`{"url":"http://a.example/","wait":{"selector":"#ready:hover:unknownpseudo"}}`,
		`{"url":"http://a.example/","headers":{"Proxy-Authorization":"Basic eA=="}}`,
		`{"url":"http://a.example/","headers":{"Cookie":"a=b"},"cookies":[{"name":"c","value":"d"}]}`,
		`{"url":"http://a.example/","headers":{"user-agent":"X"},"user_agent":"Y"}`,
		`{"url":"http://a.example/","headers":{"set-cookie":"a=b","Sec-Fetch-Mode":"x"}}`,
		`{"url":"http://a.example/","actions":[{"type":"click","selector":"a:not(:bogus)"}]}`,
		`{"url":"http://a.example/","cookies":[{"name":"","value":"x"}]}`,
		`{"url":"http://a.example/","follow":{"selector":"a","max_depth":1,"max_links":10001}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := jobqueue.DecodeSpec(data)
		if err != nil {
			return
		}
		checkAcceptedRenders(t, spec)
	})
}
