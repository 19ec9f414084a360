package farm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// nodeOf reads a node, failing the test on error.
func (db testDB) nodeOf(t *testing.T, id string) jobqueue.Node {
	t.Helper()
	n, err := db.q.GetNode(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitRegistered waits until a process with this pid holds the node id.
func (db testDB) waitRegistered(t *testing.T, id string, pid int) jobqueue.Node {
	t.Helper()
	var n jobqueue.Node
	testutil.Eventually(t, time.Minute, "the node registered by pid", func() bool {
		var err error
		n, err = db.q.GetNode(context.Background(), id)
		return err == nil && n.PID == pid && n.State == jobqueue.NodeActive
	})
	return n
}

// One live process per node id: a second process is refused the id while
// the first heartbeats; after a kill -9 the restarted process proves its
// predecessor gone and takes the id at once (the children treat heartbeats
// as fresh for an hour).
func TestConsumerNodeIDHasOneLiveProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs consumer processes with Chrome")
	}
	t.Parallel()
	db := newTestDB(t)
	root := shortProfileRoot(t)
	a := startChild(t, db, childOpts{node: "solo", profileRoot: root})
	first := db.waitRegistered(t, "solo", a.cmd.Process.Pid)

	b := startChild(t, db, childOpts{node: "solo", profileRoot: root})
	code, rep := b.wait(t, time.Minute)
	if code != childExitError || !strings.Contains(rep.Err, "held by a live process") {
		t.Fatalf("second process: exit %d, %q; want exit 1 naming the live holder", code, rep.Err)
	}
	if n := db.nodeOf(t, "solo"); n.Incarnation != first.Incarnation || n.State != jobqueue.NodeActive {
		t.Fatalf("the refused process changed the node: %+v", n)
	}

	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	c := startChild(t, db, childOpts{node: "solo", profileRoot: root})
	second := db.waitRegistered(t, "solo", c.cmd.Process.Pid)
	if second.Incarnation <= first.Incarnation || second.ProcessRestarts != first.ProcessRestarts+1 {
		t.Fatalf("after kill -9 the restart registered %+v (first %+v)", second, first)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	if code, rep := c.wait(t, 2*time.Minute); code != childExitOK || rep.Err != "" {
		t.Fatalf("restarted process: exit %d, %q", code, rep.Err)
	}
}

// A process whose id was taken over by a newer incarnation stops at its
// next call, loudly, and leaves the node to its successor.
func TestConsumerStopsWhenFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a consumer process with Chrome")
	}
	t.Parallel()
	db := newTestDB(t)
	a := startChild(t, db, childOpts{node: "fenced", profileRoot: shortProfileRoot(t)})
	old := db.waitRegistered(t, "fenced", a.cmd.Process.Pid)
	// A newer process registers the id (it proved this one dead, wrongly:
	// say it was paused).
	newer, _, err := db.q.Register(context.Background(), jobqueue.NodeInfo{ID: "fenced", Hostname: "elsewhere", Capacity: 6, Replaces: old.Incarnation})
	if err != nil {
		t.Fatal(err)
	}
	code, rep := a.wait(t, time.Minute)
	if code != childExitOK || !rep.Fenced || !strings.Contains(rep.Err, "superseded") {
		t.Fatalf("fenced process: exit %d, report %+v; want a clean stop naming the newer incarnation", code, rep)
	}
	n := db.nodeOf(t, "fenced")
	if n.Incarnation != newer.Incarnation || n.State != jobqueue.NodeActive {
		t.Fatalf("the fenced process touched the node: %+v", n)
	}
	if !errors.Is(&jobqueue.FencedError{}, ErrFenced) {
		t.Fatal("ErrFenced does not match the queue's FencedError")
	}
}

// profileDirs lists the Chrome profile dirs under root with their owner pid.
func profileDirs(t *testing.T, root string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "bfc-") {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(root, e.Name(), ".bfc-owner"))
		out[filepath.Join(root, e.Name())] = strings.TrimSpace(string(b))
	}
	return out
}

// A consumer sweeps the profile dirs a kill -9'd consumer left in its
// profile root when it starts, and leaves a live process's alone.
func TestConsumerSweepsDeadProcessesProfileDirs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs consumer processes with Chrome")
	}
	t.Parallel()
	db := newTestDB(t)
	root := shortProfileRoot(t)
	// A live process's dir: this test's own.
	live := filepath.Join(root, "bfc-live")
	if err := os.MkdirAll(live, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(live, ".bfc-owner"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startChild(t, db, childOpts{node: "sweeper", profileRoot: root})
	apid := strconv.Itoa(a.cmd.Process.Pid)
	var left []string
	testutil.Eventually(t, time.Minute, "the first consumer's Chrome profile dir", func() bool {
		left = left[:0]
		for d, owner := range profileDirs(t, root) {
			if owner == apid {
				left = append(left, d)
			}
		}
		return len(left) > 0 && len(chromeProcs(root)) > 0
	})
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	for _, d := range left {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("kill -9 removed %s itself; the test needs a leftover: %v", d, err)
		}
	}

	b := startChild(t, db, childOpts{node: "sweeper", profileRoot: root})
	bpid := strconv.Itoa(b.cmd.Process.Pid)
	// The sweep runs before the new process makes its own profile dirs.
	testutil.Eventually(t, time.Minute, "the restarted consumer's own profile dir", func() bool {
		for _, owner := range profileDirs(t, root) {
			if owner == bpid {
				return true
			}
		}
		return false
	})
	for _, d := range left {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the dead consumer's %s survived the sweep (%v)", d, err)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live process's dir was removed: %v", err)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if code, rep := b.wait(t, 2*time.Minute); code != childExitOK {
		t.Fatalf("restarted consumer: exit %d, %+v", code, rep)
	}
}
