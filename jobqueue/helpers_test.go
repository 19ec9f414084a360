package jobqueue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fakeClock is a settable clock for Config.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newTestQueue gives the test a migrated database of its own and a Queue on it.
func newTestQueue(t testing.TB, cfg Config) (*Queue, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if err := Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return New(pool, cfg), pool
}

func mustRegister(t testing.TB, q *Queue, id string, capacity int) {
	t.Helper()
	if _, _, err := q.Register(context.Background(), NodeInfo{ID: id, Hostname: "test", Capacity: capacity}); err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
}

// currentIncarnation is the handle of the node's current registration, as
// its process holds it.
func currentIncarnation(t testing.TB, q *Queue, id string) *Incarnation {
	t.Helper()
	n, err := q.GetNode(context.Background(), id)
	if err != nil {
		t.Fatalf("node %s: %v", id, err)
	}
	return q.Incarnation(n)
}

func mustEnqueue(t testing.TB, q *Queue, specs ...Spec) []int64 {
	t.Helper()
	_, ids, err := q.Enqueue(context.Background(), specs)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return ids
}

// pageSpecs returns n valid specs on host h.
func pageSpecs(n int, h string) []Spec {
	specs := make([]Spec, n)
	for i := range specs {
		specs[i] = Spec{URL: fmt.Sprintf("http://%s/page/%d", h, i)}
	}
	return specs
}

func mustGet(t testing.TB, q *Queue, id int64) Job {
	t.Helper()
	j, err := q.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %d: %v", id, err)
	}
	return j
}

func countRows(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// claimOne assigns and claims jobs for node until it holds n processing jobs.
func assignClaim(t testing.TB, q *Queue, node string, n int) []Job {
	t.Helper()
	ctx := context.Background()
	if _, err := q.Assign(ctx, node, n); err != nil {
		t.Fatalf("assign: %v", err)
	}
	jobs, err := q.Claim(ctx, node, n)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return jobs
}

// assignRound runs one assignment round the way the producer does
// (AssignPolite, spread), with no host limits, and returns the job ids per node.
func assignRound(ctx context.Context, q *Queue, limit int) (map[string][]int64, error) {
	rep, err := q.AssignPolite(ctx, func(string) HostPolicy { return HostPolicy{} }, limit, AssignSpread)
	return rep.Assigned, err
}

// registerIncarnation registers node id and returns its process's handle.
func registerIncarnation(t testing.TB, q *Queue, id string, capacity int) *Incarnation {
	t.Helper()
	node, _, err := q.Register(context.Background(), NodeInfo{ID: id, Capacity: capacity})
	if err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
	return q.Incarnation(node)
}

// startOne runs an assignment round (assignRound) and claims one job as in.
func startOne(t testing.TB, q *Queue, in *Incarnation) Job {
	t.Helper()
	ctx := context.Background()
	if _, err := assignRound(ctx, q, 10); err != nil {
		t.Fatal(err)
	}
	jobs, err := in.Claim(ctx, 1)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim = %v, %v; want one job", jobs, err)
	}
	return jobs[0]
}

// singleConnQueue is a queue on a pool of one connection of the test
// database that shared belongs to, so that jobsRowsRead counts exactly
// what the queue's statements read, and a session setting holds for all of
// them. tune, if given, adjusts the pool's configuration.
func singleConnQueue(t testing.TB, shared *pgxpool.Pool, qcfg Config, tune ...func(*pgxpool.Config)) (*Queue, *pgxpool.Pool) {
	t.Helper()
	cfg := shared.Config().Copy()
	cfg.MaxConns = 1
	for _, f := range tune {
		f(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return New(pool, qcfg), pool
}

// tableCounter is a sum of one table's statistics columns in view.
type tableCounter struct{ view, sum string }

var (
	// statRows: heap rows read, by a sequential scan or an index scan's
	// fetches (not an index-only scan's index tuples).
	statRows = tableCounter{"pg_stat_user_tables", "coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)"}
	// statHeapBlocks: blocks of the heap, its visibility map's included.
	statHeapBlocks = tableCounter{"pg_statio_user_tables", "coalesce(heap_blks_read, 0) + coalesce(heap_blks_hit, 0)"}
	// statAllBlocks: blocks of the heap and of the indexes.
	statAllBlocks = tableCounter{"pg_statio_user_tables", "coalesce(heap_blks_read, 0) + coalesce(heap_blks_hit, 0) + coalesce(idx_blks_read, 0) + coalesce(idx_blks_hit, 0)"}
)

// tableStat is counter c of table so far, the statements of pool's one
// connection included: its pending statistics are flushed first, so the
// count does not depend on timing.
func tableStat(t testing.TB, pool *pgxpool.Pool, table string, c tableCounter) int64 {
	t.Helper()
	countRows(t, pool, "SELECT 0 FROM pg_stat_force_next_flush()")
	return countRows(t, pool, "SELECT "+c.sum+" FROM "+c.view+" WHERE relname = $1", table)
}

// jobsRowsRead is how many rows of jobs have been read so far.
func jobsRowsRead(t testing.TB, pool *pgxpool.Pool) int64 {
	t.Helper()
	return tableStat(t, pool, "jobs", statRows)
}
