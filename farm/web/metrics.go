package web

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// Metrics are the producer's Prometheus collectors: its own observations
// (assignment latency, desired node count, leadership) and the queue and
// node series, read from the database at scrape time so that every producer,
// leader or standby, serves the same farm-wide values. The methods of a nil
// *Metrics do nothing, so a producer can run without metrics.
type Metrics struct {
	assignLatency prometheus.Histogram
	desired       *desiredCollector
	leader        atomic.Bool
	leaderFn      atomic.Pointer[func() bool]
	wake          atomic.Pointer[wake.Hub]
	queue         *queueCollector
}

// Timings of the queue collector.
const (
	// queueCacheTTL: scrapes within this long of a database read reuse it,
	// so several scrapers (or a scraper retrying) cost one read.
	queueCacheTTL = 2 * time.Second
	// queueScrapeTimeout bounds the database reads of one scrape.
	queueScrapeTimeout = 10 * time.Second
	// FinishedWindow is the trailing window of browserfarm_jobs_finished_recent,
	// which starts at a whole minute (jobqueue.WindowStart).
	FinishedWindow = 5 * time.Minute
)

// NewMetrics creates the collectors and registers them on reg (nil: not
// registered). It panics when one is already registered there, like
// prometheus.MustRegister: a wiring error. The queue series appear once
// WatchQueue (or NewServer) gave the metrics a queue.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		assignLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "browserfarm_assignment_latency_seconds",
			Help: "Time from a job's submission to its assignment to a node (submit to queued), one observation per job.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
				1800, 3600},
		}),
		desired: newDesiredCollector(),
		queue:   newQueueCollector(),
	}
	leader := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "browserfarm_producer_leader",
		Help: "1 when this producer is the leader that assigns jobs, 0 on a standby.",
	}, func() float64 {
		if m.isLeader() {
			return 1
		}
		return 0
	})
	polling := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "browserfarm_wake_nodes",
		Help: "Nodes that long-poll this producer for wake-ups (farm consumer --wake-url): polling now or within the last minute.",
	}, func() float64 {
		if h := m.wake.Load(); h != nil {
			return float64(h.Nodes())
		}
		return 0
	})
	if reg != nil {
		reg.MustRegister(m.assignLatency, m.desired, leader, polling, m.queue)
	}
	return m
}

// WatchWake makes browserfarm_wake_nodes count the nodes polling h
// (NewServer calls it with Config.Wake).
func (m *Metrics) WatchWake(h *wake.Hub) {
	if m != nil && h != nil {
		m.wake.Store(h)
	}
}

// ObserveAssignment records the submit→queued latency of jobs jobs assigned
// together (one observation each, so the histogram counts jobs). jobs < 1
// records nothing.
func (m *Metrics) ObserveAssignment(latency time.Duration, jobs int) {
	if m == nil {
		return
	}
	s := latency.Seconds()
	for range jobs {
		m.assignLatency.Observe(s)
	}
}

// SetDesiredNodes sets the desired consumer node count; a negative n
// (unknown: a standby, a leader before its first computation or after its
// term) exports no browserfarm_desired_nodes at all. A 0 would be a count:
// autoscaling on the fleet's max of the gauge would scale every consumer
// away while no producer leads (a database outage), where an absent series
// lets it keep the fleet (deploy/kubernetes/keda: ignoreNullValues false,
// fallback currentReplicas).
func (m *Metrics) SetDesiredNodes(n int) {
	if m != nil {
		m.desired.n.Store(int64(n))
	}
}

// desiredCollector exports browserfarm_desired_nodes while it is known.
type desiredCollector struct {
	desc *prometheus.Desc
	n    atomic.Int64 // < 0: unknown
}

func newDesiredCollector() *desiredCollector {
	c := &desiredCollector{desc: prometheus.NewDesc("browserfarm_desired_nodes",
		"Consumer node count the autoscaler asks for; exported by the leader once it computed one, absent otherwise.", nil, nil)}
	c.n.Store(-1)
	return c
}

func (c *desiredCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *desiredCollector) Collect(ch chan<- prometheus.Metric) {
	if n := c.n.Load(); n >= 0 {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
	}
}

// SetLeader sets the leader gauge, for a producer that tracks leadership
// itself; SetLeaderFunc (which NewServer calls with Config.IsLeader) takes
// precedence.
func (m *Metrics) SetLeader(leader bool) {
	if m != nil {
		m.leader.Store(leader)
	}
}

// SetLeaderFunc makes the leader gauge read f at scrape time.
func (m *Metrics) SetLeaderFunc(f func() bool) {
	if m != nil && f != nil {
		m.leaderFn.Store(&f)
	}
}

