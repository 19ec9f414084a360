package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/browserfarm/browserfarm/internal/pgtest"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const testToken = "s3cret-token"

// fixture is a server on a database of its own.
type fixture struct {
	t       *testing.T
	q       *jobqueue.Queue
	pool    *pgxpool.Pool
	url     string
	reg     *prometheus.Registry
	metrics *Metrics
	leader  atomic.Bool
	desired atomic.Int64
}

// newFixture starts a server with the test token; mod may change its Config.
func newFixture(t *testing.T, mod func(*Config)) *fixture {
	t.Helper()
	pool := pgtest.NewPool(t)
	if err := jobqueue.Migrate(context.Background(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	f := &fixture{t: t, pool: pool, q: jobqueue.New(pool, jobqueue.Config{}), reg: prometheus.NewRegistry()}
	f.metrics = NewMetrics(f.reg)
	f.leader.Store(true)
	f.desired.Store(-1)
	cfg := Config{
		Queue:    f.q,
		Token:    testToken,
		IsLeader: f.leader.Load,
		Desired: func() (int, bool) {
			n := f.desired.Load()
			return int(n), n >= 0
		},
		Metrics:  f.metrics,
		Gatherer: f.reg,
		Logger:   zaptest.NewLogger(t),
		Version:  "v-test",
	}
	if mod != nil {
		mod(&cfg)
	}
	srv := httptest.NewServer(NewServer(cfg))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// do sends a request; token "" sends no Authorization header.
func (f *fixture) do(method, path, token, body string) (int, http.Header, []byte) {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.url+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// call sends a request, checks the status, and decodes the JSON answer
// into out (when not nil).
func (f *fixture) call(method, path, token, body string, want int, out any) {
	f.t.Helper()
	code, h, b := f.do(method, path, token, body)
	if code != want {
		f.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, code, want, b)
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		f.t.Fatalf("%s %s: content type %q", method, path, ct)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			f.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// errorOf sends a request expecting an error status and returns the message.
func (f *fixture) errorOf(method, path, token, body string, want int) apiError {
	f.t.Helper()
	var e apiError
	f.call(method, path, token, body, want, &e)
	if e.Error == "" {
		f.t.Fatalf("%s %s: error answer without a message", method, path)
	}
	return e
}

// register registers a node; registering an id again stands for a process
// restart that proved its predecessor gone.
func (f *fixture) register(id string, capacity int) {
	f.t.Helper()
	var replaces int64
	if n, err := f.q.GetNode(context.Background(), id); err == nil {
		replaces = n.Incarnation
	}
	sv := supervisor.DefaultConfig()
	if _, _, err := f.q.Register(context.Background(), jobqueue.NodeInfo{ID: id, Hostname: "host-" + id, Capacity: capacity, Version: "v1", Replaces: replaces,
		ChromeRecycleJobs: sv.ChromeRecycleJobs, ExitAfterJobs: sv.ExitAfterJobs}); err != nil {
		f.t.Fatalf("register %s: %v", id, err)
	}
}

func (f *fixture) enqueue(specs ...jobqueue.Spec) (string, []int64) {
	f.t.Helper()
	batch, ids, err := f.q.Enqueue(context.Background(), specs)
	if err != nil {
		f.t.Fatalf("enqueue: %v", err)
	}
	return batch, ids
}

// start assigns and claims up to n pending jobs on node.
func (f *fixture) start(node string, n int) []jobqueue.Job {
	f.t.Helper()
	ctx := context.Background()
	if _, err := f.q.Assign(ctx, node, n); err != nil {
		f.t.Fatalf("assign: %v", err)
	}
	jobs, err := f.q.Claim(ctx, node, n)
	if err != nil {
		f.t.Fatalf("claim: %v", err)
	}
	return jobs
}

// runOne enqueues one job for url and runs it on node to the end: completed
// with res when class is "", else failed for good with that class.
func (f *fixture) runOne(node, url string, res jobqueue.Result, class string) int64 {
	f.t.Helper()
	ctx := context.Background()
	_, ids := f.enqueue(jobqueue.Spec{URL: url, MaxAttempts: 1})
	jobs := f.start(node, 1)
	if len(jobs) != 1 || jobs[0].ID != ids[0] {
		f.t.Fatalf("started %+v, want job %d", jobs, ids[0])
	}
	if class == "" {
		if err := completeJob(ctx, f.q, ids[0], node, res); err != nil {
			f.t.Fatalf("complete: %v", err)
		}
	} else if _, err := f.q.Incarnation(jobqueue.Node{ID: node}).Fail(ctx, ids[0], "failed with "+class, class, false); err != nil {
		f.t.Fatalf("fail: %v", err)
	}
	return ids[0]
}

// testPNG is a small valid PNG.
func testPNG(t testing.TB) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 40, 30))
	for x := range 40 {
		for y := range 30 {
			img.Set(x, y, color.RGBA{uint8(x * 6), uint8(y * 8), 200, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func specsJSON(urls ...string) string {
	parts := make([]string, len(urls))
	for i, u := range urls {
		parts[i] = fmt.Sprintf(`{"url": %q}`, u)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// completeJob completes one job as nodeID through CompleteMany, the
// product's form, bound to no registration of the node (incarnation 0
// passes every fence).
func completeJob(ctx context.Context, q *jobqueue.Queue, jobID int64, nodeID string, res jobqueue.Result) error {
	out, err := q.CompleteMany(ctx, []jobqueue.Completion{{JobID: jobID, NodeID: nodeID, Result: res}})
	if err != nil {
		return err
	}
	return out[0].Err
}
