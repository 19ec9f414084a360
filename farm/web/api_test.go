package web

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// TestMutatingAuth: every mutating endpoint refuses without a configured
// token (403), without or with a wrong token (401), and on a standby (503),
// and changes nothing when it refuses.
func TestMutatingAuth(t *testing.T) {
	t.Parallel()
	open := newFixture(t, func(c *Config) { c.Token = "" })
	f := newFixture(t, nil)
	f.register("n1", 6)
	batch, ids := f.enqueue(jobqueue.Spec{URL: "http://a.example/"})
	endpoints := []struct{ method, path, body string }{
		{"POST", "/api/jobs", specsJSON("http://b.example/")},
		{"POST", fmt.Sprintf("/api/jobs/%d/cancel", ids[0]), ""},
		{"POST", fmt.Sprintf("/api/jobs/%d/retry", ids[0]), ""},
		{"POST", "/api/batches/" + batch + "/cancel", ""},
		{"POST", "/api/nodes/n1/drain", ""},
	}
	for _, ep := range endpoints {
		t.Run(ep.path, func(t *testing.T) {
			e := open.errorOf(ep.method, ep.path, testToken, ep.body, http.StatusForbidden)
			if !strings.Contains(e.Error, "FARM_API_TOKEN") {
				t.Errorf("403 message does not say how to enable: %q", e.Error)
			}
			for _, tok := range []string{"", "wrong", testToken + "x", testToken[:len(testToken)-1]} {
				code, h, b := f.do(ep.method, ep.path, tok, ep.body)
				if code != http.StatusUnauthorized || !strings.Contains(string(b), `"error"`) {
					t.Errorf("token %q: status %d %s, want 401", tok, code, b)
				}
				if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("token %q: WWW-Authenticate %q", tok, h.Get("WWW-Authenticate"))
				}
			}
			// Basic auth carrying the token is not a bearer token.
			req, _ := http.NewRequest(ep.method, f.url+ep.path, strings.NewReader(ep.body))
			req.SetBasicAuth("x", testToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("basic auth: status %d, want 401", resp.StatusCode)
			}
		})
	}
	f.leader.Store(false)
	for _, ep := range endpoints {
		e := f.errorOf(ep.method, ep.path, testToken, ep.body, http.StatusServiceUnavailable)
		if !strings.Contains(e.Error, "standby") {
			t.Errorf("%s: standby message %q", ep.path, e.Error)
		}
	}
	// Nothing changed.
	j, err := f.q.Get(context.Background(), ids[0])
	if err != nil || j.State != jobqueue.StatePending {
		t.Fatalf("job after refused calls: %+v, %v", j, err)
	}
	st, err := f.q.Stats(context.Background())
	if err != nil || st.Jobs[jobqueue.StatePending] != 1 {
		t.Fatalf("stats after refused calls: %+v, %v", st, err)
	}
	n, err := f.q.GetNode(context.Background(), "n1")
	if err != nil || n.State != jobqueue.NodeActive {
		t.Fatalf("node after refused calls: %+v, %v", n, err)
	}
	// Read endpoints stay open on a standby and without a token.
	f.call("GET", "/api/stats", "", "", http.StatusOK, nil)
	open.call("GET", "/api/jobs", "", "", http.StatusOK, nil)
}

