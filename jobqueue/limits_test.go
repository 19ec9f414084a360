package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

func TestResultLimitsCheck(t *testing.T) {
	if err := DefaultResultLimits().Check(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		name  string
		l     ResultLimits
		field string
	}{
		{"zero data", ResultLimits{ScreenshotBytes: 1, ConsoleErrors: 1}, "data_bytes"},
		{"huge screenshot", ResultLimits{DataBytes: 1, ScreenshotBytes: 1 << 30, ConsoleErrors: 1}, "screenshot_bytes"},
		{"negative console", ResultLimits{DataBytes: 1, ScreenshotBytes: 1, ConsoleErrors: -1}, "console_errors"},
		{"too many console errors", ResultLimits{DataBytes: 1, ScreenshotBytes: 1, ConsoleErrors: 1 << 20}, "console_errors"},
	} {
		if err := tc.l.Check(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Check = %v, want an error naming %s", tc.name, err, tc.field)
		}
	}
}

// TestCompleteManyIsolatesRefusedResults: a result over the queue's cap, and
// one the database itself refuses, fail alone with a permanent class; the
// rest of the batch is written in the same call, and the refused jobs stay
// with their node to be failed.
func TestCompleteManyIsolatesRefusedResults(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{ResultLimits: ResultLimits{DataBytes: 1 << 10, ScreenshotBytes: 100}})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	ids := mustEnqueue(t, q, pageSpecs(5, "big.test")...)
	assignClaim(t, q, "n1", 5)
	big := json.RawMessage(`"` + strings.Repeat("x", 2<<10) + `"`)
	// A number beyond numeric's range is valid JSON to Go but not to jsonb
	// (22003): the database refuses the statement, and with it, before
	// this change, the batch. (A lone overflow was the example until the
	// queue stored it as U+FFFD: jsonbSafe.)
	overflow := json.RawMessage(`{"s":1e1000000}`)
	out, err := q.CompleteMany(ctx, []Completion{
		{JobID: ids[0], NodeID: "n1", Result: Result{Title: "ok 0", Data: json.RawMessage(`{"n":1}`)}},
		{JobID: ids[1], NodeID: "n1", Result: Result{Data: big}},
		{JobID: ids[2], NodeID: "n1", Result: Result{Data: overflow}},
		{JobID: ids[3], NodeID: "n1", Result: Result{Screenshot: make([]byte, 101)}},
		{JobID: ids[4], NodeID: "n1", Result: Result{Title: "ok 4"}},
	})
	if err != nil {
		t.Fatalf("CompleteMany: %v", err)
	}
	wantClass := func(i int, class, mention string) {
		t.Helper()
		var re *ResultError
		if !errors.As(out[i].Err, &re) || re.Class != class || !errors.Is(out[i].Err, ErrResultRefused) {
			t.Fatalf("outcome %d: %v, want a ResultError of class %s", i, out[i].Err, class)
		}
		if !strings.Contains(out[i].Err.Error(), mention) {
			t.Errorf("outcome %d: %q does not mention %q", i, out[i].Err, mention)
		}
	}
	wantClass(1, ClassResultTooLarge, "data_bytes")
	wantClass(2, ClassResultInvalid, "database refused")
	wantClass(3, ClassResultTooLarge, "screenshot_bytes")
	for _, i := range []int{0, 4} {
		if out[i].Err != nil {
			t.Errorf("outcome %d: %v, want success", i, out[i].Err)
		}
		if j := mustGet(t, q, ids[i]); j.State != StateCompleted {
			t.Errorf("job %d is %s, want completed", i, j.State)
		}
	}
	for _, i := range []int{1, 2, 3} {
		if j := mustGet(t, q, ids[i]); j.State != StateProcessing {
			t.Errorf("refused job %d is %s, want still processing on its node", i, j.State)
		}
	}
	if n := countRows(t, pool, "SELECT count(*) FROM results"); n != 2 {
		t.Fatalf("%d results, want 2", n)
	}

	// The same refusal for a batch of one.
	out, err = q.CompleteMany(ctx, []Completion{{JobID: ids[2], NodeID: "n1", Result: Result{Data: overflow}}})
	if err != nil {
		t.Fatal(err)
	}
	wantClass(0, ClassResultInvalid, "database refused")
}

