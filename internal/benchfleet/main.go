// Command benchfleet measures what a large fleet costs one PostgreSQL
// server: N simulated consumer nodes (no browser; each holds its
// connections as farm.Consumer does, heartbeats every 3 s, has 6 slots and
// "renders" a job in a fixed time) and one real producer (farm.Producer)
// against a private cluster, under a steady stream of one-job submits.
// For each fleet size it reports the assignment round p50/p99, submit→start
// p50/p99, the most connections one node and the producer held
// (pg_stat_activity, sampled each second), and the PostgreSQL server's CPU
// (all its processes, from /proc) as a share of the machine.
//
// It is a harness, imported by nothing; scripts/bench.sh fleet runs it.
// Progress goes to stderr; the result is one JSON line on stdout.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/farm"
	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/farm/web"
	"github.com/browserfarm/browserfarm/internal/pglocal"
	"github.com/browserfarm/browserfarm/internal/procstat"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

type options struct {
	sizes     []int
	warmup    time.Duration
	window    time.Duration
	rate      float64
	render    time.Duration
	capacity  int
	heartbeat time.Duration
	pollOnly  bool
	poll      time.Duration
	// httpWake: nodes are woken by a long-poll to the producer's HTTP API
	// (farm/wake) instead of LISTEN; the producer LISTENs even with
	// pollOnly, which then applies to the nodes only.
	httpWake bool
	assign   jobqueue.AssignPolicy
	// bouncer puts the nodes behind PgBouncer in transaction mode with
	// this many server connections (0: nodes connect directly).
	bouncer int
}

// result is one fleet size's figures.
type result struct {
	Nodes int    `json:"nodes"`
	Mode  string `json:"mode"`
	// PgBouncerPool is the bouncer's server connections for the nodes
	// (0: none; the nodes connected directly).
	PgBouncerPool int `json:"pgbouncer_pool"`
	// PollMs is the poll-only interval of nodes and producer.
	PollMs    float64 `json:"poll_ms,omitempty"`
	Assign    string  `json:"assign"`
	Rate      float64 `json:"submits_per_s"`
	Jobs      int     `json:"jobs_measured"`
	Unstarted int     `json:"jobs_not_started"`
	// Rounds that assigned something, and their duration.
	Rounds     int     `json:"assign_rounds"`
	RoundP50Ms float64 `json:"assign_round_p50_ms"`
	RoundP99Ms float64 `json:"assign_round_p99_ms"`
	// Submit→start, nearest rank; a job not started when the result is
	// taken counts as waiting until then (a lower bound).
	StartP50Ms    float64 `json:"submit_to_start_p50_ms"`
	StartP99Ms    float64 `json:"submit_to_start_p99_ms"`
	MaxNodeConns  int     `json:"max_conns_per_node"`
	MaxNodesConns int     `json:"max_conns_all_nodes"`
	MaxProdConns  int     `json:"max_conns_producer"`
	MaxTotalConns int     `json:"max_conns_total"`
	// PGCPUShare is the server's CPU over the window / (window × CPUs).
	PGCPUShare float64 `json:"pg_cpu_share"`
	// HarnessCPUShare is this process's (all simulated nodes and the
	// producer) on the same machine.
	HarnessCPUShare float64 `json:"harness_cpu_share"`
	CompleteErrors  int     `json:"complete_errors"`
	LostNodes       int     `json:"nodes_lost"`
	LoadAvg         string  `json:"load_avg"`
}