func TestSubmit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.MaxBodyBytes = 4 << 10 })

	var got struct {
		BatchID string  `json:"batch_id"`
		IDs     []int64 `json:"ids"`
		Count   int     `json:"count"`
	}
	f.call("POST", "/api/jobs", testToken, specsJSON("http://a.example/1", "https://a.example/2"), http.StatusCreated, &got)
	if len(got.IDs) != 2 || got.Count != 2 || jobqueue.ValidateBatchID(got.BatchID) != nil {
		t.Fatalf("submit answer %+v", got)
	}
	f.call("POST", "/api/jobs", testToken,
		`{"jobs": [{"url": "http://b.example/", "screenshot": true, "priority": 5, "wait": {"selector": "#x"}}]}`,
		http.StatusCreated, &got)
	j, err := f.q.Get(context.Background(), got.IDs[0])
	if err != nil || !j.Spec.Screenshot || j.Priority != 5 || j.Spec.Wait.Selector != "#x" || j.BatchID != got.BatchID {
		t.Fatalf("stored job %+v, %v", j, err)
	}

	huge := `[{"url": "http://a.example/", "extract": "` + strings.Repeat("x", 5000) + `"}]`
	cases := []struct {
		name   string
		body   string
		status int
		index  int // -1: no index
		field  string
		msg    string
	}{
		{"empty", "", 400, -1, "", "empty body"},
		{"not json", "url=http://a.example/", 400, -1, "", "not JSON"},
		{"malformed", `[{"url": "http://a.example/"`, 400, -1, "", "malformed JSON"},
		{"trailing data", `[{"url": "http://a.example/"}] [1]`, 400, -1, "", "after the JSON value"},
		{"no jobs", `[]`, 400, -1, "", "no jobs"},
		{"envelope without jobs", `{"job": []}`, 400, -1, "", `"job"`},
		{"envelope missing jobs", `{}`, 400, -1, "", `missing "jobs"`},
		{"envelope's key in another case", `{"JOBS": [{"url": "http://a.example/"}]}`, 400, -1, "", `"JOBS": unknown field: keys are case-sensitive`},
		{"envelope's key twice", `{"jobs": [], "jobs": [{"url": "http://a.example/"}]}`, 400, -1, "", `"jobs": duplicate key`},
		{"item not an object", `[{"url": "http://a.example/"}, 42]`, 400, 1, "", "JSON object"},
		{"bad url", specsJSON("http://a.example/", "ftp://a.example/x"), 400, 1, "url", "scheme"},
		{"missing url", `[{"screenshot": true}]`, 400, 0, "url", "required"},
		{"bad timeout", `[{"url": "http://a.example/", "timeout_ms": 5}]`, 400, 0, "timeout_ms", "out of range"},
		{"bad action", `[{"url": "http://a.example/", "actions": [{"type": "click", "selector": "a"}, {"type": "dance"}]}]`,
			400, 0, "actions[1].type", "unknown action"},
		{"wrong type", `[{"url": "http://a.example/", "viewport": {"width": "wide", "height": 500}}]`,
			400, 0, "viewport.width", "expected a number"},
		{"unknown field", `[{"url": "http://a.example/", "screenshots": true}]`, 400, 0, "screenshots", "unknown field"},
		{"too big", huge, 413, -1, "", "larger than 4096 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := f.errorOf("POST", "/api/jobs", testToken, c.body, c.status)
			if !strings.Contains(e.Error, c.msg) {
				t.Errorf("error %q does not contain %q", e.Error, c.msg)
			}
			if c.index < 0 && e.Index != nil || c.index >= 0 && (e.Index == nil || *e.Index != c.index) {
				t.Errorf("index %v, want %d", e.Index, c.index)
			}
			if e.Field != c.field {
				t.Errorf("field %q, want %q (error %q)", e.Field, c.field, e.Error)
			}
			if c.field != "" && !strings.Contains(e.Error, fmt.Sprintf("job %d: field %q", c.index, c.field)) {
				t.Errorf("error %q does not name the item and field", e.Error)
			}
		})
	}
	// A bad batch is all-or-nothing: only the three good jobs exist.
	st, err := f.q.Stats(context.Background())
	if err != nil || st.Jobs[jobqueue.StatePending] != 3 {
		t.Fatalf("pending after bad batches: %+v, %v", st.Jobs, err)
	}
}

func TestJobsRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	f.register("n1", 6)
	f.register("n2", 6)
	shot := testPNG(t)
	done := f.runOne("n1", "http://shop.example/p1", jobqueue.Result{
		FinalURL: "http://shop.example/p1", Status: 200, Title: "Product 1", Data: []byte(`{"price": 3}`),
		HTML: "<html>p1</html>", HTMLTruncated: true, Screenshot: shot, Timings: jobqueue.Timings{TotalMS: 120}, Links: []string{"http://shop.example/p2"},
	}, "")
	plain := f.runOne("n2", "http://shop.example/p2", jobqueue.Result{Title: "no shot"}, "")
	failed := f.runOne("n2", "http://other.example/", jobqueue.Result{}, "timeout")
	batch, pending := f.enqueue(jobqueue.Spec{URL: "http://shop.example/a"}, jobqueue.Spec{URL: "http://shop.example/b"},
		jobqueue.Spec{URL: "http://shop.example/c"})

	type page struct {
		Jobs []jobqueue.Job `json:"jobs"`
		Next int64          `json:"next"`
	}
	ids := func(p page) string {
		var s []string
		for _, j := range p.Jobs {
			s = append(s, fmt.Sprint(j.ID))
		}
		return strings.Join(s, ",")
	}
	list := []struct {
		query string
		want  []int64
	}{
		{"", []int64{pending[2], pending[1], pending[0], failed, plain, done}},
		{"?state=completed", []int64{plain, done}},
		{"?state=failed,pending", []int64{pending[2], pending[1], pending[0], failed}},
		{"?node=n2", []int64{failed, plain}},
		{"?batch=" + batch, []int64{pending[2], pending[1], pending[0]}},
		{"?batch=" + strings.ToUpper(batch), []int64{pending[2], pending[1], pending[0]}},
		{"?host=OTHER.example", []int64{failed}},
		{"?host=shop.example&state=completed&limit=1", []int64{plain}},
		{"?state=completed&after=" + fmt.Sprint(plain), []int64{done}},
	}
	for _, c := range list {
		var p page
		f.call("GET", "/api/jobs"+c.query, "", "", http.StatusOK, &p)
		want := ids(page{Jobs: func() []jobqueue.Job {
			var js []jobqueue.Job
			for _, id := range c.want {
				js = append(js, jobqueue.Job{ID: id})
			}
			return js
		}()})
		if got := ids(p); got != want {
			t.Errorf("GET /api/jobs%s: ids %s, want %s", c.query, got, want)
		}
	}
	// Paging: limit 2 walks the six jobs in three pages.
	var all []string
	after := ""
	for range 3 {
		var p page
		f.call("GET", "/api/jobs?limit=2"+after, "", "", http.StatusOK, &p)
		all = append(all, ids(p))
		after = fmt.Sprintf("&after=%d", p.Next)
		if p.Next == 0 {
			break
		}
	}
	if got := strings.Join(all, "|"); got != fmt.Sprintf("%d,%d|%d,%d|%d,%d", pending[2], pending[1], pending[0], failed, plain, done) {
		t.Errorf("pages %s", got)
	}
	for _, q := range []string{"?state=done", "?limit=0", "?limit=1001", "?limit=x", "?after=-1", "?batch=123", "?node=bad%20id"} {
		f.errorOf("GET", "/api/jobs"+q, "", "", http.StatusBadRequest)
	}
	var empty page
	f.call("GET", "/api/jobs?node=nobody", "", "", http.StatusOK, &empty)
	if empty.Jobs == nil || len(empty.Jobs) != 0 {
		t.Errorf("empty list: %+v", empty)
	}

	// Detail: the job, and a result summary without the bulky parts.
	var detail struct {
		Job    jobqueue.Job   `json:"job"`
		Result *resultSummary `json:"result"`
	}
	f.call("GET", fmt.Sprintf("/api/jobs/%d", done), "", "", http.StatusOK, &detail)
	r := detail.Result
	if detail.Job.ID != done || r == nil || !r.HasScreenshot || r.HTMLBytes != len("<html>p1</html>") || !r.HTMLTruncated || r.Title != "Product 1" ||
		string(r.Data) != `{"price":3}` || r.Links != 1 || r.Timings.TotalMS != 120 {
		t.Fatalf("detail of a completed job: %+v %+v", detail.Job, r)
	}
	detail.Result = nil
	f.call("GET", fmt.Sprintf("/api/jobs/%d", failed), "", "", http.StatusOK, &detail)
	if detail.Job.State != jobqueue.StateFailed || detail.Job.ErrorClass != "timeout" || detail.Job.LastError == "" || detail.Result != nil {
		t.Fatalf("detail of a failed job: %+v %+v", detail.Job, detail.Result)
	}

	var res jobqueue.Result
	f.call("GET", fmt.Sprintf("/api/jobs/%d/result", done), "", "", http.StatusOK, &res)
	if res.HTML != "<html>p1</html>" || !bytes.Equal(res.Screenshot, shot) || res.Status != 200 {
		t.Fatalf("result: %+v", res)
	}
	code, h, body := f.do("GET", fmt.Sprintf("/api/jobs/%d/screenshot", done), "", "")
	if code != 200 || h.Get("Content-Type") != "image/png" || !bytes.Equal(body, shot) {
		t.Fatalf("screenshot: %d %q %d bytes", code, h.Get("Content-Type"), len(body))
	}

	notFound := []struct{ path, msg string }{
		{fmt.Sprintf("/api/jobs/%d/screenshot", plain), "no screenshot"},
		{fmt.Sprintf("/api/jobs/%d/result", pending[0]), "is pending"},
		{fmt.Sprintf("/api/jobs/%d/screenshot", failed), "is failed"},
		{"/api/jobs/999999", "not found"},
		{"/api/jobs/999999/result", "not found"},
		{"/api/jobs/999999/screenshot", "not found"},
		{"/api/nothing", "no API endpoint"},
		{"/api/jobs/1/nothing", "no API endpoint"},
	}
	for _, c := range notFound {
		if e := f.errorOf("GET", c.path, "", "", http.StatusNotFound); !strings.Contains(e.Error, c.msg) {
			t.Errorf("GET %s: %q, want it to mention %q", c.path, e.Error, c.msg)
		}
	}
	code, h, body = f.do("DELETE", fmt.Sprintf("/api/jobs/%d", done), testToken, "")
	if code != http.StatusMethodNotAllowed || h.Get("Allow") != "GET" || !strings.Contains(string(body), `"error"`) {
		t.Errorf("DELETE a job: %d, Allow %q, %s", code, h.Get("Allow"), body)
	}
	if code, h, _ = f.do("GET", "/api/batches/x/cancel", "", ""); code != http.StatusMethodNotAllowed || h.Get("Allow") != "POST" {
		t.Errorf("GET a batch cancel: %d, Allow %q", code, h.Get("Allow"))
	}
	for _, p := range []string{"/api/jobs/abc", "/api/jobs/0/result", "/api/jobs/-3/screenshot"} {
		f.errorOf("GET", p, "", "", http.StatusBadRequest)
	}
	_ = ctx
}