func (m *Metrics) isLeader() bool {
	if f := m.leaderFn.Load(); f != nil {
		return (*f)()
	}
	return m.leader.Load()
}

// WatchQueue makes the queue series read q at scrape time. Errors go to log.
func (m *Metrics) WatchQueue(q *jobqueue.Queue, log *zap.Logger) {
	if m == nil {
		return
	}
	if log == nil {
		log = zap.NewNop()
	}
	m.queue.mu.Lock()
	defer m.queue.mu.Unlock()
	m.queue.q, m.queue.log = q, log
	m.queue.cachedAt = time.Time{}
}

// queueCollector reads the queue and the nodes at scrape time.
type queueCollector struct {
	now func() time.Time

	jobs, ready, oldest, finished, scrapeOK  *prometheus.Desc
	nodes, nodeState, busy, capacity, held   *prometheus.Desc
	cpu, memUsed, memTotal, pss, sinceChrome *prometheus.Desc
	sinceProcess, chromeRestarts, restarts   *prometheus.Desc
	heartbeatAge                             *prometheus.Desc
	// Lifetime counters (jobqueue.Counters), farm-wide and per node id.
	lifeJobs, lifeRecycles, lifeCrashes, lifeRestarts, lifeContexts *prometheus.Desc
	nodeJobs, nodeRecycles, nodeCrashes, nodeRestarts, nodeContexts *prometheus.Desc

	mu       sync.Mutex // serializes scrapes and guards the fields below
	q        *jobqueue.Queue
	log      *zap.Logger
	cachedAt time.Time
	cached   []prometheus.Metric
}

