package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/pgtest"
)

func TestMigrateConcurrentlyAndTwice(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- Migrate(ctx, pool) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	if err := Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	applied, expected, err := SchemaVersion(ctx, pool)
	if err != nil || applied != expected || expected < 1 {
		t.Fatalf("schema version applied %d expected %d err %v", applied, expected, err)
	}
	// The advisory lock is released: another session can take it at once.
	var got bool
	if err := pool.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", migrateLockKey).Scan(&got); err != nil || !got {
		t.Fatalf("migrate lock still held (got %v, err %v)", got, err)
	}
}

func TestEnqueueRejectsBadInputAtomically(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	tests := []struct {
		name string
		bad  Spec
		want string // the exact error message; the bad spec is job 2 of the batch
	}{
		{"file scheme", Spec{URL: "file:///etc/passwd"}, `job 2: field "url": scheme "file" is not allowed (use http or https)`},
		{"chrome scheme", Spec{URL: "chrome://settings/"}, `job 2: field "url": scheme "chrome" is not allowed (use http or https)`},
		{"javascript scheme", Spec{URL: "javascript:alert(1)"}, `job 2: field "url": scheme "javascript" is not allowed (use http or https)`},
		{"data scheme", Spec{URL: "data:text/html,hi"}, `job 2: field "url": scheme "data" is not allowed (use http or https)`},
		{"malformed url", Spec{URL: "http://[::1/"}, `job 2: field "url": malformed URL: missing ']' in host`},
		{"url with spaces", Spec{URL: "http://exa mple.com/"}, `job 2: field "url": contains whitespace or a control character`},
		{"relative url", Spec{URL: "www.example.com/a"}, `job 2: field "url": "www.example.com/a" is not an absolute URL (it needs http:// or https://)`},
		{"missing host", Spec{URL: "https:///nohost"}, `job 2: field "url": missing host in "https:///nohost"`},
		{"max_attempts too high", Spec{URL: "http://example.com/", MaxAttempts: 21}, `job 2: field "max_attempts": 21 is out of range: use 1..20, or 0 for the default (3)`},
		{"max_attempts negative", Spec{URL: "http://example.com/", MaxAttempts: -2}, `job 2: field "max_attempts": -2 is out of range: use 1..20, or 0 for the default (3)`},
		{"timeout too long", Spec{URL: "http://example.com/", TimeoutMS: 600_000}, `job 2: field "timeout_ms": 600000 is out of range: use 1000..300000 milliseconds, or 0 for the default (30000)`},
		{"unknown block", Spec{URL: "http://example.com/", Block: []string{"script"}}, `job 2: field "block[0]": unknown resource type "script" (allowed: image, font, media, stylesheet)`},
		{"bad action", Spec{URL: "http://example.com/", Actions: []Action{{Type: "click"}}}, `job 2: field "actions[0].selector": is required for click`},
		{"bad proxy", Spec{URL: "http://example.com/", Proxy: "ftp://p:21"}, `job 2: field "proxy": proxy scheme "ftp" is not allowed (use http, https or socks5)`},
		{"bad follow", Spec{URL: "http://example.com/", Follow: &Follow{Selector: "a", MaxDepth: 50}}, `job 2: field "follow.max_depth": 50 is out of range: use 1..10 links deep, or 0 for the default (1)`},
		{"oversized spec", Spec{URL: "http://example.com/", Extract: strings.Repeat("x", MaxExtractLength),
			Headers: func() map[string]string {
				h := map[string]string{}
				for i := range 40 {
					h[fmt.Sprintf("X-Pad-%d", i)] = strings.Repeat("p", 390)
				}
				return h
			}(),
			Actions: slices.Repeat([]Action{{Type: "wait", Selector: strings.Repeat("s", 1000)}}, 20)},
			`job 2: field "(spec)": the spec is `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			batch := []Spec{{URL: "http://example.com/1"}, {URL: "https://example.com/2"}, tt.bad, {URL: "http://example.com/4"}}
			batchID, ids, err := q.Enqueue(ctx, batch)
			if err == nil {
				t.Fatalf("Enqueue accepted the batch (%s, %v)", batchID, ids)
			}
			if strings.HasSuffix(tt.want, "the spec is ") {
				if !strings.HasPrefix(err.Error(), tt.want) || !strings.HasSuffix(err.Error(), "bytes as JSON; at most 65536 are allowed") {
					t.Fatalf("error %q, want %q… bytes as JSON; at most 65536 are allowed", err, tt.want)
				}
			} else if err.Error() != tt.want {
				t.Fatalf("error\n got %q\nwant %q", err, tt.want)
			}
			var se *SpecError
			if !errors.As(err, &se) || se.Index != 2 {
				t.Fatalf("error %v is not a *SpecError for job 2", err)
			}
			if n := countRows(t, pool, "SELECT count(*) FROM jobs"); n != 0 {
				t.Fatalf("%d jobs inserted from a rejected batch", n)
			}
		})
	}
	if _, _, err := q.Enqueue(ctx, nil); err == nil {
		t.Fatal("an empty batch was accepted")
	}
	if ids := mustEnqueue(t, q, Spec{URL: "http://example.com/ok"}); len(ids) != 1 {
		t.Fatal("a valid batch after rejected ones was not inserted")
	}
}

