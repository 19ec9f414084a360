package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/farm"
	"github.com/browserfarm/browserfarm/farm/fleet"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// slotLines collects the "slot node-id" lines the stand-in consumers print
// and closes enough once want lines arrived.
type slotLines struct {
	mu     sync.Mutex
	lines  []string
	want   int
	enough chan struct{}
}

func (s *slotLines) writer() io.Writer {
	return &lineWatcher{w: io.Discard, onLine: func(b []byte) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lines = append(s.lines, string(bytes.TrimSpace(b)))
		if len(s.lines) == s.want {
			close(s.enough)
		}
	}}
}

// `farm up`'s fleet restarts consumer slots concurrently and over and over:
// every start of slot i must see slot i's node id, distinct from every other
// slot's. (Run under -race: the slots once appended to one shared
// environment slice, and two consumers got the same FARM_NODE_ID.)
func TestUpConsumerIDsDistinctAcrossRestarts(t *testing.T) {
	const slots, startsPerSlot = 3, 50
	base := consumerEnvironment(os.Environ(), map[string]string{"FARM_LOG_FORMAT": "json"})
	// Room to spare in the backing array is what let concurrent appends collide.
	base = append(make([]string, 0, len(base)+16), base...)
	lines := &slotLines{want: slots * startsPerSlot, enough: make(chan struct{})}
	out := make([]io.Writer, slots)
	w := lines.writer()
	for i := range out {
		out[i] = w
	}
	// Each incarnation prints its slot (argv[0] of the script) and the id it
	// was given, then asks to be recycled, like a consumer after exit-after-jobs.
	script := `echo "$0 $FARM_NODE_ID"; exit 75`
	build := consumerCommand("/bin/sh", nil, base, "build-host.example", out)
	fl, err := fleet.New(fleet.Config{Count: slots, Command: func(slot int) *exec.Cmd {
		cmd := build(slot)
		cmd.Args = []string{"/bin/sh", "-c", script, fmt.Sprint(slot)}
		return cmd
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fl.Run(ctx) }()
	<-lines.enough
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	lines.mu.Lock()
	defer lines.mu.Unlock()
	idOf := map[string]string{} // slot → id
	slotOf := map[string]string{}
	for _, l := range lines.lines {
		slot, id, ok := strings.Cut(l, " ")
		if !ok || jobqueue.ValidateNodeID(id) != nil {
			t.Fatalf("line %q: want a slot and a valid node id", l)
		}
		if want := nodeIDFor("build-host.example", int(slot[0]-'0')); id != want {
			t.Errorf("slot %s started with node id %q, want %q", slot, id, want)
		}
		if prev, ok := idOf[slot]; ok && prev != id {
			t.Errorf("slot %s changed id: %q then %q", slot, prev, id)
		}
		if other, ok := slotOf[id]; ok && other != slot {
			t.Errorf("node id %q given to slots %s and %s", id, other, slot)
		}
		idOf[slot], slotOf[id] = id, slot
	}
	if len(idOf) != slots {
		t.Errorf("%d slots seen, want %d: %v", len(idOf), slots, idOf)
	}
}

func TestNodeIDForFollowsTheConsumersRule(t *testing.T) {
	for _, tc := range []struct {
		host string
		slot int
		want string
	}{
		{"web-1.example.com", 0, "web-1.example.com-1"},
		{"", 2, "node-3"},
		{"_weird host!", 1, "weird-host--2"},
		{strings.Repeat("h", 60), 9, strings.Repeat("h", 43) + "-10"},
	} {
		got := nodeIDFor(tc.host, tc.slot)
		if got != tc.want {
			t.Errorf("nodeIDFor(%q, %d) = %q, want %q", tc.host, tc.slot, got, tc.want)
		}
		if err := jobqueue.ValidateNodeID(got); err != nil {
			t.Errorf("nodeIDFor(%q, %d): %v", tc.host, tc.slot, err)
		}
	}
}

func TestPolitenessSummary(t *testing.T) {
	got := politenessSummary(farm.Politeness{
		Default: farm.HostPolicy{MaxConcurrent: 4},
		Hosts: map[string]farm.HostPolicy{
			"shop.example.com": {MaxConcurrent: 2, MinInterval: 500 * time.Millisecond},
			"127.0.0.1:8080":   {},
		},
	})
	want := "politeness per host, farm-wide: at most 4 jobs at once, no minimum interval between starts " +
		"(--host-max-concurrent, --host-min-interval); 127.0.0.1:8080: no limit on jobs at once, no minimum interval " +
		"between starts; shop.example.com: at most 2 jobs at once, at least 500ms between starts"
	if got != want {
		t.Fatalf("summary\n got %q\nwant %q", got, want)
	}
}

// TestWholeLines: two processes' output, read in chunks that end mid-line
// and written to one slot's log in turns, keeps every line whole.
func TestWholeLines(t *testing.T) {
	var got []string
	slot := &lineWatcher{w: io.Discard, onLine: func(b []byte) { got = append(got, string(b)) }}
	a, b := &wholeLines{w: slot}, &wholeLines{w: slot}
	for _, w := range []struct {
		to    *wholeLines
		chunk string
	}{
		{a, "a1 lo"}, {b, "b1\nb2 lo"}, {a, "ng\na2\n"}, {b, "ng\n"}, {a, "a3"}, {b, "b3\n"}, {a, "\n"},
	} {
		if _, err := w.to.Write([]byte(w.chunk)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"b1", "a1 long", "a2", "b2 long", "b3", "a3"}
	if !slices.Equal(got, want) {
		t.Errorf("lines %q, want %q", got, want)
	}
}

// TestWholeLinesFlush: a process's last line without a newline is passed
// on, ended with one, when the fleet flushes its output after the exit.
func TestWholeLinesFlush(t *testing.T) {
	var file bytes.Buffer
	w := &wholeLines{w: &file}
	if _, err := w.Write([]byte("one\nlast words")); err != nil {
		t.Fatal(err)
	}
	if file.String() != "one\n" {
		t.Fatalf("before the flush: %q, want the whole line only", file.String())
	}
	for range 2 {
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if file.String() != "one\nlast words\n" {
		t.Errorf("after two flushes: %q, want the last words once, ended", file.String())
	}
}

// TestWholeLinesOutlivesItsWriter: when farm up's stderr fails (its
// terminal hung up: EIO), a consumer's output is still taken. An error
// would end the copy from the consumer's pipe, and its next line would
// kill it with SIGPIPE.
func TestWholeLinesOutlivesItsWriter(t *testing.T) {
	var file bytes.Buffer
	w := &wholeLines{w: io.MultiWriter(&file, failingWriter{syscall.EIO})}
	for _, chunk := range []string{"one\n", "two\n"} {
		if n, err := w.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; want the whole chunk taken", chunk, n, err)
		}
	}
	if file.String() != "one\ntwo\n" {
		t.Errorf("the log file got %q, want both lines", file.String())
	}
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }
