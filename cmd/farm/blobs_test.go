package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/browserfarm/browserfarm/farm/blobstore"
	"github.com/browserfarm/browserfarm/farm/web"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

// fakeS3 serves an in-memory S3 (gofakes3) on 127.0.0.1 with the bucket
// made, and returns its --blob-store URL. The AWS SDK reads the fake
// credentials from the environment, as it would real ones.
func fakeS3(t *testing.T, bucket string) string {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return "s3://" + bucket + "/farm?endpoint=" + srv.URL + "&path_style=true"
}

// keepAssigned plays the producer's part for one node until ctx ends:
// it keeps the node's slots filled.
func keepAssigned(ctx context.Context, q *jobqueue.Queue, node string) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_, _ = q.Assign(ctx, node, supervisor.DefaultConfig().Capacity)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// runNode runs `farm consumer` in-process on node with the given extra
// flags, and an assigner keeping its slots filled, until the returned stop.
func runNode(t *testing.T, url, node string, extra ...string) (stop func() error, logs *lockedBuffer) {
	t.Helper()
	pool, err := openPool(context.Background(), url, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	q := jobqueue.New(pool, jobqueue.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { keepAssigned(ctx, q, node) })
	logs = newLogBuffer()
	done := make(chan error, 1)
	args := append([]string{"--database-url", url, "--node-id", node, "--chrome-profile-root", t.TempDir(),
		"--heartbeat-interval", "1s", "--poll-interval", "200ms"}, extra...)
	go func() { done <- runConsumer(ctx, testEnv(logs), args) }()
	var once sync.Once
	var err2 error
	stop = func() error {
		once.Do(func() {
			cancel()
			err2 = <-done
			wg.Wait()
			pool.Close()
		})
		return err2
	}
	t.Cleanup(func() { _ = stop() })
	return stop, logs
}

// TestBlobStoreS3: a consumer with --blob-store s3://… puts each result's
// HTML and screenshot in the bucket and only their key, size and hash in
// PostgreSQL; farm results and the API give them back byte for byte;
// retention deletes them with their rows; and an upload that fails fails the
// attempt as retriable instead of completing the job without its blobs.
func TestBlobStoreS3(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	ctx := context.Background()
	storeURL := fakeS3(t, "farm-blobs")
	url, q := migratedDB(t)
	site := testutil.StartSite(t, testsite.Options{Items: 8})
	specs := make([]jobqueue.Spec, 4)
	for i := range specs {
		specs[i] = jobqueue.Spec{URL: fmt.Sprintf("%s/page/%d", site.URL, i+1), Wait: &jobqueue.Wait{Selector: "#ready"},
			HTML: true, Screenshot: true}
	}
	batch, ids, err := q.Enqueue(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	stop, logs := runNode(t, url, "blob-node", "--blob-store", storeURL, "--allow-destination", strings.TrimPrefix(site.URL, "http://"))
	waitCompleted(t, q, batch, len(ids), logs)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	store, err := blobstore.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	var screenshot []byte
	for _, id := range ids {
		res, err := q.GetResult(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		html, okH := res.Blob(jobqueue.BlobHTML)
		png, okS := res.Blob(jobqueue.BlobScreenshot)
		if res.HTML != "" || res.Screenshot != nil || !okH || !okS || html.Size == 0 || len(png.SHA256) != 64 {
			t.Fatalf("job %d: %d HTML bytes and %d screenshot bytes in the database, blobs %+v; want only references",
				id, len(res.HTML), len(res.Screenshot), res.Blobs)
		}
		b, err := blobstore.ReadRef(ctx, store, png)
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("job %d screenshot from the store: %d bytes, %v", id, len(b), err)
		}
		if id == ids[0] {
			screenshot = b
		}
	}

	// farm results inlines them again.
	code, out, errOut := farmRun(t, "", map[string]string{"FARM_DATABASE_URL": url, "FARM_BLOB_STORE": storeURL},
		"results", "--batch", batch, "--html", "--screenshot")
	if code != exitOK {
		t.Fatalf("farm results: %d %s", code, errOut)
	}
	var first exportedJob
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first.Result == nil || !strings.Contains(first.Result.HTML, "Item 1") || !bytes.Equal(first.Result.Screenshot, screenshot) {
		t.Errorf("farm results line: HTML %q…, screenshot %d bytes (want %d)", tail(first.Result.HTML, 80), len(first.Result.Screenshot), len(screenshot))
	}
	if !strings.Contains(out, base64.StdEncoding.EncodeToString(screenshot)[:64]) {
		t.Error("the export holds no base64 of the screenshot")
	}
	// Without the store it says what is missing rather than exporting nothing.
	if code, _, errOut := farmRun(t, "", map[string]string{"FARM_DATABASE_URL": url}, "results", "--batch", batch, "--screenshot"); code == exitOK ||
		!strings.Contains(errOut, "--blob-store") {
		t.Errorf("results without --blob-store: %d %q", code, errOut)
	}

	// The API streams them.
	api := httptest.NewServer(web.NewServer(web.Config{Queue: q, Blobs: store}))
	defer api.Close()
	for path, check := range map[string]func([]byte, http.Header) bool{
		"/screenshot": func(b []byte, h http.Header) bool {
			return bytes.Equal(b, screenshot) && h.Get("Content-Type") == "image/png"
		},
		"/html": func(b []byte, h http.Header) bool {
			return bytes.Contains(b, []byte("Item 1")) && h.Get("Content-Security-Policy") == "sandbox"
		},
	} {
		resp, err := http.Get(api.URL + "/api/jobs/" + strconv.FormatInt(ids[0], 10) + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !check(b, resp.Header) {
			t.Errorf("GET %s: %s, %d bytes, %v", path, resp.Status, len(b), resp.Header)
		}
	}

	// A blob whose bytes changed, though not their number, is not served
	// as the result: the hash is checked before anything goes out.
	htmlRef, _ := mustResult(t, q, ids[1]).Blob(jobqueue.BlobHTML)
	if err := store.Put(ctx, htmlRef.Key, bytes.Repeat([]byte("x"), int(htmlRef.Size)), "text/plain"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(api.URL + "/api/jobs/" + strconv.FormatInt(ids[1], 10) + "/html")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("GET a tampered blob: %s, want 502", resp.Status)
	}

	// Retention deletes the blobs with their rows. It runs here between
	// the API's read of a result and its read of the blob: the job is
	// gone, a 404 as for a job purged before (it was a 502, the store's
	// failure).
	png, _ := mustResult(t, q, ids[0]).Blob(jobqueue.BlobScreenshot)
	var gone []string
	var n int64
	var perr error
	purging := &purgeOnOpen{Store: store, purge: func() {
		n, perr = q.DeleteFinishedBefore(ctx, time.Now().Add(time.Hour), 100, func(keys []string) {
			gone = append(gone, keys...)
			if err := store.Delete(ctx, keys); err != nil {
				t.Errorf("delete blobs: %v", err)
			}
		})
	}}
	api2 := httptest.NewServer(web.NewServer(web.Config{Queue: q, Blobs: purging}))
	defer api2.Close()
	resp, err = http.Get(api2.URL + "/api/jobs/" + strconv.FormatInt(ids[0], 10) + "/screenshot")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET the screenshot of a job purged meanwhile: %s, want 404", resp.Status)
	}
	if perr != nil || n != int64(len(ids)) || len(gone) != 2*len(ids) {
		t.Fatalf("purge: %d jobs, %d blob keys, %v; want %d and %d", n, len(gone), perr, len(ids), 2*len(ids))
	}
	if _, err := store.Open(ctx, png.Key); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("a purged job's screenshot is still in the store: %v", err)
	}

	// An upload that fails: the attempt ends as retriable with the attempt
	// given back (the store's fault), nothing completes, and the node holds
	// its claims until the store answers.
	_, failIDs, err := q.Enqueue(ctx, []jobqueue.Spec{{URL: site.URL + "/page/9", Wait: &jobqueue.Wait{Selector: "#ready"}, Screenshot: true, MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := "s3://farm-blobs/farm?endpoint=" + dead.URL + "&path_style=true"
	dead.Close()
	stop, logs = runNode(t, url, "blob-node-2", "--blob-store", deadURL, "--allow-destination", strings.TrimPrefix(site.URL, "http://"))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		j, err := q.Get(ctx, failIDs[0])
		if err != nil {
			t.Fatal(err)
		}
		if j.ErrorClass == "blob_store" && strings.Contains(logs.String(), "taking no job until it takes a blob again") {
			// Pending, or queued on the node again until its next probe
			// hands it back.
			if j.State != jobqueue.StatePending && j.State != jobqueue.StateQueued || j.Attempts != 0 {
				t.Fatalf("after a failed upload the job is %s (%d/%d attempts), want pending with its attempt given back", j.State, j.Attempts, j.MaxAttempts)
			}
			t.Logf("failed upload: job %s after %d attempt(s): %s", j.State, j.Attempts, j.LastError)
			break
		}
		if j.State.Finished() || time.Now().After(deadline) {
			t.Fatalf("job %s, class %q: %s\n%s", j.State, j.ErrorClass, j.LastError, tail(logs.String(), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := q.GetResult(ctx, failIDs[0]); !errors.Is(err, jobqueue.ErrNotFound) {
		t.Errorf("a job whose upload failed has a result: %v", err)
	}
	_ = stop()
}

func mustResult(t *testing.T, q *jobqueue.Queue, id int64) jobqueue.Result {
	t.Helper()
	r, err := q.GetResult(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func waitCompleted(t *testing.T, q *jobqueue.Queue, batch string, n int, logs *lockedBuffer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		c, err := q.BatchCounts(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		if c.By[jobqueue.StateCompleted] == int64(n) {
			return
		}
		if c.By[jobqueue.StateFailed] > 0 || time.Now().After(deadline) {
			t.Fatalf("batch: %v\n%s", c.By, tail(logs.String(), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBlobStoreDatabaseSize measures what a blob store saves the database:
// 1,000 jobs with screenshots, rendered once with the screenshots in
// PostgreSQL and once in a blob store directory. A measurement (minutes of
// Chromium), so it runs only with FARM_MEASURE_BLOB_DB=1:
//
//	FARM_MEASURE_BLOB_DB=1 go test -run TestBlobStoreDatabaseSize -v ./cmd/farm
func TestBlobStoreDatabaseSize(t *testing.T) {
	if os.Getenv("FARM_MEASURE_BLOB_DB") == "" {
		t.Skip("a measurement: set FARM_MEASURE_BLOB_DB=1")
	}
	const jobs = 1000
	site := testutil.StartSite(t, testsite.Options{Items: 20})
	measure := func(extra ...string) storageSize {
		url, q := migratedDB(t)
		specs := make([]jobqueue.Spec, jobs)
		for i := range specs {
			specs[i] = jobqueue.Spec{URL: fmt.Sprintf("%s/page/%d", site.URL, i+1), Wait: &jobqueue.Wait{Selector: "#ready"}, Screenshot: true}
		}
		batch, _, err := q.Enqueue(context.Background(), specs)
		if err != nil {
			t.Fatal(err)
		}
		stop, logs := runNode(t, url, "size-node", append([]string{"--exit-after-jobs", "off", "--allow-destination", strings.TrimPrefix(site.URL, "http://")}, extra...)...)
		waitCompleted(t, q, batch, jobs, logs)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		return measureStorage(t, q.Pool())
	}
	inDB := measure()
	dir := t.TempDir()
	inStore := measure("--blob-store", "file://"+dir)
	var blobBytes int64
	_ = filepathWalk(dir, func(size int64) { blobBytes += size })
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	t.Logf("%d jobs with screenshots: results table %s in PostgreSQL vs %s with a blob store (database %s vs %s; %s of blobs in the store)",
		jobs, mib(inDB.Results), mib(inStore.Results), mib(inDB.Database), mib(inStore.Database), mib(blobBytes))
	if inStore.Results*4 > inDB.Results {
		t.Errorf("the blob store saved too little: results %d vs %d bytes", inStore.Results, inDB.Results)
	}
}

// filepathWalk calls add with the size of every regular file under dir.
func filepathWalk(dir string, add func(int64)) error {
	return filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			add(info.Size())
		}
		return err
	})
}

// storageSize is how much disk the queue's data takes, TOAST and indexes
// included.
type storageSize struct{ Jobs, Results, Database int64 }

// measureStorage measures the queue's tables and its whole database.
func measureStorage(t *testing.T, pool *pgxpool.Pool) storageSize {
	t.Helper()
	var s storageSize
	err := pool.QueryRow(context.Background(), `SELECT pg_total_relation_size('jobs'), pg_total_relation_size('results'),
        pg_database_size(current_database())`).Scan(&s.Jobs, &s.Results, &s.Database)
	if err != nil {
		t.Fatalf("storage size: %v", err)
	}
	return s
}

// purgeOnOpen runs purge (once) before its first read: retention between
// a reader's read of a result and of its blob.
type purgeOnOpen struct {
	blobstore.Store
	once  sync.Once
	purge func()
}

func (p *purgeOnOpen) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	p.once.Do(p.purge)
	return p.Store.Open(ctx, key)
}
