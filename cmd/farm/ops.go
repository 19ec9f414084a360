package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/browserfarm/browserfarm/farm/blobstore"
	"github.com/browserfarm/browserfarm/jobqueue"
)

func runMigrate(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet("migrate", "[flags]", env.stderr)
	var db dbOptions
	db.register(fs)
	if err := fs.parseNoArgs(args, env.getenv); err != nil {
		return err
	}
	pool, err := db.pool(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := jobqueue.Migrate(ctx, pool); err != nil {
		return err
	}
	applied, _, err := jobqueue.SchemaVersion(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "schema at version %d\n", applied)
	return nil
}

func runStatus(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet("status", "[flags]", env.stderr)
	var db dbOptions
	var asJSON bool
	db.register(fs)
	db.registerLocal(fs, env.getenv)
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of tables")
	if err := fs.parseNoArgs(args, env.getenv); err != nil {
		return err
	}
	pool, err := db.pool(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := jobqueue.New(pool, jobqueue.Config{})
	nodes, err := q.ListNodes(ctx)
	if err != nil {
		return err
	}
	stats, err := q.Stats(ctx)
	if err != nil {
		return err
	}
	led, err := q.LeaderHeld(ctx, jobqueue.DefaultLeaderKey)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"nodes": nodes, "stats": stats, "producer_leads": led})
	}
	writeStatus(env.stdout, nodes, stats, led)
	return nil
}

// noLeader is what farm status and farm submit --wait say when no producer
// leads: nothing assigns pending jobs then.
const noLeader = "no producer leads: pending jobs wait until one runs (farm producer, or farm up)"