func TestEnqueueStoresJobs(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	batchID, ids, err := q.Enqueue(ctx, []Spec{
		{URL: "https://Shop.Example.COM:443/a?b=1", Priority: 7, MaxAttempts: 5},
		{URL: "http://127.0.0.1:8080/x", Follow: &Follow{Selector: "a", MaxDepth: 2}},
		{URL: "http://example.org/", TimeoutMS: 5000},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ValidateBatchID(batchID) != nil || len(ids) != 3 || !(ids[0] < ids[1] && ids[1] < ids[2]) {
		t.Fatalf("batch %q ids %v", batchID, ids)
	}
	j := mustGet(t, q, ids[0])
	if j.State != StatePending || j.BatchID != batchID || j.Host != "shop.example.com" || j.Priority != 7 ||
		j.MaxAttempts != 5 || j.Attempts != 0 || j.CrawlID != j.ID || j.Depth != 0 || j.ParentID != 0 || j.NodeID != "" {
		t.Fatalf("stored job %+v", j)
	}
	if j.Spec.TimeoutMS != DefaultTimeoutMS || j.Spec.MaxAttempts != 5 || j.Spec.URL != "https://Shop.Example.COM:443/a?b=1" {
		t.Fatalf("stored spec %+v", j.Spec)
	}
	if !j.CreatedAt.Equal(clock.Now()) || !j.RunAfter.Equal(clock.Now()) || j.QueuedAt != nil || j.FinishedAt != nil {
		t.Fatalf("timestamps: created %v run_after %v queued %v", j.CreatedAt, j.RunAfter, j.QueuedAt)
	}
	j2 := mustGet(t, q, ids[1])
	if j2.Host != "127.0.0.1:8080" || j2.Spec.Follow == nil || j2.Spec.Follow.MaxLinks != DefaultMaxLinks || j2.MaxAttempts != DefaultAttempts {
		t.Fatalf("second job %+v", j2)
	}
	if _, err := q.Get(ctx, 1<<40); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := q.GetResult(ctx, ids[0]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetResult(pending) = %v, want ErrNotFound", err)
	}
}

func TestClaimAndLease(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, pool := newTestQueue(t, Config{Now: clock.Now, Lease: 45 * time.Second})
	ctx := context.Background()
	mustRegister(t, q, "n1", 4)
	ids := mustEnqueue(t, q, Spec{URL: "http://a.test/x", Extract: "document.title", Block: []string{"image"}},
		Spec{URL: "http://a.test/y"})
	if _, err := q.Assign(ctx, "n1", 4); err != nil {
		t.Fatal(err)
	}
	jobs, err := q.Claim(ctx, "n1", 1)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim = %v, %v", jobs, err)
	}
	j := jobs[0]
	if j.ID != ids[0] || j.State != StateProcessing || j.Attempts != 1 || j.NodeID != "n1" ||
		j.Spec.Extract != "document.title" || !slices.Equal(j.Spec.Block, []string{"image"}) ||
		j.StartedAt == nil || !j.StartedAt.Equal(clock.Now()) ||
		j.LeaseExpiresAt == nil || !j.LeaseExpiresAt.Equal(clock.Now().Add(45*time.Second)) {
		t.Fatalf("claimed job %+v", j)
	}
	clock.Advance(10 * time.Second)
	// The heartbeat renews the leases of the jobs processing on the node.
	if _, err := q.Heartbeat(ctx, "n1", NodeLoad{}); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM jobs WHERE node_id = 'n1' AND lease_expires_at = $1", clock.Now().Add(45*time.Second)); n != 1 {
		t.Fatalf("heartbeat renewed %d leases, want 1", n)
	}
	if j := mustGet(t, q, ids[0]); !j.LeaseExpiresAt.Equal(clock.Now().Add(45 * time.Second)) {
		t.Fatalf("lease not renewed: %v", j.LeaseExpiresAt)
	}
	if more, _ := q.Claim(ctx, "n1", 5); len(more) != 1 || more[0].ID != ids[1] {
		t.Fatalf("second claim %v", more)
	}
	if more, _ := q.Claim(ctx, "n1", 5); len(more) != 0 {
		t.Fatalf("claimed %v with nothing queued", more)
	}
	if more, err := q.Claim(ctx, "n1", 0); err != nil || more != nil {
		t.Fatalf("Claim(0) = %v, %v", more, err)
	}
}

