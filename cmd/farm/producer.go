package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/farm"
	"github.com/browserfarm/browserfarm/farm/autoscale"
	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/farm/web"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// defaultHostMaxConcurrent is the command's default politeness: the farm
// package has none (a zero farm.Politeness limits nothing), the command
// starts polite.
const defaultHostMaxConcurrent = 4

// The producer's HTTP server reads a request within producerReadTimeout and
// writes its answer within producerWriteTimeout.
const (
	producerReadTimeout  = time.Minute
	producerWriteTimeout = 2 * time.Minute
	// The bounds of --wake-max-wait: a poll held open too briefly has
	// every node poll again at once, and one held open past the write
	// timeout is cut.
	minWakeMaxWait = time.Second
	maxWakeMaxWait = producerWriteTimeout / 2
)

// producerOptions are the flags of `farm producer` (and of `farm up`, which
// runs the same producer in-process).
type producerOptions struct {
	listen          string
	apiToken        string
	readToken       string
	tick            time.Duration
	staleAfter      time.Duration
	rescueInterval  time.Duration
	retention       time.Duration
	nodeRetention   time.Duration
	assignBatch     int
	assign          string
	pollOnly        bool   // set from --poll-only, which the database options own
	hostMax         string // a count, or off
	hostInterval    time.Duration
	hostRules       multiFlag
	politenessFile  string
	scaleDriver     string
	scaleMin        int
	scaleMax        int
	scaleTarget     float64
	scaleCooldown   time.Duration
	scaleInterval   time.Duration
	scaleExec       string
	awsGroup        string
	awsRegion       string
	awsEndpoint     string
	sampleInterval  time.Duration
	sampleRetention time.Duration
	wakeMaxWait     time.Duration
	blobs           blobOptions
	// environ is the producer's environment, of which the exec driver's
	// command gets all but the secrets (scalingEnv).
	environ []string
}

func (o *producerOptions) register(fs *flagSet) {
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address of the dashboard, JSON API, /metrics and /healthz (loopback unless told otherwise)")
	fs.StringVar(&o.apiToken, "api-token", "", fmt.Sprintf("bearer token mutating API calls must present, at least %d characters; empty refuses them", minTokenLength))
	fs.StringVar(&o.readToken, "read-token", "", fmt.Sprintf("bearer token for API reads (jobs, results, nodes), at least %d characters; needed, or --api-token, when --listen is beyond loopback, where reads without one are refused", minTokenLength))
	fs.positive(&o.tick, "tick", farm.DefaultTick, "fallback assignment interval (NOTIFY wakes the producer at once)")
	fs.positive(&o.staleAfter, "stale-after", jobqueue.DefaultStaleAfter, "a node whose heartbeat is older is lost; its jobs go back")
	fs.positive(&o.rescueInterval, "rescue-interval", farm.DefaultRescueInterval, "how often lost nodes and expired leases are looked for")
	fs.positiveOrOff(&o.retention, "retention", farm.DefaultRetention, fmt.Sprintf("delete finished jobs and results, and idle hosts' politeness rows, older than this, at least %v (off: keep them)", web.DefaultChartWindow))
	fs.positiveOrOff(&o.nodeRetention, "node-retention", farm.DefaultNodeRetention, "delete nodes exited or lost longer ago than this, with their /api/nodes rows and node-labelled /metrics series; their lifetime counters fold into the farm's (off: keep them)")
	fs.count(&o.assignBatch, "assign-batch", farm.DefaultAssignBatch, 1, "most jobs assigned in one round")
	fs.StringVar(&o.assign, "assign", "auto", "which nodes get work first: spread (least loaded), pack (busiest with a free slot, so idle nodes can scale in), auto (pack with an --autoscale driver, else spread; set pack when KEDA or an HPA scales the consumers)")
	fs.StringVar(&o.hostMax, "host-max-concurrent", strconv.Itoa(defaultHostMaxConcurrent), "default politeness: most jobs of one host running at once, farm-wide (off: no limit)")
	fs.nonNegative(&o.hostInterval, "host-min-interval", 0, "default politeness: least time between two job starts on one host, farm-wide")
	fs.Var(&o.hostRules, "host-rule", "per-host politeness override HOST=MAX/INTERVAL, e.g. shop.example.com=2/500ms, .example.com=8 or slow.example.com=off/2s (MAX off or left out: no limit; repeatable; comma-separated in the environment)")
	fs.StringVar(&o.politenessFile, "politeness-file", "", `JSON politeness config: {"default":{"max_concurrent":4,"min_interval":"250ms"},"hosts":{"shop.example.com":{...}}}; max_concurrent "off" is no limit, a field left out inherits the default`)
	fs.StringVar(&o.scaleDriver, "autoscale", "none", "autoscaling driver: none (report only), aws (EC2 Auto Scaling group), exec (run a command)")
	fs.count(&o.scaleMin, "autoscale-min", 0, 0, "fewest consumer nodes")
	fs.count(&o.scaleMax, "autoscale-max", autoscale.DefaultMax, 1, "most consumer nodes")
	fs.Float64Var(&o.scaleTarget, "autoscale-target", autoscale.DefaultTargetUtilisation, "target share of the fleet's slots the work should fill, (0,1]")
	fs.nonNegative(&o.scaleCooldown, "autoscale-cooldown", autoscale.DefaultScaleInCooldown, "scale in only after the need stayed lower this long (0: at once)")
	fs.positive(&o.scaleInterval, "autoscale-interval", autoscale.DefaultInterval, "how often the desired node count is computed")
	fs.StringVar(&o.scaleExec, "autoscale-exec", "", "with --autoscale exec: shell command run with the desired count as $1 and $FARM_DESIRED_NODES, in the producer's environment less the database URL, the tokens and PGPASSWORD")
	fs.StringVar(&o.awsGroup, "aws-asg-name", "", "with --autoscale aws: the consumers' Auto Scaling group")
	fs.StringVar(&o.awsRegion, "aws-region", "", "with --autoscale aws: the group's region (default: the SDK's chain)")
	fs.StringVar(&o.awsEndpoint, "aws-endpoint", "", "with --autoscale aws: Auto Scaling API endpoint override")
	fs.positive(&o.sampleInterval, "sample-interval", web.DefaultSampleInterval, "how often node load and queue samples are recorded for the charts")
	fs.positive(&o.sampleRetention, "sample-retention", web.DefaultSampleRetention, "how long chart samples are kept")
	fs.positive(&o.wakeMaxWait, "wake-max-wait", wake.DefaultMaxWait, "longest a node's wake-up long-poll (farm consumer --wake-url) is held open: keep it under the idle timeout of any proxy or load balancer between the nodes and the producer")
	o.blobs.register(fs)
}

