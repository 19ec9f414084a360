package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// The lifecycle run's fleet, as in jobqueue's BenchmarkLifecycle.
const (
	lifecycleNodes    = 16
	lifecycleCapacity = 6
	completeBatch     = 200
	submitBatch       = 2000
)

// lifecycle runs total jobs through their whole life the way jobqueue's
// BenchmarkLifecycle (listener=shared) does: a submitter enqueues them in
// batches, a producer loop assigns on its wake-ups, each node claims what
// it was assigned when woken over LISTEN, and one completer batches every
// node's completions. It returns jobs/s from the first enqueue to the last
// completion.
func lifecycle(ctx context.Context, pool *pgxpool.Pool, q *jobqueue.Queue, nodes []string, total int) (float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		runErr  error
		done    atomic.Int64
	)
	allDone := make(chan struct{})
	goRun := func(f func(context.Context) error) {
		wg.Go(func() {
			if err := f(ctx); err != nil && ctx.Err() == nil {
				errOnce.Do(func() { runErr = err })
				cancel()
			}
		})
	}
	defer wg.Wait()
	defer cancel()

	prodL := jobqueue.NewListener(pool, jobqueue.ListenerConfig{Channels: []string{jobqueue.ChannelProducer}})
	chans := make([]string, len(nodes))
	byChan := make(map[string]int, len(nodes))
	wake := make([]chan struct{}, len(nodes))
	for i, id := range nodes {
		chans[i] = jobqueue.NodeChannel(id)
		byChan[chans[i]] = i
		wake[i] = make(chan struct{}, 1)
	}
	nodeL := jobqueue.NewListener(pool, jobqueue.ListenerConfig{Channels: chans, Buffer: 1024})
	goRun(prodL.Run)
	goRun(nodeL.Run)
	goRun(func(ctx context.Context) error {
		for {
			n, err := nodeL.Wait(ctx)
			if err != nil {
				return nil
			}
			targets := []int{byChan[n.Channel]}
			if n.Payload == jobqueue.PayloadReconnected {
				targets = targets[:0]
				for i := range wake {
					targets = append(targets, i)
				}
			}
			for _, i := range targets {
				select {
				case wake[i] <- struct{}{}:
				default:
				}
			}
		}
	})
	for _, l := range []*jobqueue.Listener{prodL, nodeL} {
		select {
		case <-l.Ready():
		case <-ctx.Done():
			return 0, fmt.Errorf("listeners: %w", ctx.Err())
		}
	}

	in := make(chan jobqueue.Completion, len(nodes)*lifecycleCapacity)
	start := time.Now()
	// Completer.
	goRun(func(ctx context.Context) error {
		batch := make([]jobqueue.Completion, 0, completeBatch)
		for {
			select {
			case <-ctx.Done():
				return nil
			case c := <-in:
				batch = append(batch[:0], c)
			}
		fill:
			for len(batch) < completeBatch {
				select {
				case c := <-in:
					batch = append(batch, c)
				default:
					break fill
				}
			}
			if _, err := q.CompleteMany(ctx, batch); err != nil {
				return err
			}
			if done.Add(int64(len(batch))) == int64(total) {
				close(allDone)
			}
		}
	})
	// Producer.
	goRun(func(ctx context.Context) error {
		poll := time.NewTicker(50 * time.Millisecond)
		defer poll.Stop()
		for {
			// The producer's round (no host limits: this measures the queue).
			if _, err := q.AssignPolite(ctx, func(string) jobqueue.HostPolicy { return jobqueue.HostPolicy{} },
				len(nodes)*lifecycleCapacity, jobqueue.AssignSpread); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return nil
			case <-prodL.C():
			case <-poll.C:
			}
		}
	})
	// Nodes.
	for i, id := range nodes {
		goRun(func(ctx context.Context) error {
			poll := time.NewTicker(50 * time.Millisecond)
			defer poll.Stop()
			for {
				jobs, err := q.Claim(ctx, id, lifecycleCapacity)
				if err != nil {
					return err
				}
				for _, j := range jobs {
					select {
					case in <- jobqueue.Completion{JobID: j.ID, NodeID: id,
						Result: jobqueue.Result{FinalURL: j.Spec.URL, Status: 200, Title: "ok"}}:
					case <-ctx.Done():
						return nil
					}
				}
				select {
				case <-ctx.Done():
					return nil
				case <-wake[i]:
				case <-poll.C:
				}
			}
		})
	}
	// Submitter.
	goRun(func(ctx context.Context) error {
		specs := make([]jobqueue.Spec, 0, submitBatch)
		for off := 0; off < total; off += submitBatch {
			specs = specs[:0]
			for k := off; k < min(off+submitBatch, total); k++ {
				specs = append(specs, jobqueue.Spec{URL: fmt.Sprintf("http://bench.example.com/page/%d", k)})
			}
			if _, _, err := q.Enqueue(ctx, specs); err != nil {
				return err
			}
		}
		return nil
	})
	select {
	case <-allDone:
	case <-ctx.Done():
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	if runErr != nil {
		return 0, runErr
	}
	if done.Load() != int64(total) {
		return 0, fmt.Errorf("lifecycle interrupted after %d of %d jobs: %w", done.Load(), total, ctx.Err())
	}
	return float64(total) / elapsed.Seconds(), nil
}
