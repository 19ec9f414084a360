package web

import (
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// TestConfigsFollowTheZeroRule: a zero field takes its default, and a
// negative one is refused with the field's name (a panic: NewServer and
// NewRecorder have no error to return, and the command checks its flags).
func TestConfigsFollowTheZeroRule(t *testing.T) {
	q := jobqueue.New(nil, jobqueue.Config{})
	c := Config{Queue: q}.withDefaults()
	if c.MaxBodyBytes != DefaultMaxBodyBytes || c.ChartWindow != DefaultChartWindow || c.ChartStep != DefaultChartStep ||
		c.StaleAfter != DefaultStaleAfter {
		t.Errorf("zero Config after defaults: %+v", c)
	}
	r := NewRecorder(RecorderConfig{Queue: q})
	if r.cfg.Interval != DefaultSampleInterval || r.cfg.Retention != DefaultSampleRetention || r.cfg.PruneBatch != DefaultPruneBatch {
		t.Errorf("zero RecorderConfig after defaults: %+v", r.cfg)
	}
	panics := func(field string, f func()) {
		t.Helper()
		defer func() {
			if p := recover(); p == nil || !strings.Contains(p.(string), field+" must not be negative") {
				t.Errorf("%s negative: panic %v, want one naming the field", field, p)
			}
		}()
		f()
	}
	panics("MaxBodyBytes", func() { NewServer(Config{Queue: q, MaxBodyBytes: -1}) })
	panics("ChartWindow", func() { NewServer(Config{Queue: q, ChartWindow: -time.Hour}) })
	panics("ChartStep", func() { NewServer(Config{Queue: q, ChartStep: -1}) })
	panics("StaleAfter", func() { NewServer(Config{Queue: q, StaleAfter: -time.Second}) })
	panics("Interval", func() { NewRecorder(RecorderConfig{Queue: q, Interval: -time.Second}) })
	panics("Retention", func() { NewRecorder(RecorderConfig{Queue: q, Retention: -1}) })
	panics("PruneBatch", func() { NewRecorder(RecorderConfig{Queue: q, PruneBatch: -5}) })
}
