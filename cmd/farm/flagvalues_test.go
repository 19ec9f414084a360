package main

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/farm"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

// TestFlagValues: the value types every numeric flag is built on. A value
// is taken literally; off is off where the flag can be off; anything the
// setting cannot take is an error naming the flag, from the command line
// and from the environment alike.
func TestFlagValues(t *testing.T) {
	type vars struct {
		count, countOff     int
		dur, durOff, nonNeg time.Duration
	}
	parse := func(args []string, env map[string]string) (vars, error) {
		fs := newFlagSet("x", "", &bytes.Buffer{})
		var v vars
		fs.count(&v.count, "count", 3, 1, "")
		fs.countOrOff(&v.countOff, "count-or-off", 20, "")
		fs.positive(&v.dur, "dur", time.Second, "")
		fs.positiveOrOff(&v.durOff, "dur-or-off", time.Hour, "")
		fs.nonNegative(&v.nonNeg, "non-neg", time.Minute, "")
		err := fs.parse(args, func(k string) string { return env[k] })
		return v, err
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    vars
		wantErr string
	}{
		{"defaults", nil, nil, vars{3, 20, time.Second, time.Hour, time.Minute}, ""},
		{"values", []string{"--count", "7", "--count-or-off", "5", "--dur", "2s", "--dur-or-off", "72h", "--non-neg", "0s"}, nil,
			vars{7, 5, 2 * time.Second, 72 * time.Hour, 0}, ""},
		{"off", []string{"--count-or-off", "off", "--dur-or-off", "off"}, nil, vars{3, off, time.Second, off, time.Minute}, ""},
		{"off from the environment", nil, map[string]string{"FARM_COUNT_OR_OFF": "off", "FARM_DUR_OR_OFF": "off"},
			vars{3, off, time.Second, off, time.Minute}, ""},
		{"count 0", []string{"--count", "0"}, nil, vars{}, "--count 0: want a whole number ≥ 1"},
		{"count-or-off 0 is no count", []string{"--count-or-off", "0"}, nil, vars{}, "--count-or-off 0: want a whole number ≥ 1, or off"},
		{"count-or-off -1 is not off", []string{"--count-or-off", "-1"}, nil, vars{}, "--count-or-off -1: want"},
		{"count cannot be off", []string{"--count", "off"}, nil, vars{}, "--count off: want a whole number ≥ 1"},
		{"count not a number", []string{"--count", "six"}, nil, vars{}, "--count six"},
		{"dur 0", []string{"--dur", "0s"}, nil, vars{}, "--dur 0s: want a positive duration"},
		{"dur cannot be off", []string{"--dur", "off"}, nil, vars{}, "--dur off"},
		{"dur-or-off 0", []string{"--dur-or-off", "0"}, nil, vars{}, "--dur-or-off 0: want a positive duration such as 30s, or off"},
		{"dur-or-off negative", []string{"--dur-or-off", "-1h"}, nil, vars{}, "--dur-or-off -1h"},
		{"non-neg negative", []string{"--non-neg", "-1s"}, nil, vars{}, "--non-neg -1s: want a duration such as 30s, or 0"},
		{"non-neg cannot be off", []string{"--non-neg", "off"}, nil, vars{}, "--non-neg off"},
		{"0 from the environment, named", nil, map[string]string{"FARM_COUNT_OR_OFF": "0"}, vars{}, `FARM_COUNT_OR_OFF="0": --count-or-off 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(tc.args, tc.env)
			if tc.wantErr != "" {
				var ue *usageError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &ue) {
					t.Fatalf("err = %v, want a usage error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestOffFlagsReachTheConfigs: off becomes each config's Off, the flags' 0
// grace periods become Off where a config's 0 is its default, and the
// defaults --help shows are the configs' own.
func TestOffFlagsReachTheConfigs(t *testing.T) {
	fs := newFlagSet("consumer", "", &bytes.Buffer{})
	var o consumerOptions
	o.register(fs)
	if err := fs.parse([]string{"--chrome-recycle-jobs", "off", "--exit-after-jobs", "off", "--chrome-memory-ceiling-mb", "off", "--aws-protection-idle-after", "0s"}, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if _, auto := o.resolveMemoryCeiling(fstest.MapFS{}); auto {
		t.Error("off read a memory limit")
	}
	cfg := o.consumerConfig(jobqueue.New(nil, jobqueue.Config{}), zap.NewNop(), nil)
	if cfg.Supervisor.ChromeRecycleJobs != supervisor.Off || cfg.Supervisor.ExitAfterJobs != supervisor.Off ||
		cfg.Supervisor.MemoryCeilingBytes != supervisor.Off || cfg.ProtectorIdleAfter != farm.Off || cfg.DrainTimeout != farm.DefaultConsumerDrain {
		t.Errorf("consumer config = %+v", cfg)
	}

	fs = newFlagSet("producer", "", &bytes.Buffer{})
	var po producerOptions
	po.register(fs)
	if err := fs.parse(nil, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if po.retention != farm.DefaultRetention || po.nodeRetention != farm.DefaultNodeRetention || po.tick != farm.DefaultTick || po.assignBatch != farm.DefaultAssignBatch {
		t.Errorf("producer defaults: retention %v node retention %v tick %v assign batch %d", po.retention, po.nodeRetention, po.tick, po.assignBatch)
	}
	for _, tc := range []struct {
		args      []string
		retention time.Duration
		hostMax   int
		wantErr   string
	}{
		{[]string{"--retention", "off", "--host-max-concurrent", "off"}, farm.Off, 0, ""},
		{[]string{"--retention", "24h", "--host-max-concurrent", "2"}, 24 * time.Hour, 2, ""},
		{[]string{"--host-max-concurrent", "0"}, 0, 0, "--host-max-concurrent 0: want a whole number ≥ 1, or off"},
		{[]string{"--host-max-concurrent", "many"}, 0, 0, "--host-max-concurrent many: want a whole number ≥ 1, or off"},
		{[]string{"--autoscale-target", "0"}, 0, 0, "--autoscale-target 0"},
		// Checked before anything waits for the database.
		{[]string{"--autoscale", "gcp"}, 0, 0, `--autoscale: "gcp" is not none, aws or exec`},
		{[]string{"--autoscale", "aws"}, 0, 0, "--autoscale aws needs --aws-asg-name"},
	} {
		fs := newFlagSet("producer", "", &bytes.Buffer{})
		var po producerOptions
		po.register(fs)
		if err := fs.parse(tc.args, func(string) string { return "" }); err != nil {
			t.Fatal(err)
		}
		err := po.check()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err = %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		pol, _ := po.politeness()
		if err != nil || po.retention != tc.retention || pol.Default.MaxConcurrent != tc.hostMax {
			t.Errorf("%q: retention %v, host max %d, err %v", tc.args, po.retention, pol.Default.MaxConcurrent, err)
		}
	}
}

// TestEveryNumericFlagFollowsTheRule runs every command with each of its
// numeric flags (those whose default is a number, a duration or off) set
// to -5: each is a usage error naming the flag, before anything connects.
// Each flag that --help says can be off takes off, and refuses 0.
func TestEveryNumericFlagFollowsTheRule(t *testing.T) {
	env := map[string]string{"FARM_DATABASE_URL": "postgres://127.0.0.1:1/none", "FARM_DATABASE_WAIT": "0s"}
	flagLine := regexp.MustCompile(`(?m)^  --([a-z0-9-]+)  \[[^\]]*\](?: \(default ([^)]*)\))?\n      (.*)$`)
	numeric := regexp.MustCompile(`^(-?[0-9][0-9.]*[a-zµ]*|off|auto)$`)
	// Literal settings whose range includes -5: a priority.
	literal := map[string]bool{"submit priority": true}
	checked := 0
	for _, c := range commands() {
		_, _, help := farmRun(t, "", nil, c.name, "--help")
		for _, m := range flagLine.FindAllStringSubmatch(help, -1) {
			name, def, usage := m[1], m[2], m[3]
			if !numeric.MatchString(def) || literal[c.name+" "+name] {
				continue
			}
			checked++
			// One line naming the flag, not the whole usage, in which any
			// flag's name is found (QA: --capacity 0 printed 150 lines).
			if code, _, errOut := farmRun(t, "", env, c.name, "--"+name, "-5"); code != exitUsage || !strings.Contains(errOut, "--"+name) || strings.Contains(errOut, "usage: farm") {
				t.Errorf("farm %s --%s -5: code %d, stderr %q; want a usage error naming the flag, without the usage", c.name, name, code, errOut)
			}
			if strings.Contains(usage, "(auto: ") {
				if code, _, errOut := farmRun(t, "", env, c.name, "--"+name, "auto", "--help"); code != exitOK {
					t.Errorf("farm %s --%s auto: code %d, stderr %q; want it accepted", c.name, name, code, errOut)
				}
				if code, _, errOut := farmRun(t, "", env, c.name, "--"+name, "0"); code != exitUsage || !strings.Contains(errOut, "--"+name+" 0") {
					t.Errorf("farm %s --%s 0: code %d, stderr %q; want a usage error naming the flag", c.name, name, code, errOut)
				}
			}
			if !strings.Contains(usage, "(off: ") {
				continue
			}
			if code, _, errOut := farmRun(t, "", env, c.name, "--"+name, "off", "--help"); code != exitOK {
				t.Errorf("farm %s --%s off: code %d, stderr %q; want it accepted", c.name, name, code, errOut)
			}
			if code, _, errOut := farmRun(t, "", env, c.name, "--"+name, "0"); code != exitUsage || !strings.Contains(errOut, "--"+name+" 0") {
				t.Errorf("farm %s --%s 0: code %d, stderr %q; want a usage error naming the flag", c.name, name, code, errOut)
			}
		}
	}
	if checked < 30 {
		t.Errorf("checked %d numeric flags; the --help parsing missed some", checked)
	}
}
