package jobqueue

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Bounds of a Result as stored.
const (
	maxConsoleLine = 4 << 10
	maxTitle       = 4 << 10
	maxFinalURL    = 16 << 10
)

// Completion is one finished render handed to CompleteMany.
type Completion struct {
	JobID  int64
	NodeID string // the node that ran it
	// Incarnation of NodeID that ran it: the result is refused with a
	// *FencedError once a newer one registered. 0 binds to none.
	Incarnation int64
	Result      Result
}

// CompleteOutcome is what CompleteMany did with one Completion.
type CompleteOutcome struct {
	JobID int64
	// Err is nil when the job was completed by this call; a *FinishedError
	// (errors.Is ErrAlreadyFinished) when it was already final, in which
	// case nothing changed; ErrNotFound; or why the result was unusable.
	Err error
	// Children is the number of followed links enqueued as child jobs.
	Children int
}

// completeSQL completes many jobs in one statement. The jobs are locked in
// id order first so that two batches completing overlapping jobs cannot
// deadlock on them; the results and the children of followed links are
// inserted in the same statement, so in the same transaction.
//
// A batch without followed links — most of them — runs completeNoFollowSQL
// instead: the same statement without the child jobs' CTEs, whose INSERT
// into jobs alone (8 indexes opened, an insert trigger run) cost as much as
// the rest of the statement's fixed cost, for no row.
var completeSQL = completeHeadSQL + `
), found AS (
    SELECT * FROM unnest($13::bigint[], $14::text[], $15::text[], $16::text[], $17::int[], $26::bool[])
        AS f(job_id, url, host, dedup_key, ord, on_final)
), eligible AS (
    SELECT d.id AS parent_id, d.batch_id, d.priority, d.max_attempts, d.crawl_id, d.depth,
           CASE WHEN f.host = d.host OR jsonb_typeof(d.spec -> 'cookies') IS DISTINCT FROM 'array'
                THEN jsonb_set(d.spec, '{url}', to_jsonb(f.url))
                -- A cookie without a domain is the parent host's (the node
                -- sets it for the page's URL): a child on another host would
                -- set it for, and send it to, that host. Cookies with a
                -- domain are scoped by the browser and go along.
                ELSE (jsonb_set(d.spec, '{url}', to_jsonb(f.url)) - 'cookies') || coalesce((
                    SELECT jsonb_build_object('cookies', jsonb_agg(c.v ORDER BY c.o))
                    FROM jsonb_array_elements(d.spec -> 'cookies') WITH ORDINALITY AS c(v, o)
                    WHERE coalesce(c.v ->> 'domain', '') <> ''
                    HAVING count(*) > 0), '{}')
           END AS spec, f.host, f.dedup_key,
           row_number() OVER (PARTITION BY d.id ORDER BY f.ord) AS rn,
           coalesce(nullif((d.spec #>> '{follow,max_links}')::int, 0), $23::int) AS max_links
    FROM done d JOIN found f ON f.job_id = d.id
    WHERE d.spec -> 'follow' IS NOT NULL
      AND d.depth < (d.spec #>> '{follow,max_depth}')::int
      -- The job's host, or the host its page ended on after a redirect
      -- (http://example.com/ to https://www.example.com/).
      AND (f.host = d.host OR f.on_final OR coalesce((d.spec #>> '{follow,any_host}')::boolean, false))
      -- A link already in the crawl (a site's navigation, on every page)
      -- takes no place under max_links: numbered with the new ones, it
      -- would crowd them out and count among the links over the limit.
      AND NOT EXISTS (SELECT 1 FROM jobs k WHERE k.crawl_id = d.crawl_id AND k.dedup_key = f.dedup_key)
` + completeSavedSQL("i.links_over + (SELECT count(*) FROM eligible e WHERE e.parent_id = i.job_id AND e.rn > e.max_links)") + `
), children AS (
    INSERT INTO jobs (batch_id, priority, spec, host, max_attempts, run_after, created_at,
                      parent_id, crawl_id, depth, dedup_key)
    SELECT e.batch_id, e.priority, e.spec, e.host, e.max_attempts, coalesce($12::timestamptz, now()),
           coalesce($12::timestamptz, now()), e.parent_id, e.crawl_id, e.depth + 1, e.dedup_key
    FROM eligible e
    WHERE e.rn <= e.max_links
    ORDER BY e.crawl_id, e.dedup_key
    ON CONFLICT (crawl_id, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
    RETURNING parent_id
), kids AS (
    SELECT c.parent_id, count(*) AS n FROM children c GROUP BY c.parent_id
` + completeSlotsSQL + `
), submitted AS (
    SELECT pg_notify($18, $20) FROM children HAVING count(*) > 0
)
SELECT i.job_id, d.id IS NOT NULL, coalesce(k.n, 0)::int,
       (SELECT count(*) FROM slots) + (SELECT count(*) FROM submitted)
FROM input i
LEFT JOIN done d ON d.id = i.job_id
LEFT JOIN kids k ON k.parent_id = i.job_id`

