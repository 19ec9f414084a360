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
		{"bad follow", Spec{URL: "http://example.com/", Follow: &Follow{Selector: "a", MaxDepth: 50}}, `job 2: field "follow.max_depth": 50 is out of range 1..10`},
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
	if checkUUID(batchID) != nil || len(ids) != 3 || !(ids[0] < ids[1] && ids[1] < ids[2]) {
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

func TestAssignOrderCapacityAndNodeState(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 3)
	ids := mustEnqueue(t, q,
		Spec{URL: "http://a.test/0"}, Spec{URL: "http://a.test/1", Priority: 5},
		Spec{URL: "http://a.test/2"}, Spec{URL: "http://a.test/3", Priority: 5},
		Spec{URL: "http://a.test/4", Priority: -1})
	got, err := q.Assign(ctx, "n1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{ids[0], ids[1], ids[3]}; !slices.Equal(got, want) {
		t.Fatalf("assigned %v, want %v (priority 5 first, then the oldest)", got, want)
	}
	for _, id := range got {
		if j := mustGet(t, q, id); j.State != StateQueued || j.NodeID != "n1" || j.QueuedAt == nil {
			t.Fatalf("assigned job %+v", j)
		}
	}
	if more, err := q.Assign(ctx, "n1", 10); err != nil || len(more) != 0 {
		t.Fatalf("a full node got %v (err %v)", more, err)
	}
	// Claiming does not free capacity; completing does.
	jobs, err := q.Claim(ctx, "n1", 1)
	if err != nil || len(jobs) != 1 || jobs[0].ID != ids[1] {
		t.Fatalf("claim = %v, %v", jobs, err)
	}
	if more, _ := q.Assign(ctx, "n1", 10); len(more) != 0 {
		t.Fatalf("node at capacity with a processing job got %v", more)
	}
	if _, err := q.Complete(ctx, jobs[0].ID, "n1", Result{Status: 200}); err != nil {
		t.Fatal(err)
	}
	if more, _ := q.Assign(ctx, "n1", 10); !slices.Equal(more, []int64{ids[2]}) {
		t.Fatalf("after a completion got %v, want [%d]", more, ids[2])
	}

	mustRegister(t, q, "n2", 6)
	if _, err := q.SetNodeState(ctx, "n2", NodeDraining); err != nil {
		t.Fatal(err)
	}
	if got, err := q.Assign(ctx, "n2", 6); err != nil || len(got) != 0 {
		t.Fatalf("a draining node got %v (err %v)", got, err)
	}
	if _, err := q.Assign(ctx, "nobody", 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Assign(unknown node) = %v, want ErrNotFound", err)
	}
	if got, err := q.Assign(ctx, "n1", 0); err != nil || got != nil {
		t.Fatalf("Assign(n=0) = %v, %v", got, err)
	}
}

func TestAssignSkipsBackoff(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now, Rand: func() float64 { return 0 }, BackoffBase: time.Minute})
	ctx := context.Background()
	mustRegister(t, q, "n1", 1)
	ids := mustEnqueue(t, q, Spec{URL: "http://a.test/retry", Priority: 10}, Spec{URL: "http://a.test/other"})
	jobs := assignClaim(t, q, "n1", 1)
	if len(jobs) != 1 || jobs[0].ID != ids[0] {
		t.Fatalf("claimed %v", jobs)
	}
	if st, err := q.Fail(ctx, ids[0], "n1", "timeout", "timeout", true); err != nil || st != StatePending {
		t.Fatalf("Fail = %v, %v", st, err)
	}
	// The higher-priority job waits out its backoff (30 s with this draw):
	// the other one goes first.
	if got, _ := q.Assign(ctx, "n1", 1); !slices.Equal(got, []int64{ids[1]}) {
		t.Fatalf("assigned %v, want the job not in backoff (%d)", got, ids[1])
	}
	jobs = assignClaim(t, q, "n1", 1)
	if _, err := q.Complete(ctx, jobs[0].ID, "n1", Result{}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(29 * time.Second)
	if got, _ := q.Assign(ctx, "n1", 1); len(got) != 0 {
		t.Fatalf("assigned %v before its run_after", got)
	}
	clock.Advance(time.Second)
	if got, _ := q.Assign(ctx, "n1", 1); !slices.Equal(got, []int64{ids[0]}) {
		t.Fatalf("assigned %v after the backoff, want [%d]", got, ids[0])
	}
}

