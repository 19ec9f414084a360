package farm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

func TestNodeIDFromHostname(t *testing.T) {
	for _, tc := range []struct{ host, want string }{
		{"ip-10-0-1-23.ec2.internal", "ip-10-0-1-23.ec2.internal"},
		{"worker_7:a", "worker_7:a"},
		{"my host/ü", "my-host--"},
		{"-leading.dots", "leading.dots"},
		{"", "node"},
		{"---", "node"},
		{strings.Repeat("a", 60), strings.Repeat("a", 46)},
	} {
		got := NodeIDFromHostname(tc.host)
		if got != tc.want {
			t.Errorf("NodeIDFromHostname(%q) = %q, want %q", tc.host, got, tc.want)
		}
		if err := jobqueue.ValidateNodeID(got); err != nil {
			t.Errorf("NodeIDFromHostname(%q) = %q is not a valid node id: %v", tc.host, got, err)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and parentheses; fields 14..17 are 7, 3, 20, 5; rss (24) is 512.
	line := "4242 (chrome (renderer) x) S 4000 4242 4242 0 -1 4194560 100 0 0 0 7 3 20 5 20 0 9 0 123 1000000 512 18446744073709551615"
	st, err := parseProcStat([]byte(line))
	if err != nil || st.ppid != 4000 || st.ticks != 35 || st.rss != 512 {
		t.Fatalf("parseProcStat = %+v, %v", st, err)
	}
	if _, err := parseProcStat([]byte("4242 no paren")); err == nil {
		t.Fatal("malformed stat accepted")
	}
}

func TestTreeCPUPercent(t *testing.T) {
	for _, tc := range []struct {
		ticks uint64
		wall  time.Duration
		cpus  int
		want  float64
	}{
		{100, time.Second, 2, 50},  // one CPU-second in one second on two CPUs
		{400, time.Second, 2, 100}, // capped
		{0, time.Second, 4, 0},
		{50, 0, 2, 0},
	} {
		if got := treeCPUPercent(tc.ticks, tc.wall, tc.cpus); got != tc.want {
			t.Errorf("treeCPUPercent(%d, %v, %d) = %v, want %v", tc.ticks, tc.wall, tc.cpus, got, tc.want)
		}
	}
}

// The node's load is its own process tree's: a child that burns CPU counts,
// alive and after it was reaped; the machine's other processes do not.
func TestProcessLoadSampler(t *testing.T) {
	var s ProcessLoadSampler
	ctx := context.Background()
	first, err := s.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first.CPUPercent != 0 || first.MemUsedBytes == 0 || first.MemUsedBytes > first.MemTotalBytes {
		t.Fatalf("first sample %+v: want CPU 0 and this process's memory", first)
	}
	before, _, err := treeTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A child that uses CPU until it has used at least 30 ticks of its own
	// (field 14 of its stat, read without starting a process), then exits.
	cmd := exec.Command("sh", "-c", `while read -r line < /proc/$$/stat; set -- $line; [ "${14}" -lt 30 ]; do :; done`)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	after, _, err := treeTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 30 {
		t.Fatalf("the reaped child's CPU is not counted: %d ticks before, %d after", before, after)
	}
	second, err := s.Sample(ctx)
	if err != nil || second.CPUPercent <= 0 || second.CPUPercent > 100 {
		t.Fatalf("second sample %+v, %v: want the child's CPU, 0..100", second, err)
	}
}

func TestSpecRequest(t *testing.T) {
	full := jobqueue.Spec{
		URL:        "https://example.test/a",
		Wait:       &jobqueue.Wait{Selector: "#ready", NetworkIdle: true},
		Actions:    []jobqueue.Action{{Type: "scroll", Times: 3, Ms: 200}, {Type: "type", Selector: "#q", Text: "x"}},
		Extract:    "document.title",
		HTML:       true,
		Screenshot: true,
		TimeoutMS:  5000,
		Block:      []string{"image", "font"},
		Headers:    map[string]string{"X-A": "1"},
		UserAgent:  "bot",
		Viewport:   &jobqueue.Viewport{Width: 390, Height: 844, Mobile: true},
		Cookies:    []jobqueue.Cookie{{Name: "s", Value: "v", Domain: "example.test", Path: "/", Secure: true, HTTPOnly: true}},
		Proxy:      "socks5://127.0.0.1:1080",
		Follow:     &jobqueue.Follow{Selector: "a.next", MaxDepth: 2, MaxLinks: 10},
	}
	for _, tc := range []struct {
		name  string
		spec  jobqueue.Spec
		check func(t *testing.T, r browser.Request)
	}{
		{"every field", full, func(t *testing.T, r browser.Request) {
			if r.URL != full.URL || r.Extract != full.Extract || !r.HTML || !r.Screenshot || r.UserAgent != "bot" ||
				r.Proxy != full.Proxy || r.Isolation != browser.IsolationWipe {
				t.Errorf("scalars not carried over: %+v", r)
			}
			if r.Timeout != 5*time.Second {
				t.Errorf("Timeout = %v, want 5s", r.Timeout)
			}
			if r.Wait.Selector != "#ready" || !r.Wait.NetworkIdle {
				t.Errorf("Wait = %+v", r.Wait)
			}
			if len(r.Actions) != 2 || r.Actions[0].Type != "scroll" || r.Actions[0].Times != 3 || r.Actions[0].Ms != 200 ||
				r.Actions[1].Selector != "#q" || r.Actions[1].Text != "x" {
				t.Errorf("Actions = %+v", r.Actions)
			}
			if !reflect.DeepEqual(r.Block, full.Block) || !reflect.DeepEqual(r.Headers, full.Headers) {
				t.Errorf("Block/Headers = %v/%v", r.Block, r.Headers)
			}
			if r.Viewport.Width != 390 || r.Viewport.Height != 844 || !r.Viewport.Mobile {
				t.Errorf("Viewport = %+v", r.Viewport)
			}
			if len(r.Cookies) != 1 || r.Cookies[0] != (browser.Cookie{Name: "s", Value: "v", Domain: "example.test", Path: "/", Secure: true, HTTPOnly: true}) {
				t.Errorf("Cookies = %+v", r.Cookies)
			}
			if r.FollowSelector != "a.next" || r.FollowMax != 40 {
				t.Errorf("follow = %q/%d, want a.next/40", r.FollowSelector, r.FollowMax)
			}
		}},
		{"defaults", jobqueue.Spec{URL: "http://x.test/", SharedContext: true}, func(t *testing.T, r browser.Request) {
			if want := jobqueue.DefaultTimeoutMS * time.Millisecond; r.Timeout != want {
				t.Errorf("Timeout = %v, want the default %v", r.Timeout, want)
			}
			if r.Wait != (browser.Wait{}) || r.Actions != nil || r.Cookies != nil || r.FollowSelector != "" || r.FollowMax != 0 {
				t.Errorf("unset fields were filled: %+v", r)
			}
			if r.Isolation != browser.IsolationShared {
				t.Errorf("shared_context carried over as isolation %q, want shared", r.Isolation)
			}
		}},
		{"cache batch", jobqueue.Spec{URL: "http://x.test/", Cache: jobqueue.CacheBatch}, func(t *testing.T, r browser.Request) {
			if r.CacheScope != "batch 0b7e3a52-6a8d-4f8e-9c1f-2d4e5f6a7b8c" {
				t.Errorf("CacheScope = %q, want the job's batch", r.CacheScope)
			}
		}},
		{"cache job", jobqueue.Spec{URL: "http://x.test/", Cache: jobqueue.CacheJob}, func(t *testing.T, r browser.Request) {
			if r.CacheScope != "" {
				t.Errorf("CacheScope = %q, want none", r.CacheScope)
			}
		}},
		{"follow with the largest link cap", jobqueue.Spec{URL: "http://x.test/", Follow: &jobqueue.Follow{Selector: "a", MaxDepth: 1, MaxLinks: jobqueue.MaxFollowLinks}},
			func(t *testing.T, r browser.Request) {
				if r.FollowMax != jobqueue.MaxCollectedLinks {
					t.Errorf("FollowMax = %d, want %d", r.FollowMax, jobqueue.MaxCollectedLinks)
				}
			}},
		{"follow without a link cap", jobqueue.Spec{URL: "http://x.test/", Follow: &jobqueue.Follow{Selector: "a", MaxDepth: 1}},
			func(t *testing.T, r browser.Request) {
				if r.FollowMax != 4*jobqueue.DefaultMaxLinks {
					t.Errorf("FollowMax = %d, want %d", r.FollowMax, 4*jobqueue.DefaultMaxLinks)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, SpecRequest(tc.spec, "0b7e3a52-6a8d-4f8e-9c1f-2d4e5f6a7b8c")) })
	}
}

func TestResultRecord(t *testing.T) {
	r := &browser.Result{
		FinalURL: "http://x.test/b", Status: 200, Title: "T", Data: json.RawMessage(`{"n":1}`),
		HTML: "<html></html>", HTMLTruncated: true, Screenshot: []byte{1, 2}, ConsoleErrors: []string{"e"}, Links: []string{"http://x.test/c"},
		Timings: browser.Timings{Navigation: 10 * time.Millisecond, Wait: 20 * time.Millisecond,
			Actions: 30 * time.Millisecond, Extract: 40 * time.Millisecond, Total: 100 * time.Millisecond},
	}
	got := ResultRecord(r)
	want := jobqueue.Result{
		FinalURL: "http://x.test/b", Status: 200, Title: "T", Data: json.RawMessage(`{"n":1}`),
		HTML: "<html></html>", HTMLTruncated: true, Screenshot: []byte{1, 2}, ConsoleErrors: []string{"e"}, Links: []string{"http://x.test/c"},
		Timings: jobqueue.Timings{NavigationMS: 10, WaitMS: 20, ActionsMS: 30, ExtractMS: 40, TotalMS: 100},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ResultRecord = %+v\nwant %+v", got, want)
	}
}

func TestConsumerConfigDefaults(t *testing.T) {
	q := jobqueue.New(nil, jobqueue.Config{})
	for _, tc := range []struct {
		name    string
		cfg     ConsumerConfig
		wantErr string
		check   func(t *testing.T, c ConsumerConfig)
	}{
		{"no queue", ConsumerConfig{}, "Queue is required", nil},
		{"bad node id", ConsumerConfig{Queue: q, NodeID: "bad id"}, "bad node id", nil},
		{"capacity out of range", ConsumerConfig{Queue: q, NodeID: "n", Capacity: 5000}, "out of range", nil},
		{"defaults", ConsumerConfig{Queue: q, Hostname: "host one"}, "", func(t *testing.T, c ConsumerConfig) {
			if c.NodeID != "host-one" || c.Capacity != 6 || c.Supervisor.Capacity != 6 ||
				c.HeartbeatInterval != DefaultHeartbeatInterval || c.PollInterval != DefaultPollInterval ||
				c.DrainTimeout != DefaultConsumerDrain ||
				c.ProtectorIdleAfter != DefaultProtectorIdleAfter || c.Logger == nil {
				t.Errorf("defaults not filled: %+v", c)
			}
		}},
		{"capacity overrides the supervisor's", func() ConsumerConfig {
			c := DefaultConsumerConfig(q)
			c.NodeID, c.Capacity = "n", 3
			return c
		}(), "", func(t *testing.T, c ConsumerConfig) {
			if c.Supervisor.Capacity != 3 || c.Supervisor.ChromeRecycleJobs != 20 || c.Supervisor.ExitAfterJobs != 80 {
				t.Errorf("supervisor config = %+v", c.Supervisor)
			}
		}},
		{"Off durations mean none", ConsumerConfig{Queue: q, NodeID: "n", DrainTimeout: Off, ProtectorIdleAfter: Off}, "",
			func(t *testing.T, c ConsumerConfig) {
				if c.DrainTimeout != 0 || c.ProtectorIdleAfter != 0 {
					t.Errorf("DrainTimeout/ProtectorIdleAfter = %v/%v, want 0/0", c.DrainTimeout, c.ProtectorIdleAfter)
				}
			}},
		{"zero supervisor thresholds are its defaults", ConsumerConfig{Queue: q, NodeID: "n"}, "", func(t *testing.T, c ConsumerConfig) {
			d := supervisor.DefaultConfig()
			if c.Supervisor.ChromeRecycleJobs != d.ChromeRecycleJobs || c.Supervisor.ExitAfterJobs != d.ExitAfterJobs ||
				c.Supervisor.DrainTimeout != d.DrainTimeout || c.Supervisor.MemoryInterval != d.MemoryInterval {
				t.Errorf("supervisor config = %+v", c.Supervisor)
			}
		}},
		{"Off supervisor thresholds stay off", ConsumerConfig{Queue: q, NodeID: "n",
			Supervisor: supervisor.Config{ChromeRecycleJobs: Off, ExitAfterJobs: Off}}, "", func(t *testing.T, c ConsumerConfig) {
			if c.Supervisor.ChromeRecycleJobs != Off || c.Supervisor.ExitAfterJobs != Off {
				t.Errorf("supervisor config = %+v", c.Supervisor)
			}
		}},
		{"bad supervisor threshold", ConsumerConfig{Queue: q, NodeID: "n", Supervisor: supervisor.Config{ExitAfterJobs: -3}},
			"ExitAfterJobs must not be negative", nil},
		{"negative heartbeat", ConsumerConfig{Queue: q, NodeID: "n", HeartbeatInterval: -time.Second}, "HeartbeatInterval must not be negative", nil},
		{"heartbeat cannot be off", ConsumerConfig{Queue: q, NodeID: "n", HeartbeatInterval: Off}, "HeartbeatInterval must not be negative", nil},
		{"negative poll", ConsumerConfig{Queue: q, NodeID: "n", PollInterval: -2}, "PollInterval must not be negative", nil},
		{"negative drain", ConsumerConfig{Queue: q, NodeID: "n", DrainTimeout: -time.Second}, "DrainTimeout must not be negative", nil},
		{"negative protector idle", ConsumerConfig{Queue: q, NodeID: "n", ProtectorIdleAfter: -2}, "ProtectorIdleAfter must not be negative", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg.withDefaults()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
		})
	}
}

func TestWaitJobs(t *testing.T) {
	t.Run("finished", func(t *testing.T) {
		var wg sync.WaitGroup
		if !waitJobs(context.Background(), &wg, true, 0) {
			t.Error("an empty group did not count as finished")
		}
	})
	t.Run("grace runs out", func(t *testing.T) {
		var wg sync.WaitGroup
		wg.Add(1)
		defer wg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if waitJobs(ctx, &wg, true, time.Millisecond) {
			t.Error("a busy group counted as finished")
		}
	})
	t.Run("finishes within grace", func(t *testing.T) {
		var wg sync.WaitGroup
		wg.Add(1)
		release := make(chan struct{})
		go func() {
			<-release
			wg.Done()
		}()
		close(release)
		if !waitJobs(context.Background(), &wg, false, time.Minute) {
			t.Error("a group that finished did not count as finished")
		}
	})
}

// fakeProtector records SetBusy calls; the first fails of them fail.
type fakeProtector struct {
	mu    sync.Mutex
	calls []bool
	fails int
}

func (p *fakeProtector) SetBusy(_ context.Context, busy bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, busy)
	if p.fails > 0 {
		p.fails--
		return errors.New("throttled")
	}
	return nil
}

