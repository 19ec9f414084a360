package web

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/browserfarm/browserfarm/internal/pgtest"
	"github.com/browserfarm/browserfarm/jobqueue"
)

const (
	benchNodes = 50
	benchJobs  = 20_000 // finished jobs in the table
)

// benchFarm is a database with benchNodes nodes and benchJobs finished jobs
// (one in ten failed), and a queue on it.
func benchFarm(b *testing.B) *jobqueue.Queue {
	b.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(b)
	if err := jobqueue.Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	q := jobqueue.New(pool, jobqueue.Config{})
	for i := range benchNodes {
		if _, _, err := q.Register(ctx, jobqueue.NodeInfo{ID: fmt.Sprintf("node-%02d", i), Capacity: 1000}); err != nil {
			b.Fatal(err)
		}
	}
	specs := make([]jobqueue.Spec, benchJobs)
	for i := range specs {
		specs[i] = jobqueue.Spec{URL: fmt.Sprintf("http://bench.example/%d", i), MaxAttempts: 1}
	}
	if _, _, err := q.Enqueue(ctx, specs); err != nil {
		b.Fatal(err)
	}
	for done := 0; done < benchJobs; {
		if _, err := q.Assign(ctx, "node-00", 1000); err != nil {
			b.Fatal(err)
		}
		jobs, err := q.Claim(ctx, "node-00", 1000)
		if err != nil {
			b.Fatal(err)
		}
		var comps []jobqueue.Completion
		for _, j := range jobs {
			if j.ID%10 == 0 {
				if _, err := q.Incarnation(jobqueue.Node{ID: "node-00"}).Fail(ctx, j.ID, "timeout", fmt.Sprintf("class_%d", j.ID%7), false); err != nil {
					b.Fatal(err)
				}
				continue
			}
			comps = append(comps, jobqueue.Completion{JobID: j.ID, NodeID: "node-00", Result: jobqueue.Result{Status: 200}})
		}
		if _, err := q.CompleteMany(ctx, comps); err != nil {
			b.Fatal(err)
		}
		done += len(jobs)
	}
	return q
}

// BenchmarkMetricsScrape: one /metrics scrape that reads the database (the
// cache is bypassed), with 50 nodes and 20,000 finished jobs.
func BenchmarkMetricsScrape(b *testing.B) {
	q := benchFarm(b)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.WatchQueue(q, nil)
	// Each scrape sees an expired cache.
	var now time.Time
	m.queue.now = func() time.Time { now = now.Add(queueCacheTTL); return now }
	srv := httptest.NewServer(NewServer(Config{Queue: q, Metrics: m, Gatherer: reg}))
	defer srv.Close()
	var size int64
	b.ResetTimer()
	for b.Loop() {
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		size = n
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/scrape")
	b.ReportMetric(float64(size), "bytes/scrape")
}

// BenchmarkRecordSamples: one recorder tick (queue sample, 50 node samples)
// with 20,000 finished jobs in the table.
func BenchmarkRecordSamples(b *testing.B) {
	q := benchFarm(b)
	ctx := context.Background()
	at := time.Now()
	qc := jobqueue.New(q.Pool(), jobqueue.Config{Now: func() time.Time { return at }})
	b.ResetTimer()
	for b.Loop() {
		at = at.Add(5 * time.Second)
		rep, err := qc.RecordSamples(ctx, 5*time.Second)
		if err != nil || rep.Skipped || rep.Nodes != benchNodes {
			b.Fatalf("%+v, %v", rep, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/sample")
}

// BenchmarkSamplesAPI: the dashboard's charts over an hour of samples every
// 5 s (720 per node), for a fleet of 50 and of 1,000 nodes: its first load
// (load, the default 10 s step) and each later poll (poll, since its last
// bucket). B/op counts the server's allocations too (it runs in the
// benchmark's process).
func BenchmarkSamplesAPI(b *testing.B) {
	for _, nodes := range []int{benchNodes, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			url := samplesFarm(b, nodes)
			last := time.Now().Add(-10 * time.Second).Unix()
			b.Run("load", func(b *testing.B) { benchGet(b, url+"/api/samples") })
			b.Run("poll", func(b *testing.B) { benchGet(b, fmt.Sprintf("%s/api/samples?since=%d&step=10", url, last)) })
		})
	}
}

// samplesFarm records an hour of samples of nodes nodes and returns the
// URL of a server on them.
func samplesFarm(b *testing.B, nodes int) string {
	ctx := context.Background()
	pool := pgtest.NewPool(b)
	if err := jobqueue.Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	end := time.Now()
	at := end.Add(-time.Hour)
	q := jobqueue.New(pool, jobqueue.Config{Now: func() time.Time { return at }})
	for i := range nodes {
		if _, _, err := q.Register(ctx, jobqueue.NodeInfo{ID: fmt.Sprintf("node-%04d", i), Capacity: 6}); err != nil {
			b.Fatal(err)
		}
	}
	for ; at.Before(end); at = at.Add(5 * time.Second) {
		if _, err := q.RecordSamples(ctx, 5*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE node_samples"); err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(NewServer(Config{Queue: jobqueue.New(pool, jobqueue.Config{})}))
	b.Cleanup(srv.Close)
	return srv.URL
}

func benchGet(b *testing.B, url string) {
	var size int64
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		size = n
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
	b.ReportMetric(float64(size), "bytes/op")
}
