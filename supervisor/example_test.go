package supervisor_test

import (
	"context"
	"errors"
	"log"
	"sync"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/supervisor"
)

// A consumer node's loop: claim at most Available jobs, run each in a slot,
// and stop when the supervisor says the process is due to exit.
func Example() {
	s, err := supervisor.New(supervisor.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()

	claim := func(n int) []browser.Request { return nil } // the job queue, in farm
	assigned := make(chan struct{})                       // LISTEN/NOTIFY wake-ups, in farm
	freed := make(chan struct{}, 1)
	var wg sync.WaitGroup
loop:
	for {
		for _, req := range claim(s.Available()) {
			sl, err := s.Acquire(ctx)
			if errors.Is(err, supervisor.ErrExitDue) || errors.Is(err, supervisor.ErrStopping) {
				break loop // hand the unstarted jobs back to the queue
			}
			if err != nil {
				break loop
			}
			wg.Go(func() {
				defer func() {
					sl.Release() // counts the job, whatever its outcome
					select {
					case freed <- struct{}{}:
					default:
					}
				}()
				if _, err := sl.Render(ctx, req); browser.IsRetriable(err) {
					log.Printf("retry later: %v", err)
				}
			})
		}
		select {
		case <-assigned:
		case <-freed:
		case <-s.ExitDue():
			break loop // exit with code 75: the orchestrator starts a fresh process
		case <-ctx.Done():
			break loop
		}
	}
	wg.Wait()
	cancel()
	if err := <-runDone; err != nil { // every Chrome is killed by now
		log.Print(err)
	}
}
