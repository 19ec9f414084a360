package farm

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v3/cpu"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/jobqueue"
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

func TestCPUBusyPercent(t *testing.T) {
	at := func(user, system, idle, iowait float64) cpu.TimesStat {
		return cpu.TimesStat{User: user, System: system, Idle: idle, Iowait: iowait}
	}
	for _, tc := range []struct {
		name      string
		prev, cur cpu.TimesStat
		want      float64
	}{
		{"half busy", at(10, 10, 80, 0), at(20, 20, 100, 0), 50},
		{"iowait is idle", at(0, 0, 0, 0), at(25, 0, 50, 25), 25},
		{"all busy", at(0, 0, 10, 0), at(10, 10, 10, 0), 100},
		{"all idle", at(5, 5, 10, 0), at(5, 5, 30, 0), 0},
		{"no time passed", at(5, 5, 10, 0), at(5, 5, 10, 0), 0},
		{"counters went backwards", at(50, 50, 100, 0), at(1, 1, 1, 0), 0},
	} {
		if got := cpuBusyPercent(tc.prev, tc.cur); got != tc.want {
			t.Errorf("%s: cpuBusyPercent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMemUsed(t *testing.T) {
	for _, tc := range []struct{ total, avail, want uint64 }{
		{100, 40, 60},
		{100, 100, 0},
		{100, 120, 0},
	} {
		if got := memUsed(tc.total, tc.avail); got != tc.want {
			t.Errorf("memUsed(%d, %d) = %d, want %d", tc.total, tc.avail, got, tc.want)
		}
	}
}

func TestLoadSampler(t *testing.T) {
	var s LoadSampler
	ctx := context.Background()
	first, err := s.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first.CPUPercent != 0 {
		t.Errorf("first sample CPU = %v, want 0 (nothing to compare with)", first.CPUPercent)
	}
	if first.MemTotalBytes == 0 || first.MemUsedBytes == 0 || first.MemUsedBytes > first.MemTotalBytes {
		t.Errorf("memory sample %+v is implausible", first)
	}
	second, err := s.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second.CPUPercent < 0 || second.CPUPercent > 100 {
		t.Errorf("CPU = %v, want 0..100", second.CPUPercent)
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
			if r.Timeout != 7*time.Second {
				t.Errorf("Timeout = %v, want the default 7s", r.Timeout)
			}
			if r.Wait != (browser.Wait{}) || r.Actions != nil || r.Cookies != nil || r.FollowSelector != "" || r.FollowMax != 0 {
				t.Errorf("unset fields were filled: %+v", r)
			}
			if r.Isolation != browser.IsolationShared {
				t.Errorf("shared_context carried over as isolation %q, want shared", r.Isolation)
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
		t.Run(tc.name, func(t *testing.T) { tc.check(t, SpecRequest(tc.spec, 7*time.Second)) })
	}
}

func TestResultRecord(t *testing.T) {
	r := &browser.Result{
		FinalURL: "http://x.test/b", Status: 200, Title: "T", Data: json.RawMessage(`{"n":1}`),
		HTML: "<html></html>", Screenshot: []byte{1, 2}, ConsoleErrors: []string{"e"}, Links: []string{"http://x.test/c"},
		Timings: browser.Timings{Navigation: 10 * time.Millisecond, Wait: 20 * time.Millisecond,
			Actions: 30 * time.Millisecond, Extract: 40 * time.Millisecond, Total: 100 * time.Millisecond},
	}
	got := ResultRecord(r)
	want := jobqueue.Result{
		FinalURL: "http://x.test/b", Status: 200, Title: "T", Data: json.RawMessage(`{"n":1}`),
		HTML: "<html></html>", Screenshot: []byte{1, 2}, ConsoleErrors: []string{"e"}, Links: []string{"http://x.test/c"},
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
				c.DrainTimeout != DefaultConsumerDrain || c.DefaultJobTimeout != DefaultJobTimeout ||
				c.ProtectorIdleAfter != DefaultProtectorIdleAfter || c.Load == nil || c.Logger == nil {
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
		{"negative durations mean none", ConsumerConfig{Queue: q, NodeID: "n", DrainTimeout: -1, ProtectorIdleAfter: -1}, "",
			func(t *testing.T, c ConsumerConfig) {
				if c.DrainTimeout != 0 || c.ProtectorIdleAfter != 0 {
					t.Errorf("DrainTimeout/ProtectorIdleAfter = %v/%v, want 0/0", c.DrainTimeout, c.ProtectorIdleAfter)
				}
			}},
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

// fakeProtector records SetBusy calls.
type fakeProtector struct {
	mu    sync.Mutex
	calls []bool
}

func (p *fakeProtector) SetBusy(_ context.Context, busy bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, busy)
	return nil
}

func (p *fakeProtector) get() []bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]bool(nil), p.calls...)
}

func TestProtectLoop(t *testing.T) {
	p := &fakeProtector{}
	c := &Consumer{
		cfg:         ConsumerConfig{Protector: p, ProtectorIdleAfter: time.Millisecond},
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
	setHeld(1)
	waitFor(t, 10*time.Second, "busy", func() bool { return reflect.DeepEqual(p.get(), []bool{true}) })
	setHeld(2) // still busy: no call
	setHeld(0)
	waitFor(t, 10*time.Second, "idle", func() bool { return reflect.DeepEqual(p.get(), []bool{true, false}) })
	setHeld(1)
	waitFor(t, 10*time.Second, "busy again", func() bool { return reflect.DeepEqual(p.get(), []bool{true, false, true}) })
	cancel()
	wg.Wait()
}
