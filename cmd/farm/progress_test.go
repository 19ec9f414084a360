package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
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
		var batch string
		deadline := time.Now().Add(time.Minute)
		for batch == "" {
			out := stdout.String()
			if quiet && strings.HasSuffix(out, "\n") {
				batch = strings.TrimSpace(out)
			} else if i := strings.Index(out, " as batch "); i >= 0 && strings.HasSuffix(out, "\n") {
				batch = strings.TrimSpace(out[i+len(" as batch "):])
			}
			if time.Now().After(deadline) {
				t.Fatalf("submit printed no batch: %q %q", stdout.String(), stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
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
