package jobqueue

import (
	"math"
	"time"
)

// Backoff is the delay before a job that has failed attempts times may run
// again: base·2^(attempts-1), capped at maxDelay, with "equal jitter" — the
// upper half of the delay is scaled by u, a uniform draw from [0, 1) — so
// jobs that failed together (one bad host, one lost node) do not all come
// back at the same instant, yet none returns sooner than half its step.
// attempts below 1 count as 1.
func Backoff(attempts int, base, maxDelay time.Duration, u float64) time.Duration {
	if base <= 0 {
		return 0
	}
	if maxDelay < base {
		maxDelay = base
	}
	if attempts < 1 {
		attempts = 1
	}
	u = math.Min(math.Max(u, 0), 1)
	d := maxDelay
	// 2^62 overflows nothing but already exceeds any sane cap; stop doubling
	// as soon as the cap is reached.
	if attempts-1 < 62 {
		if step := base << (attempts - 1); step > 0 && step>>(attempts-1) == base && step < maxDelay {
			d = step
		}
	}
	half := d / 2
	return half + time.Duration(float64(d-half)*u)
}
