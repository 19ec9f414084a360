package main

// The node's egress policy: what its jobs may reach, from the flags, and
// the farm's own addresses and services, which they never may.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser/egress"
	"github.com/jackc/pgx/v5/pgconn"
)

// egressPolicy is what the node's jobs may reach, from the flags: the node's
// own health endpoint is never one of them.
func (o *consumerOptions) egressPolicy() (egress.Policy, error) {
	var p egress.Policy
	var err error
	if p.Allow, err = egress.ParseRules(o.allow); err != nil {
		return p, fmt.Errorf("--allow-destination: %w", err)
	}
	if p.Deny, err = egress.ParseRules(o.deny); err != nil {
		return p, fmt.Errorf("--deny-destination: %w", err)
	}
	if o.healthAddr != "" {
		p.Deny = append(p.Deny, listenRules(o.healthAddr)...)
	}
	p.Deny = append(p.Deny, selfRules(interfaceAddrs())...)
	return p, nil
}

// interfaceAddrs are the machine's own addresses.
func interfaceAddrs() []netip.Addr {
	addrs, _ := net.InterfaceAddrs()
	var out []netip.Addr
	for _, ia := range addrs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

// selfRules refuse, on every port, the machine's own addresses but
// loopback, public and private alike, whatever --allow-destination opens:
// a job could otherwise reach whatever listens on all addresses of the node
// (SSH, a local PostgreSQL, exporters, the container runtime) — an operator
// who allows 10.0.0.0/8 for an internal site does not mean the node's own
// 10.0.0.9:22. Its loopback addresses are refused already and allowed only
// port by port (the farm's own ports on them never); a service on the node
// that jobs should reach is allowed there.
func selfRules(addrs []netip.Addr) []egress.Rule {
	var out []egress.Rule
	for _, a := range addrs {
		if a = a.Unmap(); a.IsLoopback() || a.IsUnspecified() {
			continue
		}
		out = append(out, egress.HostRule(a, 0))
	}
	return out
}

// endpointRules refuse the farm's own services the node talks to — its
// database's hosts, the producer of --wake-url and an S3-compatible blob
// store's endpoint — at their ports, on
// every address they resolve to now, whether public or private: a deny beats
// an --allow-destination that opens the network they are on. A host that
// does not resolve is logged and left out.
func (o *consumerOptions) endpointRules(ctx context.Context, log *zap.Logger) []egress.Rule {
	type endpoint struct {
		host string
		port uint16
	}
	var eps []endpoint
	if cfg, err := pgconn.ParseConfig(o.db.url); err == nil {
		eps = append(eps, endpoint{cfg.Host, cfg.Port})
		for _, f := range cfg.Fallbacks {
			eps = append(eps, endpoint{f.Host, f.Port})
		}
	}
	addURL := func(raw string) {
		if u, err := url.Parse(raw); err == nil && u.Host != "" {
			if port, ok := egress.URLPort(u); ok {
				eps = append(eps, endpoint{u.Hostname(), port})
			}
		}
	}
	if u, err := url.Parse(o.blobs.url); err == nil && u.Scheme == "s3" {
		addURL(u.Query().Get("endpoint"))
	}
	addURL(o.wakeURL)
	var out []egress.Rule
	for _, ep := range eps {
		if ep.host == "" || strings.HasPrefix(ep.host, "/") { // a Unix socket
			continue
		}
		addrs := []netip.Addr{}
		if a, err := netip.ParseAddr(ep.host); err == nil {
			addrs = append(addrs, a)
		} else {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			addrs, err = net.DefaultResolver.LookupNetIP(rctx, "ip", ep.host)
			cancel()
			if err != nil {
				log.Warn("cannot resolve one of the farm's own endpoints to keep jobs from it", zap.String("host", ep.host), zap.Error(err))
				continue
			}
		}
		for _, a := range addrs {
			out = addrRules(out, a, ep.port)
		}
	}
	return out
}

// addrRules refuse port on a, and on every loopback address when a is one:
// Linux answers on all of 127.0.0.0/8 for a service that listens on all
// addresses (or on 127.0.0.1 and ::1 alike for "localhost"), and an
// operator who allows a loopback prefix must not open the farm's own
// services through 127.0.0.2.
// They are appended to out unless out has them already (127.0.0.1 and ::1
// of one listener or host give the same pair).
func addrRules(out []egress.Rule, a netip.Addr, port uint16) []egress.Rule {
	rules := []egress.Rule{egress.HostRule(a, port)}
	if a.Unmap().IsLoopback() {
		rules = []egress.Rule{
			{Prefix: netip.MustParsePrefix("127.0.0.0/8"), Port: port},
			egress.HostRule(netip.IPv6Loopback(), port),
		}
	}
	for _, r := range rules {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// listenRules are the destinations a listen address answers on: its IP and
// port, or every address of the machine with that port when it listens on
// all of them or is given by a name (localhost, the host's name: whatever
// it resolves to is one of the machine's addresses).
func listenRules(addr string) []egress.Rule {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return nil
	}
	var ips []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil && !a.IsUnspecified() {
		ips = append(ips, a)
	} else {
		ips = interfaceAddrs()
	}
	var out []egress.Rule
	for _, a := range ips {
		out = addrRules(out, a, uint16(port))
	}
	return out
}

// resolveMemoryCeiling replaces --chrome-memory-ceiling-mb auto with what
