package farm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPolitenessFor(t *testing.T) {
	p := Politeness{
		Default: HostPolicy{MaxConcurrent: 4, MinInterval: 100 * time.Millisecond},
		Hosts: map[string]HostPolicy{
			"shop.example.com":     {MaxConcurrent: 2, MinInterval: time.Second},
			".example.com":         {MaxConcurrent: 3},
			"api.example.com:8443": {MaxConcurrent: 1},
			".static.example.com":  {MaxConcurrent: 10},
			"localhost":            {MaxConcurrent: 6},
		},
	}
	tests := []struct {
		host string
		want HostPolicy
	}{
		{"shop.example.com", hp(2, time.Second)},
		{"SHOP.example.com", hp(2, time.Second)},
		{"shop.example.com:8080", hp(2, time.Second)},
		{"www.example.com", HostPolicy{MaxConcurrent: 3}},
		{"example.com", HostPolicy{MaxConcurrent: 3}},
		{"img.static.example.com", HostPolicy{MaxConcurrent: 10}},
		{"api.example.com:8443", HostPolicy{MaxConcurrent: 1}},
		{"api.example.com", HostPolicy{MaxConcurrent: 3}},
		{"notexample.com", hp(4, 100*time.Millisecond)},
		{"localhost:9000", HostPolicy{MaxConcurrent: 6}},
		{"other.org", hp(4, 100*time.Millisecond)},
	}
	for _, tt := range tests {
		if got := p.For(tt.host); got != tt.want {
			t.Errorf("For(%q) = %+v, want %+v", tt.host, got, tt.want)
		}
	}
}

func TestParseHostRule(t *testing.T) {
	tests := []struct {
		in      string
		host    string
		pol     HostPolicy
		wantErr string
	}{
		{"shop.example.com=2/500ms", "shop.example.com", hp(2, 500*time.Millisecond), ""},
		{"Shop.Example.com=2", "shop.example.com", HostPolicy{MaxConcurrent: 2}, ""},
		{".example.com=4/0", ".example.com", HostPolicy{MaxConcurrent: 4}, ""},
		{"slow.example.com=/2s", "slow.example.com", HostPolicy{MinInterval: 2 * time.Second}, ""},
		{"nohost", "", HostPolicy{}, "want HOST=MAX/INTERVAL"},
		{"=2/1s", "", HostPolicy{}, "want HOST=MAX/INTERVAL"},
		{"a.com=two/1s", "", HostPolicy{}, `max concurrent "two"`},
		{"a.com=-1", "", HostPolicy{}, `max concurrent "-1"`},
		{"a.com=2/soon", "", HostPolicy{}, `interval "soon"`},
		{"a.com=2/-1s", "", HostPolicy{}, `interval "-1s"`},
	}
	for _, tt := range tests {
		host, pol, err := ParseHostRule(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseHostRule(%q) err = %v, want it to contain %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || host != tt.host || pol != tt.pol {
			t.Errorf("ParseHostRule(%q) = %q, %+v, %v; want %q, %+v", tt.in, host, pol, err, tt.host, tt.pol)
		}
	}
}

func TestLoadPoliteness(t *testing.T) {
	base := Politeness{Default: HostPolicy{MaxConcurrent: 4}, Hosts: map[string]HostPolicy{"a.com": {MaxConcurrent: 1}}}
	write := func(s string) string {
		p := filepath.Join(t.TempDir(), "p.json")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := LoadPoliteness(write(`{"default":{"max_concurrent":2,"min_interval":"250ms"},"hosts":{"B.com":{"max_concurrent":1,"min_interval":"1s"}}}`), base)
	if err != nil {
		t.Fatal(err)
	}
	if got.Default != (hp(2, 250*time.Millisecond)) || got.Hosts["b.com"] != (hp(1, time.Second)) || got.Hosts["a.com"] != (HostPolicy{MaxConcurrent: 1}) {
		t.Errorf("loaded %+v", got)
	}
	if base.Hosts["b.com"] != (HostPolicy{}) {
		t.Error("LoadPoliteness modified its base")
	}
	bad := []struct{ file, want string }{
		{`{"hosts":{"b.com":{"min_interval":"soon"}}}`, `host "b.com": min_interval "soon"`},
		{`{"default":{"max_concurrent":-2}}`, "max_concurrent -2 is negative"},
		{`{"hosts":{"b.com":{"max":1}}}`, `unknown field "max"`},
		{`{"hosts":`, "unexpected EOF"},
	}
	for _, b := range bad {
		if _, err := LoadPoliteness(write(b.file), base); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("file %s: err = %v, want %q", b.file, err, b.want)
		}
	}
	if _, err := LoadPoliteness(filepath.Join(t.TempDir(), "missing.json"), base); err == nil {
		t.Error("missing file: no error")
	}
}

func hp(maxConcurrent int, interval time.Duration) HostPolicy {
	return HostPolicy{MaxConcurrent: maxConcurrent, MinInterval: interval}
}
