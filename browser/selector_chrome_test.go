package browser

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/jobspec"
)

// The selectors TestSelectorCheckAgreesWithChrome asks Chrome about: every
// pseudo-class and pseudo-element name of the CSS specifications, Chrome's
// own (-webkit-, scrollbar states) and some it does not have, alone and with
// arguments, and compounds where they combine.
var chromePseudoClasses = []string{"active", "any-link", "autofill", "blank", "checked", "current", "default", "defined", "disabled", "empty", "enabled",
	"first", "first-child", "first-of-type", "focus", "focus-visible", "focus-within", "fullscreen", "future", "hover", "in-range", "indeterminate",
	"invalid", "last-child", "last-of-type", "left", "link", "local-link", "modal", "only-child", "only-of-type", "open", "closed", "optional",
	"out-of-range", "past", "paused", "picture-in-picture", "placeholder-shown", "playing", "popover-open", "read-only", "read-write", "required",
	"right", "root", "scope", "target", "target-within", "user-invalid", "user-valid", "valid", "visited", "xr-overlay", "host", "muted",
	"volume-locked", "buffering", "stalled", "seeking", "active-view-transition", "target-current", "has-slotted", "-webkit-any-link",
	"-webkit-full-screen", "-webkit-full-screen-ancestor", "-webkit-drag", "window-inactive", "horizontal", "vertical", "decrement", "increment",
	"start", "end", "double-button", "single-button", "no-button", "corner-present", "-webkit-full-page-media", "autofill-previewed",
	"autofill-selected", "-webkit-autofill", "spatial-navigation-focus", "-internal-list-box", "unknownpseudo", "foo", "-webkit-foo", "-moz-focusring", "-webkit-full-screen-document", "-webkit-full-screen-controls-hidden",
	"before", "after", "first-line", "first-letter", "marker", "selection", "placeholder", "backdrop", "contains", "matches", "focus-ring", "heading", "state",
	"-webkit-autofill-strong-password", "-webkit-autofill-strong-password-viewable", "fullscreen-ancestor", "interest-source", "interest-target", "has-interest", "target-before", "target-after", "checked-ancestor", "drop", "nth-child", "not", "is", "where", "has", "lang", "dir"}

var chromePseudoClassFuncs = []string{"not(.a)", "is(.a)", "where(.a)", "has(.a)", "has(> .a)", "nth-child(2n+1)", "nth-last-child(odd)", "nth-of-type(2)", "nth-last-of-type(even)",
	"lang(en)", "dir(ltr)", "host(.a)", "host-context(.a)", "state(foo)", "-webkit-any(.a)", "current(.a)", "active-view-transition-type(x)",
	"nth-child(2 of .x)", "nth-of-type(2 of .x)", "hover(x)", "contains(x)", "matches(.a)", "any(.a)", "heading(1)", "foo(x)", "not(:unknownpseudo)", "is(:unknownpseudo)",
	"where(:unknownpseudo)", "has(:unknownpseudo)", "not(:hover)", "nth-child(foo)", "nth-child()", "not()", "is()", "has()", "lang()", "dir(foo)", "dir()", "state()",
	"host(:unknownpseudo)", "has(:has(a))", "is(::before)", "not(::before)", "has(::before)", "not(p::before)", "is(:hover:unknownpseudo)", "not(.a, :foo)", "is(.a, :foo)"}

var chromePseudoElements = []string{"before", "after", "marker", "placeholder", "selection", "first-line", "first-letter", "backdrop", "file-selector-button",
	"cue", "spelling-error", "grammar-error", "target-text", "view-transition", "details-content", "scroll-marker", "scroll-marker-group", "picker-icon",
	"checkmark", "search-text", "column", "-webkit-scrollbar", "-webkit-scrollbar-thumb", "-webkit-scrollbar-track", "-webkit-scrollbar-button",
	"-webkit-scrollbar-corner", "-webkit-scrollbar-track-piece", "-webkit-resizer", "-webkit-input-placeholder", "-webkit-file-upload-button",
	"-webkit-search-cancel-button", "-webkit-details-marker", "-webkit-inner-spin-button", "-webkit-foo", "-webkit-anything-goes", "foo", "hover",
	"-moz-selection", "interest-hint", "part", "slotted", "highlight", "view-transition-group", "view-transition-image-pair", "view-transition-old",
	"view-transition-new", "scroll-button", "picker", "-internal-foo", "-webkit-media-controls", "first", "root"}

var chromePseudoElementFuncs = []string{"cue(.a)", "part(x)", "slotted(.a)", "highlight(x)", "view-transition-group(x)", "view-transition-image-pair(x)", "view-transition-old(x)",
	"view-transition-new(x)", "view-transition-group(*)", "scroll-button(up)", "scroll-button(*)", "picker(select)", "before(x)", "foo(x)", "-webkit-foo(x)", "slotted(:foo)", "cue(:foo)", "part()"}

