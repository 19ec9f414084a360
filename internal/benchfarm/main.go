// Command benchfarm is the harness behind scripts/bench.sh for the consumer
// node: it starts a private PostgreSQL (internal/pglocal) and the test site
// on 127.0.0.1, runs one real consumer node (farm.Consumer with its Chrome
// supervisor) against a fresh database per run, with a stand-in producer
// assigning jobs, and measures what recycling Chrome costs and saves. It
// prints progress on stderr and one JSON line on stdout.
//
//	benchfarm soak    [-jobs 400] [-isolation wipe|context|shared]  Chrome-tree PSS over time, recycling every 20 vs never, /leak/ pages
//	benchfarm recycle [-jobs 120] [-rounds 5]            throughput, recycling every 20 vs never, latency- and CPU-bound pages
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/browserfarm/browserfarm/jobqueue"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: benchfarm soak|recycle [flags]   (run a mode with -h for its flags)")
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	mode, args := args[0], args[1:]
	fs := flag.NewFlagSet("benchfarm "+mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	jobs := fs.Int("jobs", 0, "jobs per run (default: soak 400, recycle 120)")
	rounds := fs.Int("rounds", 5, "recycle: alternating rounds (each runs both modes on both workloads)")
	recycleEvery := fs.Int("recycle-every", 20, "Chrome recycle interval of the recycling runs")
	isolation := fs.String("isolation", "wipe", "soak: the jobs' isolation: wipe (the default: a context reused and wiped between jobs, so a leak that survives the wipe lives until the Chrome is recycled), context (a brand-new context per job, which discards the page's leak with it) or shared (Chrome's default context, where a page's leak outlives the job, as on sites scraped with a session)")
	lead := fs.Int("replacement-lead", -1, "recycle: boot the replacement Chrome this many job starts before the recycle point (default: the supervisor's)")
	perChrome := fs.Int("sessions-per-chrome", 0, "the node's sessions that share one Chrome, at most (default: the supervisor's, 1: a Chrome per session; 6: one Chrome for the node's six)")
	exitAtEnd := fs.Bool("exit-at-end", true, "recycle: run each node as a process that exits after the run's last job (the supervisor's exit-after-jobs set to -jobs), as a node's process life is bounded in production, so that no Chrome boots ahead for starts the run will not make; false: no exit, each Chrome's replacement booted ahead at the run's end too")
	only := fs.String("workloads", "latency,cpu", "recycle: comma-separated workloads to run: latency (?delay=400), cpu (no delay), slow (?delay=1500)")
	verbose := fs.Bool("v", false, "log the nodes' info lines to stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *isolation != jobqueue.IsolationWipe && *isolation != jobqueue.IsolationContext && *isolation != jobqueue.IsolationShared {
		fmt.Fprintf(stderr, "benchfarm: -isolation %q: use wipe, context or shared\n", *isolation)
		return 2
	}
	if *jobs < 0 || *rounds < 1 || *recycleEvery < 1 || *perChrome < 0 {
		fmt.Fprintln(stderr, "benchfarm: -jobs and -sessions-per-chrome must be ≥ 0, -rounds and -recycle-every ≥ 1")
		return 2
	}
	level := zapcore.WarnLevel
	if *verbose {
		level = zapcore.InfoLevel
	}
	encCfg := zap.NewDevelopmentEncoderConfig()
	log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(encCfg), zapcore.Lock(zapcore.AddSync(stderr)), level))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	progress := func(format string, a ...any) { fmt.Fprintf(stderr, "benchfarm: "+format+"\n", a...) }

	var out any
	var err error
	switch mode {
	case "soak":
		n := *jobs
		if n == 0 {
			n = 400
		}
		out, err = withEnv(ctx, log, progress, func(e *env) (any, error) { return soak(ctx, e, n, *recycleEvery, *isolation, *perChrome) })
	case "recycle":
		n := *jobs
		if n == 0 {
			n = 120
		}
		out, err = withEnv(ctx, log, progress, func(e *env) (any, error) {
			return recycleBench(ctx, e, recycleOpts{jobs: n, rounds: *rounds, every: *recycleEvery, lead: *lead, perChrome: *perChrome, workloads: *only, exitAtEnd: *exitAtEnd})
		})
	default:
		fmt.Fprintf(stderr, "benchfarm: unknown mode %q\n", mode)
		usage(stderr)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "benchfarm:", err)
		return 1
	}
	line, err := json.Marshal(out)
	if err != nil {
		fmt.Fprintln(stderr, "benchfarm:", err)
		return 1
	}
	fmt.Fprintln(stdout, string(line))
	return 0
}
