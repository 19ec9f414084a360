package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/farm/blobstore"
	"github.com/browserfarm/browserfarm/jobqueue"
)

func TestReadSpecs(t *testing.T) {
	flags := &specFlags{priority: 5, extract: "document.title", headers: multiFlag{"X-Test: 1"}}
	in := strings.Join([]string{
		"# a comment",
		"https://example.com/a",
		"",
		`{"url":"https://example.com/b","priority":9,"extract":"1+1"}`,
		"  https://example.com/c  ",
	}, "\n")
	specs, where, err := readSpecs(strings.NewReader(in), "jobs.txt", flags)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 3 {
		t.Fatalf("got %d specs", len(specs))
	}
	if specs[0].URL != "https://example.com/a" || specs[0].Priority != 5 || specs[0].Extract != "document.title" || specs[0].Headers["X-Test"] != "1" {
		t.Errorf("spec 0 = %+v", specs[0])
	}
	if specs[1].Priority != 9 || specs[1].Extract != "1+1" {
		t.Errorf("JSON spec fields were overridden by flags: %+v", specs[1])
	}
	if specs[2].URL != "https://example.com/c" {
		t.Errorf("spec 2 URL %q", specs[2].URL)
	}
	if where[0].line != 2 || where[1].line != 4 || where[2].line != 5 {
		t.Errorf("line numbers %+v", where)
	}

	bad := []struct{ in, want string }{
		{"https://a.com\n{\"url\": \"https://b.com\",}\n", "jobs.txt line 2: bad JSON job spec"},
		{"{\"url\":\"https://a.com\",\"colour\":\"red\"}", `jobs.txt line 1: bad JSON job spec: field "colour": unknown field`},
		{"{\"url\":\"https://a.com\"} {\"url\":\"https://b.com\"}", "line 1: bad JSON job spec: more than one value"},
	}
	for _, b := range bad {
		if _, _, err := readSpecs(strings.NewReader(b.in), "jobs.txt", &specFlags{}); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("readSpecs(%q) err = %v, want %q", b.in, err, b.want)
		}
	}
	if _, _, err := readSpecs(strings.NewReader("https://a.com"), "x", &specFlags{headers: multiFlag{"nocolon"}}); err == nil || !strings.Contains(err.Error(), "--header") {
		t.Errorf("bad --header accepted: %v", err)
	}
	specs, _, err = readSpecs(strings.NewReader("https://a.com\n"+`{"url":"https://b.com","wait":{"selector":"#b"}}`), "x", &specFlags{waitFor: "#a", waitVisible: true})
	if err != nil || *specs[0].Wait != (jobqueue.Wait{Selector: "#a", Visible: true}) || *specs[1].Wait != (jobqueue.Wait{Selector: "#b"}) {
		t.Errorf("--wait-for #a --wait-visible: specs %+v, %v; want a visible #a for the plain URL, the JSON spec's own wait", specs, err)
	}
	if _, _, err := readSpecs(strings.NewReader("https://a.com"), "x", &specFlags{waitVisible: true}); err == nil || !strings.Contains(err.Error(), "--wait-visible needs --wait-for") {
		t.Errorf("--wait-visible alone accepted: %v", err)
	}
	specs, _, err = readSpecs(strings.NewReader("https://a.com\n"+`{"url":"https://b.com","cache":"job"}`), "x", &specFlags{cache: "batch"})
	if err != nil || specs[0].Cache != jobqueue.CacheBatch || specs[1].Cache != jobqueue.CacheJob {
		t.Errorf("--cache batch: specs %+v, %v; want batch for the plain URL, the JSON spec's own job", specs, err)
	}
}

