package jobqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// BatchCounts counts a batch's jobs by state: what `farm submit --wait` and
// the demo show while a batch runs. Followed children count in their
// parent's batch, so Total can grow while a crawl runs.
type BatchCounts struct {
	Total int64           `json:"total"`
	By    map[State]int64 `json:"by_state"`
}

// Finished is the number of jobs in a final state.
func (c BatchCounts) Finished() int64 {
	return c.By[StateCompleted] + c.By[StateFailed] + c.By[StateCanceled]
}

// batchCountsSQL reads the batch index alone (jobs_batch_state_idx carries
// the state).
const batchCountsSQL = `SELECT state, count(*) FROM jobs WHERE batch_id = $1::uuid GROUP BY state`

// batchSubmittedCountsSQL counts the jobs a batch was submitted with, its
// crawls' roots (depth 0), without the children their links added; the
// depth is read from the table, a fetch per job, so it is asked once, when
// the batch is done, not at every poll.
const batchSubmittedCountsSQL = `SELECT state, count(*) FROM jobs WHERE batch_id = $1::uuid AND depth = 0 GROUP BY state`

// BatchCounts counts the jobs of one batch by state.
func (q *Queue) BatchCounts(ctx context.Context, batchID string) (BatchCounts, error) {
	return q.batchCounts(ctx, batchCountsSQL, batchID)
}

// BatchSubmittedCounts counts by state the jobs one batch was submitted
// with: BatchCounts without the jobs that followed links added to it.
func (q *Queue) BatchSubmittedCounts(ctx context.Context, batchID string) (BatchCounts, error) {
	return q.batchCounts(ctx, batchSubmittedCountsSQL, batchID)
}

func (q *Queue) batchCounts(ctx context.Context, query, batchID string) (BatchCounts, error) {
	out := BatchCounts{By: map[State]int64{}}
	if err := ValidateBatchID(batchID); err != nil {
		return out, err
	}
	for _, s := range States() {
		out.By[s] = 0
	}
	rows, err := q.pool.Query(ctx, query, batchID)
	if err != nil {
		return out, fmt.Errorf("batch %s counts: %w", batchID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var s State
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return out, fmt.Errorf("batch %s counts: %w", batchID, err)
		}
		out.By[s] = n
		out.Total += n
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("batch %s counts: %w", batchID, err)
	}
	return out, nil
}

// ExportFilter selects the jobs ExportResults streams.
type ExportFilter struct {
	States       []State // empty: completed and failed
	BatchID      string
	FinishedFrom time.Time // inclusive; zero: no bound
	FinishedTo   time.Time // exclusive; zero: no bound
	// WithHTML and WithScreenshot include the large columns (off by default:
	// they dominate the size of an export).
	WithHTML       bool
	WithScreenshot bool
}

// ExportRow is one job with its result (nil for a job that did not complete).
type ExportRow struct {
	Job    Job
	Result *Result
}

// exportPage is how many rows one round trip fetches: big enough to amortise
// the round trip, small enough that memory stays flat however large the
// export. With HTML or screenshots (up to megabytes a row) pages are small.
// exportPageBytes ends a page early once its rows hold that much: a row's
// extracted data alone can be ResultLimits.DataBytes (4 MiB by default, up
// to 256 MiB), so 500 of them would be gigabytes.
const (
	exportPage      = 500
	exportBlobsPage = 16
	exportPageBytes = 32 << 20
)

