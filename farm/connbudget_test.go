package farm

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/farm/wake"
	"github.com/browserfarm/browserfarm/farm/web"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// TestConsumerConnectionBudget runs a real node on a pool of the budgeted
// size — with LISTEN, poll-only, and woken over HTTP by a real producer —
// and watches pg_stat_activity while it renders 24 jobs: it never holds
// more than ConsumerConnBudget connections, it finishes every job on them
// (nothing in the node needs a second pooled connection while it holds
// one), and only with LISTEN does a connection of it LISTEN. Woken over
// HTTP, the node polls the queue only hourly: it finishes in time only if
// the producer's wake-ups reach it.
func TestConsumerConnectionBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site := testutil.StartSite(t, testsite.Options{Items: 20})
	for _, mode := range []string{"listen", "poll-only", "wake"} {
		pollOnly, woken := mode == "poll-only", mode == "wake"
		listen := mode == "listen"
		t.Run(mode, func(t *testing.T) {
			db := newTestDB(t)
			const app = "budget-node"
			cfg, err := pgxpool.ParseConfig(db.conn)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = ConsumerPoolSize(listen)
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
			wakeURL := ""
			if woken {
				wakeURL = startWakingProducer(t, db)
			} else {
				db.startAssigner(t, node, defaultCapacity())
			}
			batch, _ := db.enqueue(t, site.URL, pagePaths(24, "/page/%d?delay=100"))
			rc := startConsumer(t, db, node, shortProfileRoot(t), func(c *ConsumerConfig) {
				c.Queue = nodeQ
				c.PollOnly = pollOnly
				switch {
				case pollOnly:
					c.PollInterval = DefaultPollOnlyInterval
				case woken:
					c.WakeURL, c.PollInterval = wakeURL, time.Hour
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
			t.Logf("%s: at most %d connections, LISTEN seen: %v", mode, maxConns, listened)
			if maxConns < 1 || maxConns > ConsumerConnBudget {
				t.Errorf("node held up to %d connections; budget %d", maxConns, ConsumerConnBudget)
			}
			if listened != listen {
				t.Errorf("LISTEN seen = %v in mode %s", listened, mode)
			}
		})
	}
}

// startWakingProducer runs a producer on db that wakes nodes over HTTP, and
// its HTTP API; it returns the API's base URL (a node's WakeURL).
func startWakingProducer(t *testing.T, db testDB) string {
	t.Helper()
	hub := wake.NewHub(wake.HubConfig{})
	srv := httptest.NewServer(web.NewServer(web.Config{Queue: db.q, Wake: hub}))
	t.Cleanup(func() {
		hub.Close() // answers the parked polls, which srv.Close waits for
		srv.Close()
	})
	// Registered after the server's cleanup, so it stops first.
	startProducer(t, newTestProducer(t, db.q, db.pool, func(c *ProducerConfig) { c.Wake = hub; c.Tick = time.Hour }))
	return srv.URL
}
