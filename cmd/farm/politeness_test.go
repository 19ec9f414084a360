package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/farm"
)

func TestParseHostRule(t *testing.T) {
	tests := []struct {
		in      string
		host    string
		pol     farm.HostPolicy
		wantErr string
	}{
		{"shop.example.com=2/500ms", "shop.example.com", hostPolicy(2, 500*time.Millisecond), ""},
		{"Shop.Example.com=2", "shop.example.com", farm.HostPolicy{MaxConcurrent: 2}, ""},
		{".example.com=4/0", ".example.com", farm.HostPolicy{MaxConcurrent: 4}, ""},
		{"slow.example.com=/2s", "slow.example.com", farm.HostPolicy{MinInterval: 2 * time.Second}, ""},
		{"slow.example.com=off/2s", "slow.example.com", farm.HostPolicy{MinInterval: 2 * time.Second}, ""},
		{"site.test=off", "site.test", farm.HostPolicy{}, ""},
		// 0 is no "none at once" (it would hold the host's jobs for ever),
		// and no longer "no limit" either.
		{"a.com=0", "", farm.HostPolicy{}, `max concurrent "0": want a whole number ≥ 1, or off`},
		{"a.com=0/1s", "", farm.HostPolicy{}, `max concurrent "0"`},
		{"nohost", "", farm.HostPolicy{}, "want HOST=MAX/INTERVAL"},
		{"=2/1s", "", farm.HostPolicy{}, "want HOST=MAX/INTERVAL"},
		{"a.com=two/1s", "", farm.HostPolicy{}, `max concurrent "two"`},
		{"a.com=-1", "", farm.HostPolicy{}, `max concurrent "-1"`},
		{"a.com=2/soon", "", farm.HostPolicy{}, `interval "soon"`},
		{"a.com=2/-1s", "", farm.HostPolicy{}, `interval "-1s"`},
		// The rule's host is normalized as the queue's host keys are.
		{"Shop.Example.com.=2", "shop.example.com", farm.HostPolicy{MaxConcurrent: 2}, ""},
		{"bücher.test=1", "xn--bcher-kva.test", farm.HostPolicy{MaxConcurrent: 1}, ""},
		{"shop.example.com:443=1", "shop.example.com", farm.HostPolicy{MaxConcurrent: 1}, ""},
		{"[2001:DB8::1]:8080=1", "[2001:db8::1]:8080", farm.HostPolicy{MaxConcurrent: 1}, ""},
		{"2001:db8::1=1", "", farm.HostPolicy{}, `host rule "2001:db8::1=1": host "2001:db8::1"`},
		{"a.com:http=1", "", farm.HostPolicy{}, `host rule "a.com:http=1": host "a.com:http": bad port`},
	}
	for _, tt := range tests {
		host, pol, err := parseHostRule(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseHostRule(%q) err = %v, want it to contain %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || host != tt.host || pol != tt.pol {
			t.Errorf("parseHostRule(%q) = %q, %+v, %v; want %q, %+v", tt.in, host, pol, err, tt.host, tt.pol)
		}
	}
}

func TestLoadPoliteness(t *testing.T) {
	base := farm.Politeness{Default: farm.HostPolicy{MaxConcurrent: 4}, Hosts: map[string]farm.HostPolicy{"a.com": {MaxConcurrent: 1}}}
	write := func(s string) string {
		p := filepath.Join(t.TempDir(), "p.json")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := loadPoliteness(write(`{"default":{"max_concurrent":2,"min_interval":"250ms"},"hosts":{"B.com":{"max_concurrent":1,"min_interval":"1s"}}}`), base)
	if err != nil {
		t.Fatal(err)
	}
	if got.Default != (hostPolicy(2, 250*time.Millisecond)) || got.Hosts["b.com"] != (hostPolicy(1, time.Second)) || got.Hosts["a.com"] != (farm.HostPolicy{MaxConcurrent: 1}) {
		t.Errorf("loaded %+v", got)
	}
	if base.Hosts["b.com"] != (farm.HostPolicy{}) {
		t.Error("loadPoliteness modified its base")
	}
	got, err = loadPoliteness(write(`{"hosts":{"Shop.Example.com.:443":{"max_concurrent":1},"bücher.test":{"max_concurrent":2}}}`), base)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hosts["shop.example.com"] != (farm.HostPolicy{MaxConcurrent: 1}) || got.Hosts["xn--bcher-kva.test"] != (farm.HostPolicy{MaxConcurrent: 2}) {
		t.Errorf("host keys not normalized: %+v", got.Hosts)
	}
	// "off" lifts the default cap for a host; a field left out inherits it.
	got, err = loadPoliteness(write(`{"hosts":{"free.com":{"max_concurrent":"off","min_interval":"1s"},"kept.com":{"min_interval":"1s"},"null.com":{"max_concurrent":null,"min_interval":"1s"}}}`), base)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hosts["free.com"] != hostPolicy(0, time.Second) || got.Hosts["kept.com"] != hostPolicy(4, time.Second) || got.Hosts["null.com"] != hostPolicy(4, time.Second) {
		t.Errorf("off / left out / null: %+v", got.Hosts)
	}
	bad := []struct{ file, want string }{
		{`{"hosts":{"b.com:x":{"max_concurrent":1}}}`, `host "b.com:x": bad port`},
		{`{"hosts":{"b.com":{"max_concurrent":1},"B.com:443":{"max_concurrent":2}}}`, `hosts "B.com:443" and "b.com" are one host, b.com`},
		{`{"hosts":{"b.com":{"min_interval":"soon"}}}`, `host "b.com": min_interval "soon"`},
		{`{"default":{"max_concurrent":-2}}`, `default: max_concurrent -2: want a whole number ≥ 1, or off`},
		{`{"hosts":{"b.com":{"max_concurrent":0}}}`, `host "b.com": max_concurrent 0: want a whole number ≥ 1, or off`},
		{`{"hosts":{"b.com":{"max_concurrent":"two"}}}`, `host "b.com": max_concurrent "two": want a whole number ≥ 1`},
		{`{"hosts":{"b.com":{"max":1}}}`, `unknown field "max"`},
		{`{"hosts":`, "unexpected EOF"},
	}
	for _, b := range bad {
		if _, err := loadPoliteness(write(b.file), base); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("file %s: err = %v, want %q", b.file, err, b.want)
		}
	}
	if _, err := loadPoliteness(filepath.Join(t.TempDir(), "missing.json"), base); err == nil {
		t.Error("missing file: no error")
	}
}

func hostPolicy(maxConcurrent int, interval time.Duration) farm.HostPolicy {
	return farm.HostPolicy{MaxConcurrent: maxConcurrent, MinInterval: interval}
}
