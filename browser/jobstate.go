package browser

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"

	"github.com/browserfarm/browserfarm/browser/egress"
)

// jobState is what the tab's events tell about the current job.
type jobState struct {
	abort      func(error)
	block      map[network.ResourceType]bool
	maxConsole int

	mu      sync.Mutex
	latest  cdp.LoaderID // main-frame loader of the last "init"
	events  map[cdp.LoaderID]map[string]bool
	docs    map[cdp.LoaderID]*network.Response
	docURL  string // the main frame's last document request: the URL, or where it redirected
	docID   network.RequestID
	docCode int64  // the HTTP status of docID's last answer on the wire (its extra info)
	docTo   string // that answer's Location, for a redirect
	docErr  string // Chrome's error text if docID failed
	console []string
	dialogs int
	changed chan struct{}

	// The egress policy's refusal of a main-frame navigation (watchEgress):
	// the first one seen, and whether the job's own navigation has been
	// checked (armed), after which a refusal aborts the job at once.
	egressFailure func(hostport string) (egress.Failure, bool) // nil: not behind the egress proxy
	refusal       error
	armed         bool
	// docCheck, set when armed, is the error of the main frame's
	// committed document if it is no page of the site's
	// (Session.noPageNow): once one commits, the job fails as it would at
	// its end, rather than waiting to its timeout for a selector or an
	// action's element the page will never show.
	docCheck func() error
	leftErr  error // what docCheck said, once it aborted the job
}

func newJobState(j *job, abort func(error)) *jobState {
	st := &jobState{
		abort:      abort,
		maxConsole: j.MaxConsoleErrors,
		events:     map[cdp.LoaderID]map[string]bool{},
		docs:       map[cdp.LoaderID]*network.Response{},
		changed:    make(chan struct{}, 1),
	}
	if len(j.block) > 0 {
		st.block = map[network.ResourceType]bool{}
		for _, rt := range j.block {
			st.block[rt] = true
		}
	}
	return st
}

func (st *jobState) poke() {
	select {
	case st.changed <- struct{}{}:
	default:
	}
}

func (st *jobState) lifecycle(loader cdp.LoaderID, name string) {
	st.mu.Lock()
	if name == "init" {
		st.latest = loader
	}
	m := st.events[loader]
	if m == nil {
		m = map[string]bool{}
		st.events[loader] = m
	}
	m[name] = true
	st.mu.Unlock()
	st.poke()
}

// docRequest records a document request of the main frame, or a redirect
// of one (which keeps its id).
func (st *jobState) docRequest(id network.RequestID, u string) {
	st.mu.Lock()
	st.docURL, st.docID, st.docCode, st.docTo, st.docErr = u, id, 0, "", ""
	st.mu.Unlock()
}

// extraInfo records the status a request's answer had on the wire, and a
// redirect's Location, for the main frame's document request: Chrome
// reports a response it does not hand on as a page (a 304 it has nothing
// cached for, a redirect to a URL it does not load) only there.
func (st *jobState) extraInfo(id network.RequestID, status int64, headers network.Headers) {
	st.mu.Lock()
	ours := id == st.docID
	if ours {
		st.docCode = status
		if status >= 300 && status < 400 {
			for k, v := range headers {
				if s, ok := v.(string); ok && strings.EqualFold(k, "Location") {
					st.docTo = s
				}
			}
		}
	}
	st.mu.Unlock()
	if ours {
		st.poke()
	}
}

// awaitLastDoc is lastDoc once the status is known or the request went to
// a URL the browser does not load as a page (a redirect's, whose status
// will not come), or as it stands when ctx ends.
func (st *jobState) awaitLastDoc(ctx context.Context) (string, int) {
	for {
		u, code := st.lastDoc()
		if code != 0 || !webURL(u) {
			return u, code
		}
		select {
		case <-ctx.Done():
			return u, code
		case <-st.changed:
		}
	}
}

// lastDoc returns the main frame's last document request's URL and the
// status of its answer on the wire (0 before one).
func (st *jobState) lastDoc() (string, int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.docURL, int(st.docCode)
}

// redirectedTo returns the status and Location of the main frame's last
// document answer when it was a redirect ("" otherwise).
func (st *jobState) redirectedTo() (int, string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.docCode < 300 || st.docCode >= 400 {
		return 0, ""
	}
	return int(st.docCode), st.docTo
}

// lastDocErr is Chrome's error text for the main frame's last document
// request, if it failed ("" otherwise).
func (st *jobState) lastDocErr() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.docErr
}

func (st *jobState) lastDocURL() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.docURL
}

func (st *jobState) response(loader cdp.LoaderID, r *network.Response) {
	st.mu.Lock()
	st.docs[loader] = r
	watch := st.egressFailure != nil
	st.mu.Unlock()
	if watch {
		if err := egressMark(r); ClassOf(err) == ClassDestinationRefused {
			st.refuse(err)
		}
	}
	st.checkDoc()
	st.poke()
}

// watchEgress makes the job's state watch the main frame's navigations for
// the egress policy's refusals (a job behind the node's egress proxy, with
// no proxy of its own); failure is the proxy's record of why it failed a
// host (Options.EgressFailure), for a refused tunnel, which Chrome reports
// only as failed.
func (st *jobState) watchEgress(failure func(hostport string) (egress.Failure, bool)) {
	if failure == nil {
		failure = func(string) (egress.Failure, bool) { return egress.Failure{}, false }
	}
	st.mu.Lock()
	st.egressFailure = failure
	st.mu.Unlock()
}