// A field a JSON line names keeps the line's value, the empty one too:
// the flags fill only what the line leaves out.
func TestReadSpecsLineNamesAnEmptyValue(t *testing.T) {
	flags := &specFlags{priority: 5, html: true, screenshot: true, networkIdle: true, maxAttempts: 4, extract: "document.title",
		block: "image", userAgent: "flag-agent", timeout: 20 * time.Second}
	tests := []struct {
		line  string
		check func(s jobqueue.Spec) bool
	}{
		{`{"url":"https://a.com/","priority":0}`, func(s jobqueue.Spec) bool { return s.Priority == 0 }},
		{`{"url":"https://a.com/","html":false}`, func(s jobqueue.Spec) bool { return !s.HTML && s.Screenshot }},
		{`{"url":"https://a.com/","screenshot":false}`, func(s jobqueue.Spec) bool { return !s.Screenshot && s.HTML }},
		{`{"url":"https://a.com/","extract":""}`, func(s jobqueue.Spec) bool { return s.Extract == "" }},
		{`{"url":"https://a.com/","block":[]}`, func(s jobqueue.Spec) bool { return len(s.Block) == 0 }},
		{`{"url":"https://a.com/","user_agent":""}`, func(s jobqueue.Spec) bool { return s.UserAgent == "" }},
		{`{"url":"https://a.com/","wait":{"network_idle":false}}`, func(s jobqueue.Spec) bool { return s.Wait == nil || !s.Wait.NetworkIdle }},
		{`{"url":"https://a.com/","wait":{"selector":"#x"}}`, func(s jobqueue.Spec) bool { return s.Wait.Selector == "#x" && s.Wait.NetworkIdle }},
		// Left out: the flags' values.
		{`{"url":"https://a.com/"}`, func(s jobqueue.Spec) bool {
			return s.Priority == 5 && s.HTML && s.Screenshot && s.Wait.NetworkIdle && s.MaxAttempts == 4 &&
				s.Extract == "document.title" && slices.Equal(s.Block, []string{"image"}) && s.UserAgent == "flag-agent" && s.TimeoutMS == 20000
		}},
	}
	// A field named in another case is no field: refused by the decoder,
	// not filled by a flag.
	for _, line := range []string{
		`{"url":"https://a.com/","HTML":false}`,
		`{"url":"https://a.com/","Priority":0}`,
		`{"url":"https://a.com/","WAIT":{"Network_Idle":false}}`,
		`{"url":"https://a.com/","bloc\u212a":[]}`, // the Kelvin sign
	} {
		if specs, _, err := readSpecs(strings.NewReader(line), "x", flags); err == nil || !strings.Contains(err.Error(), "case-sensitive") {
			t.Errorf("%s: specs %+v, err %v; want the key refused as in another case", line, specs, err)
		}
	}
	for _, tc := range tests {
		specs, _, err := readSpecs(strings.NewReader(tc.line), "x", flags)
		if err != nil {
			t.Errorf("%s: %v", tc.line, err)
			continue
		}
		if !tc.check(specs[0]) {
			t.Errorf("%s with flags: spec %+v (wait %+v)", tc.line, specs[0], specs[0].Wait)
		}
	}
}

