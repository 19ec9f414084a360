package main

import "testing"

// TestFirstCycle: the soak's first cycle is the node's first generation of
// Chromes, one per lane — the largest of them — and not the Chromes that
// replace them, nor only the first Chrome seen.
func TestFirstCycle(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name    string
		lanes   int
		samples []map[int]uint64
		gen     uint64 // the first generation's largest
		max     uint64 // the largest tree of all
	}{
		{
			name:  "six lanes, a later Chrome the largest",
			lanes: 6,
			samples: []map[int]uint64{
				{10: 100 * mib, 11: 120 * mib, 12: 90 * mib},
				{10: 150 * mib, 11: 130 * mib, 12: 140 * mib, 13: 160 * mib, 14: 110 * mib, 15: 100 * mib},
				{10: 170 * mib, 13: 175 * mib, 20: 90 * mib}, // 20: the first standby
				{20: 200 * mib, 21: 80 * mib},
			},
			gen: 175 * mib,
			max: 200 * mib,
		},
		{
			name:  "one lane: the first Chrome alone",
			lanes: 1,
			samples: []map[int]uint64{
				{10: 100 * mib},
				{10: 180 * mib, 20: 60 * mib},
				{20: 190 * mib},
			},
			gen: 180 * mib,
			max: 190 * mib,
		},
	} {
		p := newPSSTrace(20, tc.lanes)
		for i, s := range tc.samples {
			p.observe(s, i*20)
		}
		if p.genMax != tc.gen || p.treeMax != tc.max {
			t.Errorf("%s: first cycle %d MiB, largest %d MiB; want %d and %d", tc.name, p.genMax/mib, p.treeMax/mib, tc.gen/mib, tc.max/mib)
		}
	}
}
