package main

import (
	"io"
	"maps"
	"slices"
	"testing"
	"time"
)

func TestFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-lifecycle-rounds", "0"},
		{"-lifecycle-jobs", "0"},
		{"-history-jobs", "-1"},
		{"-retained", "x"},
		{"-retained", "0,1000", "-history-jobs", "1,2,3"},
		{"-history-jobs", "x"},
		{"-pg-set", "autovacuum_naptime"},
		{"-pg-set", "=10s"},
		{"-recent", "-1"},
	} {
		if code := realMain(args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestRoundOrderAlternates(t *testing.T) {
	for _, c := range []struct {
		n, round int
		want     []int
	}{
		{1, 0, []int{0}},
		{1, 1, []int{0}},
		{2, 0, []int{0, 1}},
		{2, 1, []int{1, 0}},
		{3, 2, []int{0, 1, 2}},
		{3, 3, []int{2, 1, 0}},
	} {
		if got := roundOrder(c.n, c.round); !slices.Equal(got, c.want) {
			t.Errorf("roundOrder(%d, %d) = %v, want %v", c.n, c.round, got, c.want)
		}
	}
}

func TestPairedRatiosAreRoundByRound(t *testing.T) {
	got := pairedRatios([]float64{50, 90, 30}, []float64{100, 90, 60})
	if want := []float64{0.5, 1, 0.5}; !slices.Equal(got, want) {
		t.Errorf("pairedRatios = %v, want %v", got, want)
	}
}

func TestGenRowMix(t *testing.T) {
	end := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 1000
	states := map[string]int{}
	classes := map[string]int{}
	prev := time.Time{}
	for i := int64(1); i <= n; i++ {
		r := genRow(i, n, end, time.Hour)
		states[r.state]++
		if r.state == "failed" {
			classes[r.class]++
		}
		if !r.finished.After(prev) || r.finished.After(end) {
			t.Fatalf("row %d finished at %v, after %v and by %v expected", i, r.finished, prev, end)
		}
		prev = r.finished
	}
	if want := map[string]int{"completed": 950, "failed": 40, "canceled": 10}; !maps.Equal(states, want) {
		t.Errorf("states %v, want %v", states, want)
	}
	for _, c := range historyClasses {
		if classes[c] != 40/len(historyClasses) {
			t.Errorf("class %q: %d failures, want %d (%v)", c, classes[c], 40/len(historyClasses), classes)
		}
	}
	if !prev.Equal(end) {
		t.Errorf("the last row finished at %v, want %v", prev, end)
	}
}
