package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/farm/blobstore"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// blobReadTimeout bounds streaming one blob to a client.
const blobReadTimeout = 2 * time.Minute

// getHTML serves a completed job's page HTML, from the database or the blob
// store. It is the scraped site's markup: served as text, sandboxed, never
// as a page of the dashboard's origin.
func (s *server) getHTML(w http.ResponseWriter, r *http.Request, ctx context.Context, id int64) {
	res, ok := s.completedResult(w, r, ctx, id)
	if !ok {
		return
	}
	if res.HTML != "" {
		blobHeaders(w, jobqueue.BlobHTML, int64(len(res.HTML)))
		_, _ = io.WriteString(w, res.HTML)
		return
	}
	s.streamRef(w, r, id, res, jobqueue.BlobHTML)
}

// streamBlob serves a completed job's blob of that kind from the blob store.
func (s *server) streamBlob(w http.ResponseWriter, r *http.Request, ctx context.Context, id int64, kind string) {
	if res, ok := s.completedResult(w, r, ctx, id); ok {
		s.streamRef(w, r, id, res, kind)
	}
}

// completedResult reads a job's result, answering the request itself (and
// returning false) when there is none or the read failed.
func (s *server) completedResult(w http.ResponseWriter, r *http.Request, ctx context.Context, id int64) (jobqueue.Result, bool) {
	res, err := s.q.GetResult(ctx, id)
	if errors.Is(err, jobqueue.ErrNotFound) {
		s.noResult(w, r, ctx, id)
		return res, false
	}
	if err != nil {
		s.internalError(w, r, err)
		return res, false
	}
	return res, true
}

func (s *server) streamRef(w http.ResponseWriter, r *http.Request, id int64, res jobqueue.Result, kind string) {
	ref, ok := res.Blob(kind)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("job %d has no %s (its spec did not ask for one)", id, kind))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), blobReadTimeout)
	defer cancel()
	// Read whole and checked against its stored size and hash before a
	// byte goes out: streamed, a blob whose bytes changed but not their
	// number would reach the client as a complete 200 (and be cached for
	// a day), the mismatch known only after its last byte. A blob is a
	// result's HTML or screenshot, bounded by the result limits.
	body, err := blobstore.ReadRef(ctx, s.cfg.Blobs, ref)
	if err != nil && r.Context().Err() == nil {
		// Purged since its result was read (retention deletes the rows,
		// then the blobs): the job, or its result, is not there any more.
		if _, gerr := s.q.GetResult(r.Context(), id); errors.Is(gerr, jobqueue.ErrNotFound) {
			s.noResult(w, r, r.Context(), id)
			return
		}
	}
	if err != nil {
		s.log.Error("blob store read failed", zap.Int64("job", id), zap.String("key", ref.Key), zap.Error(err))
		writeError(w, http.StatusBadGateway, fmt.Sprintf("job %d: its %s could not be read from the blob store, or did not match what was stored", id, kind))
		return
	}
	blobHeaders(w, kind, ref.Size)
	if _, err := w.Write(body); err != nil {
		s.log.Debug("writing a blob to the client failed", zap.Int64("job", id), zap.Error(err))
	}
}

func blobHeaders(w http.ResponseWriter, kind string, size int64) {
	h := w.Header()
	if kind == jobqueue.BlobScreenshot {
		h.Set("Content-Type", "image/png")
	} else {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Content-Security-Policy", "sandbox")
	}
	h.Set("X-Content-Type-Options", "nosniff")
	// A completed job's result never changes.
	h.Set("Cache-Control", "private, max-age=86400, immutable")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
}
