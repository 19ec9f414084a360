package farm

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// TestProducerConfigDefaults: a zero field takes its default, Off turns
// retention off, and any other negative value is an error naming the field.
// Nothing connects: the pool is lazy.
func TestProducerConfigDefaults(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	q := jobqueue.New(pool, jobqueue.Config{})
	for _, tc := range []struct {
		name    string
		tweak   func(*ProducerConfig)
		wantErr string
		check   func(c ProducerConfig) bool
	}{
		{"zero fields take the defaults", func(*ProducerConfig) {}, "", func(c ProducerConfig) bool {
			return c.Tick == DefaultTick && c.AssignBatch == DefaultAssignBatch && c.StaleAfter == jobqueue.DefaultStaleAfter &&
				c.RescueInterval == DefaultRescueInterval && c.Retention == DefaultRetention && c.NodeRetention == DefaultNodeRetention &&
				c.RetentionInterval == DefaultRetentionInterval && c.RetentionBatch == DefaultRetentionBatch &&
				c.Assign == jobqueue.AssignSpread
		}},
		{"values kept", func(c *ProducerConfig) { c.Tick, c.Retention, c.AssignBatch = time.Millisecond, time.Hour, 7 }, "",
			func(c ProducerConfig) bool {
				return c.Tick == time.Millisecond && c.Retention == time.Hour && c.AssignBatch == 7
			}},
		{"retention off keeps forever", func(c *ProducerConfig) { c.Retention = Off }, "",
			func(c ProducerConfig) bool { return c.Retention == Off }},
		{"negative retention", func(c *ProducerConfig) { c.Retention = -time.Hour }, "Retention must not be negative", nil},
		{"node retention off keeps them forever", func(c *ProducerConfig) { c.NodeRetention = Off }, "",
			func(c ProducerConfig) bool { return c.NodeRetention == Off && c.Retention == DefaultRetention }},
		{"negative node retention", func(c *ProducerConfig) { c.NodeRetention = -time.Minute }, "NodeRetention must not be negative", nil},
		{"tick cannot be off", func(c *ProducerConfig) { c.Tick = Off }, "Tick must not be negative", nil},
		{"negative assign batch", func(c *ProducerConfig) { c.AssignBatch = -5 }, "AssignBatch must not be negative", nil},
		{"negative stale after", func(c *ProducerConfig) { c.StaleAfter = -time.Second }, "StaleAfter must not be negative", nil},
		{"negative rescue interval", func(c *ProducerConfig) { c.RescueInterval = -2 }, "RescueInterval must not be negative", nil},
		{"negative retention interval", func(c *ProducerConfig) { c.RetentionInterval = Off }, "RetentionInterval must not be negative", nil},
		{"negative retention batch", func(c *ProducerConfig) { c.RetentionBatch = -1 }, "RetentionBatch must not be negative", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ProducerConfig{Queue: q, Pool: pool}
			tc.tweak(&cfg)
			p, err := NewProducer(cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(p.cfg) {
				t.Errorf("config after defaults: %+v", p.cfg)
			}
		})
	}
}