func TestCancelRetryDrain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	f.register("n1", 6)
	f.register("gone", 6)
	if _, err := f.q.SetNodeState(ctx, "gone", jobqueue.NodeExited); err != nil {
		t.Fatal(err)
	}
	done := f.runOne("n1", "http://a.example/2", jobqueue.Result{}, "")
	_, ids := f.enqueue(jobqueue.Spec{URL: "http://a.example/1"})
	batch, bids := f.enqueue(jobqueue.Spec{URL: "http://a.example/3"}, jobqueue.Spec{URL: "http://a.example/4"})
	job := fmt.Sprintf("/api/jobs/%d", ids[0])

	var out map[string]any
	f.call("POST", job+"/cancel", testToken, "", http.StatusOK, &out)
	if out["state"] != "canceled" {
		t.Fatalf("cancel answer %v", out)
	}
	if e := f.errorOf("POST", job+"/cancel", testToken, "", http.StatusConflict); !strings.Contains(e.Error, "is canceled") {
		t.Errorf("second cancel: %q", e.Error)
	}
	f.call("POST", job+"/retry", testToken, "", http.StatusOK, &out)
	if j, err := f.q.Get(ctx, ids[0]); err != nil || j.State != jobqueue.StatePending {
		t.Fatalf("retried job: %+v, %v", j, err)
	}
	if e := f.errorOf("POST", job+"/retry", testToken, "", http.StatusConflict); !strings.Contains(e.Error, "is pending") {
		t.Errorf("retry of a pending job: %q", e.Error)
	}
	if e := f.errorOf("POST", fmt.Sprintf("/api/jobs/%d/cancel", done), testToken, "", http.StatusConflict); !strings.Contains(e.Error, "completed") {
		t.Errorf("cancel of a completed job: %q", e.Error)
	}
	f.errorOf("POST", "/api/jobs/424242/cancel", testToken, "", http.StatusNotFound)
	f.errorOf("POST", "/api/jobs/424242/retry", testToken, "", http.StatusNotFound)
	f.errorOf("POST", "/api/jobs/x/retry", testToken, "", http.StatusBadRequest)

	var bc struct {
		Canceled int64 `json:"canceled"`
	}
	f.call("POST", "/api/batches/"+batch+"/cancel", testToken, "", http.StatusOK, &bc)
	if bc.Canceled != 2 {
		t.Fatalf("batch cancel: %+v", bc)
	}
	if j, err := f.q.Get(ctx, bids[1]); err != nil || j.State != jobqueue.StateCanceled {
		t.Fatalf("job of the canceled batch: %+v, %v", j, err)
	}
	f.call("POST", "/api/batches/"+batch+"/cancel", testToken, "", http.StatusOK, &bc)
	if bc.Canceled != 0 {
		t.Fatalf("second batch cancel: %+v", bc)
	}
	f.errorOf("POST", "/api/batches/00000000-0000-4000-8000-000000000000/cancel", testToken, "", http.StatusNotFound)
	f.errorOf("POST", "/api/batches/not-a-uuid/cancel", testToken, "", http.StatusBadRequest)

	f.call("POST", "/api/nodes/n1/drain", testToken, "", http.StatusOK, &out)
	if n, err := f.q.GetNode(ctx, "n1"); err != nil || n.State != jobqueue.NodeDraining {
		t.Fatalf("drained node: %+v, %v", n, err)
	}
	f.call("POST", "/api/nodes/n1/drain", testToken, "", http.StatusOK, &out) // idempotent
	if e := f.errorOf("POST", "/api/nodes/gone/drain", testToken, "", http.StatusConflict); !strings.Contains(e.Error, "exited") {
		t.Errorf("drain of an exited node: %q", e.Error)
	}
	f.errorOf("POST", "/api/nodes/nobody/drain", testToken, "", http.StatusNotFound)
	f.errorOf("POST", "/api/nodes/bad%20id/drain", testToken, "", http.StatusBadRequest)
}
