package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
)

func wrapAction(i int, a Action, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return &Error{Class: e.Class, Retriable: e.Retriable, Err: fmt.Errorf("action %d (%s): %w", i, a.Type, e.Err)}
	}
	return fmt.Errorf("action %d (%s): %w", i, a.Type, err)
}

// wait blocks until the job's wait condition holds for the navigation.
func (s *Session) wait(ctx context.Context, t *tab, j *job, st *jobState, loader cdp.LoaderID) error {
	if j.Wait.Selector != "" {
		textType := ""
		if resp := st.doc(loader); resp != nil {
			textType = shownAsText(resp)
		}
		if err := t.waitFor(ctx, j.Wait.Selector, j.Wait.Visible, textType); err != nil {
			if errors.Is(err, errNotInText) {
				return t.notInText(ctx, j.Wait.Selector, j.Wait.Visible, textType)
			}
			return t.waitError(ctx, j.Wait.Selector, j.Wait.Visible, err)
		}
	}
	event := ""
	switch {
	case j.Wait.NetworkIdle:
		event = "networkIdle"
	case j.Wait.Selector == "":
		event = "load"
	}
	if event != "" && loader != "" {
		// No loader means a same-document navigation (a fragment change on
		// a reused tab): the document is loaded already.
		if err := st.waitLifecycle(ctx, loader, event); err != nil {
			return fmt.Errorf("waiting for %s: %w", event, err)
		}
	}
	return nil
}

// evalIn runs a JavaScript expression in the execution context uid ("": the
// page's main world) and returns its value, by value. Exceptions come back
// as *Error of class extract.
func (t *tab) evalIn(ctx context.Context, uid string, expr string) (*runtime.RemoteObject, error) {
	r, err := cdp.Call(ctx, t.t, runtime.Evaluate, runtime.EvaluateParams{
		Expression:      expr,
		ReturnByValue:   ptr(true),
		AwaitPromise:    ptr(true),
		UniqueContextID: uid,
	})
	if err != nil {
		return nil, err
	}
	if r.ExceptionDetails != nil {
		return nil, newErr(ClassExtract, false, "script threw: %s", exceptionText(r.ExceptionDetails))
	}
	return r.Result, nil
}

// remoteValue is the JSON of a by-value remote object: undefined is null,
// values JSON cannot hold (NaN, Infinity, -0, bigint) are strings.
func remoteValue(o *runtime.RemoteObject) json.RawMessage {
	if o == nil {
		return json.RawMessage("null")
	}
	if o.UnserializableValue != "" {
		return json.RawMessage(jsString(string(o.UnserializableValue)))
	}
	if len(o.Value) == 0 {
		return json.RawMessage("null")
	}
	return json.RawMessage(o.Value)
}

// evalRetry is evalFarm for scripts that wait: if the page navigates
// meanwhile (a client-side redirect), the script's context dies and it runs
// again in the new document.
func (t *tab) evalRetry(ctx context.Context, expr string) (json.RawMessage, error) {
	for {
		v, err := t.evalFarm(ctx, expr)
		if err == nil || !contextLost(err) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// contextLost reports whether err is a script's context ending with its
// document: the page navigated.
func contextLost(err error) bool {
	if errors.Is(err, errWorldGone) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "Execution context was destroyed") ||
		strings.Contains(s, "Cannot find context with specified id") ||
		strings.Contains(s, "uniqueContextId not found") ||
		strings.Contains(s, "Cannot find default execution context") ||
		strings.Contains(s, "Inspected target navigated or closed")
}

// waitFor waits until sel matches an element (a visible one, with visible).
// With textType (shownAsText) a document of that type that has loaded
// without one ends the wait with errNotInText.
func (t *tab) waitFor(ctx context.Context, sel string, visible bool, textType string) error {
	v, err := t.evalRetry(ctx, fmt.Sprintf("(%s)(%s, %t, %s)", jsWaitFor, jsString(sel), visible, jsString(textType)))
	if err == nil && string(v) == "false" {
		return errNotInText
	}
	return selectorError(err)
}

// errNotInText ends the wait for a selector that a loaded document shown as
// text does not match: no script runs in it to change that.
var errNotInText = errors.New("the document shown as text has loaded without it")

// shownAsText returns the MIME type of a main document Chrome shows as text
// (isTextType) and that will not navigate on by itself, "" for any other: a
// Refresh header (which Chrome follows for such a document too) can take it
// to a page whose scripts add the awaited element.
func shownAsText(resp *network.Response) string {
	mt := strings.ToLower(strings.TrimSpace(resp.MimeType))
	if !isTextType(mt) {
		return ""
	}
	for k := range resp.Headers {
		if strings.EqualFold(k, "Refresh") {
			return ""
		}
	}
	return mt
}

// notInText is the error of a wait for a selector that a loaded document
// shown as text (textType) does not match.
func (t *tab) notInText(ctx context.Context, sel string, visible bool, textType string) error {
	return newErr(ClassNotHTML, false, "the page is %s, shown as text, not HTML: %q is not %s once it loaded, and no script runs in it to change that; found: %s",
		textType, sel, waitCond(visible), t.describeWait(ctx, sel))
}

// describeWaitTimeout bounds the look at the page after a wait timed out.
const describeWaitTimeout = 2 * time.Second

// waitCond names the condition a selector wait waits for.
func waitCond(visible bool) string {
	if visible {
		return "visible"
	}
	return "present in the DOM"
}

// waitError names the unmet condition of a failed selector wait and, when
// the wait ran out of time, what the page had: "present but has zero size".
func (t *tab) waitError(ctx context.Context, sel string, visible bool, err error) error {
	cond := waitCond(visible)
	if ctx.Err() == nil {
		return fmt.Errorf("waiting for %q to be %s: %w", sel, cond, err)
	}
	return fmt.Errorf("waiting for %q to be %s: %w; found: %s", sel, cond, err, t.describeWait(ctx, sel))
}

// describeWait says what the page has for a wait selector (jsDescribeWait),
// also after ctx ended, within describeWaitTimeout.
func (t *tab) describeWait(ctx context.Context, sel string) string {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), describeWaitTimeout)
	defer cancel()
	v, err := t.evalFarm(dctx, "("+jsDescribeWait+")("+jsString(sel)+")")
	var found string
	if err == nil {
		if err = json.Unmarshal(v, &found); err == nil {
			return found
		}
	}
	if dctx.Err() != nil {
		// A page that keeps its renderer busy (a script that does not
		// yield, a DOM of millions of nodes) is not looked at for longer.
		return fmt.Sprintf("nothing: the page did not answer a look at it within %v (its renderer busy)", describeWaitTimeout)
	}
	return fmt.Sprintf("nothing: the page could not be read (%v)", err)
}

