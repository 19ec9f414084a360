package blobstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// putTimeout bounds one upload.
const putTimeout = time.Minute

// Offload moves a result's HTML and screenshot to the blob store,
// leaving their references (key, size, SHA-256) in res. Keys name the job,
// the attempt, a random nonce of this call and the content's hash, so an
// attempt's blobs are its own: when its result is not recorded (the job
// finished elsewhere, the result refused) the caller deletes them (Forget)
// without touching another run's. The attempt number alone would not do: a
// retried job counts its attempts from 0 again, and a late completion of
// its old run, with the same bytes, had the new run's keys. Any upload
// error is returned, what was uploaded deleted, and res left as it was: the
// caller fails the attempt as retriable, it never completes a job whose
// blobs are not stored.
func Offload(ctx context.Context, store Store, jobID int64, attempt int, res *jobqueue.Result) error {
	var refs []jobqueue.BlobRef
	nonce := rand.Text()[:16] // 80 bits
	for _, b := range []struct {
		kind, ext, contentType string
		data                   []byte
	}{
		{jobqueue.BlobHTML, "html", "text/html; charset=utf-8", []byte(res.HTML)},
		{jobqueue.BlobScreenshot, "png", "image/png", res.Screenshot},
	} {
		if len(b.data) == 0 {
			continue
		}
		sum := sha256.Sum256(b.data)
		hash := hex.EncodeToString(sum[:])
		key := fmt.Sprintf("jobs/%d/%d-%s-%s.%s", jobID, attempt, nonce, hash, b.ext)
		uctx, cancel := context.WithTimeout(ctx, putTimeout)
		err := store.Put(uctx, key, b.data, b.contentType)
		cancel()
		if err != nil {
			Forget(ctx, store, refs)
			return fmt.Errorf("storing the %s of job %d in %s: %w", b.kind, jobID, store, err)
		}
		refs = append(refs, jobqueue.BlobRef{Kind: b.kind, Key: key, Size: int64(len(b.data)), SHA256: hash})
	}
	if len(refs) > 0 {
		res.HTML, res.Screenshot = "", nil
		res.Blobs = append(res.Blobs, refs...)
	}
	return nil
}

// Forget deletes an attempt's blobs whose result was not recorded, best
// effort (a blob left behind costs storage, nothing else).
func Forget(ctx context.Context, store Store, refs []jobqueue.BlobRef) {
	if len(refs) == 0 {
		return
	}
	keys := make([]string, len(refs))
	for i, r := range refs {
		keys[i] = r.Key
	}
	dctx, cancel := context.WithTimeout(ctx, putTimeout)
	defer cancel()
	_ = store.Delete(dctx, keys)
}

// Probe checks that the store takes a blob again: it stores a small one
// under probes/<name> and deletes it. name must be a valid key element (a
// node id is).
func Probe(ctx context.Context, store Store, name string) error {
	key := "probes/" + name
	pctx, cancel := context.WithTimeout(ctx, putTimeout)
	defer cancel()
	if err := store.Put(pctx, key, []byte("probe\n"), "text/plain"); err != nil {
		return fmt.Errorf("probing %s: %w", store, err)
	}
	if err := store.Delete(pctx, []string{key}); err != nil {
		return fmt.Errorf("probing %s: deleting %s: %w", store, key, err)
	}
	return nil
}

// OpenRef streams one blob of a result, checking its size and hash as it
// is read: a reader that sees the end without an error got exactly the
// stored bytes.
func OpenRef(ctx context.Context, store Store, ref jobqueue.BlobRef) (io.ReadCloser, error) {
	if store == nil {
		return nil, fmt.Errorf("the %s is in a blob store (%s), and no --blob-store is configured here", ref.Kind, ref.Key)
	}
	rc, err := store.Open(ctx, ref.Key)
	if err != nil {
		return nil, err
	}
	return &checkedBlob{rc: rc, ref: ref, h: sha256.New()}, nil
}

// ReadRef reads one whole blob of a result (see OpenRef).
func ReadRef(ctx context.Context, store Store, ref jobqueue.BlobRef) ([]byte, error) {
	rc, err := OpenRef(ctx, store, ref)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, rc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type checkedBlob struct {
	rc  io.ReadCloser
	ref jobqueue.BlobRef
	h   interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

func (c *checkedBlob) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	if c.n > c.ref.Size {
		// Longer than stored: not read on into memory.
		return n, fmt.Errorf("blob %s: more than the %d bytes stored", c.ref.Key, c.ref.Size)
	}
	if err == io.EOF {
		if got := hex.EncodeToString(c.h.Sum(nil)); c.n != c.ref.Size || got != c.ref.SHA256 {
			return n, fmt.Errorf("blob %s: read %d bytes with SHA-256 %s, stored %d with %s", c.ref.Key, c.n, got, c.ref.Size, c.ref.SHA256)
		}
	}
	return n, err
}

func (c *checkedBlob) Close() error { return c.rc.Close() }

// Fill reads the result's blobs of the given kinds back into HTML and
// Screenshot (for exports that inline them).
func Fill(ctx context.Context, store Store, res *jobqueue.Result, html, screenshot bool) error {
	for _, ref := range res.Blobs {
		if !(ref.Kind == jobqueue.BlobHTML && html || ref.Kind == jobqueue.BlobScreenshot && screenshot) {
			continue
		}
		b, err := ReadRef(ctx, store, ref)
		if err != nil {
			return fmt.Errorf("job %d: %w", res.JobID, err)
		}
		if ref.Kind == jobqueue.BlobHTML {
			res.HTML = string(b)
		} else {
			res.Screenshot = b
		}
	}
	return nil
}
