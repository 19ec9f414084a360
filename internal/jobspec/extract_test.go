package jobspec

import (
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