func TestConcurrentAssignNeverExceedsCapacity(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	mustRegister(t, q, "n2", 6)
	mustEnqueue(t, q, pageSpecs(200, "c.test")...)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			var err error
			switch i % 3 {
			case 0:
				_, err = q.Assign(ctx, "n1", 6)
			case 1:
				_, err = q.Assign(ctx, "n2", 4)
			default:
				_, err = assignRound(ctx, q, 100)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range []string{"n1", "n2"} {
		if n := countRows(t, pool, "SELECT count(*) FROM jobs WHERE node_id = $1 AND state IN ('queued', 'processing')", node); n != 6 {
			t.Errorf("node %s holds %d jobs, want exactly its capacity 6", node, n)
		}
	}
}

func TestAssignRoundSpreadsAndRespectsCapacity(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "a", 2)
	mustRegister(t, q, "b", 4)
	mustRegister(t, q, "c", 3)
	mustRegister(t, q, "d", 4)
	if _, err := q.SetNodeState(ctx, "c", NodeDraining); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, pageSpecs(3, "s.test")...)
	// Short supply: three jobs go to three different nodes.
	got, err := assignRound(ctx, q, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(got["a"]) != 1 || len(got["b"]) != 1 || len(got["d"]) != 1 {
		t.Fatalf("short supply assigned %v, want one job each to a, b and d", got)
	}
	mustEnqueue(t, q, pageSpecs(20, "s.test")...)
	got, err = assignRound(ctx, q, 4)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got["a"]) + len(got["b"]) + len(got["d"]); n != 4 || len(got["c"]) != 0 {
		t.Fatalf("limit 4 assigned %v", got)
	}
	if _, err := assignRound(ctx, q, 100); err != nil {
		t.Fatal(err)
	}
	nodes, err := q.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		want := n.Capacity
		if n.ID == "c" {
			want = 0
		}
		if n.Queued != want {
			t.Errorf("node %s holds %d queued, want %d", n.ID, n.Queued, want)
		}
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
		Data:          json.RawMessage(`{"items":[1,2,3],"name":"x\u0000y"}`),
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
	if err := json.Unmarshal(got.Data, &data); err != nil || data["name"] != "x\ufffdy" {
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

func TestRescueLostNodesAndExpiredLeases(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now, Lease: 10 * time.Second})
	ctx := context.Background()
	mustRegister(t, q, "lost", 4)
	mustRegister(t, q, "alive", 2)
	mustRegister(t, q, "stuck", 1)
	// Build the scene one step at a time so each node gets exactly its jobs:
	// ids[0:2] queued on lost, ids[2:4] processing on lost (ids[3] on its
	// only attempt), ids[4] processing on alive, ids[5] processing on stuck.
	ids := make([]int64, 0, 6)
	stage := func(node string, claim bool, specs ...Spec) {
		t.Helper()
		ids = append(ids, mustEnqueue(t, q, specs...)...)
		if got, err := q.Assign(ctx, node, len(specs)); err != nil || len(got) != len(specs) {
			t.Fatalf("assign to %s = %v, %v", node, got, err)
		}
		if claim {
			if jobs, err := q.Claim(ctx, node, len(specs)); err != nil || len(jobs) != len(specs) {
				t.Fatalf("claim on %s = %v, %v", node, jobs, err)
			}
		}
	}
	stage("lost", true, Spec{URL: "http://l.test/p1"}, Spec{URL: "http://l.test/last", MaxAttempts: 1})
	stage("lost", false, Spec{URL: "http://l.test/q1"}, Spec{URL: "http://l.test/q2"})
	ids = []int64{ids[2], ids[3], ids[0], ids[1]} // queued first, as documented above
	stage("alive", true, Spec{URL: "http://l.test/alive"})
	stage("stuck", true, Spec{URL: "http://l.test/stuck"})

	// Nothing is stale yet.
	if rep, err := q.RescueLost(ctx, time.Minute); err != nil || len(rep.LostNodes)+int(rep.Released+rep.Retried+rep.Failed) != 0 {
		t.Fatalf("early rescue %+v, %v", rep, err)
	}
	// 11 s later: "alive" heartbeats (renewing its lease), "stuck" heartbeats
	// too late for its lease, "lost" is silent.
	clock.Advance(11 * time.Second)
	if st, err := q.Heartbeat(ctx, "alive", NodeLoad{BusySessions: 1}); err != nil || st != NodeActive {
		t.Fatalf("heartbeat = %v, %v", st, err)
	}
	rep, err := q.RescueLost(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Leases of "lost" (p1, last) and "stuck" expired; no node is stale yet.
	if len(rep.LostNodes) != 0 || rep.Released != 0 || rep.Retried != 2 || rep.Failed != 1 {
		t.Fatalf("lease rescue %+v", rep)
	}
	if j := mustGet(t, q, ids[5]); j.State != StatePending || j.ErrorClass != ClassLeaseExpired || j.Attempts != 1 ||
		!strings.Contains(j.LastError, "lease expired on node stuck") {
		t.Fatalf("expired-lease job %+v", j)
	}
	if j := mustGet(t, q, ids[3]); j.State != StateFailed || j.ErrorClass != ClassLeaseExpired {
		t.Fatalf("job out of attempts %+v", j)
	}
	if j := mustGet(t, q, ids[4]); j.State != StateProcessing {
		t.Fatalf("the renewed job was rescued: %+v", j)
	}

	clock.Advance(time.Minute)
	if _, err := q.Heartbeat(ctx, "alive", NodeLoad{}); err != nil {
		t.Fatal(err)
	}
	rep, err = q.RescueLost(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rep.LostNodes)
	if !slices.Equal(rep.LostNodes, []string{"lost", "stuck"}) || rep.Released != 2 || rep.Retried != 0 || rep.Failed != 0 {
		t.Fatalf("node rescue %+v", rep)
	}
	for _, id := range ids[:2] {
		if j := mustGet(t, q, id); j.State != StatePending || j.Attempts != 0 || j.NodeID != "" {
			t.Fatalf("queued job of a lost node %+v", j)
		}
	}
	// A lost node claims nothing, learns its state from its heartbeat, and
	// its late report of a job it no longer holds changes nothing.
	if st, _ := q.Heartbeat(ctx, "lost", NodeLoad{}); st != NodeLost {
		t.Fatalf("lost node's heartbeat says %v", st)
	}
	if _, err := q.Fail(ctx, ids[2], "lost", "late", "x", true); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("late Fail = %v, want ErrNotHeld", err)
	}
	if got, _ := q.Assign(ctx, "lost", 4); len(got) != 0 {
		t.Fatalf("a lost node was assigned %v", got)
	}
	// Its late result for a job still live is kept: the work was done.
	if _, err := q.Complete(ctx, ids[2], "lost", Result{Status: 200}); err != nil {
		t.Fatalf("late completion of a live job: %v", err)
	}
	if rep, _ := q.RescueLost(ctx, time.Minute); len(rep.LostNodes) != 0 {
		t.Fatalf("a lost node was declared lost again: %+v", rep)
	}
}

