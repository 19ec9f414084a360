package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/farm"
	"github.com/browserfarm/browserfarm/farm/autoscale"
	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

// consumerOptions are the flags of `farm consumer`.
type consumerOptions struct {
	log     logOptions
	db      dbOptions
	startup startupOptions
	blobs   blobOptions

	nodeID          string
	capacity        int
	recycleJobs     int
	perChrome       int
	exitAfterJobs   int
	memoryCeilingMB int
	heartbeat       time.Duration
	poll            time.Duration
	drainTimeout    time.Duration
	chrome          string
	browser         string
	chromeFlags     string
	chromeEnv       string
	profileRoot     string
	noSandbox       bool
	healthAddr      string
	limits          jobqueue.ResultLimits
	allow           string
	deny            string
	respawn         bool
	wakeURL         string
	wakeToken       string

	awsProtection bool
	awsGroup      string
	awsRegion     string
	awsIdleAfter  time.Duration
}

func (o *consumerOptions) register(fs *flagSet) {
	o.log.register(fs)
	o.db.register(fs)
	o.db.registerPollOnly(fs, "look for assigned jobs every --poll-interval, with no session state, so that the node can reach PostgreSQL through PgBouncer in transaction mode")
	o.startup.register(fs, " and its schema")
	o.blobs.register(fs)
	d := supervisor.DefaultConfig()
	fs.StringVar(&o.nodeID, "node-id", "", "this node's id in the queue (default: the hostname); one live process per id: a restarted process takes back its predecessor's jobs at once, while another process is refused the id while its holder heartbeats (unless the holder was a process of this host that no longer runs)")
	fs.count(&o.capacity, "capacity", d.Capacity, 1, "concurrent Chrome sessions (jobs) on this node, 1..1000")
	fs.count(&o.perChrome, "sessions-per-chrome", d.SessionsPerChrome, 1, "sessions that share one Chrome, at most: the node runs --capacity over it Chromes, each recycled on its own count (1: a Chrome per session, which recycles cheapest; --capacity or more: one Chrome)")
	fs.countOrOff(&o.recycleJobs, "chrome-recycle-jobs", d.ChromeRecycleJobs, "replace each Chrome after this many of its jobs (off: never)")
	fs.countOrOff(&o.exitAfterJobs, "exit-after-jobs", d.ExitAfterJobs, fmt.Sprintf("exit with code %d after this many jobs, to be restarted fresh (off: never)", exitRecycle))
	fs.countOrOffOrAuto(&o.memoryCeilingMB, "chrome-memory-ceiling-mb", fmt.Sprintf("replace a Chrome early when its process tree's PSS passes this many MiB (auto: the memory limit the process runs under, such as a container's, shared by its Chromes and one more, at least %d MiB for a Chrome of one session, %d of six; none without a limit; off: no ceiling)", minAutoCeilingMB(1), minAutoCeilingMB(6)))
	fs.positive(&o.heartbeat, "heartbeat-interval", farm.DefaultHeartbeatInterval, "how often the node reports its load and renews its job leases")
	fs.positive(&o.poll, "poll-interval", farm.DefaultPollInterval, "how often to look for assigned jobs without a notification (with --poll-only and no --wake-url: how often to look at all, default "+farm.DefaultPollOnlyInterval.String()+")")
	fs.nonNegative(&o.drainTimeout, "drain-timeout", farm.DefaultConsumerDrain, "on SIGTERM/SIGINT, how long in-flight jobs may finish before they are handed back (0: none, hand them back at once)")
	fs.StringVar(&o.wakeURL, "wake-url", "", "a producer's base URL (http://producer:8080): be woken for new work by a long-poll there instead of LISTEN, one PostgreSQL connection fewer and none listening (for large fleets: every LISTENing node costs the server work on each notifying commit); works with --poll-only")
	fs.StringVar(&o.wakeToken, "wake-token", "", "bearer token for --wake-url: the producer's --read-token (or --api-token), if it has one")
	fs.StringVar(&o.chrome, "chrome", "", "browser binary; overrides --browser")
	fs.StringVar(&o.browser, "browser", "", browserHelp)
	fs.StringVar(&o.chromeFlags, "chrome-flags", "", "extra Chrome command-line flags, space-separated")
	fs.StringVar(&o.chromeEnv, "chrome-env", "", "further environment variables Chrome inherits, by name, comma-separated (e.g. for a wrapper script given as --chrome); by default it gets only HOME, PATH, USER, LOGNAME, the locale, time zone, font and library path variables and those starting XDG_, CHROME_ or CHROMIUM_, none of the farm's credentials (which this flag refuses, AWS_ variables too)")
	fs.StringVar(&o.profileRoot, "chrome-profile-root", "", "directory for Chrome's throw-away profile directories (default: the temp dir)")
	dl := jobqueue.DefaultResultLimits()
	fs.count(&o.limits.DataBytes, "max-extract-bytes", dl.DataBytes, 1, "largest extract result (JSON bytes); a larger one fails its job with result_too_large, measured in the page before it is sent")
	fs.count(&o.limits.ScreenshotBytes, "max-screenshot-bytes", dl.ScreenshotBytes, 1, "largest screenshot (PNG bytes); a larger one fails its job with result_too_large")
	fs.count(&o.limits.ConsoleErrors, "max-console-errors", dl.ConsoleErrors, 1, "console errors kept per result; later ones are dropped")
	fs.StringVar(&o.allow, "allow-destination", "", "addresses jobs may reach although loopback, link-local or private, comma-separated: 10.1.2.0/24,127.0.0.1:8089 (IP addresses or prefixes, optionally with a port; default: public addresses only)")
	fs.StringVar(&o.deny, "deny-destination", "", "addresses jobs may never reach although public, e.g. the producer's public listen address (same form as --allow-destination; beats it)")
	fs.BoolVar(&o.noSandbox, "chrome-no-sandbox", false, "run Chrome without its own sandbox, for containers that refuse the user namespaces it needs (the container image sets it; always on as root)")
	fs.StringVar(&o.healthAddr, "health-addr", "", "serve GET /healthz on this address, e.g. 127.0.0.1:9091 (default: off)")
	fs.BoolVar(&o.respawn, "respawn", false, fmt.Sprintf("stay up and run the consumer as a child process, restarting it in place on exit %d (for containers: Docker and Kubernetes back off restarts)", exitRecycle))
	fs.BoolVar(&o.awsProtection, "aws-instance-protection", false, "protect this EC2 instance from Auto Scaling scale-in while it has jobs (needs --aws-asg-name)")
	fs.StringVar(&o.awsGroup, "aws-asg-name", "", "the Auto Scaling group of the consumer fleet, for --aws-instance-protection")
	fs.StringVar(&o.awsRegion, "aws-region", "", "AWS region (default: the SDK's chain, then the instance metadata)")
	fs.nonNegative(&o.awsIdleAfter, "aws-protection-idle-after", farm.DefaultProtectorIdleAfter, "lift scale-in protection after the node held no job this long (0: as soon as it holds none)")
}

