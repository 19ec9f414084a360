package browser

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/jobspec"
	"github.com/browserfarm/browserfarm/internal/jobspec/jobspectest"
)

// TestExtractCheckAgreesWithChrome: jobspec.CheckExtract, which submit
// applies to a job's extract, says of each expression of the table what
// Chrome's parser says of the script the browser makes of it
// (jobspec.WrapExtract): it parses, or it is a SyntaxError. A refused
// expression Chrome takes is a job refused for nothing; an accepted one it
// cannot parse fails after its page rendered.
func TestExtractCheckAgreesWithChrome(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	good, bad := jobspectest.ExtractCases()
	exprs := append(append([]string(nil), good...), bad...)
	scripts := make([]string, len(exprs))
	for i, x := range exprs {
		scripts[i] = jobspec.WrapExtract(x, 100)
	}
	list, err := json.Marshal(scripts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.Render(ctx, Request{URL: e.url("/page/1"),
		Extract: "(ss => ss.map(s => { try { new Function(s); return true } catch (e) { return e instanceof SyntaxError ? false : String(e) } }))(" + string(list) + ")"})
	if err != nil {
		t.Fatal(err)
	}
	var parses []any
	unmarshal(t, res.Data, &parses)
	if len(parses) != len(exprs) {
		t.Fatalf("%d answers for %d expressions", len(parses), len(exprs))
	}
	for i, x := range exprs {
		ok, isBool := parses[i].(bool)
		if !isBool {
			t.Fatalf("%q: Chrome threw %v", x, parses[i])
		}
		err := jobspec.CheckExtract(x)
		switch {
		case ok && err != nil:
			t.Errorf("Chrome parses %q, CheckExtract refuses it: %v", x, err)
		case !ok && err == nil:
			t.Errorf("Chrome cannot parse %q, CheckExtract accepts it", x)
		case i < len(good) && !ok:
			t.Errorf("the table's good expression %q does not parse in Chrome", x)
		}
	}
}
