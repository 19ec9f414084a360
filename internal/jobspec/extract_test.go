package jobspec

import (
	"errors"
	"testing"

	"github.com/browserfarm/browserfarm/internal/jobspec/jobspectest"
)

func TestCheckExtract(t *testing.T) {
	good, bad := jobspectest.ExtractCases()
	for _, e := range good {
		if err := CheckExtract(e); err != nil {
			t.Errorf("CheckExtract(%q) = %v, want nil", e, err)
		}
	}
	for _, e := range bad {
		if err := CheckExtract(e); err == nil {
			t.Errorf("CheckExtract(%q) = nil, want an error", e)
		} else {
			t.Logf("%q: %v", e, err)
		}
	}
}

// The verdict cache parses an expression once while it is kept, keeps at
// most its byte budget of expressions (starting over past it), and never
// keeps one larger than the budget.
func TestVerdictCache(t *testing.T) {
	parsed := map[string]int{}
	c := verdictCache{max: 10, parse: func(expr string) error {
		parsed[expr]++
		if expr == "bad" {
			return errors.New("bad")
		}
		return nil
	}}
	for _, tc := range []struct {
		expr    string
		bad     bool
		parses  int // of expr, after the check
		comment string
	}{
		{"a", false, 1, "first sight: parsed"},
		{"a", false, 1, "kept"},
		{"bad", true, 1, "a refusal is kept too"},
		{"bad", true, 1, "and answered again"},
		{"12345678", false, 1, "past the budget: the cache starts over"},
		{"a", false, 2, "so a is parsed again"},
		{"12345678901", false, 1, "larger than the budget: not kept"},
		{"12345678901", false, 2, "parsed each time"},
	} {
		err := c.check(tc.expr)
		if (err != nil) != tc.bad || parsed[tc.expr] != tc.parses {
			t.Errorf("%s: check(%q) = %v, parsed %d times; want bad %v, %d", tc.comment, tc.expr, err, parsed[tc.expr], tc.bad, tc.parses)
		}
	}
}
