package backoff

import (
	"testing"
	"time"
)

func TestDoubling(t *testing.T) {
	tests := []struct {
		failures int
		min, max time.Duration
		want     time.Duration
	}{
		{0, 100 * time.Millisecond, time.Second, 100 * time.Millisecond},
		{1, 100 * time.Millisecond, time.Second, 200 * time.Millisecond},
		{2, 100 * time.Millisecond, time.Second, 400 * time.Millisecond},
		{3, 100 * time.Millisecond, time.Second, 800 * time.Millisecond},
		{4, 100 * time.Millisecond, time.Second, time.Second},
		{50, 100 * time.Millisecond, time.Second, time.Second},
		// Far past where min<<failures overflows int64.
		{34, time.Second, time.Minute, time.Minute},
		{1000, time.Second, time.Minute, time.Minute},
		{3, 1 << 62, 1<<63 - 1, 1<<63 - 1},
	}
	for _, tt := range tests {
		if got := Doubling(tt.failures, tt.min, tt.max); got != tt.want {
			t.Errorf("Doubling(%d, %v, %v) = %v, want %v", tt.failures, tt.min, tt.max, got, tt.want)
		}
	}
}

// Jitter stays within [d/2, d] and spreads its draws over it.
func TestJitter(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 2, 3, 100 * time.Millisecond, 30 * time.Second} {
		lo, hi := d, time.Duration(0)
		for range 1000 {
			j := Jitter(d)
			if j < d/2 || j > d {
				t.Fatalf("Jitter(%v) = %v, outside [%v, %v]", d, j, d/2, d)
			}
			lo, hi = min(lo, j), max(hi, j)
		}
		if d >= 100 && hi-lo < d/4 {
			t.Errorf("Jitter(%v) drew only within [%v, %v] in 1,000 draws", d, lo, hi)
		}
	}
}