// TestHeartbeatRenewsOnlyLiveJobs: a node renews the leases of the jobs it
// still works on; one it gave up on runs out and is taken back.
func TestHeartbeatRenewsOnlyLiveJobs(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now, Lease: 30 * time.Second})
	ctx := context.Background()
	node, _, err := q.Register(ctx, NodeInfo{ID: "n1", Hostname: "test", Capacity: 6})
	if err != nil {
		t.Fatal(err)
	}
	in := q.Incarnation(node)
	ids := mustEnqueue(t, q, pageSpecs(3, "live.test")...)
	assignClaim(t, q, "n1", 3)
	for range 4 {
		clock.Advance(20 * time.Second)
		if _, gone, err := in.HeartbeatLive(ctx, NodeLoad{}, []int64{ids[0], ids[2]}); err != nil || len(gone) != 0 {
			t.Fatal(gone, err)
		}
	}
	if _, err := q.RescueLost(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	for i, want := range []State{StateProcessing, StatePending, StateProcessing} {
		if j := mustGet(t, q, ids[i]); j.State != want {
			t.Errorf("job %d is %s, want %s", i, j.State, want)
		}
	}
	// An empty list renews nothing; nil renews everything the node holds.
	clock.Advance(20 * time.Second)
	if _, _, err := in.HeartbeatLive(ctx, NodeLoad{}, []int64{}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(20 * time.Second)
	if _, err := q.RescueLost(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if j := mustGet(t, q, ids[0]); j.State != StatePending {
		t.Errorf("job 0 is %s after an empty renewal, want pending", j.State)
	}
}

// TestHeartbeatTellsJobsGone: a heartbeat names the live jobs no longer
// processing on the node — canceled, finished, or taken back while it was
// declared lost — so that it stops rendering them.
func TestHeartbeatTellsJobsGone(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now, Lease: 30 * time.Second})
	ctx := context.Background()
	in := registerIncarnation(t, q, "n1", 6)
	ids := mustEnqueue(t, q, pageSpecs(4, "gone.test")...)
	assignClaim(t, q, "n1", 4)
	if _, err := q.Cancel(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Fail(ctx, ids[3], "x", "render", false); err != nil {
		t.Fatal(err)
	}
	_, gone, err := in.HeartbeatLive(ctx, NodeLoad{}, ids)
	if err != nil || !slices.Equal(gone, []int64{ids[1], ids[3]}) {
		t.Fatalf("gone %v, %v; want the canceled and the failed job %v", gone, err, []int64{ids[1], ids[3]})
	}
	// Declared lost: its jobs went back; the heartbeat that revives the
	// node names them all.
	clock.Advance(time.Minute)
	if rep, err := q.RescueLost(ctx, 15*time.Second); err != nil || len(rep.LostNodes) != 1 {
		t.Fatalf("rescue %+v, %v", rep, err)
	}
	_, gone, err = in.HeartbeatLive(ctx, NodeLoad{}, []int64{ids[0], ids[2]})
	if err != nil || !slices.Equal(gone, []int64{ids[0], ids[2]}) {
		t.Fatalf("after being declared lost: gone %v, %v; want both live jobs", gone, err)
	}
}

// TestFailKeeping: a job that fails for good keeps what the page answered,
// in the statement that fails it; one that goes back to pending keeps
// nothing; a late failure from another node changes nothing; a second
// final failure (after Retry) replaces the answer, and a completion
// replaces that.
func TestFailKeeping(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	mustRegister(t, q, "n2", 6)
	n1 := q.Incarnation(Node{ID: "n1"})
	ids := mustEnqueue(t, q, Spec{URL: "http://fr.test/a", MaxAttempts: 1}, Spec{URL: "http://fr.test/b", MaxAttempts: 2})
	assignClaim(t, q, "n1", 2)
	if st, err := n1.FailKeeping(ctx, ids[1], "HTTP 500", "http", true, Result{Status: 500}); err != nil || st != StatePending {
		t.Fatalf("FailKeeping with attempts left = %s, %v; want pending", st, err)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM results"); n != 0 {
		t.Fatalf("a job going back to pending got a result row")
	}
	if st, err := n1.FailKeeping(ctx, ids[0], "HTTP 404", "http", false, Result{Status: 404, FinalURL: "http://fr.test/a",
		Title: "Not Found", ConsoleErrors: []string{"e"}, Data: json.RawMessage(`{"x":1}`)}); err != nil || st != StateFailed {
		t.Fatalf("FailKeeping = %s, %v; want failed", st, err)
	}
	// A late call from a node that does not hold it changes nothing.
	if _, err := q.Incarnation(Node{ID: "n2"}).FailKeeping(ctx, ids[0], "late", "http", false,
		Result{Status: 503, Title: "late"}); !errors.Is(err, ErrAlreadyFinished) {
		t.Fatalf("a late failure from another node: %v, want ErrAlreadyFinished", err)
	}
	r, err := q.GetResult(ctx, ids[0])
	if err != nil || r.Status != 404 || r.Title != "Not Found" || r.FinalURL != "http://fr.test/a" ||
		!slices.Equal(r.ConsoleErrors, []string{"e"}) || r.Data != nil {
		t.Fatalf("failed job's result %+v, %v; want status 404 with its console errors, without data", r, err)
	}
	if _, err := q.Retry(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	assignClaim(t, q, "n1", 6)
	if st, err := n1.FailKeeping(ctx, ids[0], "HTTP 410", "http", false, Result{Status: 410, Title: "Gone"}); err != nil || st != StateFailed {
		t.Fatalf("FailKeeping after Retry = %s, %v; want failed", st, err)
	}
	if r, _ := q.GetResult(ctx, ids[0]); r.Status != 410 || r.Title != "Gone" || len(r.ConsoleErrors) != 0 {
		t.Fatalf("result after the second failure %+v, want status 410's", r)
	}
	if _, err := q.Retry(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Assign(ctx, "n1", 6); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Claim(ctx, "n1", 6); err != nil {
		t.Fatal(err)
	}
	// Its HTML in a blob store: the completion's pointer must replace the
	// failed result's none, or the page would be out of reach and its blob
	// out of retention's sight.
	blob := BlobRef{Kind: BlobHTML, Key: "k/1", Size: 3, SHA256: strings.Repeat("ab", 32)}
	if _, err := q.Complete(ctx, ids[0], "n1", Result{Status: 200, Title: "OK", Blobs: []BlobRef{blob}}); err != nil {
		t.Fatalf("completing a retried job that kept a failed result: %v", err)
	}
	if r, _ := q.GetResult(ctx, ids[0]); r.Status != 200 || r.Title != "OK" || len(r.Blobs) != 1 || r.Blobs[0] != blob {
		t.Fatalf("result after completion %+v, want status 200 with its blob", r)
	}
}

// TestHeartbeatAndCompletionTakeLocksInOneOrder replays the deadlock a
// recycle brought: a completion holds its job's row and then bumps the
// node's lifetime counters, while the node's heartbeat — carrying a Chrome
// recycle, so it bumps the same counters — renews that job's lease. The
// heartbeat must wait for the job without holding the counters.
func TestHeartbeatAndCompletionTakeLocksInOneOrder(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	node, _, err := q.Register(ctx, NodeInfo{ID: "n1", Hostname: "test", Capacity: 6})
	if err != nil {
		t.Fatal(err)
	}
	in := q.Incarnation(node)
	ids := mustEnqueue(t, q, pageSpecs(1, "order.test")...)
	assignClaim(t, q, "n1", 1)

	// The completion: its job locked first.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT id FROM jobs WHERE id = $1 FOR UPDATE", ids[0]); err != nil {
		t.Fatal(err)
	}
	hb := make(chan error, 1)
	go func() {
		_, err := in.Heartbeat(ctx, NodeLoad{ChromeRecycles: 1})
		hb <- err
	}()
	testutil.Eventually(t, time.Minute, "the heartbeat waiting for the job's lock", func() bool {
		return countRows(t, pool, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%lease_expires_at%'`) == 1
	})
	// Then the completion's counter bump: with the heartbeat holding the
	// counters row this is a deadlock, and PostgreSQL aborts one side.
	if _, err := tx.Exec(ctx, "UPDATE node_counters SET jobs_completed = jobs_completed + 1 WHERE node_id = $1", "n1"); err != nil {
		t.Fatalf("the completion's counter bump: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-hb; err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if n := countRows(t, pool, "SELECT chrome_recycles FROM node_counters WHERE node_id = 'n1'"); n != 1 {
		t.Errorf("node counters: %d chrome recycles, want 1", n)
	}
}

// TestGetResultSummary: the summary has everything but the HTML and the
// screenshot, and their sizes, kept in the database or in a blob store.
func TestGetResultSummary(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	ids := mustEnqueue(t, q, Spec{URL: "http://sum.test/a"}, Spec{URL: "http://sum.test/b"})
	assignClaim(t, q, "n1", 2)
	if _, err := q.Complete(ctx, ids[0], "n1", Result{Status: 200, Title: "A", HTML: "<p>hello</p>", Screenshot: []byte{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	blobs := []BlobRef{{Kind: BlobHTML, Key: "h", Size: 1234, SHA256: strings.Repeat("ab", 32)},
		{Kind: BlobScreenshot, Key: "s", Size: 56789, SHA256: strings.Repeat("cd", 32)}}
	if _, err := q.Complete(ctx, ids[1], "n1", Result{Status: 200, Title: "B", Blobs: blobs}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ html, shot int64 }{{12, 3}, {1234, 56789}} {
		s, err := q.GetResultSummary(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if s.HTMLBytes != want.html || s.ScreenshotBytes != want.shot || s.HTML != "" || s.Screenshot != nil || s.Status != 200 {
			t.Errorf("job %d: summary %+v; want %d HTML and %d screenshot bytes, neither read", i, s, want.html, want.shot)
		}
	}
	if _, err := q.GetResultSummary(ctx, 1<<40); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetResultSummary of no job = %v, want ErrNotFound", err)
	}
}

// TestHTMLTruncatedIsKept: a result whose HTML the node cut says so wherever
// it is read — the result, its summary, an export — and a failed attempt's
// saved answer, which keeps no HTML, does not.
func TestHTMLTruncatedIsKept(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	ids := mustEnqueue(t, q, Spec{URL: "http://cut.test/a"}, Spec{URL: "http://cut.test/b"})
	assignClaim(t, q, "n1", 2)
	if _, err := q.Complete(ctx, ids[0], "n1", Result{Status: 200, HTML: "<p>cut", HTMLTruncated: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Complete(ctx, ids[1], "n1", Result{Status: 200, HTML: "<p>whole</p>"}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		r, err := q.GetResult(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		s, err := q.GetResultSummary(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if r.HTMLTruncated != want || s.HTMLTruncated != want {
			t.Errorf("job %d: html_truncated %v (result) and %v (summary), want %v", i, r.HTMLTruncated, s.HTMLTruncated, want)
		}
	}
	var exported []bool
	err := q.ExportResults(ctx, ExportFilter{}, func(row ExportRow) error {
		exported = append(exported, row.Result.HTMLTruncated)
		return nil
	})
	if err != nil || len(exported) != 2 || !exported[0] || exported[1] {
		t.Errorf("export: html_truncated %v, %v; want [true false]", exported, err)
	}
}
