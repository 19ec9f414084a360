package jobqueue

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// finishJobs enqueues n jobs, has node run them, and finishes them: each
// completed, or failed for good with class when class is not "".
func finishJobs(t *testing.T, q *Queue, node string, n int, class string) []int64 {
	t.Helper()
	ctx := context.Background()
	ids := mustEnqueue(t, q, pageSpecs(n, "finish.example.com")...)
	jobs := assignClaim(t, q, node, n)
	if len(jobs) != n {
		t.Fatalf("claimed %d jobs, want %d", len(jobs), n)
	}
	for _, j := range jobs {
		if class == "" {
			if _, err := q.Complete(ctx, j.ID, node, Result{Title: "ok"}); err != nil {
				t.Fatalf("complete %d: %v", j.ID, err)
			}
			continue
		}
		st, err := q.Fail(ctx, j.ID, node, "boom "+class, class, false)
		if err != nil || st != StateFailed {
			t.Fatalf("fail %d: state %s, %v", j.ID, st, err)
		}
	}
	return ids
}

func TestRecordSamples(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, pool := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	const interval = 5 * time.Second
	mustRegister(t, q, "n1", 6)
	mustRegister(t, q, "n2", 6)
	mustRegister(t, q, "gone", 6)
	if _, err := q.SetNodeState(ctx, "gone", NodeExited); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Heartbeat(ctx, "n1", NodeLoad{ChromePSSBytes: 300 << 20, BusySessions: 2, CPUPercent: 40}); err != nil {
		t.Fatal(err)
	}

	// Three jobs finish before the first sample; it counts the finishes of
	// the one interval before it, less the settle time.
	finishJobs(t, q, "n1", 2, "")
	finishJobs(t, q, "n1", 1, "timeout")
	clock.Advance(SampleSettle)
	mustEnqueue(t, q, pageSpecs(4, "live.example.com")...)
	assignClaim(t, q, "n2", 1) // 1 processing on n2
	if _, err := q.Assign(ctx, "n2", 2); err != nil {
		t.Fatal(err)
	} // 2 queued on n2, 1 pending

	rep, err := q.RecordSamples(ctx, interval)
	if err != nil {
		t.Fatal(err)
	}
	want := QueuePoint{At: clock.Now(), Pending: 1, Queued: 2, Processing: 1, Completed: 2, Failed: 1}
	if !rep.Queue.At.Equal(want.At) {
		t.Fatalf("sample at %v, want %v", rep.Queue.At, want.At)
	}
	rep.Queue.At = want.At
	if rep.Skipped || rep.Queue != want || rep.Nodes != 2 {
		t.Fatalf("first sample: %+v, want queue %+v and 2 nodes", rep, want)
	}

	// A second recorder half an interval later writes nothing.
	clock.Advance(interval/2 - time.Millisecond)
	if rep, err := q.RecordSamples(ctx, interval); err != nil || !rep.Skipped {
		t.Fatalf("early sample: %+v, %v; want skipped", rep, err)
	}

	// A finish at the instant of a sample is counted by the next one, not
	// lost and not counted twice.
	clock.Advance(interval/2 + time.Millisecond)
	finishJobs(t, q, "n1", 1, "")
	rep, err = q.RecordSamples(ctx, interval)
	if err != nil || rep.Queue.Completed != 0 {
		t.Fatalf("second sample: %+v, %v; want 0 completed", rep, err)
	}
	clock.Advance(interval)
	rep, err = q.RecordSamples(ctx, interval)
	if err != nil || rep.Queue.Completed != 1 || rep.Queue.Failed != 0 {
		t.Fatalf("third sample: %+v, %v; want 1 completed", rep, err)
	}

	// After a long gap (no recorder for a minute), finishes are counted
	// over two intervals at most.
	finishJobs(t, q, "n1", 2, "") // finished 60 s before the next sample
	clock.Advance(50 * time.Second)
	finishJobs(t, q, "n1", 3, "net") // 10 s before it: inside two intervals
	clock.Advance(10 * time.Second)
	rep, err = q.RecordSamples(ctx, interval)
	if err != nil || rep.Queue.Completed != 0 || rep.Queue.Failed != 3 {
		t.Fatalf("sample after a gap: %+v, %v; want 3 failed only", rep, err)
	}

	if n := countRows(t, pool, "SELECT count(*) FROM queue_samples"); n != 4 {
		t.Fatalf("%d queue samples, want 4", n)
	}
	// n1 and n2 in each of the four samples; the exited node never.
	if n := countRows(t, pool, "SELECT count(*) FROM node_samples WHERE node_id IN ('n1', 'n2')"); n != 8 {
		t.Fatalf("%d node samples of n1 and n2, want 8", n)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM node_samples WHERE node_id = 'gone'"); n != 0 {
		t.Fatalf("%d samples of the exited node", n)
	}
	if _, err := q.RecordSamples(ctx, 0); err == nil {
		t.Fatal("interval 0 accepted")
	}
}

