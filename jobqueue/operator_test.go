package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
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
