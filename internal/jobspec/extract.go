package jobspec

import (
	"fmt"
	"strings"
	"sync"

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
	return verdicts.check(expr)
}

// verdicts remembers what parseExtract said of recent expressions: the jobs
// of a submission mostly share one (farm submit --extract, a file's lines),
// each is checked at submit and again as it is enqueued, and a parse costs
// about half a millisecond of CPU, more than the rest of a job's enqueue.
// The answer depends on the expression alone.
var verdicts = verdictCache{parse: parseExtract, max: maxVerdictBytes}

// maxVerdictBytes bounds the expressions the cache keeps, all told; past it
// the cache starts over.
const maxVerdictBytes = 1 << 20

type verdictCache struct {
	parse func(expr string) error
	max   int // bytes of expressions kept

	mu    sync.Mutex
	m     map[string]error
	bytes int
}

func (c *verdictCache) check(expr string) error {
	c.mu.Lock()
	err, ok := c.m[expr]
	c.mu.Unlock()
	if ok {
		return err
	}
	err = c.parse(expr)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[expr]; ok || len(expr) > c.max {
		return err
	}
	if c.m == nil || c.bytes+len(expr) > c.max {
		c.m, c.bytes = map[string]error{}, 0
	}
	c.m[expr] = err
	c.bytes += len(expr)
	return err
}

// parseExtract is CheckExtract's parse of the script the browser makes of
// expr.
func parseExtract(expr string) error {
	script := WrapExtract(expr, 1)
	opts := api.TransformOptions{
		Loader:   api.LoaderJS,
		Target:   api.ESNext,
		LogLevel: api.LogLevelSilent,
	}
	res := api.Transform(script, opts)
	if len(res.Errors) == 0 {
		return checkNoDecorators(expr, script, opts, res.Code)
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

// checkNoDecorators refuses an expression that uses decorators, which
// esbuild's parser takes and Chrome's does not yet (Chromium 156): asked to
// lower them, esbuild rewrites a script that has any, and leaves every other
// one as it printed it. Only an expression with an "@" can have one, so the
// second parse costs the others nothing.
func checkNoDecorators(expr, script string, opts api.TransformOptions, printed []byte) error {
	if !strings.Contains(expr, "@") {
		return nil
	}
	opts.Supported = map[string]bool{"decorators": false}
	if res := api.Transform(script, opts); len(res.Errors) == 0 && string(res.Code) == string(printed) {
		return nil
	}
	return fmt.Errorf("uses decorators (@name), which the browser does not run yet; it must be one expression without them")
}
