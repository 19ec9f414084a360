// Package backoff is the doubling delay after a count of failures in a
// row, which the farm's restarters share: the fleet's restarts of a
// crashed process, a command's waits for its database at start, the
// supervisor's Chrome boots. (Loops that keep their last pause double it
// in place, capped at each step: min(2*pause, max).) Jitter spreads the
// retries of many processes that failed together.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Doubling is the delay before the retry that follows `failures` earlier
// consecutive failures: min, 2·min, 4·min, … capped at max. It doubles
// while under max, and never past it, rather than shifting min by
// failures, which overflows into a negative delay (no delay at all) after
// enough failures.
func Doubling(failures int, min, max time.Duration) time.Duration {
	d := min
	for i := 0; i < failures && d < max; i++ {
		if d > max/2 {
			return max
		}
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

// Jitter is a delay drawn evenly from [d/2, d]: what a process that
// retries against a server many others use waits, so that a fleet that
// failed at one moment (the producer restarted, the database failed over)
// does not come back in lockstep, at every doubling of its pause.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d-d/2+1)
}
