package main

import (
	"strings"
	"testing"
)

// TestSubmitRefusesBadTimeout: --timeout outside the queue's range, a
// negative one included, is a usage error naming the flag, before anything
// connects.
func TestSubmitRefusesBadTimeout(t *testing.T) {
	for _, v := range []string{"-1s", "500ms", "1h"} {
		code, _, errOut := farmRun(t, "", map[string]string{"FARM_DATABASE_URL": "postgres://127.0.0.1:1/none"}, "submit", "--timeout", v, "https://example.com/x")
		if code != exitUsage || !strings.Contains(errOut, "--timeout "+v) {
			t.Errorf("--timeout %s: code %d stderr %q; want a usage error naming --timeout", v, code, errOut)
		}
	}
}
