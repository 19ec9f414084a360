package jobqueue

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

// checkCounts compares every maintained count with a scan of jobs: the
// counts by state that Stats reports, the finishes of every minute by state
// and class, and what FinishedSince and FailureGroups answer for a window
// starting mid-minute. It checks before and after a compaction, which must
// change no sum.
func checkCounts(t *testing.T, q *Queue, pool *pgxpool.Pool, step string) {
	t.Helper()
	ctx := context.Background()
	scan := func(sql string) map[string]int64 {
		t.Helper()
		rows, err := pool.Query(ctx, sql)
		if err != nil {
			t.Fatalf("%s: %s: %v", step, sql, err)
		}
		m := map[string]int64{}
		for rows.Next() {
			var k string
			var n int64
			if err := rows.Scan(&k, &n); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			m[k] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return m
	}
	const minutesSQL = `SELECT minute::text || ' ' || state || ' ' || class, sum(n)::bigint FROM finished_minutes
        GROUP BY minute, state, class HAVING sum(n) <> 0`
	const minutesScanSQL = `SELECT finished_minute(finished_at)::text || ' ' || state || ' ' || finished_class(state, error_class), count(*)
        FROM jobs WHERE state IN ('completed', 'failed', 'canceled') GROUP BY 1`
	var since time.Time
	if err := pool.QueryRow(ctx, `SELECT coalesce(min(finished_at), now()) + interval '30 seconds' FROM jobs`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	for _, compact := range []bool{false, true} {
		if compact {
			if _, err := q.CompactCounts(ctx); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			if n := countRows(t, pool, `SELECT count(*) FROM (SELECT state FROM job_counts GROUP BY state HAVING count(*) > 1) x`); n != 0 {
				t.Fatalf("%s: %d states with several rows after a compaction", step, n)
			}
		}
		want := scan(`SELECT state, count(*) FROM jobs GROUP BY state`)
		st, err := q.Stats(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		for _, s := range States() {
			if st.Jobs[s] != want[string(s)] {
				t.Errorf("%s (compacted %v): Stats %s = %d, COUNT(*) = %d", step, compact, s, st.Jobs[s], want[string(s)])
			}
		}
		var ready int64
		var oldest *time.Time
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE run_after <= coalesce($1::timestamptz, now())), min(created_at)
            FROM jobs WHERE state = 'pending'`, q.now()).Scan(&ready, &oldest); err != nil {
			t.Fatal(err)
		}
		if st.Ready != ready || (st.OldestPending == nil) != (oldest == nil) ||
			(oldest != nil && !st.OldestPending.Equal(*oldest)) {
			t.Errorf("%s (compacted %v): Stats ready %d, oldest pending %v; scan %d, %v", step, compact, st.Ready, st.OldestPending, ready, oldest)
		}
		if got, want := scan(minutesSQL), scan(minutesScanSQL); !maps.Equal(got, want) {
			t.Errorf("%s (compacted %v): finished per minute %v, scan %v", step, compact, got, want)
		}
		fin, err := q.FinishedSince(ctx, since)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, f := range fin {
			got[string(f.State)+" "+f.ErrorClass] = f.Count
		}
		wantFin := scan(fmt.Sprintf(`SELECT state || ' ' || CASE WHEN state = 'failed' THEN coalesce(nullif(error_class, ''), '%s') ELSE '' END, count(*)
            FROM jobs WHERE state IN ('completed', 'failed', 'canceled') AND finished_at >= '%s' GROUP BY 1`,
			Unclassified, WindowStart(since).Format(time.RFC3339Nano)))
		if !maps.Equal(got, wantFin) {
			t.Errorf("%s (compacted %v): FinishedSince %v, scan %v", step, compact, got, wantFin)
		}
		groups, err := q.FailureGroups(ctx, since, 100)
		if err != nil {
			t.Fatal(err)
		}
		gotFail := map[string]int64{}
		for _, g := range groups {
			gotFail[g.ErrorClass] = g.Count
			if int64(len(g.Recent)) != g.Count || !g.LastAt.Equal(g.Recent[0].FinishedAt) {
				t.Errorf("%s: group %s lists %d jobs for %d failures, last at %v", step, g.ErrorClass, len(g.Recent), g.Count, g.LastAt)
			}
		}
		wantFail := scan(fmt.Sprintf(`SELECT coalesce(nullif(error_class, ''), '%s'), count(*)
            FROM jobs WHERE state = 'failed' AND finished_at >= '%s' GROUP BY 1`, Unclassified, WindowStart(since).Format(time.RFC3339Nano)))
		if !maps.Equal(gotFail, wantFail) {
			t.Errorf("%s (compacted %v): FailureGroups %v, scan %v", step, compact, gotFail, wantFail)
		}
	}
}

// TestCountsStayExact walks jobs through every change of state, with the
// clock moving across minutes, and compares the maintained counts with
// COUNT(*) after each.
func TestCountsStayExact(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	// The clock moves minutes between the steps; n1's queued jobs wait for
	// the release below, not for the claim timeout.
	q, pool := newTestQueue(t, Config{Now: clock.Now, Lease: 10 * time.Second, ClaimTimeout: time.Hour})
	ctx := context.Background()
	checkCounts(t, q, pool, "empty")

	ids := mustEnqueue(t, q, pageSpecs(30, "c.test")...)
	checkCounts(t, q, pool, "enqueue")
	mustRegister(t, q, "n1", 12)
	mustRegister(t, q, "n2", 12)
	if _, err := q.Assign(ctx, "n1", 12); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Assign(ctx, "n2", 4); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, q, pool, "assign")
	j1, err := q.Claim(ctx, "n1", 10)
	if err != nil || len(j1) != 10 {
		t.Fatalf("claim = %d, %v", len(j1), err)
	}
	j2, err := q.Claim(ctx, "n2", 2)
	if err != nil || len(j2) != 2 {
		t.Fatalf("claim = %d, %v", len(j2), err)
	}
	checkCounts(t, q, pool, "claim")
	if _, err := q.Heartbeat(ctx, "n1", NodeLoad{}); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, q, pool, "renew leases")

	for i, j := range j1[:4] {
		clock.Advance(20 * time.Second)
		if _, err := q.Complete(ctx, j.ID, "n1", Result{Title: "ok"}); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			checkCounts(t, q, pool, "complete")
		}
	}
	out, err := q.CompleteMany(ctx, []Completion{{JobID: j1[4].ID, NodeID: "n1"}, {JobID: j1[5].ID, NodeID: "n1"}})
	if err != nil || len(out) != 2 {
		t.Fatalf("complete many = %v, %v", out, err)
	}
	checkCounts(t, q, pool, "complete many")
	clock.Advance(time.Minute)
	for i, class := range []string{"http", "http", "", "timeout"} {
		if _, err := q.Fail(ctx, j1[6+i].ID, "n1", "boom", class, false); err != nil {
			t.Fatal(err)
		}
		clock.Advance(15 * time.Second)
	}
	if st, err := q.Fail(ctx, j2[0].ID, "n2", "flaky", "net", true); err != nil || st != StatePending {
		t.Fatalf("retriable fail = %v, %v", st, err)
	}
	checkCounts(t, q, pool, "fail")

	// n2's other job outlives its lease; n1 holds only queued jobs now.
	clock.Advance(30 * time.Second)
	if _, err := q.Heartbeat(ctx, "n1", NodeLoad{}); err != nil {
		t.Fatal(err)
	}
	if rep, err := q.RescueLost(ctx, time.Hour); err != nil || rep.Retried != 1 {
		t.Fatalf("rescue = %+v, %v", rep, err)
	}
	checkCounts(t, q, pool, "lease expiry")
	// n2 finishes the job after all, now that it is pending again.
	if _, err := q.Complete(ctx, j2[1].ID, "n2", Result{Title: "late"}); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, q, pool, "late completion")

	if n, err := q.Retry(ctx, j1[6].ID, j1[8].ID); err != nil || n != 2 {
		t.Fatalf("retry = %d, %v", n, err)
	}
	checkCounts(t, q, pool, "retry")
	if n, err := q.Cancel(ctx, ids[25], ids[26], j1[0].ID); err != nil || n != 2 {
		t.Fatalf("cancel = %d, %v", n, err)
	}
	if n, err := currentIncarnation(t, q, "n1").Release(ctx); err != nil || n == 0 {
		t.Fatalf("release = %d, %v", n, err)
	}
	checkCounts(t, q, pool, "cancel and release")

	// A round, a node that registers again (its queued jobs released, its
	// running one charged), then nodes lost with queued and running jobs.
	n3 := registerIncarnation(t, q, "n3", 4)
	if _, err := assignRound(ctx, q, 100); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, q, pool, "round")
	if j3, err := q.Claim(ctx, "n3", 1); err != nil || len(j3) != 1 {
		t.Fatalf("claim = %d, %v", len(j3), err)
	}
	if _, rec, err := q.Register(ctx, NodeInfo{ID: "n3", Capacity: 4, Replaces: n3.N}); err != nil || rec.Released == 0 || rec.Retried != 1 {
		t.Fatalf("register again: reclaimed %+v, %v", rec, err)
	}
	checkCounts(t, q, pool, "register again")
	if _, err := assignRound(ctx, q, 100); err != nil {
		t.Fatal(err)
	}
	if j3, err := q.Claim(ctx, "n3", 1); err != nil || len(j3) != 1 {
		t.Fatalf("claim = %d, %v", len(j3), err)
	}
	clock.Advance(2 * time.Minute)
	if rep, err := q.RescueLost(ctx, time.Minute); err != nil || rep.Released == 0 || rep.Retried+rep.Failed == 0 {
		t.Fatalf("rescue = %+v, %v", rep, err)
	}
	checkCounts(t, q, pool, "nodes lost")
	if n, err := q.Cancel(ctx, ids[27]); err != nil || n != 1 {
		t.Fatalf("cancel = %d, %v", n, err)
	}

	// Purge what finished more than a minute ago, then the rest.
	clock.Advance(time.Minute)
	if _, err := q.DeleteFinishedBefore(ctx, clock.Now().Add(-90*time.Second), 2, nil); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, q, pool, "partial purge")
	if n, err := q.DeleteFinishedBefore(ctx, clock.Now().Add(time.Hour), 3, nil); err != nil || n == 0 {
		t.Fatalf("purge = %d, %v", n, err)
	}
	checkCounts(t, q, pool, "purge")
	if n := countRows(t, pool, `SELECT count(*) FROM finished_minutes`); n != 0 {
		// After the purge and compaction nothing finished is left to count.
		t.Errorf("finished_minutes holds %d rows after everything finished was purged", n)
	}
}

// TestCountsMigrationCountsExistingJobs drops the counts to what a database
// that predates them had, then runs the migration's counting step again,
// as an upgrade does.
func TestCountsMigrationCountsExistingJobs(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	mustEnqueue(t, q, pageSpecs(5, "m.test")...)
	mustRegister(t, q, "n1", 3)
	for _, j := range assignClaim(t, q, "n1", 3) {
		if _, err := q.Fail(ctx, j.ID, "n1", "x", "http", false); err != nil {
			t.Fatal(err)
		}
	}
	// By name without its number, which changes when migrations merge.
	names, err := fs.Glob(migrationFiles, "migrations/*_job_counts.sql")
	if err != nil || len(names) != 1 {
		t.Fatalf("the counts migration: %v, %v", names, err)
	}
	body, err := migrationFiles.ReadFile(names[0])
	if err != nil {
		t.Fatal(err)
	}
	folded, err := fs.Glob(migrationFiles, "migrations/*_fold_only_new_minutes.sql")
	if err != nil || len(folded) != 1 {
		t.Fatalf("the folding migration: %v, %v", folded, err)
	}
	foldBody, err := migrationFiles.ReadFile(folded[0])
	if err != nil {
		t.Fatal(err)
	}
	// Undo the migration, then apply it again, as on an upgraded database
	// that already has jobs.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, sql := range []string{
			`DROP TABLE job_counts, finished_minutes`,
			`DROP FUNCTION jobs_count_deltas, jobs_count_truncate CASCADE`,
			`DROP INDEX jobs_failed_class_idx`,
			`DROP FUNCTION finished_minute, finished_class`,
			string(body),
			string(foldBody),
		} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("%.60s: %w", sql, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, q, pool, "after the migration on existing jobs")
}

// TestCompactionRewritesOnlyNewMinutes: a compaction rewrites the minutes
// that got delta rows since the last one, not the retained history (a busy
// week is 30,000 rows, compacted every few seconds).
func TestCompactionRewritesOnlyNewMinutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool := newTestQueue(t, Config{})
	if _, err := pool.Exec(ctx, `
        INSERT INTO finished_minutes (minute, state, class, n)
        SELECT m, s.state, s.class, 1
        FROM generate_series(timestamptz '2030-01-01', timestamptz '2030-01-02' - interval '1 minute', interval '1 minute') m
        CROSS JOIN (VALUES ('completed', ''), ('failed', 'http'), ('failed', 'timeout')) s(state, class)`); err != nil {
		t.Fatal(err)
	}
	if n, err := q.CompactCounts(ctx); err != nil || n != 3*1440 {
		t.Fatalf("first compaction folded %d rows, %v; want every minute (%d)", n, err, 3*1440)
	}
	if n, err := q.CompactCounts(ctx); err != nil || n != 0 {
		t.Fatalf("a compaction with nothing new folded %d rows, %v; want 0", n, err)
	}
	// Two deltas of one minute: that minute only is rewritten, summed.
	if _, err := pool.Exec(ctx, `INSERT INTO finished_minutes (minute, state, class, n)
        VALUES ('2030-01-01 12:00+00', 'completed', '', 2), ('2030-01-01 12:00+00', 'completed', '', -1)`); err != nil {
		t.Fatal(err)
	}
	if n, err := q.CompactCounts(ctx); err != nil || n != 1 {
		t.Fatalf("compaction of one minute's deltas folded %d rows, %v; want that minute's", n, err)
	}
	var sum, rows int64
	if err := pool.QueryRow(ctx, `SELECT sum(n), count(*) FROM finished_minutes
        WHERE minute = '2030-01-01 12:00+00' AND state = 'completed'`).Scan(&sum, &rows); err != nil {
		t.Fatal(err)
	}
	if sum != 2 || rows != 1 {
		t.Fatalf("the minute holds %d in %d rows, want 2 in 1", sum, rows)
	}
}

// Stats' last-minute throughput is the last whole minute's, from its
// per-minute rows: finishes of the current minute wait for it to end, and
// older ones have left.
func TestStatsLastMinuteIsTheLastWholeMinute(t *testing.T) {
	t.Parallel()
	clock := newFakeClock() // 5 s into a minute
	q, _ := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	mustRegister(t, q, "n1", 50)
	finishJobs(t, q, "n1", 2, "")
	finishJobs(t, q, "n1", 1, "timeout")
	clock.Advance(time.Minute)
	finishJobs(t, q, "n1", 3, "")
	finishJobs(t, q, "n1", 2, "net")
	for _, step := range []struct {
		advance           time.Duration
		completed, failed int64
	}{
		{0, 2, 1},                    // the minute before: its 2 and 1
		{54 * time.Second, 2, 1},     // 59 s in, still the same minute
		{time.Second, 3, 2},          // the next minute began: the 3 and 2
		{time.Minute, 0, 0},          // nothing finished in the minute before
		{-3 * time.Minute / 2, 2, 1}, // back in time: the clock's own last minute
	} {
		clock.Advance(step.advance)
		s, err := q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.CompletedLastMinute != step.completed || s.FailedLastMinute != step.failed {
			t.Errorf("at %s: last minute %d completed, %d failed; want %d, %d",
				clock.Now().Format(time.TimeOnly), s.CompletedLastMinute, s.FailedLastMinute, step.completed, step.failed)
		}
	}
}

// The windows of finishes read no finished job: however many jobs finished
// in a window, Stats and FinishedSince read their minutes' rows, and
// FailureGroups reads only the jobs it lists.
func TestWindowsReadNoFinishedJobs(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	_, shared := newTestQueue(t, Config{Now: clock.Now})
	q, pool := singleConnQueue(t, shared, Config{Now: clock.Now})
	ctx := context.Background()
	mustRegister(t, q, "n1", 500)
	finishJobs(t, q, "n1", 300, "")
	finishJobs(t, q, "n1", 200, "timeout")
	clock.Advance(time.Minute)
	// Mid-minute, 3 s before the finishes: a window that counted its
	// part-minute from jobs would read all 500.
	since := clock.Now().Add(-time.Minute - 3*time.Second)
	before := jobsRowsRead(t, pool)
	s, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.CompletedLastMinute != 300 || s.FailedLastMinute != 200 {
		t.Fatalf("last minute: %d completed, %d failed; want 300, 200", s.CompletedLastMinute, s.FailedLastMinute)
	}
	fin, err := q.FinishedSince(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	if len(fin) != 2 || fin[0].Count != 300 || fin[1].Count != 200 {
		t.Fatalf("finished since: %v", fin)
	}
	if read := jobsRowsRead(t, pool) - before; read > 0 {
		t.Errorf("Stats and FinishedSince read %d rows of jobs for 500 finishes", read)
	}
	before = jobsRowsRead(t, pool)
	groups, err := q.FailureGroups(ctx, since, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Count != 200 || len(groups[0].Recent) != 5 {
		t.Fatalf("failure groups: %+v", groups)
	}
	if read := jobsRowsRead(t, pool) - before; read > 5 {
		t.Errorf("FailureGroups listing 5 of 200 failures read %d rows of jobs", read)
	}
}

// TestCountsReadNotTheDeltasFolded: a job_counts table that deltas once
// filled keeps its pages after they are folded (until a VACUUM FULL), and
// a read of the counts does not scan them (migration 016).
func TestCountsReadNotTheDeltasFolded(t *testing.T) {
	t.Parallel()
	_, shared := newTestQueue(t, Config{})
	q, pool := singleConnQueue(t, shared, Config{})
	ctx := context.Background()
	// The block counters count every backend's reads: an autovacuum of the
	// table's 200,000 dead deltas, started on statistics from before the
	// VACUUM below and ending while Stats ran, once added about 2,000.
	if _, err := pool.Exec(ctx, "ALTER TABLE job_counts SET (autovacuum_enabled = off)"); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, pageSpecs(3, "counts.test")...)
	// 100,000 deltas per state that cancel out, as a busy queue's statements leave
	// them between two folds; then folded and vacuumed.
	if _, err := pool.Exec(ctx, `INSERT INTO job_counts (state, n)
        SELECT s, (i % 2) * 2 - 1 FROM generate_series(1, 100000) i, unnest(ARRAY['pending', 'completed']) s`); err != nil {
		t.Fatal(err)
	}
	if _, err := q.CompactCounts(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) job_counts"); err != nil {
		t.Fatal(err)
	}
	var pages int64
	if err := pool.QueryRow(ctx, "SELECT pg_relation_size('job_counts') / current_setting('block_size')::bigint").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if pages < 100 {
		t.Fatalf("job_counts has %d pages after the deltas; the test needs a table they grew", pages)
	}
	before := tableStat(t, pool, "job_counts", statAllBlocks)
	s, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Jobs[StatePending] != 3 || s.Jobs[StateCompleted] != 0 {
		t.Fatalf("counts %v; want 3 pending, none completed", s.Jobs)
	}
	if read := tableStat(t, pool, "job_counts", statAllBlocks) - before; read > 20 {
		t.Errorf("Stats read %d blocks of job_counts (%d pages) for its rows", read, pages)
	}
}

// finishedMinutesQueue is a queue on one connection whose node n1 failed
// failed jobs of class, counted and folded into finished_minutes, with no
// autovacuum of finished_minutes: the tests that use it count its reads
// (every backend's) and choose when it is analyzed and vacuumed.
func finishedMinutesQueue(t *testing.T, failed int, class string) (*fakeClock, *Queue, *pgxpool.Pool) {
	t.Helper()
	clock := newFakeClock()
	_, shared := newTestQueue(t, Config{Now: clock.Now})
	q, pool := singleConnQueue(t, shared, Config{Now: clock.Now})
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "ALTER TABLE finished_minutes SET (autovacuum_enabled = off)"); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, q, "n1", 10)
	finishJobs(t, q, "n1", failed, class)
	if _, err := q.CompactCounts(ctx); err != nil {
		t.Fatal(err)
	}
	return clock, q, pool
}

// TestWindowReadsPlanAfresh: a connection that read the windows while
// finished_minutes was small kept a generic plan for them that scans the
// table whole, and used it after the table had grown, until the next
// ANALYZE. The window reads plan at every call, index scans only
// (readSettings), and read only the window's rows at any size.
func TestWindowReadsPlanAfresh(t *testing.T) {
	t.Parallel()
	clock, q, pool := finishedMinutesQueue(t, 4, "timeout")
	ctx := context.Background()
	// No ANALYZE but the test's own.
	if _, err := pool.Exec(ctx, "ANALYZE finished_minutes"); err != nil {
		t.Fatal(err)
	}
	since := clock.Now().Add(-time.Hour)
	read := func() {
		t.Helper()
		groups, err := q.FailureGroups(ctx, since, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(groups) != 1 || groups[0].Count != 4 {
			t.Fatalf("failure groups: %+v", groups)
		}
		fin, err := q.FinishedSince(ctx, since)
		if err != nil {
			t.Fatal(err)
		}
		if len(fin) != 1 || fin[0].Count != 4 {
			t.Fatalf("finished since: %+v", fin)
		}
	}
	// PostgreSQL weighs a generic plan after five custom ones.
	for range 10 {
		read()
	}
	// Thirty days of history, a row per minute for each of two states.
	const history = 2 * 30 * 24 * 60
	if _, err := pool.Exec(ctx, `INSERT INTO finished_minutes (minute, state, class, n, folded)
        SELECT $1::timestamptz - (interval '1 minute' * (i / 2 + 61)), CASE WHEN i % 2 = 0 THEN 'completed' ELSE 'failed' END,
               CASE WHEN i % 2 = 0 THEN '' ELSE 'net' END, 3, true
        FROM generate_series(0, $2::int - 1) i`, clock.Now(), history); err != nil {
		t.Fatal(err)
	}
	before := tableStat(t, pool, "finished_minutes", statRows)
	read()
	if n := tableStat(t, pool, "finished_minutes", statRows) - before; n > 10 {
		t.Errorf("the window reads read %d rows of finished_minutes for one row in their window, beside %d older", n, history)
	}
}

// TestWindowReadsReadTheIndexAlone: the window reads of finished_minutes
// (Stats' last minute, FinishedSince, FailureGroups' counts) find what they
// need in its index (migration 017), not in heap pages that, beside a
// history, hold a window's rows scattered. On a vacuumed table each reads
// one block of it: the visibility map's.
func TestWindowReadsReadTheIndexAlone(t *testing.T) {
	t.Parallel()
	clock, q, pool := finishedMinutesQueue(t, 2, "net")
	ctx := context.Background()
	clock.Advance(time.Minute)
	// A busy hour's rows, over pages enough that fetching them shows.
	const rows = 3000
	if _, err := pool.Exec(ctx, `INSERT INTO finished_minutes (minute, state, class, n, folded)
        SELECT finished_minute($1::timestamptz) - interval '1 minute' * (i % 50), 'completed', '', 1, true
        FROM generate_series(1, $2::int) i`, clock.Now(), rows); err != nil {
		t.Fatal(err)
	}
	// The visibility map an index-only read relies on, as autovacuum
	// leaves it. The test server commits asynchronously, and VACUUM marks
	// a page all-visible only once its rows' commits are flushed: a
	// synchronous commit that writes WAL (a transaction that only takes an
	// id commits asynchronously whatever the setting) flushes them all.
	if _, err := pool.Exec(ctx, "BEGIN; SET LOCAL synchronous_commit = on; SELECT pg_logical_emit_message(true, 'browserfarm-test', ''); COMMIT"); err != nil {
		t.Fatal(err)
	}
	// A snapshot older than the rows (another test's transaction on the
	// shared server) keeps VACUUM from marking their pages all-visible:
	// vacuum again until every page is (CI saw 2,433 heap blocks read once).
	// Polled, not looped: the snapshot lasts as long as that test's
	// transaction, which a tight loop of vacuums would only compete with.
	testutil.Eventually(t, time.Minute, "VACUUM marking every page of finished_minutes all-visible", func() bool {
		if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) finished_minutes"); err != nil {
			t.Fatal(err)
		}
		var visible bool
		if err := pool.QueryRow(ctx, "SELECT relallvisible >= relpages FROM pg_class WHERE oid = 'finished_minutes'::regclass").Scan(&visible); err != nil {
			t.Fatal(err)
		}
		return visible
	})
	since := clock.Now().Add(-time.Hour)
	before := tableStat(t, pool, "finished_minutes", statHeapBlocks)
	s, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(rows / 50); s.CompletedLastMinute != want || s.FailedLastMinute != 2 {
		t.Fatalf("last minute: %d completed, %d failed; want %d, 2", s.CompletedLastMinute, s.FailedLastMinute, want)
	}
	if fin, err := q.FinishedSince(ctx, since); err != nil || len(fin) != 2 || fin[0].Count != rows {
		t.Fatalf("finished since: %+v, %v", fin, err)
	}
	if groups, err := q.FailureGroups(ctx, since, 5); err != nil || len(groups) != 1 || groups[0].Count != 2 {
		t.Fatalf("failure groups: %+v, %v", groups, err)
	}
	if read := tableStat(t, pool, "finished_minutes", statHeapBlocks) - before; read > 3 {
		t.Errorf("the window reads read %d blocks of finished_minutes' heap for %d rows", read, rows+1)
	}
}
