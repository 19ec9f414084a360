package farm

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

// TestConsumerProcessRecyclesAndExits runs one node process with recycle 20
// / exit 80 through 100 pages: it must exit with code 75 after exactly 80
// finished jobs, having started and killed exactly 4 Chromes, with never more
// than 6 sessions busy, nothing of Chrome left, and the other 20 jobs still
// waiting for the next incarnation — which finishes them. Exactly 80 less
// the starts the supervisor forfeited: a slot acquired after the process's
// last start and given back unused, on a Chrome already retired, ends the
// process's count rather than boot a fifth Chrome for one job.
func TestConsumerProcessRecyclesAndExits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site := testutil.StartSite(t, testsite.Options{Items: 20})
	db := newTestDB(t)
	batch, _ := db.enqueue(t, site.URL, pagePaths(100, "/page/%d"))
	const node = "node-recycle"
	profiles := shortProfileRoot(t)
	db.startAssigner(t, node, defaultCapacity())
	peakHeld := db.sampleHeld(t, node)

	first := startChild(t, db, childOpts{node: node, recycle: 20, exitAfter: 80, profileRoot: profiles})
	code, rep := first.wait(t, 3*time.Minute)
	if code != childExitRecycle {
		t.Fatalf("first incarnation exited with %d, want %d (report %+v)", code, childExitRecycle, rep)
	}
	// Each forfeit is a slot held when the last start went out.
	if rep.Forfeited > defaultCapacity() {
		t.Errorf("%d starts forfeited, want at most the %d slots", rep.Forfeited, defaultCapacity())
	}
	want := 80 - rep.Forfeited
	c := db.counts(t, batch)
	if got := c.By[jobqueue.StateCompleted]; got != int64(want) {
		t.Errorf("completed when the process exited = %d, want exactly %d (80, %d starts forfeited; %v)", got, want, rep.Forfeited, c.By)
	}
	if got := c.By[jobqueue.StatePending] + c.By[jobqueue.StateQueued]; got != int64(100-want) {
		t.Errorf("pending+queued after the exit = %d, want %d (%v)", got, 100-want, c.By)
	}
	if c.By[jobqueue.StateProcessing] != 0 || c.By[jobqueue.StateFailed] != 0 {
		t.Errorf("after the exit: %v; want no job processing or failed", c.By)
	}
	if rep.Jobs != want || rep.Completed != int64(want) {
		t.Errorf("process finished %d jobs (%d completed), want %d", rep.Jobs, rep.Completed, want)
	}
	// A Chrome per session, each of 20 jobs: the six take the 80, none
	// is replaced.
	if chromes := len(supervisor.Lanes(defaultCapacity(), supervisor.DefaultConfig().SessionsPerChrome)); rep.ChromeStarts != chromes || rep.ChromeKills != chromes || rep.ChromeCrashes != 0 {
		t.Errorf("chrome starts/kills/crashes = %d/%d/%d, want %d/%d/0", rep.ChromeStarts, rep.ChromeKills, rep.ChromeCrashes, chromes, chromes)
	}
	if rep.MaxBusy > defaultCapacity() || rep.MaxBusy == 0 {
		t.Errorf("busy sessions peaked at %d, want 1..%d", rep.MaxBusy, defaultCapacity())
	}
	// No bound on the Chromes alive at once here: a retired Chrome lives
	// until its slowest job ends, which may be after its successor's standby
	// has booted (supervisor's TestSlowJobKeepsThirdChromeAlive).
	if left := chromeProcs(profiles); len(left) > 0 {
		t.Errorf("Chrome processes left after the process exited: %v", left)
	}
	if ents, _ := os.ReadDir(profiles); len(ents) > 0 {
		t.Errorf("%d Chrome profile directories left behind", len(ents))
	}
	n, err := db.q.GetNode(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	if n.State != jobqueue.NodeExited {
		t.Errorf("node state after the exit = %s, want exited", n.State)
	}

	// The next incarnation, same node id, finishes the rest.
	second := startChild(t, db, childOpts{node: node, recycle: 20, exitAfter: 80, profileRoot: profiles})
	testutil.Eventually(t, 2*time.Minute, "all 100 jobs completed", func() bool {
		return db.counts(t, batch).By[jobqueue.StateCompleted] == 100
	})
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, rep2 := second.wait(t, time.Minute)
	if code != childExitOK {
		t.Errorf("second incarnation exited with %d after SIGTERM, want 0 (report %+v)", code, rep2)
	}
	if rep2.Completed != int64(100-want) {
		t.Errorf("second incarnation completed %d jobs, want %d", rep2.Completed, 100-want)
	}
	if rows, jobs := db.resultRows(t); rows != 100 || jobs != 100 {
		t.Errorf("result rows = %d for %d jobs, want 100 for 100", rows, jobs)
	}
	if peak := peakHeld(); peak > defaultCapacity() {
		t.Errorf("the node held %d jobs at once, want at most %d", peak, defaultCapacity())
	}
	if left := chromeProcs(profiles); len(left) > 0 {
		t.Errorf("Chrome processes left after the second process exited: %v", left)
	}
	if n, err := db.q.GetNode(context.Background(), node); err != nil || n.ProcessRestarts != 1 || n.State != jobqueue.NodeExited {
		t.Errorf("node after two incarnations: %+v, %v; want exited with 1 process restart", n, err)
	}
}