// A file with one bad line fails with the line number and field, and
// enqueues nothing.
func TestSubmitBadLineEnqueuesNothing(t *testing.T) {
	url, q := migratedDB(t)
	file := filepath.Join(t.TempDir(), "jobs.txt")
	lines := "https://example.com/1\nhttps://example.com/2\n\n# fine so far\nfile:///etc/passwd\nhttps://example.com/3\n"
	if err := os.WriteFile(file, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := farmRun(t, "", map[string]string{"FARM_DATABASE_URL": url}, "submit", "--file", file)
	if code != exitUsage {
		t.Fatalf("exit code %d, want %d (bad usage); stderr %q", code, exitUsage, errOut)
	}
	if !strings.Contains(errOut, "jobs.txt line 5") || !strings.Contains(errOut, `field "url"`) || !strings.Contains(errOut, "file") {
		t.Fatalf("stderr %q does not name line 5 and field url", errOut)
	}
	stats, err := q.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for st, n := range stats.Jobs {
		if n != 0 {
			t.Fatalf("%d %s jobs exist after a rejected submit", n, st)
		}
	}
	// Out-of-range field from a flag, named as an argument.
	code, _, errOut = farmRun(t, "", map[string]string{"FARM_DATABASE_URL": url}, "submit", "--max-attempts", "99", "https://example.com/x")
	if code != exitUsage || !strings.Contains(errOut, "argument 1") || !strings.Contains(errOut, "max_attempts") {
		t.Fatalf("bad max-attempts: code %d stderr %q", code, errOut)
	}
	code, _, errOut = farmRun(t, "", map[string]string{"FARM_DATABASE_URL": url}, "submit", "--follow", "a",
		"--follow-max-links", strconv.Itoa(jobqueue.MaxFollowLinks+1), "https://example.com/x")
	if code != exitUsage || !strings.Contains(errOut, "follow.max_links") {
		t.Fatalf("bad --follow-max-links: code %d stderr %q", code, errOut)
	}
}

// --follow-max-links reaches the spec; without it the spec gets the one default.
func TestSubmitFollowMaxLinks(t *testing.T) {
	url, q := migratedDB(t)
	env := map[string]string{"FARM_DATABASE_URL": url}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--follow", "a.item", "--follow-max-links", "2100"}, 2100},
		{[]string{"--follow", "a.item"}, jobqueue.DefaultMaxLinks},
	} {
		code, out, errOut := farmRun(t, "", env, append(append([]string{"submit", "--quiet"}, tc.args...), "https://example.com/list")...)
		if code != exitOK {
			t.Fatalf("submit %v: %d %s", tc.args, code, errOut)
		}
		page, err := q.List(context.Background(), jobqueue.ListFilter{BatchID: strings.TrimSpace(out)})
		if err != nil || len(page.Jobs) != 1 || page.Jobs[0].Spec.Follow == nil || page.Jobs[0].Spec.Follow.MaxLinks != tc.want {
			t.Fatalf("submit %v: %+v, %v; want max_links %d", tc.args, page.Jobs, err, tc.want)
		}
	}
}

