package farm

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
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

func hp(maxConcurrent int, interval time.Duration) HostPolicy {
	return HostPolicy{MaxConcurrent: maxConcurrent, MinInterval: interval}
}

// A rule matches the host keys of every spelling of its host: the queue's
// key of a trailing-dot or default-port URL, and an IPv6 address with a port.
func TestPolitenessForMatchesHostKeys(t *testing.T) {
	p := Politeness{Default: HostPolicy{MaxConcurrent: 4}, Hosts: map[string]HostPolicy{
		"shop.example.com": {MaxConcurrent: 1, MinInterval: time.Second}, ".example.org": {MaxConcurrent: 1},
		"[2001:db8::1]": {MaxConcurrent: 1}, "xn--bcher-kva.test": {MaxConcurrent: 1}}}
	for _, raw := range []string{"http://shop.example.com/", "http://shop.example.com./", "https://SHOP.example.com:443/",
		"https://www.example.org./", "http://[2001:db8::1]:8080/", "http://[2001:DB8::1]/", "http://bücher.test:81/",
		"http://shop.example.com:080/", "http://shop.example.com\u3002/", "http://[2001:db8:0::1]/"} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		key := jobqueue.HostKey(u)
		if got := p.For(key); got.MaxConcurrent != 1 {
			t.Errorf("%s (host key %q): policy %+v, want max_concurrent 1", raw, key, got)
		}
	}
	// Keys stored before host keys were normalized still find their rule.
	for _, old := range []string{"shop.example.com.", "bücher.test", "www.example.org.:8080"} {
		if got := p.For(old); got.MaxConcurrent != 1 {
			t.Errorf("For(%q) = %+v, want max_concurrent 1", old, got)
		}
	}
	if got := p.For("[2001:db8::2]:8080"); got.MaxConcurrent != 4 {
		t.Errorf("another IPv6 address took the rule: %+v", got)
	}
}

func TestHostRuleKey(t *testing.T) {
	tests := []struct{ in, want, wantErr string }{
		{"shop.example.com", "shop.example.com", ""},
		{"Shop.Example.COM.", "shop.example.com", ""},
		{".Example.org.", ".example.org", ""},
		{"bücher.test", "xn--bcher-kva.test", ""},
		{".bücher.test", ".xn--bcher-kva.test", ""},
		{"api.example.com:8443", "api.example.com:8443", ""},
		{"shop.example.com:443", "shop.example.com", ""},
		{"shop.example.com.:80", "shop.example.com", ""},
		{"[2001:DB8::1]", "[2001:db8::1]", ""},
		{"[2001:db8::1]:8080", "[2001:db8::1]:8080", ""},
		{"[2001:db8::1]:443", "[2001:db8::1]", ""},
		{"127.0.0.1:9000", "127.0.0.1:9000", ""},
		{"shop.example.com:080", "shop.example.com", ""},
		{"shop.example.com:08443", "shop.example.com:8443", ""},
		{"[2001:db8:0::1]", "[2001:db8::1]", ""},
		{"2130706433:8080", "127.0.0.1:8080", ""},
		{"example.123", "", "not an IPv4 address"},
		{"", "", "empty host"},
		{".", "", "empty host"},
		{"..example.com", "", "empty label"},
		{"2001:db8::1", "", "in brackets"},
		{"[2001:db8::1", "", "in brackets"},
		{".[2001:db8::1]", "", "domain suffix"},
		{"shop.example.com:", "", "bad port"},
		{"shop.example.com:0", "", "bad port"},
		{"shop.example.com:99999", "", "bad port"},
		{"shop.example.com:http", "", "bad port"},
		{"shop.example.com/path", "", "not a host"},
		{"http://shop.example.com", "", "not a host"},
	}
	for _, tt := range tests {
		got, err := HostRuleKey(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("HostRuleKey(%q) = %q, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("HostRuleKey(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