func (p *fakeProtector) get() []bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]bool(nil), p.calls...)
}

// TestProtectLoop: idle after the idle time from the start, busy at once,
// idle after the idle time; a failed call is made again while the node
// stays as it is. A node busy from its start says busy only.
func TestProtectLoop(t *testing.T) {
	p := &fakeProtector{}
	c := &Consumer{
		cfg:         ConsumerConfig{Protector: p, ProtectorIdleAfter: time.Millisecond, ProtectorRetry: time.Millisecond},
		busyChanged: make(chan struct{}, 1),
		log:         zap.NewNop(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.protectLoop(ctx) })
	setHeld := func(n int) {
		c.mu.Lock()
		c.held = n
		c.mu.Unlock()
		c.signal(c.busyChanged)
	}
	testutil.Eventually(t, 10*time.Second, "idle at the start", func() bool { return reflect.DeepEqual(p.get(), []bool{false}) })
	setHeld(1)
	testutil.Eventually(t, 10*time.Second, "busy", func() bool { return reflect.DeepEqual(p.get(), []bool{false, true}) })
	setHeld(2) // still busy: no call
	setHeld(0)
	testutil.Eventually(t, 10*time.Second, "idle", func() bool { return reflect.DeepEqual(p.get(), []bool{false, true, false}) })
	// The next busy call fails twice: it is made again until it succeeds,
	// though the node stays busy (no change to wake the loop).
	p.mu.Lock()
	p.fails = 2
	p.mu.Unlock()
	setHeld(1)
	testutil.Eventually(t, 10*time.Second, "busy again, retried", func() bool {
		return reflect.DeepEqual(p.get(), []bool{false, true, false, true, true, true})
	})
	cancel()
	wg.Wait()
}

func TestProtectLoopBusyFromTheStart(t *testing.T) {
	p := &fakeProtector{}
	c := &Consumer{
		cfg:         ConsumerConfig{Protector: p, ProtectorIdleAfter: time.Hour, ProtectorRetry: time.Millisecond},
		busyChanged: make(chan struct{}, 1),
		log:         zap.NewNop(),
	}
	c.held = 1
	c.busyChanged <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.protectLoop(ctx) })
	testutil.Eventually(t, 10*time.Second, "busy", func() bool { return reflect.DeepEqual(p.get(), []bool{true}) })
	cancel()
	wg.Wait()
	if got := p.get(); !reflect.DeepEqual(got, []bool{true}) {
		t.Errorf("calls %v, want [true] only", got)
	}
}
