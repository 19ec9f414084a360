package farm

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/internal/pgtest"
	"github.com/browserfarm/browserfarm/internal/procstat"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
)

// loadChildEnv makes the test binary run TestLoadKeepsAKilledChromesCPU's
// check in a process of its own.
const loadChildEnv = "FARM_TEST_LOAD_CHILD"

// TestLoadKeepsAKilledChromesCPU: killing a Chrome orphans its helpers and
// renderers, which init reaps with their CPU; the sampler's count of the
// node's tree, with the Chrome's OrphanedCPUTicks added, does not go
// backwards across the kill (it did, and the sample after a recycle read 0%).
// The check runs in a child process: in this one, the other tests' Chromes,
// killed meanwhile, leave the tree with CPU this Chrome's count does not
// hold.
func TestLoadKeepsAKilledChromesCPU(t *testing.T) {
	if os.Getenv(loadChildEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLoadKeepsAKilledChromesCPU$", "-test.count=1", "-test.v")
		// The child needs no database: a URL given skips pgtest's cluster.
		cmd.Env = append(os.Environ(), loadChildEnv+"=1", pgtest.EnvURL+"=postgres://unused.invalid/")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the child: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "--- PASS: TestLoadKeepsAKilledChromesCPU") {
			t.Fatalf("the child ran no check:\n%s", out)
		}
		return
	}
	site := testutil.StartSite(t, testsite.Options{})
	ctx := context.Background()
	b, err := browser.Launch(ctx, browser.Options{ProfileRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Kill()
	s := ProcessLoadSampler{Orphaned: b.OrphanedCPUTicks}
	sess, err := b.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	// The page loops forever: its renderer uses CPU until the kill. A
	// render does not watch its Chrome (the supervisor cancels the renders
	// of a Chrome it kills): the test does the same.
	rctx, stopRender := context.WithCancel(ctx)
	defer stopRender()
	rendered := make(chan error, 1)
	go func() {
		_, err := sess.Render(rctx, browser.Request{URL: site.URL + "/hostile/loop", Timeout: 10 * time.Minute})
		rendered <- err
	}()
	const used = 30 // ticks
	testutil.Eventually(t, 5*time.Minute, "chrome's helpers and renderers to use 30 ticks of CPU", func() bool {
		var ticks uint64
		for _, p := range procstat.Select(procstat.Scan(""), b.PID()) {
			if p.PID != b.PID() {
				ticks += p.CPU + p.ChildCPU
			}
		}
		return ticks >= used
	})
	before, _, err := s.ticks()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	after, _, err := s.ticks()
	if err != nil {
		t.Fatal(err)
	}
	if after < before {
		t.Fatalf("the tree's CPU went from %d to %d ticks across the kill (orphaned: %d)", before, after, b.OrphanedCPUTicks())
	}
	if got := b.OrphanedCPUTicks(); got < used {
		t.Fatalf("%d orphaned ticks, want at least the %d the helpers and renderers had used", got, used)
	}
	stopRender()
	if err := <-rendered; err == nil {
		t.Fatal("an endless loop rendered")
	}
}

// TestLoadAddsOrphanedCPU: the sampler adds what Orphaned reports.
func TestLoadAddsOrphanedCPU(t *testing.T) {
	var orphaned uint64
	s := ProcessLoadSampler{Orphaned: func() uint64 { return orphaned }}
	before, _, err := s.ticks()
	if err != nil {
		t.Fatal(err)
	}
	orphaned = 1000
	after, _, err := s.ticks()
	if err != nil {
		t.Fatal(err)
	}
	if after < before+1000 {
		t.Fatalf("ticks %d then %d after 1000 orphaned ticks: not added", before, after)
	}
}
