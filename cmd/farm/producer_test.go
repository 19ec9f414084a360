package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/farm"
)

func TestProducerPolitenessFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		host    string
		want    farm.HostPolicy
		wantErr string
	}{
		{"default", nil, nil, "a.com", farm.HostPolicy{MaxConcurrent: 4}, ""},
		{"flags", []string{"--host-max-concurrent", "2", "--host-min-interval", "1s"}, nil, "a.com",
			farm.HostPolicy{MaxConcurrent: 2, MinInterval: time.Second}, ""},
		{"rule flag", []string{"--host-rule", "a.com=1/250ms", "--host-rule", "b.com=9"}, nil, "a.com",
			farm.HostPolicy{MaxConcurrent: 1, MinInterval: 250 * time.Millisecond}, ""},
		{"rules from the environment, comma-separated", nil, map[string]string{"FARM_HOST_RULE": "a.com=1, .b.com=7/2s"}, "x.b.com",
			farm.HostPolicy{MaxConcurrent: 7, MinInterval: 2 * time.Second}, ""},
		{"bad rule", []string{"--host-rule", "a.com=lots"}, nil, "", farm.HostPolicy{}, `--host-rule: host rule "a.com=lots"`},
		{"negative", []string{"--host-max-concurrent", "-1"}, nil, "", farm.HostPolicy{}, "--host-max-concurrent -1: want a whole number ≥ 1, or off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := newFlagSet("producer", "", &bytes.Buffer{})
			var po producerOptions
			po.register(fs)
			if err := fs.parse(tt.args, func(k string) string { return tt.env[k] }); err != nil {
				t.Fatal(err)
			}
			p, err := po.politeness()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.For(tt.host); got != tt.want {
				t.Errorf("policy for %s = %+v, want %+v", tt.host, got, tt.want)
			}
		})
	}
}

func TestScalingEnvDropsTheFarmsSecrets(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		want    []string
	}{
		{"nothing", nil, nil},
		{"secrets dropped, the rest kept in order",
			[]string{"PATH=/usr/bin", "FARM_DATABASE_URL=postgres://u:pw@db/farm", "KUBECONFIG=/k", "FARM_API_TOKEN=a",
				"FARM_READ_TOKEN=r", "FARM_WAKE_TOKEN=w", "PGPASSWORD=pw", "FARM_AUTOSCALE_MAX=20", "AWS_REGION=eu-west-1"},
			[]string{"PATH=/usr/bin", "KUBECONFIG=/k", "FARM_AUTOSCALE_MAX=20", "AWS_REGION=eu-west-1"}},
		{"a name that only starts like a secret's is kept",
			[]string{"FARM_API_TOKEN_FILE=/run/t", "FARM_API_TOKEN="},
			[]string{"FARM_API_TOKEN_FILE=/run/t"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := scalingEnv(tc.environ); !slices.Equal(got, tc.want) {
				t.Errorf("scalingEnv(%q) = %q, want %q", tc.environ, got, tc.want)
			}
		})
	}
	// The exec driver's configuration carries it.
	po := producerOptions{scaleDriver: "exec", scaleExec: "true", environ: []string{"FARM_API_TOKEN=a", "HOME=/root"}}
	dc, err := po.driverConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dc.Exec.Env, []string{"HOME=/root"}) {
		t.Errorf("exec driver Env = %q, want HOME alone", dc.Exec.Env)
	}
}

// The producer's bounded durations are checked before anything waits for
// the database. --wake-max-wait: too short, every node polls again at
// once; too long, the producer's write timeout cuts the poll. --retention:
// at least the window the dashboard counts finishes over, since the purge
// takes the jobs it deletes out of the windows' counts too.
func TestProducerDurationBounds(t *testing.T) {
	for _, tc := range []struct {
		flag, value, wantErr string
	}{
		{"wake-max-wait", "", ""}, {"wake-max-wait", "1s", ""}, {"wake-max-wait", "1m", ""},
		{"wake-max-wait", "500ms", "--wake-max-wait 500ms: between 1s"},
		{"wake-max-wait", "61s", "--wake-max-wait 1m1s: between 1s (each node polls again as soon as it is answered) and 1m0s"},
		{"retention", "off", ""}, {"retention", "1h", ""}, {"retention", "168h", ""},
		{"retention", "30s", "--retention 30s: at least 1h0m0s"},
		{"retention", "59m", "--retention 59m0s: at least 1h0m0s"},
	} {
		fs := newFlagSet("producer", "", &bytes.Buffer{})
		var po producerOptions
		po.register(fs)
		var args []string
		if tc.value != "" {
			args = []string{"--" + tc.flag, tc.value}
		}
		if err := fs.parse(args, func(string) string { return "" }); err != nil {
			t.Fatal(err)
		}
		err := po.check()
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("--%s %q: %v, want %q", tc.flag, tc.value, err, tc.wantErr)
		}
	}
}
