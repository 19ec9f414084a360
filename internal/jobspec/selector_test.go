package jobspec

import (
	"strings"
	"testing"
)

// selectorCases are selectors with Chrome's verdict on them (Chromium 156,
// the headless shell and Chrome alike): valid or not for
// document.querySelector (browser's TestSelectorCheckAgreesWithChrome
// compares CheckSelector with the real browsers on these and more).
func selectorCases() (valid, invalid []string) {
	valid = []string{".a\\>:hover", ".a\\ :hover", ".md\\:flex:hover", "#ready", "li.item", "a.next", "div > p:nth-child(2n+1)", ":is(a, b)", ":where(.x)",
		"a:has(> img)", "input:focus-visible", "p::before", "li:nth-child(2 of .x)", "div:not(.a, .b)", "*",
		"a[href^='http']", "a[href*=':']", ":scope > a", "h1 ~ p, h2 + p", "[data-x=\"1\" i]", "#a\\:b", "button:enabled",
		"#ready:hover", "a:hover:focus", "a:HOVER", "a::BEFORE", "a:Nth-Child(2)", "a:\\68over", "a:before", "p:hover::before",
		"p::before ", "a::-webkit-scrollbar", "::-webkit-scrollbar-thumb:hover", "p::-webkit-scrollbar:horizontal",
		"::selection:window-inactive", "p::part(x):hover", "p::part(x)::before", "a::slotted(.a)", "a::cue(.a)", "a::cue",
		"a:is(:unknownpseudo)", "a:where(:foo)", "a:is()", "p:not(:hover, :focus)", "p:nth-child(2n + 1 of :hover)",
		"a:nth-child(+3)", "a:nth-child(-n+3)", "a:nth-child( 2n + 1 )", "a:nth-child(n)", "a:nth-last-child(odd)",
		"a:nth-of-type(2)", "a:lang(en)", "a:nth-child(2 of ::before)", "a:dir(rtl)", "a:dir(foo)", "a:state(x)", "a:host", "a:host(.a)",
		"a:host-context(.a)", "a:-webkit-any(.a, .b)", "a:has(+ .x)", "a:has(~ .x)", "a:has(.a, .b)", "p:not(:is(:foo))",
		"a:popover-open", "a:open", "a:user-invalid", "a:-webkit-autofill", "a:autofill", "a:modal", "a:current", "a:past",
		"a:future", "a:xr-overlay", "a:picture-in-picture", "a::marker", "a::placeholder", "a::backdrop",
		"a::view-transition-group(*)", "a::highlight(x)", "a::file-selector-button", "a :hover", "a\\:hover",
		"a:active-view-transition-type(x)", "a::scroll-button(up)", "a::picker(select)",
		"a:nth-child(2n - 1)", "a:nth-child(2n -1)", "a:nth-child(-n+ 3)", "a:nth-child(2n+1 of .x)", `a:has([data-q=":has("])`,
		"*|a", "|a", "*|*", "[*|href]", "[|href]", "a > *|b", ":not(*|a)", "*|a:hover", "a[lang|=en]", "[*|lang|=en]", "a, *|b", "\\*|a",
	}
	invalid = []string{"##", "a[", "div >", ", a", "a,,b", ":", "a:nth-child(2", "a[href='x]", "div:contains('x')", " ", "a..b", "#",
		"#ready:hover:unknownpseudo", "#ready:unknownpseudo", "a:hover:focus:unknownpseudo", "a:foo", "a:-webkit-foo",
		"a:blank", "a:first", "a:left", "a:paused", "a:playing", "a:muted", "a:local-link", "a:target-within", "a:has-slotted",
		"a:marker", "a:selection", "a:hover(x)", "a:not", "a:has", "a:nth-child", "a:current(.a)", "a:foo(x)",
		"a:not(:unknownpseudo)", "a:has(:unknownpseudo)", "a:host(:unknownpseudo)", "a:has(:has(a))", "a:not(::before)",
		"a:has(::before)", "a:nth-child(foo)", "a:nth-child()", "a:not()", "a:has()", "a:lang()", "a:dir()", "a:state()",
		"a:state(x y)", "a:nth-child(2n+)", "a:nth-child(of .a)", "a:nth-child(2 of)", "a:nth-child(2 of :foo)",
		"a:lang(\"en\")", "a::-webkit-autofill", "a:nth-of-type(2 of .a)", "a:-webkit-any(:foo)", "a::foo", "a::hover", "a::-moz-selection",
		"a::part", "a::slotted", "a::highlight", "a::part()", "a::before(x)", "a::slotted(:foo)", "a::cue(:foo)",
		"p::before:hover", "p::before.x", "p::before::after", "p::before p", "p::marker:hover", "p::slotted(a):hover",
		"p::part(x).a", "input::placeholder:hover", "a:hov\\er", "a:foo\\:bar", "a:lang(en, fr)", "a::-internal-foo", "a::first",
		"a:matches(.a)", "a:any(.a)", "a:nth-child(2 n)", "a:nth-child(+ 2n)", "a:nth-child(2n 1)",
		"ns|a", "[ns|href]", "a || b", "*|", "a|", "|", "svg|rect", "*|1a", "a*|b",
	}
	return valid, invalid
}

func TestCheckSelector(t *testing.T) {
	valid, invalid := selectorCases()
	for _, sel := range valid {
		if msg := CheckSelector(sel); msg != "" {
			t.Errorf("CheckSelector(%q) = %q, want valid", sel, msg)
		}
	}
	for _, sel := range invalid {
		if msg := CheckSelector(sel); msg == "" {
			t.Errorf("CheckSelector(%q) is valid, want an error", sel)
		} else if !strings.Contains(msg, "not a valid CSS selector") {
			t.Errorf("CheckSelector(%q) = %q, want it to say the selector is not valid", sel, msg)
		}
	}
}