// browserHelp is the help of --browser, the same for every command that
// starts consumers.
const browserHelp = "browser to find when --chrome is not given: shell (chrome-headless-shell, Chrome's old headless mode: about half the CPU per page) or chrome (full Chromium in its new headless mode, for sites that tell the shell apart); default: shell if installed, else chrome"

// maxMemoryCeilingMB bounds --chrome-memory-ceiling-mb: 1 PiB, far past
// any machine, far below where MiB << 20 overflows an int64.
const maxMemoryCeilingMB = 1 << 30

// checkHeartbeat refuses a heartbeat interval at or past staleAfter, the
// heartbeat age at which a node is declared lost: its jobs would go back
// (and be charged an attempt) between any two beats, and another process
// could take its id. (The consumer's own lease and id checks use
// jobqueue's defaults, which a producer's --stale-after does not change.)
func checkHeartbeat(interval, staleAfter time.Duration, what string) error {
	if interval >= staleAfter {
		return fmt.Errorf("--heartbeat-interval %s: must be under %s (%s), the heartbeat age at which a node is declared lost; a third of it or less leaves room for a late beat",
			interval, staleAfter, what)
	}
	return nil
}

// checkExecutable refuses a browser path that names no executable file (a
// bare name is looked up on PATH, as starting it would). Only the path: a
// binary that is there but fails to boot is Chrome's error at start (exit
// 1), not a bad value.
func checkExecutable(path string) error {
	p := path
	if !strings.Contains(path, "/") {
		found, err := exec.LookPath(path)
		if err != nil {
			return errors.New("no such executable on PATH")
		}
		p = found
	}
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errors.New("no such file")
	case err != nil:
		return err
	case !st.Mode().IsRegular():
		return errors.New("not a file")
	case st.Mode().Perm()&0o111 == 0:
		return errors.New("not executable")
	}
	return nil
}

