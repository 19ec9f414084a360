package jobqueue

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestConfigRule: jobqueue's config structs follow the project's rule for
// numbers: 0 takes the default, a negative value panics naming the field
// (New, NewElector and NewListener return no error; a negative interval
// is a programming error, like a nil pool).
func TestConfigRule(t *testing.T) {
	d := Config{}.withDefaults()
	if d.BackoffBase != DefaultBackoffBase || d.BackoffMax != DefaultBackoffMax || d.Lease != DefaultLease ||
		d.StaleAfter != DefaultStaleAfter || d.ResultLimits != DefaultResultLimits() {
		t.Errorf("zero Config = %+v, want the defaults", d)
	}
	if got := (Config{Lease: time.Minute}).withDefaults().Lease; got != time.Minute {
		t.Errorf("Lease 1m became %v", got)
	}
	panics := []struct {
		name, field string
		f           func()
	}{
		{"queue", "Lease", func() { Config{Lease: -time.Second}.withDefaults() }},
		{"queue", "BackoffMax", func() { Config{BackoffMax: -1}.withDefaults() }},
		{"result limits", "DataBytes", func() { Config{ResultLimits: ResultLimits{DataBytes: -1}}.withDefaults() }},
		{"elector", "CheckInterval", func() { NewElector(nil, ElectorConfig{CheckInterval: -time.Second}) }},
		{"listener", "RetryMin", func() { NewListener(nil, ListenerConfig{RetryMin: -1}) }},
		{"listener", "Buffer", func() { NewListener(nil, ListenerConfig{Buffer: -3}) }},
	}
	for _, tt := range panics {
		t.Run(tt.name+"/"+tt.field, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), tt.field) {
					t.Errorf("panic %v, want one naming %s", r, tt.field)
				}
			}()
			tt.f()
		})
	}
	e := NewElector(nil, ElectorConfig{})
	if e.cfg.RetryInterval != time.Second || e.cfg.CheckInterval != time.Second || e.cfg.Key != DefaultLeaderKey {
		t.Errorf("zero ElectorConfig = %+v, want 1 s, 1 s and the default key", e.cfg)
	}
	l := NewListener(nil, ListenerConfig{RetryMin: 10 * time.Second})
	if l.cfg.Buffer != 64 || l.cfg.RetryMax != 10*time.Second {
		t.Errorf("ListenerConfig{RetryMin: 10s} = %+v, want buffer 64 and a ceiling not under the floor", l.cfg)
	}
}
