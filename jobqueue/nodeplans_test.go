package jobqueue

import (
	"context"
	"testing"
)

// TestNodePathReadsNoTableOnPlansOfAnEmptyTable: a node's connection
// prepares its claim and its completion on the table it first meets — a
// new farm's, empty — and PostgreSQL keeps a prepared statement's generic
// plan until the next ANALYZE of jobs. Planned on an empty table, the claim
// read the whole table twice and the completion once for every call until
// autovacuum analyzed it again (customPlansSQL). Here autovacuum is off, the
// plans are made on the empty, analyzed table, and the claim and the
// completion of 6 jobs among 3,000 must read only about the rows they change
// (6,000 and 6,001 rows without custom plans).
func TestNodePathReadsNoTableOnPlansOfAnEmptyTable(t *testing.T) {
	ctx := context.Background()
	_, shared := newTestQueue(t, Config{})
	// Analyzed while empty, as autovacuum does a new farm's table, and not
	// again during the test.
	for _, sql := range []string{`ALTER TABLE jobs SET (autovacuum_enabled = off)`, `ANALYZE jobs`} {
		if _, err := shared.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	q, pool := singleConnQueue(t, shared, Config{})
	mustRegister(t, q, "n1", 6)
	// More executions than the five custom plans PostgreSQL makes before it
	// considers the generic one, on the empty table.
	for range 8 {
		jobs, err := q.Claim(ctx, "n1", 6)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) != 0 {
			t.Fatalf("claimed %d jobs of none", len(jobs))
		}
		out, err := q.CompleteMany(ctx, []Completion{{JobID: 1 << 40, NodeID: "n1", Result: Result{Status: 200}}})
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Err == nil {
			t.Fatal("completed a job that does not exist")
		}
	}
	mustEnqueue(t, q, pageSpecs(3000, "big.example")...)
	rep, err := q.AssignPolite(ctx, func(string) HostPolicy { return HostPolicy{} }, 6, AssignSpread)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total() != 6 {
		t.Fatalf("assigned %d jobs, want 6", rep.Total())
	}

	before := jobsRowsRead(t, pool)
	jobs, err := q.Claim(ctx, "n1", 6)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 6 {
		t.Fatalf("claimed %d jobs, want 6", len(jobs))
	}
	if read := jobsRowsRead(t, pool) - before; read > 100 {
		t.Errorf("a claim of 6 jobs read %d rows of jobs (3,000 in the table)", read)
	}

	items := make([]Completion, len(jobs))
	for i, j := range jobs {
		items[i] = Completion{JobID: j.ID, NodeID: "n1", Result: Result{Status: 200, FinalURL: j.Spec.URL}}
	}
	before = jobsRowsRead(t, pool)
	out, err := q.CompleteMany(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		if o.Err != nil {
			t.Fatalf("job %d: %v", o.JobID, o.Err)
		}
	}
	if read := jobsRowsRead(t, pool) - before; read > 100 {
		t.Errorf("a completion of 6 jobs read %d rows of jobs (3,000 in the table)", read)
	}
}