func newQueueCollector() *queueCollector {
	node := []string{"node"}
	return &queueCollector{
		now:      time.Now,
		jobs:     prometheus.NewDesc("browserfarm_queue_jobs", "Jobs in the queue by state (finished states: jobs still retained).", []string{"state"}, nil),
		ready:    prometheus.NewDesc("browserfarm_queue_ready_jobs", "Pending jobs whose retry backoff is over: assignable now.", nil, nil),
		oldest:   prometheus.NewDesc("browserfarm_queue_oldest_pending_age_seconds", "Age of the oldest pending job; 0 when none is pending.", nil, nil),
		finished: prometheus.NewDesc("browserfarm_jobs_finished_recent", "Jobs in a final state that they reached in the trailing 5 minutes, counted in whole minutes (from the start of the minute 5 minutes ago), by state and, for failed jobs, error class; a job retried since is counted where it is now (browserfarm_jobs_total counts every finish).", []string{"state", "error_class"}, nil),
		scrapeOK: prometheus.NewDesc("browserfarm_queue_scrape_success", "1 when the queue series of this scrape were read from the database, 0 when the read failed.", nil, nil),
		nodes:    prometheus.NewDesc("browserfarm_nodes", "Consumer nodes by state.", []string{"state"}, nil),
		nodeState: prometheus.NewDesc("browserfarm_node_state", "1 for a node's current state (active, draining, exited, lost), 0 for the others.",
			[]string{"node", "state"}, nil),
		busy:     prometheus.NewDesc("browserfarm_node_busy_sessions", "Chrome sessions busy on the node, from its last heartbeat.", node, nil),
		capacity: prometheus.NewDesc("browserfarm_node_capacity", "Concurrent Chrome sessions the node may run.", node, nil),
		held:     prometheus.NewDesc("browserfarm_node_jobs", "Jobs the node holds by state (queued, processing).", []string{"node", "state"}, nil),
		cpu:      prometheus.NewDesc("browserfarm_node_cpu_percent", "Node CPU use in percent, from its last heartbeat.", node, nil),
		memUsed:  prometheus.NewDesc("browserfarm_node_memory_used_bytes", "Node memory in use, from its last heartbeat.", node, nil),
		memTotal: prometheus.NewDesc("browserfarm_node_memory_total_bytes", "Node memory in all.", node, nil),
		pss: prometheus.NewDesc("browserfarm_node_chrome_pss_bytes",
			"Proportional set size of the node's Chrome process trees, from its last heartbeat.", node, nil),
		sinceChrome: prometheus.NewDesc("browserfarm_node_jobs_since_chrome_start",
			"Jobs finished on the node's current Chrome (it is recycled at the node's recycle threshold, see /api/nodes).", node, nil),
		sinceProcess: prometheus.NewDesc("browserfarm_node_jobs_since_process_start",
			"Jobs finished by the node's current process (it exits at the node's exit threshold, see /api/nodes).", node, nil),
		chromeRestarts: prometheus.NewDesc("browserfarm_node_chrome_restarts_total",
			"Chrome recycles and restarts by the node's current process (resets when the process restarts).", node, nil),
		restarts: prometheus.NewDesc("browserfarm_node_process_restarts_total",
			"Times the node's process started again under the same node id.", node, nil),
		heartbeatAge: prometheus.NewDesc("browserfarm_node_heartbeat_age_seconds", "Time since the node's last heartbeat.", node, nil),
		lifeJobs: prometheus.NewDesc("browserfarm_jobs_total",
			"Jobs completed and failed (reached failed) by the farm, all time; a retention purge does not lower it.", []string{"outcome"}, nil),
		lifeRecycles: prometheus.NewDesc("browserfarm_chrome_recycles_total",
			"Chrome recycles by the farm's nodes, all time, by reason (jobs: every N jobs; memory: the memory ceiling).", []string{"reason"}, nil),
		lifeCrashes: prometheus.NewDesc("browserfarm_chrome_crashes_total", "Chromes lost unplanned (exited or hung) on the farm's nodes, all time.", nil, nil),
		lifeRestarts: prometheus.NewDesc("browserfarm_process_restarts_total",
			"Consumer process restarts on the farm, all time, by how the previous process ended (recycle: exit 75; stop: on request; crash: killed, crashed, lost or gave up).", []string{"reason"}, nil),
		nodeJobs: prometheus.NewDesc("browserfarm_node_jobs_finished_total",
			"Jobs the node id completed and failed, across its process restarts.", []string{"node", "outcome"}, nil),
		nodeRecycles: prometheus.NewDesc("browserfarm_node_chrome_recycles_total",
			"Chrome recycles of the node id across its process restarts, by reason (jobs, memory).", []string{"node", "reason"}, nil),
		nodeCrashes: prometheus.NewDesc("browserfarm_node_chrome_crashes_total",
			"Chromes the node id lost unplanned, across its process restarts.", node, nil),
		lifeContexts: prometheus.NewDesc("browserfarm_contexts_total",
			"Browser contexts of isolation wipe after their jobs, all time: reused (the next job ran in the wiped context) or replaced (given up for a brand-new one: a service worker, HTTP auth, a popup, a fetch in flight...; the nodes' logs say why).", []string{"outcome"}, nil),
		nodeContexts: prometheus.NewDesc("browserfarm_node_contexts_total",
			"Browser contexts of isolation wipe of the node id after their jobs, across its process restarts: reused or replaced.", []string{"node", "outcome"}, nil),
		nodeRestarts: prometheus.NewDesc("browserfarm_node_process_restarts_by_reason_total",
			"Process restarts of the node id by how the previous process ended (recycle, stop, crash).", []string{"node", "reason"}, nil),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.jobs, c.ready, c.oldest, c.finished, c.scrapeOK, c.nodes, c.nodeState,
		c.busy, c.capacity, c.held, c.cpu, c.memUsed, c.memTotal, c.pss, c.sinceChrome, c.sinceProcess,
		c.chromeRestarts, c.restarts, c.heartbeatAge, c.lifeJobs, c.lifeRecycles, c.lifeCrashes, c.lifeRestarts,
		c.lifeContexts, c.nodeJobs, c.nodeRecycles, c.nodeCrashes, c.nodeRestarts, c.nodeContexts} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.q == nil {
		return
	}
	now := c.now()
	if c.cached == nil || now.Sub(c.cachedAt) >= queueCacheTTL {
		c.cached = c.read(now)
		c.cachedAt = now
	}
	for _, m := range c.cached {
		ch <- m
	}
}

