package farm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/pgtest"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// TestMain gives the package's tests a private PostgreSQL (pgtest), and
// turns the test binary into a consumer node process when the process tests
// re-execute it with childEnv set: exit codes and leftover Chromes are then
// those of a real process.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(consumerChild())
	}
	pgtest.Main(m)
}

// The child's configuration, passed in its environment.
const (
	childEnv         = "FARM_TEST_CONSUMER_CHILD"
	childDB          = "FARM_TEST_CHILD_DB"
	childNode        = "FARM_TEST_CHILD_NODE"
	childRecycle     = "FARM_TEST_CHILD_RECYCLE"
	childExit        = "FARM_TEST_CHILD_EXIT"
	childProfileRoot = "FARM_TEST_CHILD_PROFILE_ROOT"
	childStats       = "FARM_TEST_CHILD_STATS"
	childBackoff     = "FARM_TEST_CHILD_BACKOFF_MS"
)

// Exit codes of the child, as `farm consumer` has them.
const (
	childExitOK      = 0
	childExitError   = 1
	childExitRecycle = 75
)

// childReport is what the child writes to the childStats file before it exits.
type childReport struct {
	MaxBusy       int    `json:"max_busy"`
	Jobs          int    `json:"jobs"`
	Forfeited     int    `json:"forfeited"` // starts forfeited (supervisor.Stats)
	ChromeStarts  int    `json:"chrome_starts"`
	ChromeKills   int    `json:"chrome_kills"`
	ChromeCrashes int    `json:"chrome_crashes"`
	Completed     int64  `json:"completed"`
	Failed        int64  `json:"failed"`
	Err           string `json:"err,omitempty"`
	Fenced        bool   `json:"fenced,omitempty"`
}

// consumerChild runs one consumer node the way `farm consumer` does — SIGTERM
// drains, ErrRecycle exits 75 — and reports what it saw.
func consumerChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log, err := zap.NewDevelopment()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return childExitError
	}
	log = log.WithOptions(zap.IncreaseLevel(zap.InfoLevel))
	envInt := func(name string) int {
		n, err := strconv.Atoi(os.Getenv(name))
		if err != nil {
			log.Fatal("bad child env", zap.String("name", name), zap.Error(err))
		}
		return n
	}
	pool, err := pgxpool.New(ctx, os.Getenv(childDB))
	if err != nil {
		log.Error("pool", zap.Error(err))
		return childExitError
	}
	defer pool.Close()
	q := jobqueue.New(pool, jobqueue.Config{
		Logger:      log.Named("queue"),
		BackoffBase: time.Duration(envInt(childBackoff)) * time.Millisecond,
		// A heartbeat never goes stale within a test: a child restarted
		// under a killed one's id gets in only by proving it gone.
		StaleAfter: time.Hour,
	})
	cfg := DefaultConsumerConfig(q)
	cfg.NodeID = os.Getenv(childNode)
	cfg.Logger = log
	cfg.HeartbeatInterval = 500 * time.Millisecond
	cfg.Supervisor.ChromeRecycleJobs = envInt(childRecycle)
	cfg.Supervisor.ExitAfterJobs = envInt(childExit)
	cfg.Supervisor.Browser.ProfileRoot = os.Getenv(childProfileRoot)
	cfg.Egress = testSiteEgress()
	c, err := NewConsumer(cfg)
	if err != nil {
		log.Error("consumer", zap.Error(err))
		return childExitError
	}

	// Busy sessions are sampled throughout, far more often than any job
	// starts or ends.
	var rep childReport
	var mu sync.Mutex
	sampleCtx, stopSampling := context.WithCancel(context.Background())
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			st := c.SupervisorStats()
			mu.Lock()
			rep.MaxBusy = max(rep.MaxBusy, st.Busy)
			mu.Unlock()
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
		}
	})
	runErr := c.Run(ctx)
	stopSampling()
	sampler.Wait()

	st := c.SupervisorStats()
	cs := c.Stats()
	rep.Jobs, rep.Forfeited, rep.ChromeStarts, rep.ChromeKills, rep.ChromeCrashes = st.JobsSinceProcessStart, st.StartsForfeited, st.ChromeStarts, st.ChromeKills, st.ChromeCrashes
	rep.Completed, rep.Failed = cs.Completed, cs.Failed
	code := childExitOK
	switch {
	case errors.Is(runErr, ErrRecycle):
		code = childExitRecycle
	case errors.Is(runErr, ErrFenced):
		rep.Err = runErr.Error()
		rep.Fenced = true
	case runErr != nil:
		rep.Err = runErr.Error()
		code = childExitError
	}
	data, _ := json.Marshal(rep)
	if err := os.WriteFile(os.Getenv(childStats), data, 0o644); err != nil {
		log.Error("writing the report", zap.Error(err))
		return childExitError
	}
	log.Info("child exiting", zap.Int("code", code), zap.Error(runErr))
	_ = log.Sync()
	return code
}
