package main

import (
	"slices"
	"testing"
)

func TestParseDelays(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{{"0,400", []int{0, 400}, false}, {" 0 ", []int{0}, false}, {"0,-1", nil, true}, {"x", nil, true}, {"", nil, true}}
	for _, tt := range tests {
		got, err := parseDelays(tt.in)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("parseDelays(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestPairedRatios(t *testing.T) {
	runs := []runRecord{
		{Round: 1, Side: "farm", DelayMs: 0, PagesPerS: 10, CPUMsPerPage: 80},
		{Round: 1, Side: "farm_egress", DelayMs: 0, PagesPerS: 9, CPUMsPerPage: 88},
		{Round: 2, Side: "farm_egress", DelayMs: 0, PagesPerS: 20, CPUMsPerPage: 70},
		{Round: 2, Side: "farm", DelayMs: 0, PagesPerS: 20, CPUMsPerPage: 70},
		// Another delay, and a round where the base is missing: not paired.
		{Round: 2, Side: "farm_egress", DelayMs: 400, PagesPerS: 5, CPUMsPerPage: 10},
		{Round: 3, Side: "farm_egress", DelayMs: 0, PagesPerS: 1, CPUMsPerPage: 1},
	}
	pps, cpu := pairedRatios(runs, "farm", "farm_egress", 0)
	slices.Sort(pps)
	slices.Sort(cpu)
	if !slices.Equal(pps, []float64{0.9, 1}) || !slices.Equal(cpu, []float64{1, 1.1}) {
		t.Errorf("pairedRatios = %v, %v; want [0.9 1], [1 1.1]", pps, cpu)
	}
}
