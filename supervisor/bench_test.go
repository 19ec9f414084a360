package supervisor

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
)

// BenchmarkNode measures one node's throughput through the supervisor on
// real Chromium, six sessions, with a new Chrome every 20 jobs and without
// recycling, on a CPU-bound workload (/page/{n} with no delay) and a
// latency-bound one (the page's API answers after 400 ms, as a real site
// over the internet does). Run with a fixed count so both arms do the same
// work, e.g. -bench=Node -benchtime=200x, and compare pages/s.
func BenchmarkNode(b *testing.B) {
	site := testutil.StartSite(b, testsite.Options{})
	for _, wl := range []struct {
		name  string
		query string
	}{{"cpu", ""}, {"latency400ms", "?delay=400"}} {
		for _, rc := range []struct {
			name    string
			recycle int
		}{{"recycle20", 20}, {"norecycle", Off}} {
			b.Run(wl.name+"/"+rc.name, func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.ChromeRecycleJobs, cfg.ExitAfterJobs = rc.recycle, Off
				root, err := os.MkdirTemp("", "sv") // short: Chrome's socket paths live under it
				if err != nil {
					b.Fatal(err)
				}
				defer os.RemoveAll(root)
				cfg.Browser.ProfileRoot = root
				s, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				runErr := make(chan error, 1)
				go func() { runErr <- s.Run(ctx) }()
				defer func() {
					cancel()
					if err := <-runErr; err != nil {
						b.Error(err)
					}
				}()
				render := func(n int) error {
					sl, err := s.Acquire(ctx)
					if err != nil {
						return err
					}
					defer sl.Release()
					_, err = sl.Render(ctx, pageRequest(fmt.Sprintf("%s/page/%d%s", site.URL, n, wl.query)))
					return err
				}
				// The first boot is the process's, not recycling's.
				if err := render(0); err != nil {
					b.Fatal(err)
				}
				starts0 := s.Stats().ChromeStarts
				b.ResetTimer()
				jobs := make(chan int)
				var wg sync.WaitGroup
				var mu sync.Mutex
				var errs []error
				for range cfg.Capacity {
					wg.Go(func() {
						for n := range jobs {
							if err := render(n); err != nil {
								mu.Lock()
								errs = append(errs, err)
								mu.Unlock()
							}
						}
					})
				}
				for n := range b.N {
					jobs <- n
				}
				close(jobs)
				wg.Wait()
				b.StopTimer()
				if len(errs) > 0 {
					b.Fatalf("%d render errors, first: %v", len(errs), errs[0])
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
				b.ReportMetric(float64(s.Stats().ChromeStarts-starts0), "chrome-boots")
			})
		}
	}
}
