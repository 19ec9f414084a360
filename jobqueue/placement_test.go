package jobqueue

import (
	"context"
	"reflect"
	"testing"
)

func TestParseAssignPolicy(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    AssignPolicy
		wantErr bool
	}{
		{"", AssignSpread, false},
		{"spread", AssignSpread, false},
		{"pack", AssignPack, false},
		{"Pack", "", true},
		{"least-loaded", "", true},
	} {
		got, err := ParseAssignPolicy(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseAssignPolicy(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestDistribute(t *testing.T) {
	tests := []struct {
		name   string
		policy AssignPolicy
		nodes  []NodeSlots
		n      int
		want   []string
	}{
		{"spread: empty farm", AssignSpread, nil, 3, []string{}},
		{"spread: least loaded first, evenly", AssignSpread, []NodeSlots{{"a", 6, 4}, {"b", 6, 0}, {"c", 6, 2}}, 5,
			[]string{"b", "b", "b", "c", "b"}},
		{"spread: short supply spreads", AssignSpread, []NodeSlots{{"a", 6, 0}, {"b", 6, 0}, {"c", 6, 0}}, 3, []string{"a", "b", "c"}},
		{"spread: capacity bound", AssignSpread, []NodeSlots{{"a", 2, 1}, {"b", 1, 0}}, 5, []string{"a", "b"}},
		{"spread: load is relative to capacity", AssignSpread, []NodeSlots{{"big", 12, 6}, {"small", 2, 0}}, 3, []string{"small", "big", "big"}},
		{"pack: empty farm", AssignPack, nil, 3, []string{}},
		{"pack: busiest with a free slot first", AssignPack, []NodeSlots{{"a", 6, 4}, {"b", 6, 0}, {"c", 6, 2}}, 5,
			[]string{"a", "a", "c", "c", "c"}},
		{"pack: a full node is skipped", AssignPack, []NodeSlots{{"a", 6, 6}, {"b", 6, 1}, {"c", 6, 0}}, 2, []string{"b", "b"}},
		{"pack: short supply stays on one node", AssignPack, []NodeSlots{{"a", 6, 0}, {"b", 6, 0}, {"c", 6, 0}}, 3, []string{"a", "a", "a"}},
		{"pack: fills one node, then the next", AssignPack, []NodeSlots{{"b", 2, 0}, {"a", 2, 0}}, 3, []string{"a", "a", "b"}},
		{"pack: capacity bound", AssignPack, []NodeSlots{{"a", 2, 1}, {"b", 1, 0}}, 5, []string{"a", "b"}},
		{"pack: load is relative to capacity", AssignPack, []NodeSlots{{"big", 12, 6}, {"small", 2, 0}, {"tiny", 4, 3}}, 3,
			[]string{"tiny", "big", "big"}},
		{"pack: idle nodes stay idle while a busy one has room", AssignPack, []NodeSlots{{"idle1", 6, 0}, {"busy", 6, 3}, {"idle2", 6, 0}}, 3,
			[]string{"busy", "busy", "busy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Distribute(tt.policy, tt.nodes, tt.n); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Distribute = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestAssignPoliteByPolicy runs real assignment rounds under each policy:
// with 8 jobs for three idle nodes of 6 and one node already holding 2, pack
// fills the busy node and then one idle node, leaving two idle; spread
// evens the load out and leaves no node idle.
func TestAssignPoliteByPolicy(t *testing.T) {
	for _, tt := range []struct {
		policy AssignPolicy
		want   map[string]int // jobs held per node after the round
	}{
		{AssignPack, map[string]int{"n1": 4, "n2": 6, "n3": 0, "n4": 0}},
		{AssignSpread, map[string]int{"n1": 3, "n2": 3, "n3": 2, "n4": 2}},
	} {
		t.Run(string(tt.policy), func(t *testing.T) {
			q, pool := newTestQueue(t, Config{})
			ctx := context.Background()
			for _, id := range []string{"n1", "n2", "n3", "n4"} {
				mustRegister(t, q, id, 6)
			}
			// n2 holds 2 before the round.
			mustEnqueue(t, q, pageSpecs(2, "pre.example.com")...)
			if ids, err := q.Assign(ctx, "n2", 2); err != nil || len(ids) != 2 {
				t.Fatalf("pre-assign: %v %v", ids, err)
			}
			mustEnqueue(t, q, pageSpecs(8, "site.example.com")...)
			rep, err := q.AssignPolite(ctx, func(string) HostPolicy { return HostPolicy{} }, 100, tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Total() != 8 {
				t.Fatalf("assigned %d jobs, want 8: %v", rep.Total(), rep.Assigned)
			}
			for node, want := range tt.want {
				got := countRows(t, pool, `SELECT count(*) FROM jobs WHERE node_id = $1 AND state IN ('queued', 'processing')`, node)
				if got != int64(want) {
					t.Errorf("node %s holds %d jobs, want %d (round: %v)", node, got, want, rep.Assigned)
				}
			}
		})
	}
}
