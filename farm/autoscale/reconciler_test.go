package autoscale

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// recordingDriver records every SetDesired and fails while err is set.
type recordingDriver struct {
	mu   sync.Mutex
	got  []int
	fail error
}

func (*recordingDriver) Name() string { return "recording" }

func (d *recordingDriver) SetDesired(_ context.Context, n int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, n)
	return d.fail
}

func (d *recordingDriver) calls() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.got)
}

func (d *recordingDriver) setFail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail = err
}

// loadBox is a Source whose load the test changes between ticks.
type loadBox struct {
	mu    sync.Mutex
	load  Load
	err   error
	reads int
}

func (b *loadBox) Load(context.Context) (Load, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads++
	return b.load, b.err
}

func (b *loadBox) set(l Load, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.load, b.err = l, err
}

func (b *loadBox) readCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reads
}

func TestReconcilerTick(t *testing.T) {
	clock := &fakeClock{t: t0}
	src := &loadBox{}
	drv := &recordingDriver{}
	r, err := NewReconciler(ReconcilerConfig{Now: clock.Now, Reapply: 5 * time.Minute}, src, drv, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tick := func(step string) Decision {
		t.Helper()
		d, err := r.Tick(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		clock.Advance(15 * time.Second)
		return d
	}

	if r.Desired() != -1 {
		t.Fatalf("desired %d before the first tick, want -1 (unknown)", r.Desired())
	}
	tick("empty farm") // the first count is always applied
	src.set(Load{Pending: 10}, nil)
	tick("burst")
	tick("unchanged") // no driver call
	if got := drv.calls(); !slices.Equal(got, []int{0, 3}) {
		t.Fatalf("driver calls %v, want [0 3]", got)
	}
	if r.Desired() != 3 || r.Status().Applied != 3 {
		t.Fatalf("desired %d, status %+v", r.Desired(), r.Status())
	}

	// Driver failure: the count stays, and the next tick retries although
	// the count did not change.
	drv.setFail(errors.New("orchestrator down"))
	src.set(Load{Pending: 20}, nil)
	if _, err := r.Tick(ctx); err == nil || !strings.Contains(err.Error(), "orchestrator down") {
		t.Fatalf("tick with failing driver: %v", err)
	}
	if st := r.Status(); st.Desired != 5 || st.Applied != 3 || st.Errors != 1 || st.LastError == "" {
		t.Fatalf("status after driver failure: %+v", st)
	}
	clock.Advance(15 * time.Second)
	drv.setFail(nil)
	tick("retry after failure")
	if got := drv.calls(); !slices.Equal(got, []int{0, 3, 5, 5}) {
		t.Fatalf("driver calls %v, want [0 3 5 5]", got)
	}
	if st := r.Status(); st.Applied != 5 || st.LastError != "" || st.Errors != 1 {
		t.Fatalf("status after recovery: %+v", st)
	}

	// Load failure: desired kept, driver not called.
	src.set(Load{}, errors.New("database gone"))
	if _, err := r.Tick(ctx); err == nil || !strings.Contains(err.Error(), "database gone") {
		t.Fatalf("tick with failing source: %v", err)
	}
	if r.Desired() != 5 || len(drv.calls()) != 4 {
		t.Fatalf("load failure changed desired to %d or called the driver: %v", r.Desired(), drv.calls())
	}

	// Unchanged count re-applied after the Reapply period.
	src.set(Load{Pending: 20}, nil)
	tick("clears the load error") // re-applies: the last tick failed
	clock.Advance(5 * time.Minute)
	tick("reapply")
	if got := drv.calls(); !slices.Equal(got, []int{0, 3, 5, 5, 5, 5}) {
		t.Fatalf("driver calls %v, want [0 3 5 5 5 5]", got)
	}
}

// TestReconcilerTracksIdleNodes feeds nodes without IdleSince, as a producer
// that knows only busy counts would, and checks that scale-in waits for
// both the cooldown and the idle grace measured by the reconciler itself.
func TestReconcilerTracksIdleNodes(t *testing.T) {
	clock := &fakeClock{t: t0}
	src := &loadBox{}
	drv := &recordingDriver{}
	r, err := NewReconciler(ReconcilerConfig{
		Now:     clock.Now,
		Scaling: Config{ScaleInCooldown: time.Minute, IdleGrace: 3 * time.Minute},
	}, src, drv, nil)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		nodes   []Node
		want    int
		scaleIn []string
	}{
		{[]Node{{ID: "a", Busy: 4}, {ID: "b", Busy: 4}}, 2, nil},
		{[]Node{{ID: "a", Busy: 1}, {ID: "b"}}, 2, nil},          // b idle from here (t+1m)
		{[]Node{{ID: "a", Busy: 1}, {ID: "b"}}, 2, nil},          // cooled down, b idle 1m < 3m
		{[]Node{{ID: "a", Busy: 1}, {ID: "b", Busy: 1}}, 2, nil}, // b busy again: its idle clock resets
		{[]Node{{ID: "a", Busy: 1}, {ID: "b"}}, 2, nil},          // b idle from t+4m
		{[]Node{{ID: "a", Busy: 1}, {ID: "b"}}, 2, nil},
		{[]Node{{ID: "a", Busy: 1}, {ID: "b"}}, 2, nil},
		{[]Node{{ID: "a", Busy: 1}, {ID: "b"}}, 1, []string{"b"}}, // t+7m: idle 3m
	}
	for i, s := range steps {
		work := 0
		for _, n := range s.nodes {
			work += n.Busy
		}
		src.set(Load{Processing: work, Nodes: s.nodes}, nil)
		d, err := r.Tick(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if d.Desired != s.want || !slices.Equal(d.ScaleIn, s.scaleIn) {
			t.Fatalf("step %d (t0+%v): desired %d scale-in %v (%s), want %d %v",
				i, clock.Now().Sub(t0), d.Desired, d.ScaleIn, d.Reason, s.want, s.scaleIn)
		}
		clock.Advance(time.Minute)
	}
	if got := r.Status().Decision.ScaleIn; !slices.Equal(got, []string{"b"}) {
		t.Fatalf("status scale-in %v", got)
	}
}

// TestReconcilerIdleNeedsNoWork: a node idle at each sample whose work
// count keeps moving between them is never idle long enough.
func TestReconcilerIdleNeedsNoWork(t *testing.T) {
	clock := &fakeClock{t: t0}
	src := &loadBox{}
	r, err := NewReconciler(ReconcilerConfig{
		Now:     clock.Now,
		Scaling: Config{ScaleInCooldown: time.Minute, IdleGrace: 3 * time.Minute},
	}, src, &recordingDriver{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		src.set(Load{Processing: 1, Nodes: []Node{{ID: "a", Busy: 1}, {ID: "b", Work: int64(i)}}}, nil)
		d, err := r.Tick(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(d.ScaleIn) > 0 {
			t.Fatalf("tick %d: scale-in %v of a node that ran jobs between every sample", i, d.ScaleIn)
		}
		clock.Advance(time.Minute)
	}
}

func TestReconcilerRun(t *testing.T) {
	src := &loadBox{load: Load{Pending: 7}}
	drv := &recordingDriver{}
	r, err := NewReconciler(ReconcilerConfig{Interval: 5 * time.Millisecond}, src, drv, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	deadline := time.Now().Add(10 * time.Second)
	for src.readCount() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("Run read the load %d times in 10s", src.readCount())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if got := drv.calls(); !slices.Equal(got, []int{2}) || r.Desired() != 2 {
		t.Fatalf("driver calls %v, desired %d; want one call with 2", got, r.Desired())
	}
}

func TestNewReconcilerRejects(t *testing.T) {
	if _, err := NewReconciler(ReconcilerConfig{Scaling: Config{Min: 3, Max: 1}}, &loadBox{}, &NoneDriver{}, nil); err == nil {
		t.Error("accepted max below min")
	}
	if _, err := NewReconciler(ReconcilerConfig{}, nil, &NoneDriver{}, nil); err == nil {
		t.Error("accepted a nil source")
	}
	if _, err := NewReconciler(ReconcilerConfig{}, &loadBox{}, nil, nil); err == nil {
		t.Error("accepted a nil driver")
	}
}

// TestReconcilerRunStartsAfresh: a producer leading again after another led
// starts from the fleet as it is, not from what it knew in its earlier
// term: a need under the live fleet waits the cooldown instead of being
// applied as a "scale-out" from the old, smaller count.
func TestReconcilerRunStartsAfresh(t *testing.T) {
	nodes := func(n int) []Node {
		out := make([]Node, n)
		for i := range out {
			out[i] = Node{ID: fmt.Sprintf("n%d", i), Busy: 6, Capacity: 6}
		}
		return out
	}
	// Term 1: 3 nodes' worth of work on 3 nodes.
	src := &loadBox{load: Load{Processing: 14, Nodes: nodes(3)}}
	drv := &recordingDriver{}
	r, err := NewReconciler(ReconcilerConfig{Interval: time.Hour, Scaling: Config{NodeCapacity: 6, TargetUtilisation: 1}}, src, drv, nil)
	if err != nil {
		t.Fatal(err)
	}
	term := func() {
		t.Helper()
		calls := len(drv.calls())
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		deadline := time.Now().Add(10 * time.Second)
		for len(drv.calls()) == calls {
			if time.Now().After(deadline) {
				t.Fatal("Run applied nothing in 10s")
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	term()
	// Another producer led and grew the fleet to 8; 7 nodes' worth of work.
	src.set(Load{Processing: 42, Nodes: nodes(8)}, nil)
	term()
	if got := drv.calls(); !slices.Equal(got, []int{3, 8}) {
		t.Fatalf("driver calls %v, want [3 8]: the second term keeps the live 8 until the cooldown", got)
	}
	// A term whose driver has not accepted a count yet reports none
	// applied, not the earlier term's and not 0.
	if st := r.Status(); st.Applied != 8 {
		t.Fatalf("Applied after the second term = %d, want 8", st.Applied)
	}
	drv.setFail(errors.New("throttled"))
	term()
	if st := r.Status(); st.Applied != -1 || !st.AppliedAt.IsZero() || st.LastError == "" {
		t.Errorf("a term with no success: Applied %d at %v, last error %q; want -1, never, the error", st.Applied, st.AppliedAt, st.LastError)
	}
}

// readingDriver is a recordingDriver that reads the orchestrator's count
// back, failing while readErr is set.
type readingDriver struct {
	recordingDriver
	current int
	readErr error
	reads   int
}

func (d *readingDriver) Current(context.Context) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads++
	return d.current, d.readErr
}

// TestReconcilerStartsFromTheOrchestratorsCount: a leader taking over while
// the group another producer grew to 8 still boots 5 of them must not drop
// it to its need of 7 at once; until the count can be read, nothing is
// applied.
func TestReconcilerStartsFromTheOrchestratorsCount(t *testing.T) {
	nodes := []Node{{ID: "a", Busy: 6, Capacity: 6}, {ID: "b", Busy: 6, Capacity: 6}, {ID: "c", Busy: 6, Capacity: 6}}
	src := &loadBox{load: Load{Processing: 18, Pending: 24, Nodes: nodes}}
	drv := &readingDriver{current: 8, readErr: errors.New("throttled")}
	r, err := NewReconciler(ReconcilerConfig{Interval: time.Hour, Scaling: Config{NodeCapacity: 6, TargetUtilisation: 1}}, src, drv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Tick(t.Context()); err == nil || !strings.Contains(err.Error(), "throttled") {
		t.Fatalf("Tick with the count unreadable = %v, want the read's error", err)
	}
	if got := drv.calls(); len(got) != 0 {
		t.Fatalf("driver calls %v before the count was read, want none", got)
	}
	drv.mu.Lock()
	drv.readErr = nil
	drv.mu.Unlock()
	for range 2 {
		d, err := r.Tick(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if d.Desired != 8 || d.Need != 7 || d.Action != ActionHold {
			t.Fatalf("decision %+v, want desired 8 (the group's count) held while need 7 cools down", d)
		}
	}
	if got := drv.calls(); !slices.Equal(got, []int{8}) {
		t.Fatalf("driver calls %v, want [8]", got)
	}
	if drv.reads != 2 {
		t.Fatalf("%d reads of the count, want 2 (one failed, then once a term)", drv.reads)
	}
}

// TestReconcilerNewTermForgetsTheDesiredCount: a term starts with the count
// unknown, so that a producer leading again whose first load fails does not
// export its earlier term's figure (a gauge KEDA sizes the fleet to).
func TestReconcilerNewTermForgetsTheDesiredCount(t *testing.T) {
	src := &loadBox{load: Load{Pending: 10}}
	r, err := NewReconciler(ReconcilerConfig{}, src, &recordingDriver{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Tick(t.Context()); err != nil || r.Desired() <= 0 {
		t.Fatalf("first term: desired %d, %v", r.Desired(), err)
	}
	loaded := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	r.src = SourceFunc(func(context.Context) (Load, error) {
		select {
		case loaded <- struct{}{}:
		default:
		}
		return Load{}, errors.New("database gone")
	})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-loaded
	if n := r.Desired(); n != -1 {
		t.Errorf("a new term whose load fails: desired %d, want -1 (unknown)", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestReconcilerLeavingNodesAreNotReplaced: the last leader lowered the
// group from 8 to 5, and the 3 nodes it gave up still heartbeat while they
// drain. A new leader starts from the group's 5; counting the 8 live nodes
// it asked for 8, three new instances for a cooldown.
func TestReconcilerLeavingNodesAreNotReplaced(t *testing.T) {
	var nodes []Node
	for i := range 8 {
		nodes = append(nodes, Node{ID: fmt.Sprintf("n%d", i), Busy: 5, Capacity: 6})
	}
	src := &loadBox{load: Load{Processing: 24, Nodes: nodes}}
	drv := &readingDriver{current: 5}
	r, err := NewReconciler(ReconcilerConfig{Interval: time.Hour, Scaling: Config{NodeCapacity: 6, TargetUtilisation: 1}}, src, drv, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := r.Tick(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d.Desired != 5 || d.Previous != 5 {
		t.Fatalf("decision %+v, want the group's 5 kept (need 4 cools down)", d)
	}
	if got := drv.calls(); !slices.Equal(got, []int{5}) {
		t.Fatalf("driver calls %v, want [5]", got)
	}
}

// A fence that fails skips the driver call, as a failed call would: the
// count is not applied and the next tick asks again.
func TestReconcilerFence(t *testing.T) {
	clock := &fakeClock{t: t0}
	src := &loadBox{}
	drv := &recordingDriver{}
	var mu sync.Mutex
	var fenceErr error
	fences := 0
	r, err := NewReconciler(ReconcilerConfig{Now: clock.Now, Fence: func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		fences++
		return fenceErr
	}}, src, drv, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	lost := errors.New("lock lost")
	mu.Lock()
	fenceErr = lost
	mu.Unlock()
	src.set(Load{Pending: 10}, nil)
	if _, err := r.Tick(ctx); !errors.Is(err, lost) {
		t.Fatalf("tick behind a failing fence: %v, want the fence's error", err)
	}
	if got := drv.calls(); len(got) != 0 {
		t.Fatalf("driver called behind a failing fence: %v", got)
	}
	if st := r.Status(); st.Applied != notApplied || st.Errors != 1 || !strings.Contains(st.LastError, "lock lost") {
		t.Fatalf("status behind a failing fence: %+v", st)
	}
	clock.Advance(15 * time.Second)
	mu.Lock()
	fenceErr = nil
	mu.Unlock()
	if _, err := r.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := drv.calls(); !slices.Equal(got, []int{3}) {
		t.Fatalf("driver calls %v, want [3]", got)
	}
	clock.Advance(15 * time.Second)
	if _, err := r.Tick(ctx); err != nil { // unchanged: no call, no fence
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fences != 2 {
		t.Fatalf("fence asked %d times, want 2 (once per driver call)", fences)
	}
}