// check rejects values no consumer can run with, naming the flag.
func (o *consumerOptions) check() error {
	var errs []string
	if o.capacity < 1 || o.capacity > 1000 {
		errs = append(errs, fmt.Sprintf("--capacity %d: use 1..1000", o.capacity))
	}
	if o.nodeID != "" {
		if err := jobqueue.ValidateNodeID(o.nodeID); err != nil {
			errs = append(errs, "--node-id: "+err.Error())
		}
	}
	if _, err := browser.ParseKind(o.browser); err != nil {
		errs = append(errs, "--browser: "+err.Error())
	}
	if o.chrome != "" {
		if err := checkExecutable(o.chrome); err != nil {
			errs = append(errs, fmt.Sprintf("--chrome %s: %v", o.chrome, err))
		}
	}
	if err := checkHeartbeat(o.heartbeat, jobqueue.DefaultStaleAfter, "the producer's default --stale-after"); err != nil {
		errs = append(errs, err.Error())
	}
	// A node that missed its wake-up claims at its next poll; the producer
	// gives jobs held queued longer than the claim timeout to other nodes.
	if o.poll > jobqueue.DefaultClaimTimeout/2 {
		errs = append(errs, fmt.Sprintf("--poll-interval %s: use at most %s, half of %s, how long a job may wait queued on a node before the producer gives it to another",
			o.poll, jobqueue.DefaultClaimTimeout/2, jobqueue.DefaultClaimTimeout))
	}
	// Bytes are MiB << 20 in an int64: past this the ceiling would wrap.
	if o.memoryCeilingMB > maxMemoryCeilingMB {
		errs = append(errs, fmt.Sprintf("--chrome-memory-ceiling-mb %d: use at most %d (1 PiB)", o.memoryCeilingMB, maxMemoryCeilingMB))
	}
	if err := o.limits.Check(); err != nil {
		msg := err.Error()
		for field, flag := range map[string]string{"data_bytes": "--max-extract-bytes", "screenshot_bytes": "--max-screenshot-bytes",
			"console_errors": "--max-console-errors"} {
			if strings.Contains(msg, "limit "+field+":") {
				msg = flag + ": " + msg
			}
		}
		errs = append(errs, msg)
	}
	if _, err := o.egressPolicy(); err != nil {
		errs = append(errs, err.Error())
	}
	if _, err := o.chromeEnvNames(); err != nil {
		errs = append(errs, err.Error())
	}
	if o.wakeURL != "" {
		if err := wake.CheckURL(o.wakeURL); err != nil {
			errs = append(errs, "--wake-url: "+err.Error())
		}
	}
	if o.wakeToken != "" && o.wakeURL == "" {
		errs = append(errs, "--wake-token needs --wake-url")
	}
	if o.healthAddr != "" {
		if err := checkListenAddr("health-addr", o.healthAddr); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if o.awsProtection && o.awsGroup == "" {
		errs = append(errs, "--aws-instance-protection needs --aws-asg-name")
	}
	if len(errs) > 0 {
		return usagef("%s", strings.Join(errs, "; "))
	}
	return nil
}

// envVarName is what a --chrome-env name must look like.
var envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// chromeEnvNames are --chrome-env's names; a farm credential is refused.
func (o *consumerOptions) chromeEnvNames() ([]string, error) {
	var names []string
	for n := range strings.SplitSeq(o.chromeEnv, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
			continue
		case !envVarName.MatchString(n):
			return nil, fmt.Errorf("--chrome-env %q: not an environment variable name", n)
		case farmSecret(n) || strings.HasPrefix(n, "AWS_"):
			// AWS_*: the blob store's and the instance protection's
			// credentials come from the SDK's chain, these variables first.
			return nil, fmt.Errorf("--chrome-env %s: a farm credential, which every page Chrome renders could read", n)
		}
		names = append(names, n)
	}
	return names, nil
}

