package jobqueue

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention also forgets the politeness rows (hosts) of hosts that have not
// started a job since the cutoff and have none waiting or running; the
// assignment round re-creates a missing row, and the next start is stamped.
func TestDeleteIdleHosts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newFakeClock()
	q, pool := newTestQueue(t, Config{Now: clock.Now})
	mustRegister(t, q, "n1", 6)
	spaced := func(string) HostPolicy { return HostPolicy{MinInterval: time.Millisecond} }
	var specs []Spec
	for i := range 30 {
		specs = append(specs, Spec{URL: fmt.Sprintf("http://h%d.example/", i)})
	}
	mustEnqueue(t, q, specs...)
	for countRows(t, pool, "SELECT count(*) FROM jobs WHERE state <> 'completed'") > 0 {
		if _, err := q.AssignPolite(ctx, spaced, 100, AssignSpread); err != nil {
			t.Fatal(err)
		}
		jobs, err := q.Claim(ctx, "n1", 6)
		if err != nil || len(jobs) == 0 {
			t.Fatalf("claim = %v, %v", jobs, err)
		}
		var cs []Completion
		for _, j := range jobs {
			cs = append(cs, Completion{JobID: j.ID, NodeID: "n1", Result: Result{Status: 200}})
		}
		if _, err := q.CompleteMany(ctx, cs); err != nil {
			t.Fatal(err)
		}
	}
	if n := countRows(t, pool, "SELECT count(*) FROM hosts WHERE last_started_at > '-infinity'"); n != 30 {
		t.Fatalf("%d hosts rows with a start, want 30", n)
	}
	clock.Advance(time.Hour)
	// h0 has a job waiting: its row stays. h1 started after the cutoff: its row stays.
	mustEnqueue(t, q, Spec{URL: "http://h0.example/again"}, Spec{URL: "http://h1.example/again"})
	if _, err := q.AssignPolite(ctx, func(h string) HostPolicy {
		if h == "h1.example" {
			return spaced(h)
		}
		return HostPolicy{MinInterval: 2 * time.Hour}
	}, 100, AssignSpread); err != nil {
		t.Fatal(err)
	}
	if jobs, err := q.Claim(ctx, "n1", 6); err != nil || len(jobs) != 1 || jobs[0].Host != "h1.example" {
		t.Fatalf("claim = %v, %v; want h1's job", jobs, err)
	}
	n, err := q.DeleteIdleHosts(ctx, clock.Now().Add(-time.Minute), 7)
	if err != nil || n != 28 {
		t.Fatalf("DeleteIdleHosts = %d, %v; want 28", n, err)
	}
	rows, err := pool.Query(ctx, "SELECT host FROM hosts ORDER BY host")
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(left, []string{"h0.example", "h1.example"}) {
		t.Fatalf("hosts rows left %q, %v; want h0 and h1", left, err)
	}

	// A host whose row was forgotten gets it back from the next round, and
	// its next start is stamped.
	mustEnqueue(t, q, Spec{URL: "http://h5.example/again"})
	if _, err := q.AssignPolite(ctx, spaced, 100, AssignSpread); err != nil {
		t.Fatal(err)
	}
	jobs, err := q.Claim(ctx, "n1", 6)
	if err != nil {
		t.Fatal(err)
	}
	var h5 bool
	for _, j := range jobs {
		h5 = h5 || j.Host == "h5.example"
	}
	if !h5 {
		t.Fatalf("claimed %v, want h5's job among them", jobs)
	}
	if n := countRows(t, pool, "SELECT count(*) FROM hosts WHERE host = 'h5.example' AND last_started_at = $1", clock.Now()); n != 1 {
		t.Fatalf("h5's row: %d with the start stamped, want 1", n)
	}
}
