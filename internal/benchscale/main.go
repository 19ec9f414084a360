// Command benchscale is the harness behind `scripts/bench.sh scale`: it
// measures what the producer's reads and the queue's lifecycle cost with a
// retained history of finished jobs, against an empty table. For each size
// it creates a fresh database on one private PostgreSQL (internal/pglocal),
// loads that many finished jobs and their results with COPY of generated
// rows, runs VACUUM ANALYZE (what autovacuum would have done) and a
// CHECKPOINT, optionally runs -history-jobs jobs through the lifecycle (a
// recent history at the queue's own rate). With every size prepared, it
// loads the same -recent jobs of the last hour into each (the COPY-loaded
// history ends before that hour: the reads' windows then hold the same
// jobs at every size, and only the history differs), settles again, starts
// a producer and its HTTP server per size as `farm producer` does
// (in-process, on 127.0.0.1), and measures:
//
//   - p50/p99 of GET /api/stats, /api/failures, /metrics (uncached: the
//     scrape cache is reset before each request), the dashboard's load (the
//     page and the four API calls it makes on load), the jobs view's poll
//     (GET /api/jobs, unfiltered and filtered by a host no job has) and
//     `farm status` (the queue calls it makes), in rounds that alternate between the sizes,
//     each size's p50 against the first size's of the same round;
//   - lifecycle jobs/s: jobs enqueued, assigned, claimed and completed by 16
//     simulated nodes of 6 slots, in rounds that alternate between the sizes'
//     databases (kept side by side), each size's against the first size's of
//     the same round;
//   - retention: finished jobs (and results) deleted per second by the
//     producer's purge, on the oldest part of the history.
//
// Progress goes to stderr, one JSON line to stdout.
//
//	benchscale [-retained 0,10000000] [-recent 7000] [-requests 50] [-read-rounds 4] [-lifecycle-jobs 20000] [-lifecycle-rounds 4] [-purge 100000] [-history-jobs 0[,N...]]
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/browserfarm/browserfarm/internal/procstat"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the harness's flags.
type options struct {
	retained      []int64
	requests      int
	readRounds    int
	lifecycleJobs int
	// lifecycleRounds: lifecycle runs per size, the median reported (one
	// run on an empty table alone ranged 1,200-8,600 jobs/s here).
	lifecycleRounds int
	purge           int64
	days            int
	// historyJobs, one per retained size, are run through the lifecycle
	// after the load and before the measurements: a recent history the
	// queue wrote itself, at its own rate of finishes, rather than COPY's.
	historyJobs []int64
	// recent finished jobs of the last hour are loaded into every size,
	// the empty table too, after its history.
	recent int64
	// backlog pending jobs, when not 0, are enqueued after the reads, the
	// reads measured again beside them (sizeRun.BacklogReads), and the
	// backlog deleted before the lifecycle.
	backlog int
	hold    bool
	// pgSettings are extra server settings (-pg-set), over the defaults
	// runAll starts the server with.
	pgSettings map[string]string
}

// parseCounts reads the comma-separated job counts of the flag name.
func parseCounts(name, s string) ([]int64, error) {
	var out []int64
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-%s: %q is not a job count ≥ 0", name, f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-%s: no count given", name)
	}
	return out, nil
}

func realMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchscale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	retained := fs.String("retained", "0,10000000", "comma-separated retained finished jobs to measure, each on a fresh database of one server; the first size is the baseline of the lifecycle's ratios (0: the empty table)")
	var o options
	fs.IntVar(&o.requests, "requests", 50, "requests per read and read round (p50/p99 over all rounds)")
	fs.IntVar(&o.readRounds, "read-rounds", 4, "rounds of the reads per size, alternating between the sizes, all prepared first (reported: p50/p99 over the rounds, and the median of each round's p50 over the first size's)")
	fs.IntVar(&o.lifecycleJobs, "lifecycle-jobs", 20000, "jobs run through their lifecycle for jobs/s")
	fs.IntVar(&o.lifecycleRounds, "lifecycle-rounds", 4, "lifecycle runs per size, alternating between the sizes (reported: each size's median, and the median of its rounds' ratios to the first size's; an even count has each size lead as often)")
	fs.Int64Var(&o.purge, "purge", 100000, "finished jobs the retention purge deletes for deletes/s (at most the retained)")
	fs.IntVar(&o.days, "days", 6, "the history's finished_at spans this many days before now")
	fs.Int64Var(&o.recent, "recent", 7000, "finished jobs of the last hour (a busy farm's: at the default, about 120 a minute, 5 of them failed), 4% of them failed over five classes, loaded into every size, the empty table too, right before the reads, so that the reads whose answer is a window (the failures listed, the charts' minutes) answer alike at every size; 0: none")
	historyJobs := fs.String("history-jobs", "0", "jobs run through the lifecycle after the load, then VACUUM ANALYZE and a checkpoint, before measuring: a recent history the queue wrote itself, at its own rate; one count for every size, or comma-separated, one per -retained size (-retained 0,0 -history-jobs 0,10000000: the empty table against 10M the queue wrote)")
	o.pgSettings = map[string]string{}
	fs.Func("pg-set", "a PostgreSQL server setting `name=value` for the private server, over the farm's (internal/pgtune), e.g. autovacuum_naptime=1min for PostgreSQL's default (repeatable)", func(v string) error {
		name, value, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return fmt.Errorf("%q is not name=value", v)
		}
		o.pgSettings[strings.TrimSpace(name)] = strings.TrimSpace(value)
		return nil
	})
	fs.IntVar(&o.backlog, "backlog", 0, "pending jobs enqueued after the reads, the reads measured again beside them (backlog_reads; the bench's nodes drain meanwhile, so none is assigned), then deleted before the lifecycle")
	fs.BoolVar(&o.hold, "hold", false, "after measuring, keep every size's database and print how to connect, until interrupted")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var err error
	if o.retained, err = parseCounts("retained", *retained); err != nil {
		fmt.Fprintln(stderr, "benchscale:", err)
		return 2
	}
	if o.historyJobs, err = parseCounts("history-jobs", *historyJobs); err != nil {
		fmt.Fprintln(stderr, "benchscale:", err)
		return 2
	}
	switch len(o.historyJobs) {
	case len(o.retained):
	case 1:
		o.historyJobs = slices.Repeat(o.historyJobs, len(o.retained))
	default:
		fmt.Fprintf(stderr, "benchscale: -history-jobs: %d counts for %d -retained sizes\n", len(o.historyJobs), len(o.retained))
		return 2
	}
	if o.requests < 1 || o.readRounds < 1 || o.lifecycleJobs < 1 || o.lifecycleRounds < 1 || o.purge < 0 || o.recent < 0 || o.days < 1 {
		fmt.Fprintln(stderr, "benchscale: -requests, -read-rounds, -lifecycle-jobs, -lifecycle-rounds and -days must be ≥ 1, -purge and -recent ≥ 0")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	progress := func(format string, a ...any) { fmt.Fprintf(stderr, "benchscale: "+format+"\n", a...) }

	start := time.Now()
	runs, err := runAll(ctx, o, progress)
	if err != nil {
		fmt.Fprintln(stderr, "benchscale:", err)
		return 1
	}
	out := map[string]any{"bench": "scale", "runs": runs, "wall_s": round(time.Since(start).Seconds()),
		"loadavg_end": procstat.LoadAvg()}
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		fmt.Fprintln(stderr, "benchscale:", err)
		return 1
	}
	return 0
}

func round(v float64) float64 {
	return float64(int64(v*100+0.5)) / 100
}
