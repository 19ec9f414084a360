package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/jobspec"
)

// jsPage serves a page that runs js in its head before anything else, with
// body after the #ready div and a link to /x; it returns the URL of such a
// page.
func jsPage(t *testing.T) func(js, body string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!doctype html><html><head><title>t</title><script>%s</script></head><body><div id=ready>ok</div><a href=/x>x</a>%s</body></html>",
			r.URL.Query().Get("js"), r.URL.Query().Get("body"))
	}))
	t.Cleanup(srv.Close)
	return func(js, body string) string {
		return srv.URL + "/?js=" + url.QueryEscape(js) + "&body=" + url.QueryEscape(body)
	}
}

// hostileBuiltins replaces every built-in the farm's own scripts could use
// to cut or count with one that answers big (a 32 MiB string) or lies.
const hostileBuiltins = `
const big = 'x'.repeat(32 << 20);
String.prototype.slice = function () { return big; };
String.prototype.substring = function () { return big; };
String.prototype.indexOf = function () { return -1; };
Array.prototype.push = function (v) { for (let i = 0; i < 10000; i++) this[this.length] = v; return this.length; };
Set.prototype.has = function () { return false; };
RegExp.prototype.test = function () { return true; };
window.String = function () { return big; };
`

func TestPageCannotLiftTheInPageCaps(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	page := jsPage(t)

	t.Run("title-url-html-links", func(t *testing.T) {
		long := "/y?" + strings.Repeat("a", jobspec.MaxURLLength)
		body := `<a href="` + long + `">long</a><a href="javascript:void 0">js</a><a href=/x#again>x again</a><a href=/z>z</a>`
		u := page(hostileBuiltins, body)
		res, err := s.Render(context.Background(), Request{URL: u, Wait: Wait{Selector: "#ready"},
			HTML: true, HTMLMaxBytes: 4096, FollowSelector: "a", FollowMax: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.Title != "t" {
			t.Errorf("title is %d bytes starting %.20q, want the document's %q", len(res.Title), res.Title, "t")
		}
		if res.FinalURL != u {
			t.Errorf("final URL is %d bytes starting %.20q, want the page's", len(res.FinalURL), res.FinalURL)
		}
		if !res.HTMLTruncated || len(res.HTML) > 4096 || !strings.HasPrefix(res.HTML, "<html><head><title>t</title>") {
			t.Errorf("HTML is %d bytes (truncated %t) starting %.40q, want the document's cut at 4096", len(res.HTML), res.HTMLTruncated, res.HTML)
		}
		base := strings.SplitN(u, "/?", 2)[0]
		if len(res.Links) != 1 || res.Links[0] != base+"/x" {
			t.Errorf("%d links (%s), want [%s/x]", len(res.Links), firstLink(res.Links), base)
		}
		// Past the one link asked for: /z and the link over the queue's
		// URL bound (counted, not collected); /x#again is /x again and
		// javascript: is not a page.
		if res.LinksOmitted != 2 {
			t.Errorf("%d links over the limit, want 2 (/z and the over-long one)", res.LinksOmitted)
		}
	})

	t.Run("links-over-url-bound", func(t *testing.T) {
		// Without hostile built-ins: a link over the queue's bound is
		// counted over the limit, never collected.
		long := "/y?" + strings.Repeat("b", jobspec.MaxURLLength)
		res, err := s.Render(context.Background(), Request{URL: page(``, `<a href="`+long+`">long</a>`), FollowSelector: "a", FollowMax: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Links) != 1 || !strings.HasSuffix(res.Links[0], "/x") || res.LinksOmitted != 1 {
			t.Errorf("%d links (%s), %d over the limit; want only /x, and the over-long one counted", len(res.Links), firstLink(res.Links), res.LinksOmitted)
		}
		for _, l := range res.Links {
			if len(l) > jobspec.MaxURLLength {
				t.Errorf("a %d-byte link was collected", len(l))
			}
		}
	})

	t.Run("extract", func(t *testing.T) {
		// The page's JSON.stringify says what the page's value is: the
		// page may lie about its own data, but what crosses is what was
		// measured, never the 32 MiB object.
		res, err := s.Render(context.Background(), Request{URL: page(`JSON.stringify = () => '1';`, ``),
			Extract: `({body: 'y'.repeat(32 << 20)})`, MaxDataBytes: 1 << 20})
		if err != nil || string(res.Data) != "1" {
			t.Fatalf("data %.60s, err %v; want 1, what the page's JSON.stringify measured", dataOf(res), err)
		}
	})

	t.Run("extract-stringify-not-json", func(t *testing.T) {
		_, err := s.Render(context.Background(), Request{URL: page(`JSON.stringify = () => '{nope';`, ``),
			Extract: `1`, MaxDataBytes: 1 << 20})
		var be *Error
		if !errors.As(err, &be) || be.Class != ClassExtract || be.Retriable {
			t.Fatalf("err %v, want a permanent %s", err, ClassExtract)
		}
	})

	t.Run("extract-stringify-big", func(t *testing.T) {
		_, err := s.Render(context.Background(), Request{URL: page(`JSON.stringify = () => 'z'.repeat(32 << 20);`, ``),
			Extract: `1`, MaxDataBytes: 1 << 20})
		var be *Error
		if !errors.As(err, &be) || be.Class != ClassTooLarge || !strings.Contains(err.Error(), "characters of JSON") {
			t.Fatalf("err %v, want %s refused in the page", err, ClassTooLarge)
		}
	})

	t.Run("extract-toJSON", func(t *testing.T) {
		// toJSON is honoured: the value is what JSON.stringify says, and
		// the big property never crosses.
		res, err := s.Render(context.Background(), Request{URL: page(``, ``),
			Extract: `({toJSON() { return 1 }, big: 'z'.repeat(32 << 20)})`, MaxDataBytes: 1 << 20})
		if err != nil || string(res.Data) != "1" {
			t.Fatalf("data %s, err %v; want 1 (the toJSON value)", dataOf(res), err)
		}
	})

	t.Run("extract-shared-string", func(t *testing.T) {
		// One 32 MiB string referenced eight times: 256 MiB of JSON,
		// measured in the page.
		_, err := s.Render(context.Background(), Request{URL: page(``, ``),
			Extract: `(() => { const s = 'w'.repeat(32 << 20); return [s, s, s, s, s, s, s, s]; })()`, MaxDataBytes: 1 << 20})
		if err == nil || !strings.Contains(err.Error(), "characters of JSON") {
			t.Errorf("err %v, want the value refused in the page", err)
		}
	})

	t.Run("extract-getter", func(t *testing.T) {
		// A getter that answers small to the measure and big afterwards
		// cannot send the big answer: the measured text is what crosses.
		res, err := s.Render(context.Background(), Request{URL: page(``, ``), MaxDataBytes: 1 << 20,
			Extract: `(() => { let n = 0; return {get v() { return n++ === 0 ? 'small' : 'q'.repeat(32 << 20); }}; })()`})
		if err != nil || string(res.Data) != `{"v":"small"}` {
			t.Fatalf("data %.60s, err %v; want {\"v\":\"small\"}", dataOf(res), err)
		}
	})

	t.Run("extract-values", func(t *testing.T) {
		js := `var pageVar = {k: 'v', n: [1, 2]};`
		for _, c := range []struct{ expr, want string }{
			{`({o: {a: 1}, arr: [1, 'x', null, true], s: 'str é', n: 1.5, z: null, u: undefined})`, `{"o":{"a":1},"arr":[1,"x",null,true],"s":"str é","n":1.5,"z":null}`},
			{`pageVar`, `{"k":"v","n":[1,2]}`},
			{`[pageVar.k, document.title]`, `["v","t"]`},
			{`'a "quoted" string'`, `"a \"quoted\" string"`},
			{`42`, `42`},
			{`null`, `null`},
			{`undefined`, `null`},
			{`new Date(0)`, `"1970-01-01T00:00:00.000Z"`},
			{`({toJSON() { return {t: 1} }})`, `{"t":1}`},
			{`Promise.resolve([1])`, `[1]`},
			{`NaN`, `"NaN"`},
			{`-Infinity`, `"-Infinity"`},
			{`12n`, `"12n"`},
		} {
			res, err := s.Render(context.Background(), Request{URL: page(js, ``), Extract: c.expr, MaxDataBytes: 1 << 20})
			if err != nil {
				t.Errorf("%s: %v", c.expr, err)
				continue
			}
			// The same value as the JSON text c.want (Chrome's own
			// serialization escaped non-ASCII characters, JSON.stringify
			// does not).
			var got, want any
			if err := json.Unmarshal(res.Data, &got); err != nil {
				t.Errorf("%s: data %s is not JSON: %v", c.expr, res.Data, err)
				continue
			}
			if err := json.Unmarshal([]byte(c.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: data %s, want %s", c.expr, res.Data, c.want)
			}
		}
	})

	t.Run("extract-not-json", func(t *testing.T) {
		for _, c := range []struct{ name, expr string }{
			{"cyclic", `(() => { const o = {}; o.o = o; return o; })()`},
			{"nested-bigint", `({n: 1n})`},
		} {
			_, err := s.Render(context.Background(), Request{URL: page(``, ``), Extract: c.expr, MaxDataBytes: 1 << 20})
			var be *Error
			if !errors.As(err, &be) || be.Class != ClassExtract || be.Retriable {
				t.Errorf("%s: err %v, want a permanent %s", c.name, err, ClassExtract)
			}
		}
	})

	t.Run("actions-and-wait", func(t *testing.T) {
		// The farm's waits and actions do not use what the page replaced.
		js := hostileBuiltins + `
Element.prototype.getBoundingClientRect = function () { return {left: -1e9, top: -1e9, width: 0, height: 0}; };
Document.prototype.querySelector = function () { return null; };`
		res, err := s.Render(context.Background(), Request{URL: page(js, `<input id=in>`), Wait: Wait{Selector: "#ready", Visible: true},
			Actions: []Action{{Type: ActionScroll}, {Type: ActionType, Selector: "#in", Text: "hi"}, {Type: ActionClick, Selector: "#ready"}},
			Extract: `document.getElementById('in').value`})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Data) != `"hi"` {
			t.Errorf("data %s, want \"hi\"", res.Data)
		}
	})
	e.usable(t, s)
}

func firstLink(links []string) string {
	if len(links) == 0 {
		return "none"
	}
	return fmt.Sprintf("the first %d bytes starting %.40q", len(links[0]), links[0])
}

func dataOf(res *Result) []byte {
	if res == nil {
		return nil
	}
	return res.Data
}

// TestFarmWorldAfterCrossSiteSelfNavigation: a page that moves itself to
// another site (another renderer) after the farm's world was made in it:
// the old renderer never reports the world destroyed, and every later farm
// script of the job (an action, the final read) must still run, in a world
// of the new document.
func TestFarmWorldAfterCrossSiteSelfNavigation(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	var port string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/moves": // #ready for the wait, then off to localhost (another site)
			fmt.Fprintf(w, `<title>moves</title><div id=ready>1</div><script>setTimeout(()=>location.replace("http://localhost:%s/page"), 100)</script>`, port)
		case "/page":
			fmt.Fprint(w, `<title>page</title><a href=/x>x</a><button id=b onclick="document.title='clicked'">b</button>`)
		}
	}))
	defer srv.Close()
	port = srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	for i := range 3 {
		res, err := s.Render(context.Background(), Request{URL: srv.URL + "/moves", Timeout: 5 * time.Second,
			Wait: Wait{Selector: "#ready"}, FollowSelector: "a", FollowMax: 5,
			// The wait action lets the page move before the click.
			Actions: []Action{{Type: ActionWait, Ms: 400}, {Type: ActionClick, Selector: "#b"}}})
		if err != nil {
			t.Fatalf("render %d: %v", i, err)
		}
		if res.Title != "clicked" || len(res.Links) != 1 {
			t.Fatalf("render %d: title %q, links %v; want clicked, [/x]", i, res.Title, res.Links)
		}
	}
}

