package jobspec

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/andybalholm/cascadia"
)

// CheckSelector reports why a CSS selector (list) would not parse in the
// browser (document.querySelector would throw), or "" when it parses. The
// queue checks every selector of a spec with it at submit (wait.selector,
// actions[].selector, follow.selector), and the browser again before it
// renders.
//
// The structure — type, id, class and attribute selectors, combinators and
// lists — is compiled by cascadia, a maintained CSS selector engine, rather
// than by a hand-written grammar. Cascadia's pseudo-class support is not
// Chrome's, though: it refuses :is(), :where(), :scope, :has(> …),
// :focus-visible and pseudo-elements, which Chrome takes, and accepts
// :contains(), which Chrome refuses. So every pseudo-class and
// pseudo-element is checked here against the names Chrome knows (measured:
// browser's TestSelectorCheckAgreesWithChrome runs this package's verdicts
// through both browsers), with or without arguments as Chrome takes it; the
// selector arguments of :not(), :has(), :host(), :host-context(),
// :-webkit-any(), ::slotted(), ::cue() and :nth-child(… of S) are checked
// the same way, recursively (Chrome throws on a bad one there; :is() and
// :where() forgive theirs). Then they are cut out and the rest is compiled.
func CheckSelector(sel string) string {
	if msg := checkSelector(sel, false, false); msg != "" {
		return fmt.Sprintf("%q is not a valid CSS selector: %s", sel, msg)
	}
	return ""
}

// checkSelector checks a selector list; relative: each selector may start
// with a combinator (:has()); inner: an argument, where pseudo-elements are
// not allowed.
func checkSelector(sel string, relative, inner bool) string {
	if strings.TrimSpace(sel) == "" {
		return "it is empty"
	}
	rest, msg := stripPseudo(sel, inner)
	if msg != "" {
		return msg
	}
	if relative {
		// A relative selector starts with a combinator: cascadia compiles it
		// with a stand-in before it.
		var parts []string
		for _, p := range splitTop(rest, ',') {
			p = strings.TrimSpace(p)
			if p != "" && strings.ContainsAny(p[:1], ">+~") {
				p = "* " + p
			}
			parts = append(parts, p)
		}
		rest = strings.Join(parts, ", ")
	}
	if _, err := cascadia.Compile(rest); err != nil {
		return err.Error()
	}
	return ""
}

// stripPseudo checks the pseudo-classes and pseudo-elements (with their
// arguments) outside strings and attribute brackets and removes them,
// putting * where a compound selector would be left empty. inner: sel is
// an argument, where pseudo-elements are not allowed.
func stripPseudo(sel string, inner bool) (string, string) {
	var b strings.Builder
	var quote byte
	bracket := false
	// pe is the pseudo-element of the current complex selector, if any:
	// only a pseudo-class or pseudo-element it allows, or the end of the
	// selector, may follow it.
	pe := ""
	// escapedTo is b's length after an escaped byte was written: a byte
	// like '>' or ' ' that ends b there is a name's, not a combinator.
	escapedTo := -1
	for i := 0; i < len(sel); i++ {
		c := sel[i]
		escaped := false
		if pe != "" && quote == 0 {
			switch {
			case c == ',':
				pe = ""
			case c == ':':
				if !pseudoAfterElementOK(pe) {
					return "", fmt.Sprintf("nothing may follow the pseudo-element ::%s", pe)
				}
			case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
				j := i
				for j < len(sel) && strings.IndexByte(" \t\n\r\f", sel[j]) >= 0 {
					j++
				}
				if j < len(sel) && sel[j] != ',' {
					return "", fmt.Sprintf("the pseudo-element ::%s must be in the last compound selector", pe)
				}
			default:
				return "", fmt.Sprintf("nothing may follow the pseudo-element ::%s", pe)
			}
		}
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
			escaped = true
		case c == '"' || c == '\'':
			quote = c
		case c == '|' && (i+1 >= len(sel) || sel[i+1] != '='):
			// A namespace prefix: "*|" (any namespace) and "|" (none) parse
			// in querySelector, which has no @namespace rule to declare any
			// other. Cascadia knows none, so they are cut out. "||" (a
			// column combinator Chrome lacks) and a "|" with no name after
			// it are left to cascadia to refuse.
			next := byte(0)
			if i+1 < len(sel) {
				next = sel[i+1]
			}
			if !(next == '*' || next == '\\' || isNameByte(next) && !(next >= '0' && next <= '9')) {
				break
			}
			prev := b.String()
			if len(prev) == escapedTo && strings.HasSuffix(prev, `\*`) {
				prev = prev[:len(prev)-2] // Chrome takes "\*|" as "*|"
			} else if strings.HasSuffix(prev, "*") {
				prev = prev[:len(prev)-1]
			}
			if prev == "" || len(prev) != escapedTo && strings.ContainsAny(prev[len(prev)-1:], " \t\n\r\f>+~,([") {
				b.Reset()
				b.WriteString(prev)
				continue
			}
			return "", "a namespace prefix other than * or none (querySelector declares no namespace)"
		case c == '[':
			bracket = true
		case c == ']':
			bracket = false
		case c == ':' && !bracket:
			j := i + 1
			element := j < len(sel) && sel[j] == ':'
			if element {
				j++
			}
			start := j
			for j < len(sel) && (isNameByte(sel[j]) || sel[j] == '\\') {
				if sel[j] == '\\' {
					j = escapeEnd(sel, j)
					continue
				}
				j++
			}
			if j == start {
				return "", "a ':' without a pseudo-class name"
			}
			raw := sel[start:j]
			name := strings.ToLower(unescapeIdent(raw))
			if !element && legacyPseudoElements[name] && (j >= len(sel) || sel[j] != '(') {
				element = true
			}
			hasArgs := j < len(sel) && sel[j] == '('
			arg := ""
			if hasArgs {
				end, ok := closeParen(sel, j)
				if !ok {
					return "", fmt.Sprintf("unbalanced ( in :%s", raw)
				}
				arg = sel[j+1 : end]
				j = end + 1
			}
			if msg := checkPseudo(name, raw, element, hasArgs, arg, inner); msg != "" {
				return "", msg
			}
			if element {
				pe = name
			}
			// A compound made only of pseudo-classes needs a stand-in.
			if prev := b.String(); prev == "" || (len(prev) != escapedTo && strings.ContainsAny(prev[len(prev)-1:], " \t\n>+~,(")) {
				b.WriteByte('*')
			}
			i = j - 1
			continue
		}
		b.WriteByte(c)
		if escaped {
			escapedTo = b.Len()
		}
	}
	if quote != 0 {
		return "", "unterminated string"
	}
	return b.String(), ""
}

