package main

import (
	"slices"
	"testing"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    statCPU
		wantErr bool
	}{
		{"plain", "42 (node) S 7 42 42 0 -1 0 0 0 0 0 150 30 5 2 20 0 1 0", statCPU{ppid: 7, ticks: 187}, false},
		{"name with spaces and parens", "9 (a) b (c) R 1 9 9 0 -1 0 0 0 0 0 1 2 3 4 20", statCPU{ppid: 1, ticks: 10}, false},
		{"short", "9 (x) R 1 9", statCPU{}, true},
		{"no name", "garbage", statCPU{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("parseStat(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestSumTree(t *testing.T) {
	// 1 ─ 10 ─ 11 ─ 12, 10 ─ 13; 20 is another tree.
	procs := map[int]statCPU{
		1: {ppid: 0, ticks: 1000}, 10: {ppid: 1, ticks: 1}, 11: {ppid: 10, ticks: 2},
		12: {ppid: 11, ticks: 4}, 13: {ppid: 10, ticks: 8}, 20: {ppid: 1, ticks: 16},
	}
	tests := []struct {
		root int
		want uint64
	}{{10, 15}, {11, 6}, {20, 16}, {99, 0}}
	for _, tt := range tests {
		if got := sumTree(procs, tt.root); got != tt.want {
			t.Errorf("sumTree(root %d) = %d, want %d", tt.root, got, tt.want)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

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