func TestSubmitStatusResultsCancelRetry(t *testing.T) {
	ctx := context.Background()
	url, q := migratedDB(t)
	env := map[string]string{"FARM_DATABASE_URL": url}
	code, out, errOut := farmRun(t, "https://example.com/a\nhttps://example.com/b\nhttps://example.com/c\n", env,
		"submit", "--quiet", "--priority", "3", "-")
	if code != exitOK {
		t.Fatalf("submit: %d %s", code, errOut)
	}
	batch := strings.TrimSpace(out)
	page, err := q.List(ctx, jobqueue.ListFilter{BatchID: batch})
	if err != nil || len(page.Jobs) != 3 || page.Jobs[0].Priority != 3 {
		t.Fatalf("batch %s: %+v, %v", batch, page.Jobs, err)
	}
	// Work the batch by hand: one completes, one fails, one is canceled.
	if _, _, err := q.Register(ctx, jobqueue.NodeInfo{ID: "n1", Capacity: 6}); err != nil {
		t.Fatal(err)
	}
	ids := []int64{page.Jobs[2].ID, page.Jobs[1].ID, page.Jobs[0].ID} // List is newest first
	if code, out, _ := farmRun(t, "", env, "cancel", strconv.FormatInt(ids[2], 10)); code != exitOK || !strings.Contains(out, "1 jobs canceled") {
		t.Fatalf("cancel: %d %q", code, out)
	}
	if _, err := q.Assign(ctx, "n1", 6); err != nil {
		t.Fatal(err)
	}
	jobs, err := q.Claim(ctx, "n1", 6)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	if err := completeJob(ctx, q, ids[0], "n1", jobqueue.Result{FinalURL: "https://example.com/a", Status: 200, Title: "A, \"quoted\"", Data: json.RawMessage(`{"k":[1,2]}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Incarnation(jobqueue.Node{ID: "n1"}).Fail(ctx, ids[1], "selector never appeared", "timeout", false); err != nil {
		t.Fatal(err)
	}

	code, out, errOut = farmRun(t, "", env, "status")
	if code != exitOK || !strings.Contains(out, "n1") || !strings.Contains(out, "PENDING") {
		t.Fatalf("status: %d %q %q", code, out, errOut)
	}

	code, out, _ = farmRun(t, "", env, "results", "--batch", batch)
	if code != exitOK {
		t.Fatalf("results: %d", code)
	}
	var lines []exportedJob
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var e exportedJob
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("results line %q: %v", l, err)
		}
		lines = append(lines, e)
	}
	if len(lines) != 2 || lines[0].State != jobqueue.StateCompleted || lines[0].Result == nil || lines[1].Error != "selector never appeared" {
		t.Fatalf("jsonl export: %+v", lines)
	}
	if lines[0].StartedAt == nil || lines[0].FinishedAt == nil || lines[0].StartedAt.After(*lines[0].FinishedAt) {
		t.Fatalf("jsonl export lacks start and finish times: %+v", lines[0])
	}

	code, out, _ = farmRun(t, "", env, "results", "--format", "csv", "--state", "completed", "--since", "1h")
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if code != exitOK || err != nil || len(recs) != 2 || recs[1][6] != `A, "quoted"` || recs[1][7] != `{"k": [1, 2]}` {
		t.Fatalf("csv export: code %d err %v records %q", code, err, recs)
	}
	// Chosen columns, fields of the extracted data among them.
	code, out, errOut = farmRun(t, "", env, "results", "--format", "csv", "--state", "completed",
		"--columns", "url,data.k,data.k.1,data.missing,title,started_at,finished_at")
	recs, err = csv.NewReader(strings.NewReader(out)).ReadAll()
	if code != exitOK || err != nil || len(recs) != 2 {
		t.Fatalf("csv --columns: code %d err %v stderr %q records %q", code, err, errOut, recs)
	}
	if got := recs[0]; strings.Join(got, ",") != "url,data.k,data.k.1,data.missing,title,started_at,finished_at" {
		t.Fatalf("csv --columns header %q", got)
	}
	if r := recs[1]; r[0] != "https://example.com/a" || r[1] != "[1,2]" || r[2] != "2" || r[3] != "" || r[4] != `A, "quoted"` ||
		r[5] == "" || r[6] == "" || r[5] > r[6] {
		t.Fatalf("csv --columns row %q", r)
	}
	for _, bad := range [][]string{{"--format", "csv", "--columns", "url,nope"}, {"--format", "csv", "--columns", "data."}, {"--columns", "url"}} {
		if code, _, errOut := farmRun(t, "", env, append([]string{"results"}, bad...)...); code != exitUsage || !strings.Contains(errOut, "--columns") {
			t.Fatalf("results %v: %d %q, want a usage error naming --columns", bad, code, errOut)
		}
	}
	if code, _, errOut := farmRun(t, "", env, "results", "--state", "done"); code != exitUsage || !strings.Contains(errOut, `"done" is not a job state`) {
		t.Fatalf("bad --state: %d %q", code, errOut)
	}

	if code, out, _ := farmRun(t, "", env, "retry", "--batch", batch); code != exitOK || !strings.Contains(out, "2 jobs queued again") {
		t.Fatalf("retry batch: %d %q", code, out)
	}
	if j, _ := q.Get(ctx, ids[1]); j.State != jobqueue.StatePending || j.Attempts != 0 {
		t.Fatalf("retried job: %+v", j)
	}
}

func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"", time.Time{}, false},
		{"2h", now.Add(-2 * time.Hour), false},
		{"2026-11-20T08:00:00Z", time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC), false},
		{"yesterday", time.Time{}, true},
	}
	for _, tt := range tests {
		got, err := parseWhen(tt.in, now)
		if (err != nil) != tt.wantErr || !got.Equal(tt.want) {
			t.Errorf("parseWhen(%q) = %v, %v", tt.in, got, err)
		}
	}
}

// A FARM_FILE left in the environment must not add a file's jobs to
// `farm submit URL`.
func TestSubmitFileFromTheCommandLineOnly(t *testing.T) {
	url, q := migratedDB(t)
	file := filepath.Join(t.TempDir(), "jobs.txt")
	if err := os.WriteFile(file, []byte("https://a.example/1\nhttps://a.example/2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"FARM_DATABASE_URL": url, "FARM_FILE": file}
	code, out, errOut := farmRun(t, "", env, "submit", "--quiet", "https://b.example/")
	if code != exitOK {
		t.Fatalf("submit with FARM_FILE set: %d %q", code, errOut)
	}
	counts, err := q.BatchCounts(t.Context(), strings.TrimSpace(out))
	if err != nil || counts.Total != 1 {
		t.Fatalf("batch %q: %+v, %v; want the one URL given, not FARM_FILE's two", out, counts, err)
	}
}

// A batch id left in the environment must not turn `farm cancel 123` into
// "cancel the whole batch"; ids and --batch together are refused.
func TestCancelSelectors(t *testing.T) {
	ctx := context.Background()
	url, q := migratedDB(t)
	batch, ids, err := q.Enqueue(ctx, []jobqueue.Spec{{URL: "https://a.example/1"}, {URL: "https://a.example/2"}})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"FARM_DATABASE_URL": url, "FARM_BATCH": batch}
	if code, out, errOut := farmRun(t, "", env, "cancel", strconv.FormatInt(ids[0], 10)); code != exitOK || !strings.Contains(out, "1 jobs canceled") {
		t.Fatalf("cancel one id with FARM_BATCH set: %d %q %q", code, out, errOut)
	}
	if j, _ := q.Get(ctx, ids[1]); j.State != jobqueue.StatePending {
		t.Fatalf("the other job of the batch is %s; FARM_BATCH widened the cancel", j.State)
	}
	if code, _, errOut := farmRun(t, "", env, "cancel"); code != exitUsage || !strings.Contains(errOut, "give job ids or --batch") {
		t.Fatalf("bare cancel with FARM_BATCH set: %d %q", code, errOut)
	}
	if code, _, errOut := farmRun(t, "", env, "retry", "--batch", batch, strconv.FormatInt(ids[0], 10)); code != exitUsage || !strings.Contains(errOut, "not both") {
		t.Fatalf("ids and --batch: %d %q", code, errOut)
	}
	// A malformed batch id is bad usage, found before the database is asked.
	for _, cmd := range []string{"cancel", "retry", "results"} {
		if code, _, errOut := farmRun(t, "", env, cmd, "--batch", "not-a-uuid"); code != exitUsage || !strings.Contains(errOut, "--batch: batch id \"not-a-uuid\" is not a UUID") {
			t.Fatalf("%s with a bad batch id: %d %q", cmd, code, errOut)
		}
	}
}

func TestConsumerEnvironment(t *testing.T) {
	got := consumerEnvironment([]string{"PATH=/bin", "FARM_NODE_ID=shared", "FARM_HEALTH_ADDR=127.0.0.1:9091",
		"FARM_CAPACITY=99", "FARM_JOB_TIMEOUT=45s"}, map[string]string{"FARM_CAPACITY": "6", "FARM_CHROME": ""})
	want := map[string]bool{"PATH=/bin": true, "FARM_JOB_TIMEOUT=45s": true, "FARM_CAPACITY=6": true}
	if len(got) != len(want) {
		t.Fatalf("environment %q, want exactly %v", got, want)
	}
	for _, kv := range got {
		if !want[kv] {
			t.Errorf("unexpected %q in %q", kv, got)
		}
	}
}

// TestFillBlobsOfAPurgedJob: an export reading a job whose blobs retention
// deleted since (the job is gone) leaves it out and goes on; a blob missing
// from a job still there stops the export with the blob's error.
func TestFillBlobsOfAPurgedJob(t *testing.T) {
	store, err := blobstore.Open(t.Context(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stored := jobqueue.Result{JobID: 7, HTML: "<p>kept</p>"}
	if err := blobstore.Offload(t.Context(), store, 7, 1, &stored); err != nil {
		t.Fatal(err)
	}
	gone := jobqueue.Result{JobID: 8, HTML: "<p>purged</p>"}
	if err := blobstore.Offload(t.Context(), store, 8, 1, &gone); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(t.Context(), []string{gone.Blobs[0].Key}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		res      jobqueue.Result
		jobThere bool
		keep     bool
		err      error
	}{
		{"blob there", stored, true, true, nil},
		{"job and blob purged", gone, false, false, nil},
		{"blob missing from a job still there", gone, true, false, blobstore.ErrNotFound},
		// S3 without s3:ListBucket answers a missing key with 403.
		{"job purged, the store refuses", gone, false, false, nil},
		{"the store refuses a job still there", stored, true, false, errForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := store
			if strings.Contains(tc.name, "refuses") {
				store = refusingStore{store}
			}
			get := func(_ context.Context, id int64) (jobqueue.Job, error) {
				if !tc.jobThere {
					return jobqueue.Job{}, fmt.Errorf("job %d: %w", id, jobqueue.ErrNotFound)
				}
				return jobqueue.Job{ID: id}, nil
			}
			res := tc.res
			keep, err := fillBlobs(t.Context(), store, &res, true, false, get)
			if keep != tc.keep || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("fillBlobs = %v, %v; want %v, %v", keep, err, tc.keep, tc.err)
			}
			if keep && res.HTML != "<p>kept</p>" {
				t.Fatalf("HTML %q", res.HTML)
			}
		})
	}
}

var errForbidden = errors.New("api error AccessDenied: Access Denied")

// refusingStore answers every read as S3 does a missing key the farm may
// not list.
type refusingStore struct{ blobstore.Store }

func (refusingStore) Open(context.Context, string) (io.ReadCloser, error) {
	return nil, fmt.Errorf("blob: get: %w", errForbidden)
}

// TestWriteStatusContexts: farm status shows what became of the wiped
// contexts, per node id and farm-wide.
func TestWriteStatusContexts(t *testing.T) {
	var b strings.Builder
	n := jobqueue.Node{ID: "n1", State: jobqueue.NodeActive, Capacity: 6,
		Lifetime: jobqueue.Counters{ContextsReused: 417, ContextsReplaced: 23}}
	writeStatus(&b, []jobqueue.Node{n}, jobqueue.Stats{Lifetime: jobqueue.Counters{ContextsReused: 900, ContextsReplaced: 31}}, true)
	out := b.String()
	for _, want := range []string{"CONTEXTS REUSED/REPLACED", "417/23", "wiped contexts: 900 reused, 31 replaced"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// TestWriteStatusSaysNoProducerLeads: with no leader nothing assigns the
// pending jobs, which the counts alone do not show.
func TestWriteStatusSaysNoProducerLeads(t *testing.T) {
	for _, led := range []bool{true, false} {
		var b strings.Builder
		writeStatus(&b, nil, jobqueue.Stats{}, led)
		if says := strings.Contains(b.String(), "no producer leads"); says == led {
			t.Errorf("led %v: %q", led, b.String())
		}
	}
}

// TestWriteStatusLoadOfLiveNodesOnly: an exited or lost node's last
// heartbeat's load is not shown as its load now.
func TestWriteStatusLoadOfLiveNodesOnly(t *testing.T) {
	load := jobqueue.NodeLoad{BusySessions: 2, CPUPercent: 87, ChromePSSBytes: 700 << 20, JobsSinceChromeStart: 13}
	for _, tc := range []struct {
		state jobqueue.NodeState
		busy  string
	}{
		{jobqueue.NodeActive, "2/6"}, {jobqueue.NodeDraining, "2/6"}, {jobqueue.NodeExited, "-/6"}, {jobqueue.NodeLost, "-/6"},
	} {
		var b strings.Builder
		writeStatus(&b, []jobqueue.Node{{ID: "n1", State: tc.state, Capacity: 6, Load: load}}, jobqueue.Stats{}, true)
		row := strings.Fields(strings.Split(b.String(), "\n")[1])
		if row[2] != tc.busy || (tc.state.Live() != strings.Contains(b.String(), "700MiB")) {
			t.Errorf("%s node: %q; want busy %s and the Chrome PSS shown only if live", tc.state, row, tc.busy)
		}
	}
}

// farm cancel and retry say, per id, why a job was left alone, in the
// API's words (jobqueue.Unchanged), and exit 1 when any given id could not
// be acted on; the others are acted on.
func TestCancelRetryReportEachIDLeftAlone(t *testing.T) {
	ctx := context.Background()
	url, q := migratedDB(t)
	_, ids, err := q.Enqueue(ctx, []jobqueue.Spec{{URL: "https://a.example/1"}, {URL: "https://a.example/2"}, {URL: "https://a.example/3"}})
	if err != nil {
		t.Fatal(err)
	}
	const unknownBatch = "00000000-0000-0000-0000-000000000000"
	pending, canceled, other := ids[0], ids[1], ids[2]
	if _, err := q.Cancel(ctx, canceled); err != nil {
		t.Fatal(err)
	}
	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	env := map[string]string{"FARM_DATABASE_URL": url}
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"cancel", "999999"}, exitError, "0 jobs canceled", "job 999999: not found"},
		{[]string{"retry", "999999"}, exitError, "0 jobs queued again", "job 999999: not found"},
		{[]string{"cancel", id(canceled)}, exitError, "0 jobs canceled", fmt.Sprintf("job %d is canceled; %s", canceled, jobqueue.CancelableStates)},
		{[]string{"retry", id(pending)}, exitError, "0 jobs queued again", fmt.Sprintf("job %d is pending; %s", pending, jobqueue.RetriableStates)},
		// Some acted on: they are, and the rest are named.
		{[]string{"cancel", id(other), "999999"}, exitError, "1 jobs canceled", "job 999999: not found"},
		{[]string{"retry", id(canceled)}, exitOK, "1 jobs queued again", ""},
		// An id given twice is one job, acted on once.
		{[]string{"cancel", id(pending), id(pending)}, exitOK, "1 jobs canceled", ""},
		{[]string{"cancel"}, exitUsage, "", "give job ids or --batch BATCH_ID\n"},
		{[]string{"retry"}, exitUsage, "", "give job ids or --batch BATCH_ID\n"},
		// An unknown batch is told from one with nothing left to change.
		{[]string{"cancel", "--batch", unknownBatch}, exitError, "0 jobs canceled", "batch " + unknownBatch + ": not found"},
		{[]string{"retry", "--batch", unknownBatch}, exitError, "0 jobs queued again", "batch " + unknownBatch + ": not found"},
	} {
		code, out, errOut := farmRun(t, "", env, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) || (tc.stderr == "" && errOut != "") {
			t.Errorf("farm %v: exit %d, %q, %q; want %d, %q, %q", tc.args, code, out, errOut, tc.code, tc.stdout, tc.stderr)
		}
	}
	if j, _ := q.Get(ctx, other); j.State != jobqueue.StateCanceled {
		t.Errorf("job %d is %s after farm cancel %d 999999, want canceled", other, j.State, other)
	}
}

// An unknown --columns name is answered with every column there is, the
// ones off by default (html_truncated) too.
func TestUnknownColumnListsEveryColumn(t *testing.T) {
	_, _, err := parseCSVColumns("id,foo")
	if err == nil {
		t.Fatal("--columns id,foo accepted")
	}
	for c := range csvColumns {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("%v: %q is not listed", err, c)
		}
	}
}

// TestFollowBatchSaysNoProducerLeads: farm submit --wait says, once, that
// no producer leads while the batch's jobs wait, and says nothing when one
// does.
func TestFollowBatchSaysNoProducerLeads(t *testing.T) {
	url, q := migratedDB(t)
	ctx := context.Background()
	batch, _, err := q.Enqueue(ctx, []jobqueue.Spec{{URL: "https://a.example/1"}})
	if err != nil {
		t.Fatal(err)
	}
	follow := func() string {
		t.Helper()
		var b strings.Builder
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := followBatch(fctx, q, batch, 1, &b, false); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("followBatch = %v, want the test's deadline", err)
		}
		return b.String()
	}
	if out := follow(); strings.Count(out, "no producer leads") != 1 {
		t.Errorf("no leader: %q, want the warning once", out)
	}
	pool, err := openPool(ctx, url, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ectx, stop := context.WithCancel(ctx)
	leading := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = jobqueue.NewElector(pool, jobqueue.ElectorConfig{}).Run(ectx, func(lctx context.Context) { close(leading); <-lctx.Done() })
	}()
	t.Cleanup(func() { stop(); <-done })
	<-leading
	if out := follow(); strings.Contains(out, "no producer leads") {
		t.Errorf("a leader runs: %q, want no warning", out)
	}
}