func TestRegisterReclaimsOwnAbandonedJobs(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	node, rec, err := q.Register(ctx, NodeInfo{ID: "n1", Hostname: "h1", Capacity: 4, Version: "v1"})
	if err != nil || rec != (Reclaimed{}) || node.ProcessRestarts != 0 || node.State != NodeActive || node.Capacity != 4 {
		t.Fatalf("first Register = %+v, %+v, %v", node, rec, err)
	}
	mustEnqueue(t, q, Spec{URL: "http://o.test/1"}, Spec{URL: "http://o.test/2"}, Spec{URL: "http://o.test/3", MaxAttempts: 1},
		Spec{URL: "http://o.test/4"})
	if _, err := q.Assign(ctx, "n1", 4); err != nil {
		t.Fatal(err)
	}
	if jobs, _ := q.Claim(ctx, "n1", 3); len(jobs) != 3 {
		t.Fatal("claim")
	}
	if _, err := q.Heartbeat(ctx, "n1", NodeLoad{CPUPercent: 50, JobsSinceProcessStart: 9}); err != nil {
		t.Fatal(err)
	}
	// The process dies and comes back with the same id, knowing its
	// predecessor is gone.
	node, rec, err = q.Register(ctx, NodeInfo{ID: "n1", Hostname: "h1", Capacity: 6, Version: "v2", Replaces: node.Incarnation})
	if err != nil {
		t.Fatal(err)
	}
	if rec != (Reclaimed{Released: 1, Retried: 2, Failed: 1}) {
		t.Fatalf("reclaimed %+v", rec)
	}
	if node.ProcessRestarts != 1 || node.Capacity != 6 || node.Version != "v2" || node.Load != (NodeLoad{}) {
		t.Fatalf("re-registered node %+v", node)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM jobs WHERE node_id = 'n1' AND state IN ('queued', 'processing')"); n != 0 {
		t.Fatalf("node still holds %d jobs", n)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM jobs WHERE error_class = $1", ClassNodeRestarted); n != 3 {
		t.Fatalf("%d jobs charged as node_restarted, want 3", n)
	}
	// Taking the id over again, with nothing held, takes nothing back.
	if _, rec, err := q.Register(ctx, NodeInfo{ID: "n1", Hostname: "h1", Capacity: 6, Version: "v2", Replaces: node.Incarnation}); err != nil || rec != (Reclaimed{}) {
		t.Fatalf("reclaim with nothing held = %+v, %v", rec, err)
	}
	if _, _, err := q.Register(ctx, NodeInfo{ID: "bad id"}); !errors.Is(err, ErrBadNodeID) {
		t.Fatalf("Register(bad id) = %v", err)
	}
	if _, _, err := q.Register(ctx, NodeInfo{ID: "n2", Capacity: -1}); err == nil {
		t.Fatal("negative capacity accepted")
	}
	// The node's supervisor owns its capacity; the queue does not guess one.
	if _, _, err := q.Register(ctx, NodeInfo{ID: "n3"}); err == nil || !strings.Contains(err.Error(), "capacity 0") {
		t.Fatalf("Register without a capacity = %v, want an error naming the capacity", err)
	}
	if _, _, err := q.Register(ctx, NodeInfo{ID: "n4", Capacity: 6, ExitAfterJobs: -1}); err == nil || !strings.Contains(err.Error(), "exit after -1") {
		t.Fatalf("Register with a negative threshold = %v", err)
	}
	n, _, err := q.Register(ctx, NodeInfo{ID: "n5", Capacity: 4, ChromeRecycleJobs: 10, ExitAfterJobs: 0})
	if err != nil || n.Capacity != 4 || n.ChromeRecycleJobs != 10 || n.ExitAfterJobs != 0 {
		t.Fatalf("the node's own policy: %+v, %v", n, err)
	}
}