// minTokenLength is the shortest --api-token or --read-token the producer
// takes: a bearer token is all that guards the API, and a short one — the
// sample Secret's "change-me", applied by mistake — is guessed.
const minTokenLength = 16

// check rejects values no producer can run with, naming the flag, before
// anything waits for the database.
func (o *producerOptions) check() error {
	if err := checkListenAddr("listen", o.listen); err != nil {
		return err
	}
	for _, t := range []struct{ flag, v string }{{"api-token", o.apiToken}, {"read-token", o.readToken}} {
		if t.v != "" && len(t.v) < minTokenLength {
			return usagef("--%s: %d characters; a token needs at least %d (openssl rand -hex 24 makes one)", t.flag, len(t.v), minTokenLength)
		}
	}
	if o.wakeMaxWait < minWakeMaxWait || o.wakeMaxWait > maxWakeMaxWait {
		return usagef("--wake-max-wait %v: between %v (each node polls again as soon as it is answered) and %v (the producer's answers must be written within %v)",
			o.wakeMaxWait, minWakeMaxWait, maxWakeMaxWait, producerWriteTimeout)
	}
	if o.retention > 0 && o.retention < web.DefaultChartWindow {
		// The windows (the dashboard's failures and throughput, /api/failures
		// by default) count the finishes retained: a purge takes its jobs
		// out of them too.
		return usagef("--retention %v: at least %v, the window the dashboard and /api/failures count finished jobs over (off: keep them)",
			o.retention, web.DefaultChartWindow)
	}
	if o.readToken == "" && o.apiToken == "" && listenBeyondLoopback(o.listen) {
		return readTokenNeeded(o.listen)
	}
	if _, err := o.politeness(); err != nil {
		return err
	}
	if _, err := o.assignPolicy(); err != nil {
		return err
	}
	if !(o.scaleTarget > 0 && o.scaleTarget <= 1) {
		return usagef("--autoscale-target %v: want a share in (0, 1]", o.scaleTarget)
	}
	if o.scaleMax < o.scaleMin {
		return usagef("--autoscale-max %d is below --autoscale-min %d", o.scaleMax, o.scaleMin)
	}
	if _, err := o.driverConfig(); err != nil {
		return err
	}
	return nil
}