var chromeSelectors = []string{"p::before:hover", "p::before.x", "p::before::after", "p::before p", "p::marker:hover", "::selection:window-inactive", "p::-webkit-scrollbar:horizontal",
	"p:hover::before", "p::before:focus", "a:hover:focus:unknownpseudo", "#ready:hover:unknownpseudo", "#ready:unknownpseudo", "p:before:hover", "p::slotted(a):hover",
	"p::part(x):hover", "p::part(x)::before", "p::part(x).a", "input::placeholder:hover", "::-webkit-scrollbar-thumb:hover", "::-webkit-scrollbar:window-inactive",
	"a:HOVER", "a::BEFORE", "a:Nth-Child(2)", "a:-WEBKIT-any-link", ":root", ":host", ":host > a", "a:first", "a:left", "::cue", "::backdrop", "a:not(::before)",
	"p:not(:hover, :focus)", "p:nth-child(2n + 1 of :hover)", "p:is(:foo, .a)", "p:where(:foo)", "p:has(:foo)", "p:has(:is(:foo))", "p:not(:is(:foo))", "a:lang(\"en\")", "a:lang(en, fr)", "a:lang(*-CH)", "a:dir(rtl)",
	"a:nth-child(+3)", "a:nth-child(-n+3)", "a:nth-child( 2n + 1 )", "a:nth-child(n)", "a:nth-child(2n+)", "a:nth-child(of .a)", "a:nth-child(2 of)", "a:nth-child(2 of :hover)", "a:nth-child(2 of :foo)", "a:nth-child(2 of ::before)", "a:nth-of-type(2 of .a)",
	"a:is()", "a:where()", "a:state(x)", "a:state(x y)", "a:host(.a)", "a:host-context(.a)", "a:-webkit-any(.a, .b)", "a:-webkit-any(:foo)", "a:current(.a)", "a:has(+ .x)", "a:has(~ .x)", "a:has(.a, .b)", "a:has(:has(.a))", "a:has(:not(:has(a)))",
	"a:nth-child(2n - 1)", "a:nth-child(2n -1)", "a:nth-child(-n+ 3)", "a:nth-child(2 n)", "a:nth-child(+ 2n)", "a:nth-child(2n 1)",
	`a:has([data-q=":has("])`, ".a\\>:hover", ".a\\ :hover", ".a\\,:hover", ".md\\:flex:hover", "a:\\68over", "a:hov\\er", "a:foo\\:bar", "a :hover", "a\\:hover", "p::before ", "a::-webkit-autofill", "a:-webkit-autofill", "a:autofill", "a:-internal-list-box", "a:focus-visible", "a:modal", "a:popover-open", "a:open", "a:user-invalid", "a:target-within",
	"*|a", "|a", "*|*", "[*|href]", "[|href]", "a > *|b", ":not(*|a)", "*|a:hover", "a[lang|=en]", "[*|lang|=en]", "a, *|b",
	"ns|a", "[ns|href]", "a || b", "*|", "a|", "|", "svg|rect", "\\*|a", "*|1a", "a*|b", "*|a::before", ":is(*|a)", "a:has(> *|b)"}

// TestSelectorCheckAgreesWithChrome: jobspec.CheckSelector, which submit
// and Render apply to every selector of a job, says of each selector above
// what the browser's document.querySelector says: valid, or throws. A
// refused selector Chrome takes is a job refused for nothing; an accepted
// one it throws on fails at render.
func TestSelectorCheckAgreesWithChrome(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	var sels []string
	for _, n := range chromePseudoClasses {
		sels = append(sels, "a:"+n)
	}
	for _, n := range chromePseudoClassFuncs {
		sels = append(sels, "a:"+n)
	}
	for _, n := range chromePseudoElements {
		sels = append(sels, "a::"+n)
	}
	for _, n := range chromePseudoElementFuncs {
		sels = append(sels, "a::"+n)
	}
	sels = append(sels, chromeSelectors...)
	list, err := json.Marshal(sels)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.Render(ctx, Request{URL: e.url("/page/1"),
		Extract: "(sels => sels.map(s => { try { document.querySelector(s); return true } catch (e) { return false } }))(" + string(list) + ")"})
	if err != nil {
		t.Fatal(err)
	}
	var ok []bool
	unmarshal(t, res.Data, &ok)
	if len(ok) != len(sels) {
		t.Fatalf("%d answers for %d selectors", len(ok), len(sels))
	}
	for i, sel := range sels {
		msg := jobspec.CheckSelector(sel)
		switch {
		case ok[i] && msg != "":
			t.Errorf("Chrome takes %q, CheckSelector refuses it: %s", sel, msg)
		case !ok[i] && msg == "":
			t.Errorf("Chrome throws on %q, CheckSelector accepts it", sel)
		}
	}
}
