package jobqueue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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

// lifecycleOpJobs is the number of jobs one BenchmarkLifecycle op carries
// through their whole life, so that one -benchtime=Nx suits both benchmarks.
const lifecycleOpJobs = 1000

// The product's defaults (farm's producer batch and tick, the consumer's
// fallback poll): jobqueue cannot import farm, so they are restated here.
const (
	benchAssignBatch  = 5000
	benchProducerTick = time.Second
	benchNodePoll     = 10 * time.Second
)

func noHostLimits(string) HostPolicy { return HostPolicy{} }

// lifecycleSim runs the whole job lifecycle without a browser: a producer
// assigns pending jobs to nodes as slots free up, each node claims what it
// was assigned and completes it at once through a shared batching completer.
// Wake-ups travel over LISTEN/NOTIFY like in production.
type lifecycleSim struct {
	q        *Queue
	pool     *pgxpool.Pool
	nodes    []string
	capacity int
	done     atomic.Int64
}

// completer batches completions from all nodes into CompleteMany calls.
type completer struct {
	q       *Queue
	in      chan Completion
	maxSize int
	onDone  func(n int)
}

func (c *completer) run(ctx context.Context) error {
	batch := make([]Completion, 0, c.maxSize)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return nil
		case it := <-c.in:
			batch = append(batch, it)
		}
		// Take whatever else is already waiting: no timer, so a lone
		// completion is not delayed, and under load batches grow by themselves.
	fill:
		for len(batch) < c.maxSize {
			select {
			case it := <-c.in:
				batch = append(batch, it)
			default:
				break fill
			}
		}
		out, err := c.q.CompleteMany(ctx, batch)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		n := 0
		for _, o := range out {
			if o.Err == nil {
				n++
			}
		}
		c.onDone(n)
	}
}

// BenchmarkLifecycle: enqueue → assign → claim → complete for 16 simulated
// nodes of 6 slots; one op is 1,000 jobs. Sub-benchmarks differ in how nodes hear NOTIFY: one
// LISTEN connection per node (as 16 separate node processes would), or one
// shared by all the nodes of this process. PostgreSQL signals every
// listening backend of the database on each notifying commit, so the number
// of listeners is a real cost on the database server.
func BenchmarkLifecycle(b *testing.B) {
	b.Run("listener=per-node", func(b *testing.B) { benchLifecycle(b, false) })
	b.Run("listener=shared", func(b *testing.B) { benchLifecycle(b, true) })
}

func benchLifecycle(b *testing.B, sharedListener bool) {
	const nodes, capacity = 16, 6
	q, pool := newTestQueue(b, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sim := &lifecycleSim{q: q, pool: pool, capacity: capacity}
	for i := range nodes {
		id := fmt.Sprintf("bench-node-%02d", i)
		mustRegister(b, q, id, capacity)
		sim.nodes = append(sim.nodes, id)
	}
	total := b.N * lifecycleOpJobs
	specs := pageSpecs(total, "bench.example.com")

	var wg sync.WaitGroup
	errc := make(chan error, 64)
	allDone := make(chan struct{})
	comp := &completer{q: q, in: make(chan Completion, nodes*capacity), maxSize: 200, onDone: func(n int) {
		if sim.done.Add(int64(n)) == int64(total) {
			close(allDone)
		}
	}}
	goRun := func(f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				errc <- err
				cancel()
			}
		}()
	}

	// Listeners first, so that no wake-up is missed.
	prodL := NewListener(pool, ListenerConfig{Channels: []string{ChannelProducer}})
	goRun(prodL.Run)
	// wake[i] wakes node i.
	wake := make([]chan struct{}, nodes)
	for i := range wake {
		wake[i] = make(chan struct{}, 1)
	}
	listeners := []*Listener{prodL}
	if sharedListener {
		chans := make([]string, nodes)
		byChan := make(map[string]int, nodes)
		for i, id := range sim.nodes {
			chans[i] = NodeChannel(id)
			byChan[chans[i]] = i
		}
		l := NewListener(pool, ListenerConfig{Channels: chans, Buffer: 1024})
		listeners = append(listeners, l)
		goRun(l.Run)
		goRun(func(ctx context.Context) error {
			for {
				n, err := l.Wait(ctx)
				if err != nil {
					return nil
				}
				targets := []int{byChan[n.Channel]}
				if n.Payload == PayloadReconnected {
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
	} else {
		for i, id := range sim.nodes {
			l := NewListener(pool, ListenerConfig{Channels: []string{NodeChannel(id)}})
			listeners = append(listeners, l)
			goRun(l.Run)
			goRun(func(ctx context.Context) error {
				for {
					if _, err := l.Wait(ctx); err != nil {
						return nil
					}
					select {
					case wake[i] <- struct{}{}:
					default:
					}
				}
			})
		}
	}
	for _, l := range listeners {
		select {
		case <-l.Ready():
		case err := <-errc:
			b.Fatal(err)
		}
	}

	b.ResetTimer()
	start := time.Now()
	goRun(comp.run)
	// Producer: what farm's producer does — a politeness-aware round
	// (AssignPolite; no host limits here, so this measures the queue, not the
	// politeness policy) of up to its default batch, again at once when the
	// batch was full, else on NOTIFY or its fallback tick.
	goRun(func(ctx context.Context) error {
		tick := time.NewTicker(benchProducerTick)
		defer tick.Stop()
		for {
			rep, err := q.AssignPolite(ctx, noHostLimits, benchAssignBatch, AssignSpread)
			if err != nil {
				return err
			}
			if rep.Total() == benchAssignBatch {
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
	// Nodes: claim when woken by NOTIFY, with the consumer's fallback poll.
	for i, id := range sim.nodes {
		goRun(func(ctx context.Context) error {
			poll := time.NewTicker(benchNodePoll)
			defer poll.Stop()
			for {
				jobs, err := q.Claim(ctx, id, capacity)
				if err != nil {
					return err
				}
				for _, j := range jobs {
					select {
					case comp.in <- Completion{JobID: j.ID, NodeID: id, Result: Result{FinalURL: j.Spec.URL, Status: 200, Title: "ok"}}:
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
		for off := 0; off < total; off += 2000 {
			if _, _, err := q.Enqueue(ctx, specs[off:min(off+2000, total)]); err != nil {
				return err
			}
		}
		return nil
	})

	select {
	case <-allDone:
	case err := <-errc:
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	wg.Wait()
	b.ReportMetric(float64(total)/elapsed.Seconds(), "jobs/s")
}
