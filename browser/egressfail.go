package browser

// What a job's failure is when the node's egress proxy answered instead of
// the site: a refusal of the policy, or a destination the proxy could not
// resolve or connect.

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/chromedp/cdproto/network"

	"github.com/browserfarm/browserfarm/browser/egress"
)

// The egress proxy's marks on its own answers to plain-HTTP requests
// (egress.RefusedHeader, egress.FailedHeader; a test checks they agree).
const (
	egressRefusedHeader = "X-Browserfarm-Egress-Refused"
	egressFailedHeader  = "X-Browserfarm-Egress-Failed"
)

// egressAnswer is the error of a main document the egress proxy answered
// itself instead of the site — it refused the page's URL or where it
// redirected, or could not resolve or connect it — or nil. Only a plain
// http:// request of a job without a proxy of its own reaches the egress
// proxy as a request: any other response came from the site (through a
// tunnel) or from the job's proxy, which cannot speak for the farm's.
func (s *Session) egressAnswer(j *job, resp *network.Response) error {
	if !s.egressed(j) {
		return nil
	}
	return egressMark(resp)
}

// egressed reports whether the job's requests go through the node's egress
// proxy: there is one, and the job has no proxy of its own.
func (s *Session) egressed(j *job) bool {
	return s.b.opts.EgressProxy != "" && j.proxy == nil
}

// egressMark is egressAnswer's error for a response of a job whose
// requests go through the egress proxy.
func egressMark(resp *network.Response) error {
	if resp.Status != 403 && resp.Status != 502 {
		return nil
	}
	u, err := url.Parse(resp.URL)
	if err != nil || u.Scheme != "http" {
		return nil
	}
	for k, v := range resp.Headers {
		switch {
		case resp.Status == 403 && strings.EqualFold(k, egressRefusedHeader):
			return egressRefusedErr(fmt.Sprint(v), resp.URL)
		case resp.Status == 502 && strings.EqualFold(k, egressFailedHeader):
			// The mark carries this request's own cause: the proxy's record
			// of the host may be another request's (this one can have met
			// a kept-alive connection's failure without dialing).
			return egressFailureErr(fmt.Sprint(v), resp.URL)
		}
	}
	return nil
}

// egressTunnel is the error of an https page whose tunnel the egress proxy
// refused or could not connect — the job's URL or where it redirected:
// Chrome reports only that the tunnel failed, the proxy says why.
func (s *Session) egressTunnel(j *job, st *jobState, errText string) error {
	if j.proxy != nil || !strings.Contains(errText, tunnelFailed) {
		return nil
	}
	target := j.URL
	if d := st.lastDocURL(); d != "" {
		target = d
	}
	f, ok := tunnelFailure(s.b.opts.EgressFailure, target)
	switch {
	case !ok:
		return nil
	case f.Refused:
		return egressRefusedErr(f.Addr, j.shown)
	}
	return egressFailureErr(f.Err, j.shown)
}

// tunnelFailed is Chrome's error of a request whose tunnel (CONNECT) the
// proxy did not open.
const tunnelFailed = "ERR_TUNNEL_CONNECTION_FAILED"

// tunnelFailure is the egress proxy's record (lookup: Options.EgressFailure)
// of why it failed the host and port of target, a URL.
func tunnelFailure(lookup func(hostport string) (egress.Failure, bool), target string) (egress.Failure, bool) {
	u, err := url.Parse(target)
	if err != nil || lookup == nil {
		return egress.Failure{}, false
	}
	port, _ := egress.URLPort(u)
	return lookup(net.JoinHostPort(u.Hostname(), strconv.Itoa(int(port))))
}

// egressRefusedErr is the error of a page at an address (addr) the egress
// policy refuses.
func egressRefusedErr(addr, shown string) error {
	return newErr(ClassDestinationRefused, false, "destination %s refused by the egress policy (%s)", addr, shown)
}

// egressFailureErr is the error of a page the egress proxy could not
// resolve or connect: a network error with the proxy's cause, retriable as
// Chrome's own would be without the proxy (ERR_NAME_NOT_RESOLVED too: a
// name can be missing for a while, a negative answer cached or a record
// not yet everywhere).
func egressFailureErr(cause, shown string) error {
	return newErr(ClassNetwork, true, "loading %s: %s", shown, cause)
}
