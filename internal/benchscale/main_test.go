package main

import (
	"io"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{5}, 5},
		{[]float64{7170, 1169, 4059}, 4059},
		{[]float64{3, 1, 4, 2}, 2.5},
	} {
		in := append([]float64(nil), c.in...)
		if got := median(in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Errorf("median reordered its input: %v", in)
			}
		}
	}
}

func TestFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-lifecycle-rounds", "0"},
		{"-lifecycle-jobs", "0"},
		{"-retained", "x"},
	} {
		if code := realMain(args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
