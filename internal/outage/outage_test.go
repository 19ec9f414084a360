package outage

import (
	"testing"
	"time"
)

func TestTracker(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	type step struct {
		at      time.Duration // after t0
		ok      bool          // a success, else a failure
		say     Say           // a failure's
		ended   bool          // a success's
		count   int64         // a success's failures
		lasted  time.Duration // a success's
		failing bool          // after the step
	}
	for _, tt := range []struct {
		name  string
		every time.Duration
		steps []step
	}{
		{"successes say nothing", 0, []step{{at: 0, ok: true}, {at: time.Second, ok: true}}},
		{"first failure, then quiet within the minute", 0, []step{
			{at: 0, say: First, failing: true},
			{at: 10 * time.Second, say: Nothing, failing: true},
			{at: 59 * time.Second, say: Nothing, failing: true},
		}},
		{"a reminder a minute after the last line, not per failure", 0, []step{
			{at: 0, say: First, failing: true},
			{at: 30 * time.Second, say: Nothing, failing: true},
			{at: 60 * time.Second, say: Reminder, failing: true},
			{at: 90 * time.Second, say: Nothing, failing: true},
			{at: 119 * time.Second, say: Nothing, failing: true},
			{at: 120 * time.Second, say: Reminder, failing: true},
			{at: 121 * time.Second, ok: true, ended: true, count: 6, lasted: 121 * time.Second},
			{at: 122 * time.Second, ok: true},
		}},
		{"after a recovery the next failure is a first again", 0, []step{
			{at: 0, say: First, failing: true},
			{at: time.Second, ok: true, ended: true, count: 1, lasted: time.Second},
			{at: 2 * time.Second, say: First, failing: true},
			{at: 3 * time.Second, say: Nothing, failing: true},
			{at: 5 * time.Second, ok: true, ended: true, count: 2, lasted: 3 * time.Second},
		}},
		{"its own interval", 10 * time.Second, []step{
			{at: 0, say: First, failing: true},
			{at: 9 * time.Second, say: Nothing, failing: true},
			{at: 10 * time.Second, say: Reminder, failing: true},
		}},
		{"a clock stepping back lasts no negative time", 0, []step{
			{at: 10 * time.Second, say: First, failing: true},
			{at: 0, ok: true, ended: true, count: 1, lasted: 0},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := Tracker{Every: tt.every}
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				if s.ok {
					count, lasted, ended := tr.Succeed(now)
					if count != s.count || lasted != s.lasted || ended != s.ended {
						t.Errorf("step %d: Succeed = %d, %v, %v; want %d, %v, %v", i, count, lasted, ended, s.count, s.lasted, s.ended)
					}
				} else if got := tr.Fail(now); got != s.say {
					t.Errorf("step %d: Fail = %v, want %v", i, got, s.say)
				}
				if tr.Failing() != s.failing {
					t.Errorf("step %d: Failing = %v, want %v", i, tr.Failing(), s.failing)
				}
				if !s.failing && (tr.Failures() != 0 || tr.For(now) != 0) {
					t.Errorf("step %d: no outage, yet %d failures for %v", i, tr.Failures(), tr.For(now))
				}
			}
		})
	}
}
