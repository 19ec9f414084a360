package jobspec

// The pseudo-classes and pseudo-elements Chrome knows, and what each takes
// as its argument: CheckSelector's table, kept beside the selector's
// structure (selector.go) because it follows Chrome's releases, not CSS's
// grammar.

import (
	"fmt"
	"regexp"
	"strings"
)

// argKind says what a functional pseudo's argument is.
type argKind int

const (
	argAny       argKind = iota // anything but empty: an ident, a string, a name list
	argForgiving                // a forgiving selector list (:is, :where): Chrome drops what it cannot parse
	argSelectors                // a selector list, checked
	argRelative                 // a relative selector list (:has), checked
	argNth                      // An+B
	argNthOf                    // An+B [of S]
	argIdent                    // one identifier
)

// Chrome's pseudo-classes (Chromium 156, both the headless shell and
// Chrome), without and with arguments; a name in both takes either form.
var pseudoClasses = setOf("active", "any-link", "autofill", "checked", "current", "default", "defined", "disabled",
	"empty", "enabled", "first-child", "first-of-type", "focus", "focus-visible", "focus-within", "fullscreen",
	"future", "hover", "in-range", "indeterminate", "invalid", "last-child", "last-of-type", "link", "modal",
	"only-child", "only-of-type", "open", "optional", "out-of-range", "past", "picture-in-picture",
	"placeholder-shown", "popover-open", "read-only", "read-write", "required", "root", "scope", "target",
	"user-invalid", "user-valid", "valid", "visited", "xr-overlay", "host", "active-view-transition",
	"target-current", "target-before", "target-after", "interest-source", "interest-target",
	"-webkit-any-link", "-webkit-autofill", "-webkit-full-screen", "-webkit-full-screen-ancestor",
	"-webkit-full-page-media", "-webkit-drag",
	// Scrollbar states, for ::-webkit-scrollbar* (Chrome takes them anywhere).
	"window-inactive", "horizontal", "vertical", "decrement", "increment", "start", "end",
	"double-button", "single-button", "no-button", "corner-present")

var pseudoClassFuncs = map[string]argKind{
	"not": argSelectors, "is": argForgiving, "where": argForgiving, "has": argRelative,
	"nth-child": argNthOf, "nth-last-child": argNthOf, "nth-of-type": argNth, "nth-last-of-type": argNth,
	"lang": argAny, "dir": argIdent, "host": argSelectors, "host-context": argSelectors, "state": argIdent,
	"-webkit-any": argSelectors, "active-view-transition-type": argAny,
}

// Chrome's pseudo-elements; every ::-webkit-* name is one too (Chrome takes
// any of them).
var pseudoElements = setOf("before", "after", "marker", "placeholder", "selection", "first-line", "first-letter",
	"backdrop", "file-selector-button", "cue", "spelling-error", "grammar-error", "target-text", "view-transition",
	"details-content", "scroll-marker", "scroll-marker-group", "picker-icon", "checkmark", "search-text", "column")

var pseudoElementFuncs = map[string]argKind{
	"cue": argSelectors, "slotted": argSelectors, "part": argAny, "highlight": argAny,
	"view-transition-group": argAny, "view-transition-image-pair": argAny, "view-transition-old": argAny,
	"view-transition-new": argAny, "scroll-button": argAny, "picker": argAny,
}

// legacyPseudoElements may be written with one colon.
var legacyPseudoElements = setOf("before", "after", "first-line", "first-letter")

// nonStandardPseudo are cascadia's own pseudo-classes, which no browser
// has: named in the error, since users bring them from Go or jQuery.
var nonStandardPseudo = setOf("contains", "containsown", "matches", "matchesown")

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// pseudoAfterElementOK: Chrome takes pseudo-classes (and pseudo-elements)
// after ::part(), ::selection and the ::-webkit-* pseudo-elements (their
// scrollbar states), and nothing after the others (::before:hover throws).
func pseudoAfterElementOK(pe string) bool {
	return pe == "part" || pe == "selection" || strings.HasPrefix(pe, "-webkit-")
}