// outsideStrings is s without its quoted strings and escapes.
func outsideStrings(s string) string {
	var b strings.Builder
	u := unquoted{s: s}
	for {
		_, c, ok := u.next()
		if !ok {
			return b.String()
		}
		b.WriteByte(c)
	}
}

func isIdent(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isNameByte(c byte) bool {
	return c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// escapeEnd is the index after the CSS escape at s[i] == '\\': up to six
// hex digits and one whitespace after them, or one character.
func escapeEnd(s string, i int) int {
	j := i + 1
	if j >= len(s) {
		return j
	}
	k := j
	for k < len(s) && k-j < 6 && isHex(s[k]) {
		k++
	}
	if k == j {
		_, size := utf8.DecodeRuneInString(s[j:])
		return j + size
	}
	if k < len(s) && strings.IndexByte(" \t\n\r\f", s[k]) >= 0 {
		k++
	}
	return k
}

// unescapeIdent decodes the CSS escapes of an identifier.
func unescapeIdent(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			i++
			continue
		}
		end := escapeEnd(s, i)
		body := strings.TrimRight(s[i+1:end], " \t\n\r\f")
		if body != "" && isHex(body[0]) {
			n, _ := strconv.ParseUint(body, 16, 32)
			if n == 0 || n > utf8.MaxRune || n >= 0xD800 && n <= 0xDFFF {
				n = utf8.RuneError
			}
			b.WriteRune(rune(n))
		} else {
			b.WriteString(body)
		}
		i = end
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// splitTop splits s at sep outside parentheses, brackets and strings.
func splitTop(s string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	sc := unquoted{s: s}
	for {
		i, c, ok := sc.next()
		if !ok {
			return append(out, s[start:])
		}
		switch {
		case c == '(' || c == '[':
			depth++
		case c == ')' || c == ']':
			depth--
		case c == sep && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
}

// closeParen finds the ) that closes the ( at open, skipping strings and
// nested parentheses.
func closeParen(s string, open int) (int, bool) {
	depth := 0
	sc := unquoted{s: s, i: open}
	for {
		i, c, ok := sc.next()
		if !ok {
			return 0, false
		}
		switch c {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i, true
			}
		}
	}
}

// unquoted walks s from i, giving the bytes outside quoted strings and
// backslash escapes (the quotes and escapes themselves are skipped too).
type unquoted struct {
	s     string
	i     int
	quote byte // the quote of the string the walk is in, or 0
}

func (u *unquoted) next() (at int, c byte, ok bool) {
	for u.i < len(u.s) {
		at, c = u.i, u.s[u.i]
		u.i++
		switch {
		case c == '\\':
			u.i++ // the escaped byte, in a string or not
		case u.quote != 0:
			if c == u.quote {
				u.quote = 0
			}
		case c == '"' || c == '\'':
			u.quote = c
		default:
			return at, c, true
		}
	}
	return 0, 0, false
}