// chromeEnviron is Chrome's environment: environ's variables that Chrome
// reads, and those --chrome-env names.
func (o *consumerOptions) chromeEnviron(environ []string) []string {
	extra, _ := o.chromeEnvNames() // checked by check
	return browser.Environ(environ, extra...)
}

// it stands for under the memory limit read from root (nil: none), and
// returns that limit (0: none found) and whether auto was asked for.
func (o *consumerOptions) resolveMemoryCeiling(root fs.FS) (limit int64, auto bool) {
	if o.memoryCeilingMB != autoCount {
		return 0, false
	}
	limit = cgroupMemoryLimit(root)
	o.memoryCeilingMB = autoMemoryCeilingMB(limit, o.capacity, o.perChrome)
	return limit, true
}

// supervisorConfig is the node's Chrome policy from the flags, once
// resolveMemoryCeiling has run; environ is this process's environment,
// which Chrome gets only what it needs of.
func (o *consumerOptions) supervisorConfig(log *zap.Logger, environ []string) supervisor.Config {
	cfg := supervisor.DefaultConfig()
	cfg.Capacity = o.capacity
	cfg.SessionsPerChrome = o.perChrome
	cfg.ChromeRecycleJobs = o.recycleJobs
	cfg.ExitAfterJobs = o.exitAfterJobs
	cfg.MemoryCeilingBytes = off
	if o.memoryCeilingMB > 0 {
		cfg.MemoryCeilingBytes = int64(o.memoryCeilingMB) << 20
	}
	cfg.Browser.ExecPath = o.chrome
	cfg.Browser.Kind = browser.Kind(o.browser)
	cfg.Browser.ProfileRoot = o.profileRoot
	cfg.Browser.NoSandbox = o.noSandbox
	cfg.Browser.ExtraFlags = strings.Fields(o.chromeFlags)
	cfg.Browser.Env = o.chromeEnviron(environ)
	cfg.Logger = log.Named("supervisor")
	return cfg
}

// consumerConfig is the node's configuration from the flags and the
// process's environment (environ).
func (o *consumerOptions) consumerConfig(q *jobqueue.Queue, log *zap.Logger, environ []string) farm.ConsumerConfig {
	cfg := farm.DefaultConsumerConfig(q)
	cfg.NodeID = o.nodeID
	cfg.Version = version
	cfg.Capacity = o.capacity
	cfg.Supervisor = o.supervisorConfig(log, environ)
	cfg.HeartbeatInterval = o.heartbeat
	cfg.PollInterval = o.poll
	cfg.PollOnly = o.db.pollOnly
	cfg.WakeURL, cfg.WakeToken = o.wakeURL, o.wakeToken
	// The flags' 0 is a grace of none, which the config spells Off (its 0
	// is the default).
	cfg.DrainTimeout = zeroAsOff(o.drainTimeout)
	cfg.ProtectorIdleAfter = zeroAsOff(o.awsIdleAfter)
	cfg.Egress, _ = o.egressPolicy() // checked by check
	cfg.Logger = log
	return cfg
}

