package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Get returns one job.
func (q *Queue) Get(ctx context.Context, id int64) (Job, error) {
	j, err := scanJob(q.pool.QueryRow(ctx, "SELECT "+jobCols+" FROM jobs j WHERE j.id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Job{}, fmt.Errorf("job %d: %w", id, err)
	}
	j.redact()
	return j, nil
}

const resultCols = `r.job_id, r.node_id, r.final_url, r.status, r.title, r.data, coalesce(r.html, ''), r.html_truncated,
    r.screenshot, r.console_errors, r.timings, r.links, r.links_over_limit, r.blobs, r.created_at`

// scanResult scans resultCols, then extra.
func scanResult(row pgx.Row, extra ...any) (Result, error) {
	var r Result
	var data []byte
	err := row.Scan(append([]any{&r.JobID, &r.NodeID, &r.FinalURL, &r.Status, &r.Title, &data, &r.HTML, &r.HTMLTruncated,
		&r.Screenshot, &r.ConsoleErrors, &r.Timings, &r.Links, &r.LinksOverLimit, &r.Blobs, &r.CreatedAt}, extra...)...)
	if len(data) > 0 {
		r.Data = data
	}
	if len(r.ConsoleErrors) == 0 {
		r.ConsoleErrors = nil
	}
	if len(r.Links) == 0 {
		r.Links = nil
	}
	r.redact()
	return r, err
}

// GetResult returns the result of a completed job; ErrNotFound when there is none.
func (q *Queue) GetResult(ctx context.Context, jobID int64) (Result, error) {
	r, err := scanResult(q.pool.QueryRow(ctx, "SELECT "+resultCols+" FROM results r WHERE r.job_id = $1", jobID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Result{}, fmt.Errorf("result of job %d: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return Result{}, fmt.Errorf("result of job %d: %w", jobID, err)
	}
	return r, nil
}

// ResultSummary is a result without its HTML and screenshot, with their
// sizes instead, wherever they are kept (the database or a blob store).
type ResultSummary struct {
	Result          // HTML and Screenshot empty
	HTMLBytes       int64
	ScreenshotBytes int64
}

// summaryCols are resultCols with the HTML and the screenshot left out
// (up to megabytes each), then their sizes.
var summaryCols = strings.NewReplacer("coalesce(r.html, '')", "''", "r.screenshot,", "NULL::bytea,").Replace(resultCols) +
	", coalesce(octet_length(r.html), 0), coalesce(octet_length(r.screenshot), 0)"

// GetResultSummary is GetResult without the HTML and screenshot, for views
// that show their sizes only.
func (q *Queue) GetResultSummary(ctx context.Context, jobID int64) (ResultSummary, error) {
	var s ResultSummary
	var err error
	s.Result, err = scanResult(q.pool.QueryRow(ctx, "SELECT "+summaryCols+" FROM results r WHERE r.job_id = $1", jobID),
		&s.HTMLBytes, &s.ScreenshotBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return ResultSummary{}, fmt.Errorf("result of job %d: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return ResultSummary{}, fmt.Errorf("result of job %d: %w", jobID, err)
	}
	for _, b := range s.Blobs {
		switch b.Kind {
		case BlobHTML:
			s.HTMLBytes = b.Size
		case BlobScreenshot:
			s.ScreenshotBytes = b.Size
		}
	}
	return s, nil
}

// ListFilter selects jobs for List. Zero fields do not filter.
type ListFilter struct {
	States       []State
	NodeID       string
	BatchID      string
	Host         string // a host key (Job.Host), in any spelling NormalizeHostKey folds
	CreatedSince time.Time
	CreatedUntil time.Time // exclusive
	// Before is the keyset cursor: only jobs with a smaller id (0: from the newest).
	Before int64
	// Limit is the page size: 1..1000, default 100.
	Limit int
}

// Page is one page of List, newest job first.
type Page struct {
	Jobs []Job `json:"jobs"`
	// Next is the Before of the following page; 0 when this is the last.
	// A page can hold fewer jobs than its limit, even none, and still have
	// a Next: see SearchedDownTo.
	Next int64 `json:"next,omitempty"`
	// SearchedDownTo, when not 0, is the lowest id this page searched: no
	// index serves the filter, so the search stopped after the queue's
	// ListWindow ids, and older matches may lie below (Next).
	SearchedDownTo int64 `json:"searched_down_to,omitempty"`
}

func pageLimit(n int) int {
	switch {
	case n <= 0:
		return 100
	case n > 1000:
		return 1000
	}
	return n
}

// List returns the jobs matching f, newest first, one page at a time.
func (q *Queue) List(ctx context.Context, f ListFilter) (Page, error) {
	var conds []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, s := range f.States {
			if !s.Valid() {
				return Page{}, fmt.Errorf("list jobs: unknown state %q", s)
			}
			states[i] = string(s)
		}
		conds = append(conds, "j.state = ANY("+arg(states)+"::text[])")
	}
	if f.NodeID != "" {
		conds = append(conds, "j.node_id = "+arg(f.NodeID))
	}
	if f.BatchID != "" {
		if err := ValidateBatchID(f.BatchID); err != nil {
			return Page{}, fmt.Errorf("list jobs: %w", err)
		}
		conds = append(conds, "j.batch_id = "+arg(f.BatchID)+"::uuid")
	}
	if f.Host != "" {
		// Any spelling of the host finds its jobs, as an operator types it
		// (a Unicode name, a trailing dot, a default port).
		key, err := NormalizeHostKey(f.Host)
		if err != nil {
			key = strings.ToLower(f.Host)
		}
		conds = append(conds, "j.host = "+arg(key))
	}
	if !f.CreatedSince.IsZero() {
		conds = append(conds, "j.created_at >= "+arg(f.CreatedSince))
	}
	if !f.CreatedUntil.IsZero() {
		conds = append(conds, "j.created_at < "+arg(f.CreatedUntil))
	}
	// The newest jobs fill a page with no filter at once, a batch alone
	// its index in id order, and the in-flight jobs' index bounds any
	// filter with them; any other filter walks the ids down from the
	// cursor (within the batch, if one is given: a crawl's batch grows with
	// its children), through the whole history when its matches are rare,
	// so it searches a window of ids at a time, from the newest job below
	// the cursor (of the batch).
	var floor int64 // the window: ids above floor
	batchOnly := f.BatchID != "" && len(conds) == 1
	if len(conds) > 0 && !batchOnly && !inFlightOnly(f.States) {
		top, err := q.maxIDBelow(ctx, f.BatchID, f.Before)
		if err != nil {
			return Page{}, err
		}
		if top == 0 {
			return Page{}, nil
		}
		floor = max(top-q.cfg.ListWindow, 0)
		conds = append(conds, "j.id <= "+arg(top), "j.id > "+arg(floor))
	} else if f.Before > 0 {
		conds = append(conds, "j.id < "+arg(f.Before))
	}
	limit := pageLimit(f.Limit)
	sql := "SELECT " + jobCols + " FROM jobs j"
	if len(conds) > 0 {
		sql += " WHERE " + strings.Join(conds, " AND ")
	}
	sql += " ORDER BY j.id DESC LIMIT " + arg(limit+1)
	rows, err := q.pool.Query(ctx, sql, args...)
	if err != nil {
		return Page{}, fmt.Errorf("list jobs: %w", err)
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return Page{}, fmt.Errorf("list jobs: %w", err)
	}
	for i := range jobs {
		jobs[i].redact()
	}
	var p Page
	switch {
	case len(jobs) > limit:
		jobs = jobs[:limit]
		p.Next = jobs[limit-1].ID
	case floor > 0:
		// The window ran out before the page filled: go on from the newest
		// job below it, past any ids retention emptied.
		below, err := q.maxIDBelow(ctx, f.BatchID, floor+1)
		if err != nil {
			return Page{}, err
		}
		if below > 0 {
			p.Next, p.SearchedDownTo = below+1, floor+1
		}
	}
	p.Jobs = jobs
	return p, nil
}

// inFlightOnly reports whether states select only jobs held by nodes, at
// most the fleet's capacity (jobs_node_active_idx).
func inFlightOnly(states []State) bool {
	for _, s := range states {
		if s != StateQueued && s != StateProcessing {
			return false
		}
	}
	return len(states) > 0
}

// maxIDBelow returns the newest job's id below before (0: no bound), of
// the batch if one is given, 0 when there is none: one probe of the
// primary key or of the batch's index.
func (q *Queue) maxIDBelow(ctx context.Context, batchID string, before int64) (int64, error) {
	var id int64
	var err error
	if before <= 0 {
		before = math.MaxInt64
	}
	if batchID != "" {
		err = q.pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM jobs WHERE batch_id = $1::uuid AND id < $2", batchID, before).Scan(&id)
	} else {
		err = q.pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM jobs WHERE id < $1", before).Scan(&id)
	}
	if err != nil {
		return 0, fmt.Errorf("list jobs: newest id below %d: %w", before, err)
	}
	return id, nil
}

// ValidateBatchID reports whether s can be a batch id: a UUID in its
// canonical form, 8-4-4-4-12 hex digits, either case. The commands and the
// API check their input with it before reaching the database (which would
// refuse other dash positions with an error of its own).
func ValidateBatchID(s string) error {
	if len(s) != 36 {
		return fmt.Errorf("batch id %q is not a UUID", s)
	}
	for i := range len(s) {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return fmt.Errorf("batch id %q is not a UUID", s)
			}
			continue
		}
		if !strings.ContainsRune("0123456789abcdefABCDEF", rune(s[i])) {
			return fmt.Errorf("batch id %q is not a UUID", s)
		}
	}
	return nil
}

// NodeJobs is what one node holds.
type NodeJobs struct {
	NodeID     string `json:"node_id"`
	Queued     int64  `json:"queued"`
	Processing int64  `json:"processing"`
}

// Stats is a snapshot of the queue for dashboards and the producer.
type Stats struct {
	// Jobs counts jobs by state; every state is present.
	Jobs map[State]int64 `json:"jobs"`
	// Ready counts pending jobs whose run_after has come (not in backoff).
	Ready int64 `json:"ready"`
	// OldestPending is the creation time of the oldest pending job (the
	// first enqueued: exact to within an enqueue transaction's length).
	OldestPending *time.Time `json:"oldest_pending,omitempty"`
	// Nodes lists, by node id, the nodes that hold jobs.
	Nodes []NodeJobs `json:"nodes"`
	// CompletedLastMinute and FailedLastMinute measure recent throughput:
	// the jobs that completed and failed in the last whole minute, the one
	// before the current (read from the per-minute counts, so a minute
	// late, and at any rate of finishes a row per state and class).
	CompletedLastMinute int64 `json:"completed_last_minute"`
	FailedLastMinute    int64 `json:"failed_last_minute"`
	// Lifetime is the farm's lifetime counters: unlike
	// Jobs, they do not drop when retention deletes finished jobs.
	Lifetime Counters `json:"lifetime"`
}

// Stats counts jobs by state and per node, in one round trip. Pending and
// finished jobs come from the maintained counts (job_counts), the ready and
// oldest pending ones from a few index probes (pendingStatsSQL), the queued
// and processing ones from their partial index (at most the fleet's
// capacity), and the last minute's finishes from its per-minute rows
// (finished_minutes): none grows with the history, the backlog or the rate
// of finishes.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	s := Stats{Jobs: make(map[State]int64, 6)}
	for _, st := range States() {
		s.Jobs[st] = 0
	}
	now := q.now()
	b := readBatch()
	b.Queue(pendingStatsSQL, now).QueryRow(func(row pgx.Row) error {
		var n int64
		err := row.Scan(&n, &s.Ready, &s.OldestPending)
		s.Jobs[StatePending] = n
		return err
	})
	b.Queue(`SELECT node_id, count(*) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state = 'processing')
             FROM jobs WHERE state IN ('queued', 'processing') GROUP BY node_id ORDER BY node_id`).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var nj NodeJobs
			if err := rows.Scan(&nj.NodeID, &nj.Queued, &nj.Processing); err != nil {
				return err
			}
			s.Nodes = append(s.Nodes, nj)
			s.Jobs[StateQueued] += nj.Queued
			s.Jobs[StateProcessing] += nj.Processing
		}
		return rows.Err()
	})
	b.Queue(jobCountsSQL).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var st State
				var n int64
				if err := rows.Scan(&st, &n); err != nil {
					return err
				}
				s.Jobs[st] = n
			}
			return rows.Err()
		})
	b.Queue(lastMinuteSQL, now).
		QueryRow(func(row pgx.Row) error { return row.Scan(&s.CompletedLastMinute, &s.FailedLastMinute) })
	b.Queue(farmCountersSQL).QueryRow(func(row pgx.Row) error { return row.Scan(counterDest(&s.Lifetime)...) })
	if err := q.pool.SendBatch(ctx, b).Close(); err != nil {
		return Stats{}, fmt.Errorf("stats: %w", err)
	}
	return s, nil
}
