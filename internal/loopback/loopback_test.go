package loopback

import "testing"

func TestHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST:8080": true, "localhost.": true, "app.localhost": true, "a.b.localhost:80": true,
		"127.0.0.1": true, "127.0.0.1:8080": true, "127.1.2.3": true, "[::1]:8080": true, "::1": true, "[::ffff:127.0.0.1]:80": true,
		"localhost.evil.com": false, "evil.com": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1": false,
		"127.1": false, "2130706433": false, "": false, "notlocalhost": false,
	} {
		if got := Host(host); got != want {
			t.Errorf("Host(%q) = %v, want %v", host, got, want)
		}
	}
}