func main() {
	var o options
	sizes := flag.String("nodes", "10,100,1000", "fleet sizes to run, one after the other, each on a fresh cluster")
	flag.DurationVar(&o.warmup, "warmup", 15*time.Second, "time after the fleet is up before measuring")
	flag.DurationVar(&o.window, "window", 60*time.Second, "measured time")
	flag.Float64Var(&o.rate, "rate", 100, "one-job submits per second, at most a third of the fleet's slot throughput (nodes × capacity / render), so that a small fleet measures latency, not a growing backlog")
	flag.DurationVar(&o.render, "render", 500*time.Millisecond, "how long a job holds its slot")
	flag.IntVar(&o.capacity, "capacity", supervisor.DefaultConfig().Capacity, "slots per node")
	flag.DurationVar(&o.heartbeat, "heartbeat", farm.DefaultHeartbeatInterval, "heartbeat interval")
	flag.BoolVar(&o.pollOnly, "poll-only", false, "nodes and producer without LISTEN (as farm --poll-only); with -http-wake, the nodes only")
	flag.BoolVar(&o.httpWake, "http-wake", false, "nodes woken by a long-poll to the producer's HTTP API (as farm consumer --wake-url) instead of LISTEN")
	flag.DurationVar(&o.poll, "poll-interval", farm.DefaultPollOnlyInterval, "with -poll-only: the nodes' --poll-interval and the producer's --tick")
	assign := flag.String("assign", "spread", "assignment policy: spread or pack")
	flag.IntVar(&o.bouncer, "pgbouncer", 0, "with -poll-only: put the nodes behind PgBouncer in transaction mode with this many server connections (needs the pgbouncer binary)")
	flag.Parse()
	if o.pollOnly && o.httpWake {
		o.poll = farm.DefaultPollInterval // woken over HTTP, a node polls only as a fallback
	}
	if o.bouncer > 0 && !o.pollOnly {
		fatal(errors.New("-pgbouncer needs -poll-only: LISTEN does not pass transaction pooling"))
	}
	var err error
	if o.assign, err = jobqueue.ParseAssignPolicy(*assign); err != nil {
		fatal(fmt.Errorf("-assign: %w", err))
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fatal(fmt.Errorf("-nodes: %q is not a fleet size", s))
		}
		o.sizes = append(o.sizes, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var runs []result
	for _, n := range o.sizes {
		r, err := runFleet(ctx, o, n)
		if err != nil {
			fatal(fmt.Errorf("%d nodes: %w", n, err))
		}
		b, _ := json.Marshal(r)
		progress("%s", b)
		runs = append(runs, r)
	}
	out, _ := json.Marshal(map[string]any{"bench": "fleet", "runs": runs})
	fmt.Println(string(out))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchfleet:", err)
	os.Exit(1)
}

func progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "benchfleet: "+format+"\n", a...)
}

