// Package queuesim runs jobs through their whole queue lifecycle without a
// browser — enqueue, assign, claim, complete — the way the farm's producer
// and consumers drive the queue. It is the one driver behind jobqueue's
// BenchmarkLifecycle and the scale bench's lifecycle figure (imported by
// tests and harnesses only).
package queuesim

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// The product's defaults (farm's producer batch and tick, the consumer's
// fallback poll): jobqueue and this package cannot import farm, so they are
// restated here.
const (
	assignBatch  = 5000
	producerTick = time.Second
	nodePoll     = 10 * time.Second
	// completeBatch bounds one CompleteMany, submitBatch one Enqueue.
	completeBatch = 200
	submitBatch   = 2000
)

// Config is one run.
type Config struct {
	// Nodes are registered node ids, each with Capacity slots.
	Nodes    []string
	Capacity int
	// Jobs is how many jobs the run carries through their life.
	Jobs int
	// SharedListener makes all nodes hear NOTIFY on one LISTEN connection
	// (the nodes of one process) instead of one each (separate processes).
	// PostgreSQL signals every listening backend on each notifying commit,
	// so the number of listeners is a real cost on the server.
	SharedListener bool
	// OnStart, if set, is called once the listeners are ready, right
	// before the first job is enqueued (a benchmark resets its timer).
	OnStart func()
}

// Run enqueues cfg.Jobs jobs and runs them to completion: a producer loop
// assigns with AssignPolite (no host limits: this measures the queue) in
// rounds of up to its default batch, again at once when a round was full,
// else on NOTIFY or its fallback tick; each node claims what it was
// assigned when woken, with the consumer's fallback poll; one completer
// batches every node's completions into CompleteMany. It returns the time
// from the first enqueue to the last completion.
func Run(ctx context.Context, pool *pgxpool.Pool, q *jobqueue.Queue, cfg Config) (time.Duration, error) {
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

	specs := make([]jobqueue.Spec, cfg.Jobs)
	for i := range specs {
		specs[i] = jobqueue.Spec{URL: fmt.Sprintf("http://bench.example.com/page/%d", i)}
	}

	// Listeners first, so that no wake-up is missed.
	prodL := jobqueue.NewListener(pool, jobqueue.ListenerConfig{Channels: []string{jobqueue.ChannelProducer}})
	goRun(prodL.Run)
	listeners := []*jobqueue.Listener{prodL}
	wake := make([]chan struct{}, len(cfg.Nodes)) // wake[i] wakes node i
	for i := range wake {
		wake[i] = make(chan struct{}, 1)
	}
	poke := func(targets ...int) {
		for _, i := range targets {
			select {
			case wake[i] <- struct{}{}:
			default:
			}
		}
	}
	if cfg.SharedListener {
		chans := make([]string, len(cfg.Nodes))
		byChan := make(map[string]int, len(cfg.Nodes))
		for i, id := range cfg.Nodes {
			chans[i] = jobqueue.NodeChannel(id)
			byChan[chans[i]] = i
		}
		l := jobqueue.NewListener(pool, jobqueue.ListenerConfig{Channels: chans, Buffer: 1024})
		listeners = append(listeners, l)
		goRun(l.Run)
		goRun(func(ctx context.Context) error {
			for {
				n, err := l.Wait(ctx)
				if err != nil {
					return nil
				}
				if n.Payload == jobqueue.PayloadReconnected {
					for i := range wake {
						poke(i)
					}
					continue
				}
				poke(byChan[n.Channel])
			}
		})
	} else {
		for i, id := range cfg.Nodes {
			l := jobqueue.NewListener(pool, jobqueue.ListenerConfig{Channels: []string{jobqueue.NodeChannel(id)}})
			listeners = append(listeners, l)
			goRun(l.Run)
			goRun(func(ctx context.Context) error {
				for {
					if _, err := l.Wait(ctx); err != nil {
						return nil
					}
					poke(i)
				}
			})
		}
	}
	for _, l := range listeners {
		select {
		case <-l.Ready():
		case <-ctx.Done():
			if runErr != nil {
				return 0, runErr
			}
			return 0, fmt.Errorf("queuesim: listeners: %w", ctx.Err())
		}
	}

	if cfg.OnStart != nil {
		cfg.OnStart()
	}
	in := make(chan jobqueue.Completion, len(cfg.Nodes)*cfg.Capacity)
	start := time.Now()
	// Completer: whatever is already waiting goes in one batch; no timer, so
	// a lone completion is not delayed, and under load batches grow.
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
			out, err := q.CompleteMany(ctx, batch)
			if err != nil {
				return err
			}
			n := 0
			for _, o := range out {
				if o.Err == nil {
					n++
				}
			}
			if done.Add(int64(n)) == int64(cfg.Jobs) {
				close(allDone)
			}
		}
	})
	// Producer.
	goRun(func(ctx context.Context) error {
		tick := time.NewTicker(producerTick)
		defer tick.Stop()
		noLimits := func(string) jobqueue.HostPolicy { return jobqueue.HostPolicy{} }
		for {
			rep, err := q.AssignPolite(ctx, noLimits, assignBatch, jobqueue.AssignSpread)
			if err != nil {
				return err
			}
			if rep.Total() == assignBatch {
				continue
			}
			select {
			case <-ctx.Done():
				return nil
			case <-prodL.C():
			case <-tick.C:
			}
		}
	})
	// Nodes.
	for i, id := range cfg.Nodes {
		goRun(func(ctx context.Context) error {
			poll := time.NewTicker(nodePoll)
			defer poll.Stop()
			for {
				jobs, err := q.Claim(ctx, id, cfg.Capacity)
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
		for off := 0; off < cfg.Jobs; off += submitBatch {
			if _, _, err := q.Enqueue(ctx, specs[off:min(off+submitBatch, cfg.Jobs)]); err != nil {
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
	if done.Load() != int64(cfg.Jobs) {
		return 0, fmt.Errorf("queuesim: interrupted after %d of %d jobs: %w", done.Load(), cfg.Jobs, ctx.Err())
	}
	return elapsed, nil
}
