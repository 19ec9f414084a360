package web

import (
	"context"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// GET /api/hosts shows what runs on each host against its politeness limit
// and when a rate-limited host may start again; GET /api/batches/{id} the
// batch's progress.
func TestHostsAndBatchProgress(t *testing.T) {
	t.Parallel()
	now := time.Now()
	f := newFixture(t, func(c *Config) {
		c.Now = func() time.Time { return now }
		c.HostPolicy = func(host string) jobqueue.HostPolicy {
			if host == "slow.test" {
				return jobqueue.HostPolicy{MaxConcurrent: 1, MinInterval: time.Hour}
			}
			return jobqueue.HostPolicy{MaxConcurrent: 4}
		}
	})
	ctx := context.Background()
	f.register("n1", 6)
	if _, err := f.pool.Exec(ctx, "INSERT INTO hosts (host) VALUES ('slow.test')"); err != nil {
		t.Fatal(err)
	}
	batch, _ := f.enqueue(jobqueue.Spec{URL: "http://slow.test/1"}, jobqueue.Spec{URL: "http://busy.test/1"},
		jobqueue.Spec{URL: "http://busy.test/2"}, jobqueue.Spec{URL: "http://busy.test/3"})
	f.start("n1", 3)

	var got struct {
		Hosts []hostView `json:"hosts"`
	}
	f.call("GET", "/api/hosts", "", "", 200, &got)
	by := map[string]hostView{}
	for _, h := range got.Hosts {
		by[h.Host] = h
	}
	slow, busy := by["slow.test"], by["busy.test"]
	if slow.Processing+slow.Queued != 1 || slow.MaxConcurrent != 1 || !slow.AtLimit || slow.LastStartedAt == nil ||
		slow.NextStartAt == nil || slow.MinIntervalMS != time.Hour.Milliseconds() {
		t.Errorf("slow.test = %+v, want 1 running of 1, a last start and a next start an hour on", slow)
	}
	if busy.Processing+busy.Queued != 2 || busy.MaxConcurrent != 4 || busy.AtLimit || busy.NextStartAt != nil {
		t.Errorf("busy.test = %+v, want 2 of 4 and no interval", busy)
	}

	var prog struct {
		Total    int64            `json:"total"`
		Finished int64            `json:"finished"`
		ByState  map[string]int64 `json:"by_state"`
	}
	f.call("GET", "/api/batches/"+batch, "", "", 200, &prog)
	if prog.Total != 4 || prog.Finished != 0 || prog.ByState["processing"] != 3 || prog.ByState["pending"] != 1 {
		t.Errorf("batch progress %+v", prog)
	}
	f.errorOf("GET", "/api/batches/not-a-uuid", "", "", 400)
	f.errorOf("GET", "/api/batches/00000000-0000-4000-8000-000000000000", "", "", 404)
}