func TestNodeStatesAndHeartbeat(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	mustRegister(t, q, "n1", 3)
	mustEnqueue(t, q, pageSpecs(3, "st.test")...)
	if _, err := q.Assign(ctx, "n1", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Claim(ctx, "n1", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetNodeState(ctx, "n1", NodeDraining); err != nil {
		t.Fatal(err)
	}
	// A draining node still starts what it was given.
	if jobs, _ := q.Claim(ctx, "n1", 1); len(jobs) != 1 {
		t.Fatal("a draining node could not claim its queued job")
	}
	clock.Advance(5 * time.Second)
	load := NodeLoad{CPUPercent: 71.5, MemUsedBytes: 3 << 30, MemTotalBytes: 8 << 30, ChromePSSBytes: 900 << 20,
		BusySessions: 2, JobsSinceChromeStart: 7, JobsSinceProcessStart: 27, ChromeRestarts: 1,
		ChromePSSMinBytes: 850 << 20, ChromePSSMaxBytes: 950 << 20}
	if st, err := q.Heartbeat(ctx, "n1", load); err != nil || st != NodeDraining {
		t.Fatalf("Heartbeat = %v, %v", st, err)
	}
	n, err := q.GetNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if n.Load != load || !n.HeartbeatAt.Equal(clock.Now()) || n.State != NodeDraining || n.Queued != 1 || n.Processing != 2 {
		t.Fatalf("node after heartbeat %+v", n)
	}
	rec, err := q.SetNodeState(ctx, "n1", NodeExited)
	if err != nil || rec != (Reclaimed{Released: 1, Retried: 2}) {
		t.Fatalf("exit = %+v, %v", rec, err)
	}
	if _, err := q.SetNodeState(ctx, "n1", NodeDraining); err == nil || !strings.Contains(err.Error(), "register again") {
		t.Fatalf("draining an exited node = %v", err)
	}
	if _, err := q.SetNodeState(ctx, "n1", NodeLost); err == nil {
		t.Fatal("SetNodeState(lost) accepted")
	}
	if _, err := q.SetNodeState(ctx, "nobody", NodeDraining); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetNodeState(unknown) = %v", err)
	}
	if _, err := q.SetNodeState(ctx, "nobody", NodeExited); !errors.Is(err, ErrNotFound) {
		t.Fatalf("exit unknown = %v", err)
	}
	if _, err := q.Heartbeat(ctx, "nobody", NodeLoad{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Heartbeat(unknown) = %v", err)
	}
	if _, err := q.GetNode(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetNode(unknown) = %v", err)
	}
	// Gone nodes are forgotten after a while, live ones never.
	mustRegister(t, q, "n2", 1)
	clock.Advance(time.Hour)
	if n, err := q.DeleteGoneNodes(ctx, clock.Now().Add(-time.Minute)); err != nil || n != 1 {
		t.Fatalf("DeleteGoneNodes = %d, %v", n, err)
	}
	if nodes, _ := q.ListNodes(ctx); len(nodes) != 1 || nodes[0].ID != "n2" {
		t.Fatalf("nodes left: %+v", nodes)
	}
}

func TestCancelAndRetry(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	ids := mustEnqueue(t, q, pageSpecs(5, "cr.test")...)
	if _, err := q.Assign(ctx, "n1", 3); err != nil { // ids 0..2 queued
		t.Fatal(err)
	}
	if _, err := q.Claim(ctx, "n1", 2); err != nil { // 0, 1 processing
		t.Fatal(err)
	}
	if _, err := q.Complete(ctx, ids[0], "n1", Result{}); err != nil {
		t.Fatal(err)
	}
	n, err := q.Cancel(ctx, ids[0], ids[1], ids[2], ids[3])
	if err != nil || n != 3 {
		t.Fatalf("Cancel = %d, %v; want 3 (the completed job stays)", n, err)
	}
	if j := mustGet(t, q, ids[0]); j.State != StateCompleted {
		t.Fatalf("Cancel touched a completed job: %+v", j)
	}
	// The node running a canceled job finds out when it reports.
	if _, err := q.Complete(ctx, ids[1], "n1", Result{}); !errors.Is(err, ErrAlreadyFinished) {
		t.Fatalf("Complete of a canceled job = %v", err)
	}
	if _, err := q.Fail(ctx, ids[1], "n1", "x", "x", true); !errors.Is(err, ErrAlreadyFinished) {
		t.Fatalf("Fail of a canceled job = %v", err)
	}
	if got, _ := q.Assign(ctx, "n1", 6); !slices.Equal(got, []int64{ids[4]}) {
		t.Fatalf("after cancel the node got %v, want [%d]", got, ids[4])
	}
	n, err = q.Retry(ctx, ids[0], ids[1], ids[3])
	if err != nil || n != 2 {
		t.Fatalf("Retry = %d, %v; want 2", n, err)
	}
	if j := mustGet(t, q, ids[1]); j.State != StatePending || j.Attempts != 0 || j.NodeID != "" || j.FinishedAt != nil {
		t.Fatalf("retried job %+v", j)
	}
	batchID, _, err := q.Enqueue(ctx, pageSpecs(4, "batch.test"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := q.CancelBatch(ctx, batchID); err != nil || n != 4 {
		t.Fatalf("CancelBatch = %d, %v", n, err)
	}
	if _, err := q.CancelBatch(ctx, "not-a-uuid"); err == nil {
		t.Fatal("CancelBatch accepted a bad batch id")
	}
}

func TestFollowEnqueuesDedupedChildren(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	run := func(id int64, links ...string) int {
		t.Helper()
		if _, err := assignRound(ctx, q, 100); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Claim(ctx, "n1", 6); err != nil {
			t.Fatal(err)
		}
		n, err := q.Complete(ctx, id, "n1", Result{Status: 200, Links: links})
		if err != nil {
			t.Fatalf("complete %d: %v", id, err)
		}
		return n
	}
	batchID, ids, err := q.Enqueue(ctx, []Spec{
		{URL: "http://site.test/", Extract: "1", Priority: 3, Follow: &Follow{Selector: "a", MaxDepth: 2, MaxLinks: 3}},
		{URL: "http://site.test/", Follow: &Follow{Selector: "a", MaxDepth: 1, AnyHost: true}},
		{URL: "http://site.test/plain"},
	})
	if err != nil {
		t.Fatal(err)
	}
	root := ids[0]
	n := run(root,
		"http://site.test/a", "http://site.test/a#section", "http://SITE.test:80/b", "http://other.test/x",
		"mailto:me@site.test", "javascript:void(0)", "http://site.test/", "http://site.test/c", "http://site.test/d")
	// Same-host links in order: a, b, / (the root itself), c, d; max_links 3
	// takes a, b and /; / is already part of this crawl.
	if n != 2 {
		t.Fatalf("root produced %d children, want 2", n)
	}
	page, err := q.List(ctx, ListFilter{BatchID: batchID, States: []State{StatePending}})
	if err != nil {
		t.Fatal(err)
	}
	var children []Job
	for _, j := range page.Jobs {
		if j.ParentID == root {
			children = append(children, j)
		}
	}
	slices.SortFunc(children, func(a, b Job) int { return int(a.ID - b.ID) })
	// A child's URL is the link as found, without its fragment.
	if len(children) != 2 || children[0].Spec.URL != "http://site.test/a" || children[1].Spec.URL != "http://SITE.test:80/b" {
		t.Fatalf("children %+v", children)
	}
	for _, c := range children {
		if c.Depth != 1 || c.CrawlID != root || c.BatchID != batchID || c.Priority != 3 || c.Host != "site.test" ||
			c.Spec.Extract != "1" || c.Spec.Follow == nil || c.Spec.Follow.MaxDepth != 2 || c.MaxAttempts != DefaultAttempts {
			t.Fatalf("child %+v", c)
		}
	}
	// A child links back to a page of the crawl and to a new one.
	a := children[0].ID
	if n := run(a, "http://site.test/b", "http://site.test/e", "http://site.test/a"); n != 1 {
		t.Fatalf("depth-1 page produced %d children, want 1 (e)", n)
	}
	var e int64
	if err := pool.QueryRow(ctx, "SELECT id FROM jobs WHERE parent_id = $1", a).Scan(&e); err != nil {
		t.Fatal(err)
	}
	if j := mustGet(t, q, e); j.Depth != 2 || j.CrawlID != root || j.Spec.URL != "http://site.test/e" {
		t.Fatalf("depth-2 job %+v", j)
	}
	// Depth 2 is max_depth: no further children.
	if n := run(e, "http://site.test/f"); n != 0 {
		t.Fatalf("a page at max depth produced %d children", n)
	}
	// Another crawl of the same site is de-duplicated on its own, and any_host follows other hosts.
	if n := run(ids[1], "http://site.test/a", "http://other.test/x", "ftp://site.test/f"); n != 2 {
		t.Fatalf("any_host crawl produced %d children, want 2", n)
	}
	// A job without follow enqueues nothing.
	if n := run(ids[2], "http://site.test/zzz"); n != 0 {
		t.Fatalf("a job without follow produced %d children", n)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM jobs WHERE crawl_id = $1", root); n != 4 {
		t.Fatalf("crawl has %d jobs, want 4 (root, a, b, e)", n)
	}
}

func TestListPagingAndStats(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	mustRegister(t, q, "n1", 2)
	mustRegister(t, q, "n2", 2)
	batchA, idsA, err := q.Enqueue(ctx, pageSpecs(5, "a.test"))
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	batchB, idsB, err := q.Enqueue(ctx, pageSpecs(3, "b.test:8080"))
	if err != nil {
		t.Fatal(err)
	}
	assignClaim(t, q, "n1", 1)                        // idsA[0] processing on n1
	if _, err := q.Assign(ctx, "n2", 2); err != nil { // idsA[1,2] queued on n2
		t.Fatal(err)
	}
	if _, err := q.Complete(ctx, idsA[0], "n1", Result{}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Cancel(ctx, idsB[2]); err != nil {
		t.Fatal(err)
	}

	ids := func(p Page) []int64 {
		var out []int64
		for _, j := range p.Jobs {
			out = append(out, j.ID)
		}
		return out
	}
	tests := []struct {
		name string
		f    ListFilter
		want []int64
	}{
		{"all, newest first", ListFilter{}, []int64{idsB[2], idsB[1], idsB[0], idsA[4], idsA[3], idsA[2], idsA[1], idsA[0]}},
		{"by state", ListFilter{States: []State{StateQueued, StateCompleted}}, []int64{idsA[2], idsA[1], idsA[0]}},
		{"by node", ListFilter{NodeID: "n2"}, []int64{idsA[2], idsA[1]}},
		{"by batch", ListFilter{BatchID: batchB}, []int64{idsB[2], idsB[1], idsB[0]}},
		{"by host", ListFilter{Host: "B.test:8080", States: []State{StatePending}}, []int64{idsB[1], idsB[0]}},
		{"created since", ListFilter{CreatedSince: clock.Now()}, []int64{idsB[2], idsB[1], idsB[0]}},
		{"created until", ListFilter{CreatedUntil: clock.Now(), BatchID: batchA, Limit: 2}, []int64{idsA[4], idsA[3]}},
	}
	for _, tt := range tests {
		p, err := q.List(ctx, tt.f)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !slices.Equal(ids(p), tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, ids(p), tt.want)
		}
	}
	// Keyset paging walks every job exactly once.
	var seen []int64
	f := ListFilter{Limit: 3}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		p, err := q.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ids(p)...)
		if p.Next == 0 {
			break
		}
		f.Before = p.Next
	}
	if len(seen) != 8 || !slices.IsSortedFunc(seen, func(a, b int64) int { return int(b - a) }) {
		t.Fatalf("pages gave %v", seen)
	}
	if _, err := q.List(ctx, ListFilter{States: []State{"bogus"}}); err == nil {
		t.Fatal("List accepted an unknown state")
	}
	if _, err := q.List(ctx, ListFilter{BatchID: "x"}); err == nil {
		t.Fatal("List accepted a bad batch id")
	}

	s, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[State]int64{StatePending: 4, StateQueued: 2, StateProcessing: 0, StateCompleted: 1, StateFailed: 0, StateCanceled: 1}
	for st, n := range want {
		if s.Jobs[st] != n {
			t.Errorf("Stats.Jobs[%s] = %d, want %d", st, s.Jobs[st], n)
		}
	}
	if s.Ready != 4 || s.CompletedLastMinute != 1 || len(s.Nodes) != 1 || s.Nodes[0] != (NodeJobs{NodeID: "n2", Queued: 2}) ||
		s.OldestPending == nil || !s.OldestPending.Equal(clock.Now().Add(-time.Minute)) {
		t.Fatalf("stats %+v", s)
	}
	var res []Result
	err = q.ExportResults(ctx, ExportFilter{BatchID: batchA, States: []State{StateCompleted}}, func(r ExportRow) error {
		if r.Result != nil {
			res = append(res, *r.Result)
		}
		return nil
	})
	if err != nil || len(res) != 1 || res[0].JobID != idsA[0] {
		t.Fatalf("batch results = %+v, %v", res, err)
	}
}

func TestDeleteFinishedBefore(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, pool := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	ids := mustEnqueue(t, q, pageSpecs(6, "d.test")...)
	for i, j := range assignClaim(t, q, "n1", 4) {
		res := Result{HTML: "<p>x</p>"}
		if i < 2 { // kept in a blob store: the purge hands their keys back
			res = Result{Blobs: []BlobRef{{Kind: BlobHTML, Key: fmt.Sprintf("jobs/%d/h.html", j.ID), Size: 8, SHA256: "ab"},
				{Kind: BlobScreenshot, Key: fmt.Sprintf("jobs/%d/s.png", j.ID), Size: 9, SHA256: "cd"}}}
		}
		if _, err := q.Complete(ctx, j.ID, "n1", res); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			got, err := q.GetResult(ctx, j.ID)
			if err != nil || !reflect.DeepEqual(got.Blobs, res.Blobs) {
				t.Fatalf("blobs read back %+v (%v), want %+v", got.Blobs, err, res.Blobs)
			}
		}
	}
	if _, err := q.Cancel(ctx, ids[4]); err != nil {
		t.Fatal(err)
	}
	clock.Advance(48 * time.Hour)
	// Finished after the cutoff: kept.
	jobs := assignClaim(t, q, "n1", 1)
	if _, err := q.Complete(ctx, jobs[0].ID, "n1", Result{}); err != nil {
		t.Fatal(err)
	}
	var gone []string
	n, err := q.DeleteFinishedBefore(ctx, clock.Now().Add(-24*time.Hour), 2, func(keys []string) { gone = append(gone, keys...) })
	if err != nil || n != 5 {
		t.Fatalf("DeleteFinishedBefore = %d, %v; want 5", n, err)
	}
	if len(gone) != 4 {
		t.Errorf("blob keys of the deleted results = %q, want 4", gone)
	}
	if left := countRows(t, pool, "SELECT count(*) FROM jobs"); left != 1 {
		t.Fatalf("%d jobs left, want 1", left)
	}
	if left := countRows(t, pool, "SELECT count(*) FROM results"); left != 1 {
		t.Fatalf("%d results left, want 1", left)
	}
}
