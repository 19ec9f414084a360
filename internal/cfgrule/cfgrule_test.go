package cfgrule

import (
	"strings"
	"testing"
	"time"
)

func TestResolve(t *testing.T) {
	tests := []struct {
		name    string
		v, def  int
		canOff  bool
		want    int
		wantErr string
	}{
		{"zero takes the default", 0, 20, true, 20, ""},
		{"zero takes an Off default", 0, Off, true, Off, ""},
		{"a value stays", 7, 20, true, 7, ""},
		{"Off stays where it can be off", Off, 20, true, Off, ""},
		{"Off is refused where it cannot be off", Off, 20, false, Off, "it cannot be off"},
		{"other negatives are refused", -5, 20, true, -5, "must not be negative, got -5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.v
			err := Resolve("Field", &v, tt.def, tt.canOff)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("error %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "Field")) {
				t.Fatalf("error %v, want one naming Field and saying %q", err, tt.wantErr)
			}
			if v != tt.want {
				t.Errorf("value %d, want %d", v, tt.want)
			}
		})
	}
	d := time.Duration(0)
	if err := Resolve("Interval", &d, 5*time.Second, true); err != nil || d != 5*time.Second {
		t.Errorf("a zero duration became %v, %v; want the 5s default", d, err)
	}
}
