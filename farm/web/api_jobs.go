package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// parseListFilter reads the query of GET /api/jobs.
func parseListFilter(v map[string][]string) (jobqueue.ListFilter, error) {
	get := func(k string) string {
		if vs := v[k]; len(vs) > 0 {
			return strings.TrimSpace(vs[0])
		}
		return ""
	}
	var f jobqueue.ListFilter
	if st := get("state"); st != "" {
		for _, name := range strings.Split(st, ",") {
			s := jobqueue.State(strings.TrimSpace(name))
			if !s.Valid() {
				names := make([]string, 0, 6)
				for _, x := range jobqueue.States() {
					names = append(names, string(x))
				}
				return f, fmt.Errorf("state: unknown state %q (use one or more of %s, comma-separated)", name, strings.Join(names, ", "))
			}
			if !slices.Contains(f.States, s) {
				f.States = append(f.States, s)
			}
		}
	}
	if n := get("node"); n != "" {
		if err := jobqueue.ValidateNodeID(n); err != nil {
			return f, fmt.Errorf("node: %w", err)
		}
		f.NodeID = n
	}
	if b := get("batch"); b != "" {
		if err := jobqueue.ValidateBatchID(b); err != nil {
			return f, fmt.Errorf("batch: %w", err)
		}
		f.BatchID = strings.ToLower(b)
	}
	if h := get("host"); h != "" {
		if len(h) > 300 {
			return f, errors.New("host: too long")
		}
		f.Host = strings.ToLower(h)
	}
	if l := get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			return f, fmt.Errorf("limit: %q is not a number in 1..1000", l)
		}
		f.Limit = n
	}
	if a := get("after"); a != "" {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n < 0 {
			return f, fmt.Errorf("after: %q is not a job id (pass the \"next\" of the previous page)", a)
		}
		f.Before = n
	}
	return f, nil
}

// listJobs pages through the jobs newest first; "after" is the cursor: the
// "next" of the previous page.
func (s *server) listJobs(w http.ResponseWriter, r *http.Request) {
	f, err := parseListFilter(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	page, err := s.q.List(ctx, f)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if page.Jobs == nil {
		page.Jobs = []jobqueue.Job{}
	}
	writeJSON(w, http.StatusOK, page)
}

// forJob serves the job named by the path's {id}: it answers 400 when the
// id is not a positive integer, and gives h the id and a context bounded by
// dbTimeout.
func forJob(h func(w http.ResponseWriter, r *http.Request, ctx context.Context, id int64)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := jobID(w, r)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
		defer cancel()
		h(w, r, ctx, id)
	}
}

// jobID reads the {id} path value.
func jobID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("job id %q is not a positive integer", r.PathValue("id")))
		return 0, false
	}
	return id, true
}

// resultSummary is a result without its bulky parts, for the job view.
type resultSummary struct {
	NodeID        string           `json:"node_id"`
	FinalURL      string           `json:"final_url"`
	Status        int              `json:"status"`
	Title         string           `json:"title"`
	Data          json.RawMessage  `json:"data,omitempty"`
	ConsoleErrors []string         `json:"console_errors,omitempty"`
	Timings       jobqueue.Timings `json:"timings"`
	Links         int              `json:"links"`
	// LinksOverLimit counts links past follow.max_links, not followed.
	LinksOverLimit int `json:"links_over_limit"`
	HTMLBytes      int `json:"html_bytes"`
	// HTMLTruncated: the HTML was cut at the job's cap.
	HTMLTruncated bool      `json:"html_truncated,omitempty"`
	HasScreenshot bool      `json:"has_screenshot"`
	CreatedAt     time.Time `json:"created_at"`
}

func (s *server) getJob(w http.ResponseWriter, r *http.Request, ctx context.Context, id int64) {
	job, err := s.q.Get(ctx, id)
	if err != nil {
		s.queueError(w, r, err)
		return
	}
	body := map[string]any{"job": job, "result": nil}
	if job.State == jobqueue.StateCompleted {
		// Sizes only: the HTML and the screenshot (megabytes each) are not read.
		res, err := s.q.GetResultSummary(ctx, id)
		switch {
		case err == nil:
			body["result"] = resultSummary{
				NodeID: res.NodeID, FinalURL: res.FinalURL, Status: res.Status, Title: res.Title,
				Data: res.Data, ConsoleErrors: res.ConsoleErrors, Timings: res.Timings, Links: len(res.Links), LinksOverLimit: res.LinksOverLimit,
				HTMLBytes: int(res.HTMLBytes), HTMLTruncated: res.HTMLTruncated, HasScreenshot: res.ScreenshotBytes > 0, CreatedAt: res.CreatedAt,
			}
		case !errors.Is(err, jobqueue.ErrNotFound):
			s.internalError(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, body)
}

// noResult explains why a job has no result.
func (s *server) noResult(w http.ResponseWriter, r *http.Request, ctx context.Context, id int64) {
	job, err := s.q.Get(ctx, id)
	if err != nil {
		s.queueError(w, r, err)
		return
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("job %d is %s; only completed jobs have a result", id, job.State))
}

func (s *server) getResult(w http.ResponseWriter, r *http.Request, ctx context.Context, id int64) {
	if res, ok := s.completedResult(w, r, ctx, id); ok {
		writeJSON(w, http.StatusOK, res)
	}
}

func (s *server) getScreenshot(w http.ResponseWriter, r *http.Request, ctx context.Context, id int64) {
	png, err := s.q.Screenshot(ctx, id)
	if errors.Is(err, jobqueue.ErrNotFound) {
		s.noResult(w, r, ctx, id)
		return
	}
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if len(png) == 0 {
		s.streamBlob(w, r, ctx, id, jobqueue.BlobScreenshot)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "image/png")
	// A completed job's result never changes.
	h.Set("Cache-Control", "private, max-age=86400, immutable")
	h.Set("Content-Length", strconv.Itoa(len(png)))
	_, _ = w.Write(png)
}

func (s *server) cancelJob(w http.ResponseWriter, r *http.Request, ctx context.Context, id int64) {
	s.changeJob(w, r, ctx, id, s.q.Cancel, jobqueue.StateCanceled, jobqueue.CancelableStates)
}

func (s *server) retryJob(w http.ResponseWriter, r *http.Request, ctx context.Context, id int64) {
	s.changeJob(w, r, ctx, id, s.q.Retry, jobqueue.StatePending, jobqueue.RetriableStates)
}

// changeJob applies a state change (cancel, retry) to the job in the path,
// answering 409 with the job's state when it does not apply.
func (s *server) changeJob(w http.ResponseWriter, r *http.Request, ctx context.Context, id int64,
	change func(context.Context, ...int64) (int64, error), to jobqueue.State, only string) {
	n, err := change(ctx, id)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if n == 0 {
		err := s.q.Unchanged(ctx, id, only)
		var ue *jobqueue.UnchangedError
		if errors.As(err, &ue) {
			writeError(w, http.StatusConflict, ue.Error())
			return
		}
		s.queueError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "state": to})
}

func (s *server) cancelBatch(w http.ResponseWriter, r *http.Request) {
	batch := r.PathValue("id")
	if err := jobqueue.ValidateBatchID(batch); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	batch = strings.ToLower(batch)
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	n, err := s.q.CancelBatch(ctx, batch)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if n == 0 {
		page, err := s.q.List(ctx, jobqueue.ListFilter{BatchID: batch, Limit: 1})
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		if len(page.Jobs) == 0 {
			writeError(w, http.StatusNotFound, fmt.Sprintf("batch %s: not found", batch))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"batch_id": batch, "canceled": n})
}
