package farm

import (
	"fmt"
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

// For returns the policy for host, a host key (jobqueue.HostKey: with a port
// if the URL had one other than its scheme's default). A rule without a port
// also covers the host on any port. The key is normalized again
// (jobqueue.NormalizeHostKey), so that a key stored before host keys folded
// a trailing dot and Unicode names still finds its rule.
func (p Politeness) For(host string) HostPolicy {
	if k, err := jobqueue.NormalizeHostKey(host); err == nil {
		host = k
	} else {
		host = strings.ToLower(host)
	}
	bare := host
	if strings.HasPrefix(host, "[") {
		if i := strings.Index(host, "]"); i >= 0 {
			bare = host[:i+1]
		}
	} else if h, _, ok := strings.Cut(host, ":"); ok {
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

// HostRuleKey is the key of a rule in Politeness.Hosts as an operator writes
// it: a host as jobqueue.NormalizeHostKey takes it ("shop.example.com",
// "api.example.com:8443", "[2001:db8::1]"), or a domain suffix
// (".example.com", no port). It is normalized the way the queue's host keys
// are — lower case, one trailing dot dropped, a Unicode name in punycode —
// so that a rule matches every spelling of its host. A rule on port 80 or
// 443 is the host's rule: a host key drops its scheme's default port, so
// such a rule is the host without a port, which also covers the host's other
// ports that have no rule of their own. cmd normalizes every rule it reads
// with it.
func HostRuleKey(rule string) (string, error) {
	name, suffix := strings.CutPrefix(rule, ".")
	if name == "" {
		return "", fmt.Errorf("host %q: empty host", rule)
	}
	if suffix && (strings.HasPrefix(name, "[") || strings.Contains(name, ":")) {
		return "", fmt.Errorf("host %q: a domain suffix (.example.com) takes neither a port nor an IP address", rule)
	}
	key, err := jobqueue.NormalizeHostKey(name)
	if err != nil {
		return "", err
	}
	if suffix {
		return "." + key, nil
	}
	return key, nil
}