// selectorError turns a script's bad-selector exception into ClassInvalid.
func selectorError(err error) error {
	var e *Error
	if errors.As(err, &e) && e.Class == ClassExtract && strings.Contains(e.Err.Error(), "bad selector") {
		return &Error{Class: ClassInvalid, Retriable: false, Err: e.Err}
	}
	if errors.As(err, &e) && e.Class == ClassExtract {
		return &Error{Class: ClassAction, Retriable: false, Err: e.Err}
	}
	return err
}

// act performs one action.
func (t *tab) act(ctx context.Context, a Action) error {
	times := max(a.Times, 1)
	switch a.Type {
	case ActionClick:
		for n := range times {
			err := t.click(ctx, a.Selector)
			if err == nil {
				if err = sleep(ctx, time.Duration(a.Ms)*time.Millisecond); err != nil {
					err = fmt.Errorf("pausing %d ms after it: %w", a.Ms, err)
				}
			}
			if err != nil {
				if times > 1 {
					err = fmt.Errorf("click %d of %d: %w", n+1, times, err)
				}
				return err
			}
		}
	case ActionScroll:
		ms := a.Ms
		if ms == 0 {
			ms = defaultScrollWaitMs
		}
		_, err := t.evalFarm(ctx, fmt.Sprintf("(%s)(%d, %d)", jsScroll, times, ms))
		return selectorError(err)
	case ActionType:
		v, err := t.evalRetry(ctx, "("+jsFocus+")("+jsString(a.Selector)+")")
		if err != nil {
			return t.elementError(ctx, a.Selector, err)
		}
		if string(v) != "true" {
			return newErr(ClassAction, false, "%q is not an element that takes text", a.Selector)
		}
		if _, err := cdp.Call(ctx, t.t, input.InsertText, input.InsertTextParams{Text: a.Text}); err != nil {
			return fmt.Errorf("Input.insertText: %w", err)
		}
	case ActionWait:
		if a.Selector != "" {
			if err := t.waitFor(ctx, a.Selector, true, ""); err != nil {
				return t.elementError(ctx, a.Selector, err)
			}
			return nil
		}
		return sleep(ctx, time.Duration(a.Ms)*time.Millisecond)
	}
	return nil
}

// elementError is the error of an action's wait for its element (sel, to
// be visible): when the job's time ran out, it names the selector and says
// what the page had, as the job's own wait does (waitError); an invalid
// selector or a script's failure is selectorError's.
func (t *tab) elementError(ctx context.Context, sel string, err error) error {
	if ctx.Err() == nil {
		return selectorError(err)
	}
	return t.waitError(ctx, sel, true, err)
}

// click scrolls the element into view and clicks its centre with real mouse
// events, which count as a user gesture for the page (popups, beforeunload,
// isTrusted checks).
func (t *tab) click(ctx context.Context, sel string) error {
	v, err := t.evalRetry(ctx, "("+jsClickPoint+")("+jsString(sel)+")")
	if err != nil {
		return t.elementError(ctx, sel, err)
	}
	if string(v) == "null" {
		// Covered or moving: the page got a synthetic click instead.
		return nil
	}
	var pt struct{ X, Y float64 }
	if err := json.Unmarshal(v, &pt); err != nil {
		return fmt.Errorf("reading the click point %s: %w", v, err)
	}
	for _, typ := range []input.DispatchMouseEventType{input.DispatchMouseEventTypeMouseMoved, input.DispatchMouseEventTypeMousePressed, input.DispatchMouseEventTypeMouseReleased} {
		p := input.DispatchMouseEventParams{Type: typ, X: pt.X, Y: pt.Y}
		if typ != input.DispatchMouseEventTypeMouseMoved {
			p.Button = input.MouseButtonLeft
			p.ClickCount = 1
		}
		if _, err := cdp.Call(ctx, t.t, input.DispatchMouseEvent, p); err != nil {
			return fmt.Errorf("Input.dispatchMouseEvent: %w", err)
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
