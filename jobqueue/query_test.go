package jobqueue

import "testing"

// TestValidateBatchID: the canonical form only, either case — the one
// rule the commands and the API check batch ids with.
func TestValidateBatchID(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"0b7e3a52-6a8d-4f8e-9c1f-2d4e5f6a7b8c", true},
		{"0B7E3A52-6A8D-4F8E-9C1F-2D4E5F6A7B8C", true},
		{"0b7e3a526a8d4f8e9c1f2d4e5f6a7b8c", false},
		{"0b7e3a526a8d4f8e9c1f2d4e5f6a7b8c----", false}, // 36 characters, dashes elsewhere
		{"0b7e3a52-6a8d-4f8e-9c1f2-d4e5f6a7b8c", false},
		{"0b7e3a52-6a8d-4f8e-9c1f-2d4e5f6a7b8g", false},
		{"{0b7e3a52-6a8d-4f8e-9c1f-2d4e5f6a7b8}", false},
		{"", false},
	} {
		if err := ValidateBatchID(tc.in); (err == nil) != tc.ok {
			t.Errorf("ValidateBatchID(%q) = %v, want ok %v", tc.in, err, tc.ok)
		}
	}
}
