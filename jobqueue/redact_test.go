package jobqueue

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"loading http://bob:hunter2@shop.test/a: net::ERR", "loading http://redacted@shop.test/a: net::ERR"},
		{"proxy https://tok@p.test:8080 refused", "proxy https://redacted@p.test:8080 refused"},
		{"no url here: a@b", "no url here: a@b"},
		{"http://shop.test/a?x=b@c", "http://shop.test/a?x=b@c"},
	} {
		if got := RedactText(tc.in); got != tc.want {
			t.Errorf("RedactText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := RedactText("auth failed with hunter2 for bob", "hunter2"); got != "auth failed with redacted for bob" {
		t.Errorf("secret not replaced: %q", got)
	}
	for _, tc := range []struct {
		in       string
		keepUser bool
		want     string
	}{
		{"http://bob:hunter2@shop.test/a", false, "http://redacted@shop.test/a"},
		{"http://token@shop.test/a", false, "http://redacted@shop.test/a"},
		{"http://shop.test/a", false, "http://shop.test/a"},
		{"http://bob:hunter2@proxy.test:3128", true, "http://bob:redacted@proxy.test:3128"},
		{"socks5://proxy.test:1080", true, "socks5://proxy.test:1080"},
		// A proxy's key as its user name, with no password or an empty one.
		{"http://KEY123@proxy.test:8011", true, "http://redacted@proxy.test:8011"},
		{"http://KEY123:@proxy.test:8011", true, "http://redacted@proxy.test:8011"},
	} {
		if got := redactURL(tc.in, tc.keepUser); got != tc.want {
			t.Errorf("redactURL(%q, %v) = %q, want %q", tc.in, tc.keepUser, got, tc.want)
		}
	}
}

// TestReadsRedactSecrets: every read but Claim shows a job's URL userinfo
// and proxy password redacted, error texts and results included; Claim
// hands the node what it needs.
func TestReadsRedactSecrets(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue(t, Config{})
	ctx := context.Background()
	mustRegister(t, q, "n1", 6)
	spec := Spec{URL: "http://bob:pw-in-url@shop.test/a", Proxy: "http://carol:proxy-pass@10.0.0.1:3128", MaxAttempts: 1,
		Headers: map[string]string{"Authorization": "Bearer hdr-secret", "X-Api-Key": "api-key-secret", "Accept-Language": "de"},
		Cookies: []Cookie{{Name: "sid", Value: "cookie-secret"}}}
	ids := mustEnqueue(t, q, spec, Spec{URL: "http://tok3n@shop.test/b", MaxAttempts: 1})
	jobs := assignClaim(t, q, "n1", 2)
	for _, j := range jobs {
		if j.ID == ids[0] && (j.Spec.URL != spec.URL || j.Spec.Proxy != spec.Proxy) {
			t.Fatalf("Claim redacted what the node needs: %+v", j.Spec)
		}
	}
	if _, err := q.Fail(ctx, ids[0], "n1", "loading http://bob:pw-in-url@shop.test/a via proxy-pass with hdr-secret: net::ERR_PROXY", "network", false); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Complete(ctx, ids[1], "n1", Result{FinalURL: "http://tok3n@shop.test/b",
		ConsoleErrors: []string{"GET http://tok3n@shop.test/x 404"}, Links: []string{"http://tok3n@shop.test/next"}}); err != nil {
		t.Fatal(err)
	}
	var shown []any
	j, err := q.Get(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	shown = append(shown, j)
	page, err := q.List(ctx, ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	shown = append(shown, page)
	r, err := q.GetResult(ctx, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	shown = append(shown, r)
	if err := q.ExportResults(ctx, ExportFilter{}, func(row ExportRow) error {
		shown = append(shown, row)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	groups, err := q.FailureGroups(ctx, time.Now().Add(-time.Hour), 5)
	if err != nil {
		t.Fatal(err)
	}
	shown = append(shown, groups)
	for _, v := range shown {
		b, _ := json.Marshal(v)
		for _, secret := range []string{"pw-in-url", "proxy-pass", "tok3n", "bob:", "hdr-secret", "api-key-secret", "cookie-secret"} {
			if strings.Contains(string(b), secret) {
				t.Errorf("a read shows %q: %s", secret, b)
			}
		}
	}
	if j.Spec.Proxy != "http://carol:redacted@10.0.0.1:3128" || j.Spec.URL != "http://redacted@shop.test/a" ||
		j.Spec.Headers["Accept-Language"] != "de" || j.Spec.Headers["Authorization"] != Redacted || j.Spec.Cookies[0].Value != Redacted {
		t.Errorf("redacted spec %+v", j.Spec)
	}
	for _, j := range assignClaim(t, q, "n1", 1) {
		t.Errorf("claimed %d, nothing left", j.ID)
	}
	if jobs[0].Spec.Headers["Authorization"] != "Bearer hdr-secret" && jobs[1].Spec.Headers["Authorization"] != "Bearer hdr-secret" {
		t.Errorf("Claim redacted a header the node needs: %+v / %+v", jobs[0].Spec.Headers, jobs[1].Spec.Headers)
	}
}