// completeNoFollowSQL is completeSQL for a batch that has no followed link.
// Its parameters are completeSQL's without the links' ($13–$17), $20 and
// $23, numbered on (see completeRows).
var completeNoFollowSQL = strings.NewReplacer("$18", "$13", "$19", "$14", "$21", "$15", "$22", "$16", "$24", "$17", "$25", "$18").
	Replace(completeHeadSQL + completeSavedSQL("i.links_over") + completeSlotsSQL + `
)
SELECT i.job_id, d.id IS NOT NULL, 0, (SELECT count(*) FROM slots)
FROM input i
LEFT JOIN done d ON d.id = i.job_id`)

// completeHeadSQL locks and completes the jobs and counts them.
var completeHeadSQL = `
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[],
                         $7::text[], $8::bytea[], $9::text[], $10::text[], $11::text[],
                         $21::bigint[], $22::int[], $24::text[], $25::bool[])
        AS t(job_id, node_id, final_url, status, title, data, html, screenshot, console_errors, timings, links,
             incarnation, links_over, blobs, html_truncated)
), locked AS (
    -- By id alone, the state checked below: with the state in this WHERE
    -- clause the planner may scan a partial index instead of the primary
    -- key (see politeLockSQL). A job already final is locked for nothing,
    -- which only a duplicate completion pays. (CompleteMany lists a job
    -- once, so the join yields one row per job.)
    SELECT j.id, j.state, i.node_id FROM jobs j JOIN input i ON i.job_id = j.id
    WHERE j.id = ANY($1::bigint[]) AND ` + fence("i.node_id", "i.incarnation") + `
    ORDER BY j.id
    FOR UPDATE OF j
), done AS (
    -- Only locked in FROM: an UPDATE carries each FROM row whole (to
    -- recheck it if the job changed), and input's rows are wide.
    UPDATE jobs j SET state = 'completed', node_id = l.node_id,
        finished_at = coalesce($12::timestamptz, now()), lease_expires_at = NULL
    FROM locked l
    WHERE j.id = l.id AND l.state IN ('pending', 'queued', 'processing')
    RETURNING j.id, j.batch_id, j.priority, j.spec, j.host, j.max_attempts, j.crawl_id, j.depth, j.node_id, j.finished_at
), counted AS (
    ` + bumpNodeCounterSQL("jobs_completed", "SELECT d.node_id, count(*) FROM done d GROUP BY d.node_id ORDER BY d.node_id") +
	stateCountsSQL("SELECT 'completed'::text AS state, d.finished_at, NULL::text AS error_class, 1 AS d FROM done d") +
	// A job given back to pending (its lease expired) that its node
	// completed after all.
	pendingCountSQL("SELECT -1 AS d FROM locked l JOIN done d ON d.id = l.id WHERE l.state = 'pending'")

// completeSavedSQL inserts the results, with linksOver the expression of
// each result's links over the limit.
func completeSavedSQL(linksOver string) string {
	return `
), saved AS (
    INSERT INTO results (job_id, node_id, final_url, status, title, data, html, html_truncated, screenshot,
                         console_errors, timings, links, links_over_limit, blobs, created_at)
    SELECT i.job_id, i.node_id, i.final_url, i.status, i.title, i.data::jsonb, i.html, i.html_truncated, i.screenshot,
           i.console_errors::jsonb, i.timings::jsonb, i.links::jsonb, ` + linksOver + `,
           i.blobs::jsonb, coalesce($12::timestamptz, now())
    FROM input i JOIN done d ON d.id = i.job_id
    -- A job that failed before (its answer kept by FailKeeping) and was
    -- retried: the completion's result replaces it.
    ON CONFLICT (job_id) DO UPDATE SET node_id = EXCLUDED.node_id, final_url = EXCLUDED.final_url,
        status = EXCLUDED.status, title = EXCLUDED.title, data = EXCLUDED.data, html = EXCLUDED.html,
        html_truncated = EXCLUDED.html_truncated, screenshot = EXCLUDED.screenshot, console_errors = EXCLUDED.console_errors,
        timings = EXCLUDED.timings, links = EXCLUDED.links, links_over_limit = EXCLUDED.links_over_limit,
        blobs = EXCLUDED.blobs, created_at = EXCLUDED.created_at`
}

