package farm

import (
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

func hp(maxConcurrent int, interval time.Duration) HostPolicy {
	return HostPolicy{MaxConcurrent: maxConcurrent, MinInterval: interval}
}
