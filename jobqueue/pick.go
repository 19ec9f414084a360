package jobqueue

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// A round's pick is, of the ready pending jobs by priority then age, the
// first free ones whose host has budget left (hostBudget) — the same set as
// each host's best jobs up to its budget, merged by priority then age. Two
// ways reach it. The windows walk the head of the pending queue alone: when
// the best jobs belong to hosts with budget, they need a few rows more than
// the free slots, however many hosts have pending jobs. When the head is
// held back (one host's jobs, throttled, ahead of every other's) they cannot
// tell the pick from the first rows, and the round falls back to the host
// scan: one probe per host that has pending jobs, which with 100,000 hosts
// took 0.65 s a round (BenchmarkAssignPending).

// pickWindows are the sizes of the windows a round with free slots reads,
// in turn, before it scans the hosts: every slot a job and a few more for
// a job not yet due here and there, which fills a round of hosts without a
// limit; then, for the jobs of hosts whose budget ran out, four times
// over. A round the windows cannot fill (a throttled host's run, or more
// retries waiting out their backoff than the windows hold, at the head)
// costs their rows on top of the host scan.
func pickWindows(free int) [2]int { return [2]int{free + 32, 4*free + 256} }

// fewPendingHosts reports whether the last host scan found no more hosts
// than the first window has rows: a scan of so few hosts costs less than
// the windows that would fail before it (two windows, 318 rows, then a
// scan of 10 hosts: 2.1 ms a round against 1.5 ms for the scan alone,
// BenchmarkAssignPending). The next scan tells when they are many again.
func (q *Queue) fewPendingHosts(free int) bool {
	n := q.hostsScanned.Load()
	return n > 0 && n-1 <= int64(pickWindows(free)[0])
}

// candidate is a job the round may assign, with what its report needs.
type candidate struct {
	id      int64
	created time.Time
}

// pick is what a round's pick found.
type pick struct {
	cands []candidate // in the order they are to be given out
	// throttled counts the hosts looked at that have pending jobs and no
	// budget; nextDueIn is as AssignReport.NextDueIn, over those hosts.
	throttled int
	nextDueIn time.Duration
	gated     []string // hosts with an interval whose row Claim needs
}

// hostSeen folds a host's budget into p: it counts a host held back and
// when the earliest may start again, and names a host with an interval
// that has no row yet.
func (p *pick) hostSeen(h hostState, pol HostPolicy, hasRow bool, now time.Time, free int) int {
	n, due := hostBudget(pol, h, now, free)
	if pol.MinInterval > 0 && !hasRow {
		p.gated = append(p.gated, h.Host)
	}
	if n == 0 {
		p.throttled++
		if wait := due.Sub(now); !due.IsZero() && (p.nextDueIn == 0 || wait < p.nextDueIn) {
			p.nextDueIn = max(wait, time.Millisecond)
		}
	}
	return n
}

// activeByHostSQL counts, per host, the jobs a host's politeness budget
// counts against it (queued and processing, farm-wide) and the queued
// ones among them, of the hosts the condition cond (on jobs) admits.
func activeByHostSQL(cond string) string {
	return `
    SELECT host, count(*)::int AS active, (count(*) FILTER (WHERE state = 'queued'))::int AS queued
    FROM jobs WHERE state IN ('queued', 'processing') ` + cond + ` GROUP BY host`
}

// pickWindowSQL reads the first $2 pending jobs by priority then age
// (jobs_pending_idx), each with whether it is due, and its host's
// farm-wide active and queued counts and the time of its last start (as
// politeHostsSQL), read once per host. Not-yet-due jobs are read, not
// skipped, so that the window is $2 rows of the index, however many jobs
// wait for a retry.
var pickWindowSQL = `
WITH w AS (
    SELECT id, host, priority, created_at, run_after <= coalesce($1::timestamptz, now()) AS due
    FROM jobs WHERE state = 'pending'
    ORDER BY priority DESC, id
    LIMIT $2
), hs AS (
    SELECT DISTINCT host FROM w
), active AS (` + activeByHostSQL("AND host IN (SELECT host FROM hs)") + `
), info AS (
    SELECT hs.host, coalesce(a.active, 0) AS active, coalesce(a.queued, 0) AS queued, h.host IS NOT NULL AS has_row,
           nullif(h.last_started_at, '-infinity') AS last_started
    FROM hs
    LEFT JOIN active a ON a.host = hs.host
    LEFT JOIN hosts h ON h.host = hs.host
)
SELECT w.id, w.host, w.created_at, w.due, i.active, i.queued, i.has_row, i.last_started,
       coalesce($1::timestamptz, clock_timestamp())
FROM w JOIN info i ON i.host = w.host
ORDER BY w.priority DESC, w.id`

// pickFromHead picks from the head of the pending queue, reading the
// windows of pickWindows in turn. ok is false when none of them could
// fill the free slots without leaving jobs unread: jobs past them might
// have been picked, and the caller must scan the hosts.
func (q *Queue) pickFromHead(ctx context.Context, tx pgx.Tx, policy func(string) HostPolicy, free int) (p pick, ok bool, err error) {
	for _, limit := range pickWindows(free) {
		if p, ok, err = q.pickWindow(ctx, tx, policy, free, limit); err != nil || ok {
			return p, ok, err
		}
	}
	return pick{}, false, nil
}