// writeStatus prints the nodes table and the queue counts, and says so
// when no producer leads: nothing assigns the pending jobs then.
func writeStatus(w io.Writer, nodes []jobqueue.Node, stats jobqueue.Stats, led bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// The counters left of HEARTBEAT are the node id's lifetime totals,
	// across its process restarts.
	fmt.Fprintln(tw, "NODE\tSTATE\tBUSY\tQUEUED\tCPU\tMEMORY\tCHROME PSS\tJOBS/CHROME\tJOBS/PROCESS\tDONE/FAILED\tCHROME RECYCLES (MEMORY)/CRASHES\tRESTARTS RECYCLE/STOP/CRASH\tCONTEXTS REUSED/REPLACED\tHEARTBEAT")
	for _, n := range nodes {
		l := n.Lifetime
		// An exited or lost node's row keeps its last heartbeat's load,
		// which nothing runs any more: shown as none, as /metrics leaves it
		// out.
		busy, cpu, mem, pss, jobsChrome, jobsProcess := "-", "-", "-", "-", "-", "-"
		if n.State.Live() {
			busy, cpu = strconv.Itoa(n.Load.BusySessions), fmt.Sprintf("%.0f%%", n.Load.CPUPercent)
			mem, pss = mib(n.Load.MemUsedBytes)+"/"+mib(n.Load.MemTotalBytes), mib(n.Load.ChromePSSBytes)
			jobsChrome, jobsProcess = strconv.FormatInt(n.Load.JobsSinceChromeStart, 10), strconv.FormatInt(n.Load.JobsSinceProcessStart, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s/%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%d (%d)/%d\t%d/%d/%d\t%d/%d\t%s ago\n",
			n.ID, n.State, busy, n.Capacity, n.Queued, cpu, mem, pss, jobsChrome, jobsProcess, l.JobsCompleted, l.JobsFailed,
			l.ChromeRecycles+l.ChromeMemoryRecycles, l.ChromeMemoryRecycles, l.ChromeCrashes,
			l.RestartsRecycle, l.RestartsStop, l.RestartsCrash, l.ContextsReused, l.ContextsReplaced,
			n.HeartbeatAge.Round(time.Second))
	}
	if len(nodes) == 0 {
		fmt.Fprintln(tw, "(no nodes registered)")
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PENDING\tQUEUED\tPROCESSING\tCOMPLETED\tFAILED\tCANCELED\tDONE/MIN\tFAILED/MIN")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n",
		stats.Jobs[jobqueue.StatePending], stats.Jobs[jobqueue.StateQueued], stats.Jobs[jobqueue.StateProcessing],
		stats.Jobs[jobqueue.StateCompleted], stats.Jobs[jobqueue.StateFailed], stats.Jobs[jobqueue.StateCanceled],
		stats.CompletedLastMinute, stats.FailedLastMinute)
	tw.Flush()
	if !led {
		fmt.Fprintln(w, "\n"+noLeader)
	}
	l := stats.Lifetime
	fmt.Fprintf(w, "\nlifetime (all nodes, all time): %d completed, %d failed; %d Chrome recycles (%d for memory), %d Chrome crashes; process restarts: %d recycle, %d stop, %d crash; wiped contexts: %d reused, %d replaced by new ones\n",
		l.JobsCompleted, l.JobsFailed, l.ChromeRecycles+l.ChromeMemoryRecycles, l.ChromeMemoryRecycles, l.ChromeCrashes,
		l.RestartsRecycle, l.RestartsStop, l.RestartsCrash, l.ContextsReused, l.ContextsReplaced)
}

func mib(b int64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fMiB", float64(b)/(1<<20))
}

func runResults(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet("results", "[flags]", env.stderr)
	var db dbOptions
	var format, states, batch, since, until, columns string
	var html, screenshot bool
	var bo blobOptions
	db.register(fs)
	db.registerLocal(fs, env.getenv)
	bo.register(fs)
	fs.StringVar(&format, "format", "jsonl", "output format: jsonl or csv")
	fs.StringVar(&states, "state", "completed,failed", "job states to export, comma-separated")
	fs.StringVar(&batch, "batch", "", "only this batch id")
	fs.StringVar(&since, "since", "", "only jobs finished at or after this time (RFC 3339, or a duration ago like 2h)")
	fs.StringVar(&until, "until", "", "only jobs finished before this time (RFC 3339, or a duration ago)")
	fs.BoolVar(&html, "html", false, "include the page HTML (jsonl only)")
	fs.BoolVar(&screenshot, "screenshot", false, "include screenshots, base64 (jsonl only)")
	fs.StringVar(&columns, "columns", defaultCSVColumns, "with --format csv: the columns, comma-separated (html_truncated too); data.<field>[.<field>…] picks a field of the extracted data")
	if err := fs.parseNoArgs(args, env.getenv); err != nil {
		return err
	}
	if batch != "" {
		if err := jobqueue.ValidateBatchID(batch); err != nil {
			return usagef("--batch: %v", err)
		}
	}
	f := jobqueue.ExportFilter{BatchID: batch, WithHTML: html, WithScreenshot: screenshot}
	for _, s := range strings.Split(states, ",") {
		st := jobqueue.State(strings.TrimSpace(s))
		if !st.Valid() {
			return usagef("--state: %q is not a job state (pending, queued, processing, completed, failed, canceled)", s)
		}
		f.States = append(f.States, st)
	}
	var err error
	if f.FinishedFrom, err = parseWhen(since, time.Now()); err != nil {
		return usagef("--since: %v", err)
	}
	if f.FinishedTo, err = parseWhen(until, time.Now()); err != nil {
		return usagef("--until: %v", err)
	}
	var write func(jobqueue.ExportRow) error
	var flush func() error
	var q *jobqueue.Queue
	out := bufio.NewWriterSize(env.stdout, 64*1024)
	switch format {
	case "jsonl":
		enc := json.NewEncoder(out)
		blobs, err := bo.open(ctx)
		if err != nil {
			return err
		}
		write = func(r jobqueue.ExportRow) error {
			if r.Result != nil && (html || screenshot) {
				keep, err := fillBlobs(ctx, blobs, r.Result, html, screenshot, q.Get)
				if err != nil || !keep {
					return err
				}
			}
			return enc.Encode(exportRecord(r))
		}
		flush = out.Flush
	case "csv":
		if html || screenshot {
			return usagef("--html and --screenshot need --format jsonl")
		}
	}
	if fs.isGiven("columns") && format != "csv" {
		return usagef("--columns needs --format csv")
	}
	switch format {
	case "jsonl":
	case "csv":
		names, cols, err := parseCSVColumns(columns)
		if err != nil {
			return err
		}
		cw := csv.NewWriter(out)
		if err := cw.Write(names); err != nil {
			return err
		}
		rec := make([]string, len(cols))
		write = func(r jobqueue.ExportRow) error {
			for i, col := range cols {
				rec[i] = col(r)
			}
			return cw.Write(rec)
		}
		flush = func() error {
			cw.Flush()
			if err := cw.Error(); err != nil {
				return err
			}
			return out.Flush()
		}
	default:
		return usagef("--format: %q is not jsonl or csv", format)
	}
	pool, err := db.pool(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	q = jobqueue.New(pool, jobqueue.Config{})
	// What was exported is written out even when the export stops early.
	err = q.ExportResults(ctx, f, write)
	if ferr := flush(); err == nil {
		err = ferr
	}
	return err
}

// fillBlobs reads a result's HTML and screenshot back from the blob store,
// checked against their stored hashes. A blob that cannot be read because
// its job was purged since the export read it (retention deletes the rows,
// then their blobs) leaves the job out (keep false): it is no longer there
// to export. Whatever the store's error: a missing key is a 403, not a 404,
// from an S3 bucket the farm may not list (no s3:ListBucket). A blob that
// cannot be read for a job still there is an error.
func fillBlobs(ctx context.Context, store blobstore.Store, res *jobqueue.Result, html, screenshot bool,
	get func(context.Context, int64) (jobqueue.Job, error)) (keep bool, err error) {
	err = blobstore.Fill(ctx, store, res, html, screenshot)
	if err == nil {
		return true, nil
	}
	if _, gerr := get(ctx, res.JobID); errors.Is(gerr, jobqueue.ErrNotFound) {
		return false, nil
	}
	return false, err
}

// parseWhen reads an absolute time (RFC 3339) or a duration before now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration like 2h", s)
	}
	return t, nil
}

