package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// FakeS3 serves an in-memory S3 (gofakes3) on 127.0.0.1 with bucket made,
// and returns the blob store URL for it. The SDK reads the fake credentials
// from the environment, as it would real ones.
func FakeS3(t *testing.T, bucket string) (storeURL string, fake *httptest.Server) {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	fake = httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(fake.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return "s3://" + bucket + "/farm?endpoint=" + fake.URL + "&path_style=true", fake
}

func exercise(t *testing.T, s Store) {
	t.Helper()
	ctx := context.Background()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	blobs := map[string][]byte{"jobs/1/a.html": []byte("<html>a</html>"), "jobs/1/b.png": big, "jobs/2/c.html": {}}
	for k, v := range blobs {
		if err := s.Put(ctx, k, v, "application/octet-stream"); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	for k, v := range blobs {
		rc, err := s.Open(ctx, k)
		if err != nil {
			t.Fatalf("open %s: %v", k, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("read %s: %d bytes (%v), want %d", k, len(got), err, len(v))
		}
	}
	if err := s.Delete(ctx, []string{"jobs/1/a.html", "jobs/1/b.png", "jobs/9/never.html"}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := s.Open(ctx, "jobs/1/a.html"); !errors.Is(err, ErrNotFound) {
		t.Errorf("open after delete: %v, want ErrNotFound", err)
	}
	if rc, err := s.Open(ctx, "jobs/2/c.html"); err != nil {
		t.Errorf("a blob not deleted is gone: %v", err)
	} else {
		rc.Close()
	}
	for _, bad := range []string{"", "/abs", "a/../b", "a//b"} {
		if err := s.Put(ctx, bad, nil, ""); err == nil {
			t.Errorf("key %q accepted", bad)
		}
	}
}

func TestDir(t *testing.T) {
	root := t.TempDir()
	s, err := Open(context.Background(), "file://"+root)
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, s)
	if _, err := os.Stat(filepath.Join(root, "jobs", "1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an emptied directory stayed: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "jobs", "2")); len(ents) != 1 {
		t.Errorf("jobs/2 holds %d entries, want 1 (no temporary files)", len(ents))
	}
}

// TestDirFilesAndLeftovers: a blob is readable by the group, as its
// directories are; a temporary file a dead writer left is removed with
// its job's blobs once it is old, and a fresh one (a Put under way) is not.
func TestDirFilesAndLeftovers(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	d, err := NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"jobs/5/1-a.html", "jobs/6/1-a.html"} {
		if err := d.Put(ctx, key, []byte("<p>"), "text/html"); err != nil {
			t.Fatal(err)
		}
	}
	info, err := os.Stat(filepath.Join(root, "jobs", "5", "1-a.html"))
	if err != nil || info.Mode().Perm() != blobMode {
		t.Fatalf("blob mode %v, %v; want %v", info.Mode().Perm(), err, os.FileMode(blobMode))
	}
	old := filepath.Join(root, "jobs", "5", tempPrefix+"123")
	fresh := filepath.Join(root, "jobs", "6", tempPrefix+"456")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("half a blob"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	then := time.Now().Add(-staleTempAge - time.Minute)
	if err := os.Chtimes(old, then, then); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, []string{"jobs/5/1-a.html", "jobs/6/1-a.html"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "jobs", "5")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("jobs/5, with an old temporary file, stayed: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a fresh temporary file (a Put under way) was removed: %v", err)
	}
}

func TestS3(t *testing.T) {
	u, _ := FakeS3(t, "farm-blobs")
	s, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, s)
}

func TestOpenRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"ftp://x/y", "file://host/x", "file:///x?y=1", "s3:///prefix", "s3://b/p?colour=red", "s3://b/p?path_style=maybe", "file://relative"} {
		if _, err := Open(context.Background(), u); err == nil || !strings.Contains(err.Error(), "blob store") {
			t.Errorf("Open(%q) = %v, want an error naming the blob store", u, err)
		}
	}
	// Credentials in the URL are refused, and not repeated.
	for _, u := range []string{"s3://AKIAKEY:s3cr3t@bucket/p", "s3://bucket/p?endpoint=http://minio:m1n10pass@minio:9000"} {
		_, err := Open(context.Background(), u)
		if err == nil || !strings.Contains(err.Error(), "credentials") || strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "m1n10pass") {
			t.Errorf("Open(%q) = %v, want an error about credentials that does not repeat them", u, err)
		}
	}
}

// TestOffloadKeysAreEachRunsOwn: two runs of a job with the same attempt
// number (a retried job counts from 0 again) and the same bytes get keys of
// their own, so that forgetting the losing run's blobs leaves the stored
// run's in place.
func TestOffloadKeysAreEachRunsOwn(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	run := func() jobqueue.Result {
		t.Helper()
		r := jobqueue.Result{HTML: "<p>the same page</p>", Screenshot: []byte("png")}
		if err := Offload(ctx, s, 7, 1, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	late, stored := run(), run()
	for i := range stored.Blobs {
		if late.Blobs[i].Key == stored.Blobs[i].Key {
			t.Fatalf("both runs stored their %s under %s", stored.Blobs[i].Kind, stored.Blobs[i].Key)
		}
	}
	Forget(ctx, s, late.Blobs)
	for _, b := range stored.Blobs {
		rc, err := s.Open(ctx, b.Key)
		if err != nil {
			t.Fatalf("the stored run's %s after the late run's were forgotten: %v", b.Kind, err)
		}
		rc.Close()
	}
}

// TestS3DeleteGoesOnPastAFailedBatch: a batch of deletes the store refuses
// does not leave the later batches undeleted; the error says what failed.
func TestS3DeleteGoesOnPastAFailedBatch(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("farm-blobs"); err != nil {
		t.Fatal(err)
	}
	fake := gofakes3.New(backend).Server()
	var deletes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.URL.Query()["delete"]; ok && r.Method == http.MethodPost && deletes.Add(1) == 1 {
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>denied</Message></Error>`)
			return
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	ctx := context.Background()
	s, err := Open(ctx, "s3://farm-blobs/farm?endpoint="+srv.URL+"&path_style=true")
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, deleteBatch+1)
	for i := range keys {
		keys[i] = fmt.Sprintf("jobs/%d/a.html", i)
		if err := s.Put(ctx, keys[i], []byte("x"), "text/html"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, keys); err == nil || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("Delete with its first batch refused: %v, want the AccessDenied", err)
	}
	if _, err := s.Open(ctx, keys[deleteBatch]); !errors.Is(err, ErrNotFound) {
		t.Errorf("the key of the second batch after the first failed: %v, want it deleted", err)
	}
	if rc, err := s.Open(ctx, keys[0]); err != nil {
		t.Errorf("a key of the refused batch: %v, want it still there", err)
	} else {
		rc.Close()
	}
}