// TestPageWorkersAreBounded: a document may start MaxPageWorkers dedicated
// workers; the next construction throws QuotaExceededError, and the
// workers made are real ones (TestRealChromeWorkerFlood in the supervisor
// is why). Every job's document has the whole budget again.
func TestPageWorkersAreBounded(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	page := jsPage(t)
	js := fmt.Sprintf(`
const src = URL.createObjectURL(new Blob([''], {type: 'text/javascript'}));
const made = [];
let error = '';
try { for (let i = 0; i < %d; i++) made.push(new Worker(src)); } catch (e) { error = e.name; }
const real = made.length > 0 && made[0] instanceof Worker && Object.getPrototypeOf(made[0]) === Worker.prototype &&
  typeof made[0].postMessage === 'function';
made.forEach(w => w.terminate());
document.documentElement.dataset.r = JSON.stringify({started: made.length, error, real});
`, MaxPageWorkers+10)
	type outcome struct {
		Started int    `json:"started"`
		Error   string `json:"error"`
		Real    bool   `json:"real"`
	}
	want := outcome{Started: MaxPageWorkers, Error: "QuotaExceededError", Real: true}
	for i := range 2 {
		res, err := s.Render(context.Background(), Request{URL: page(js, ""), Wait: Wait{Selector: "#ready"},
			Extract: `JSON.parse(document.documentElement.dataset.r)`})
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		var got outcome
		unmarshal(t, res.Data, &got)
		if got != want {
			t.Fatalf("job %d: %+v, want %+v", i, got, want)
		}
	}
}
