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
	// itself; 10,000 are followed, 500 items and the page are past the limit.
	if want := 7 + 501; res.LinksOverLimit != want {
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
