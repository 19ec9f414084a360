package jobqueue

import (
	"fmt"
	"strings"

	"github.com/andybalholm/cascadia"
)

// checkSelector reports why a CSS selector (list) would not parse in the
// browser, or "" when it parses.
//
// The structure — type, id, class and attribute selectors, combinators and
// lists — is compiled by cascadia, a maintained CSS selector engine, rather
// than by a hand-written grammar. Cascadia's pseudo-class support is not
// Chrome's, though: it refuses :is(), :where(), :scope, :has(> …),
// :focus-visible and pseudo-elements, which Chrome takes, and accepts
// :contains(), which Chrome refuses. So pseudo-classes and pseudo-elements are
// checked here only for their form (a name, and balanced arguments) and cut
// out before the rest is compiled; the non-standard ones cascadia invented are
// refused by name. A selector that passes and still fails in Chrome fails its
// job permanently (class invalid) at render.
func checkSelector(sel string) string {
	if strings.TrimSpace(sel) == "" {
		return "is empty"
	}
	rest, msg := stripPseudo(sel)
	if msg != "" {
		return msg
	}
	if _, err := cascadia.Compile(rest); err != nil {
		return fmt.Sprintf("%q is not a valid CSS selector: %v", sel, err)
	}
	return ""
}

// nonStandardPseudo are cascadia's own pseudo-classes, which no browser has.
var nonStandardPseudo = map[string]bool{"contains": true, "containsown": true, "matches": true, "matchesown": true}

// stripPseudo removes pseudo-classes and pseudo-elements (with their
// arguments) outside strings and attribute brackets, putting * where a
// compound selector would be left empty.
func stripPseudo(sel string) (string, string) {
	var b strings.Builder
	var quote byte
	bracket := false
	for i := 0; i < len(sel); i++ {
		c := sel[i]
		switch {
		case quote != 0:
			if c == '\\' && i+1 < len(sel) {
				b.WriteByte(c)
				i++
				c = sel[i]
			} else if c == quote {
				quote = 0
			}
		case c == '\\' && i+1 < len(sel):
			b.WriteByte(c)
			i++
			c = sel[i]
		case c == '"' || c == '\'':
			quote = c
		case c == '[':
			bracket = true
		case c == ']':
			bracket = false
		case c == ':' && !bracket:
			j := i + 1
			if j < len(sel) && sel[j] == ':' {
				j++
			}
			start := j
			for j < len(sel) && (isNameByte(sel[j]) || sel[j] == '\\') {
				if sel[j] == '\\' {
					j++
				}
				j++
			}
			if j == start {
				return "", fmt.Sprintf("%q is not a valid CSS selector: a ':' without a pseudo-class name", sel)
			}
			if nonStandardPseudo[strings.ToLower(sel[start:j])] {
				return "", fmt.Sprintf("%q is not a valid CSS selector: :%s is not a standard pseudo-class", sel, sel[start:j])
			}
			if j < len(sel) && sel[j] == '(' {
				end, ok := closeParen(sel, j)
				if !ok {
					return "", fmt.Sprintf("%q is not a valid CSS selector: unbalanced ( in :%s", sel, sel[start:j])
				}
				j = end + 1
			}
			// A compound made only of pseudo-classes needs a stand-in.
			if prev := b.String(); prev == "" || strings.ContainsAny(prev[len(prev)-1:], " >+~,(") {
				b.WriteByte('*')
			}
			i = j - 1
			continue
		}
		b.WriteByte(c)
	}
	if quote != 0 {
		return "", fmt.Sprintf("%q is not a valid CSS selector: unterminated string", sel)
	}
	return b.String(), ""
}

func isNameByte(c byte) bool {
	return c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// closeParen finds the ) that closes the ( at open, skipping strings and
// nested parentheses.
func closeParen(s string, open int) (int, bool) {
	depth := 0
	var quote byte
	for i := open; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\\':
			i++
		case c == '"' || c == '\'':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return i, true
			}
		}
	}
	return 0, false
}
