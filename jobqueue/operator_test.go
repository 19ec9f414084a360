package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// Export streams across page boundaries in id order, filters by batch and
// state, attaches results to completed jobs only, and leaves out the large
// columns unless asked.
func TestExportResultsAndBatchCounts(t *testing.T) {
	ctx := context.Background()
	q, _ := newTestQueue(t, Config{})
	mustRegister(t, q, "n1", 1000)
	const n = exportPage + 37 // more than one page
	batchA, idsA, err := q.Enqueue(ctx, pageSpecs(n, "a.example"))
	if err != nil {
		t.Fatal(err)
	}
	_, idsB, err := q.Enqueue(ctx, pageSpecs(5, "b.example"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Assign(ctx, "n1", 1000); err != nil {
		t.Fatal(err)
	}
	jobs, err := q.Claim(ctx, "n1", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != n+5 {
		t.Fatalf("claimed %d jobs, want %d", len(jobs), n+5)
	}
	failed := map[int64]bool{idsA[3]: true, idsA[exportPage+1]: true}
	var completions []Completion
	for _, j := range jobs {
		if failed[j.ID] {
			if _, err := q.Fail(ctx, j.ID, "n1", "boom", "extract", false); err != nil {
				t.Fatal(err)
			}
			continue
		}
		completions = append(completions, Completion{JobID: j.ID, NodeID: "n1", Result: Result{
			FinalURL: j.Spec.URL, Status: 200, Title: "t", Data: json.RawMessage(`{"n":1}`),
			HTML: "<html></html>", Screenshot: []byte{0x89, 'P', 'N', 'G'},
		}})
	}
	if _, err := q.CompleteMany(ctx, completions); err != nil {
		t.Fatal(err)
	}

	counts, err := q.BatchCounts(ctx, batchA)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Total != n || counts.By[StateCompleted] != n-2 || counts.By[StateFailed] != 2 || counts.Finished() != n {
		t.Fatalf("batch counts = %+v", counts)
	}

	var got []ExportRow
	err = q.ExportResults(ctx, ExportFilter{BatchID: batchA}, func(r ExportRow) error { got = append(got, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("exported %d rows, want %d", len(got), n)
	}
	for i, r := range got {
		if r.Job.ID != idsA[i] {
			t.Fatalf("row %d is job %d, want %d (id order)", i, r.Job.ID, idsA[i])
		}
		if failed[r.Job.ID] {
			if r.Result != nil || r.Job.State != StateFailed || r.Job.LastError != "boom" {
				t.Errorf("failed job %d exported as %+v / %+v", r.Job.ID, r.Job, r.Result)
			}
			continue
		}
		if r.Result == nil || r.Result.Status != 200 || string(r.Result.Data) != `{"n": 1}` && string(r.Result.Data) != `{"n":1}` {
			t.Fatalf("completed job %d exported with result %+v", r.Job.ID, r.Result)
		}
		if r.Result.HTML != "" || r.Result.Screenshot != nil {
			t.Fatalf("large columns exported without being asked for")
		}
	}

	var failedOnly []int64
	err = q.ExportResults(ctx, ExportFilter{States: []State{StateFailed}, WithHTML: true}, func(r ExportRow) error {
		failedOnly = append(failedOnly, r.Job.ID)
		return nil
	})
	if err != nil || len(failedOnly) != 2 {
		t.Fatalf("failed-only export: %v, %v", failedOnly, err)
	}

	var withBlobs int
	err = q.ExportResults(ctx, ExportFilter{States: []State{StateCompleted}, WithHTML: true, WithScreenshot: true,
		FinishedFrom: time.Now().Add(-time.Hour)}, func(r ExportRow) error {
		if r.Result.HTML == "<html></html>" && len(r.Result.Screenshot) == 4 {
			withBlobs++
		}
		return nil
	})
	if err != nil || withBlobs != n-2+len(idsB) {
		t.Fatalf("export with blobs: %d rows with html+screenshot, err %v", withBlobs, err)
	}

	stop := errors.New("stop")
	calls := 0
	err = q.ExportResults(ctx, ExportFilter{}, func(ExportRow) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("callback error: err=%v after %d calls", err, calls)
	}
	if err := q.ExportResults(ctx, ExportFilter{States: []State{"bogus"}}, func(ExportRow) error { return nil }); err == nil {
		t.Fatal("unknown state accepted")
	}
}

// TestBatchCountsReadTheIndexAlone: a batch's counts by state come from
// the batch index, without a heap fetch per job (migration 018): at a
// million jobs a batch, the fetches made the read 333 ms instead of 96.
func TestBatchCountsReadTheIndexAlone(t *testing.T) {
	ctx := context.Background()
	q, pool := newTestQueue(t, Config{})
	const batch = "6d1f6a1e-0000-4000-8000-000000000001"
	// A batch of 2,000 finished jobs, inserted together, among 20,000 of
	// another batch; committed synchronously: the test server commits
	// asynchronously, and VACUUM marks no page all-visible until the
	// commit's WAL is flushed.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO jobs (batch_id, state, spec, host, attempts, finished_at, crawl_id)
		SELECT CASE WHEN g BETWEEN 10001 AND 12000 THEN $1::uuid ELSE '6d1f6a1e-0000-4000-8000-000000000002'::uuid END,
		       CASE WHEN g % 10 = 1 THEN 'failed' ELSE 'completed' END, '{"url":"https://a.example/"}', 'a.example', 1, now(), g
		FROM generate_series(1, 22000) g`, batch); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE jobs"); err != nil {
		t.Fatal(err)
	}
	// At this size the planner may as well read the batch's few heap
	// pages; what is checked is that the index alone can answer, as the
	// planner has it do for large batches.
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL enable_bitmapscan = off; SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	var plan string
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+batchCountsSQL, batch).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, `"Node Type": "Index Only Scan"`) || !strings.Contains(plan, `"Index Name": "jobs_batch_state_idx"`) ||
		!strings.Contains(plan, `"Heap Fetches": 0`) {
		t.Errorf("batch counts plan reads more than the batch index:\n%s", plan)
	}
	c, err := q.BatchCounts(ctx, batch)
	if err != nil || c.Total != 2000 || c.By[StateCompleted]+c.By[StateFailed] != 2000 {
		t.Errorf("BatchCounts = %+v, %v; want 2,000 finished", c, err)
	}
}
