package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/farm"
	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// nodeConfig is what every simulated node shares.
type nodeConfig struct {
	dsn       string
	capacity  int
	render    time.Duration
	heartbeat time.Duration
	pollOnly  bool
	poll      time.Duration // with pollOnly
	// wakeURL, if set, is the producer's API: the node is woken by its
	// long-poll (farm/wake) instead of LISTEN.
	wakeURL string
	// started records a job's start (its Claim returning).
	started func(id int64, at time.Time)
}

// simNode holds PostgreSQL connections the way farm.Consumer does — a pool
// of farm.ConsumerPoolSize plus, unless poll-only or woken over HTTP, its
// LISTEN connection —
// and goes through the same queue calls: Register, Claim, CompleteMany and
// Heartbeat on its incarnation. A job "renders" by waiting cfg.render.
type simNode struct {
	id   string
	cfg  nodeConfig
	pool *pgxpool.Pool
	q    *jobqueue.Queue
	inc  *jobqueue.Incarnation
	// hbOffset delays the first heartbeat, so that a fleet started at once
	// does not beat in step.
	hbOffset time.Duration

	mu       sync.Mutex
	busy     int
	failures int // CompleteMany calls that failed
}

// startNode connects and registers the node.
func startNode(ctx context.Context, id string, hbOffset time.Duration, cfg nodeConfig) (*simNode, error) {
	pc, err := pgxpool.ParseConfig(cfg.dsn)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = farm.ConsumerPoolSize(!cfg.pollOnly && cfg.wakeURL == "")
	pc.ConnConfig.RuntimeParams["application_name"] = nodeAppPrefix + id
	if cfg.pollOnly {
		jobqueue.ForTransactionPooling(pc)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	q := jobqueue.New(pool, jobqueue.Config{})
	node, _, err := q.Register(ctx, jobqueue.NodeInfo{ID: id, Hostname: "benchfleet", Capacity: cfg.capacity})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("register %s: %w", id, err)
	}
	return &simNode{id: id, cfg: cfg, pool: pool, q: q, inc: q.Incarnation(node), hbOffset: hbOffset}, nil
}

// nodeAppPrefix marks the nodes' connections in pg_stat_activity.
const nodeAppPrefix = "fleet-node-"

// run works until ctx ends, then closes the node's pool.
func (n *simNode) run(ctx context.Context) error {
	defer n.pool.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	var woken <-chan jobqueue.Notification
	poll := farm.DefaultPollInterval
	var src interface {
		Ready() <-chan struct{}
		C() <-chan jobqueue.Notification
		Run(context.Context) error
	}
	switch {
	case n.cfg.wakeURL != "":
		// A transport of its own: a node is a process of its own, with one
		// connection to the producer.
		c, err := wake.NewClient(wake.ClientConfig{URL: n.cfg.wakeURL, NodeID: n.id,
			HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}})
		if err != nil {
			return err
		}
		src = c
	case n.cfg.pollOnly:
		poll = n.cfg.poll
	default:
		src = jobqueue.NewListener(n.pool, jobqueue.ListenerConfig{Channels: []string{jobqueue.NodeChannel(n.id)}})
	}
	if src != nil {
		wg.Go(func() { _ = src.Run(ctx) })
		select {
		case <-src.Ready():
		case <-ctx.Done():
			return nil
		}
		woken = src.C()
	}
	wg.Go(func() { n.heartbeats(ctx) })
	finished := make(chan jobqueue.Completion, n.cfg.capacity)
	freed := make(chan struct{}, 1)
	wg.Go(func() { n.completer(ctx, finished, freed) })

	tick := time.NewTicker(poll)
	defer tick.Stop()
	var renders sync.WaitGroup
	defer renders.Wait()
	for {
		n.mu.Lock()
		free := n.cfg.capacity - n.busy
		n.mu.Unlock()
		if free > 0 {
			jobs, err := n.inc.Claim(ctx, free)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("node %s: claim: %w", n.id, err)
			}
			now := time.Now()
			n.mu.Lock()
			n.busy += len(jobs)
			n.mu.Unlock()
			for _, j := range jobs {
				n.cfg.started(j.ID, now)
				renders.Go(func() {
					select {
					case <-ctx.Done():
						return
					case <-time.After(n.cfg.render):
					}
					select {
					case finished <- n.inc.Completion(j.ID, jobqueue.Result{FinalURL: j.Spec.URL, Status: 200, Title: "fleet"}):
					case <-ctx.Done():
					}
				})
			}
			if len(jobs) == free {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-woken:
		case <-freed:
		case <-tick.C:
		}
	}
}

// completer batches the node's finished jobs into CompleteMany calls, like
// the consumer's: whatever finished while the previous call ran goes in the
// next.
func (n *simNode) completer(ctx context.Context, in <-chan jobqueue.Completion, freed chan<- struct{}) {
	var batch []jobqueue.Completion
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case c := <-in:
			batch = append(batch, c)
		}
	more:
		for {
			select {
			case c := <-in:
				batch = append(batch, c)
			default:
				break more
			}
		}
		_, err := n.q.CompleteMany(ctx, batch)
		n.mu.Lock()
		n.busy -= len(batch)
		if err != nil && ctx.Err() == nil {
			n.failures++
		}
		n.mu.Unlock()
		select {
		case freed <- struct{}{}:
		default:
		}
	}
}

// heartbeats reports the node's load every cfg.heartbeat, the first after
// hbOffset.
func (n *simNode) heartbeats(ctx context.Context) {
	t := time.NewTimer(n.hbOffset)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.mu.Lock()
		busy := n.busy
		n.mu.Unlock()
		_, _ = n.inc.Heartbeat(ctx, jobqueue.NodeLoad{BusySessions: busy})
		t.Reset(n.cfg.heartbeat)
	}
}