// checkPseudo checks one pseudo-class or pseudo-element: its name (lower
// case, unescaped), whether it takes arguments, and the argument.
func checkPseudo(name, raw string, element, hasArgs bool, arg string, inner bool) string {
	colon := ":"
	if element {
		colon = "::"
	}
	if nonStandardPseudo[name] && !element {
		return fmt.Sprintf(":%s is not a standard pseudo-class", raw)
	}
	var kind argKind
	var known, plain, funcOK bool
	if element {
		if inner {
			return fmt.Sprintf("a pseudo-element (::%s) is not allowed in a pseudo-class's argument", raw)
		}
		if strings.HasPrefix(name, "-webkit-") {
			// Any ::-webkit-* name but a pseudo-class's.
			_, isFunc := pseudoClassFuncs[name]
			known = !pseudoClasses[name] && !isFunc
			plain = known
		} else {
			plain = pseudoElements[name]
			kind, funcOK = pseudoElementFuncs[name]
			known = plain || funcOK
		}
	} else {
		plain = pseudoClasses[name]
		kind, funcOK = pseudoClassFuncs[name]
		known = plain || funcOK
	}
	what := "pseudo-class"
	if element {
		what = "pseudo-element"
	}
	switch {
	case !known:
		return fmt.Sprintf("%s%s is not a %s the browser knows", colon, raw, what)
	case hasArgs && !funcOK:
		return fmt.Sprintf("%s%s takes no argument", colon, raw)
	case !hasArgs && !plain:
		return fmt.Sprintf("%s%s needs an argument in parentheses", colon, raw)
	case !hasArgs:
		return ""
	}
	a := strings.TrimSpace(arg)
	switch kind {
	case argForgiving:
		return ""
	case argAny:
		if a == "" {
			return fmt.Sprintf("%s%s() needs an argument", colon, raw)
		}
		if name == "lang" && !isIdent(a) {
			return fmt.Sprintf("%s%s() takes one language tag, unquoted", colon, raw)
		}
	case argIdent:
		if !isIdent(a) {
			return fmt.Sprintf("%s%s() takes one identifier", colon, raw)
		}
	case argSelectors, argRelative:
		if name == "has" && strings.Contains(strings.ToLower(outsideStrings(a)), ":has(") {
			return ":has() cannot be nested in :has()"
		}
		if msg := checkSelector(arg, kind == argRelative, true); msg != "" {
			return fmt.Sprintf("in %s%s(): %s", colon, raw, msg)
		}
	case argNth, argNthOf:
		nth, of, hasOf := cutOf(a)
		if hasOf && kind == argNth {
			return fmt.Sprintf("%s%s() takes no \"of\" selector", colon, raw)
		}
		if !isAnPlusB(nth) {
			return fmt.Sprintf("%s%s(%s): not an An+B expression (e.g. 2n+1, odd, 3)", colon, raw, a)
		}
		if hasOf {
			// Chrome takes (and drops) a pseudo-element here.
			if msg := checkSelector(of, false, false); msg != "" {
				return fmt.Sprintf("in %s%s(): %s", colon, raw, msg)
			}
		}
	}
	return ""
}

// nthOf splits an :nth-child() argument at its " of ".
var nthOf = regexp.MustCompile(`(?is)^(.*?)\s+of\s+(.+)$`)

// cutOf splits an :nth-child() argument into its An+B and its "of"
// selector.
func cutOf(a string) (nth, of string, ok bool) {
	if m := nthOf.FindStringSubmatch(a); m != nil {
		return m[1], m[2], true
	}
	return a, "", false
}

// anPlusB is CSS's An+B: whitespace may stand around B's sign, not inside
// An ("2 n", "+ n" are not An+B).
var anPlusB = regexp.MustCompile(`(?i)^\s*(odd|even|[+-]?\d+|[+-]?\d*n(\s*[+-]\s*\d+)?)\s*$`)

func isAnPlusB(s string) bool { return anPlusB.MatchString(s) }
