package jobqueue

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/browserfarm/browserfarm/internal/pgtest"
)

func TestAdvise(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings map[string]string
		want     []string // the settings advised on
	}{
		{"as recommended", map[string]string{"autovacuum": "on", "autovacuum_naptime": "10"}, nil},
		{"shorter naptime", map[string]string{"autovacuum": "on", "autovacuum_naptime": "1"}, nil},
		{"PostgreSQL's default naptime", map[string]string{"autovacuum": "on", "autovacuum_naptime": "60"}, []string{"autovacuum_naptime"}},
		{"just over", map[string]string{"autovacuum": "on", "autovacuum_naptime": "11"}, []string{"autovacuum_naptime"}},
		{"autovacuum off", map[string]string{"autovacuum": "off", "autovacuum_naptime": "10"}, []string{"autovacuum"}},
		{"unreadable naptime", map[string]string{"autovacuum": "on", "autovacuum_naptime": "x"}, []string{"autovacuum_naptime"}},
		{"nothing read", map[string]string{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, a := range advise(tc.settings) {
				got = append(got, a.Setting)
				if a.Want == "" || a.Why == "" || a.Have == "" {
					t.Errorf("advice without a value or a reason: %+v", a)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("advised on %v, want %v", got, tc.want)
			}
		})
	}
}

// The tests' private server runs with the recommended settings, as every
// server the farm starts does: the queue has no advice for it.
func TestServerAdviceOnTheFarmsServer(t *testing.T) {
	if os.Getenv(pgtest.EnvURL) != "" {
		t.Skipf("%s names a server the farm did not start", pgtest.EnvURL)
	}
	q, _ := newTestQueue(t, Config{})
	advice, err := q.ServerAdvice(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(advice) > 0 {
		t.Errorf("advice for the farm's own server: %+v", advice)
	}
}