func TestSamplesBuckets(t *testing.T) {
	t.Parallel()
	clock := newFakeClock() // 03:04:05 UTC
	q, _ := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	mustRegister(t, q, "a", 6)
	mustRegister(t, q, "b", 6)
	start := clock.Now()
	// Chrome PSS of node a climbs and drops at a recycle: the sawtooth.
	pss := []int64{100, 200, 300, 50, 150, 250}
	for i, p := range pss {
		if _, err := q.Heartbeat(ctx, "a", NodeLoad{ChromePSSBytes: p << 20, BusySessions: i % 3, CPUPercent: float64(10 * i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Heartbeat(ctx, "b", NodeLoad{ChromePSSBytes: 10 << 20}); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			finishJobs(t, q, "b", 2, "")
		}
		if rep, err := q.RecordSamples(ctx, 5*time.Second); err != nil || rep.Skipped {
			t.Fatalf("sample %d: %+v, %v", i, rep, err)
		}
		clock.Advance(5 * time.Second)
	}

	// Step 5 s: one bucket per sample.
	qp, np, err := q.Samples(ctx, start, 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(qp) != 6 || len(np) != 12 {
		t.Fatalf("%d queue points and %d node points, want 6 and 12", len(qp), len(np))
	}
	var gotA []int64
	for _, p := range np {
		if p.NodeID == "a" {
			gotA = append(gotA, p.ChromePSSBytes>>20)
		}
	}
	if fmt.Sprint(gotA) != fmt.Sprint(pss) {
		t.Fatalf("node a PSS %v, want %v", gotA, pss)
	}
	// The two jobs finished at sample 2's time are counted by sample 3.
	if qp[3].Completed != 2 || qp[2].Completed != 0 {
		t.Fatalf("completed per sample: %+v", qp)
	}

	// Step 10 s: buckets of two samples aligned to the epoch (03:04:00,
	// :10, :20, :30); node buckets hold the peaks, queue buckets the sums.
	qp, np, err = q.Samples(ctx, start, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantTimes := []string{"03:04:00", "03:04:10", "03:04:20", "03:04:30"}
	wantPeak := []int64{100, 300, 150, 250}
	if len(qp) != 4 {
		t.Fatalf("%d queue buckets, want 4: %+v", len(qp), qp)
	}
	var completed int64
	for i, p := range qp {
		if got := p.At.UTC().Format("15:04:05"); got != wantTimes[i] {
			t.Errorf("bucket %d at %s, want %s", i, got, wantTimes[i])
		}
		completed += p.Completed
	}
	if completed != 2 {
		t.Errorf("completed over all buckets %d, want 2", completed)
	}
	i := 0
	for _, p := range np {
		if p.NodeID != "a" {
			continue
		}
		if p.ChromePSSBytes>>20 != wantPeak[i] {
			t.Errorf("bucket %d of node a: peak PSS %d MiB, want %d", i, p.ChromePSSBytes>>20, wantPeak[i])
		}
		i++
	}

	// since is rounded down to its bucket; later samples only.
	qp, _, err = q.Samples(ctx, start.Add(17*time.Second), 10*time.Second, nil)
	if err != nil || len(qp) != 2 || qp[0].At.UTC().Format("15:04:05") != "03:04:20" {
		t.Fatalf("samples since +17s: %+v, %v", qp, err)
	}
}

func TestPruneSamples(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, pool := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	for i := range 3 {
		mustRegister(t, q, fmt.Sprintf("n%d", i), 6)
	}
	for range 10 {
		if _, err := q.RecordSamples(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	cutoff := clock.Now().Add(-3 * time.Second) // keeps the last 3 samples
	// Batches of 4 rows: several statements per table.
	n, err := q.PruneSamples(ctx, cutoff, 4)
	if err != nil {
		t.Fatal(err)
	}
	if n != 7+7*3 {
		t.Fatalf("pruned %d rows, want %d", n, 7+7*3)
	}
	if got := countRows(t, pool, "SELECT count(*) FROM queue_samples"); got != 3 {
		t.Fatalf("%d queue samples left, want 3", got)
	}
	if got := countRows(t, pool, "SELECT count(*) FROM node_samples WHERE at < $1", cutoff); got != 0 {
		t.Fatalf("%d node samples older than the cutoff left", got)
	}
	if n, err := q.PruneSamples(ctx, cutoff, 0); err != nil || n != 0 {
		t.Fatalf("second prune: %d, %v", n, err)
	}
}

func TestFailureGroups(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	mustRegister(t, q, "n1", 50)
	old := finishJobs(t, q, "n1", 2, "timeout") // before the window
	clock.Advance(time.Hour)
	since := clock.Now()
	finishJobs(t, q, "n1", 1, "")
	finishJobs(t, q, "n1", 2, "http_5xx")
	clock.Advance(time.Second)
	timeouts := finishJobs(t, q, "n1", 4, "timeout")
	clock.Advance(time.Second)
	// A failure recorded without a class.
	id := mustEnqueue(t, q, Spec{URL: "http://x.example.com/"})[0]
	assignClaim(t, q, "n1", 1)
	if _, err := q.Fail(ctx, id, "n1", "mystery", "", false); err != nil {
		t.Fatal(err)
	}

	groups, err := q.FailureGroups(ctx, since, 3)
	if err != nil {
		t.Fatal(err)
	}
	type summary struct {
		class string
		count int64
		ids   int
	}
	var got []summary
	for _, g := range groups {
		got = append(got, summary{g.ErrorClass, g.Count, len(g.Recent)})
	}
	want := []summary{{"timeout", 4, 3}, {"http_5xx", 2, 2}, {Unclassified, 1, 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	// Newest first: the last three timeouts, ids descending at the same time.
	g := groups[0]
	if g.Recent[0].ID != timeouts[3] || g.Recent[2].ID != timeouts[1] {
		t.Fatalf("recent timeouts %+v, want ids %v..%v", g.Recent, timeouts[3], timeouts[1])
	}
	for _, fj := range g.Recent {
		if fj.ID == old[0] || fj.ID == old[1] {
			t.Fatalf("a failure before since is listed: %+v", fj)
		}
		if fj.Error != "boom timeout" || fj.NodeID != "n1" || fj.Attempts != 1 || fj.URL == "" {
			t.Fatalf("failed job fields: %+v", fj)
		}
	}
	if !g.LastAt.Equal(since.Add(time.Second)) {
		t.Fatalf("last timeout at %v, want %v", g.LastAt, since.Add(time.Second))
	}
	if groups[2].Recent[0].Error != "mystery" {
		t.Fatalf("unclassified failure: %+v", groups[2])
	}
}

func TestFinishedSince(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	mustRegister(t, q, "n1", 50)
	finishJobs(t, q, "n1", 5, "") // before the window
	clock.Advance(time.Minute)
	since := clock.Now()
	finishJobs(t, q, "n1", 3, "")
	finishJobs(t, q, "n1", 2, "timeout")
	finishJobs(t, q, "n1", 1, "net")
	ids := mustEnqueue(t, q, pageSpecs(2, "c.example.com")...)
	if _, err := q.Cancel(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	got, err := q.FinishedSince(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	want := []FinishedCount{
		{StateCanceled, "", 2},
		{StateCompleted, "", 3},
		{StateFailed, "net", 1},
		{StateFailed, "timeout", 2},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("finished since: %v, want %v", got, want)
	}
}

// TestFailureGroupsCapsTheClasses: one class over MaxFailureGroups is left
// out, the smallest (by name among equals), never the largest.
func TestFailureGroupsCapsTheClasses(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 10)
	since := time.Now().Add(-time.Minute)
	finishJobs(t, q, "n1", 2, "zz_largest")
	for i := range MaxFailureGroups {
		finishJobs(t, q, "n1", 1, fmt.Sprintf("class_%02d", i))
	}
	groups, err := q.FailureGroups(ctx, since, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != MaxFailureGroups {
		t.Fatalf("%d groups, want %d", len(groups), MaxFailureGroups)
	}
	if groups[0].ErrorClass != "zz_largest" || groups[0].Count != 2 {
		t.Fatalf("first group %s (%d), want zz_largest (2)", groups[0].ErrorClass, groups[0].Count)
	}
	if last := groups[len(groups)-1].ErrorClass; last != fmt.Sprintf("class_%02d", MaxFailureGroups-2) {
		t.Fatalf("last group %s", last)
	}
}
