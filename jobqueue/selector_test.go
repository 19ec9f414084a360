package jobqueue

import "testing"

func TestCheckSelector(t *testing.T) {
	for _, sel := range []string{"#ready", "li.item", "a.next", "div > p:nth-child(2n+1)", ":is(a, b)", ":where(.x)",
		"a:has(> img)", "input:focus-visible", "p::before", "li:nth-child(2 of .x)", "div:not(.a, .b)", "*",
		"a[href^='http']", "a[href*=':']", ":scope > a", "h1 ~ p, h2 + p", "[data-x=\"1\" i]", "#a\\:b", "button:enabled"} {
		if msg := checkSelector(sel); msg != "" {
			t.Errorf("checkSelector(%q) = %q, want valid", sel, msg)
		}
	}
	for _, sel := range []string{"##", "a[", "div >", ", a", "a,,b", ":", "a:nth-child(2", "a[href='x]", "div:contains('x')", " ", "a..b", "#"} {
		if msg := checkSelector(sel); msg == "" {
			t.Errorf("checkSelector(%q) is valid, want an error", sel)
		}
	}
}
