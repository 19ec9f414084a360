package farm

import (
	"strings"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// HostPolicy is the farm-wide politeness towards one host: how many of its
// jobs may run at once on all nodes together, and the least time between two
// job starts. Zero values mean no limit. The queue enforces it in assignment.
type HostPolicy = jobqueue.HostPolicy

// Politeness maps hosts to policies: an exact host ("shop.example.com"), a
// domain suffix (".example.com" matches every subdomain and example.com
// itself), else Default. The longest matching rule wins. A rule picks the
// policy; the limits then count per host[:port], so ".example.com=4" allows 4
// jobs on each subdomain, not 4 across the domain. cmd builds it from flags
// and the politeness file; this package reads neither.
type Politeness struct {
	Default HostPolicy
	Hosts   map[string]HostPolicy
}

// For returns the policy for host (lower-case, with a port if the URL had one;
// a rule without a port also covers the host on any port).
func (p Politeness) For(host string) HostPolicy {
	host = strings.ToLower(host)
	bare := host
	if h, _, ok := strings.Cut(host, ":"); ok {
		bare = h
	}
	best, bestLen := p.Default, -1
	for rule, pol := range p.Hosts {
		var ok bool
		switch {
		case strings.HasPrefix(rule, "."):
			ok = strings.HasSuffix(bare, rule) || bare == rule[1:]
		default:
			ok = rule == host || rule == bare
		}
		if ok && len(rule) > bestLen {
			best, bestLen = pol, len(rule)
		}
	}
	return best
}
