// Package egress is the farm's outbound filter: a small forward proxy in
// front of Chrome that resolves every destination itself, checks each
// resolved address against a Policy and dials the address it checked, so a
// page cannot reach loopback, link-local (the cloud metadata service),
// private ranges or the farm's own listen addresses unless the operator
// allowed them — not through a redirect, a subresource, a frame, a
// WebSocket, nor a host name that resolves (or re-resolves: DNS rebinding)
// to such an address. It imports nothing else of the project.
package egress

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Rule matches destinations: an address prefix and, optionally, one port.
type Rule struct {
	Prefix netip.Prefix
	Port   uint16 // 0: every port
}

func (r Rule) String() string {
	if r.Port == 0 {
		if r.Prefix.IsSingleIP() {
			return r.Prefix.Addr().String()
		}
		return r.Prefix.String()
	}
	host := r.Prefix.String()
	if r.Prefix.IsSingleIP() {
		host = r.Prefix.Addr().String()
	}
	if r.Prefix.Addr().Is6() {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(int(r.Port))
}

// Matches reports whether the rule covers a destination.
func (r Rule) Matches(ap netip.AddrPort) bool {
	return r.Prefix.Contains(ap.Addr().Unmap()) && (r.Port == 0 || r.Port == ap.Port())
}

// ParseRule reads one rule: an address (127.0.0.1, ::1), a prefix
// (10.1.2.0/24), or either with a port (127.0.0.1:8089, [::1]:80,
// 10.1.2.0/24:443).
func ParseRule(s string) (Rule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Rule{}, fmt.Errorf("empty destination")
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return Rule{}, fmt.Errorf("destination %q: missing ]", s)
		}
		host, port = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if rest := s[end+1:]; rest != "" && !strings.HasPrefix(rest, ":") {
			return Rule{}, fmt.Errorf("destination %q: unexpected %q after ]", s, rest)
		}
	case strings.Count(s, ":") == 1:
		host, port, _ = strings.Cut(s, ":")
	}
	var r Rule
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return Rule{}, fmt.Errorf("destination %q: %v", s, err)
		}
		if p.Addr().Is4In6() && p.Bits() < 96 {
			// Its IPv4 part is all of it: ::ffff:10.0.0.0/8 masks to ::/8.
			return Rule{}, fmt.Errorf("destination %q: an IPv4-mapped prefix needs 96 bits or more (write the IPv4 prefix instead)", s)
		}
		r.Prefix = p.Masked()
	} else {
		a, err := netip.ParseAddr(host)
		if err != nil {
			return Rule{}, fmt.Errorf("destination %q: not an IP address or prefix (host names are not allowed: the policy is on resolved addresses)", s)
		}
		r.Prefix = HostRule(a, 0).Prefix
	}
	if r.Prefix.Addr().Is4In6() {
		r.Prefix = netip.PrefixFrom(r.Prefix.Addr().Unmap(), r.Prefix.Bits()-96)
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return Rule{}, fmt.Errorf("destination %q: port %q is not 1..65535", s, port)
		}
		r.Port = uint16(n)
	}
	return r, nil
}

// HostRule is the rule for one address, on port (every port when 0).
func HostRule(a netip.Addr, port uint16) Rule {
	a = a.Unmap()
	return Rule{Prefix: netip.PrefixFrom(a, a.BitLen()), Port: port}
}

// URLPort is the port a URL connects to: its own, or its scheme's default
// (443 for https and wss, else 80); false when its port is not one.
func URLPort(u *url.URL) (uint16, bool) {
	port := u.Port()
	if port == "" {
		if strings.EqualFold(u.Scheme, "https") || strings.EqualFold(u.Scheme, "wss") {
			return 443, true
		}
		return 80, true
	}
	n, err := strconv.ParseUint(port, 10, 16)
	return uint16(n), err == nil && n > 0
}

// ParseRules reads a comma-separated list of rules (see ParseRule).
func ParseRules(list string) ([]Rule, error) {
	var out []Rule
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		r, err := ParseRule(s)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// blocked are the ranges refused unless allowed: "this network", loopback,
// link-local (the cloud metadata service lives at 169.254.169.254),
// private, shared (carrier-grade NAT), benchmarking, documentation,
// multicast and reserved ranges, Azure's platform endpoint (WireServer, a
// public address), and their IPv6 counterparts, with the IPv6 forms that
// carry an IPv4 address a gateway or tunnel may deliver to
// (IPv4-compatible, IPv4-translated, NAT64, 6to4, Teredo). None is a
// public site's address.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("168.63.129.16/32"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),   // documentation (TEST-NET-1)
	netip.MustParsePrefix("192.88.99.0/24"), // the 6to4 relays' anycast, deprecated
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"), // documentation (TEST-NET-2)
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation (TEST-NET-3)
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/96"),           // ::, ::1 and the deprecated IPv4-compatible form
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated (SIIT)
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64 can reach any IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001::/32"),       // Teredo
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2002::/16"),       // 6to4
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fec0::/10"), // site-local, deprecated
	netip.MustParsePrefix("ff00::/8"),
}

// Policy decides which destinations a job may reach. The zero value is the
// default: every public address, nothing else.
type Policy struct {
	// Allow lists destinations let through although they are in a refused
	// range (e.g. an internal site the farm should scrape).
	Allow []Rule
	// Deny lists destinations refused although public: the farm's own
	// listen addresses. Deny beats Allow.
	Deny []Rule
}

// Allowed reports whether a job may connect to ap.
func (p Policy) Allowed(ap netip.AddrPort) bool {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	// 0.0.0.0 and :: connect to this machine (Linux takes them for its own
	// address): refused whatever Allow says, as Deny's rules for the farm's
	// own ports name its loopback and interface addresses, not these.
	if ap.Addr().IsUnspecified() {
		return false
	}
	for _, r := range p.Deny {
		if r.Matches(ap) {
			return false
		}
	}
	for _, r := range p.Allow {
		if r.Matches(ap) {
			return true
		}
	}
	a := ap.Addr()
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	for _, b := range blocked {
		if b.Contains(a) {
			return false
		}
	}
	return true
}

// RefusedError says that a destination is not allowed.
type RefusedError struct {
	Host string         // as asked for
	Addr netip.AddrPort // the resolved address refused
}

func (e *RefusedError) Error() string {
	if e.Host != "" && e.Host != e.Addr.Addr().String() {
		return fmt.Sprintf("destination %s (%s) refused by the egress policy", e.Addr, e.Host)
	}
	return fmt.Sprintf("destination %s refused by the egress policy", e.Addr)
}
