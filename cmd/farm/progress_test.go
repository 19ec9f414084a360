package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
)

func TestPlainProgress(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &plainProgress{w: &out, every: 5 * time.Second, now: func() time.Time { return now }, start: now}
	for i, step := range []time.Duration{0, time.Second, 2 * time.Second, 5 * time.Second, 100 * time.Millisecond, 5 * time.Second} {
		now = now.Add(step)
		p.Set(int64(10*i), 100, "rendering (0 failed)")
	}
	p.Finish()
	want := "rendering (0 failed): 0/100 finished (0%) after 0s\n" +
		"rendering (0 failed): 30/100 finished (30%) after 8s\n" +
		"rendering (0 failed): 50/100 finished (50%) after 13s\n"
	if out.String() != want {
		t.Errorf("plain progress:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	p.Set(100, 100, "rendering (0 failed)")
	p.Finish()
	if got := strings.Count(out.String(), "\n"); got != 1 || strings.Contains(out.String(), "\r") {
		t.Errorf("finish after a printed set: %q, want exactly one line", out.String())
	}

	if _, ok := newProgress(&out, 10, false).(*plainProgress); !ok {
		t.Error("a buffer (not a terminal) got a live bar")
	}
	if _, ok := newProgress(&out, 10, true).(silentProgress); !ok {
		t.Error("quiet progress is not silent")
	}
}

// `farm submit --wait` with stderr not a terminal prints plain lines (no
// carriage-return frames); with --quiet it prints the batch id and nothing
// else but the exit's reason. A batch with canceled jobs exits 1.
func TestSubmitWaitOutput(t *testing.T) {
	url, q := migratedDB(t)
	for _, quiet := range []bool{false, true} {
		stdout, stderr := newLogBuffer(), newLogBuffer()
		args := []string{"farm", "submit", "https://example.com/a", "https://example.com/b", "--wait"}
		if quiet {
			args = append(args, "--quiet")
		}
		done := make(chan int, 1)
		go func() {
			done <- realMain(args, &environment{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr,
				getenv: func(k string) string { return map[string]string{"FARM_DATABASE_URL": url}[k] }})
		}()
		// Finish the batch by canceling it once submit has printed it.
		batch := submittedBatch(t, stdout, stderr, quiet)
		if _, err := q.CancelBatch(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		// Canceled jobs did not complete: the exit status says so.
		if code := <-done; code != exitError || !strings.Contains(stderr.String(), "2 of 2 jobs canceled") {
			t.Fatalf("quiet=%v: exit %d, stderr %q; want %d saying the jobs were canceled", quiet, code, stderr.String(), exitError)
		}
		if quiet {
			if stdout.String() != batch+"\n" || strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("--quiet --wait printed stdout %q, stderr %q; want only the batch id, and the exit's reason", stdout.String(), stderr.String())
			}
			continue
		}
		if strings.Contains(stderr.String(), "\r") || !strings.Contains(stderr.String(), "rendering (0 failed): ") {
			t.Errorf("non-terminal progress: %q, want plain lines", stderr.String())
		}
		if !strings.Contains(stdout.String(), "0 completed, 0 failed, 2 canceled") {
			t.Errorf("summary: %q", stdout.String())
		}
	}
}

// submittedBatch waits for a running farm submit to print its batch id.
func submittedBatch(t *testing.T, stdout, stderr *lockedBuffer, quiet bool) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out := stdout.String()
		if quiet && strings.HasSuffix(out, "\n") {
			return strings.TrimSpace(out)
		} else if i := strings.Index(out, " as batch "); i >= 0 && strings.HasSuffix(out, "\n") {
			return strings.TrimSpace(out[i+len(" as batch "):])
		}
		if time.Now().After(deadline) {
			t.Fatalf("submit printed no batch: %q %q", stdout.String(), stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// `farm submit --wait` of one job whose followed links gave two jobs, one
// of which failed, exits 1 (every job of the batch must complete) and says
// that none of the 1 submitted job failed and 1 of the 2 followed did: it
// said "1 of 1 jobs failed", counting a followed job against the submitted.
func TestSubmitWaitCountsFollowedJobsApart(t *testing.T) {
	url, q := migratedDB(t)
	ctx := context.Background()
	stdout, stderr := newLogBuffer(), newLogBuffer()
	done := make(chan int, 1)
	go func() {
		done <- realMain([]string{"farm", "submit", "--wait", "--follow", "a", "--follow-any-host", "http://seed.example/"},
			&environment{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr,
				getenv: func(k string) string { return map[string]string{"FARM_DATABASE_URL": url}[k] }})
	}()
	submittedBatch(t, stdout, stderr, false)
	// Work the batch by hand: the seed completes with two links, one of
	// whose jobs completes and the other fails.
	if _, _, err := q.Register(ctx, jobqueue.NodeInfo{ID: "n1", Capacity: 6}); err != nil {
		t.Fatal(err)
	}
	claim := func(want int) []jobqueue.Job {
		t.Helper()
		if _, err := q.Assign(ctx, "n1", 6); err != nil {
			t.Fatal(err)
		}
		jobs, err := q.Claim(ctx, "n1", 6)
		if err != nil || len(jobs) != want {
			t.Fatalf("claim: %d jobs, %v; want %d", len(jobs), err, want)
		}
		return jobs
	}
	seed := claim(1)[0]
	if err := completeJob(ctx, q, seed.ID, "n1", jobqueue.Result{FinalURL: seed.Spec.URL, Status: 200,
		Links: []string{"http://fine.example/", "http://refused.example/"}}); err != nil {
		t.Fatal(err)
	}
	children := claim(2)
	if err := completeJob(ctx, q, children[0].ID, "n1", jobqueue.Result{FinalURL: children[0].Spec.URL, Status: 200}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Incarnation(jobqueue.Node{ID: "n1"}).Fail(ctx, children[1].ID, "refused", "destination_refused", false); err != nil {
		t.Fatal(err)
	}
	code := <-done
	if want := "0 of 1 submitted jobs failed; 1 of 2 followed jobs failed (see: farm results --batch"; code != exitError || !strings.Contains(stderr.String(), want) {
		t.Errorf("exit %d, stderr %q; want %d saying %q", code, stderr.String(), exitError, want)
	}
	if want := "2 completed, 1 failed, 0 canceled in "; !strings.Contains(stdout.String(), want) || !strings.Contains(stdout.String(), "(1 submitted, 2 followed)\n") {
		t.Errorf("summary %q, want %q and (1 submitted, 2 followed)", stdout.String(), want)
	}
}

// The end of farm submit --wait counts the submitted jobs and the followed
// ones each against its own number, and exits 0 only when every job of
// the batch, followed ones too, completed.
func TestWaitVerdict(t *testing.T) {
	counts := func(completed, failed, canceled int64) jobqueue.BatchCounts {
		return jobqueue.BatchCounts{Total: completed + failed + canceled, By: map[jobqueue.State]int64{
			jobqueue.StateCompleted: completed, jobqueue.StateFailed: failed, jobqueue.StateCanceled: canceled}}
	}
	for _, tc := range []struct {
		name           string
		all, submitted jobqueue.BatchCounts
		want           string // "": no error
	}{
		{"all completed", counts(3, 0, 0), counts(3, 0, 0), ""},
		{"a crawl all completed", counts(5, 0, 0), counts(1, 0, 0), ""},
		{"one failed", counts(2, 1, 0), counts(2, 1, 0), "1 of 3 jobs failed (see: farm results --batch B --state failed)"},
		{"failed and canceled", counts(1, 1, 1), counts(1, 1, 1), "1 of 3 jobs failed, 1 canceled (see: farm results --batch B --state failed,canceled)"},
		{"canceled", counts(0, 0, 2), counts(0, 0, 2), "2 of 2 jobs canceled (see: farm results --batch B --state canceled)"},
		{"a followed job failed", counts(2, 1, 0), counts(1, 0, 0), "0 of 1 submitted jobs failed; 1 of 2 followed jobs failed (see: farm results --batch B --state failed)"},
		{"two followed jobs failed", counts(1, 2, 0), counts(1, 0, 0), "0 of 1 submitted jobs failed; 2 of 2 followed jobs failed (see: farm results --batch B --state failed)"},
		{"both failed", counts(3, 2, 0), counts(1, 1, 0), "1 of 2 submitted jobs failed; 1 of 3 followed jobs failed (see: farm results --batch B --state failed)"},
		{"the seed failed after its links", counts(2, 1, 0), counts(0, 1, 0), "1 of 1 submitted jobs failed; 0 of 2 followed jobs failed (see: farm results --batch B --state failed)"},
		{"a followed job canceled", counts(2, 0, 1), counts(1, 0, 0), "0 of 1 submitted jobs failed; 1 of 2 followed jobs canceled (see: farm results --batch B --state canceled)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := waitVerdict("B", tc.all, tc.submitted)
			if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
				t.Errorf("waitVerdict = %v, want %q", err, tc.want)
			}
		})
	}
}

// The plain progress line rounds down: 100% only when all are finished.
func TestPercentDoneRoundsDown(t *testing.T) {
	for _, tc := range []struct{ done, total, want int64 }{
		{0, 0, 0}, {0, 300, 0}, {1, 300, 0}, {3, 300, 1}, {299, 300, 99}, {300, 300, 100}, {1999, 2000, 99}, {2, 3, 66},
	} {
		if got := percentDone(tc.done, tc.total); got != tc.want {
			t.Errorf("percentDone(%d, %d) = %d, want %d", tc.done, tc.total, got, tc.want)
		}
	}
	var b strings.Builder
	p := &plainProgress{w: &b, every: time.Hour, now: time.Now, start: time.Now()}
	p.Set(299, 300, "rendering")
	if !strings.Contains(b.String(), "299/300 finished (99%)") {
		t.Errorf("plain progress %q, want 299/300 at 99%%", b.String())
	}
}
