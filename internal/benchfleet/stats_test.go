package main

import (
	"testing"
	"time"
)

// TestStatsCountUnstartedJobs: jobs submitted in the window that never
// started are the slowest; the submit→start percentiles count them as
// waiting at least until the result is taken, not leave them out.
func TestStatsCountUnstartedJobs(t *testing.T) {
	s := stats{submits: map[int64]time.Time{}, starts: map[int64]time.Time{}}
	t0 := time.Now().Add(-time.Second)
	for id := int64(1); id <= 100; id++ {
		s.submitted(id, t0)
		if id <= 95 {
			s.started(id, t0.Add(10*time.Millisecond))
		}
	}
	r := s.result()
	if r.Jobs != 95 || r.Unstarted != 5 || r.StartP50Ms != 10 || r.StartP99Ms < 1000 {
		t.Fatalf("jobs %d, not started %d, p50 %.1f ms, p99 %.1f ms; want 95, 5, 10, at least 1000", r.Jobs, r.Unstarted, r.StartP50Ms, r.StartP99Ms)
	}
}

func TestPctNearestRank(t *testing.T) {
	d := make([]time.Duration, 200)
	for i := range d {
		d[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, tc := range []struct {
		p    float64
		want float64
	}{{0.5, 100}, {0.99, 198}, {1, 200}} {
		if got := pct(append([]time.Duration(nil), d...), tc.p); got != tc.want {
			t.Errorf("p%v of 1..200 ms = %v, want %v", tc.p, got, tc.want)
		}
	}
}
