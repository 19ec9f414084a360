package jobqueue

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestQueueStatementsNeverJIT: with JIT's cost thresholds at zero, every
// statement the server plans would be compiled; the queue's hot statements
// (the assignment round, a node's claim, completion and heartbeat, and the
// stats the dashboard refreshes) must not be. On a real backlog their
// estimated cost passes the default thresholds: with 500,000 jobs pending
// the round's pick compiled itself at every round, 44 ms a round for a scan
// of 0.5 ms (noJITSQL). It skips where the server cannot tell: no LLVM, or
// no auto_explain for this role.
func TestQueueStatementsNeverJIT(t *testing.T) {
	ctx := context.Background()
	_, shared := newTestQueue(t, Config{})
	var mu sync.Mutex
	var plans []string
	q, pool := singleConnQueue(t, shared, Config{}, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			mu.Lock()
			plans = append(plans, n.Message)
			mu.Unlock()
		}
	})
	// auto_explain hands every plan to this client as a notice; it needs a
	// superuser and the server's contrib modules.
	for _, sql := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_analyze = on`, `SET auto_explain.log_level = notice`, `SET jit = on`,
		`SET jit_above_cost = 0`, `SET jit_inline_above_cost = 0`, `SET jit_optimize_above_cost = 0`} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && (pe.Code == "42501" || pe.Code == "58P01") {
				t.Skipf("%s: %v", sql, err)
			}
			t.Fatal(err)
		}
	}
	jitPlans := func() (n int, total int) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range plans {
			// A statement that turns JIT off is planned before it takes
			// effect; at a cost of 0.01 it never reaches the real
			// thresholds.
			if strings.Contains(p, "JIT:") && !strings.Contains(p, "Query Text: SELECT set_config(") {
				n++
			}
		}
		total = len(plans)
		plans = nil
		return n, total
	}
	if _, err := pool.Exec(ctx, `SELECT count(*) FROM jobs`); err != nil {
		t.Fatal(err)
	}
	if n, total := jitPlans(); total == 0 {
		t.Fatal("auto_explain sent no plan")
	} else if n == 0 {
		t.Skip("this server does not compile with JIT (no LLVM): nothing to check")
	}

	mustRegister(t, q, "n1", 6)
	mustRegister(t, q, "n2", 6)
	mustEnqueue(t, q, pageSpecs(12, "a.example")...)
	jitPlans() // the setup's own statements may compile
	rep, err := q.AssignPolite(ctx, func(string) HostPolicy { return HostPolicy{} }, 100, AssignSpread)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total() != 12 {
		t.Fatalf("assigned %d jobs, want 12", rep.Total())
	}
	jobs, err := q.Claim(ctx, "n1", 6)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 6 {
		t.Fatalf("claimed %d jobs, want 6", len(jobs))
	}
	if _, err := q.Fail(ctx, jobs[0].ID, "n1", "boom", "net", true); err != nil {
		t.Fatal(err)
	}
	items := make([]Completion, len(jobs)-1)
	for i, j := range jobs[1:] {
		items[i] = Completion{JobID: j.ID, NodeID: "n1", Result: Result{Status: 200, FinalURL: j.Spec.URL}}
	}
	if _, err := q.CompleteMany(ctx, items); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Heartbeat(ctx, "n1", NodeLoad{BusySessions: 1}); err != nil {
		t.Fatal(err)
	}
	if n, err := q.release(ctx, "n2", 0); err != nil || n != 6 {
		t.Fatalf("released %d jobs of n2's 6: %v", n, err)
	}
	if _, err := q.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	if n, total := jitPlans(); n > 0 {
		t.Errorf("%d of the %d plans of a round, a claim, a failure, a completion, a heartbeat, a release and the stats were compiled with JIT", n, total)
	} else if total == 0 {
		t.Error("auto_explain sent no plan")
	}
}
