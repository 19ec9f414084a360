package web

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
)

func TestNodesStatsHealth(t *testing.T) {
	t.Parallel()
	now := time.Now()
	clock := func() time.Time { return now }
	f := newFixture(t, func(c *Config) { c.Now = clock; c.StaleAfter = time.Minute })
	ctx := context.Background()
	// "lost" last heartbeated 10 minutes ago and was declared lost; "old"
	// 2 minutes ago, stale for the dashboard but not lost yet.
	for id, ago := range map[string]time.Duration{"lost": 10 * time.Minute, "old": 2 * time.Minute} {
		past := jobqueue.New(f.pool, jobqueue.Config{Now: func() time.Time { return now.Add(-ago) }})
		if _, _, err := past.Register(ctx, jobqueue.NodeInfo{ID: id, Capacity: 6}); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err := f.q.RescueLost(ctx, 5*time.Minute); err != nil || len(rep.LostNodes) != 1 {
		t.Fatalf("rescue: %+v, %v", rep, err)
	}
	f.register("calm", 6)
	f.register("hot", 6)
	load := jobqueue.NodeLoad{CPUPercent: 35, MemUsedBytes: 2 << 30, MemTotalBytes: 8 << 30, ChromePSSBytes: 700 << 20,
		BusySessions: 4, JobsSinceChromeStart: 13, JobsSinceProcessStart: 57, ChromeRestarts: 2}
	if _, err := f.q.Incarnation(jobqueue.Node{ID: "calm"}).Heartbeat(ctx, load); err != nil {
		t.Fatal(err)
	}
	load.CPUPercent = 97
	if _, err := f.q.Incarnation(jobqueue.Node{ID: "hot"}).Heartbeat(ctx, load); err != nil {
		t.Fatal(err)
	}
	f.register("calm", 6) // a process restart of calm
	if _, err := f.q.Incarnation(jobqueue.Node{ID: "calm"}).Heartbeat(ctx, jobqueue.NodeLoad{BusySessions: 4, ChromePSSBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	f.enqueue(jobqueue.Spec{URL: "http://a.example/"}, jobqueue.Spec{URL: "http://a.example/2"})
	f.start("calm", 1)

	var nodes struct {
		Nodes []nodeView `json:"nodes"`
	}
	f.call("GET", "/api/nodes", "", "", http.StatusOK, &nodes)
	if len(nodes.Nodes) != 4 {
		t.Fatalf("nodes answer: %+v", nodes)
	}
	// Each node carries the recycling policy it registered with: calm and
	// hot the supervisor's defaults, lost and old none.
	for _, n := range nodes.Nodes {
		want := [2]int{20, 80}
		if n.ID == "lost" || n.ID == "old" {
			want = [2]int{0, 0}
		}
		if got := [2]int{n.ChromeRecycleJobs, n.ExitAfterJobs}; got != want {
			t.Errorf("node %s: thresholds %v, want the %v it registered with", n.ID, got, want)
		}
	}
	byID := map[string]nodeView{}
	for _, n := range nodes.Nodes {
		byID[n.ID] = n
	}
	type flags struct {
		state            jobqueue.NodeState
		stale, overload  bool
		busy, processing int
		restarts         int64
	}
	want := map[string]flags{
		"calm": {jobqueue.NodeActive, false, false, 4, 1, 1},
		"hot":  {jobqueue.NodeActive, false, true, 4, 0, 0},
		"lost": {jobqueue.NodeLost, false, false, 0, 0, 0},
		"old":  {jobqueue.NodeActive, true, false, 0, 0, 0},
	}
	for id, w := range want {
		n := byID[id]
		got := flags{n.State, n.Stale, n.Overloaded, n.Load.BusySessions, n.Processing, n.ProcessRestarts}
		if got != w {
			t.Errorf("node %s: %+v, want %+v", id, got, w)
		}
	}
	if h := byID["hot"]; h.Load.JobsSinceChromeStart != 13 || h.Load.JobsSinceProcessStart != 57 || h.Load.ChromeRestarts != 2 ||
		h.Load.ChromePSSBytes != 700<<20 || h.Hostname != "host-hot" {
		t.Errorf("hot node load: %+v", h)
	}
	if age := byID["old"].HeartbeatAgeSeconds; age < 110 || age > 130 {
		t.Errorf("heartbeat age of old: %v", age)
	}

	var st statsView
	f.call("GET", "/api/stats", "", "", http.StatusOK, &st)
	if st.Jobs[jobqueue.StatePending] != 1 || st.Jobs[jobqueue.StateProcessing] != 1 || !st.Leader || st.Autoscale ||
		st.DesiredNodes != nil || st.Version != "v-test" {
		t.Fatalf("stats: %+v", st)
	}
	f.desired.Store(7)
	f.leader.Store(false)
	f.call("GET", "/api/stats", "", "", http.StatusOK, &st)
	if st.Leader || !st.Autoscale || st.DesiredNodes == nil || *st.DesiredNodes != 7 {
		t.Fatalf("stats on a standby with autoscaling: %+v", st)
	}

	var ready map[string]any
	f.call("GET", "/readyz", "", "", http.StatusOK, &ready)
	if ready["leader"] != false || ready["ready"] != true {
		t.Fatalf("readyz on a standby: %v", ready)
	}
	f.leader.Store(true)
	f.call("GET", "/readyz", "", "", http.StatusOK, &ready)
	if ready["leader"] != true {
		t.Fatalf("readyz on the leader: %v", ready)
	}
	f.call("GET", "/healthz", "", "", http.StatusOK, nil)

	// Without a database: /readyz says so; /healthz, the liveness check,
	// still answers (a restart mends no database outage).
	f.pool.Close()
	f.call("GET", "/healthz", "", "", http.StatusOK, nil)
	f.call("GET", "/readyz", "", "", http.StatusServiceUnavailable, &ready)
	if ready["ready"] != false || ready["leader"] != true {
		t.Fatalf("readyz without a database: %v", ready)
	}
	if e := f.errorOf("GET", "/api/nodes", "", "", http.StatusInternalServerError); strings.Contains(e.Error, "closed") {
		t.Fatalf("a database error leaks to an open endpoint: %q", e.Error)
	}
}

func TestSamplesAndFailures(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	f.register("a", 6)
	f.register("b", 6)
	// Two samples 5 s apart, written through a queue whose clock is set, so
	// the test needs no waiting; the server reads them on the real clock.
	base := time.Now().Add(-time.Minute).Truncate(10 * time.Second)
	var at time.Time
	qc := jobqueue.New(f.pool, jobqueue.Config{Now: func() time.Time { return at }})
	for i, pss := range []int64{300, 500} {
		at = base.Add(time.Duration(i) * 5 * time.Second)
		for _, n := range []string{"a", "b"} {
			if _, err := qc.Incarnation(jobqueue.Node{ID: n}).Heartbeat(ctx, jobqueue.NodeLoad{ChromePSSBytes: pss << 20, BusySessions: i + 1}); err != nil {
				t.Fatal(err)
			}
		}
		if rep, err := qc.RecordSamples(ctx, 5*time.Second); err != nil || rep.Skipped {
			t.Fatalf("record: %+v, %v", rep, err)
		}
	}
	var s struct {
		Step  int64         `json:"step_seconds"`
		Queue queueSeries   `json:"queue"`
		Nodes nodeSeriesSet `json:"nodes"`
	}
	f.call("GET", "/api/samples", "", "", http.StatusOK, &s)
	if s.Step != 10 || len(s.Queue.T) != 1 || len(s.Nodes.T) != 1 || s.Queue.T[0] != base.Unix() {
		t.Fatalf("samples at the default step: %+v", s)
	}
	if a := s.Nodes.Series["a"]; a == nil || *a.ChromePSSBytes[0] != 500<<20 || *a.BusySessions[0] != 2 {
		t.Fatalf("node a: %+v", s.Nodes.Series)
	}
	f.call("GET", fmt.Sprintf("/api/samples?step=5s&since=%d", base.Unix()), "", "", http.StatusOK, &s)
	if s.Step != 5 || len(s.Queue.T) != 2 || len(s.Nodes.Series) != 2 {
		t.Fatalf("samples at step 5s: %+v", s)
	}
	f.call("GET", "/api/samples?since="+base.Add(5*time.Second).Format(time.RFC3339), "", "", http.StatusOK, &s)
	if len(s.Queue.T) != 1 {
		t.Fatalf("samples since an RFC 3339 time: %+v", s)
	}
	// A day-long window is capped at 2000 buckets: 44 s each.
	f.call("GET", fmt.Sprintf("/api/samples?since=%d", time.Now().Add(-24*time.Hour).Unix()), "", "", http.StatusOK, &s)
	if s.Step != 44 && s.Step != 43 {
		t.Fatalf("step for a day: %d", s.Step)
	}
	for _, q := range []string{"?since=yesterday", "?step=0", "?step=2d", "?since=" + fmt.Sprint(time.Now().Add(time.Hour).Unix())} {
		f.errorOf("GET", "/api/samples"+q, "", "", http.StatusBadRequest)
	}

	f.runOne("a", "http://x.example/1", jobqueue.Result{}, "timeout")
	f.runOne("a", "http://x.example/2", jobqueue.Result{}, "timeout")
	last := f.runOne("b", "http://x.example/3", jobqueue.Result{}, "http_5xx")
	var fl struct {
		Groups []jobqueue.FailureGroup `json:"groups"`
	}
	f.call("GET", "/api/failures", "", "", http.StatusOK, &fl)
	if len(fl.Groups) != 2 || fl.Groups[0].ErrorClass != "timeout" || fl.Groups[0].Count != 2 ||
		fl.Groups[1].Recent[0].ID != last || fl.Groups[1].Recent[0].URL != "http://x.example/3" {
		t.Fatalf("failures: %+v", fl)
	}
	f.call("GET", "/api/failures?per_class=1", "", "", http.StatusOK, &fl)
	if len(fl.Groups[0].Recent) != 1 {
		t.Fatalf("failures, one per class: %+v", fl)
	}
	// A minute ahead: the window starts at that minute's beginning, after now.
	f.call("GET", fmt.Sprintf("/api/failures?since=%d", time.Now().Add(time.Minute).Unix()), "", "", http.StatusOK, &fl)
	if len(fl.Groups) != 0 {
		t.Fatalf("failures since the future: %+v", fl)
	}
	f.errorOf("GET", "/api/failures?per_class=0", "", "", http.StatusBadRequest)
}

// TestSamplesOfAFleetLargerThanTheChart: past maxChartNodes nodes the
// samples hold the nodes with the highest Chrome PSS over the chart window
// only, whatever since asks for, so that neither the response nor the
// chart grows with the fleet, and a poll of the last bucket gets the set
// the first load got.
func TestSamplesOfAFleetLargerThanTheChart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	n := maxChartNodes + 3
	var at time.Time
	qc := jobqueue.New(f.pool, jobqueue.Config{Now: func() time.Time { return at }})
	sample := func(when time.Time, pss func(i int) int64) {
		t.Helper()
		at = when
		for i := range n {
			load := jobqueue.NodeLoad{ChromePSSBytes: pss(i) << 20}
			if _, err := qc.Incarnation(jobqueue.Node{ID: fmt.Sprintf("node-%02d", i)}).Heartbeat(ctx, load); err != nil {
				t.Fatal(err)
			}
		}
		if rep, err := qc.RecordSamples(ctx, 5*time.Second); err != nil || rep.Skipped || rep.Nodes != int64(n) {
			t.Fatalf("record: %+v, %v", rep, err)
		}
	}
	for i := range n {
		f.register(fmt.Sprintf("node-%02d", i), 6)
	}
	// Half an hour ago the first nodes peaked; a minute ago the last ones
	// were the highest.
	sample(time.Now().Add(-30*time.Minute), func(i int) int64 { return int64(2000 - i) })
	sample(time.Now().Add(-time.Minute), func(i int) int64 { return int64(100 + i) })

	var want []string
	for i := range maxChartNodes {
		want = append(want, fmt.Sprintf("node-%02d", i))
	}
	for _, query := range []string{"", fmt.Sprintf("?since=%d", time.Now().Add(-2*time.Minute).Unix())} {
		var s struct {
			Nodes nodeSeriesSet `json:"nodes"`
		}
		f.call("GET", "/api/samples"+query, "", "", http.StatusOK, &s)
		if s.Nodes.Total != n || !s.Nodes.Chosen || !slices.Equal(s.Nodes.ChosenIDs, want) ||
			s.Nodes.ChosenOverSeconds != int64(DefaultChartWindow/time.Second) || len(s.Nodes.Series) != maxChartNodes {
			t.Fatalf("samples%s: total %d, chosen %v %v over %d s, %d series; want %d, %v over the chart window",
				query, s.Nodes.Total, s.Nodes.Chosen, s.Nodes.ChosenIDs, s.Nodes.ChosenOverSeconds, len(s.Nodes.Series), n, want)
		}
		for id := range s.Nodes.Series {
			if !slices.Contains(want, id) {
				t.Errorf("samples%s: a series of %s, which is not chosen", query, id)
			}
		}
		if query == "" && len(s.Nodes.T) != 2 {
			t.Fatalf("buckets %v, want both samples", s.Nodes.T)
		}
	}
}

func TestDashboardAssets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	cases := []struct {
		path, ctype, contains string
	}{
		{"/", "text/html", `<script src="/assets/app.js"`},
		{"/assets/app.js", "text/javascript", "farmDashboard"},
		{"/assets/app.css", "text/css", ".tiles"},
		{"/assets/vendor/uPlot.iife.min.js", "text/javascript", "uPlot"},
		{"/assets/vendor/uPlot.min.css", "text/css", ".uplot"},
	}
	for _, c := range cases {
		code, h, body := f.do("GET", c.path, "", "")
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), c.ctype) || !strings.Contains(string(body), c.contains) {
			t.Errorf("GET %s: %d %q, %d bytes", c.path, code, h.Get("Content-Type"), len(body))
		}
		if h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", c.path)
		}
	}
	_, h, _ := f.do("GET", "/", "", "")
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("dashboard CSP %q", csp)
	}
	if code, _, _ := f.do("GET", "/assets/nothing.js", "", ""); code != 404 {
		t.Errorf("missing asset: %d", code)
	}
	if code, _, _ := f.do("GET", "/metrics", "", ""); code != 200 {
		t.Errorf("/metrics: %d", code)
	}
	none := newFixture(t, func(c *Config) { c.Gatherer = nil })
	if code, _, _ := none.do("GET", "/metrics", "", ""); code != 404 {
		t.Errorf("/metrics without a gatherer: %d", code)
	}
}
