package jobspec

import (
	"fmt"
	"strings"

	"github.com/evanw/esbuild/pkg/api"
)

// extractWrapper wraps an extract expression (%s) and its cap (%d): what
// the browser evaluates in the page. The expression sits on lines of its
// own so that a trailing line comment cannot swallow the wrapper. It uses
// no global the page could replace but JSON.stringify, whose answer it
// measures: typeof, ===, concatenation to the empty string (the ToString
// of a primitive calls no method) and a string's length are the
// language's.
const extractWrapper = `(async () => { const v = await (
%s
); const t = typeof v;
if (t === 'number' && (v !== v || v === 1 / 0 || v === -1 / 0 || (v === 0 && 1 / v < 0))) return v;
if (t === 'bigint') { const n = ('' + v).length; return n > %[2]d ? n : v; }
const s = JSON.stringify(v);
if (typeof s !== 'string') return undefined;
return s.length > %[2]d ? s.length : s; })()`

// WrapExtract is the script the browser evaluates for the extract
// expression expr with a cap of maxBytes: expr, its trailing whitespace
// and semicolons dropped, awaited inside an async function that answers
// its value's JSON text (or that text's length, over the cap).
func WrapExtract(expr string, maxBytes int) string {
	return fmt.Sprintf(extractWrapper, strings.TrimRight(expr, " \t\r\n;"), maxBytes)
}

// CheckExtract says why the extract expression expr cannot run — it is
// only whitespace, or the script the browser makes of it (WrapExtract) is
// not JavaScript — or nil. "" means no extract and is not checked here.
//
// The syntax is checked by esbuild's parser, which parses the JavaScript
// browsers run today (optional chaining, private fields, top-level await in
// the wrapper, regular expressions with the /v flag, …), the script as the
// browser gets it, so that an expression that is a statement ("return 1",
// "var x = 1; x"), unfinished ("1 +") or empty fails at submit instead of
// after its page rendered. What it cannot know — a name the page lacks, a
// value JSON.stringify refuses — still fails at render, with class extract.
// browser's TestExtractCheckAgreesWithChrome holds it to Chrome's parser.
func CheckExtract(expr string) error {
	if strings.TrimSpace(expr) == "" {
		return fmt.Errorf("is only whitespace: leave it out (or \"\") for no extract")
	}
	res := api.Transform(WrapExtract(expr, 1), api.TransformOptions{
		Loader:   api.LoaderJS,
		Target:   api.ESNext,
		LogLevel: api.LogLevelSilent,
	})
	if len(res.Errors) == 0 {
		return nil
	}
	m := res.Errors[0]
	msg := m.Text
	if l := m.Location; l != nil {
		// Line 1 is the wrapper's; the expression starts on line 2.
		if line := l.Line - 1; line >= 1 && line <= strings.Count(expr, "\n")+1 {
			msg = fmt.Sprintf("line %d, column %d: %s", line, l.Column+1, m.Text)
		} else {
			msg = "at its end: " + m.Text
		}
	}
	return fmt.Errorf("is not a JavaScript expression (%s); it must be one expression — wrap statements in (() => { … })()", msg)
}