// runFleet runs one fleet size on a fresh cluster.
func runFleet(ctx context.Context, o options, n int) (res result, err error) {
	progress("%d nodes: starting a private PostgreSQL", n)
	cluster, stop, err := pglocal.StartTemp(ctx, "benchfleet-", pglocal.Config{Ephemeral: true,
		Settings: map[string]string{"max_connections": strconv.Itoa(2*n + 64)}})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, stop(ctx)) }()
	dsn := cluster.ConnString("postgres")

	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return res, err
	}
	pc.MaxConns = 16 // what farm producer opens
	pc.ConnConfig.RuntimeParams["application_name"] = "fleet-producer"
	if o.pollOnly {
		jobqueue.ForTransactionPooling(pc)
	}
	ppool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return res, err
	}
	defer ppool.Close()
	if err := jobqueue.Migrate(ctx, ppool); err != nil {
		return res, err
	}
	admin, err := pgx.Connect(ctx, dsn+" application_name=fleet-admin")
	if err != nil {
		return res, err
	}
	defer admin.Close(context.WithoutCancel(ctx))

	var st stats
	st.submits = map[int64]time.Time{}
	st.starts = map[int64]time.Time{}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	errc := make(chan error, 4)

	q := jobqueue.New(ppool, jobqueue.Config{})
	prodPollOnly := o.pollOnly && !o.httpWake
	tick := time.Second
	if prodPollOnly {
		tick = o.poll
	}
	var hub *wake.Hub
	wakeURL := ""
	if o.httpWake {
		hub = wake.NewHub(wake.HubConfig{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return res, err
		}
		srv := &http.Server{Handler: web.NewServer(web.Config{Queue: q, Wake: hub}), ReadHeaderTimeout: 10 * time.Second}
		wg.Go(func() { _ = srv.Serve(ln) })
		wg.Go(func() {
			<-runCtx.Done()
			hub.Close() // answers the parked polls, which Shutdown waits for
			_ = srv.Shutdown(context.WithoutCancel(ctx))
		})
		wakeURL = "http://" + ln.Addr().String()
	}
	prod, err := farm.NewProducer(farm.ProducerConfig{Queue: q, Pool: ppool, Tick: tick, PollOnly: prodPollOnly,
		Retention: farm.Off, NodeRetention: farm.Off, Assign: o.assign, OnAssigned: st.round, Wake: hub})
	if err != nil {
		return res, err
	}
	wg.Go(func() {
		if err := prod.Run(runCtx); err != nil && runCtx.Err() == nil {
			errc <- err
		}
	})

	progress("%d nodes: connecting and registering", n)
	nodeDSN := dsn
	if o.bouncer > 0 {
		dir, err := os.MkdirTemp("", "benchfleet-pgbouncer-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		b, err := startPgBouncer(runCtx, dir, cluster.SocketDir(), 5432, 2*n+16, o.bouncer)
		if err != nil {
			return res, err
		}
		defer b.stop()
		nodeDSN = b.dsn()
	}
	ncfg := nodeConfig{dsn: nodeDSN, capacity: o.capacity, render: o.render, heartbeat: o.heartbeat, pollOnly: o.pollOnly, poll: o.poll,
		wakeURL: wakeURL, started: st.started}
	nodes := make([]*simNode, 0, n)
	for i := range n {
		nd, err := startNode(runCtx, fmt.Sprintf("n%05d", i), o.heartbeat*time.Duration(i)/time.Duration(n), ncfg)
		if err != nil {
			for _, nd := range nodes {
				nd.pool.Close()
			}
			return res, err
		}
		nodes = append(nodes, nd)
	}
	for _, nd := range nodes {
		wg.Go(func() {
			if err := nd.run(runCtx); err != nil && runCtx.Err() == nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}

	// One-job submits at the rate, all along; only those of the window count.
	rate := min(o.rate, float64(n*o.capacity)/o.render.Seconds()/3)
	measureFrom := time.Now().Add(o.warmup)
	measureTo := measureFrom.Add(o.window)
	wg.Go(func() {
		every := time.Duration(float64(time.Second) / rate)
		t := time.NewTicker(every)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
			t0 := time.Now()
			_, ids, err := q.Enqueue(runCtx, []jobqueue.Spec{{URL: fmt.Sprintf("https://fleet.example.com/%d", i)}})
			if err != nil {
				if runCtx.Err() == nil {
					errc <- fmt.Errorf("enqueue: %w", err)
				}
				return
			}
			if t0.After(measureFrom) && t0.Before(measureTo) {
				st.submitted(ids[0], t0)
			}
		}
	})

	progress("%d nodes: warming up %v, then measuring %v", n, o.warmup, o.window)
	meter := &procstat.Meter{Root: cluster.PID(), Interval: time.Second}
	select {
	case <-time.After(time.Until(measureFrom)):
	case err := <-errc:
		return res, err
	case <-ctx.Done():
		return res, ctx.Err()
	}
	st.measuring.Store(true)
	self0 := procstat.SelfCPU()
	mctx, stopConns := context.WithCancel(runCtx)
	stopMeter := meter.Start(mctx)
	conns := sampleConns(mctx, admin)
	windowStart := time.Now()
	select {
	case <-time.After(time.Until(measureTo)):
	case err := <-errc:
		stopConns()
		stopMeter()
		return res, err
	}
	stopConns()
	stopMeter()
	c := <-conns
	elapsed := time.Since(windowStart)
	self1 := procstat.SelfCPU()
	st.measuring.Store(false)
	// Jobs submitted late in the window get the render time to start.
	time.Sleep(o.render + 2*time.Second)
	cancel()
	wg.Wait()

	lost := 0
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM nodes WHERE state = 'lost'").Scan(&lost); err != nil {
		return res, err
	}
	cpus := float64(runtime.NumCPU())
	res = st.result()
	res.Nodes, res.Assign = n, string(o.assign)
	res.Mode = "listen"
	switch {
	case o.httpWake && o.pollOnly:
		res.Mode = "http-wake, poll-only nodes"
	case o.httpWake:
		res.Mode = "http-wake"
	case o.pollOnly:
		res.Mode = "poll-only"
	}
	res.PgBouncerPool = o.bouncer
	if o.pollOnly {
		res.PollMs = float64(o.poll.Milliseconds())
	}
	res.Rate = rate
	res.MaxNodeConns, res.MaxNodesConns, res.MaxProdConns, res.MaxTotalConns = c.perNode, c.nodes, c.producer, c.total
	res.PGCPUShare = round3(meter.Total().Seconds() / (elapsed.Seconds() * cpus))
	res.HarnessCPUShare = round3((self1 - self0).Seconds() / (elapsed.Seconds() * cpus))
	for _, nd := range nodes {
		res.CompleteErrors += nd.failures
	}
	res.LostNodes = lost
	res.LoadAvg = procstat.LoadAvg()
	return res, nil
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// connCounts are the most connections seen at one sample.
type connCounts struct{ perNode, nodes, producer, total int }

// sampleConns reads pg_stat_activity every second until ctx ends, then
// delivers the maxima. A query is never cut by ctx: pgx closes a connection
// whose query was canceled, and admin is used after the window.
func sampleConns(ctx context.Context, admin *pgx.Conn) <-chan connCounts {
	out := make(chan connCounts, 1)
	go func() {
		var c connCounts
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			var perNode, nodes, producer, total int
			qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := admin.QueryRow(qctx, `
				SELECT coalesce(max(c) FILTER (WHERE app LIKE '`+nodeAppPrefix+`%'), 0),
				       coalesce(sum(c) FILTER (WHERE app LIKE '`+nodeAppPrefix+`%'), 0),
				       coalesce(sum(c) FILTER (WHERE app = 'fleet-producer'), 0),
				       coalesce(sum(c), 0)
				FROM (SELECT application_name AS app, count(*) AS c FROM pg_stat_activity
				      WHERE backend_type = 'client backend' GROUP BY 1) a`).Scan(&perNode, &nodes, &producer, &total)
			cancel()
			if err == nil {
				c = connCounts{max(c.perNode, perNode), max(c.nodes, nodes), max(c.producer, producer), max(c.total, total)}
			}
			select {
			case <-ctx.Done():
				out <- c
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// stats collects submits, starts and assignment rounds.
type stats struct {
	mu        sync.Mutex
	measuring atomic.Bool
	submits   map[int64]time.Time
	starts    map[int64]time.Time
	rounds    []time.Duration
}

func (s *stats) submitted(id int64, at time.Time) {
	s.mu.Lock()
	s.submits[id] = at
	s.mu.Unlock()
}

func (s *stats) started(id int64, at time.Time) {
	s.mu.Lock()
	s.starts[id] = at
	s.mu.Unlock()
}

func (s *stats) round(rep jobqueue.AssignReport) {
	if !s.measuring.Load() {
		return
	}
	s.mu.Lock()
	s.rounds = append(s.rounds, rep.Elapsed)
	s.mu.Unlock()
}

func (s *stats) result() result {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r result
	var lat []time.Duration
	// A job not started by now waited at least until now: counted so, the
	// slowest jobs are not left out of the percentiles (they are the ones
	// an overloaded farm leaves unstarted).
	now := time.Now()
	for id, t0 := range s.submits {
		if at, ok := s.starts[id]; ok {
			lat = append(lat, at.Sub(t0))
		} else {
			lat = append(lat, now.Sub(t0))
			r.Unstarted++
		}
	}
	r.Jobs = len(lat) - r.Unstarted
	r.StartP50Ms, r.StartP99Ms = pct(lat, 0.50), pct(lat, 0.99)
	r.Rounds = len(s.rounds)
	r.RoundP50Ms, r.RoundP99Ms = pct(s.rounds, 0.50), pct(s.rounds, 0.99)
	return r
}

// pct is the nearest-rank percentile p of d, in milliseconds.
func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(math.Ceil(p*float64(len(d)))) - 1
	return float64(d[min(max(i, 0), len(d)-1)].Microseconds()) / 1000
}
