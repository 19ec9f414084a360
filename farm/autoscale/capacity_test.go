package autoscale

import (
	"testing"
	"time"
)

// The need is computed with the capacity the live nodes registered, not a
// constant: a fleet of 3-session nodes needs twice the nodes of 6-session
// ones for the same work. With no live node to ask, Config.NodeCapacity
// (the supervisor's default) stands in.
func TestComputeUsesTheNodesCapacity(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	busy := func(caps ...int) []Node {
		var ns []Node
		for i, c := range caps {
			ns = append(ns, Node{ID: string(rune('a' + i)), Busy: 1, Capacity: c})
		}
		return ns
	}
	tests := []struct {
		name  string
		nodes []Node
		want  int // need for 48 jobs at target 1
	}{
		{"no live node: the default capacity 6", nil, 8},
		{"nodes of 3 sessions", busy(3, 3), 16},
		{"nodes of 12 sessions", busy(12), 4},
		{"mixed 4 and 8: the mean, 6", busy(4, 8), 8},
		{"a node that reported none is left out", busy(0, 12), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Max: 100, TargetUtilisation: 1}
			d, _ := Compute(cfg, State{}, Load{Pending: 48, Nodes: tt.nodes}, now)
			if d.Need != tt.want {
				t.Errorf("need = %d, want %d", d.Need, tt.want)
			}
		})
	}
}