// driverConfig is the autoscale driver the flags choose.
func (po *producerOptions) driverConfig() (autoscale.DriverConfig, error) {
	dc := autoscale.DriverConfig{Kind: po.scaleDriver}
	switch po.scaleDriver {
	case autoscale.DriverNone:
	case autoscale.DriverAWS:
		if po.awsGroup == "" {
			return dc, usagef("--autoscale aws needs --aws-asg-name")
		}
		dc.AWS = autoscale.AWSConfig{GroupName: po.awsGroup, Region: po.awsRegion, Endpoint: po.awsEndpoint}
	case autoscale.DriverExec:
		if strings.TrimSpace(po.scaleExec) == "" {
			return dc, usagef("--autoscale exec needs --autoscale-exec")
		}
		// The driver appends the count as the last argument: after the
		// script and $0, so the script sees it as $1 (and $FARM_DESIRED_NODES).
		dc.Exec = autoscale.ExecConfig{Command: []string{"sh", "-c", po.scaleExec, "farm-autoscale"}, Env: scalingEnv(po.environ)}
	default:
		return dc, usagef("--autoscale: %q is not none, aws or exec", po.scaleDriver)
	}
	return dc, nil
}

// secretFlags are the flags whose values are credentials: the database
// URL (which can hold its password) and the tokens of the API and of the
// wake-up long-poll. A child the farm runs for the operator gets none of
// their variables.
var secretFlags = []string{"database-url", "api-token", "read-token", "wake-token"}

// farmSecret reports whether the variable name holds one of the farm's
// credentials: secretFlags' variables and libpq's PGPASSWORD.
func farmSecret(name string) bool {
	if name == "PGPASSWORD" {
		return true
	}
	for _, f := range secretFlags {
		if envName(f) == name {
			return true
		}
	}
	return false
}

// scalingEnv is environ without the farm's secrets: what the exec driver's
// command runs with. It keeps what a scaling script needs (PATH, HOME,
// KUBECONFIG, AWS_*, the operator's own variables).
func scalingEnv(environ []string) []string {
	return withoutVars(environ, farmSecret)
}

// assignPolicy resolves --assign: "auto" packs when this producer drives
// the fleet's size, and spreads otherwise (a fixed fleet runs every node
// anyway, and spreading keeps each node's load lowest).
func (o *producerOptions) assignPolicy() (jobqueue.AssignPolicy, error) {
	if o.assign == "auto" {
		if o.scaleDriver != autoscale.DriverNone {
			return jobqueue.AssignPack, nil
		}
		return jobqueue.AssignSpread, nil
	}
	if o.assign == "" {
		return "", usagef("--assign: empty; use spread, pack or auto")
	}
	p, err := jobqueue.ParseAssignPolicy(o.assign)
	if err != nil {
		return "", usagef("--assign: %v", err)
	}
	return p, nil
}

// politeness builds the per-host policy from the flags and the optional file.
func (o *producerOptions) politeness() (farm.Politeness, error) {
	if o.hostInterval < 0 {
		return farm.Politeness{}, usagef("--host-min-interval %v: must not be negative", o.hostInterval)
	}
	hostMax, err := parseMaxConcurrent(o.hostMax)
	if err != nil {
		return farm.Politeness{}, usagef("--host-max-concurrent %s: %v", o.hostMax, err)
	}
	p := farm.Politeness{Default: farm.HostPolicy{MaxConcurrent: hostMax, MinInterval: o.hostInterval}, Hosts: map[string]farm.HostPolicy{}}
	if o.politenessFile != "" {
		var err error
		if p, err = loadPoliteness(o.politenessFile, p); err != nil {
			return p, usagef("--politeness-file: %v", err)
		}
	}
	var rules []string
	for _, r := range o.hostRules {
		for _, part := range strings.Split(r, ",") {
			if part = strings.TrimSpace(part); part != "" {
				rules = append(rules, part)
			}
		}
	}
	for _, r := range rules {
		host, pol, err := parseHostRule(r)
		if err != nil {
			return p, usagef("--host-rule: %v", err)
		}
		p.Hosts[host] = pol
	}
	return p, nil
}

