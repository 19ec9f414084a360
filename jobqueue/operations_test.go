package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

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
	// Same-host links in order: a, b, / (the root itself), c, d; / is
	// already part of this crawl and takes no place, so max_links 3 takes a,
	// b and c.
	if n != 3 {
		t.Fatalf("root produced %d children, want 3", n)
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
	if len(children) != 3 || children[0].Spec.URL != "http://site.test/a" || children[1].Spec.URL != "http://SITE.test:80/b" ||
		children[2].Spec.URL != "http://site.test/c" {
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
	if n := countRows(t, pool, "SELECT count(*) FROM jobs WHERE crawl_id = $1", root); n != 5 {
		t.Fatalf("crawl has %d jobs, want 5 (root, a, b, c, e)", n)
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
	// The completion is of the current minute, which the last whole minute's
	// count does not hold yet (TestStatsLastMinuteIsTheLastWholeMinute).
	if s.Ready != 4 || s.CompletedLastMinute != 0 || len(s.Nodes) != 1 || s.Nodes[0] != (NodeJobs{NodeID: "n2", Queued: 2}) ||
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

// A filter no index serves searches a window of ids per page: a rare match
// costs a page at a time, pages come back short with a cursor, ids that
// retention emptied are skipped at once, and every match is listed once.
func TestListSearchesAWindowAtATime(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{ListWindow: 4})
	ctx := context.Background()
	specs := pageSpecs(20, "common.test")
	for _, k := range []int{1, 2, 13, 19} {
		specs[k] = Spec{URL: fmt.Sprintf("http://rare.test/page/%d", k)}
	}
	batch, ids, err := q.Enqueue(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	// Retention emptied ids[4..11].
	if _, err := pool.Exec(ctx, "DELETE FROM jobs WHERE id BETWEEN $1 AND $2", ids[4], ids[11]); err != nil {
		t.Fatal(err)
	}

	type page struct {
		ids            []int64
		next, searched int64
	}
	got := func(f ListFilter) page {
		t.Helper()
		p, err := q.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		out := page{next: p.Next, searched: p.SearchedDownTo}
		for _, j := range p.Jobs {
			out.ids = append(out.ids, j.ID)
		}
		return out
	}
	want := []page{
		{[]int64{ids[19]}, ids[16], ids[16]}, // ids[16..19]
		{[]int64{ids[13]}, ids[4], ids[12]},  // ids[12..15], then on from ids[3]
		{[]int64{ids[2], ids[1]}, 0, 0},      // ids[0..3], the last
	}
	// A batch with another filter is windowed too (a crawl's batch grows
	// with its children), from the batch's newest job.
	for _, f := range []ListFilter{{Host: "rare.test", Limit: 10}, {Host: "rare.test", BatchID: batch, Limit: 10}} {
		var pages []page
		for {
			if len(pages) > 5 {
				t.Fatalf("%+v: paging does not end: %+v", f, pages)
			}
			p := got(f)
			pages = append(pages, p)
			if p.next == 0 {
				break
			}
			f.Before = p.next
		}
		if len(pages) != len(want) {
			t.Fatalf("%+v: pages %+v, want %+v", f, pages, want)
		}
		for i := range want {
			if !slices.Equal(pages[i].ids, want[i].ids) || pages[i].next != want[i].next || pages[i].searched != want[i].searched {
				t.Fatalf("%+v: page %d: %+v, want %+v", f, i, pages[i], want[i])
			}
		}
	}
	// A cursor past every job lists from the newest.
	if p := got(ListFilter{Host: "rare.test", Before: ids[19] + 1000, Limit: 10}); !slices.Equal(p.ids, want[0].ids) {
		t.Fatalf("a cursor past the newest job: %+v", p)
	}

	// A page that fills within the window ends where it filled.
	if p := got(ListFilter{Host: "common.test", Limit: 2}); !slices.Equal(p.ids, []int64{ids[18], ids[17]}) || p.next != ids[17] || p.searched != 0 {
		t.Fatalf("a full page: %+v", p)
	}
	// No filter, a batch's index and the in-flight jobs' are not windowed.
	for _, f := range []ListFilter{{Limit: 20}, {BatchID: batch, Limit: 20}} {
		if p := got(f); len(p.ids) != 12 || p.next != 0 || p.searched != 0 {
			t.Fatalf("%+v: %+v, want the 12 jobs in one page", f, p)
		}
	}
	mustRegister(t, q, "n1", 6)
	assigned, err := q.Assign(ctx, "n1", 6)
	if err != nil || len(assigned) == 0 {
		t.Fatalf("assigned %v: %v", assigned, err)
	}
	if p := got(ListFilter{States: []State{StateQueued}, Limit: 20}); len(p.ids) != len(assigned) || p.next != 0 || p.searched != 0 {
		t.Fatalf("queued jobs: %+v, want the %d assigned in one page", p, len(assigned))
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

// TestCancelBatchCatchesChildrenOfAConcurrentCompletion: a completion that
// holds one of the batch's jobs, inserts its followed children and commits
// while CancelBatch waits for that job leaves children the cancel's
// statement cannot see; CancelBatch still leaves none of the batch live.
func TestCancelBatchCatchesChildrenOfAConcurrentCompletion(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	batchID, ids, err := q.Enqueue(ctx, pageSpecs(2, "cancel-race.test"))
	if err != nil {
		t.Fatal(err)
	}
	assignClaim(t, q, "n1", 1)
	// The completion's part: the job locked, its children inserted.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT id FROM jobs WHERE id = $1 FOR UPDATE`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO jobs (batch_id, spec, host, crawl_id, parent_id, depth)
        SELECT batch_id, spec, host, crawl_id, id, 1 FROM jobs, generate_series(1, 2) WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := q.CancelBatch(ctx, batchID)
		done <- err
	}()
	testutil.Eventually(t, 30*time.Second, "the cancel waiting for the job's lock", func() bool {
		return countRows(t, pool, `SELECT count(*) FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%canceled%'`) == 1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM jobs WHERE batch_id = $1::uuid AND state IN ('pending', 'queued', 'processing')`, batchID); n != 0 {
		t.Errorf("%d jobs of the canceled batch still live", n)
	}
}

// A crawl seeded with a Unicode host name follows its links: Chrome hands
// them back in the ASCII (punycode) form, which must be the same host and the
// same crawl key as the seed's.
// TestFollowFromTheHostRedirectedTo: a crawl whose page ended on another
// host (http://example.com/ redirected to https://www.example.com/)
// follows that host's links as well as its own host's, not others'.
func TestFollowFromTheHostRedirectedTo(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	ids := mustEnqueue(t, q, Spec{URL: "http://site.test/", Follow: &Follow{Selector: "a", MaxDepth: 1}})
	if _, err := assignRound(ctx, q, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Claim(ctx, "n1", 6); err != nil {
		t.Fatal(err)
	}
	n, err := q.Complete(ctx, ids[0], "n1", Result{Status: 200, FinalURL: "https://WWW.site.test/home",
		Links: []string{"https://www.site.test/a", "http://www.site.test:8080/b", "http://site.test/c", "http://other.test/x"}})
	if err != nil {
		t.Fatal(err)
	}
	// a (the final host), c (the job's); not b (another port: another host) nor x.
	if n != 2 {
		t.Fatalf("%d children, want 2", n)
	}
}

func TestFollowIDNSeedFollowsPunycodeLinks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := newTestQueue(t, Config{})
	in := registerIncarnation(t, q, "n1", 1)
	ids := mustEnqueue(t, q, Spec{URL: "http://bücher.test/", Follow: &Follow{Selector: "a", MaxDepth: 2}})
	startOne(t, q, in)
	links := []string{"http://xn--bcher-kva.test/seite", "http://xn--bcher-kva.test/"}
	out, err := q.CompleteMany(ctx, []Completion{in.Completion(ids[0], Result{Status: 200, FinalURL: "http://xn--bcher-kva.test/", Links: links})})
	if err != nil || out[0].Err != nil {
		t.Fatalf("complete: %v, %v", err, out[0].Err)
	}
	if out[0].Children != 1 { // /seite; / is the seed itself
		t.Fatalf("%d children, want 1", out[0].Children)
	}
	page, err := q.List(ctx, ListFilter{States: []State{StatePending}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 1 || page.Jobs[0].Spec.URL != links[0] || page.Jobs[0].Host != "xn--bcher-kva.test" {
		t.Fatalf("pending jobs %+v, want the child %s on host xn--bcher-kva.test", page.Jobs, links[0])
	}
}

// A followed link longer than a job URL may be is left out, not cut short:
// cut, it would be another page, enqueued and stored as this one.
func TestFollowLeavesOverlongLinksOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := newTestQueue(t, Config{})
	in := registerIncarnation(t, q, "n1", 1)
	ids := mustEnqueue(t, q, Spec{URL: "http://list.test/", Follow: &Follow{Selector: "a", MaxDepth: 1}})
	startOne(t, q, in)
	long := "http://list.test/item?q=" + strings.Repeat("a", MaxURLLength) + "&page=2"
	out, err := q.CompleteMany(ctx, []Completion{in.Completion(ids[0], Result{Status: 200,
		Links: []string{long, "http://list.test/short"}})})
	if err != nil || out[0].Err != nil {
		t.Fatalf("complete: %v, %v", err, out[0].Err)
	}
	if out[0].Children != 1 {
		t.Fatalf("%d children, want 1 (the short link)", out[0].Children)
	}
	page, err := q.List(ctx, ListFilter{States: []State{StatePending}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 1 || page.Jobs[0].Spec.URL != "http://list.test/short" {
		t.Fatalf("pending jobs %+v, want the short link's only", page.Jobs)
	}
	res, err := q.GetResult(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Links) != 1 || res.LinksOverLimit != 1 {
		t.Fatalf("result links %d, over the limit %d; want 1 and 1", len(res.Links), res.LinksOverLimit)
	}
}

// A crawl that follows links to any host does not hand the seed site's
// cookies to the other hosts: a cookie without a domain is the parent host's
// (Chrome sets it for the page's URL), so a child on another host does not
// inherit it; a cookie with a domain, which Chrome scopes itself, and every
// cookie of a same-host child are kept.
func TestFollowAnyHostChildDropsHostOnlyCookies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := newTestQueue(t, Config{})
	in := registerIncarnation(t, q, "n1", 1)
	cookies := []Cookie{{Name: "session", Value: "s3cret"}, {Name: "pref", Value: "de", Domain: "shop.test"}}
	ids := mustEnqueue(t, q,
		Spec{URL: "https://shop.test/account", Cookies: cookies[:1], Follow: &Follow{Selector: "a", MaxDepth: 1, AnyHost: true}},
		Spec{URL: "https://shop.test/other", Cookies: cookies, Follow: &Follow{Selector: "a", MaxDepth: 1, AnyHost: true}})
	children := map[string]Job{}
	for _, id := range ids {
		if j := startOne(t, q, in); j.ID != id {
			t.Fatalf("claimed job %d, want %d", j.ID, id)
		}
		links := []string{fmt.Sprintf("https://tracker.test/x%d", id), fmt.Sprintf("https://shop.test/page%d", id)}
		out, err := q.CompleteMany(ctx, []Completion{in.Completion(id, Result{Status: 200, Links: links})})
		if err != nil || out[0].Err != nil || out[0].Children != 2 {
			t.Fatalf("complete %d: %v, %+v", id, err, out)
		}
		page, err := q.List(ctx, ListFilter{States: []State{StatePending}})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			if j.ParentID == id {
				children[j.Spec.URL] = j
			}
		}
	}
	want := map[string][]Cookie{
		fmt.Sprintf("https://tracker.test/x%d", ids[0]): nil,
		fmt.Sprintf("https://shop.test/page%d", ids[0]): cookies[:1],
		fmt.Sprintf("https://tracker.test/x%d", ids[1]): cookies[1:],
		fmt.Sprintf("https://shop.test/page%d", ids[1]): cookies,
	}
	if len(children) != len(want) {
		t.Fatalf("children %v, want %d", children, len(want))
	}
	for u, w := range want {
		c, ok := children[u]
		if !ok {
			t.Fatalf("no child %s", u)
		}
		// A read shows the cookies' values redacted.
		var shown []Cookie
		for _, wc := range w {
			wc.Value = Redacted
			shown = append(shown, wc)
		}
		if !reflect.DeepEqual(c.Spec.Cookies, shown) {
			t.Errorf("child %s carries cookies %+v, want %+v", u, c.Spec.Cookies, shown)
		}
	}
}

// A jobs list filtered by host finds the host's jobs whatever spelling the
// filter uses: as stored (punycode), in Unicode, with a trailing dot or a
// default port.
func TestListByHostInAnySpelling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := newTestQueue(t, Config{})
	mustEnqueue(t, q, Spec{URL: "https://bücher.test/a"}, Spec{URL: "https://other.test/b"})
	for _, host := range []string{"xn--bcher-kva.test", "BÜCHER.test", "bücher.test.", "bücher.test:443"} {
		page, err := q.List(ctx, ListFilter{Host: host})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) != 1 || page.Jobs[0].Host != "xn--bcher-kva.test" {
			t.Errorf("host %q: %d jobs %+v, want the bücher.test job", host, len(page.Jobs), page.Jobs)
		}
	}
}

// TestExportEndsAPageAtItsBytes: a page of the export ends once its rows
// hold exportPageBytes (a row's data can be megabytes; 500 such rows were
// gigabytes in memory), and the next page goes on from it: every job
// once, in order, with no more than about a page's bytes held when the
// first row is handed over. (Not parallel: it reads the heap's size.)
func TestExportEndsAPageAtItsBytes(t *testing.T) {
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 100)
	const perRow = 3 << 20
	n := 3 * exportPageBytes / perRow // three pages' bytes
	ids := mustEnqueue(t, q, pageSpecs(n, "big.test")...)
	data := json.RawMessage(`"` + strings.Repeat("x", perRow) + `"`)
	for _, j := range assignClaim(t, q, "n1", n) {
		if _, err := q.Complete(ctx, j.ID, "n1", Result{Status: 200, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	var got []int64
	var held int64
	err := q.ExportResults(ctx, ExportFilter{}, func(r ExportRow) error {
		if r.Result == nil || len(r.Result.Data) != len(data) {
			return fmt.Errorf("job %d: a result without its data", r.Job.ID)
		}
		if len(got) == 0 {
			held = heap() - before
		}
		got = append(got, r.Job.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("exported %v, want %v", got, ids)
	}
	if limit := int64(2 * exportPageBytes); held > limit {
		t.Errorf("%d MiB held when the first row was handed over, want under %d MiB (a page's bytes and a row)", held>>20, limit>>20)
	}
}
