package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/browserfarm/browserfarm/farm/web"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// farm submit and POST /api/jobs decode a spec with one decoder
// (jobqueue.DecodeSpec) and validate it with one validator, so the same bad
// spec gets the same message on both, located each in its own terms ("FILE
// line N: bad JSON job spec: …" and "job N: …"). A batch the API cannot even
// parse as an array is its own, batch-level, error and is not compared here.
func TestSubmitAndAPIGiveTheSameErrors(t *testing.T) {
	dbURL, q := migratedDB(t)
	const token = "tok"
	srv := httptest.NewServer(web.NewServer(web.Config{Queue: q, Token: token}))
	defer srv.Close()
	for _, tc := range []struct{ spec, field string }{
		{`{"url":"https://a.example/","colour":"red"}`, "colour"},
		{`{"url":5}`, "url"},
		{`{"url":"https://a.example/","viewport":{"width":"wide","height":500}}`, "viewport.width"},
		{`{"url":"ftp://a.example/"}`, "url"},
		{`{"url":"https://a.example/","actions":[{"type":"dance"}]}`, "actions[0].type"},
		// The proxy forms Chrome cannot use: refused at submit, naming the field.
		{`{"url":"https://a.example/","proxy":"http://proxy.example"}`, "proxy"},
		{`{"url":"https://a.example/","proxy":"socks5://u:p@h:1080"}`, "proxy"},
		{`{"url":"https://a.example/","proxy":"http://h:3128/x"}`, "proxy"},
		// Over a mebibyte on one line, under the API's bound on a body.
		{manyCookies(2000, 600), "cookies"},
	} {
		req, err := http.NewRequestWithContext(context.Background(), "POST", srv.URL+"/api/jobs", strings.NewReader("["+tc.spec+"]"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var apiErr struct {
			Error string `json:"error"`
			Field string `json:"field"`
		}
		err = json.NewDecoder(resp.Body).Decode(&apiErr)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest || apiErr.Field != tc.field || !strings.HasPrefix(apiErr.Error, "job 0: ") {
			t.Errorf("API on %.200s: %d %+v (%v), want 400 naming job 0 and field %q", tc.spec, resp.StatusCode, apiErr, err, tc.field)
			continue
		}
		msg := strings.TrimPrefix(apiErr.Error, "job 0: ")

		file := filepath.Join(t.TempDir(), "jobs.txt")
		if err := os.WriteFile(file, []byte(tc.spec+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := farmRun(t, "", map[string]string{"FARM_DATABASE_URL": dbURL}, "submit", "--file", file)
		// Whether the line fails to decode or to validate, it is the
		// input's fault: bad usage.
		if code != exitUsage || !strings.Contains(errOut, "jobs.txt line 1: ") || !strings.Contains(errOut, msg) {
			t.Errorf("submit on %.200s: exit %d, %q; want %d, line 1 and the API's message %q", tc.spec, code, errOut, exitUsage, msg)
		}
	}
	st, err := q.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, state := range jobqueue.States() {
		if st.Jobs[state] != 0 {
			t.Errorf("%d %s jobs after refused submissions, want none", st.Jobs[state], state)
		}
	}
}