func runProducer(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet("producer", "[flags]", env.stderr)
	var db dbOptions
	var lo logOptions
	var po producerOptions
	var so startupOptions
	db.register(fs)
	lo.register(fs)
	po.register(fs)
	so.register(fs, "")
	db.registerPollOnly(fs, "assign every --tick (default "+farm.DefaultPollOnlyInterval.String()+" with it) instead of waking on NOTIFY; the leader election still needs a session connection (direct, or a session pool)")
	if err := fs.parseNoArgs(args, env.getenv); err != nil {
		return err
	}
	po.environ = env.variables()
	if err := po.check(); err != nil {
		return err
	}
	if db.pollOnly && !fs.given["tick"] {
		po.tick = farm.DefaultPollOnlyInterval
	}
	po.pollOnly = db.pollOnly
	log, err := lo.newLogger(env.stderr)
	if err != nil {
		return err
	}
	defer log.Sync()
	pool, err := so.waitForPool(ctx, &db, 16, log)
	if err != nil {
		return stoppedAtStart(ctx, err, log)
	}
	defer pool.Close()
	// Logged before: a migration of a large table, or the wait for another
	// producer's migration lock, can take minutes, with nothing listening.
	log.Info("migrating the schema (waits while another producer migrates)")
	t0 := time.Now()
	if err := jobqueue.Migrate(ctx, pool); err != nil {
		return stoppedAtStart(ctx, err, log)
	}
	log.Info("schema up to date", zap.Duration("took", time.Since(t0)))
	ln, err := net.Listen("tcp", po.listen)
	if err != nil {
		return listenError("listen", po.listen, err)
	}
	var g run.Group
	if err := addProducer(ctx, &g, pool, ln, &po, log); err != nil {
		ln.Close()
		return err
	}
	return runUntil(ctx, &g)
}

