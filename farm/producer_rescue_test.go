package farm

import (
	"testing"
	"time"
)

// TestRescueGate: the rescue runs only once the database has answered for
// the stale time without a break, counted again after every failure, so a
// database outage every node saw does not get the whole fleet declared
// lost.
func TestRescueGate(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	type try struct {
		at   time.Duration
		ok   bool
		want bool
	}
	for _, tc := range []struct {
		name  string
		tries []try
	}{
		{"a new leader waits the stale time", []try{{0, true, false}, {10 * time.Second, true, false}, {15 * time.Second, true, true}, {20 * time.Second, true, true}}},
		{"an outage starts the wait again", []try{{0, true, false}, {15 * time.Second, true, true}, {16 * time.Second, false, false},
			{40 * time.Second, true, false}, {50 * time.Second, true, false}, {55 * time.Second, true, true}}},
		{"a database that never answers", []try{{0, false, false}, {time.Minute, false, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := rescueGate{staleAfter: 15 * time.Second}
			for _, tr := range tc.tries {
				if got := g.answered(t0.Add(tr.at), tr.ok); got != tr.want {
					t.Fatalf("at +%v (answered %v): rescue %v, want %v", tr.at, tr.ok, got, tr.want)
				}
			}
		})
	}
}
