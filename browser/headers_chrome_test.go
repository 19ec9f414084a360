package browser

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/jobspec"
)

// TestRefusedHeadersFailInChrome keeps jobspec's refused header names
// honest: Chrome fails a page's request that carries any of them with
// net::ERR_INVALID_ARGUMENT (sent past Check, which refuses them), and
// sends the names jobspec leaves alone that look as if it might not.
func TestRefusedHeadersFailInChrome(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	try := func(name, value string) error {
		j, err := Request{URL: e.url("/echo"), Timeout: 10 * time.Second}.prepare()
		if err != nil {
			t.Fatal(err)
		}
		j.Headers = map[string]string{name: value}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = s.render(ctx, time.Now(), j)
		return err
	}
	refused := append(jobspec.RefusedHeaders(), "Proxy-Authorization", "Proxy-Connection", "proxy-x")
	for _, name := range refused {
		if jobspec.CheckHeaderName(name) == nil {
			t.Errorf("jobspec accepts %s", name)
		}
		value := "x"
		if name == "Content-Length" {
			value = "0"
		}
		if err := try(name, value); err == nil || !strings.Contains(err.Error(), "ERR_INVALID_ARGUMENT") {
			t.Errorf("header %s: render = %v, want net::ERR_INVALID_ARGUMENT (else it needs no refusing)", name, err)
		}
	}
	for _, name := range []string{"Proxy", "Sec-Fetch-Mode", "Sec-Foo", "Expect", "Date", "Via", "DNT", "Origin", "Referer",
		"Access-Control-Request-Method", "Access-Control-Request-Headers", "Cookie"} {
		if err := jobspec.CheckHeaderName(name); err != nil {
			t.Errorf("jobspec refuses %s: %v", name, err)
		}
		value := "x"
		if name == "Expect" {
			value = "100-continue" // the test site answers another with 417
		}
		if err := try(name, value); err != nil {
			t.Errorf("header %s: render = %v, want it rendered", name, err)
		}
	}
}
