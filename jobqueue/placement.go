package jobqueue

import "fmt"

// AssignPolicy is how an assignment round chooses among nodes with free
// slots.
type AssignPolicy string

const (
	// AssignSpread gives each job to the least-loaded node: a short supply
	// is spread evenly, every node runs below its capacity, and a burst
	// finds idle slots everywhere. Right for a fixed fleet.
	AssignSpread AssignPolicy = "spread"
	// AssignPack gives each job to the busiest node that still has a free
	// slot: work collects on as few nodes as it needs, the others go idle
	// and an autoscaler can remove them. Right for an autoscaled fleet.
	AssignPack AssignPolicy = "pack"
)

// AssignPolicies lists the policies, for flag help and errors.
var AssignPolicies = []AssignPolicy{AssignSpread, AssignPack}

// ParseAssignPolicy reads a policy name; the empty string is AssignSpread.
func ParseAssignPolicy(s string) (AssignPolicy, error) {
	switch AssignPolicy(s) {
	case "", AssignSpread:
		return AssignSpread, nil
	case AssignPack:
		return AssignPack, nil
	}
	return "", fmt.Errorf("assignment policy %q is not %s or %s", s, AssignSpread, AssignPack)
}

// NodeSlots is one active node's capacity as an assignment round sees it.
type NodeSlots struct {
	ID       string
	Capacity int
	Held     int // queued + processing
}

// Distribute deals n jobs (already in priority order) to nodes one at a
// time under the policy, and returns the node id for each job: fewer than n
// when the nodes run out of free slots. Load is held/capacity after taking
// the job, compared without floating point; ties go to the smaller node id,
// so a round is deterministic.
//
//   - AssignSpread: the node whose load after taking the job is lowest.
//   - AssignPack: the node whose load before taking it is highest.
//
// The producer's rounds and the autoscale simulation both use it, so the
// simulated node-hours are those of the real placement.
func Distribute(policy AssignPolicy, nodes []NodeSlots, n int) []string {
	held := make([]int, len(nodes))
	for i, nd := range nodes {
		held[i] = nd.Held
	}
	out := make([]string, 0, n)
	for len(out) < n {
		best := -1
		for i, nd := range nodes {
			if held[i] >= nd.Capacity {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			var better, tie bool
			if policy == AssignPack {
				a := held[i] * nodes[best].Capacity
				b := held[best] * nd.Capacity
				better, tie = a > b, a == b
			} else {
				a := (held[i] + 1) * nodes[best].Capacity
				b := (held[best] + 1) * nd.Capacity
				better, tie = a < b, a == b
			}
			if better || (tie && nd.ID < nodes[best].ID) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		held[best]++
		out = append(out, nodes[best].ID)
	}
	return out
}
