package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/run"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/farm"
	"github.com/browserfarm/browserfarm/farm/fleet"
	"github.com/browserfarm/browserfarm/internal/pglocal"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

// upOptions are the flags of `farm up` beyond the producer's.
type upOptions struct {
	drain       time.Duration
	consumers   int
	capacity    int
	recycleJobs int
	perChrome   int
	exitAfter   int
	dataDir     string
	pgBin       string
	chrome      string
	browser     string
	heartbeat   time.Duration
	demo        bool
	demoJobs    int
	demoDelay   time.Duration
	keepData    bool
	consumerLog string
	allow       string
}

// defaultDataDir is where `farm up` keeps its PostgreSQL cluster and logs:
// $FARM_DATA_DIR, else /var/lib/browserfarm for root (the server runs as an
// unprivileged account, which cannot enter /root), else
// $XDG_STATE_HOME/browserfarm or ~/.local/state/browserfarm.
func defaultDataDir(getenv func(string) string) string {
	if os.Geteuid() == 0 {
		return "/var/lib/browserfarm"
	}
	if d := getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "browserfarm")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "browserfarm")
	}
	return filepath.Join(os.TempDir(), "browserfarm")
}

// upPoolSize is farm up's producer pool, which the demo shares (README,
// Connection budget).
const upPoolSize = 24

// upToolConns is room for the operator's commands on the machine alongside
// farm up (farm submit holds 4, status, results, cancel and retry 2 each),
// and a psql.
const upToolConns = 16

// maxConsumersPerCPU bounds --consumers on one machine: each consumer runs
// its own Chrome with up to --capacity pages (6), and a page needs a good
// part of a core; auto is half a consumer per core. Past this many per core
// every page times out; more consumers belong on more machines.
const maxConsumersPerCPU = 4

// upMaxConnections is the max_connections of farm up's private cluster for
// n consumers, from the connection budget (farm.ConsumerConnBudget,
// farm.ProducerConnBudget): each consumer slot may hold two processes at
// once — one finishing its last jobs and its successor standing by, its
// pool open (the handoff) — plus the producer, the operator's commands and
// PostgreSQL's superuser_reserved_connections (3). Never below
// PostgreSQL's own default, 100.
func upMaxConnections(n int) int {
	return max(100, n*2*farm.ConsumerConnBudget+farm.ProducerConnBudget(upPoolSize, false)+upToolConns+3)
}

// upClusterConfig is farm up's private PostgreSQL for n consumers.
func upClusterConfig(dataDir, binDir string, n int, log *zap.Logger) pglocal.Config {
	return pglocal.Config{DataDir: filepath.Join(dataDir, "pg"), BinDir: binDir, Logger: log,
		Settings: map[string]string{"max_connections": strconv.Itoa(upMaxConnections(n))}}
}

func defaultConsumers() int {
	return max(1, min(4, runtime.NumCPU()/2))
}

func runUp(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet("up", "[flags]", env.stderr)
	var db dbOptions
	var lo logOptions
	var po producerOptions
	var uo upOptions
	db.register(fs)
	lo.register(fs)
	po.register(fs)
	fs.countOrAuto(&uo.consumers, "consumers", "consumer processes to run and restart (auto: half the cores, 1 to 4; at most 4 per core; the demo uses 2 unless set)")
	sv := supervisor.DefaultConfig()
	fs.count(&uo.capacity, "capacity", sv.Capacity, 1, "concurrent Chrome sessions per consumer, 1..1000")
	fs.count(&uo.perChrome, "sessions-per-chrome", sv.SessionsPerChrome, 1, "sessions that share one of a consumer's Chromes, at most (1: a Chrome per session)")
	fs.countOrOff(&uo.recycleJobs, "chrome-recycle-jobs", sv.ChromeRecycleJobs, "consumers replace each Chrome after this many of its jobs (off: never)")
	fs.countOrOff(&uo.exitAfter, "exit-after-jobs", sv.ExitAfterJobs, "consumers exit, to be restarted fresh, after this many jobs (off: never)")
	fs.StringVar(&uo.dataDir, "data-dir", "", "where the private PostgreSQL and the logs live (default: /var/lib/browserfarm for root, else $XDG_STATE_HOME/browserfarm or ~/.local/state/browserfarm; the demo uses a temporary dir)")
	fs.StringVar(&uo.pgBin, "pg-bin", "", "directory holding PostgreSQL's initdb and postgres for the private cluster (default: found on PATH, by pg_config, or under /usr/lib/postgresql)")
	fs.StringVar(&uo.chrome, "chrome", "", "browser binary for the consumers; overrides --browser")
	fs.StringVar(&uo.browser, "browser", "", browserHelp)
	fs.positive(&uo.heartbeat, "heartbeat-interval", farm.DefaultHeartbeatInterval, "consumers' heartbeat interval (the demo uses 1s unless set)")
	fs.BoolVar(&uo.demo, "demo", false, "serve a local JavaScript-heavy test site, render --demo-jobs pages of it with a progress bar, print a summary and exit")
	fs.count(&uo.demoJobs, "demo-jobs", 300, 1, "with --demo: how many pages to render")
	fs.nonNegative(&uo.demoDelay, "demo-delay", 0, "with --demo: how long the test site's API takes to answer, to mimic a slow site")
	fs.BoolVar(&uo.keepData, "keep-data", false, "with --demo: keep the temporary data dir (database and logs) afterwards")
	fs.StringVar(&uo.allow, "allow-destination", "", "addresses the consumers' jobs may reach although loopback, link-local or private (see farm consumer --help); the demo adds its test site")
	fs.nonNegative(&uo.drain, "drain-timeout", farm.DefaultConsumerDrain, "on Ctrl-C, how long the consumers' in-flight jobs may finish before they are handed back (0: none, hand them back at once)")
	if err := fs.parseNoArgs(args, env.getenv); err != nil {
		return err
	}
	if uo.demo && !fs.isGiven("consumers") {
		uo.consumers = 2
	}
	if uo.consumers == autoCount {
		uo.consumers = defaultConsumers()
	}
	if most := maxConsumersPerCPU * runtime.NumCPU(); uo.consumers > most {
		return usagef("--consumers %d: at most %d on this machine (%d per CPU: each runs its own Chrome with up to --capacity pages); run farm consumer on more machines for more",
			uo.consumers, most, maxConsumersPerCPU)
	}
	if uo.capacity > 1000 {
		return usagef("--capacity %d: use 1..1000", uo.capacity)
	}
	if uo.demoJobs > jobqueue.MaxEnqueue {
		return usagef("--demo-jobs %d: use 1..%d (one batch)", uo.demoJobs, jobqueue.MaxEnqueue)
	}
	po.environ = env.variables()
	if err := po.check(); err != nil {
		return err
	}
	kind, err := browser.ParseKind(uo.browser)
	if err != nil {
		return usagef("--browser: %v", err)
	}
	if uo.chrome == "" {
		// Found once here, so that every consumer runs the same binary and
		// the summary can name it.
		if uo.chrome, err = browser.FindExec(kind); err != nil {
			return err
		}
	}
	if uo.demo && db.url != "" && !fs.onCommandLine("database-url") {
		// The demo's jobs point at a site on this machine: never send them to
		// a farm named by an environment variable that may be production.
		fmt.Fprintln(env.stderr, "farm up --demo: ignoring FARM_DATABASE_URL; the demo runs its own database (pass --database-url to override)")
		db.url = ""
	}
	if db.url == "" && uo.pgBin != "" {
		// Checked before anything starts: a directory without the
		// binaries is a value --pg-bin cannot take.
		if err := pglocal.CheckBinDir(uo.pgBin); err != nil {
			return usagef("--pg-bin: %v", err)
		}
	}
	if uo.demo && !fs.isGiven("heartbeat-interval") {
		uo.heartbeat = time.Second
	}
	if err := checkHeartbeat(uo.heartbeat, min(po.staleAfter, jobqueue.DefaultStaleAfter), "--stale-after, and the consumers' own id check"); err != nil {
		return usagef("%v", err)
	}
	// What the consumers are given, checked by their own rule before
	// anything starts: a value they would refuse at every start is farm
	// up's flag (or variable) to fix, not a fleet of consumers exiting 64.
	consumerSettings := map[string]string{
		"FARM_CHROME_MEMORY_CEILING_MB": fleetMemoryCeiling(env, uo.consumers, uo.capacity, uo.perChrome),
		"FARM_CAPACITY":                 strconv.Itoa(uo.capacity),
		"FARM_SESSIONS_PER_CHROME":      strconv.Itoa(uo.perChrome),
		"FARM_CHROME_RECYCLE_JOBS":      orOff(uo.recycleJobs),
		"FARM_EXIT_AFTER_JOBS":          orOff(uo.exitAfter),
		"FARM_DRAIN_TIMEOUT":            uo.drain.String(),
		"FARM_LOG_FORMAT":               "json",
		"FARM_LOG_LEVEL":                lo.level,
		"FARM_CHROME":                   uo.chrome,
		"FARM_HEARTBEAT_INTERVAL":       uo.heartbeat.String(),
		"FARM_ALLOW_DESTINATION":        uo.allow,
		"FARM_DENY_DESTINATION":         env.getenv("FARM_DENY_DESTINATION"),
		"FARM_BLOB_STORE":               po.blobs.url,
		// farm up's fleet is the consumers' parent: one set in the
		// environment (the image sets it) would put a second under it.
		"FARM_RESPAWN": "false",
	}
	if err := checkConsumerEnv(consumerEnvironment(os.Environ(), consumerSettings)); err != nil {
		return err
	}

	// Where things live.
	tempData := false
	if uo.dataDir == "" {
		if uo.demo {
			d, err := os.MkdirTemp("", "farm-demo-")
			if err != nil {
				return err
			}
			uo.dataDir, tempData = d, true
		} else {
			uo.dataDir = defaultDataDir(env.getenv)
		}
	}
	if _, err := os.Stat(uo.dataDir); err != nil || tempData {
		if err := os.MkdirAll(uo.dataDir, 0o755); err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
		// A dir we made: the PostgreSQL account (when we are root) must be
		// able to enter it. A dir the user gave keeps its mode.
		_ = os.Chmod(uo.dataDir, 0o755)
	}
	logDir := filepath.Join(uo.dataDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("log dir: %w", err)
	}
	succeeded := false
	if tempData {
		defer func() {
			if succeeded && !uo.keepData {
				os.RemoveAll(uo.dataDir)
			} else {
				fmt.Fprintf(env.stderr, "data and logs kept in %s\n", uo.dataDir)
			}
		}()
	}

	// Logs: to the terminal, except in the demo, whose screen is the progress bar.
	logOut := env.stderr
	if uo.demo {
		f, err := os.Create(filepath.Join(logDir, "farm-up.log"))
		if err != nil {
			return err
		}
		defer f.Close()
		logOut = f
		if lo.format == "auto" {
			lo.format = "json"
		}
	}
	log, err := lo.newLogger(logOut)
	if err != nil {
		return err
	}
	defer log.Sync()

	// The database: the one given, or a private cluster.
	dbURL := db.url
	if dbURL == "" {
		cluster, err := pglocal.Start(ctx, upClusterConfig(uo.dataDir, uo.pgBin, uo.consumers, log.Named("postgres")))
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := cluster.Stop(sctx); err != nil {
				log.Warn("stopping postgres", zap.Error(err))
			}
		}()
		dbURL = cluster.ConnString("postgres")
	}
	pool, err := openPool(ctx, dbURL, upPoolSize, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := jobqueue.Migrate(ctx, pool); err != nil {
		return err
	}

	var site *testsite.Server
	if uo.demo {
		if site, err = testsite.Start(ctx, testsite.Options{}); err != nil {
			return err
		}
		defer site.Close()
		// The demo's site is ours: no politeness limit towards it, and its
		// jobs may reach it although it is on loopback.
		u, _ := url.Parse(site.URL)
		po.hostRules = append(po.hostRules, u.Host+"="+offWord)
		uo.allow = strings.Trim(uo.allow+","+u.Host, ",")
	}

	ln, err := net.Listen("tcp", po.listen)
	if err != nil && uo.demo {
		ln, err = net.Listen("tcp", "127.0.0.1:0") // the demo runs anyway, on a free port
	}
	if err != nil {
		return listenError("listen", po.listen, err)
	}
	dashboard := "http://" + ln.Addr().String() + "/"
	fmt.Fprintf(env.stderr, "browserfarm up: dashboard %s · data %s · %d consumer(s) × %d sessions · browser %s\n",
		dashboard, uo.dataDir, uo.consumers, uo.capacity, uo.chrome)
	if pol, err := po.politeness(); err == nil {
		// A crawl capped by the per-host default should not be a mystery.
		fmt.Fprintln(env.stderr, politenessSummary(pol))
	}
	// The operator's commands on this machine find the farm through this file.
	removeRecord, err := writeLocalFarm(uo.dataDir, localFarm{DatabaseURL: dbURL, Dashboard: dashboard,
		PID: os.Getpid(), Version: version, StartedAt: time.Now().UTC()})
	if err != nil {
		ln.Close()
		return err
	}
	defer removeRecord()

	var g run.Group
	if err := addProducer(ctx, &g, pool, ln, &po, log); err != nil {
		ln.Close()
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary to start consumers: %w", err)
	}
	hostname, _ := os.Hostname()
	events := &childEvents{}
	var logFiles []io.Closer
	defer func() {
		for _, f := range logFiles {
			f.Close()
		}
	}()
	childOut := make([]io.Writer, uo.consumers)
	for i := range childOut {
		f, err := os.OpenFile(filepath.Join(logDir, fmt.Sprintf("consumer-%d.log", i+1)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		logFiles = append(logFiles, f)
		var w io.Writer = f
		if !uo.demo {
			w = io.MultiWriter(f, env.stderr)
		}
		childOut[i] = events.watch(w)
	}
	consumerSettings["FARM_DATABASE_URL"] = dbURL
	consumerSettings["FARM_ALLOW_DESTINATION"] = uo.allow // the demo's site added
	// The producer's own address is never a job's destination.
	consumerSettings["FARM_DENY_DESTINATION"] = strings.Trim(env.getenv("FARM_DENY_DESTINATION")+","+rulesString(listenRules(ln.Addr().String())), ",")
	consumerEnv := consumerEnvironment(os.Environ(), consumerSettings)
	fl, err := fleet.New(fleet.Config{
		Count: uo.consumers,
		// Past the drain, a consumer still hands its jobs back and marks
		// itself exited: give it that time before killing it.
		StopTimeout: uo.drain + 30*time.Second,
		Command:     consumerCommand(self, []string{"consumer"}, consumerEnv, hostname, childOut),
		// A consumer's successor boots its Chrome while it ends its last jobs.
		Handoff: true,
		// A consumer refusing its configuration (a FARM_* setting it
		// inherited) refuses it at every restart: end with its error
		// rather than run a farm without nodes.
		StopOn: stopRespawning,
		Logger: log.Named("fleet"),
	})
	if err != nil {
		return err
	}
	fctx, stopFleet := context.WithCancel(context.WithoutCancel(ctx))
	var fleetErr error
	g.Add(func() error { fleetErr = fl.Run(fctx); return fleetErr }, func(error) { stopFleet() })

	errDemoDone := errors.New("demo finished")
	var demoErr error
	demoRan := false
	if uo.demo {
		dctx, stopDemo := context.WithCancel(ctx)
		g.Add(func() error {
			demoErr = runDemo(dctx, env, jobqueue.New(pool, jobqueue.Config{}), site.URL, uo, fl, events, logDir)
			demoRan = true
			return errDemoDone
		}, func(error) { stopDemo() })
	}
	err = runUntil(ctx, &g)
	var badConsumer *fleet.ExitError
	switch {
	case errors.As(fleetErr, &badConsumer):
		err = usagef("a consumer exited with code %d, a bad configuration (its message is in %s); not restarting it",
			badConsumer.Code, filepath.Join(logDir, fmt.Sprintf("consumer-%d.log", badConsumer.Slot+1)))
	case errors.Is(err, errDemoDone) || (uo.demo && demoRan):
		err = demoErr
	case uo.demo && err == nil:
		err = errors.New("demo interrupted before it finished")
	}
	if err == nil {
		succeeded = true
	}
	return err
}

// politenessSummary says, in one line, the per-host limits the producer
// applies and the flags that change them.
func politenessSummary(p farm.Politeness) string {
	limit := func(hp farm.HostPolicy) string {
		conc := "no limit on jobs at once"
		if hp.MaxConcurrent > 0 {
			conc = fmt.Sprintf("at most %d jobs at once", hp.MaxConcurrent)
		}
		gap := "no minimum interval between starts"
		if hp.MinInterval > 0 {
			gap = fmt.Sprintf("at least %s between starts", hp.MinInterval)
		}
		return conc + ", " + gap
	}
	s := "politeness per host, farm-wide: " + limit(p.Default) + " (--host-max-concurrent, --host-min-interval)"
	rules := make([]string, 0, len(p.Hosts))
	for h := range p.Hosts {
		rules = append(rules, h)
	}
	slices.Sort(rules)
	for _, h := range rules {
		s += "; " + h + ": " + limit(p.Hosts[h])
	}
	return s
}
