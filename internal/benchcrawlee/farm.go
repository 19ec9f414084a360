package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/browserfarm/browserfarm/browser"
	"go.uber.org/zap"
)

// workerConfig is the JSON argument of both sides' workers (the farm worker
// here, scripts/crawlee-bench.mjs for Crawlee).
type workerConfig struct {
	URL         string   `json:"url"`
	Pages       int      `json:"pages"`
	Delay       int      `json:"delay"`
	Concurrency int      `json:"concurrency"`
	Chrome      string   `json:"chrome"`
	Flags       []string `json:"flags,omitempty"`
	// Shared runs the farm's jobs in Chrome's default context on reused
	// tabs (browser.Request.SharedContext) instead of a fresh context each.
	Shared bool `json:"shared,omitempty"`
	// Incognito makes Crawlee open each page in a browser context of its
	// own (launchContext.useIncognitoPages) instead of Chrome's default one.
	Incognito bool `json:"incognito,omitempty"`
}

// workerResult is the JSON line a worker prints after the measured pages.
type workerResult struct {
	ElapsedMs       float64  `json:"elapsed_ms"`
	OK              int      `json:"ok"`
	Failed          int      `json:"failed"`
	Errors          []string `json:"errors,omitempty"`
	MeanConcurrency float64  `json:"mean_concurrency"`
	MaxConcurrency  int      `json:"max_concurrency"`
}

const wantItems = "200"

// pageURL is the page both sides render for number n.
func pageURL(base string, n, delay int) string {
	return fmt.Sprintf("%s/page/%d?delay=%d", base, n, delay)
}

// runFarmWorker is the farm side: one Chrome launched by the browser
// package, cfg.Concurrency sessions rendering at once, as in
// browser.BenchmarkRender6. It speaks the workers' line protocol: "ready"
// after the warm-up, then the measured pages once a line arrives on in, then
// one JSON line.
func runFarmWorker(ctx context.Context, cfg workerConfig, in io.Reader, out io.Writer, log *zap.Logger) (err error) {
	br, err := browser.Launch(ctx, browser.Options{ExecPath: cfg.Chrome, Logger: log})
	if err != nil {
		return fmt.Errorf("farm worker: launching chrome: %w", err)
	}
	defer func() { err = errors.Join(err, br.Kill()) }()

	sessions := make([]*browser.Session, cfg.Concurrency)
	for i := range sessions {
		s, err := br.NewSession(ctx)
		if err != nil {
			return fmt.Errorf("farm worker: session %d: %w", i, err)
		}
		defer func() { err = errors.Join(err, s.Close()) }()
		sessions[i] = s
	}
	render := func(s *browser.Session, n int) error {
		res, err := s.Render(ctx, browser.Request{
			URL:           pageURL(cfg.URL, n, cfg.Delay),
			Wait:          browser.Wait{Selector: "#ready"},
			Extract:       "document.querySelectorAll('li.item').length",
			Timeout:       30 * time.Second,
			SharedContext: cfg.Shared,
		})
		if err != nil {
			return fmt.Errorf("page %d: %w", n, err)
		}
		if string(res.Data) != wantItems {
			return fmt.Errorf("page %d: li.item: %s, want %s", n, res.Data, wantItems)
		}
		return nil
	}

	// Warm-up: one page per session, outside the measure, with the same
	// page numbers as the Crawlee side's warm-up.
	var wg sync.WaitGroup
	warm := make([]error, len(sessions))
	for i, s := range sessions {
		wg.Go(func() { warm[i] = render(s, 100_000+i) })
	}
	wg.Wait()
	if err := errors.Join(warm...); err != nil {
		return fmt.Errorf("farm worker: warm-up: %w", err)
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return fmt.Errorf("farm worker: %w", err)
	}
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return fmt.Errorf("farm worker: waiting for go: %w", err)
	}

	var (
		next   atomic.Int64
		busy   atomic.Int64 // nanoseconds spent inside Render, all sessions
		mu     sync.Mutex
		result workerResult
	)
	start := time.Now()
	for _, s := range sessions {
		wg.Go(func() {
			for n := next.Add(1); n <= int64(cfg.Pages); n = next.Add(1) {
				t := time.Now()
				err := render(s, int(n))
				busy.Add(int64(time.Since(t)))
				mu.Lock()
				if err != nil {
					result.Failed++
					if len(result.Errors) < 5 {
						result.Errors = append(result.Errors, err.Error())
					}
				} else {
					result.OK++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	result.ElapsedMs = float64(elapsed.Microseconds()) / 1000
	// Little's law: the time spent rendering over the wall time is the mean
	// number of pages in flight.
	result.MeanConcurrency = float64(busy.Load()) / float64(elapsed)
	result.MaxConcurrency = cfg.Concurrency
	line, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("farm worker: %w", err)
	}
	if _, err := fmt.Fprintf(out, "%s\n", line); err != nil {
		return fmt.Errorf("farm worker: %w", err)
	}
	return nil
}
