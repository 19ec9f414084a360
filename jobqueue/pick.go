package jobqueue

import (
	"context"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// A round's pick is, of the ready pending jobs by priority then age, the
// first free ones whose host has budget left (hostBudget) — the same set as
// each host's best jobs up to its budget, merged by priority then age. Two
// ways reach it. The walk reads the pending queue from its head, in chunks,
// and stops once the free slots are filled: when the best jobs belong to
// hosts with budget, a few rows more than the free slots, however many
// hosts have pending jobs. Every chunk leaves out, in the server, the jobs
// not yet due, and the later ones those of hosts whose budget is spent, so
// a head held back (one host's jobs, throttled, or retries waiting out
// their backoff, ahead of every other's) costs a read of its rows, not a
// row each to the producer. The host scan costs one probe per host that
// has pending jobs (with 100,000 hosts, 0.65 s a round,
// BenchmarkAssignPending); a round falls back to it once the walk has read
// as many rows as the scan would cost (walkAllowance).

// firstWalkChunk is how many rows the walk's first chunk reads, and how
// many a chunk passes on at first: every slot a job and a few more for a
// job not yet due here and there, which fills a round of hosts without a
// limit. Each later chunk reads walkGrowth times as many as the last, as
// most of a long held-back head is left out in the server and costs no
// more than its read; it passes on four times as many as the last only
// after a chunk was cut short by them (the jobs of hosts whose budget ran
// out in it).
func firstWalkChunk(free int) int { return free + 32 }

// walkGrowth is how much larger each chunk's read is than the last's.
const walkGrowth = 16

// maxWalkChunk bounds a chunk's read and the rows it passes on, which the
// server holds in memory and sends.
const maxWalkChunk = 50_000

// walkRowsPerHost is how many rows of the pending index the walk may read
// per host that has pending jobs before it gives up for the host scan:
// about what the scan costs per host against what the walk costs per row
// (BenchmarkAssignPending, 100,000 hosts: the scan 0.6 s, 6 µs a host; a
// walk past a held-back head of 20,000 jobs 35 ms, under 2 µs a row), so
// a round that walks as far as allowed and then scans costs at most about
// twice the scan.
const walkRowsPerHost = 4

// walkAllowance is how many rows of the pending index a round's walk may
// read before it falls back to the host scan: walkRowsPerHost per host the
// last scan found, and at least its first two chunks (all of it while no
// scan has run yet, the producer's first rounds).
func (q *Queue) walkAllowance(free int) int {
	first := firstWalkChunk(free)
	return max(first+first*walkGrowth, walkRowsPerHost*int(q.hostsScanned.Load()-1))
}

// fewPendingHosts reports whether the last host scan found no more hosts
// than the walk's first chunk has rows: a scan of so few hosts costs less
// than a walk that would fail before it (when the walk was two windows of
// 318 rows in all, they and then a scan of 10 hosts cost 2.1 ms a round
// against 1.5 ms for the scan alone, BenchmarkAssignPending). The next
// scan tells when they are many again.
func (q *Queue) fewPendingHosts(free int) bool {
	n := q.hostsScanned.Load()
	return n > 0 && n-1 <= int64(firstWalkChunk(free))
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

// hostInfoSQL selects, for each host of the relation src, what a host's
// politeness budget needs (hostBudget): its farm-wide active and queued
// counts (CTE active, activeByHostSQL), whether it has a hosts row, and the
// time of its last start.
func hostInfoSQL(src string) string {
	return `
    SELECT ` + src + `.host, coalesce(a.active, 0) AS active, coalesce(a.queued, 0) AS queued,
           h.host IS NOT NULL AS has_row, nullif(h.last_started_at, '-infinity') AS last_started
    FROM ` + src + `
    LEFT JOIN active a ON a.host = ` + src + `.host
    LEFT JOIN hosts h ON h.host = ` + src + `.host`
}

// pickWalkSQL reads the pending jobs by priority then age
// (jobs_pending_idx) after the job ($3, $4) — priority $3, id $4; a
// priority above every job's for the head — up to $2 of them, and returns
// the first $5 that are due and whose host is not in $6, each with its
// place among those read and its host's farm-wide active and queued
// counts and the time of its last start (as politeHostsSQL), read once per
// host. The $2nd job read comes back too, passed on or not: the end of a
// chunk that passed fewer than $5 on, where the next one starts. The read
// stops at the $5th job passed on: a chunk past a held-back head reads
// little more than the head. The start is two index ranges, the rest of
// the priority and the priorities below it, merged: a row comparison
// cannot follow an index of mixed directions. The priority is bounded on
// both sides, not equal to $3, so that no plan can read the rest of it in
// id order from the primary key, through every finished job.
var pickWalkSQL = `
WITH w AS (
    SELECT id, host, priority, created_at, ord, passes FROM (
        SELECT id, host, priority, created_at, row_number() OVER (ORDER BY priority DESC, id) AS ord,
               run_after <= coalesce($1::timestamptz, now()) AND host NOT IN (SELECT unnest($6::text[])) AS passes
        FROM (
            (SELECT id, host, priority, created_at, run_after FROM jobs
             WHERE state = 'pending' AND priority <= $3 AND priority >= $3 AND id > $4
             ORDER BY priority DESC, id LIMIT $2)
            UNION ALL
            (SELECT id, host, priority, created_at, run_after FROM jobs
             WHERE state = 'pending' AND priority < $3
             ORDER BY priority DESC, id LIMIT $2)
            ORDER BY priority DESC, id
            LIMIT $2
        ) r
    ) raw
    WHERE passes OR ord = $2
    ORDER BY priority DESC, id
    LIMIT $5
), hs AS (
    SELECT DISTINCT host FROM w WHERE passes
), active AS (` + activeByHostSQL("AND host IN (SELECT host FROM hs)") + `
), info AS (` + hostInfoSQL("hs") + `
)
SELECT w.ord, w.passes, w.priority, w.id, w.host, w.created_at, i.active, i.queued, i.has_row, i.last_started,
       coalesce($1::timestamptz, clock_timestamp())
FROM w LEFT JOIN info i ON i.host = w.host AND w.passes
ORDER BY w.ord`

// headWalk is a round's walk of the pending queue: what it picked, each
// host's budget left, and where its next chunk starts.
type headWalk struct {
	free   int
	policy func(string) HostPolicy
	p      pick
	budget map[string]int
	spent  []string // hosts whose budget is 0, left out of later chunks
	prio   int32
	id     int64
	read   int
}

// pickFromHead walks the pending queue from its head (pickWalkSQL). ok is
// false when the walk read walkAllowance rows without filling the free
// slots or reaching the end of the queue: jobs past them might have been
// picked, and the caller must scan the hosts.
func (q *Queue) pickFromHead(ctx context.Context, tx pgx.Tx, policy func(string) HostPolicy, free int) (pick, bool, error) {
	w := headWalk{free: free, policy: policy, budget: map[string]int{}, prio: math.MaxInt32}
	allowance := q.walkAllowance(free)
	pass, read := firstWalkChunk(free), firstWalkChunk(free)
	for w.read < allowance {
		done, cut, err := w.chunk(ctx, tx, q.now(), pass, min(read, allowance-w.read))
		if err != nil || done {
			return w.p, done, err
		}
		if cut {
			pass = min(pass*4, maxWalkChunk)
		}
		read = min(read*walkGrowth, maxWalkChunk)
	}
	return pick{}, false, nil
}

// chunk reads up to limit rows of the walk, and takes from the first pass
// of them it is passed on. done is true when the slots are filled or the
// queue has no more rows; cut when pass rows were passed on, before limit
// were read.
func (w *headWalk) chunk(ctx context.Context, tx pgx.Tx, now any, pass, limit int) (done, cut bool, err error) {
	rows, err := tx.Query(ctx, pickWalkSQL, now, limit, w.prio, w.id, pass, w.spent)
	if err != nil {
		return false, false, err
	}
	defer rows.Close()
	var n, ord int
	var passes bool
	for rows.Next() {
		var c candidate
		var host string
		var active, queued *int
		var hasRow *bool
		var last *time.Time
		var clock time.Time
		if err := rows.Scan(&ord, &passes, &w.prio, &c.id, &host, &c.created, &active, &queued, &hasRow, &last, &clock); err != nil {
			return false, false, err
		}
		n++
		w.id = c.id
		if !passes {
			continue // the end of the chunk's read
		}
		budget, known := w.budget[host]
		if !known {
			h := hostState{Host: host, Active: *active, Queued: *queued}
			if last != nil {
				h.LastStarted = *last
			}
			budget = w.p.hostSeen(h, w.policy(host), *hasRow, clock, w.free)
			if budget == 0 {
				w.spent = append(w.spent, host)
			}
		}
		if budget > 0 && len(w.p.cands) < w.free {
			w.p.cands = append(w.p.cands, c)
			budget--
			if budget == 0 {
				w.spent = append(w.spent, host)
			}
		}
		w.budget[host] = budget
	}
	if err := rows.Err(); err != nil {
		return false, false, err
	}
	w.read += ord
	// Fewer rows than pass, the last not the limit-th: the queue ended.
	return len(w.p.cands) == w.free || (n < pass && ord < limit), n == pass, nil
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
), info AS (` + hostInfoSQL("ph") + `
    WHERE ph.host IS NOT NULL
)
SELECT host, active, queued, has_row, last_started, coalesce($1::timestamptz, clock_timestamp())
FROM info`

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
