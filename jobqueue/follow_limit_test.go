package jobqueue

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A listing page with more links than it may follow: 10,000 children are
// enqueued in the completing transaction (de-duplicated), and the links past
// the limit — the page's own beyond max_links plus those the browser did not
// collect — are counted in the result, not dropped silently.
func TestFollowTenThousandLinksCountsTheRest(t *testing.T) {
	t.Parallel()
	q, pool := newTestQueue(t, Config{})
	ctx := context.Background()
	node, _, err := q.Register(ctx, NodeInfo{ID: "n1", Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	batch, ids, err := q.Enqueue(ctx, []Spec{{URL: "http://list.test/",
		Follow: &Follow{Selector: "a", MaxDepth: 1, MaxLinks: MaxFollowLinks}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := assignRound(ctx, q, 10); err != nil {
		t.Fatal(err)
	}
	in := q.Incarnation(node)
	if jobs, err := in.Claim(ctx, 1); err != nil || len(jobs) != 1 {
		t.Fatalf("claim = %v, %v", jobs, err)
	}
	// 10,500 distinct same-host links, each listed twice, plus the page
	// itself; the browser reports 7 more it did not collect.
	var links []string
	for i := range 10_500 {
		u := fmt.Sprintf("http://list.test/item/%d", i)
		links = append(links, u, u+"#again")
	}
	links = append(links, "http://list.test/")
	start := time.Now()
	out, err := q.CompleteMany(ctx, []Completion{in.Completion(ids[0], Result{Status: 200, Links: links, LinksOverLimit: 7})})
	took := time.Since(start)
	if err != nil || out[0].Err != nil {
		t.Fatalf("complete: %v, %v", err, out[0].Err)
	}
	t.Logf("completing transaction with %d links (%d children): %v", len(links), out[0].Children, took)
	if out[0].Children != MaxFollowLinks {
		t.Fatalf("%d children, want %d", out[0].Children, MaxFollowLinks)
	}
	c, err := q.BatchCounts(ctx, batch)
	if err != nil || c.Total != MaxFollowLinks+1 {
		t.Fatalf("batch has %d jobs (%v), want %d", c.Total, err, MaxFollowLinks+1)
	}
	if n := countRows(t, pool, "SELECT count(DISTINCT dedup_key) FROM jobs WHERE crawl_id = $1", ids[0]); n != MaxFollowLinks+1 {
		t.Fatalf("%d distinct URLs in the crawl, want %d", n, MaxFollowLinks+1)
	}
	res, err := q.GetResult(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	// Links in page order after de-duplication: 10,500 items then the page
	// itself, which is already in the crawl and counts for nothing; 10,000
	// are followed, 500 items are past the limit.
	if want := 7 + 500; res.LinksOverLimit != want {
		t.Fatalf("links_over_limit = %d, want %d", res.LinksOverLimit, want)
	}
}

func TestFollowLimitsAreConsistent(t *testing.T) {
	if DefaultMaxLinks < 1 || DefaultMaxLinks > MaxFollowLinks || MaxCollectedLinks < MaxFollowLinks {
		t.Fatalf("default %d, max %d, collected %d", DefaultMaxLinks, MaxFollowLinks, MaxCollectedLinks)
	}
	s := Spec{URL: "http://a.test/", Follow: &Follow{Selector: "a", MaxDepth: 1}}.WithDefaults()
	if s.Follow.MaxLinks != DefaultMaxLinks {
		t.Fatalf("spec default max_links = %d, want %d", s.Follow.MaxLinks, DefaultMaxLinks)
	}
	bad := Spec{URL: "http://a.test/", Follow: &Follow{Selector: "a", MaxDepth: 1, MaxLinks: MaxFollowLinks + 1}}
	if err := bad.Validate(); err == nil {
		t.Fatal("max_links past MaxFollowLinks accepted")
	}
}

// Links already in the crawl do not use up a page's max_links: a site's
// navigation, repeated on every page, would otherwise leave a child page no
// room for its own new links.
func TestFollowKnownLinksLeaveMaxLinksFree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := newTestQueue(t, Config{})
	in := registerIncarnation(t, q, "n1", 1)
	mustEnqueue(t, q, Spec{URL: "http://site.test/", Follow: &Follow{Selector: "a", MaxDepth: 3, MaxLinks: 3}})
	nav := []string{"http://site.test/", "http://site.test/about", "http://site.test/contact"}
	run := func(links []string) (CompleteOutcome, Result) {
		t.Helper()
		job := startOne(t, q, in)
		out, err := q.CompleteMany(ctx, []Completion{in.Completion(job.ID, Result{Status: 200, Links: links})})
		if err != nil || out[0].Err != nil {
			t.Fatalf("complete: %v, %v", err, out[0].Err)
		}
		res, err := q.GetResult(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return out[0], res
	}
	if o, res := run(nav); o.Children != 2 || res.LinksOverLimit != 0 {
		t.Fatalf("root: %d children, %d over the limit; want 2 and 0", o.Children, res.LinksOverLimit)
	}
	extra := []string{"http://site.test/new1", "http://site.test/new2", "http://site.test/new3", "http://site.test/new4"}
	o, res := run(append(append([]string{}, nav...), extra...))
	if o.Children != 3 || res.LinksOverLimit != 1 {
		t.Fatalf("a child page (3 known nav links, then 4 new; max_links 3): %d children, %d over the limit; want 3 and 1",
			o.Children, res.LinksOverLimit)
	}
}
