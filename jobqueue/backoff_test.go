package jobqueue

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name     string
		attempts int
		base     time.Duration
		max      time.Duration
		u        float64
		want     time.Duration
	}{
		{"first retry, no jitter draw", 1, 10 * s, 600 * s, 0, 5 * s},
		{"first retry, top of range", 1, 10 * s, 600 * s, 0.999999999, 10*s - 10*time.Nanosecond},
		{"first retry, middle", 1, 10 * s, 600 * s, 0.5, 7500 * time.Millisecond},
		{"doubles", 2, 10 * s, 600 * s, 0, 10 * s},
		{"doubles again", 3, 10 * s, 600 * s, 0, 20 * s},
		{"capped", 8, 10 * s, 600 * s, 0, 300 * s},
		{"capped top", 8, 10 * s, 600 * s, 1, 600 * s},
		{"huge attempt count does not overflow", 500, 10 * s, 600 * s, 1, 600 * s},
		{"attempt 63 does not overflow", 63, 10 * s, 600 * s, 0, 300 * s},
		{"zero attempts count as one", 0, 10 * s, 600 * s, 0, 5 * s},
		{"u clamped above", 1, 10 * s, 600 * s, 7, 10 * s},
		{"u clamped below", 1, 10 * s, 600 * s, -3, 5 * s},
		{"max below base", 3, 10 * s, s, 0, 5 * s},
		{"no base, no delay", 3, 0, 600 * s, 0.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Backoff(tt.attempts, tt.base, tt.max, tt.u)
			if d := got - tt.want; d < -time.Microsecond || d > time.Microsecond {
				t.Fatalf("Backoff(%d, %v, %v, %v) = %v, want %v", tt.attempts, tt.base, tt.max, tt.u, got, tt.want)
			}
		})
	}
}

func TestBackoffBounds(t *testing.T) {
	// For every attempt and draw the delay stays within [step/2, step].
	base, maxDelay := 3*time.Second, 5*time.Minute
	for attempts := 1; attempts <= MaxMaxAttempts; attempts++ {
		step := min(base<<(attempts-1), maxDelay)
		for _, u := range []float64{0, 0.25, 0.5, 0.75, 0.9999} {
			d := Backoff(attempts, base, maxDelay, u)
			if d < step/2 || d > step {
				t.Fatalf("attempt %d u %v: %v outside [%v, %v]", attempts, u, d, step/2, step)
			}
		}
	}
}