// docFailed records a main-frame document request that failed: one whose
// tunnel the egress proxy refused is a refusal.
func (st *jobState) docFailed(id network.RequestID, errText string) {
	st.mu.Lock()
	lookup, u := st.egressFailure, st.docURL
	ours := id == st.docID
	if ours {
		st.docErr = errText
	}
	st.mu.Unlock()
	if lookup != nil && ours && strings.Contains(errText, tunnelFailed) {
		if f, ok := tunnelFailure(lookup, u); ok && f.Refused {
			st.refuse(egressRefusedErr(f.Addr, u))
		}
	}
	if ours {
		// Chrome's error page can commit before the failure is reported:
		// its error is known only now.
		st.checkDoc()
	}
}

// refuse records that a navigation of the main frame reached a destination
// the egress policy refuses, and aborts the job with err once armed.
func (st *jobState) refuse(err error) {
	st.mu.Lock()
	first := st.refusal == nil
	if first {
		st.refusal = err
	}
	abort := first && st.armed
	st.mu.Unlock()
	if abort {
		st.abort(err)
	}
}

// arm makes a refusal abort the job from now on, and at once if one was
// recorded: it is called once the job's own navigation has been checked
// (its refusal, if any, is then the job's error with what it answered), so
// that a later navigation's refusal — a script's, a meta refresh's, a
// redirect of either — ends the job whatever it waits for. From then on,
// too, a main-frame document for which docCheck has an error (the egress
// proxy's answer that it could not reach the site, Chrome's error page)
// ends the job as it commits, and so does the one committed by now.
func (st *jobState) arm(docCheck func() error) {
	st.mu.Lock()
	st.armed = true
	st.docCheck = docCheck
	err := st.refusal
	st.mu.Unlock()
	if err != nil {
		st.abort(err)
		return
	}
	st.checkDoc()
}

// checkDoc aborts the job, once armed, if the main frame's committed
// document is no page. The tab calls it at each commit of the main frame,
// and the job's state again when what decides it (the document's
// response, its request's failure) comes in, which may be after the
// commit.
func (st *jobState) checkDoc() {
	st.mu.Lock()
	check := st.docCheck
	refused := st.refusal != nil
	st.mu.Unlock()
	if check == nil || refused {
		// A refusal says where the page went; it ends the job itself.
		return
	}
	if err := check(); err != nil {
		st.mu.Lock()
		if st.leftErr == nil {
			st.leftErr = err
		}
		st.mu.Unlock()
		st.abort(err)
	}
}

// leftForNoPage is docCheck's error once it aborted the job (nil before):
// the job failed as the document the page went on to, which answered
// nothing, if that abort is what ended it.
func (st *jobState) leftForNoPage() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.leftErr
}

// refused is the refusal a navigation of the main frame met, or nil.
func (st *jobState) refused() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.refusal
}

func (st *jobState) doc(loader cdp.LoaderID) *network.Response {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.docs[loader]
}

// seen reports whether the main frame's current document has fired the
// lifecycle event. The current document is the one the job navigated to,
// or a newer one if the page navigated on (a client-side redirect): a
// document starts with "init", and this job's navigation is the first one
// the job's state sees.
func (st *jobState) seen(nav cdp.LoaderID, name string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	cur := nav
	if st.latest != "" {
		cur = st.latest
	}
	return st.events[cur][name]
}

// committed reports whether a main-frame document of this job has
// committed (its "init"): the tab's title is then that document's (or a
// newer one's), not the one the job found.
func (st *jobState) committed() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.latest != ""
}

func (st *jobState) waitLifecycle(ctx context.Context, nav cdp.LoaderID, name string) error {
	for !st.seen(nav, name) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-st.changed:
		}
	}
	return nil
}

func (st *jobState) blocks(rt network.ResourceType) bool {
	return st.block[rt]
}

func (st *jobState) dialog() {
	st.mu.Lock()
	st.dialogs++
	st.mu.Unlock()
}

func (st *jobState) consoleError(msg string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.console) >= st.maxConsole {
		return
	}
	if len(msg) > maxConsoleLen {
		msg = cutUTF8(msg, maxConsoleLen) + "…"
	}
	st.console = append(st.console, msg)
}

func (st *jobState) consoleAndDialogs() ([]string, int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]string(nil), st.console...), st.dialogs
}

func consoleText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		switch {
		case a == nil:
		case a.Type == runtime.RemoteObjectTypeString:
			var s string
			if json.Unmarshal(a.Value, &s) == nil {
				parts = append(parts, s)
				continue
			}
			parts = append(parts, string(a.Value))
		case len(a.Value) > 0:
			parts = append(parts, string(a.Value))
		case a.UnserializableValue != "":
			parts = append(parts, string(a.UnserializableValue))
		case a.Description != "":
			parts = append(parts, a.Description)
		default:
			parts = append(parts, string(a.Type))
		}
	}
	return strings.Join(parts, " ")
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d == nil {
		return "unknown exception"
	}
	if d.Exception != nil && d.Exception.Description != "" {
		return d.Exception.Description
	}
	return d.Text
}
