package farm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// simNode is a consumer without Chrome: it listens for assignments, claims
// up to its capacity, "renders" for a random short time and completes. It
// records what it saw so tests can check the producer's promises.
type simNode struct {
	id       string
	capacity int
	q        *jobqueue.Queue
	pool     *pgxpool.Pool
	work     func() time.Duration
	// pollOnly: no LISTEN; claims every DefaultPollOnlyInterval, like a
	// consumer with PollOnly.
	pollOnly bool
	// heartbeat, when false, stops the heartbeats (the node goes silent) while
	// it keeps working.
	mu          sync.Mutex
	heartbeat   bool
	busy        int
	maxBusy     int
	claimed     []int64
	passed      map[int64]bool // jobs past the freeze check: their completion is under way
	starts      map[int64]time.Time
	stopClaim   bool
	completeErr []error
}

func newSimNode(t testing.TB, q *jobqueue.Queue, pool *pgxpool.Pool, id string, capacity int, work func() time.Duration) *simNode {
	t.Helper()
	if _, _, err := q.Register(context.Background(), jobqueue.NodeInfo{ID: id, Hostname: "sim", Capacity: capacity}); err != nil {
		t.Fatal(err)
	}
	return &simNode{id: id, capacity: capacity, q: q, pool: pool, work: work, heartbeat: true, starts: map[int64]time.Time{}}
}

func (n *simNode) setHeartbeat(on bool) { n.mu.Lock(); n.heartbeat = on; n.mu.Unlock() }

// freeze makes the node stop claiming and completing, as if it hung.
// It returns the jobs the node holds from then on: claimed, and not already
// on their way to completion when it froze.
func (n *simNode) freeze() []int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopClaim = true
	var held []int64
	for _, id := range n.claimed {
		if !n.passed[id] {
			held = append(held, id)
		}
	}
	return held
}

// run works until ctx ends.
func (n *simNode) run(ctx context.Context) error {
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { n.heartbeats(lctx) })
	var wake <-chan jobqueue.Notification
	pollEvery := 200 * time.Millisecond
	if n.pollOnly {
		pollEvery = DefaultPollOnlyInterval
	} else {
		l := jobqueue.NewListener(n.pool, jobqueue.ListenerConfig{Channels: []string{jobqueue.NodeChannel(n.id)}})
		wg.Go(func() { _ = l.Run(lctx) })
		select {
		case <-l.Ready():
		case <-ctx.Done():
			return nil
		}
		wake = l.C()
	}
	done := make(chan struct{}, n.capacity)
	poll := time.NewTicker(pollEvery)
	defer poll.Stop()
	var work sync.WaitGroup
	defer work.Wait()
	for {
		n.mu.Lock()
		free := n.capacity - n.busy
		frozen := n.stopClaim
		n.mu.Unlock()
		if free > 0 && !frozen {
			jobs, err := n.q.Claim(ctx, n.id, free)
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("node %s claim: %w", n.id, err)
			}
			now := time.Now()
			n.mu.Lock()
			n.busy += len(jobs)
			n.maxBusy = max(n.maxBusy, n.busy)
			for _, j := range jobs {
				n.claimed = append(n.claimed, j.ID)
				n.starts[j.ID] = now
			}
			n.mu.Unlock()
			for _, j := range jobs {
				work.Add(1)
				go func() {
					defer work.Done()
					n.render(ctx, j)
					n.mu.Lock()
					n.busy--
					n.mu.Unlock()
					done <- struct{}{}
				}()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-done:
		case <-poll.C:
		}
	}
}

func (n *simNode) render(ctx context.Context, j jobqueue.Job) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(n.work()):
	}
	for {
		n.mu.Lock()
		frozen := n.stopClaim
		if !frozen {
			if n.passed == nil {
				n.passed = map[int64]bool{}
			}
			n.passed[j.ID] = true
		}
		n.mu.Unlock()
		if !frozen {
			break
		}
		select { // a hung node holds its jobs until the test ends
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	err := completeJob(ctx, n.q, j.ID, n.id, jobqueue.Result{FinalURL: j.Spec.URL, Status: 200, Title: "sim"})
	if err != nil && !errors.Is(err, context.Canceled) {
		n.mu.Lock()
		n.completeErr = append(n.completeErr, err)
		n.mu.Unlock()
	}
}

func (n *simNode) heartbeats(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		n.mu.Lock()
		on, busy := n.heartbeat, n.busy
		n.mu.Unlock()
		if on {
			_, _ = n.q.Incarnation(jobqueue.Node{ID: n.id}).Heartbeat(ctx, jobqueue.NodeLoad{BusySessions: busy})
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func randomWork(lo, hi time.Duration) func() time.Duration {
	return func() time.Duration { return lo + time.Duration(rand.Int64N(int64(hi-lo)+1)) }
}

// runActors runs fns until the test ends; it fails the test if one returns an error.
func runActors(t *testing.T, ctx context.Context, fns ...func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, f := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil {
				t.Errorf("actor: %v", err)
			}
		}()
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}
