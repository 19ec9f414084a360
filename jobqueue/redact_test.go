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
	spec := Spec{URL: "http://bob:pw-in-url@shop.test/a", Proxy: "http://carol:proxy-pass@10.0.0.1:3128", MaxAttempts: 1}
	ids := mustEnqueue(t, q, spec, Spec{URL: "http://tok3n@shop.test/b", MaxAttempts: 1})
	jobs := assignClaim(t, q, "n1", 2)
	for _, j := range jobs {
		if j.ID == ids[0] && (j.Spec.URL != spec.URL || j.Spec.Proxy != spec.Proxy) {
			t.Fatalf("Claim redacted what the node needs: %+v", j.Spec)
		}
	}
	if _, err := q.Fail(ctx, ids[0], "n1", "loading http://bob:pw-in-url@shop.test/a via proxy-pass: net::ERR_PROXY", "network", false); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Complete(ctx, ids[1], "n1", Result{FinalURL: "http://tok3n@shop.test/b",
		ConsoleErrors: []string{"GET http://tok3n@shop.test/x 404"}}); err != nil {
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
		for _, secret := range []string{"pw-in-url", "proxy-pass", "tok3n", "bob:"} {
			if strings.Contains(string(b), secret) {
				t.Errorf("a read shows %q: %s", secret, b)
			}
		}
	}
	if j.Spec.Proxy != "http://carol:redacted@10.0.0.1:3128" || j.Spec.URL != "http://redacted@shop.test/a" {
		t.Errorf("redacted spec %+v", j.Spec)
	}
}
