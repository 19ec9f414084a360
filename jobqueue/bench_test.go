package jobqueue

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkEnqueue10k measures Enqueue of 10,000-job batches; one op is one batch.
func BenchmarkEnqueue10k(b *testing.B) {
	q, _ := newTestQueue(b, Config{})
	ctx := context.Background()
	specs := make([]Spec, 10_000)
	for i := range specs {
		specs[i] = Spec{URL: fmt.Sprintf("https://shop%d.example.com/items?page=%d", i%50, i),
			Extract: "document.title", Block: []string{"image", "font"}, Priority: i % 3}
	}
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if _, _, err := q.Enqueue(ctx, specs); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*len(specs))/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(elapsed.Seconds()/float64(b.N), "s/batch")
}