// runConsumer is `farm consumer`: one node. It exits 0 after SIGTERM/SIGINT
// (in-flight jobs finished or handed back), exitRecycle after --exit-after-jobs jobs
// so that its supervisor (systemd, `farm up`, or its own --respawn parent in
// a container) starts a fresh process, and 1 on errors.
// parseConsumer parses and checks a consumer's flags and environment:
// what `farm consumer` runs with, and what `farm up` checks its consumers'
// environment with before it starts them (checkConsumerEnv).
func parseConsumer(args []string, getenv func(string) string, out io.Writer) (*consumerOptions, error) {
	fs := newFlagSet("consumer", "[flags]", out)
	var o consumerOptions
	o.register(fs)
	if err := fs.parseNoArgs(args, getenv); err != nil {
		return nil, err
	}
	if o.db.pollOnly && o.wakeURL == "" && !fs.given["poll-interval"] {
		o.poll = farm.DefaultPollOnlyInterval
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	return &o, nil
}

func runConsumer(ctx context.Context, env *environment, args []string) error {
	o, err := parseConsumer(args, env.getenv, env.stderr)
	if err != nil {
		return err
	}
	log, err := o.log.newLogger(env.stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	if o.respawn {
		return runRespawn(ctx, env, args, o.drainTimeout, log)
	}
	if limit, auto := o.resolveMemoryCeiling(env.root); auto && limit > 0 {
		log.Info("chrome memory ceiling from the process's memory limit",
			zap.Int64("limit_bytes", limit), zap.Int("ceiling_mb", o.memoryCeilingMB))
	} else if auto {
		log.Info("no memory limit found: no chrome memory ceiling")
	}

	// Under farm's own fleet (`farm up`, --respawn) this process may start
	// ahead of its predecessor's exit and stand by.
	h, err := openHandoff(env.getenv)
	if err != nil {
		return err
	}
	// Not standing by, nothing holds the health address for this process:
	// bind it now, so that one another process holds fails at once rather
	// than after the database wait (standing by, its predecessor holds it:
	// serveNode binds it when the gate opens).
	var healthLn net.Listener
	if h == nil && o.healthAddr != "" {
		if healthLn, err = net.Listen("tcp", o.healthAddr); err != nil {
			return listenError("health-addr", o.healthAddr, err)
		}
		defer healthLn.Close()
	}

	// The node's connection budget (farm.ConsumerConnBudget): the pool plus
	// the listener's connection, or a pool of two when it does not LISTEN.
	pool, err := o.startup.waitForPool(ctx, &o.db, farm.ConsumerPoolSize(!o.db.pollOnly && o.wakeURL == ""), log)
	if err != nil {
		return stoppedAtStart(ctx, err, log)
	}
	defer pool.Close()
	if err := o.startup.waitForSchema(ctx, pool, log); err != nil {
		return stoppedAtStart(ctx, err, log)
	}
	q := jobqueue.New(pool, jobqueue.Config{Logger: log.Named("queue"), ResultLimits: o.limits})

	cfg := o.consumerConfig(q, log, env.variables())
	cfg.Egress.Deny = append(cfg.Egress.Deny, o.endpointRules(ctx, log)...)
	if cfg.Blobs, err = o.blobs.open(ctx); err != nil {
		return stoppedAtStart(ctx, err, log)
	}
	if o.awsProtection {
		p, err := autoscale.NewInstanceProtector(ctx, autoscale.ProtectorConfig{
			AWSConfig: autoscale.AWSConfig{GroupName: o.awsGroup, Region: o.awsRegion},
		}, log)
		if err != nil {
			return stoppedAtStart(ctx, fmt.Errorf("--aws-instance-protection: %w", err), log)
		}
		cfg.Protector = p
	}
	if h != nil {
		cfg.Gate = h.released
	}
	c, err := farm.NewConsumer(cfg)
	if err != nil {
		return err
	}
	if h != nil {
		// Standing by, the process touches no database until its gate
		// opens, which may take long when work stops just as its
		// predecessor's exit came near: the connection the start-up checks
		// left idle is closed rather than held beside the predecessor's
		// (farm.ConsumerConnBudget).
		pool.Reset()
	}

	err = serveNode(ctx, c, h, o.healthAddr, healthLn, log)
	if errors.Is(err, errNotNeeded) {
		log.Info("consumer stopped while standing by: its predecessor did not hand over")
		return nil
	}
	var fenced *jobqueue.FencedError
	if errors.As(err, &fenced) && !fenced.Superseded() {
		// Nobody holds the id: a restart registers the node again.
		log.Error("consumer stopped: the node's registration is gone; exiting so that a restart registers it again", zap.Error(err))
		return fmt.Errorf("the node's registration is gone (the producer removed a node it had declared lost, or the database lost the registration); a restart registers it again: %w", err)
	}
	if errors.Is(err, farm.ErrFenced) {
		// Another process owns the node id now: two consumers share it (or
		// this one was replaced). A restart would register it again and
		// fence the other, each in turn, abandoning their jobs every time:
		// a usage error, which the respawn parent, farm up and systemd
		// (RestartPreventExitStatus=64) do not restart.
		log.Error("consumer stopped: another process registered this node id", zap.Error(err))
		return usagef("--node-id: another process registered this node's id, so this one stopped; every consumer needs an id of its own (FARM_NODE_ID; the host name when unset): %v", err)
	}
	if errors.Is(err, farm.ErrRecycle) {
		return fmt.Errorf("%w: %w", errRecycle, err)
	}
	return err
}

// healthHandler answers GET /healthz with 200 while healthy() is nil and 503
// with the reason otherwise.
func healthHandler(healthy func() error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := healthy(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "unhealthy: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
