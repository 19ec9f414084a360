package supervisor

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestPacerWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	tests := []struct {
		name      string
		p         pacer
		starts    int
		free, cap int
		now       time.Time
		want      time.Duration
	}{
		{"first start of the process", pacer{}, 0, 6, 6, t0, 0},
		{"burst: a light page's share", pacer{lastStart: t0}, 2, 5, 6, t0, burstRender / 6},
		{"burst: part of the spacing already passed", pacer{lastStart: t0}, 2, 5, 6, t0.Add(20 * ms), burstRender/6 - 20*ms},
		{"burst: spacing passed", pacer{lastStart: t0}, 2, 5, 6, t0.Add(time.Second), 0},
		{"one slot short of full: at once", pacer{lastStart: t0}, 2, 1, 6, t0, 0},
		{"full node's next start: at once", pacer{lastStart: t0}, 40, 1, 6, t0.Add(ms), 0},
		{"a later burst: at once", pacer{lastStart: t0}, 40, 6, 6, t0.Add(ms), 0},
		{"the first burst's last start", pacer{lastStart: t0}, 6, 2, 6, t0, 0},
		{"two slots: capped", pacer{lastStart: t0}, 1, 2, 2, t0, maxSpacing},
		{"fixed spacing", pacer{lastStart: t0, fixed: 30 * ms}, 2, 4, 6, t0, 30 * ms},
		{"off", pacer{lastStart: t0, fixed: Off}, 2, 6, 6, t0, 0},
	}
	for _, tt := range tests {
		if got := tt.p.wait(tt.starts, tt.free, tt.cap, tt.now); got != tt.want {
			t.Errorf("%s: wait = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestBurstSpread: a starting process hands out its first burst's slots at
// least BurstSpacing apart, except the last one.
func TestBurstSpread(t *testing.T) {
	fleet := &fakeFleet{}
	cfg := testConfig()
	cfg.Capacity = 4
	const spacing = 30 * time.Millisecond
	cfg.BurstSpacing = spacing
	h := start(t, cfg, fleet)
	slots := make(chan *Slot, 4)
	for range 4 {
		go func() {
			sl, err := h.s.Acquire(context.Background())
			if err != nil {
				t.Error(err)
			}
			slots <- sl
		}()
	}
	var at []time.Time
	for range 4 {
		sl := <-slots
		if sl == nil {
			t.FailNow()
		}
		defer sl.Release()
		at = append(at, sl.at)
	}
	slices.SortFunc(at, time.Time.Compare)
	// Free slots at the starts: 4, 3, 2, 1. The second and third wait for
	// the spacing; the last, one slot short of full, does not have to.
	for i := 1; i < 3; i++ {
		if gap := at[i].Sub(at[i-1]); gap < spacing {
			t.Errorf("start %d came %v after the one before, want ≥ %v", i+1, gap, spacing)
		}
	}
}
