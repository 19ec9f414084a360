package browser

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
)

// TestBackgroundUntilForeground launches Chrome in the background: every
// process of its tree starts nicer than this one (or at this process's
// priority where it could not be restored, e.g. a test run under nice 19),
// and Foreground brings them back, the zygote included, so that renderers
// started afterwards are in the foreground too.
func TestBackgroundUntilForeground(t *testing.T) {
	site := testutil.StartSite(t, testsite.Options{})
	base, err := niceOf(0)
	if err != nil {
		t.Fatal(err)
	}
	if base >= 19 {
		t.Skip("this process runs at nice 19: there is no lower priority to start Chrome at")
	}
	want := base
	if plan, ok := planBackground(); ok {
		want = plan.background
	} else {
		t.Logf("nice %d: this process could not restore a background Chrome's priority, so Chrome must start at its own", base)
	}
	b := launch(t, Options{Background: true})
	render := func(s *Session) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := s.Render(ctx, Request{URL: site.URL + "/page/1", Wait: Wait{Selector: "#ready"}}); err != nil {
			t.Fatal(err)
		}
	}
	render(openSession(t, b))
	// Every main thread at want, or above this process's priority: Chrome
	// with CAP_SYS_NICE sets some to -8 itself (the browser's at start,
	// which Launch holds at the background value until Foreground; a GPU
	// process started later keeps its own). Full Chrome also sets its
	// renderers' priority itself (to this process's, as root), so only the
	// shell's renderers are sure to stay in the background.
	exceptRenderers := testKind(t) == KindChrome
	check := func(when string, want int) {
		t.Helper()
		got := nices(t, b)
		if len(got) < 3 {
			t.Fatalf("%s: %d processes in Chrome's tree; the scan is not seeing it", when, len(got))
		}
		for pid, n := range got {
			if n != want && (n > base || n == base && !exceptRenderers) {
				t.Errorf("%s: process %d at nice %d, want %d (all: %v): %q", when, pid, n, want, got, strings.Join(procArgs(pid), " "))
			}
		}
	}
	check("in the background", want)
	if main := nices(t, b)[b.PID()]; want != base && main != want {
		t.Errorf("in the background: the browser process at nice %d, want %d", main, want)
	}
	if err := b.Foreground(); err != nil {
		t.Fatal(err)
	}
	// A second session is a new browser context, so a renderer forked
	// after Foreground.
	render(openSession(t, b))
	check("in the foreground", base)
	if err := b.Foreground(); err != nil {
		t.Fatalf("a second Foreground: %v", err)
	}
}

// nices maps each process of b's tree to the nice value of its main
// thread (Chrome sets some of its other threads' priorities itself).
func nices(t *testing.T, b *Browser) map[int]int {
	out := map[int]int{}
	for _, p := range append([]int32{int32(b.PID())}, processTree(int32(b.PID()))...) {
		n, err := niceOf(int(p))
		if err != nil {
			continue // gone
		}
		out[int(p)] = n
	}
	if len(out) == 0 {
		t.Fatal("no process of Chrome's tree found")
	}
	return out
}

func TestForegroundNice(t *testing.T) {
	plan := backgroundPlan{base: 0, background: 10, raised: map[int]int{7: -8}}
	niced := backgroundPlan{base: 5, background: 15}
	for _, tc := range []struct {
		name     string
		plan     backgroundPlan
		tid, cur int
		want     int
		move     bool
	}{
		{"inherited the background value", plan, 1, 10, 0, true},
		{"Chrome's own background thread, nicer still", plan, 2, 19, 9, true},
		{"held down by holdInBackground", plan, 7, 10, -8, true},
		{"raised by Chrome after the hold", plan, 3, -8, -8, false},
		{"set to normal by Chrome", plan, 4, 0, 0, false},
		{"just below the background value", plan, 5, 9, 9, false},
		{"a node process at nice 5", niced, 1, 15, 5, true},
		{"a node at nice 5, Chrome's own background thread", niced, 2, 19, 9, true},
		{"a node at nice 12, the background capped at 19", backgroundPlan{base: 12, background: 19}, 1, 19, 12, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, move := tc.plan.foregroundNice(tc.tid, tc.cur)
			if got != tc.want || move != tc.move {
				t.Errorf("foregroundNice(%d, %d) = %d, %v; want %d, %v", tc.tid, tc.cur, got, move, tc.want, tc.move)
			}
		})
	}
}

func TestIsIdentityUIDMap(t *testing.T) {
	for _, tc := range []struct {
		m    string
		want bool
	}{
		{"         0          0 4294967295\n", true},
		{"0 0 4294967295", true},
		{"         0     100000      65536\n", false}, // rootless: root is uid 100000 outside
		{"         0       1000          1\n", false},
		{"0 0 4294967295\n1 1 1\n", false},
		{"", false},
	} {
		if got := isIdentityUIDMap(tc.m); got != tc.want {
			t.Errorf("isIdentityUIDMap(%q) = %v, want %v", tc.m, got, tc.want)
		}
	}
}
