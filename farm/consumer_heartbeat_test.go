package farm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestUnitHeartbeatSaysWhenItAnswersAgain: a database outage's first failed
// heartbeat is a warning, and later ones are not, until a minute has passed
// (internal/outage: one line a minute, not one a heartbeat); the first
// heartbeat that succeeds after them says so once, at info, with how many
// failed and for how long, and later successes say nothing.
func TestUnitHeartbeatSaysWhenItAnswersAgain(t *testing.T) {
	t.Parallel()
	down := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	type line struct {
		level    zapcore.Level
		msg      string
		failures int64
	}
	warn := func(n int64) line { return line{zap.WarnLevel, "heartbeat failed", n} }
	back := func(n int64) line { return line{zap.InfoLevel, "heartbeat answered again", n} }
	for _, tt := range []struct {
		name  string
		beats []error // each heartbeat's outcome
		want  []line
	}{
		{"healthy: silent", []error{nil, nil, nil}, nil},
		{"an outage and its end", []error{nil, down, down, down, nil, nil},
			[]line{warn(1), back(3)}},
		{"two outages, counted apart", []error{down, nil, down, down, nil},
			[]line{warn(1), back(1), warn(1), back(2)}},
		{"still down: no line of recovery", []error{down, down}, []line{warn(1)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fq := &fakeQueue{}
			c := fakeConsumer(t, fq, 6, Off)
			core, logs := observer.New(zap.InfoLevel)
			c.log = zap.New(core)
			for _, err := range tt.beats {
				fq.mu.Lock()
				fq.beatErr = err
				fq.mu.Unlock()
				c.heartbeat(context.Background())
			}
			var got []line
			for _, e := range logs.All() {
				m := e.ContextMap()
				n, _ := m["failures"].(int64)
				got = append(got, line{e.Level, e.Message, n})
				key := "failing_for"
				if e.Level == zap.InfoLevel {
					key = "failed_for"
				}
				if d, ok := m[key].(time.Duration); !ok || d < 0 {
					t.Errorf("%q: %s = %v, want a duration", e.Message, key, m[key])
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("log lines:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestUnitClaimsSayWhenTheyAnswerAgain: the first failed claim of an outage
// is a warning (then one a minute), and the first claim that answers after
// them says so once, counting them, as the heartbeat does.
func TestUnitClaimsSayWhenTheyAnswerAgain(t *testing.T) {
	down := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	fq := &fakeQueue{jobs: fakeJobs(10), perClaim: 2, claimErrs: []error{down, down}}
	c := fakeConsumer(t, fq, 6, 4)
	c.cfg.PollInterval = 1
	core, logs := observer.New(zap.InfoLevel)
	c.log = zap.New(core)
	if r := runLoop(t, c); r != stopExitDue {
		t.Errorf("loop stopped for %v, want exit-after-jobs", r)
	}
	var got []string
	for _, e := range logs.All() {
		if e.Message == "claim failed" || e.Message == "claims answered again" {
			n, _ := e.ContextMap()["failures"].(int64)
			got = append(got, fmt.Sprintf("%s %d", e.Message, n))
		}
	}
	want := []string{"claim failed 1", "claims answered again 2"}
	if !slices.Equal(got, want) {
		t.Errorf("log lines %q, want %q", got, want)
	}
}
