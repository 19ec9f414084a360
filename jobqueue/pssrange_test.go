package jobqueue

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestNodeLoadPSSRange(t *testing.T) {
	tests := []struct {
		name           string
		load           NodeLoad
		wantLo, wantHi int64
	}{
		{"no range: the value stands for it", NodeLoad{ChromePSSBytes: 500}, 500, 500},
		{"a range around the value", NodeLoad{ChromePSSBytes: 500, ChromePSSMinBytes: 100, ChromePSSMaxBytes: 900}, 100, 900},
		{"widened to hold the value", NodeLoad{ChromePSSBytes: 950, ChromePSSMinBytes: 100, ChromePSSMaxBytes: 900}, 100, 950},
		{"ends swapped", NodeLoad{ChromePSSBytes: 500, ChromePSSMinBytes: 900, ChromePSSMaxBytes: 100}, 100, 900},
		{"a trough of zero: every Chrome gone", NodeLoad{ChromePSSBytes: 0, ChromePSSMinBytes: 0, ChromePSSMaxBytes: 800}, 0, 800},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if lo, hi := tt.load.pssRange(); lo != tt.wantLo || hi != tt.wantHi {
				t.Errorf("pssRange() = %d, %d; want %d, %d", lo, hi, tt.wantLo, tt.wantHi)
			}
		})
	}
}

// TestPSSRangeBetweenSamples: heartbeats widen the node's range until the
// recorder takes it into a sample and clears it, so each sample holds the
// range of the heartbeats since the previous one — a recycle between two
// samples is in the next one however many heartbeats came between.
func TestPSSRangeBetweenSamples(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	q, _ := newTestQueue(t, Config{Now: clock.Now})
	ctx := context.Background()
	mustRegister(t, q, "a", 6)
	start := clock.Now()
	beat := func(pss, lo, hi int64) {
		t.Helper()
		if _, err := q.Heartbeat(ctx, "a", NodeLoad{ChromePSSBytes: pss, ChromePSSMinBytes: lo, ChromePSSMaxBytes: hi}); err != nil {
			t.Fatal(err)
		}
	}
	node := func() string {
		t.Helper()
		n, err := q.GetNode(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(n.Load.ChromePSSBytes, n.Load.ChromePSSMinBytes, n.Load.ChromePSSMaxBytes)
	}
	record := func() {
		t.Helper()
		if rep, err := q.RecordSamples(ctx, 5*time.Second); err != nil || rep.Skipped {
			t.Fatalf("record: %+v, %v", rep, err)
		}
		clock.Advance(5 * time.Second)
	}

	// Three heartbeats between two samples: climb, recycle, climb again.
	beat(400, 300, 400)
	beat(150, 120, 900) // the peak before the kill, the trough after
	beat(250, 150, 250)
	if got := node(); got != "250 120 900" {
		t.Fatalf("node row before the sample: pss, min, max = %s, want 250 120 900", got)
	}
	record()
	if got := node(); got != "250 250 250" {
		t.Fatalf("node row after the sample: pss, min, max = %s, want the range cleared to 250 250 250", got)
	}
	// The next sample holds only its own heartbeats.
	beat(350, 250, 350)
	record()
	// No heartbeat before this sample: the value alone.
	record()

	_, np, err := q.Samples(ctx, start, 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range np {
		got = append(got, fmt.Sprint(p.ChromePSSBytes, p.ChromePSSMinBytes, p.ChromePSSMaxBytes))
	}
	if want := "[250 120 900 350 250 350 350 350 350]"; fmt.Sprint(got) != want {
		t.Fatalf("samples pss, min, max = %v, want %s", got, want)
	}

	// Buckets of two samples take the lowest min and the highest max.
	_, np, err = q.Samples(ctx, start, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(np) == 0 || np[0].ChromePSSMinBytes != 120 || np[0].ChromePSSMaxBytes != 900 {
		t.Fatalf("first 10 s bucket: %+v, want min 120, max 900", np)
	}

	// A new registration starts with no range.
	beat(700, 600, 800)
	if _, err := q.SetNodeState(ctx, "a", NodeExited); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, q, "a", 6)
	if got := node(); got != "0 0 0" {
		t.Fatalf("node row after registering again: %s, want 0 0 0", got)
	}
}
