package farm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/internal/pgtest"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// newProducerQueue is a migrated database of the test's own and a queue on
// it whose retries come back quickly.
func newProducerQueue(t testing.TB) (*jobqueue.Queue, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.NewPool(t)
	if err := jobqueue.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return jobqueue.New(pool, jobqueue.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}), pool
}

func newTestProducer(t testing.TB, q *jobqueue.Queue, pool *pgxpool.Pool, tweak func(*ProducerConfig)) *Producer {
	t.Helper()
	cfg := ProducerConfig{Queue: q, Pool: pool, Tick: 100 * time.Millisecond, RescueInterval: 100 * time.Millisecond, Retention: Off, NodeRetention: Off,
		Elector: jobqueue.ElectorConfig{RetryInterval: 50 * time.Millisecond, CheckInterval: 50 * time.Millisecond}}
	if tweak != nil {
		tweak(&cfg)
	}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startProducer runs p until the test ends, then checks that Run returned
// nil.
func startProducer(t testing.TB, p *Producer) {
	t.Helper()
	testutil.Background(t, "producer Run", p.Run)
}

// 10 nodes × 6 slots, 3,000 jobs over 20 hosts, each host limited to 2
// concurrent jobs and 20 ms between starts: no node over capacity, no host
// over its limit or under its interval, every job completed exactly once,
// and within a host, higher priorities start first.
func TestProducerCapacityAndPoliteness(t *testing.T) {
	ctx := context.Background()
	q, pool := newProducerQueue(t)
	const (
		nodes, capacity = 10, 6
		hosts, perHost  = 20, 150
		maxPerHost      = 2
		interval        = 20 * time.Millisecond
	)
	var specs []jobqueue.Spec
	for i := 0; i < perHost; i++ {
		for h := 0; h < hosts; h++ {
			specs = append(specs, jobqueue.Spec{URL: fmt.Sprintf("http://host-%02d.test/p/%d", h, i), Priority: rand.IntN(3)})
		}
	}
	batch, ids, err := q.Enqueue(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	var sims []*simNode
	var actors []func(context.Context) error
	for i := 0; i < nodes; i++ {
		n := newSimNode(t, q, pool, fmt.Sprintf("node-%02d", i), capacity, randomWork(2*time.Millisecond, 25*time.Millisecond))
		sims = append(sims, n)
		actors = append(actors, n.run)
	}
	p := newTestProducer(t, q, pool, func(c *ProducerConfig) {
		c.Politeness = Politeness{Default: HostPolicy{MaxConcurrent: maxPerHost, MinInterval: interval}}
	})
	// Sample the database throughout: per node and per host, in one snapshot each.
	var mu sync.Mutex
	maxNode, maxHost, samples := 0, 0, 0
	sampler := func(ctx context.Context) error {
		for ctx.Err() == nil {
			ns, err := q.ListNodes(ctx)
			if err != nil {
				return nil
			}
			byHost, err := q.HostActivity(ctx, 0)
			if err != nil {
				return nil
			}
			mu.Lock()
			samples++
			for _, n := range ns {
				maxNode = max(maxNode, n.Queued+n.Processing)
			}
			for _, h := range byHost {
				maxHost = max(maxHost, int(h.Queued+h.Processing))
			}
			mu.Unlock()
		}
		return nil
	}
	stop := runActors(t, ctx, append(actors, p.Run, sampler)...)
	testutil.Eventually(t, 3*time.Minute, "every job finished", func() bool {
		c, err := q.BatchCounts(ctx, batch)
		return err == nil && c.Finished() == int64(len(ids))
	})
	stop()

	c, err := q.BatchCounts(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if c.By[jobqueue.StateCompleted] != int64(len(ids)) {
		t.Fatalf("batch: %+v, want all %d completed", c.By, len(ids))
	}
	claimedBy := map[int64]string{}
	for _, n := range sims {
		if len(n.completeErr) > 0 {
			t.Errorf("node %s: completions refused: %v", n.id, n.completeErr[0])
		}
		if n.maxBusy > capacity {
			t.Errorf("node %s ran %d jobs at once", n.id, n.maxBusy)
		}
		for _, id := range n.claimed {
			if prev, dup := claimedBy[id]; dup {
				t.Errorf("job %d claimed by %s and %s", id, prev, n.id)
			}
			claimedBy[id] = n.id
		}
	}
	if len(claimedBy) != len(ids) {
		t.Errorf("%d distinct jobs claimed, want %d", len(claimedBy), len(ids))
	}
	t.Logf("%d samples: max %d jobs on a node (capacity %d), max %d active on a host (limit %d)", samples, maxNode, capacity, maxHost, maxPerHost)
	if maxNode > capacity || maxHost > maxPerHost {
		t.Errorf("limits broken: node max %d (cap %d), host max %d (limit %d)", maxNode, capacity, maxHost, maxPerHost)
	}

	// Starts and priorities per host, from the queue's own records.
	type start struct {
		at       time.Time
		priority int
	}
	byHost := map[string][]start{}
	err = q.ExportResults(ctx, jobqueue.ExportFilter{BatchID: batch}, func(r jobqueue.ExportRow) error {
		byHost[r.Job.Host] = append(byHost[r.Job.Host], start{*r.Job.StartedAt, r.Job.Priority})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	minGap := time.Hour
	for h, starts := range byHost {
		sort.Slice(starts, func(i, j int) bool { return starts[i].at.Before(starts[j].at) })
		for i := 1; i < len(starts); i++ {
			gap := starts[i].at.Sub(starts[i-1].at)
			minGap = min(minGap, gap)
			if gap < interval {
				t.Errorf("host %s: two starts %v apart, under the %v interval", h, gap, interval)
			}
			if starts[i].priority > starts[i-1].priority {
				t.Errorf("host %s: a priority-%d job started after a priority-%d one", h, starts[i].priority, starts[i-1].priority)
			}
		}
	}
	t.Logf("smallest gap between two starts on one host: %v (interval %v)", minGap, interval)
}

// A node that stops heartbeating mid-work is declared lost; its jobs go back
// and the other nodes complete them.
func TestProducerRescuesLostNode(t *testing.T) {
	ctx := context.Background()
	q, pool := newProducerQueue(t)
	const staleAfter = 600 * time.Millisecond
	work := randomWork(20*time.Millisecond, 60*time.Millisecond)
	silent := newSimNode(t, q, pool, "silent", 6, work)
	a := newSimNode(t, q, pool, "a", 6, work)
	b := newSimNode(t, q, pool, "b", 6, work)
	batch, ids, err := q.Enqueue(ctx, pageSpecsFor(120, "rescue.test"))
	if err != nil {
		t.Fatal(err)
	}
	p := newTestProducer(t, q, pool, func(c *ProducerConfig) { c.StaleAfter = staleAfter })
	stop := runActors(t, ctx, silent.run, a.run, b.run, p.Run)

	testutil.Eventually(t, time.Minute, "the silent node to hold running jobs", func() bool {
		silent.mu.Lock()
		defer silent.mu.Unlock()
		return silent.busy > 0
	})
	held := silent.freeze()
	silent.setHeartbeat(false)
	frozeAt := time.Now()

	testutil.Eventually(t, 2*time.Minute, "every job finished", func() bool {
		c, err := q.BatchCounts(ctx, batch)
		return err == nil && c.Finished() == int64(len(ids))
	})
	t.Logf("all jobs done %v after the node went silent (stale after %v, rescue tick 100ms)", time.Since(frozeAt), staleAfter)
	stop()
	node, err := q.GetNode(ctx, "silent")
	if err != nil || node.State != jobqueue.NodeLost {
		t.Fatalf("silent node: %+v, %v; want state lost", node, err)
	}
	for _, id := range held {
		j, err := q.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		r, err := q.GetResult(ctx, id)
		if err != nil {
			t.Fatalf("job %d held by the lost node: %v (state %s)", id, err, j.State)
		}
		if j.State != jobqueue.StateCompleted || r.NodeID == "silent" {
			t.Errorf("job %d held by the lost node: state %s, completed by %q", id, j.State, r.NodeID)
		}
	}
}

// Two producers: only the leader assigns; when it dies the standby takes
// over; no job is ever assigned twice (an audit trigger records every
// pending → queued change).
func TestProducerFailover(t *testing.T) {
	ctx := context.Background()
	q, pool := newProducerQueue(t)
	if _, err := pool.Exec(ctx, `
		CREATE TABLE assign_audit (job_id bigint NOT NULL, node_id text NOT NULL);
		CREATE FUNCTION audit_assign() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF OLD.state = 'pending' AND NEW.state = 'queued' THEN
				INSERT INTO assign_audit VALUES (NEW.id, NEW.node_id);
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER audit_assign AFTER UPDATE OF state ON jobs FOR EACH ROW EXECUTE FUNCTION audit_assign();`); err != nil {
		t.Fatal(err)
	}
	work := randomWork(5*time.Millisecond, 20*time.Millisecond)
	n1 := newSimNode(t, q, pool, "n1", 6, work)
	n2 := newSimNode(t, q, pool, "n2", 6, work)
	batch, ids, err := q.Enqueue(ctx, pageSpecsFor(600, "failover.test"))
	if err != nil {
		t.Fatal(err)
	}
	p1 := newTestProducer(t, q, pool, nil)
	p2 := newTestProducer(t, q, pool, nil)
	runActors(t, ctx, n1.run, n2.run)
	stop1 := runActors(t, ctx, p1.Run)
	testutil.Eventually(t, 30*time.Second, "p1 to lead", p1.IsLeader)
	runActors(t, ctx, p2.Run)
	testutil.Eventually(t, time.Minute, "a third of the jobs done", func() bool {
		c, err := q.BatchCounts(ctx, batch)
		if p1.IsLeader() && p2.IsLeader() {
			t.Fatal("two leaders at once")
		}
		return err == nil && c.Finished() >= int64(len(ids)/3)
	})
	if p2.IsLeader() {
		t.Fatal("the standby leads while the leader is alive")
	}
	stop1() // the leader dies
	killedAt := time.Now()
	testutil.Eventually(t, 30*time.Second, "the standby to take over", p2.IsLeader)
	t.Logf("standby took over %v after the leader died", time.Since(killedAt))
	testutil.Eventually(t, 2*time.Minute, "every job finished", func() bool {
		c, err := q.BatchCounts(ctx, batch)
		return err == nil && c.Finished() == int64(len(ids))
	})
	var total, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT job_id) FROM assign_audit`).Scan(&total, &distinct); err != nil {
		t.Fatal(err)
	}
	if total != len(ids) || distinct != len(ids) {
		t.Fatalf("%d assignments of %d distinct jobs; want exactly one each of %d", total, distinct, len(ids))
	}
}

func pageSpecsFor(n int, host string) []jobqueue.Spec {
	specs := make([]jobqueue.Spec, n)
	for i := range specs {
		specs[i] = jobqueue.Spec{URL: fmt.Sprintf("http://%s/page/%d", host, i)}
	}
	return specs
}

// TestProducerWakesPollsOnceListening: polls the producer held before its
// LISTEN took effect are woken then, since rounds committed before it were
// not relayed to them.
func TestProducerWakesPollsOnceListening(t *testing.T) {
	t.Parallel()
	q, pool := newProducerQueue(t)
	hub := wake.NewHub(wake.HubConfig{})
	ctx := context.Background()
	if _, err := hub.Wait(ctx, "n1", 0); err != nil { // the node's first poll
		t.Fatal(err)
	}
	startProducer(t, newTestProducer(t, q, pool, func(c *ProducerConfig) { c.Wake = hub; c.Tick = time.Hour }))
	// The bound only ends a hung test: the wake-up comes when LISTEN does.
	if woken, err := hub.Wait(ctx, "n1", time.Minute); !woken || err != nil {
		t.Fatalf("the poll held before the producer listened: woken %v, %v", woken, err)
	}
}