// exportedJob is one line of `farm results --format jsonl`.
type exportedJob struct {
	ID         int64            `json:"id"`
	BatchID    string           `json:"batch_id"`
	State      jobqueue.State   `json:"state"`
	URL        string           `json:"url"`
	Attempts   int              `json:"attempts"`
	NodeID     string           `json:"node_id,omitempty"`
	Error      string           `json:"error,omitempty"`
	ErrorClass string           `json:"error_class,omitempty"`
	ParentID   int64            `json:"parent_id,omitempty"`
	Depth      int              `json:"depth,omitempty"`
	CreatedAt  time.Time        `json:"created_at"`
	StartedAt  *time.Time       `json:"started_at,omitempty"`
	FinishedAt *time.Time       `json:"finished_at,omitempty"`
	Result     *jobqueue.Result `json:"result,omitempty"`
}

func exportRecord(r jobqueue.ExportRow) exportedJob {
	return exportedJob{ID: r.Job.ID, BatchID: r.Job.BatchID, State: r.Job.State, URL: r.Job.Spec.URL,
		Attempts: r.Job.Attempts, NodeID: r.Job.NodeID, Error: r.Job.LastError, ErrorClass: r.Job.ErrorClass,
		ParentID: r.Job.ParentID, Depth: r.Job.Depth, CreatedAt: r.Job.CreatedAt, StartedAt: r.Job.StartedAt, FinishedAt: r.Job.FinishedAt,
		Result: r.Result}
}

// idArgs parses job ids from arguments, each once in the order given: a
// repeated id is one job, which a second cancel or retry would report as
// left alone.
func idArgs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, usagef("%q is not a job id", a)
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func runCancel(ctx context.Context, env *environment, args []string) error {
	return cancelOrRetry(ctx, env, args, "cancel")
}

func runRetry(ctx context.Context, env *environment, args []string) error {
	return cancelOrRetry(ctx, env, args, "retry")
}

