package farm

import (
	"context"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
)

// TestLoadKeepsAKilledChromesCPU: killing a Chrome orphans its helpers and
// renderers, which init reaps with their CPU; the sampler's count of the
// node's tree, with the Chrome's OrphanedCPUTicks added, does not go
// backwards across the kill (it did, and the sample after a recycle read 0%).
func TestLoadKeepsAKilledChromesCPU(t *testing.T) {
	site := testutil.StartSite(t, testsite.Options{})
	ctx := context.Background()
	b, err := browser.Launch(ctx, browser.Options{ProfileRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Kill()
	s := ProcessLoadSampler{Orphaned: b.OrphanedCPUTicks}
	if _, err := s.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	sess, err := b.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	// The page loops forever: its renderer uses CPU until the kill. The
	// render's timeout only ends the wait for it.
	if _, err := sess.Render(ctx, browser.Request{URL: site.URL + "/hostile/loop", Timeout: time.Second}); err == nil {
		t.Fatal("an endless loop rendered")
	}
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
	if b.OrphanedCPUTicks() == 0 {
		t.Fatal("the killed chrome's helpers and renderers used no CPU: the test checks nothing")
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
