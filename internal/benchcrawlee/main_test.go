package main

import (
	"slices"
	"testing"
)

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
