package browser

import (
	"strings"
	"testing"
	"time"
)

// A wait selector waits for presence in the DOM unless Visible is set, and
// a wait that times out says which condition was unmet and what the page had.
func TestWaitPresentOrVisible(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	for _, tc := range []struct {
		name  string
		wait  Wait
		found string // "" means the render succeeds
	}{
		{"empty div is present", Wait{Selector: "#empty"}, ""},
		{"hidden element is present", Wait{Selector: "#hidden"}, ""},
		{"shown element is visible", Wait{Selector: "#shown", Visible: true}, ""},
		{"empty div is never visible", Wait{Selector: "#empty", Visible: true},
			`waiting for "#empty" to be visible: ` + "\x00" + `found: it is present but has zero size`},
		{"hidden element is never visible", Wait{Selector: "#hidden", Visible: true},
			`waiting for "#hidden" to be visible: ` + "\x00" + `found: it is present but hidden`},
		{"missing element", Wait{Selector: "#missing"},
			`waiting for "#missing" to be present in the DOM: ` + "\x00" + `found: no element matches it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Long enough for a loaded machine to reach the page; the
			// waits that cannot succeed run out of it.
			timeout := 30 * time.Second
			if tc.found != "" {
				timeout = 6 * time.Second
			}
			res, err, _ := render(t, s, Request{URL: e.url("/wait-targets"), Wait: tc.wait, Timeout: timeout,
				Extract: "document.title"})
			if tc.found == "" {
				if err != nil || string(res.Data) != `"Wait targets"` {
					t.Fatalf("render = %v, %v", res, err)
				}
				return
			}
			wantClass(t, err, ClassTimeout, true)
			// The message starts with the unmet condition and ends with
			// what was found; the timeout's own words are in between.
			head, tail, _ := strings.Cut(tc.found, "\x00")
			if msg := err.Error(); !strings.Contains(msg, head) || !strings.Contains(msg, tail) {
				t.Fatalf("error %q, want it to contain %q and %q", msg, head, tail)
			}
		})
	}
	e.usable(t, s)
}
