package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/browserfarm/browserfarm/farm/fleet"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// runDemo submits the demo's pages, shows progress until they are all
// finished, and prints a summary. It fails if any page failed, or if the
// consumers cannot start at all (no Chrome, say).
func runDemo(ctx context.Context, env *environment, q *jobqueue.Queue, siteURL string, uo upOptions, fl *fleet.Fleet, events *childEvents, logDir string) error {
	specs := make([]jobqueue.Spec, uo.demoJobs)
	for i := range specs {
		u := fmt.Sprintf("%s/page/%d", siteURL, i+1)
		if uo.demoDelay > 0 {
			u += fmt.Sprintf("?delay=%d", uo.demoDelay.Milliseconds())
		}
		specs[i] = jobqueue.Spec{
			URL:     u,
			Wait:    &jobqueue.Wait{Selector: "#ready"},
			Extract: `({title: document.querySelector('h1').textContent, items: document.querySelectorAll('li.item').length})`,
		}
	}
	batch, ids, err := q.Enqueue(ctx, specs)
	if err != nil {
		return err
	}
	start := time.Now()
	bar := newProgress(env.stderr, int64(len(ids)), false,
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionFullWidth(),
	)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var c jobqueue.BatchCounts
	for {
		if c, err = q.BatchCounts(ctx, batch); err != nil {
			return err
		}
		nodes, err := q.ListNodes(ctx)
		if err != nil {
			return err
		}
		active := 0
		for _, n := range nodes {
			if n.State == jobqueue.NodeActive {
				active++
			}
		}
		fs := fl.Stats()
		elapsed := time.Since(start).Seconds()
		bar.Set(c.Finished(), c.Total, fmt.Sprintf("%.1f pages/s · %d failed · %d nodes · %d Chrome recycles · %d process restarts",
			float64(c.By[jobqueue.StateCompleted])/max(elapsed, 0.001), c.By[jobqueue.StateFailed], active,
			events.chromeRecycles.Load(), fs.Recycles+fs.Crashes))
		if c.Finished() == c.Total {
			break
		}
		if fs.Crashes >= 3 && c.By[jobqueue.StateCompleted] == 0 {
			bar.Stop()
			return fmt.Errorf("the consumers keep crashing before finishing a job (is Chromium installed? see %s)", logDir)
		}
		select {
		case <-ctx.Done():
			bar.Stop()
			return fmt.Errorf("demo interrupted at %d of %d pages", c.Finished(), c.Total)
		case <-tick.C:
		}
	}
	bar.Finish()
	took := time.Since(start)
	fs := fl.Stats()
	fmt.Fprintf(env.stdout, "\ndemo: %d pages in %s (%.1f pages/s): %d completed, %d failed\n",
		c.Total, took.Round(10*time.Millisecond), float64(c.By[jobqueue.StateCompleted])/took.Seconds(),
		c.By[jobqueue.StateCompleted], c.By[jobqueue.StateFailed])
	fmt.Fprintf(env.stdout, "demo: browser %s\n", uo.chrome)
	fmt.Fprintf(env.stdout, "demo: %d Chrome recycles, %d Chrome starts, %d consumer process restarts (%d recycles by exit %d, %d crashes)\n",
		events.chromeRecycles.Load(), events.chromeStarts.Load(), fs.Recycles+fs.Crashes, fs.Recycles, exitRecycle, fs.Crashes)
	if uo.keepData {
		fmt.Fprintf(env.stdout, "demo: batch %s; its database stays in %s/pg (farm up --data-dir reuses it)\n", batch, filepath.Dir(logDir))
	} else {
		fmt.Fprintf(env.stdout, "demo: batch %s (with --keep-data the database stays for farm results)\n", batch)
	}
	if n := c.By[jobqueue.StateFailed]; n > 0 {
		return fmt.Errorf("%d of %d demo pages failed", n, c.Total)
	}
	return nil
}
