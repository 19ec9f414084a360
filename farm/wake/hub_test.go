package wake

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

// park starts a poll of node that may wait long, and returns its answer's
// channel once the poll is parked (the hub counts it as a waiter).
func park(t *testing.T, h *Hub, ctx context.Context, node string) <-chan answer {
	t.Helper()
	h.mu.Lock()
	e := h.nodes[node]
	h.mu.Unlock()
	if e == nil {
		// A node's first poll is answered at once: register it first.
		if woken, err := h.Wait(ctx, node, 0); !woken || err != nil {
			t.Fatalf("first poll of %s: %v, %v; want woken", node, woken, err)
		}
	}
	h.mu.Lock()
	before := h.nodes[node].waiters
	h.mu.Unlock()
	out := make(chan answer, 1)
	go func() {
		woken, err := h.Wait(ctx, node, time.Hour)
		out <- answer{woken, err}
	}()
	testutil.Eventually(t, 30*time.Second, "the poll of "+node+" parked", func() bool {
		select {
		case a := <-out:
			t.Fatalf("poll of %s returned %+v before it parked", node, a)
		default:
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		e := h.nodes[node]
		return e != nil && e.waiters > before
	})
	return out
}

type answer struct {
	woken bool
	err   error
}

func TestHub(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, h *Hub)
	}{
		{"a parked poll is woken", func(t *testing.T, h *Hub) {
			a := park(t, h, ctx, "n1")
			h.Wake("n2", "n1")
			if got := <-a; !got.woken || got.err != nil {
				t.Fatalf("got %+v, want woken", got)
			}
		}},
		{"a wake-up between polls waits for the next poll", func(t *testing.T, h *Hub) {
			if woken, err := h.Wait(ctx, "n1", 0); !woken || err != nil {
				t.Fatalf("registering poll: %v, %v; want woken, as a first poll", woken, err)
			}
			h.Wake("n1")
			if woken, err := h.Wait(ctx, "n1", time.Hour); !woken || err != nil {
				t.Fatalf("next poll: %v, %v; want woken at once", woken, err)
			}
			// Collected: the poll after it waits again.
			if woken, err := h.Wait(ctx, "n1", time.Millisecond); woken || err != nil {
				t.Fatalf("poll after: %v, %v; want a timeout", woken, err)
			}
		}},
		{"a first poll is answered woken, once", func(t *testing.T, h *Hub) {
			h.Wake("stranger") // not kept: the hub does not know the node
			if woken, _ := h.Wait(ctx, "stranger", time.Hour); !woken {
				t.Fatal("a node's first poll was not answered woken at once")
			}
			if woken, _ := h.Wait(ctx, "stranger", time.Millisecond); woken {
				t.Fatal("woken twice for one first poll")
			}
			if h.Nodes() != 1 {
				t.Fatalf("remembers %d nodes, want 1", h.Nodes())
			}
		}},
		{"a poll times out unwoken", func(t *testing.T, h *Hub) {
			_, _ = h.Wait(ctx, "n1", 0)
			if woken, err := h.Wait(ctx, "n1", time.Millisecond); woken || err != nil {
				t.Fatalf("got %v, %v; want false, nil", woken, err)
			}
		}},
		{"two polls of one node are both woken", func(t *testing.T, h *Hub) {
			a := park(t, h, ctx, "n1")
			b := park(t, h, ctx, "n1")
			h.Wake("n1")
			if x, y := <-a, <-b; !x.woken || !y.woken {
				t.Fatalf("got %+v and %+v, want both woken", x, y)
			}
		}},
		{"WakeAll wakes the parked and keeps one for the rest", func(t *testing.T, h *Hub) {
			a := park(t, h, ctx, "n1")
			if _, err := h.Wait(ctx, "n2", 0); err != nil {
				t.Fatal(err)
			}
			h.WakeAll()
			if got := <-a; !got.woken {
				t.Fatalf("n1: %+v", got)
			}
			if woken, _ := h.Wait(ctx, "n2", time.Hour); !woken {
				t.Fatal("n2 not woken")
			}
		}},
		{"a poll whose client left returns its error", func(t *testing.T, h *Hub) {
			cctx, cancel := context.WithCancel(ctx)
			a := park(t, h, cctx, "n1")
			cancel()
			if got := <-a; got.woken || !errors.Is(got.err, context.Canceled) {
				t.Fatalf("got %+v, want context.Canceled", got)
			}
			// Nothing was lost, nothing invented: the next poll waits.
			if woken, _ := h.Wait(ctx, "n1", time.Millisecond); woken {
				t.Fatal("woken with nothing to wake for")
			}
		}},
		{"Close answers parked and later polls", func(t *testing.T, h *Hub) {
			a := park(t, h, ctx, "n1")
			h.Close()
			if got := <-a; !errors.Is(got.err, ErrClosed) {
				t.Fatalf("parked poll: %+v, want ErrClosed", got)
			}
			if _, err := h.Wait(ctx, "n1", time.Hour); !errors.Is(err, ErrClosed) {
				t.Fatalf("later poll: %v, want ErrClosed", err)
			}
			h.Close() // twice is fine
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, NewHub(HubConfig{}))
		})
	}
}

// TestHubForgetsSilentNodes: a node that stopped polling is dropped, with
// the wake-up it never collected, and its next poll is a first poll again;
// one that polls is kept; polls alone, with no wake-ups, prune too.
func TestHubForgetsSilentNodes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	h := NewHub(HubConfig{Forget: time.Minute, Now: clock})
	ctx := context.Background()
	for _, n := range []string{"silent", "active"} {
		if _, err := h.Wait(ctx, n, 0); err != nil {
			t.Fatal(err)
		}
	}
	h.Wake("silent")
	advance(45 * time.Second)
	if _, err := h.Wait(ctx, "active", 0); err != nil {
		t.Fatal(err)
	}
	advance(45 * time.Second)
	h.Wake() // prunes
	h.mu.Lock()
	_, silentKept := h.nodes["silent"]
	n := len(h.nodes)
	h.mu.Unlock()
	if silentKept || n != 1 {
		t.Fatalf("remembers %d nodes (silent: %v), want active only", n, silentKept)
	}

	// Made-up ids polled once each, then nothing but a scrape of the
	// count: they are gone after Forget, with no Wake to prune them.
	for i := range 1000 {
		if _, err := h.Wait(ctx, fmt.Sprintf("made-up-%d", i), 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.Nodes(); n != 1001 {
		t.Fatalf("remembers %d nodes, want 1,001", n)
	}
	advance(time.Hour)
	if n := h.Nodes(); n != 0 {
		t.Fatalf("an hour later the hub remembers %d nodes, want 0", n)
	}
}

func TestHubConfigRejectsNegative(t *testing.T) {
	t.Parallel()
	for _, field := range []string{"MaxWait", "Forget"} {
		t.Run(field, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil {
					t.Fatalf("NewHub accepted a negative %s", field)
				} else if msg, _ := r.(string); !strings.Contains(msg, field) {
					t.Fatalf("panic %q does not name %s", r, field)
				}
			}()
			cfg := HubConfig{}
			if field == "MaxWait" {
				cfg.MaxWait = -1
			} else {
				cfg.Forget = -1
			}
			NewHub(cfg)
		})
	}
}
