package farm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/browser/egress"
)

// checkJobProxy refuses a job whose own proxy is at an address the node's
// egress policy refuses: the job's traffic goes to its proxy directly, not
// through the node's filter, so the proxy itself must be a place the job may
// reach. What lies behind an allowed proxy is that proxy's business. It
// returns the proxy as Chrome is to use it (pinProxy).
func (c *Consumer) checkJobProxy(ctx context.Context, proxy string) (string, error) {
	return pinProxy(ctx, c.egress.Check, proxy)
}

// pinProxy checks a job's proxy with check and returns it with its host
// replaced by the address check approved, for the proxies Chrome reaches
// over plain TCP (http, socks5): Chrome would otherwise resolve the name
// again itself, and a name that answers a public address to the check and
// a private one to Chrome (DNS rebinding) would take the job's requests to
// the farm's own network. An https proxy keeps its name, which Chrome needs
// to verify the proxy's certificate; that verification is what keeps a
// rebound name from reaching anything else.
func pinProxy(ctx context.Context, check func(ctx context.Context, host string, port uint16) (netip.AddrPort, error), proxy string) (string, error) {
	if proxy == "" {
		return "", nil
	}
	u, err := url.Parse(proxy)
	if err != nil {
		return "", &browser.Error{Class: browser.ClassInvalid, Err: fmt.Errorf("proxy: %w", err)}
	}
	port, err := strconv.ParseUint(u.Port(), 10, 16)
	if err != nil {
		return "", &browser.Error{Class: browser.ClassInvalid, Err: fmt.Errorf("proxy: bad port %q", u.Port())}
	}
	addr, err := check(ctx, u.Hostname(), uint16(port))
	if err != nil {
		var re *egress.RefusedError
		if errors.As(err, &re) {
			return "", &browser.Error{Class: browser.ClassDestinationRefused, Err: fmt.Errorf("the job's proxy: %w", err)}
		}
		return "", &browser.Error{Class: browser.ClassNetwork, Retriable: true, Err: fmt.Errorf("the job's proxy: %w", err)}
	}
	if strings.EqualFold(u.Scheme, "https") {
		return proxy, nil
	}
	u.Host = addr.String()
	return u.String(), nil
}

// followable drops the links to literal addresses the egress policy
// refuses, so that they never become child jobs; links by host name are
// judged when their job runs, on what the name resolves to then.
func (c *Consumer) followable(links []string) []string {
	out := links[:0]
	for _, l := range links {
		if u, err := url.Parse(l); err == nil {
			if a, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil {
				p, _ := egress.URLPort(u)
				if !c.cfg.Egress.Allowed(netip.AddrPortFrom(a, p)) {
					continue
				}
			}
		}
		out = append(out, l)
	}
	return out
}