// read queries the database and builds the series. A failed read yields
// only browserfarm_queue_scrape_success 0: the producer's own series still
// reach Prometheus, and no stale queue value is passed off as current.
func (c *queueCollector) read(now time.Time) []prometheus.Metric {
	// prometheus.Collector gives no context; the scrape is bounded here.
	ctx, cancel := context.WithTimeout(context.Background(), queueScrapeTimeout)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
		return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	failed := func(what string, err error) []prometheus.Metric {
		c.log.Warn("metrics: cannot read the queue", zap.String("what", what), zap.Error(err))
		return []prometheus.Metric{gauge(c.scrapeOK, 0)}
	}
	st, err := c.q.Stats(ctx)
	if err != nil {
		return failed("stats", err)
	}
	nodes, err := c.q.ListNodes(ctx)
	if err != nil {
		return failed("nodes", err)
	}
	fin, err := c.q.FinishedSince(ctx, now.Add(-FinishedWindow))
	if err != nil {
		return failed("finished jobs", err)
	}

	out := []prometheus.Metric{gauge(c.scrapeOK, 1)}
	for _, s := range jobqueue.States() {
		out = append(out, gauge(c.jobs, float64(st.Jobs[s]), string(s)))
	}
	out = append(out, gauge(c.ready, float64(st.Ready)))
	oldest := 0.0
	if st.OldestPending != nil {
		oldest = max(0, now.Sub(*st.OldestPending).Seconds())
	}
	out = append(out, gauge(c.oldest, oldest))
	// Completed and failed are always present, so that a rate or an alert
	// on them has a series even before the first finish.
	seen := map[jobqueue.State]bool{}
	for _, f := range fin {
		seen[f.State] = true
		out = append(out, gauge(c.finished, float64(f.Count), string(f.State), f.ErrorClass))
	}
	for _, s := range []jobqueue.State{jobqueue.StateCompleted, jobqueue.StateFailed} {
		if !seen[s] {
			out = append(out, gauge(c.finished, 0, string(s), ""))
		}
	}

	counter := func(d *prometheus.Desc, v int64, labels ...string) prometheus.Metric {
		return prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	// lifetime adds the series of one set of lifetime counters; labels lead
	// each series' own (the node id, or nothing for the farm).
	lifetime := func(l jobqueue.Counters, jobs, recycles, crashes, restarts, contexts *prometheus.Desc, labels ...string) {
		with := func(more ...string) []string { return append(append([]string{}, labels...), more...) }
		out = append(out,
			counter(jobs, l.JobsCompleted, with("completed")...),
			counter(jobs, l.JobsFailed, with("failed")...),
			counter(recycles, l.ChromeRecycles, with("jobs")...),
			counter(recycles, l.ChromeMemoryRecycles, with("memory")...),
			counter(crashes, l.ChromeCrashes, with()...),
			counter(restarts, l.RestartsRecycle, with("recycle")...),
			counter(restarts, l.RestartsStop, with("stop")...),
			counter(restarts, l.RestartsCrash, with("crash")...),
			counter(contexts, l.ContextsReused, with("reused")...),
			counter(contexts, l.ContextsReplaced, with("replaced")...),
		)
	}
	lifetime(st.Lifetime, c.lifeJobs, c.lifeRecycles, c.lifeCrashes, c.lifeRestarts, c.lifeContexts)
	for _, n := range nodes {
		lifetime(n.Lifetime, c.nodeJobs, c.nodeRecycles, c.nodeCrashes, c.nodeRestarts, c.nodeContexts, n.ID)
	}

	nodeStates := []jobqueue.NodeState{jobqueue.NodeActive, jobqueue.NodeDraining, jobqueue.NodeExited, jobqueue.NodeLost}
	counts := map[jobqueue.NodeState]int{}
	for _, n := range nodes {
		counts[n.State]++
		id := n.ID
		for _, s := range nodeStates {
			v := 0.0
			if n.State == s {
				v = 1
			}
			out = append(out, gauge(c.nodeState, v, id, string(s)))
		}
		if !n.State.Live() {
			// A node that exited or was lost keeps its last heartbeat's
			// load in its row until the node retention deletes it:
			// exported as current, it would count machines that are gone
			// in every sum of load or capacity. Its state and lifetime
			// counters stay.
			continue
		}
		l := n.Load
		out = append(out,
			gauge(c.busy, float64(l.BusySessions), id),
			gauge(c.capacity, float64(n.Capacity), id),
			gauge(c.held, float64(n.Queued), id, string(jobqueue.StateQueued)),
			gauge(c.held, float64(n.Processing), id, string(jobqueue.StateProcessing)),
			gauge(c.cpu, l.CPUPercent, id),
			gauge(c.memUsed, float64(l.MemUsedBytes), id),
			gauge(c.memTotal, float64(l.MemTotalBytes), id),
			gauge(c.pss, float64(l.ChromePSSBytes), id),
			gauge(c.sinceChrome, float64(l.JobsSinceChromeStart), id),
			gauge(c.sinceProcess, float64(l.JobsSinceProcessStart), id),
			prometheus.MustNewConstMetric(c.chromeRestarts, prometheus.CounterValue, float64(l.ChromeRestarts), id),
			prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(n.ProcessRestarts), id),
			gauge(c.heartbeatAge, n.HeartbeatAge.Seconds(), id),
		)
	}
	for _, s := range nodeStates {
		out = append(out, gauge(c.nodes, float64(counts[s]), string(s)))
	}
	return out
}
