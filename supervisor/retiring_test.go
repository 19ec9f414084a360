package supervisor

import (
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

// TestSlowJobKeepsThirdChromeAlive: a retired Chrome lives as long as its
// slowest job, whatever the Chromes after it do, so while one job holds it
// up, the next Chrome can serve and a standby boot for the one after: three
// Chromes alive at once (README, "Memory sizing": up to capacity + 2). The
// held-up Chrome dies when that job ends, not before and not later.
func TestSlowJobKeepsThirdChromeAlive(t *testing.T) {
	fleet := &fakeFleet{}
	g := newGate()
	fleet.setRender(g.render)
	cfg := testConfig()
	cfg.Capacity, cfg.ChromeRecycleJobs, cfg.ExitAfterJobs, cfg.ReplacementLead = 2, 2, Off, 1
	h := start(t, cfg, fleet)

	// Chrome 1 hands out its two starts; the second retires it.
	slow, quick := renderAsync(h.acquire()), renderAsync(h.acquire())
	c1 := h.chrome(0)
	g.waitStarted(t)
	g.waitStarted(t)
	g.finish(t, c1)
	var held <-chan error
	select {
	case err := <-slow:
		held = quick
		if err != nil {
			t.Fatalf("render: %v", err)
		}
	case err := <-quick:
		held = slow
		if err != nil {
			t.Fatalf("render: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no render finished")
	}

	// Chrome 2 serves; its first start leaves it one, the lead: chrome 3
	// boots as its standby while chrome 1 still runs its last job.
	next := h.acquire()
	c2 := h.chrome(1)
	if next.ChromePID() != c2.pid {
		t.Fatalf("third start on pid %d, want chrome 2 (%d)", next.ChromePID(), c2.pid)
	}
	h.chrome(2)
	// Booted is counted before the new Chrome has prewarmed its sessions
	// and stands by; only then is it among the live ones.
	testutil.Eventually(t, time.Minute, "chrome 3 booted and standing by", func() bool {
		st := h.s.Stats()
		return st.ChromeStarts == 3 && st.Chromes == 3
	})
	if st := h.s.Stats(); st.Chromes != 3 || st.Busy != 2 || c1.killed() {
		t.Fatalf("with a job holding up retired chrome 1: chromes=%d busy=%d chrome 1 killed=%v; want 3, 2, false", st.Chromes, st.Busy, c1.killed())
	}

	g.finish(t, c1)
	if err := recv(t, held); err != nil {
		t.Fatalf("render: %v", err)
	}
	testutil.Eventually(t, time.Minute, "chrome 1 killed after its last job", c1.killed)
	if n := h.s.Stats().Chromes; n != 2 {
		t.Fatalf("%d chromes alive after chrome 1 was killed, want 2", n)
	}
	errc := renderAsync(next)
	g.waitStarted(t)
	g.finish(t, c2)
	if err := recv(t, errc); err != nil {
		t.Fatalf("render: %v", err)
	}
}