// pickWindow picks from the first limit jobs of the pending queue. ok is
// false when they were limit and yielded fewer jobs than free slots.
func (q *Queue) pickWindow(ctx context.Context, tx pgx.Tx, policy func(string) HostPolicy, free, limit int) (p pick, ok bool, err error) {
	rows, err := tx.Query(ctx, pickWindowSQL, q.now(), limit)
	if err != nil {
		return pick{}, false, err
	}
	defer rows.Close()
	budget := map[string]int{}
	read := 0
	for rows.Next() {
		read++
		var c candidate
		var h hostState
		var due, hasRow bool
		var last *time.Time
		var now time.Time
		if err := rows.Scan(&c.id, &h.Host, &c.created, &due, &h.Active, &h.Queued, &hasRow, &last, &now); err != nil {
			return pick{}, false, err
		}
		n, known := budget[h.Host]
		if !known {
			if last != nil {
				h.LastStarted = *last
			}
			n = p.hostSeen(h, policy(h.Host), hasRow, now, free)
		}
		if due && n > 0 && len(p.cands) < free {
			p.cands = append(p.cands, c)
			n--
		}
		budget[h.Host] = n
	}
	if err := rows.Err(); err != nil {
		return pick{}, false, err
	}
	return p, len(p.cands) == free || read < limit, nil
}

// politeHostsSQL finds the hosts that have pending jobs by a loose index scan
// (one probe per host, however many jobs each has), with their farm-wide
// active and queued counts and the time of their last start. The clock it
// returns is read after the statement's snapshot (clock_timestamp, not
// now()), so "the interval since the last start has passed" is judged at a
// moment no earlier than what the snapshot saw; and a job assigned now can
// only start (Claim stamps the clock) after this round commits.
var politeHostsSQL = `
WITH RECURSIVE ph AS (
    (SELECT host FROM jobs WHERE state = 'pending' ORDER BY host LIMIT 1)
    UNION ALL
    SELECT (SELECT j.host FROM jobs j WHERE j.state = 'pending' AND j.host > ph.host ORDER BY j.host LIMIT 1)
    FROM ph WHERE ph.host IS NOT NULL
), active AS (` + activeByHostSQL("") + `
)
SELECT ph.host, coalesce(a.active, 0), coalesce(a.queued, 0), h.host IS NOT NULL,
       nullif(h.last_started_at, '-infinity'), coalesce($1::timestamptz, clock_timestamp())
FROM ph
LEFT JOIN active a ON a.host = ph.host
LEFT JOIN hosts h ON h.host = ph.host
WHERE ph.host IS NOT NULL`

// politePickSQL takes, for every host, its budget of ready pending jobs by
// priority then age, and keeps the best $4 of them farm-wide. It locks
// nothing: the nodes are locked first (lockTargetsSQL), then the picked jobs
// (politeLockSQL), in the order every statement takes nodes and jobs. What
// the round needs of a job comes from the per-host scan itself: joining the
// picked ids back to jobs with the state checked again let the planner drive
// the join from a pending partial index, whose statistics lag a queue that
// fills between two ANALYZEs of a large table (with 1M finished jobs
// retained, each round walked every pending job once per picked job: 24 ms
// a round instead of 0.2).
const politePickSQL = `
SELECT c.id, c.created_at
FROM unnest($1::text[], $2::int[]) AS b(host, n)
CROSS JOIN LATERAL (
    SELECT p.id, p.priority, p.created_at FROM jobs p
    WHERE p.state = 'pending' AND p.host = b.host AND p.run_after <= coalesce($3::timestamptz, now())
    ORDER BY p.priority DESC, p.id
    LIMIT b.n
) c
ORDER BY c.priority DESC, c.id
LIMIT $4`

// pickByHost scans every host that has pending jobs (politeHostsSQL), then
// takes each one's budget of jobs (politePickSQL).
func (q *Queue) pickByHost(ctx context.Context, tx pgx.Tx, policy func(string) HostPolicy, free int) (pick, error) {
	var p pick
	rows, err := tx.Query(ctx, politeHostsSQL, q.now())
	if err != nil {
		return pick{}, err
	}
	var hosts []string
	var budgets []int32
	scanned := 0
	for rows.Next() {
		scanned++
		var h hostState
		var hasRow bool
		var last *time.Time
		var now time.Time
		if err := rows.Scan(&h.Host, &h.Active, &h.Queued, &hasRow, &last, &now); err != nil {
			rows.Close()
			return pick{}, err
		}
		if last != nil {
			h.LastStarted = *last
		}
		if n := p.hostSeen(h, policy(h.Host), hasRow, now, free); n > 0 {
			hosts = append(hosts, h.Host)
			budgets = append(budgets, int32(n))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return pick{}, err
	}
	q.hostsScanned.Store(int64(scanned) + 1)
	if len(hosts) == 0 {
		return p, nil
	}
	rows, err = tx.Query(ctx, politePickSQL, hosts, budgets, q.now(), free)
	if err != nil {
		return pick{}, err
	}
	p.cands, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (candidate, error) {
		var c candidate
		err := r.Scan(&c.id, &c.created)
		return c, err
	})
	return p, err
}
