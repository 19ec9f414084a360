package farm

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/internal/pgtest"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// testClock is a settable clock shared by the queue and the producer.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newRetentionQueue is a queue on a fresh database whose clock is clock,
// with leases that outlast the test, and the given nodes registered.
func newRetentionQueue(t *testing.T, clock *testClock, nodes ...string) (*pgxpool.Pool, *jobqueue.Queue) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if err := jobqueue.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	q := jobqueue.New(pool, jobqueue.Config{Now: clock.Now, Lease: 100 * time.Hour})
	for _, id := range nodes {
		if _, _, err := q.Register(ctx, jobqueue.NodeInfo{ID: id, Hostname: "h", Capacity: 6}); err != nil {
			t.Fatal(err)
		}
	}
	return pool, q
}

// assignAndClaim assigns node up to assign jobs and starts claim of them.
func assignAndClaim(t *testing.T, q *jobqueue.Queue, node string, assign, claim int) []jobqueue.Job {
	t.Helper()
	ctx := context.Background()
	if _, err := q.Assign(ctx, node, assign); err != nil {
		t.Fatal(err)
	}
	jobs, err := q.Claim(ctx, node, claim)
	if err != nil || len(jobs) != claim {
		t.Fatalf("claim = %d, %v; want %d", len(jobs), err, claim)
	}
	return jobs
}

// The leader's retention deletes what finished and the politeness rows of
// hosts idle longer than the retention ago, and the nodes that went longer
// than the node retention ago, and nothing live: pending, queued and
// processing jobs older than the retention stay, and so does a node that
// exited recently, and the row of a host with jobs.
func TestProducerRetention(t *testing.T) {
	ctx := context.Background()
	clock := &testClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	pool, q := newRetentionQueue(t, clock, "gone", "recent", "worker")
	_, ids, err := q.Enqueue(ctx, pageSpecsFor(6, "retention.test"))
	if err != nil {
		t.Fatal(err)
	}
	// ids[0:2] finished, ids[2] processing, ids[3] queued, the rest pending.
	jobs := assignAndClaim(t, q, "worker", 4, 3)
	if err := completeJob(ctx, q, jobs[0].ID, "worker", jobqueue.Result{Title: "ok"}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Incarnation(jobqueue.Node{ID: "worker"}).Fail(ctx, jobs[1].ID, "boom", "http", false); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetNodeState(ctx, "gone", jobqueue.NodeExited); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3 * time.Hour)
	if _, err := q.SetNodeState(ctx, "recent", jobqueue.NodeExited); err != nil {
		t.Fatal(err)
	}
	// Politeness rows: an idle host's, and that of a host whose last start
	// is as old but which has jobs waiting.
	if _, err := pool.Exec(ctx, "INSERT INTO hosts (host, last_started_at) VALUES ('idle.test', $1), ('retention.test', $1)",
		clock.Now().Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// The worker stays live for the stale check (heartbeats at the test
	// clock's time are hours ahead of the database's).
	p := newTestProducer(t, q, pool, func(c *ProducerConfig) {
		c.Retention, c.NodeRetention, c.Now, c.StaleAfter = time.Hour, 2*time.Hour, clock.Now, 1000*time.Hour
	})
	stop := runActors(t, ctx, p.Run)
	testutil.Eventually(t, time.Minute, "the gone node deleted", func() bool {
		_, err := q.GetNode(ctx, "gone")
		return errors.Is(err, jobqueue.ErrNotFound)
	})
	testutil.Eventually(t, time.Minute, "the finished jobs purged", func() bool {
		var n int64
		return pool.QueryRow(ctx, "SELECT count(*) FROM jobs WHERE state IN ('completed', 'failed')").Scan(&n) == nil && n == 0
	})
	testutil.Eventually(t, time.Minute, "the idle host's row deleted", func() bool {
		var n int64
		return pool.QueryRow(ctx, "SELECT count(*) FROM hosts WHERE host = 'idle.test'").Scan(&n) == nil && n == 0
	})
	stop()
	var hosts int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM hosts WHERE host = 'retention.test'").Scan(&hosts); err != nil || hosts != 1 {
		t.Errorf("the row of a host with live jobs: %d, %v; want kept", hosts, err)
	}
	if _, err := q.GetNode(ctx, "recent"); err != nil {
		t.Errorf("a node exited less than the node retention ago: %v", err)
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if id == jobs[0].ID || id == jobs[1].ID {
			continue
		}
		if j, err := q.Get(ctx, id); err != nil {
			t.Errorf("live job %d: %v", id, err)
		} else if j.State.Finished() {
			t.Errorf("live job %d is %s", id, j.State)
		}
	}
	if live := st.Jobs[jobqueue.StatePending] + st.Jobs[jobqueue.StateQueued] + st.Jobs[jobqueue.StateProcessing]; live != 4 {
		t.Errorf("live jobs after the purge: %v, want 4", st.Jobs)
	}
	if st.Lifetime.JobsCompleted != 1 || st.Lifetime.JobsFailed != 1 {
		t.Errorf("lifetime counters after the purge: %+v", st.Lifetime)
	}
}

// The node retention is its own: with the jobs kept forever, a node gone
// longer than the node retention ago is still deleted, its finished jobs
// stay, and its lifetime counters move into the farm's.
func TestProducerNodeRetentionAlone(t *testing.T) {
	ctx := context.Background()
	clock := &testClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	pool, q := newRetentionQueue(t, clock, "gone", "recent")
	if _, _, err := q.Enqueue(ctx, pageSpecsFor(1, "retention.test")); err != nil {
		t.Fatal(err)
	}
	jobs := assignAndClaim(t, q, "gone", 1, 1)
	if err := completeJob(ctx, q, jobs[0].ID, "gone", jobqueue.Result{Title: "ok"}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetNodeState(ctx, "gone", jobqueue.NodeExited); err != nil {
		t.Fatal(err)
	}
	clock.Advance(25 * time.Hour)
	if _, err := q.SetNodeState(ctx, "recent", jobqueue.NodeExited); err != nil {
		t.Fatal(err)
	}
	p := newTestProducer(t, q, pool, func(c *ProducerConfig) {
		c.Retention, c.NodeRetention, c.Now, c.StaleAfter = Off, 0, clock.Now, 1000*time.Hour
	})
	stop := runActors(t, ctx, p.Run)
	testutil.Eventually(t, time.Minute, "the node gone over a day ago deleted (the default node retention)", func() bool {
		_, err := q.GetNode(ctx, "gone")
		return errors.Is(err, jobqueue.ErrNotFound)
	})
	stop()
	if _, err := q.GetNode(ctx, "recent"); err != nil {
		t.Errorf("a node exited less than the node retention ago: %v", err)
	}
	if j, err := q.Get(ctx, jobs[0].ID); err != nil || j.State != jobqueue.StateCompleted {
		t.Errorf("the finished job with the retention off: %v, %v; want kept, completed", j.State, err)
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Lifetime.JobsCompleted != 1 {
		t.Errorf("the farm's lifetime counters after the node went: %+v, want its job", st.Lifetime)
	}
}
