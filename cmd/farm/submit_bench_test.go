package main

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkReadSpecs: farm submit's reading of 10,000 JSON job lines
// (each decoded strictly, its fields noted for the flags), per op.
func BenchmarkReadSpecs(b *testing.B) {
	var sb strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&sb, `{"url":"https://example.com/p/%d","wait":{"selector":"#x"},"extract":"document.title","priority":3}`+"\n", i)
	}
	in := sb.String()
	for b.Loop() {
		if _, _, err := readSpecs(strings.NewReader(in), "jobs.jsonl", &specFlags{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/10000, "us/line")
}