// addProducer adds the producer's actors to g: the producer itself (leader
// election, assignment, rescue, retention and the leader-only sample
// recorder and autoscaler) and the HTTP server on ln.
func addProducer(ctx context.Context, g *run.Group, pool *pgxpool.Pool, ln net.Listener, po *producerOptions, log *zap.Logger) error {
	pol, err := po.politeness()
	if err != nil {
		return err
	}
	assign, err := po.assignPolicy()
	if err != nil {
		return err
	}
	q := jobqueue.New(pool, jobqueue.Config{Logger: log.Named("queue")})
	blobs, err := po.blobs.open(ctx)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := web.NewMetrics(reg)

	// The scaler runs only while the producer leads, so producer is set
	// by the time the fence is asked.
	var producer *farm.Producer
	scaler, err := newScaler(ctx, po, q, func(ctx context.Context) error { return producer.ConfirmLeader(ctx) }, log)
	if err != nil {
		return err
	}
	recorder := web.NewRecorder(web.RecorderConfig{Queue: q, Interval: po.sampleInterval, Retention: po.sampleRetention,
		Logger: log.Named("recorder")})
	leaderActors := []func(context.Context) error{recorder.Run, scaler.Run, func(ctx context.Context) error {
		// Keep the desired-nodes gauge current while leading (absent until
		// the term's first computation).
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			metrics.SetDesiredNodes(scaler.Desired())
			select {
			case <-ctx.Done():
				// A producer that no longer leads exports no figure, as a
				// standby does: a stale one would hold the fleet at this
				// leader's last size, and a 0 would scale it away while no
				// producer leads (a database outage).
				metrics.SetDesiredNodes(-1)
				return nil
			case <-t.C:
			}
		}
	}}
	// The long-polls of nodes started with --wake-url.
	hub := wake.NewHub(wake.HubConfig{MaxWait: po.wakeMaxWait})
	producer, err = farm.NewProducer(farm.ProducerConfig{
		Queue: q, Pool: pool, Politeness: pol, Tick: po.tick, PollOnly: po.pollOnly, AssignBatch: po.assignBatch, Assign: assign,
		Wake:       hub,
		StaleAfter: po.staleAfter, RescueInterval: po.rescueInterval, Retention: po.retention, NodeRetention: po.nodeRetention, Blobs: blobs,
		LeaderActors: leaderActors, Logger: log.Named("producer"),
		OnAssigned: func(rep jobqueue.AssignReport) {
			now := time.Now()
			for _, created := range rep.CreatedAt {
				metrics.ObserveAssignment(now.Sub(created), 1)
			}
		},
	})
	if err != nil {
		return err
	}
	// Reads show every submitter's jobs and results: beyond loopback they
	// need a token.
	readAuth := po.readToken != "" || !isLoopback(ln.Addr())
	if readAuth && po.readToken == "" && po.apiToken == "" {
		return readTokenNeeded(ln.Addr().String())
	}
	handler := web.NewServer(web.Config{
		Queue: q, Token: po.apiToken, ReadToken: po.readToken, ReadAuth: readAuth, IsLeader: producer.IsLeader,
		// The desired node count is shown where a driver acts on it; with
		// none it is only a Prometheus gauge (browserfarm_desired_nodes).
		// A standby's figure (or a former leader's, frozen) is not the farm's.
		Desired: func() (int, bool) {
			n := scaler.Desired()
			if !producer.IsLeader() || n < 0 {
				return 0, false
			}
			return n, po.scaleDriver != "none"
		},
		Metrics: metrics, Gatherer: reg, Logger: log.Named("http"), Version: version, Blobs: blobs,
		StaleAfter: po.staleAfter,
		HostPolicy: pol.For,
		Wake:       hub,
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		// Bounds on a whole request and a whole answer: without them a
		// client that sends a body slowly (or not at all, which even a
		// refused request waits for, as the server drains it) or stops
		// reading an answer holds its connection and memory for good. The
		// longest legitimate answer is a node's wake-up long-poll
		// (--wake-max-wait, 25 s, at most half of it) or a result with
		// its screenshot.
		ReadTimeout: producerReadTimeout, WriteTimeout: producerWriteTimeout}

	pctx, stopProducer := context.WithCancel(context.WithoutCancel(ctx))
	g.Add(func() error { return producer.Run(pctx) }, func(error) { stopProducer() })
	g.Add(func() error {
		log.Info("dashboard and API listening", zap.String("url", "http://"+ln.Addr().String()+"/"))
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	}, func(error) {
		hub.Close() // answers the parked polls, which Shutdown would wait for
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	return nil
}

// newScaler builds the autoscaler with the chosen driver. With "none" it
// still computes and reports the desired count (for HPA/KEDA users).
func newScaler(ctx context.Context, po *producerOptions, q *jobqueue.Queue, fence func(context.Context) error, log *zap.Logger) (*autoscale.Reconciler, error) {
	dc, err := po.driverConfig()
	if err != nil {
		return nil, err
	}
	scaling := autoscale.Config{Min: po.scaleMin, Max: po.scaleMax, TargetUtilisation: po.scaleTarget,
		ScaleInCooldown: zeroAsOff(po.scaleCooldown)}.WithDefaults()
	if err := scaling.Validate(); err != nil {
		return nil, usagef("autoscale: %v", err)
	}
	drv, err := autoscale.NewDriver(ctx, dc, log)
	if err != nil {
		return nil, err
	}
	return autoscale.NewReconciler(autoscale.ReconcilerConfig{Scaling: scaling, Interval: po.scaleInterval, Fence: fence},
		farm.ScaleSource(q), drv, log)
}

// runUntil runs g until ctx ends (SIGINT/SIGTERM from main) or one of its
// actors returns. oklog/run's ContextHandler ends the group with ctx's error;
// the end of ctx is the ordinary way to stop, so it is no error here.
func runUntil(ctx context.Context, g *run.Group) error {
	g.Add(run.ContextHandler(ctx))
	err := g.Run()
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// readTokenNeeded is the refusal of a producer that would serve every
// job's and result's reads beyond loopback without a token.
func readTokenNeeded(addr string) error {
	return usagef("--listen %s is beyond loopback: set --read-token (or --api-token) so that API reads need a token", addr)
}

// listenBeyondLoopback reports whether a --listen address is beyond
// loopback before anything is bound: every interface (no host, 0.0.0.0,
// [::]) or an address that is not a loopback one. A name other than
// localhost is known only once bound (addProducer checks the listener's
// address), so it is not reported here.
func listenBeyondLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false // checkListenAddr reports it
	}
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && !ip.IsLoopback()
}

// isLoopback reports whether a listener's address is a loopback one.
func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
