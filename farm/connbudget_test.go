package farm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// TestConsumerConnectionBudget runs a real node on a pool of the budgeted
// size, with LISTEN and poll-only, and watches pg_stat_activity while it
// renders 24 jobs: it never holds more than ConsumerConnBudget connections,
// it finishes every job on them (nothing in the node needs a second pooled
// connection while it holds one), and in poll-only mode no connection of
// it ever LISTENs.
func TestConsumerConnectionBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site := testutil.StartSite(t, testsite.Options{Items: 20})
	for _, pollOnly := range []bool{false, true} {
		name := "listen"
		if pollOnly {
			name = "poll-only"
		}
		t.Run(name, func(t *testing.T) {
			db := newTestDB(t)
			const app = "budget-node"
			cfg, err := pgxpool.ParseConfig(db.conn)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = ConsumerPoolConns(pollOnly)
			cfg.ConnConfig.RuntimeParams["application_name"] = app
			if pollOnly {
				jobqueue.ForTransactionPooling(cfg)
			}
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			nodeQ := jobqueue.New(pool, jobqueue.Config{BackoffBase: testBackoff})

			// The sampler reads pg_stat_activity on the test's own pool.
			var mu sync.Mutex
			maxConns, listened := 0, false
			sctx, stopSampler := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() {
				for sctx.Err() == nil {
					var n int
					var l bool
					err := db.pool.QueryRow(sctx, `SELECT count(*), coalesce(bool_or(query ILIKE 'LISTEN%'), false)
						FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()`, app).Scan(&n, &l)
					if err == nil {
						mu.Lock()
						maxConns, listened = max(maxConns, n), listened || l
						mu.Unlock()
					}
					select {
					case <-sctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
				}
			})
			defer func() { stopSampler(); wg.Wait() }()

			node := "node-budget"
			db.startAssigner(t, node, defaultCapacity())
			batch, _ := db.enqueue(t, site.URL, pagePaths(24, "/page/%d?delay=100"))
			rc := startConsumer(t, db, node, shortProfileRoot(t), func(c *ConsumerConfig) {
				c.Queue = nodeQ
				c.PollOnly = pollOnly
				if pollOnly {
					c.PollInterval = DefaultPollOnlyInterval
				}
			})
			testutil.Eventually(t, 3*time.Minute, "24 jobs completed", func() bool {
				return db.counts(t, batch).By[jobqueue.StateCompleted] == 24
			})
			if err := rc.stop(t, time.Minute); err != nil {
				t.Fatalf("Run after stop = %v", err)
			}
			stopSampler()
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%s: at most %d connections, LISTEN seen: %v", name, maxConns, listened)
			if maxConns < 1 || maxConns > ConsumerConnBudget {
				t.Errorf("node held up to %d connections; budget %d", maxConns, ConsumerConnBudget)
			}
			if listened == pollOnly {
				t.Errorf("LISTEN seen = %v with poll-only %v", listened, pollOnly)
			}
		})
	}
}
