// Package loopback says whether a request's Host names this machine's
// loopback. It is one rule for two sides: the producer answers reads
// without a token only to requests so addressed (farm/web), and the egress
// filter marks the requests it forwards to such a Host as proxied
// (browser/egress), so that a job's page is never taken for a local client.
package loopback

import (
	"net"
	"net/netip"
	"strings"
)

// Host reports whether host (a request's Host: a name or address, with or
// without a port, IPv6 in brackets) names this machine's loopback:
// localhost, a name under .localhost, or a loopback address.
func Host(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
