// Package outage keeps the account of a call that fails again and again —
// a node's wake-up poll, its heartbeat through a database outage — so that
// its log says when the failures start, reminds at a bounded rate while
// they go on, and says when the call answers again, after how long and how
// many attempts: one line a minute for a node whose producer is down for an
// hour, not one per retry, and never silence.
package outage

import "time"

// DefaultEvery is how often a Tracker whose Every is 0 asks for a reminder
// while the failures go on.
const DefaultEvery = time.Minute

// Say is what a failure should log.
type Say int

const (
	Nothing  Say = iota // said recently enough
	First               // the first failure after a success (or ever)
	Reminder            // still failing, Every after the last line
)

// Tracker follows one call's failures. Its zero value is ready; it is not
// safe for concurrent use.
type Tracker struct {
	// Every is the time between two lines while the call fails; 0:
	// DefaultEvery.
	Every time.Duration

	failing  bool
	since    time.Time // the first failure of the outage
	said     time.Time // the last line asked for
	failures int64
}

// Fail records a failure at now and says what to log about it.
func (t *Tracker) Fail(now time.Time) Say {
	t.failures++
	if !t.failing {
		t.failing, t.since, t.said = true, now, now
		return First
	}
	every := t.Every
	if every <= 0 {
		every = DefaultEvery
	}
	if now.Sub(t.said) >= every {
		t.said = now
		return Reminder
	}
	return Nothing
}

// Failing reports whether the last call recorded failed.
func (t *Tracker) Failing() bool { return t.failing }

// Failures is the number of failures of the current outage (0 when none).
func (t *Tracker) Failures() int64 { return t.failures }

// For is how long the current outage has lasted at now (0 when none).
func (t *Tracker) For(now time.Time) time.Duration {
	if !t.failing {
		return 0
	}
	return max(now.Sub(t.since), 0)
}

// Succeed records a success at now. After failures it reports how many
// there were and how long the outage lasted (from its first failure to
// now), with ended set: the call answers again, which is worth a line.
func (t *Tracker) Succeed(now time.Time) (failures int64, lasted time.Duration, ended bool) {
	if !t.failing {
		return 0, 0, false
	}
	failures, lasted = t.failures, t.For(now)
	*t = Tracker{Every: t.Every}
	return failures, lasted, true
}
