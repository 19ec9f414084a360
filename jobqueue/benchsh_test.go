package jobqueue_test

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestBenchShLifecycleSize: scripts/bench.sh runs BenchmarkLifecycle at the
// iteration counts it names, and one op is lifecycleOpJobs jobs: the README's
// figures are runs of 20,000 jobs (a count meant as jobs once ran 20 million,
// past go test's timeout).
func TestBenchShLifecycleSize(t *testing.T) {
	src, err := os.ReadFile("../scripts/bench.sh")
	if err != nil {
		t.Fatal(err)
	}
	counts := regexp.MustCompile(`BenchmarkLifecycle[^\n]*?(\d+)x`).FindAllSubmatch(src, -1)
	if len(counts) == 0 {
		t.Fatal("no BenchmarkLifecycle run in scripts/bench.sh")
	}
	for _, m := range counts {
		n, _ := strconv.Atoi(string(m[1]))
		if jobs := n * lifecycleOpJobs; jobs != 20_000 {
			t.Errorf("scripts/bench.sh runs BenchmarkLifecycle %dx: %d jobs, want 20,000", n, jobs)
		}
	}
}