// TestConsumerProcessKilledMidJob kills a node process with SIGKILL while it
// renders six jobs: its Chromes die with it, and a restarted process with
// the same node id takes the jobs back at once and completes them all, each
// exactly once.
func TestConsumerProcessKilledMidJob(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	site := testutil.StartSite(t, testsite.Options{Items: 20})
	db := newTestDB(t)
	batch, ids := db.enqueue(t, site.URL, pagePaths(12, "/page/%d?delay=2000"))
	const node = "node-killed"
	profiles := shortProfileRoot(t)
	db.startAssigner(t, node, defaultCapacity())

	first := startChild(t, db, childOpts{node: node, recycle: 20, exitAfter: Off, profileRoot: profiles})
	testutil.Eventually(t, time.Minute, "six jobs processing", func() bool {
		return db.counts(t, batch).By[jobqueue.StateProcessing] == 6
	})
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code, _ := first.wait(t, 30*time.Second); code != -1 {
		t.Errorf("killed process exit code = %d, want -1 (signal)", code)
	}
	// Chrome's parent-death signal takes its whole tree down with the node.
	testutil.Eventually(t, 15*time.Second, "the killed node's Chromes to exit", func() bool {
		return len(chromeProcs(profiles)) == 0
	})
	if got := db.counts(t, batch).By[jobqueue.StateProcessing]; got != 6 {
		t.Fatalf("processing after the kill = %d, want 6 (abandoned)", got)
	}

	second := startChild(t, db, childOpts{node: node, recycle: 20, exitAfter: Off, profileRoot: profiles})
	testutil.Eventually(t, 90*time.Second, "all 12 jobs completed", func() bool {
		return db.counts(t, batch).By[jobqueue.StateCompleted] == 12
	})
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, rep := second.wait(t, time.Minute); code != childExitOK {
		t.Errorf("restarted process exited with %d after SIGTERM, want 0 (report %+v)", code, rep)
	}
	if rows, jobs := db.resultRows(t); rows != 12 || jobs != 12 {
		t.Errorf("result rows = %d for %d jobs, want 12 for 12", rows, jobs)
	}
	reclaimed := 0
	for _, id := range ids {
		j, err := db.q.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.ErrorClass == jobqueue.ClassNodeRestarted {
			reclaimed++
			if j.Attempts != 2 {
				t.Errorf("reclaimed job %d ran %d times, want 2", id, j.Attempts)
			}
		}
	}
	if reclaimed != 6 {
		t.Errorf("%d jobs were reclaimed from the killed process, want 6", reclaimed)
	}
	if left := chromeProcs(profiles); len(left) > 0 {
		t.Errorf("Chrome processes left: %v", left)
	}
}