func cancelOrRetry(ctx context.Context, env *environment, args []string, verb string) error {
	fs := newFlagSet(verb, "[flags] [JOB_ID ...]", env.stderr)
	var db dbOptions
	var batch string
	db.register(fs)
	db.registerLocal(fs, env.getenv)
	fs.StringVar(&batch, "batch", "", verb+" every job of this batch")
	fs.commandLineOnly("batch")
	if err := fs.parse(args, env.getenv); err != nil {
		return err
	}
	ids, err := idArgs(fs.Args())
	if err != nil {
		return err
	}
	switch {
	case len(ids) == 0 && batch == "":
		return usagef("give job ids or --batch BATCH_ID")
	case len(ids) > 0 && batch != "":
		return usagef("give job ids or --batch BATCH_ID, not both")
	}
	if batch != "" {
		if err := jobqueue.ValidateBatchID(batch); err != nil {
			return usagef("--batch: %v", err)
		}
	}
	pool, err := db.pool(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := jobqueue.New(pool, jobqueue.Config{})
	past := map[string]string{"cancel": "canceled", "retry": "queued again"}[verb]
	if batch != "" {
		var n int64
		if verb == "cancel" {
			n, err = q.CancelBatch(ctx, batch)
		} else {
			n, err = q.RetryBatch(ctx, batch)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "%d jobs %s\n", n, past)
		if n == 0 {
			// A mistyped id reads as a batch with nothing left to change
			// unless it is told apart, as an unknown job id is.
			c, err := q.BatchCounts(ctx, batch)
			if err != nil {
				return err
			}
			if c.Total == 0 {
				fmt.Fprintf(env.stderr, "farm %s: batch %s: not found\n", verb, batch)
				return exitStatus(exitError)
			}
		}
		return nil
	}
	change, only := q.Retry, jobqueue.RetriableStates
	if verb == "cancel" {
		change, only = q.Cancel, jobqueue.CancelableStates
	}
	n, unchanged, err := changeEach(ctx, ids, change, func(id int64) error { return q.Unchanged(ctx, id, only) })
	fmt.Fprintf(env.stdout, "%d jobs %s\n", n, past)
	if err != nil {
		return err
	}
	for _, e := range unchanged {
		fmt.Fprintf(env.stderr, "farm %s: %v\n", verb, e)
	}
	if len(unchanged) > 0 {
		return exitStatus(exitError)
	}
	return nil
}

// changeEach applies change (Cancel, Retry) to each of ids on its own, so
// that each one left alone is known, and asks why for each (the queue's
// words, which the API answers with too: "job N: not found", "job N is
// completed; only …"). It returns how many changed, the reasons of the
// rest, and an error that stopped it.
func changeEach(ctx context.Context, ids []int64, change func(context.Context, ...int64) (int64, error),
	why func(int64) error) (int64, []error, error) {
	var n int64
	var unchanged []error
	for _, id := range ids {
		c, err := change(ctx, id)
		if err != nil {
			return n, unchanged, err
		}
		if c > 0 {
			n += c
			continue
		}
		reason := why(id)
		var ue *jobqueue.UnchangedError
		if !errors.As(reason, &ue) && !errors.Is(reason, jobqueue.ErrNotFound) {
			return n, unchanged, reason
		}
		unchanged = append(unchanged, reason)
	}
	return n, unchanged, nil
}

// batchSummary is how a batch ended: the counts of all its jobs, the
// followed links' too.
type batchSummary struct {
	counts jobqueue.BatchCounts
	took   time.Duration
}

// leaderAskEvery is how often followBatch asks whether a producer leads
// while the batch has pending jobs.
const leaderAskEvery = 10 * time.Second

// followBatch shows progress until every job of the batch is finished.
// Polling is fine here: it is one small query a quarter second for one person's terminal.
func followBatch(ctx context.Context, q *jobqueue.Queue, batch string, total int, w io.Writer, quiet bool) (batchSummary, error) {
	start := time.Now()
	bar := newProgress(w, int64(total), quiet,
		progressbar.OptionSetDescription("rendering"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("pages"),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	// Whether a producer leads is asked now and then while jobs wait: with
	// none, nothing assigns them, and the bar would just stand still
	// (--quiet, for scripts, is not told).
	var askedLeader time.Time
	warned := false
	for {
		c, err := q.BatchCounts(ctx, batch)
		if err != nil {
			bar.Stop()
			return batchSummary{}, err
		}
		if !quiet && !warned && c.By[jobqueue.StatePending] > 0 && time.Since(askedLeader) >= leaderAskEvery {
			askedLeader = time.Now()
			if led, err := q.LeaderHeld(ctx, jobqueue.DefaultLeaderKey); err == nil && !led {
				warned = true
				fmt.Fprintln(w, "\n"+noLeader)
			}
		}
		// Followed links join the batch: the total grows.
		bar.Set(c.Finished(), max(c.Total, int64(total)), fmt.Sprintf("rendering (%d failed)", c.By[jobqueue.StateFailed]))
		if c.Total > 0 && c.Finished() == c.Total {
			bar.Finish()
			return batchSummary{counts: c, took: time.Since(start)}, nil
		}
		select {
		case <-ctx.Done():
			bar.Stop()
			return batchSummary{}, ctx.Err()
		case <-tick.C:
		}
	}
}