// completeSlotsSQL wakes the producer for the freed slots.
const completeSlotsSQL = `
), slots AS (
    -- A freed slot wakes the producer only when a pending job may want it.
    -- PostgreSQL signals every listening backend of the database on each
    -- notifying commit (every node's LISTEN connection), and nodes complete
    -- all the time: with no job waiting this wake-up found nothing to do.
    -- A job enqueued while this statement runs wakes the producer itself;
    -- if the fleet is full at that instant and its round cannot see this
    -- slot yet, the job waits for the producer's next wake-up or tick.
    SELECT pg_notify($18, $19) FROM done
    HAVING count(*) > 0 AND EXISTS (SELECT 1 FROM jobs p WHERE p.state = 'pending')`

// CompleteMany completes many jobs in one round trip and one transaction —
// the way a node (or a batching completer in front of several) amortizes the
// commit. Outcomes are in input order; the error is for the call as a whole.
// A job listed twice is completed by its first entry. A result over the
// queue's ResultLimits, or one the database refuses, fails only its own
// outcome with a *ResultError (errors.Is ErrResultRefused); the others are
// written. The call's error is for a database that could not be reached.
//
// Each job's result is recorded and the job marked completed in the same
// transaction. A job already final is left as it is and its outcome is a
// *FinishedError (errors.Is ErrAlreadyFinished): a job is completed exactly
// once even when it ran twice. The result is accepted from any node while
// the job is live (pending, queued or processing): a page that was rendered
// need not be rendered again because its lease ran out a moment too early.
func (q *Queue) CompleteMany(ctx context.Context, items []Completion) ([]CompleteOutcome, error) {
	out := make([]CompleteOutcome, len(items))
	var a completeArgs
	seen := make(map[int64]bool, len(items))
	index := make(map[int64]int, len(items)) // job id → position in out
	var accepted []int                       // positions of the items in a
	for i, it := range items {
		out[i].JobID = it.JobID
		if seen[it.JobID] {
			out[i].Err = fmt.Errorf("job %d listed twice in one CompleteMany: %w", it.JobID,
				&FinishedError{JobID: it.JobID, State: StateCompleted})
			continue
		}
		seen[it.JobID] = true
		if err := a.add(it, q.cfg.ResultLimits); err != nil {
			out[i].Err = fmt.Errorf("job %d: %w", it.JobID, err)
			continue
		}
		index[it.JobID] = i
		accepted = append(accepted, i)
	}
	if len(a.jobIDs) == 0 {
		return out, nil
	}

	rows, err := q.completeRows(ctx, &a)
	if pe, refused := refusedByDatabase(err); refused {
		// One result the database cannot take must not take the others down
		// with it: each is tried on its own, and only the refused fail.
		if len(accepted) == 1 {
			out[accepted[0]].Err = fmt.Errorf("job %d: %w", items[accepted[0]].JobID, databaseRefusal(pe))
			return out, nil
		}
		rows, err = nil, nil
		for _, i := range accepted {
			var one completeArgs
			if aerr := one.add(items[i], q.cfg.ResultLimits); aerr != nil {
				out[i].Err = fmt.Errorf("job %d: %w", items[i].JobID, aerr)
				continue
			}
			r, oerr := q.completeRows(ctx, &one)
			if pe, refused := refusedByDatabase(oerr); refused {
				out[i].Err = fmt.Errorf("job %d: %w", items[i].JobID, databaseRefusal(pe))
				continue
			}
			if oerr != nil {
				err = oerr
				break
			}
			rows = append(rows, r...)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("complete %d jobs: %w", len(a.jobIDs), err)
	}

	var missing []int64
	for _, x := range rows {
		i := index[x.id]
		if x.completed {
			out[i].Children = x.children
			continue
		}
		if it := items[i]; it.Incarnation != 0 {
			if ferr := q.fenceErr(ctx, it.NodeID, it.Incarnation); ferr != nil {
				out[i].Err = fmt.Errorf("job %d: %w", x.id, ferr)
				continue
			}
		}
		missing = append(missing, x.id)
	}
	if len(missing) > 0 {
		if err := q.explainNotCompleted(ctx, missing, &a, index, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// completeRow is what completeSQL says about one job.
type completeRow struct {
	id        int64
	completed bool
	children  int
}

// completeRows runs completeSQL on a, retrying lost deadlocks.
func (q *Queue) completeRows(ctx context.Context, a *completeArgs) ([]completeRow, error) {
	var rows []completeRow
	err := q.retryDeadlocks(ctx, "complete", func() error {
		rows = rows[:0]
		sql, args := completeSQL, []any{
			a.jobIDs, a.nodeIDs, a.finalURLs, a.statuses, a.titles, a.data, a.html, a.screenshots,
			a.consoleErrors, a.timings, a.links, q.now(),
			a.linkJob, a.linkURL, a.linkHost, a.linkKey, a.linkOrd,
			ChannelProducer, PayloadSlots, PayloadSubmitted, a.incarnations, a.linksOver, DefaultMaxLinks, a.blobs,
			a.htmlTruncated, a.linkOnFinal}
		if len(a.linkJob) == 0 {
			sql, args = completeNoFollowSQL, slices.Concat(args[:12], args[17:19], args[20:22], args[23:25])
		}
		b, complete := nodeBatch(sql, args...)
		complete.Query(func(r pgx.Rows) error {
			var x completeRow
			var notified int64
			_, err := pgx.ForEachRow(r, []any{&x.id, &x.completed, &x.children, &notified}, func() error {
				rows = append(rows, x)
				return nil
			})
			return err
		})
		return q.pool.SendBatch(ctx, b).Close()
	})
	return rows, err
}

// explainNotCompleted fills in why jobs were not completed: already final, or
// unknown. A job completed with its completion's own blobs was completed by
// this completion, in an earlier try whose answer was lost (the node retries
// after a connection error, and a batch retried item by item can fail after
// some items committed): its outcome is success, not ErrAlreadyFinished,
// so that the node does not delete the blobs the stored result points at.
// A blob's key is its run's own (blobstore.Offload: the attempt and a
// nonce), so another run's completion never matches. Such an outcome reports no Children:
// the earlier try enqueued them.
func (q *Queue) explainNotCompleted(ctx context.Context, ids []int64, a *completeArgs, index map[int64]int, out []CompleteOutcome) error {
	blobs := make([]*string, len(ids))
	for i, id := range ids {
		blobs[i] = a.blobs[slices.Index(a.jobIDs, id)]
	}
	rows, err := q.pool.Query(ctx, `
SELECT j.id, j.state, coalesce(j.state = 'completed' AND r.blobs = i.blobs::jsonb, false)
FROM unnest($1::bigint[], $2::text[]) AS i(id, blobs)
JOIN jobs j ON j.id = i.id
LEFT JOIN results r ON r.job_id = j.id`, ids, blobs)
	if err != nil {
		return fmt.Errorf("complete: read states: %w", err)
	}
	type found struct {
		state State
		ours  bool
	}
	states := make(map[int64]found, len(ids))
	for rows.Next() {
		var id int64
		var f found
		if err := rows.Scan(&id, &f.state, &f.ours); err != nil {
			rows.Close()
			return fmt.Errorf("complete: read states: %w", err)
		}
		states[id] = f
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("complete: read states: %w", err)
	}
	for _, id := range ids {
		f, ok := states[id]
		switch {
		case !ok:
			out[index[id]].Err = fmt.Errorf("job %d: %w", id, ErrNotFound)
		case f.ours:
			out[index[id]].Err = nil
		default:
			// A live state here means the job finished and came back
			// (Retry) between the two statements; either way this result
			// was not taken.
			out[index[id]].Err = &FinishedError{JobID: id, State: f.state}
		}
	}
	return nil
}