// ExportResults streams the selected jobs and their results to fn in job id
// order, one page at a time (keyset paging, no long-lived transaction or
// cursor), so a million rows need only a page of memory. It stops at the
// first error fn returns.
func (q *Queue) ExportResults(ctx context.Context, f ExportFilter, fn func(ExportRow) error) error {
	states := f.States
	if len(states) == 0 {
		states = []State{StateCompleted, StateFailed}
	}
	stateArg := make([]string, len(states))
	for i, s := range states {
		if !s.Valid() {
			return fmt.Errorf("export: unknown state %q", s)
		}
		stateArg[i] = string(s)
	}
	var batch any
	if f.BatchID != "" {
		if err := ValidateBatchID(f.BatchID); err != nil {
			return err
		}
		batch = f.BatchID
	}
	var from, to any
	if !f.FinishedFrom.IsZero() {
		from = f.FinishedFrom
	}
	if !f.FinishedTo.IsZero() {
		to = f.FinishedTo
	}
	const sql = `
SELECT ` + jobCols + `,
       r.job_id IS NOT NULL, coalesce(r.node_id, ''), coalesce(r.final_url, ''), coalesce(r.status, 0),
       coalesce(r.title, ''), r.data,
       CASE WHEN $6 THEN coalesce(r.html, '') ELSE '' END, coalesce(r.html_truncated, false),
       CASE WHEN $7 THEN r.screenshot END,
       coalesce(r.console_errors, '[]'), coalesce(r.timings, '{}'), coalesce(r.links, '[]'), coalesce(r.links_over_limit, 0), r.blobs,
       coalesce(r.created_at, j.created_at)
FROM jobs j LEFT JOIN results r ON r.job_id = j.id
WHERE j.id > $1 AND j.state = ANY($2::text[])
  AND ($3::uuid IS NULL OR j.batch_id = $3::uuid)
  AND ($4::timestamptz IS NULL OR j.finished_at >= $4)
  AND ($5::timestamptz IS NULL OR j.finished_at < $5)
ORDER BY j.id
LIMIT $8`
	pageSize := exportPage
	if f.WithHTML || f.WithScreenshot {
		pageSize = exportBlobsPage
	}
	var after int64
	for {
		rows, err := q.pool.Query(ctx, sql, after, stateArg, batch, from, to, f.WithHTML, f.WithScreenshot, pageSize)
		if err != nil {
			return fmt.Errorf("export results: %w", err)
		}
		page := make([]ExportRow, 0, pageSize)
		held, full := 0, false
		for rows.Next() {
			row, err := scanExportRow(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("export results: %w", err)
			}
			page = append(page, row)
			if held += row.size(); held >= exportPageBytes {
				full = true // the rest of this page comes with the next
				break
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("export results: %w", err)
		}
		for _, row := range page {
			if err := fn(row); err != nil {
				return err
			}
		}
		if !full && len(page) < pageSize {
			return nil
		}
		after = page[len(page)-1].Job.ID
	}
}

// size is about the memory the row's large fields hold.
func (r ExportRow) size() int {
	n := len(r.Job.Spec.URL) + len(r.Job.LastError)
	if r.Result != nil {
		n += len(r.Result.Data) + len(r.Result.HTML) + len(r.Result.Screenshot)
	}
	return n
}

func scanExportRow(rows pgx.Rows) (ExportRow, error) {
	var (
		row                             ExportRow
		has                             bool
		r                               Result
		data, consoleRaw, timRaw, links []byte
		blobs                           []byte
	)
	dest := append(jobScanDest(&row.Job),
		&has, &r.NodeID, &r.FinalURL, &r.Status, &r.Title, &data, &r.HTML, &r.HTMLTruncated, &r.Screenshot,
		&consoleRaw, &timRaw, &links, &r.LinksOverLimit, &blobs, &r.CreatedAt)
	if err := rows.Scan(dest...); err != nil {
		return row, err
	}
	row.Job.redact()
	if !has {
		return row, nil
	}
	r.JobID = row.Job.ID
	if len(data) > 0 {
		r.Data = json.RawMessage(data)
	}
	if err := json.Unmarshal(consoleRaw, &r.ConsoleErrors); err != nil {
		return row, fmt.Errorf("result %d console errors: %w", r.JobID, err)
	}
	if err := json.Unmarshal(timRaw, &r.Timings); err != nil {
		return row, fmt.Errorf("result %d timings: %w", r.JobID, err)
	}
	if err := json.Unmarshal(links, &r.Links); err != nil {
		return row, fmt.Errorf("result %d links: %w", r.JobID, err)
	}
	if len(blobs) > 0 {
		if err := json.Unmarshal(blobs, &r.Blobs); err != nil {
			return row, fmt.Errorf("result %d blobs: %w", r.JobID, err)
		}
	}
	r.redact()
	row.Result = &r
	return row, nil
}

// Why Cancel and Retry leave a job alone: the words the API's 409 and farm
// cancel and retry use alike.
const (
	CancelableStates = "only pending, queued or processing jobs can be canceled"
	RetriableStates  = "only failed or canceled jobs can be retried"
)

// UnchangedError is a job that Cancel or Retry left alone, in a state the
// change does not apply to.
type UnchangedError struct {
	ID    int64
	State State
	// Only says which states the change applies to: CancelableStates or
	// RetriableStates.
	Only string
}

func (e *UnchangedError) Error() string {
	return fmt.Sprintf("job %d is %s; %s", e.ID, e.State, e.Only)
}

// Unchanged explains why Cancel or Retry (only: CancelableStates or
// RetriableStates) left job id alone: an error wrapping ErrNotFound ("job
// N: not found") when there is no such job, else an *UnchangedError naming
// its state; another error when the job cannot be read.
func (q *Queue) Unchanged(ctx context.Context, id int64, only string) error {
	job, err := q.Get(ctx, id)
	if err != nil {
		return err
	}
	return &UnchangedError{ID: id, State: job.State, Only: only}
}

// RetryBatch queues every failed or canceled job of a batch again (see Retry).
func (q *Queue) RetryBatch(ctx context.Context, batchID string) (int64, error) {
	if err := ValidateBatchID(batchID); err != nil {
		return 0, err
	}
	rows, err := q.pool.Query(ctx, `SELECT id FROM jobs WHERE batch_id = $1::uuid AND state IN ('failed', 'canceled')`, batchID)
	if err != nil {
		return 0, fmt.Errorf("retry batch %s: %w", batchID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("retry batch %s: %w", batchID, err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return q.Retry(ctx, ids...)
}

var cancelSQL = `
WITH old AS (
    -- What the jobs were, to take the pending ones out of their count: an
    -- UPDATE returns only the new row.
    SELECT j.id, j.state FROM jobs j
    WHERE %s AND j.state IN ('pending', 'queued', 'processing')
    ORDER BY j.id
    FOR NO KEY UPDATE
), upd AS (
    UPDATE jobs j SET state = 'canceled', finished_at = coalesce($2::timestamptz, now()), lease_expires_at = NULL
    FROM old o
    WHERE j.id = o.id
    RETURNING j.id, j.node_id, j.state, j.finished_at, j.error_class
` + stateCountsSQL("SELECT state, finished_at, error_class, 1 AS d FROM upd") +
	pendingCountSQL("SELECT -1 AS d FROM old o JOIN upd u ON u.id = o.id WHERE o.state = 'pending'") + `
), woken AS (
    SELECT pg_notify($3, $4) FROM upd WHERE node_id IS NOT NULL HAVING count(*) > 0
)
SELECT count(*), (SELECT count(*) FROM woken) FROM upd`

// Cancel cancels the live jobs among ids and returns how many it canceled.
// A node still running one finds out when its Complete or Fail reports the
// job already finished.
func (q *Queue) Cancel(ctx context.Context, ids ...int64) (int64, error) {
	var n, notified int64
	err := q.retryDeadlocks(ctx, "cancel", func() error {
		return q.pool.QueryRow(ctx, fmt.Sprintf(cancelSQL, "j.id = ANY($1::bigint[])"), ids, q.now(), ChannelProducer, PayloadSlots).
			Scan(&n, &notified)
	})
	if err != nil {
		return 0, fmt.Errorf("cancel %d jobs: %w", len(ids), err)
	}
	return n, nil
}

// maxCancelPasses bounds CancelBatch's passes.
const maxCancelPasses = 10

// CancelBatch cancels every live job of a batch (its followed children too).
//
// One statement sees the jobs committed before it began. A completion that
// held one of the batch's jobs inserted that job's followed children, and
// committed while the cancel waited for the job: the cancel does not see
// those children. They are committed once it ends, so another pass cancels
// them; a canceled job completes no more, so the passes end with one that
// finds nothing.
func (q *Queue) CancelBatch(ctx context.Context, batchID string) (int64, error) {
	if err := ValidateBatchID(batchID); err != nil {
		return 0, err
	}
	var total int64
	for range maxCancelPasses {
		var n, notified int64
		err := q.retryDeadlocks(ctx, "cancel batch", func() error {
			return q.pool.QueryRow(ctx, fmt.Sprintf(cancelSQL, "j.batch_id = $1::uuid"), batchID, q.now(), ChannelProducer, PayloadSlots).
				Scan(&n, &notified)
		})
		if err != nil {
			return total, fmt.Errorf("cancel batch %s: %w", batchID, err)
		}
		total += n
		if n == 0 {
			break
		}
	}
	return total, nil
}

// Retry sends failed and canceled jobs among ids back to pending with their
// attempt count reset, and returns how many.
func (q *Queue) Retry(ctx context.Context, ids ...int64) (int64, error) {
	var n, notified int64
	err := q.retryDeadlocks(ctx, "retry", func() error {
		return q.pool.QueryRow(ctx, `
        WITH old AS (
            -- What the jobs were, to take them out of their final counts.
            SELECT j.id, j.state, j.finished_at, j.error_class FROM jobs j
            WHERE j.id = ANY($1::bigint[]) AND j.state IN ('failed', 'canceled')
            ORDER BY j.id
            FOR UPDATE
        ), upd AS (
            UPDATE jobs j SET state = 'pending', attempts = 0, node_id = NULL, queued_at = NULL,
                started_at = NULL, finished_at = NULL, lease_expires_at = NULL,
                run_after = coalesce($2::timestamptz, now())
            FROM old o
            WHERE j.id = o.id
            RETURNING j.id
        `+stateCountsSQL("SELECT o.state, o.finished_at, o.error_class, -1 AS d FROM old o JOIN upd u ON u.id = o.id")+
			pendingCountSQL("SELECT 1 AS d FROM upd")+`
        ), woken AS (
            SELECT pg_notify($3, $4) FROM upd HAVING count(*) > 0
        )
        SELECT count(*), (SELECT count(*) FROM woken) FROM upd`, ids, q.now(), ChannelProducer, PayloadSubmitted).Scan(&n, &notified)
	})
	if err != nil {
		return 0, fmt.Errorf("retry %d jobs: %w", len(ids), err)
	}
	return n, nil
}
