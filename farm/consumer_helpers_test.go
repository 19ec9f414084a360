package farm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/browser/egress"
	"github.com/browserfarm/browserfarm/internal/pgtest"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

// testSiteEgress lets the consumer tests' jobs reach the test site, which
// listens on 127.0.0.1 (refused by the default policy), and nothing else
// on loopback.
func testSiteEgress() egress.Policy {
	return egress.Policy{Allow: []egress.Rule{{Prefix: netip.MustParsePrefix("127.0.0.1/32")}}}
}

// testBackoff is the retry delay base in the consumer tests: long enough to
// be real, short enough not to slow the tests.
const testBackoff = 100 * time.Millisecond

// testDB is one test's database, migrated, with a queue on it.
type testDB struct {
	conn string
	pool *pgxpool.Pool
	q    *jobqueue.Queue
}

func newTestDB(t *testing.T) testDB {
	t.Helper()
	conn := pgtest.NewDB(t)
	pool, err := pgxpool.New(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := jobqueue.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return testDB{conn: conn, pool: pool, q: jobqueue.New(pool, jobqueue.Config{BackoffBase: testBackoff})}
}

// enqueue submits one job per path (relative to base), waiting for #ready.
func (db testDB) enqueue(t *testing.T, base string, paths []string) (batch string, ids []int64) {
	t.Helper()
	specs := make([]jobqueue.Spec, len(paths))
	for i, p := range paths {
		specs[i] = jobqueue.Spec{URL: base + p, Wait: &jobqueue.Wait{Selector: "#ready"}, MaxAttempts: 5}
	}
	batch, ids, err := db.q.Enqueue(context.Background(), specs)
	if err != nil {
		t.Fatal(err)
	}
	return batch, ids
}

func pagePaths(n int, format string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return out
}

// counts returns the batch's jobs by state.
func (db testDB) counts(t *testing.T, batch string) jobqueue.BatchCounts {
	t.Helper()
	c, err := db.q.BatchCounts(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// resultRows returns the number of result rows and of distinct jobs with one.
func (db testDB) resultRows(t *testing.T) (rows, jobs int) {
	t.Helper()
	err := db.pool.QueryRow(context.Background(),
		"SELECT count(*), count(DISTINCT job_id) FROM results").Scan(&rows, &jobs)
	if err != nil {
		t.Fatal(err)
	}
	return rows, jobs
}

// startAssigner stands in for the producer: it assigns pending jobs to node
// whenever the queue says slots or jobs appeared, and on a short tick, until
// the test ends. Assign itself keeps the node within its capacity.
func (db testDB) startAssigner(t *testing.T, node string, capacity int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := jobqueue.NewListener(db.pool, jobqueue.ListenerConfig{Channels: []string{jobqueue.ChannelProducer}})
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.Run(ctx) })
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := db.q.Assign(ctx, node, capacity); err != nil && ctx.Err() == nil &&
				!errors.Is(err, jobqueue.ErrNotFound) {
				t.Errorf("assign: %v", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-l.C():
			case <-tick.C:
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// sampleHeld records, until the test ends, the most jobs the node held
// (queued + processing) at any sample; stop returns it.
func (db testDB) sampleHeld(t *testing.T, node string) (stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var peak int
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			var n int
			err := db.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE node_id = $1 AND state IN ('queued', 'processing')`, node).Scan(&n)
			if err == nil {
				peak = max(peak, n)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	var once sync.Once
	stop = func() int {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
		return peak
	}
	t.Cleanup(func() { stop() })
	return stop
}

// chromeProcs lists live processes whose command line uses a profile
// directory under root: the Chromes a test started.
func chromeProcs(root string) []int {
	marker := []byte("--user-data-dir=" + root)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, marker) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
			continue // a zombie holds no memory; its parent reaps it
		}
		out = append(out, pid)
	}
	return out
}

// child is a consumer node running in a child process (see consumerChild).
type child struct {
	cmd    *exec.Cmd
	report string
	done   chan struct{}
	err    error
	stderr *bytes.Buffer
}

type childOpts struct {
	node        string
	recycle     int
	exitAfter   int
	profileRoot string
}

// startChild starts a consumer process on db.
func startChild(t *testing.T, db testDB, o childOpts) *child {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		childEnv+"=1",
		childDB+"="+db.conn,
		childNode+"="+o.node,
		childRecycle+"="+strconv.Itoa(o.recycle),
		childExit+"="+strconv.Itoa(o.exitAfter),
		childProfileRoot+"="+o.profileRoot,
		childStats+"="+report,
		childBackoff+"="+strconv.FormatInt(testBackoff.Milliseconds(), 10),
	)
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, report: report, done: make(chan struct{}), stderr: &stderr}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("consumer %s output:\n%s", o.node, tail(stderr.String(), 6000))
		}
	})
	return c
}

// wait waits for the child to exit and returns its exit code and report.
func (c *child) wait(t *testing.T, timeout time.Duration) (int, childReport) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(timeout):
		t.Fatalf("consumer process did not exit within %v", timeout)
	}
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(c.err, &ee):
		code = ee.ExitCode()
	case c.err != nil:
		t.Fatalf("consumer process: %v", c.err)
	}
	var rep childReport
	if data, err := os.ReadFile(c.report); err == nil {
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatalf("consumer report: %v", err)
		}
	}
	return code, rep
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// shortProfileRoot is a profile root short enough that Chrome's temp dir
// fits inside each profile (a t.TempDir path is too deep for Chrome's socket
// path, and the browser package then puts the temp dir in /tmp). The tests
// that SIGKILL a consumer leave its Chrome dirs behind by design; under a
// root of the test's own they go with it.
func shortProfileRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// defaultCapacity is the node capacity the supervisor defaults to, which the
// test consumers run with.
func defaultCapacity() int { return supervisor.DefaultConfig().Capacity }

// completeJob completes one job as nodeID through CompleteMany, the
// product's form, bound to no registration of the node (incarnation 0
// passes every fence).
func completeJob(ctx context.Context, q *jobqueue.Queue, jobID int64, nodeID string, res jobqueue.Result) error {
	out, err := q.CompleteMany(ctx, []jobqueue.Completion{{JobID: jobID, NodeID: nodeID, Result: res}})
	if err != nil {
		return err
	}
	return out[0].Err
}
