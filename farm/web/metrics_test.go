package web

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// scrape fetches /metrics and parses it with the Prometheus text parser.
func (f *fixture) scrape() map[string]*dto.MetricFamily {
	f.t.Helper()
	code, h, body := f.do("GET", "/metrics", "", "")
	if code != http.StatusOK {
		f.t.Fatalf("/metrics: %d %s", code, body)
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		f.t.Fatalf("/metrics content type %q", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		f.t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

// value is the value of the series of family name with exactly labels
// (name=value pairs); ok is false when there is no such series.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	fam := fams[name]
	if fam == nil {
		return 0, false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range fam.Metric {
		if len(m.Label) != len(want) {
			continue
		}
		for _, lp := range m.Label {
			if v, ok := want[lp.GetName()]; !ok || v != lp.GetValue() {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	f.register("n1", 6)
	f.register("n2", 4)
	f.register("n2", 4) // a process restart
	f.runOne("n1", "http://m.example/ok", jobqueue.Result{}, "")
	f.runOne("n1", "http://m.example/t1", jobqueue.Result{}, "timeout")
	f.runOne("n1", "http://m.example/t2", jobqueue.Result{}, "timeout")
	f.runOne("n2", "http://m.example/x", jobqueue.Result{}, "")
	f.runOne("n2", "http://m.example/c", jobqueue.Result{}, "")
	f.enqueue(jobqueue.Spec{URL: "http://m.example/1"}, jobqueue.Spec{URL: "http://m.example/2"},
		jobqueue.Spec{URL: "http://m.example/3"}, jobqueue.Spec{URL: "http://m.example/4"})
	f.start("n1", 3)
	if _, err := f.q.Incarnation(jobqueue.Node{ID: "n1"}).Heartbeat(ctx, jobqueue.NodeLoad{CPUPercent: 55.5, MemUsedBytes: 3 << 30, MemTotalBytes: 16 << 30,
		ChromePSSBytes: 812 << 20, BusySessions: 3, JobsSinceChromeStart: 7, JobsSinceProcessStart: 47, ChromeRestarts: 2,
		ChromeRecycles: 4, ChromeMemoryRecycles: 1, ContextsReused: 40, ContextsReplaced: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.q.SetNodeState(ctx, "n2", jobqueue.NodeDraining); err != nil {
		t.Fatal(err)
	}
	f.metrics.ObserveAssignment(40*time.Millisecond, 3)
	f.metrics.ObserveAssignment(2*time.Second, 1)
	f.metrics.ObserveAssignment(time.Second, 0)
	f.metrics.SetDesiredNodes(5)

	fams := f.scrape()
	want := []struct {
		name   string
		labels []string
		value  float64
	}{
		{"browserfarm_queue_scrape_success", nil, 1},
		{"browserfarm_queue_jobs", []string{"state", "pending"}, 1},
		{"browserfarm_queue_jobs", []string{"state", "processing"}, 3},
		{"browserfarm_queue_jobs", []string{"state", "completed"}, 3},
		{"browserfarm_queue_jobs", []string{"state", "failed"}, 2},
		{"browserfarm_queue_jobs", []string{"state", "canceled"}, 0},
		{"browserfarm_queue_ready_jobs", nil, 1},
		{"browserfarm_jobs_finished_recent", []string{"state", "completed", "error_class", ""}, 3},
		{"browserfarm_jobs_finished_recent", []string{"state", "failed", "error_class", "timeout"}, 2},
		{"browserfarm_nodes", []string{"state", "active"}, 1},
		{"browserfarm_nodes", []string{"state", "draining"}, 1},
		{"browserfarm_nodes", []string{"state", "lost"}, 0},
		{"browserfarm_node_state", []string{"node", "n2", "state", "draining"}, 1},
		{"browserfarm_node_state", []string{"node", "n2", "state", "active"}, 0},
		{"browserfarm_node_busy_sessions", []string{"node", "n1"}, 3},
		{"browserfarm_node_capacity", []string{"node", "n1"}, 6},
		{"browserfarm_node_capacity", []string{"node", "n2"}, 4},
		{"browserfarm_node_jobs", []string{"node", "n1", "state", "processing"}, 3},
		{"browserfarm_node_cpu_percent", []string{"node", "n1"}, 55.5},
		{"browserfarm_node_memory_used_bytes", []string{"node", "n1"}, 3 << 30},
		{"browserfarm_node_memory_total_bytes", []string{"node", "n1"}, 16 << 30},
		{"browserfarm_node_chrome_pss_bytes", []string{"node", "n1"}, 812 << 20},
		{"browserfarm_node_jobs_since_chrome_start", []string{"node", "n1"}, 7},
		{"browserfarm_node_jobs_since_process_start", []string{"node", "n1"}, 47},
		{"browserfarm_node_chrome_restarts_total", []string{"node", "n1"}, 2},
		{"browserfarm_node_process_restarts_total", []string{"node", "n2"}, 1},
		{"browserfarm_node_process_restarts_total", []string{"node", "n1"}, 0},
		// Lifetime counters: the farm's and each node id's.
		{"browserfarm_jobs_total", []string{"outcome", "completed"}, 3},
		{"browserfarm_jobs_total", []string{"outcome", "failed"}, 2},
		{"browserfarm_chrome_recycles_total", []string{"reason", "jobs"}, 4},
		{"browserfarm_chrome_recycles_total", []string{"reason", "memory"}, 1},
		{"browserfarm_chrome_crashes_total", nil, 0},
		{"browserfarm_process_restarts_total", []string{"reason", "crash"}, 1},
		{"browserfarm_process_restarts_total", []string{"reason", "recycle"}, 0},
		{"browserfarm_node_jobs_finished_total", []string{"node", "n1", "outcome", "failed"}, 2},
		{"browserfarm_node_jobs_finished_total", []string{"node", "n2", "outcome", "completed"}, 2},
		{"browserfarm_node_chrome_recycles_total", []string{"node", "n1", "reason", "jobs"}, 4},
		{"browserfarm_node_process_restarts_by_reason_total", []string{"node", "n2", "reason", "crash"}, 1},
		{"browserfarm_contexts_total", []string{"outcome", "reused"}, 40},
		{"browserfarm_contexts_total", []string{"outcome", "replaced"}, 3},
		{"browserfarm_node_contexts_total", []string{"node", "n1", "outcome", "replaced"}, 3},
		{"browserfarm_node_contexts_total", []string{"node", "n2", "outcome", "reused"}, 0},
		{"browserfarm_desired_nodes", nil, 5},
		{"browserfarm_producer_leader", nil, 1},
	}
	for _, w := range want {
		got, ok := value(fams, w.name, w.labels...)
		if !ok || got != w.value {
			t.Errorf("%s%v = %v (present %v), want %v", w.name, w.labels, got, ok, w.value)
		}
	}
	for _, name := range []string{"browserfarm_node_chrome_restarts_total", "browserfarm_jobs_total",
		"browserfarm_chrome_recycles_total", "browserfarm_process_restarts_total", "browserfarm_node_jobs_finished_total",
		"browserfarm_node_chrome_recycles_total", "browserfarm_node_process_restarts_by_reason_total",
		"browserfarm_contexts_total", "browserfarm_node_contexts_total"} {
		if fams[name].GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s is not a counter", name)
		}
	}
	if _, ok := value(fams, "browserfarm_node_heartbeat_age_seconds", "node", "n1"); !ok {
		t.Errorf("no heartbeat age")
	}
	h := fams["browserfarm_assignment_latency_seconds"]
	if h == nil || h.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("assignment latency histogram: %v", h)
	}
	hist := h.Metric[0].Histogram
	if hist.GetSampleCount() != 4 || hist.GetSampleSum() < 2.11 || hist.GetSampleSum() > 2.13 {
		t.Errorf("assignment histogram count %d sum %v, want 4 and 2.12", hist.GetSampleCount(), hist.GetSampleSum())
	}
	for _, b := range hist.Bucket {
		if b.GetUpperBound() == 0.05 && b.GetCumulativeCount() != 3 {
			t.Errorf("bucket le=0.05 holds %d, want 3", b.GetCumulativeCount())
		}
	}

	// Scrapes within the cache TTL share one database read; the leader
	// gauge is read at scrape time.
	f.leader.Store(false)
	if _, err := f.q.Incarnation(jobqueue.Node{ID: "n1"}).Heartbeat(ctx, jobqueue.NodeLoad{BusySessions: 1}); err != nil {
		t.Fatal(err)
	}
	f.metrics.queue.mu.Lock()
	f.metrics.queue.now = func() time.Time { return f.metrics.queue.cachedAt.Add(queueCacheTTL / 2) }
	f.metrics.queue.mu.Unlock()
	fams = f.scrape()
	if v, _ := value(fams, "browserfarm_node_busy_sessions", "node", "n1"); v != 3 {
		t.Errorf("busy sessions within the cache TTL: %v, want the cached 3", v)
	}
	if v, _ := value(fams, "browserfarm_producer_leader"); v != 0 {
		t.Errorf("leader gauge on a standby: %v", v)
	}
	f.metrics.queue.mu.Lock()
	f.metrics.queue.now = func() time.Time { return f.metrics.queue.cachedAt.Add(queueCacheTTL) }
	f.metrics.queue.mu.Unlock()
	fams = f.scrape()
	if v, _ := value(fams, "browserfarm_node_busy_sessions", "node", "n1"); v != 1 {
		t.Errorf("busy sessions after the cache TTL: %v, want 1", v)
	}

	// Without a database the producer's own series still come, and the
	// queue series are absent rather than stale.
	f.metrics.queue.mu.Lock()
	f.metrics.queue.now = func() time.Time { return f.metrics.queue.cachedAt.Add(queueCacheTTL) }
	f.metrics.queue.mu.Unlock()
	f.pool.Close()
	fams = f.scrape()
	if v, ok := value(fams, "browserfarm_queue_scrape_success"); !ok || v != 0 {
		t.Errorf("scrape success without a database: %v %v", v, ok)
	}
	if _, ok := fams["browserfarm_queue_jobs"]; ok {
		t.Errorf("queue series served without a database")
	}
	if v, _ := value(fams, "browserfarm_desired_nodes"); v != 5 {
		t.Errorf("desired nodes without a database: %v", v)
	}
}

// TestMetricsWithoutQueue: metrics not wired to a queue serve the
// producer's series only, and SetLeader drives the leader gauge.
func TestMetricsWithoutQueue(t *testing.T) {
	t.Parallel()
	reg := newRegistry()
	m := NewMetrics(reg)
	m.SetLeader(true)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
		if f.GetName() == "browserfarm_producer_leader" && f.Metric[0].Gauge.GetValue() != 1 {
			t.Errorf("leader gauge %v after SetLeader(true)", f.Metric[0].Gauge.GetValue())
		}
	}
	if !names["browserfarm_producer_leader"] {
		t.Errorf("browserfarm_producer_leader missing")
	}
	// The desired count is exported once known, and not when unknown again.
	if names["browserfarm_desired_nodes"] {
		t.Errorf("browserfarm_desired_nodes exported before any count")
	}
	for _, tc := range []struct {
		n    int
		want bool
	}{{0, true}, {7, true}, {-1, false}} {
		m.SetDesiredNodes(tc.n)
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := false
		for _, f := range fams {
			if f.GetName() == "browserfarm_desired_nodes" {
				got = f.Metric[0].Gauge.GetValue() == float64(tc.n)
			}
		}
		if got != tc.want {
			t.Errorf("after SetDesiredNodes(%d): browserfarm_desired_nodes exported with that value: %v, want %v", tc.n, got, tc.want)
		}
	}
	if names["browserfarm_queue_jobs"] || names["browserfarm_queue_scrape_success"] {
		t.Errorf("queue series without a queue: %v", names)
	}

	// A nil *Metrics is a valid "no metrics".
	var none *Metrics
	none.ObserveAssignment(time.Second, 3)
	none.SetDesiredNodes(2)
	none.SetLeader(true)
	none.SetLeaderFunc(func() bool { return true })
	none.WatchQueue(nil, nil)
}

// TestMetricsGoneNodesExportNoLoad: a node that exited keeps its last
// heartbeat's load in its row until retention deletes it; /metrics exports
// its state and lifetime counters, not that load as current.
func TestMetricsGoneNodesExportNoLoad(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.register("gone", 6)
	f.register("live", 6)
	for _, id := range []string{"gone", "live"} {
		n, err := f.q.GetNode(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.q.Incarnation(n).Heartbeat(ctx, jobqueue.NodeLoad{BusySessions: 6, CPUPercent: 97}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := f.q.GetNode(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.q.Incarnation(n).SetState(ctx, jobqueue.NodeExited, jobqueue.ExitStop); err != nil {
		t.Fatal(err)
	}
	fams := f.scrape()
	for _, name := range []string{"browserfarm_node_busy_sessions", "browserfarm_node_capacity", "browserfarm_node_cpu_percent", "browserfarm_node_heartbeat_age_seconds"} {
		if v, ok := value(fams, name, "node", "gone"); ok {
			t.Errorf("the exited node exports %s %v", name, v)
		}
		if _, ok := value(fams, name, "node", "live"); !ok {
			t.Errorf("the live node exports no %s", name)
		}
	}
	if v, ok := value(fams, "browserfarm_node_state", "node", "gone", "state", "exited"); !ok || v != 1 {
		t.Errorf("the exited node's state: %v, %v", v, ok)
	}
}

// TestHeartbeatAgeByTheDatabasesClock: the producer's clock 30 s ahead of
// the database's (an unsynchronised VM) must not make a node that just
// heartbeated look stale on the dashboard or /metrics, while the rescue,
// which judges by the database's clock, finds it fresh.
func TestHeartbeatAgeByTheDatabasesClock(t *testing.T) {
	skew := 30 * time.Second
	f := newFixture(t, func(c *Config) { c.Now = func() time.Time { return time.Now().Add(skew) } })
	f.metrics.queue.now = func() time.Time { return time.Now().Add(skew) }
	ctx := context.Background()
	f.register("n1", 6)
	rep, err := f.q.RescueLost(ctx, jobqueue.DefaultStaleAfter)
	if err != nil || len(rep.LostNodes) != 0 {
		t.Fatalf("rescue: %+v %v", rep, err)
	}
	var got struct {
		Nodes []struct {
			ID    string  `json:"id"`
			Age   float64 `json:"heartbeat_age_seconds"`
			Stale bool    `json:"stale"`
		} `json:"nodes"`
	}
	f.call("GET", "/api/nodes", "", "", 200, &got)
	if len(got.Nodes) != 1 || got.Nodes[0].Stale || got.Nodes[0].Age > 5 {
		t.Errorf("/api/nodes: %+v, want n1 fresh (the rescue finds it so)", got.Nodes)
	}
	if v, _ := value(f.scrape(), "browserfarm_node_heartbeat_age_seconds", "node", "n1"); v > 5 {
		t.Errorf("browserfarm_node_heartbeat_age_seconds = %v, want about 0", v)
	}
}
