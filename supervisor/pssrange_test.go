package supervisor

import (
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
)

func TestPSSAccumulator(t *testing.T) {
	tests := []struct {
		name   string
		rounds [][]uint64 // values observed before each take
		want   []PSSRange // what each take returns
	}{
		{
			name:   "nothing observed",
			rounds: [][]uint64{nil},
			want:   []PSSRange{{}},
		},
		{
			name:   "one value",
			rounds: [][]uint64{{500}},
			want:   []PSSRange{{Min: 500, Max: 500, Last: 500, Samples: 1}},
		},
		{
			name:   "a recycle: rise, peak before the kill, trough after",
			rounds: [][]uint64{{300, 700, 900, 120, 180}},
			want:   []PSSRange{{Min: 120, Max: 900, Last: 180, Samples: 5}},
		},
		{
			name:   "reset on take: the next range holds only its own values",
			rounds: [][]uint64{{100, 900}, {400, 500}},
			want:   []PSSRange{{Min: 100, Max: 900, Last: 900, Samples: 2}, {Min: 400, Max: 500, Last: 500, Samples: 2}},
		},
		{
			name:   "an empty interval repeats the latest value",
			rounds: [][]uint64{{100, 900, 250}, nil, {300}},
			want: []PSSRange{{Min: 100, Max: 900, Last: 250, Samples: 3}, {Min: 250, Max: 250, Last: 250},
				{Min: 300, Max: 300, Last: 300, Samples: 1}},
		},
		{
			name:   "zero is a value: every Chrome gone",
			rounds: [][]uint64{{800, 0}},
			want:   []PSSRange{{Min: 0, Max: 800, Last: 0, Samples: 2}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a pssAccumulator
			for i, vs := range tt.rounds {
				for _, v := range vs {
					a.observe(v)
				}
				if got := a.take(); got != tt.want[i] {
					t.Errorf("take %d = %+v, want %+v", i+1, got, tt.want[i])
				}
			}
		})
	}
}

// TestPSSRangeSpansRecycle: with periodic sampling off, the kill alone puts
// the recycle's peak (the old tree, sampled just before the kill) and its
// trough (what is left after) into the range.
func TestPSSRangeSpansRecycle(t *testing.T) {
	fleet := &fakeFleet{}
	cfg := testConfig()
	cfg.ChromeRecycleJobs, cfg.ReplacementLead = 2, Off
	h := start(t, cfg, fleet)

	c1 := h.chrome(0)
	c1.set(func(c *fakeChrome) { c.pss = 900 })
	for range 2 {
		if err := recv(t, renderAsync(h.acquire())); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, time.Minute, "recycled chrome killed", c1.killed)
	testutil.Eventually(t, time.Minute, "kill logged", func() bool { return h.logs.FilterMessage("chrome killed").Len() == 1 })
	if got, want := h.s.TakePSSRange(), (PSSRange{Min: 0, Max: 900, Last: 0, Samples: 2}); got != want {
		t.Fatalf("range over the recycle = %+v, want %+v", got, want)
	}
	if got, want := h.s.TakePSSRange(), (PSSRange{}); got != want {
		t.Fatalf("range after the take = %+v, want %+v", got, want)
	}
}

// TestPSSRangeSamplesOneKillPerRange: only the first kill of a range reads
// the trees; the next recycles before the take read nothing, and the first
// kill after the take samples again.
func TestPSSRangeSamplesOneKillPerRange(t *testing.T) {
	fleet := &fakeFleet{}
	cfg := testConfig()
	cfg.ChromeRecycleJobs, cfg.ReplacementLead, cfg.ExitAfterJobs = 2, Off, Off
	h := start(t, cfg, fleet)
	reads := func(c *fakeChrome) (n int) {
		c.set(func(c *fakeChrome) { n = c.memReads })
		return n
	}
	jobs := func(n int) {
		for range n {
			if err := recv(t, renderAsync(h.acquire())); err != nil {
				t.Fatal(err)
			}
		}
	}
	killed := func(n int) {
		testutil.Eventually(t, time.Minute, "kills logged", func() bool { return h.logs.FilterMessage("chrome killed").Len() == n })
	}

	c1 := h.chrome(0)
	c1.set(func(c *fakeChrome) { c.pss = 900 })
	jobs(2)
	killed(1)
	if got := reads(c1); got != 1 {
		t.Errorf("the first kill read its tree %d times, want 1 (the peak)", got)
	}
	// The first kill's trough read chrome 2 if it had booted by then; the
	// kill logs after the trough, so the count is final here.
	c2 := h.chrome(1)
	before := reads(c2)
	jobs(2)
	killed(2)
	if got := reads(c2); got != before {
		t.Errorf("chrome 2 was read %d times at its own kill, want none: it is the range's second", got-before)
	}
	if got := h.s.TakePSSRange(); got.Samples != 2 || got.Max != 900 {
		t.Fatalf("range over two recycles = %+v, want the first kill's peak (900) and trough only", got)
	}
	c3 := h.chrome(2)
	c3.set(func(c *fakeChrome) { c.pss = 800 })
	jobs(2)
	killed(3)
	if got := reads(c3); got != 1 {
		t.Errorf("chrome 3 was read %d times at its kill in a new range, want 1", got)
	}
	if got := h.s.TakePSSRange(); got.Samples != 2 || got.Max != 800 {
		t.Fatalf("range after the take = %+v, want chrome 3's peak (800) and its trough", got)
	}
}