func TestCompleteOnceAndResultRoundTrip(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	mustRegister(t, q, "n2", 6)
	ids := mustEnqueue(t, q, pageSpecs(3, "r.test")...)
	jobs := assignClaim(t, q, "n1", 3)
	if len(jobs) != 3 {
		t.Fatalf("claimed %d", len(jobs))
	}
	res := Result{
		FinalURL: "http://r.test/page/0?redirected=1", Status: 200, Title: "Products \x00 ünïcode",
		Data:          json.RawMessage(`{"items":[1,2,3],"name":"x\u0000y","cut":"\ud83d","pair":"\ud83d\ude00"}`),
		HTML:          "<html><body>hi</body></html>",
		Screenshot:    []byte{0x89, 'P', 'N', 'G', 0, 1, 2},
		ConsoleErrors: []string{"TypeError: x is undefined"},
		Timings:       Timings{NavigationMS: 120, WaitMS: 30, ActionsMS: 5, ExtractMS: 2, TotalMS: 160},
		Links:         []string{"http://r.test/next"},
	}
	if n, err := q.Complete(ctx, ids[0], "n1", res); err != nil || n != 0 {
		t.Fatalf("Complete = %d, %v", n, err)
	}
	got, err := q.GetResult(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if got.JobID != ids[0] || got.NodeID != "n1" || got.FinalURL != res.FinalURL || got.Status != 200 ||
		got.Title != "Products  ünïcode" || got.HTML != res.HTML || string(got.Screenshot) != string(res.Screenshot) ||
		!slices.Equal(got.ConsoleErrors, res.ConsoleErrors) || got.Timings != res.Timings || !slices.Equal(got.Links, res.Links) {
		t.Fatalf("result round trip:\n got %+v\nsent %+v", got, res)
	}
	var data map[string]any
	if err := json.Unmarshal(got.Data, &data); err != nil || data["name"] != "x\ufffdy" || data["cut"] != "\ufffd" || data["pair"] != "😀" {
		t.Fatalf("data %s (%v)", got.Data, err)
	}

	// The same job completed again — a job that ran twice — changes nothing.
	_, err = q.Complete(ctx, ids[0], "n2", Result{Title: "second run"})
	var fe *FinishedError
	if !errors.Is(err, ErrAlreadyFinished) || !errors.As(err, &fe) || fe.State != StateCompleted || fe.JobID != ids[0] {
		t.Fatalf("second Complete = %v, want a FinishedError (completed)", err)
	}
	if again, _ := q.GetResult(ctx, ids[0]); again.Title != got.Title || again.NodeID != "n1" {
		t.Fatalf("the second completion changed the result: %+v", again)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM results WHERE job_id = $1", ids[0]); n != 1 {
		t.Fatalf("%d result rows", n)
	}
	j := mustGet(t, q, ids[0])
	if j.State != StateCompleted || j.FinishedAt == nil || j.LeaseExpiresAt != nil || j.NodeID != "n1" {
		t.Fatalf("completed job %+v", j)
	}

	// A result from another node for a job still live is accepted.
	if _, err := q.Complete(ctx, ids[1], "n2", Result{Status: 204}); err != nil {
		t.Fatalf("completion from another node: %v", err)
	}
	if j := mustGet(t, q, ids[1]); j.NodeID != "n2" || j.State != StateCompleted {
		t.Fatalf("job completed by n2: %+v", j)
	}
	if _, err := q.Complete(ctx, 1<<40, "n1", Result{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Complete(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := q.Complete(ctx, ids[2], "n1", Result{Data: json.RawMessage(`{bad`)}); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("Complete(bad data) = %v", err)
	}
	if j := mustGet(t, q, ids[2]); j.State != StateProcessing {
		t.Fatalf("a rejected result changed the job: %+v", j)
	}
}

// TestCompleteManyRetriedAfterALostAnswer: a node whose CompleteMany
// committed but whose connection dropped before the answer retries it; the
// job is completed, with the result that names the retry's own blobs. That
// is success — an ErrAlreadyFinished would make the node delete the blobs
// the stored result points at. Another attempt's blobs, or none, still find
// the job finished.
func TestCompleteManyRetriedAfterALostAnswer(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	ids := mustEnqueue(t, q, pageSpecs(1, "lost.test")...)
	assignClaim(t, q, "n1", 1)
	blobs := func(attempt int) []BlobRef {
		return []BlobRef{{Kind: BlobHTML, Key: fmt.Sprintf("jobs/%d/%d-ab.html", ids[0], attempt), Size: 8, SHA256: "ab"}}
	}
	first := Completion{JobID: ids[0], NodeID: "n1", Result: Result{Status: 200, Blobs: blobs(1)}}
	if out, err := q.CompleteMany(ctx, []Completion{first}); err != nil || out[0].Err != nil {
		t.Fatalf("first CompleteMany = %v, %v", out, err)
	}
	if out, err := q.CompleteMany(ctx, []Completion{first}); err != nil || out[0].Err != nil {
		t.Errorf("the retried completion: %v, %v; want success", out, err)
	}
	for i, c := range []Completion{{JobID: ids[0], NodeID: "n1", Result: Result{Status: 200, Blobs: blobs(2)}},
		{JobID: ids[0], NodeID: "n1", Result: Result{Status: 200}}} {
		out, err := q.CompleteMany(ctx, []Completion{c})
		var fe *FinishedError
		if err != nil || !errors.As(out[0].Err, &fe) || fe.State != StateCompleted {
			t.Errorf("completion %d of another attempt: %v, %v; want a FinishedError (completed)", i, out, err)
		}
	}
	if r, _ := q.GetResult(ctx, ids[0]); !reflect.DeepEqual(r.Blobs, blobs(1)) {
		t.Fatalf("stored blobs %+v, want the first attempt's", r.Blobs)
	}
}

func TestCompleteManyOutcomes(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	ids := mustEnqueue(t, q, pageSpecs(5, "m.test")...)
	assignClaim(t, q, "n1", 5)
	if _, err := q.Complete(ctx, ids[3], "n1", Result{}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Cancel(ctx, ids[4]); err != nil {
		t.Fatal(err)
	}
	out, err := q.CompleteMany(ctx, []Completion{
		{JobID: ids[0], NodeID: "n1", Result: Result{Title: "a"}},
		{JobID: ids[1], NodeID: "n1", Result: Result{Title: "b"}},
		{JobID: ids[0], NodeID: "n1", Result: Result{Title: "a again"}},
		{JobID: ids[3], NodeID: "n1"},
		{JobID: ids[4], NodeID: "n1"},
		{JobID: 1 << 40, NodeID: "n1"},
		{JobID: ids[2], NodeID: "bad node id"},
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(i int, want error, wantState State) {
		t.Helper()
		got := out[i].Err
		if want == nil {
			if got != nil {
				t.Errorf("outcome %d: %v, want success", i, got)
			}
			return
		}
		if !errors.Is(got, want) {
			t.Errorf("outcome %d: %v, want %v", i, got, want)
		}
		var fe *FinishedError
		if wantState != "" && (!errors.As(got, &fe) || fe.State != wantState) {
			t.Errorf("outcome %d: %v, want state %s", i, got, wantState)
		}
	}
	check(0, nil, "")
	check(1, nil, "")
	check(2, ErrAlreadyFinished, StateCompleted)
	check(3, ErrAlreadyFinished, StateCompleted)
	check(4, ErrAlreadyFinished, StateCanceled)
	check(5, ErrNotFound, "")
	check(6, ErrBadNodeID, "")
	if r, _ := q.GetResult(ctx, ids[0]); r.Title != "a" {
		t.Fatalf("job listed twice kept %q, want the first entry", r.Title)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM results"); n != 3 {
		t.Fatalf("%d results, want 3", n)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM results WHERE job_id = $1", ids[4]); n != 0 {
		t.Fatal("a canceled job got a result")
	}
	if out, err := q.CompleteMany(ctx, nil); err != nil || len(out) != 0 {
		t.Fatalf("CompleteMany(nil) = %v, %v", out, err)
	}
}

func TestFailRetriesWithBackoffThenFails(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	base, maxDelay := 10*time.Second, time.Hour
	q, _ := newTestQueue(t, Config{Now: clock.Now, Rand: func() float64 { return 0.5 }, BackoffBase: base, BackoffMax: maxDelay})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	mustRegister(t, q, "n2", 6)
	ids := mustEnqueue(t, q, Spec{URL: "http://f.test/a", MaxAttempts: 2}, Spec{URL: "http://f.test/b"})
	assignClaim(t, q, "n1", 1)

	if _, err := q.Fail(ctx, ids[0], "n2", "boom", "render", true); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Fail from another node = %v, want ErrNotHeld", err)
	}
	st, err := q.Fail(ctx, ids[0], "n1", "net::ERR_CONNECTION_RESET\x00", "network", true)
	if err != nil || st != StatePending {
		t.Fatalf("first Fail = %v, %v", st, err)
	}
	j := mustGet(t, q, ids[0])
	wantRun := clock.Now().Add(Backoff(1, base, maxDelay, 0.5))
	if j.State != StatePending || j.NodeID != "" || j.Attempts != 1 || j.LastError != "net::ERR_CONNECTION_RESET" ||
		j.ErrorClass != "network" || !j.RunAfter.Equal(wantRun) || j.FinishedAt != nil || j.LeaseExpiresAt != nil {
		t.Fatalf("after a retriable failure: %+v (want run_after %v)", j, wantRun)
	}
	if _, err := q.Fail(ctx, ids[0], "n1", "again", "x", true); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Fail of a pending job = %v, want ErrNotHeld", err)
	}

	clock.Advance(time.Minute)
	jobs := assignClaim(t, q, "n1", 1)
	if len(jobs) != 1 || jobs[0].ID != ids[0] || jobs[0].Attempts != 2 {
		t.Fatalf("second attempt claimed %+v", jobs)
	}
	if st, err := q.Fail(ctx, ids[0], "n1", "still failing", "network", true); err != nil || st != StateFailed {
		t.Fatalf("last-attempt Fail = %v, %v; want failed", st, err)
	}
	if j := mustGet(t, q, ids[0]); j.State != StateFailed || j.FinishedAt == nil || j.LastError != "still failing" || j.NodeID != "n1" {
		t.Fatalf("failed job %+v", j)
	}
	if _, err := q.Fail(ctx, ids[0], "n1", "x", "x", true); !errors.Is(err, ErrAlreadyFinished) {
		t.Fatalf("Fail of a failed job = %v, want ErrAlreadyFinished", err)
	}

	// A permanent error fails at once, whatever attempts remain.
	assignClaim(t, q, "n1", 1)
	if st, err := q.Fail(ctx, ids[1], "n1", "404", "http_status", false); err != nil || st != StateFailed {
		t.Fatalf("non-retriable Fail = %v, %v", st, err)
	}
	if _, err := q.Fail(ctx, 1<<40, "n1", "x", "x", true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Fail(unknown) = %v, want ErrNotFound", err)
	}
}

// TestGiveBackChargesNoAttempt: a job whose attempt ended through the
// node's fault goes back to pending with its attempt given back, also on
// its last attempt, keeping the error; from another node, or once the job
// is pending, it is refused as Fail is.
func TestGiveBackChargesNoAttempt(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	base, maxDelay := 10*time.Second, time.Hour
	q, _ := newTestQueue(t, Config{Now: clock.Now, Rand: func() float64 { return 0.5 }, BackoffBase: base, BackoffMax: maxDelay})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	mustRegister(t, q, "n2", 6)
	ids := mustEnqueue(t, q, Spec{URL: "http://give.test/a", MaxAttempts: 1})
	assignClaim(t, q, "n1", 1)
	if _, err := currentIncarnation(t, q, "n2").GiveBack(ctx, ids[0], "x", "x"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("GiveBack from another node = %v, want ErrNotHeld", err)
	}
	for round := range 2 {
		st, err := currentIncarnation(t, q, "n1").GiveBack(ctx, ids[0], "storing the result: bucket gone", "blob_store")
		if err != nil || st != StatePending {
			t.Fatalf("round %d: GiveBack on the last attempt = %v, %v; want pending", round, st, err)
		}
		j := mustGet(t, q, ids[0])
		wantRun := clock.Now().Add(Backoff(1, base, maxDelay, 0.5))
		if j.Attempts != 0 || j.NodeID != "" || j.LastError != "storing the result: bucket gone" || j.ErrorClass != "blob_store" ||
			!j.RunAfter.Equal(wantRun) || j.FinishedAt != nil || j.LeaseExpiresAt != nil {
			t.Fatalf("round %d: after GiveBack: %+v (want run_after %v)", round, j, wantRun)
		}
		if _, err := currentIncarnation(t, q, "n1").GiveBack(ctx, ids[0], "x", "x"); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("GiveBack of a pending job = %v, want ErrNotHeld", err)
		}
		clock.Advance(time.Minute)
		if jobs := assignClaim(t, q, "n1", 1); len(jobs) != 1 || jobs[0].Attempts != 1 {
			t.Fatalf("round %d: claimed again %+v, want attempt 1", round, jobs)
		}
	}
	// The job's own fault on its last attempt fails it.
	if st, err := currentIncarnation(t, q, "n1").Fail(ctx, ids[0], "boom", "render", true); err != nil || st != StateFailed {
		t.Fatalf("Fail on the last attempt = %v, %v; want failed", st, err)
	}
}

func TestReleaseReturnsQueuedFree(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 3)
	ids := mustEnqueue(t, q, pageSpecs(3, "rel.test")...)
	if _, err := q.Assign(ctx, "n1", 3); err != nil {
		t.Fatal(err)
	}
	running, err := q.Claim(ctx, "n1", 1)
	if err != nil || len(running) != 1 {
		t.Fatal(running, err)
	}
	n, err := currentIncarnation(t, q, "n1").Release(ctx)
	if err != nil || n != 2 {
		t.Fatalf("Release = %d, %v; want 2", n, err)
	}
	for _, id := range ids {
		j := mustGet(t, q, id)
		if id == running[0].ID {
			if j.State != StateProcessing || j.NodeID != "n1" {
				t.Fatalf("the running job was released: %+v", j)
			}
			continue
		}
		if j.State != StatePending || j.NodeID != "" || j.Attempts != 0 || j.QueuedAt != nil {
			t.Fatalf("released job %+v", j)
		}
	}
	if n, _ := currentIncarnation(t, q, "n1").Release(ctx); n != 0 {
		t.Fatalf("second Release = %d", n)
	}
}
