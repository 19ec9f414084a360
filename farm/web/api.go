package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// nodeView is a node as the API shows it: the queue's view plus what the
// dashboard highlights.
type nodeView struct {
	jobqueue.Node
	HeartbeatAgeSeconds float64 `json:"heartbeat_age_seconds"`
	// Stale: active or draining, but its heartbeat is older than StaleAfter
	// (the producer has not declared it lost yet).
	Stale bool `json:"stale"`
	// Overloaded: more busy sessions than capacity, CPU at 90 % or more, or
	// memory 90 % used.
	Overloaded bool `json:"overloaded"`
}

func overloaded(n jobqueue.Node) bool {
	l := n.Load
	return l.BusySessions > n.Capacity || l.CPUPercent >= 90 ||
		(l.MemTotalBytes > 0 && float64(l.MemUsedBytes) >= 0.9*float64(l.MemTotalBytes))
}

func (s *server) listNodes(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	nodes, err := s.q.ListNodes(ctx)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	now := s.cfg.Now()
	views := make([]nodeView, 0, len(nodes))
	for _, n := range nodes {
		age := max(0, now.Sub(n.HeartbeatAt).Seconds())
		live := n.State == jobqueue.NodeActive || n.State == jobqueue.NodeDraining
		views = append(views, nodeView{
			Node:                n,
			HeartbeatAgeSeconds: math.Round(age*10) / 10,
			Stale:               live && age > s.cfg.StaleAfter.Seconds(),
			Overloaded:          live && overloaded(n),
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"now":                 now,
		"stale_after_seconds": s.cfg.StaleAfter.Seconds(),
		"nodes":               views,
	})
}

// statsView is /api/stats: the queue's Stats and this producer's view.
type statsView struct {
	jobqueue.Stats
	Leader       bool      `json:"leader"`
	Autoscale    bool      `json:"autoscale"`
	DesiredNodes *int      `json:"desired_nodes,omitempty"`
	Version      string    `json:"version"`
	Now          time.Time `json:"now"`
}

func (s *server) stats(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	st, err := s.q.Stats(ctx)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if st.Nodes == nil {
		st.Nodes = []jobqueue.NodeJobs{}
	}
	v := statsView{Stats: st, Leader: s.leader(), Version: s.cfg.Version, Now: s.cfg.Now()}
	if s.cfg.Desired != nil {
		if n, on := s.cfg.Desired(); on {
			v.Autoscale, v.DesiredNodes = true, &n
		}
	}
	writeJSON(w, http.StatusOK, v)
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

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
		if !uuidRE.MatchString(b) {
			return f, fmt.Errorf("batch: %q is not a batch id (a UUID)", b)
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
	LinksOverLimit int       `json:"links_over_limit"`
	HTMLBytes      int       `json:"html_bytes"`
	HasScreenshot  bool      `json:"has_screenshot"`
	CreatedAt      time.Time `json:"created_at"`
}

func (s *server) getJob(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	job, err := s.q.Get(ctx, id)
	if err != nil {
		s.queueError(w, r, err)
		return
	}
	body := map[string]any{"job": job, "result": nil}
	if job.State == jobqueue.StateCompleted {
		res, err := s.q.GetResult(ctx, id)
		switch {
		case err == nil:
			body["result"] = resultSummary{
				NodeID: res.NodeID, FinalURL: res.FinalURL, Status: res.Status, Title: res.Title,
				Data: res.Data, ConsoleErrors: res.ConsoleErrors, Timings: res.Timings, Links: len(res.Links), LinksOverLimit: res.LinksOverLimit,
				HTMLBytes: len(res.HTML), HasScreenshot: len(res.Screenshot) > 0, CreatedAt: res.CreatedAt,
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

func (s *server) getResult(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	res, err := s.q.GetResult(ctx, id)
	if errors.Is(err, jobqueue.ErrNotFound) {
		s.noResult(w, r, ctx, id)
		return
	}
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *server) getScreenshot(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
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

// parseTime reads a time parameter: RFC 3339, or Unix seconds.
func parseTime(v string) (time.Time, error) {
	if n, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(n) && !math.IsInf(n, 0) {
		return time.Unix(0, int64(n*1e9)), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor Unix seconds", v)
	}
	return t, nil
}

// since reads the "since" parameter; default: ChartWindow ago.
func (s *server) since(r *http.Request) (time.Time, error) {
	now := s.cfg.Now()
	v := r.URL.Query().Get("since")
	if v == "" {
		return now.Add(-s.cfg.ChartWindow), nil
	}
	t, err := parseTime(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("since: %w", err)
	}
	if t.After(now.Add(time.Minute)) {
		return time.Time{}, fmt.Errorf("since: %s is in the future", v)
	}
	return t, nil
}

// chartStep picks the bucket width of /api/samples: the requested (a Go
// duration or seconds) or default step, whole seconds, widened so that the
// window has at most maxChartPoints buckets.
func chartStep(param string, def time.Duration, span time.Duration) (time.Duration, error) {
	step := def
	if param != "" {
		if n, err := strconv.Atoi(param); err == nil {
			step = time.Duration(n) * time.Second
		} else if d, err := time.ParseDuration(param); err == nil {
			step = d
		} else {
			return 0, fmt.Errorf("step: %q is neither a duration (10s, 1m) nor seconds", param)
		}
		if step < time.Second || step > 24*time.Hour {
			return 0, fmt.Errorf("step: %s is out of range 1s..24h", step)
		}
	}
	if minStep := span / maxChartPoints; step < minStep {
		step = minStep
	}
	return step.Round(time.Second), nil
}

// queueSeries is the queue's samples in columns, the form uPlot draws.
type queueSeries struct {
	T          []int64 `json:"t"` // bucket start, Unix seconds
	Pending    []int64 `json:"pending"`
	Queued     []int64 `json:"queued"`
	Processing []int64 `json:"processing"`
	Completed  []int64 `json:"completed"`
	Failed     []int64 `json:"failed"`
	Canceled   []int64 `json:"canceled"`
}

// nodeSeries is one node's samples aligned to nodeSeriesSet.T; null where
// the node has no sample in a bucket.
type nodeSeries struct {
	ChromePSSBytes []*int64   `json:"chrome_pss_bytes"`
	BusySessions   []*int64   `json:"busy_sessions"`
	CPUPercent     []*float64 `json:"cpu_percent"`

	// The PSS range of each bucket, drawn as a band around the line: a
	// Chrome recycled between two samples shows as a tall band.
	ChromePSSMinBytes []*int64 `json:"chrome_pss_min_bytes"`
	ChromePSSMaxBytes []*int64 `json:"chrome_pss_max_bytes"`
}

type nodeSeriesSet struct {
	T      []int64                `json:"t"`
	Series map[string]*nodeSeries `json:"series"`
}

func columns(qp []jobqueue.QueuePoint, np []jobqueue.NodePoint) (queueSeries, nodeSeriesSet) {
	qs := queueSeries{T: []int64{}, Pending: []int64{}, Queued: []int64{}, Processing: []int64{},
		Completed: []int64{}, Failed: []int64{}, Canceled: []int64{}}
	for _, p := range qp {
		qs.T = append(qs.T, p.At.Unix())
		qs.Pending = append(qs.Pending, p.Pending)
		qs.Queued = append(qs.Queued, p.Queued)
		qs.Processing = append(qs.Processing, p.Processing)
		qs.Completed = append(qs.Completed, p.Completed)
		qs.Failed = append(qs.Failed, p.Failed)
		qs.Canceled = append(qs.Canceled, p.Canceled)
	}
	ns := nodeSeriesSet{T: []int64{}, Series: map[string]*nodeSeries{}}
	// Points come ordered by bucket, then node.
	index := map[int64]int{}
	for _, p := range np {
		t := p.At.Unix()
		if _, ok := index[t]; !ok {
			index[t] = len(ns.T)
			ns.T = append(ns.T, t)
		}
	}
	for _, p := range np {
		s := ns.Series[p.NodeID]
		if s == nil {
			s = &nodeSeries{
				ChromePSSBytes: make([]*int64, len(ns.T)),
				BusySessions:   make([]*int64, len(ns.T)),
				CPUPercent:     make([]*float64, len(ns.T)),

				ChromePSSMinBytes: make([]*int64, len(ns.T)),
				ChromePSSMaxBytes: make([]*int64, len(ns.T)),
			}
			ns.Series[p.NodeID] = s
		}
		i := index[p.At.Unix()]
		pss, busy, cpu := p.ChromePSSBytes, int64(p.BusySessions), math.Round(p.CPUPercent*10)/10
		s.ChromePSSBytes[i], s.BusySessions[i], s.CPUPercent[i] = &pss, &busy, &cpu
		lo, hi := p.ChromePSSMinBytes, p.ChromePSSMaxBytes
		s.ChromePSSMinBytes[i], s.ChromePSSMaxBytes[i] = &lo, &hi
	}
	return qs, ns
}

func (s *server) samples(w http.ResponseWriter, r *http.Request) {
	since, err := s.since(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	now := s.cfg.Now()
	step, err := chartStep(r.URL.Query().Get("step"), s.cfg.ChartStep, now.Sub(since))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	qp, np, err := s.q.Samples(ctx, since, step)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	qs, ns := columns(qp, np)
	writeJSON(w, http.StatusOK, map[string]any{
		"since":        since,
		"now":          now,
		"step_seconds": int64(step / time.Second),
		"queue":        qs,
		"nodes":        ns,
	})
}

func (s *server) failures(w http.ResponseWriter, r *http.Request) {
	since, err := s.since(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	per := 5
	if v := r.URL.Query().Get("per_class"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("per_class: %q is not a number in 1..100", v))
			return
		}
		per = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	groups, err := s.q.FailureGroups(ctx, since, per)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if groups == nil {
		groups = []jobqueue.FailureGroup{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"since": since, "groups": groups})
}

// readBody reads a request body of at most MaxBodyBytes; on failure it has
// answered already.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body is larger than %d bytes; submit big batches in several calls", s.cfg.MaxBodyBytes))
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return nil, false
	}
	return body, true
}

// specParseError is a submitted batch that is not JSON of the right shape.
type specParseError struct {
	index int // -1: the batch as a whole
	field string
	msg   string
}

func (e *specParseError) Error() string {
	switch {
	case e.index < 0:
		return e.msg
	case e.field != "":
		return fmt.Sprintf("job %d: field %q: %s", e.index, e.field, e.msg)
	}
	return fmt.Sprintf("job %d: %s", e.index, e.msg)
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields (a misspelt option must not be silently ignored) and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// parseSpecs reads a submission: a JSON array of specs, or {"jobs": [...]}.
func parseSpecs(body []byte) ([]jobqueue.Spec, error) {
	body = bytes.TrimSpace(body)
	var items []json.RawMessage
	switch {
	case len(body) == 0:
		return nil, &specParseError{index: -1, msg: "empty body: send a JSON array of job specs, or {\"jobs\": [...]}"}
	case body[0] == '[':
		if err := decodeStrict(body, &items); err != nil {
			_, msg := jobqueue.DescribeJSONError(err)
			return nil, &specParseError{index: -1, msg: msg}
		}
	case body[0] == '{':
		var env struct {
			Jobs *[]json.RawMessage `json:"jobs"`
		}
		if err := decodeStrict(body, &env); err != nil {
			field, msg := jobqueue.DescribeJSONError(err)
			if field != "" {
				msg = fmt.Sprintf("field %q: %s (the body is {\"jobs\": [...]})", field, msg)
			}
			return nil, &specParseError{index: -1, msg: msg}
		}
		if env.Jobs == nil {
			return nil, &specParseError{index: -1, msg: "missing \"jobs\": send {\"jobs\": [...]} or a JSON array of job specs"}
		}
		items = *env.Jobs
	default:
		return nil, &specParseError{index: -1, msg: "the body is not JSON: send a JSON array of job specs, or {\"jobs\": [...]}"}
	}
	if len(items) == 0 {
		return nil, &specParseError{index: -1, msg: "no jobs in the batch"}
	}
	if len(items) > jobqueue.MaxEnqueue {
		return nil, &specParseError{index: -1, msg: fmt.Sprintf("%d jobs in one batch; at most %d are allowed", len(items), jobqueue.MaxEnqueue)}
	}
	specs := make([]jobqueue.Spec, len(items))
	for i, raw := range items {
		spec, err := jobqueue.DecodeSpec(raw)
		if se := (*jobqueue.SpecError)(nil); errors.As(err, &se) {
			return nil, &specParseError{index: i, field: se.Field, msg: se.Msg}
		}
		specs[i] = spec
	}
	return specs, nil
}

func (s *server) submit(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	specs, err := parseSpecs(body)
	if err != nil {
		var pe *specParseError
		errors.As(err, &pe)
		e := apiError{Error: err.Error(), Field: pe.field}
		if pe.index >= 0 {
			e.Index = &pe.index
		}
		writeJSON(w, http.StatusBadRequest, e)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	batch, ids, err := s.q.Enqueue(ctx, specs)
	var se *jobqueue.SpecError
	if errors.As(err, &se) {
		e := apiError{Error: se.Error(), Field: se.Field}
		if se.Index >= 0 {
			e.Index = &se.Index
		}
		writeJSON(w, http.StatusBadRequest, e)
		return
	}
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	w.Header().Set("Location", fmt.Sprintf("/api/jobs?batch=%s", batch))
	writeJSON(w, http.StatusCreated, map[string]any{"batch_id": batch, "ids": ids, "count": len(ids)})
}

func (s *server) cancelJob(w http.ResponseWriter, r *http.Request) {
	s.changeJob(w, r, s.q.Cancel, jobqueue.StateCanceled, "only pending, queued or processing jobs can be canceled")
}

func (s *server) retryJob(w http.ResponseWriter, r *http.Request) {
	s.changeJob(w, r, s.q.Retry, jobqueue.StatePending, "only failed or canceled jobs can be retried")
}

// changeJob applies a state change (cancel, retry) to the job in the path,
// answering 409 with the job's state when it does not apply.
func (s *server) changeJob(w http.ResponseWriter, r *http.Request,
	change func(context.Context, ...int64) (int64, error), to jobqueue.State, only string) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	n, err := change(ctx, id)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if n == 0 {
		job, err := s.q.Get(ctx, id)
		if err != nil {
			s.queueError(w, r, err)
			return
		}
		writeError(w, http.StatusConflict, fmt.Sprintf("job %d is %s; %s", id, job.State, only))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "state": to})
}

func (s *server) cancelBatch(w http.ResponseWriter, r *http.Request) {
	batch := r.PathValue("id")
	if !uuidRE.MatchString(batch) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("batch id %q is not a UUID", batch))
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

func (s *server) drainNode(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := jobqueue.ValidateNodeID(id); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	node, err := s.q.GetNode(ctx, id)
	if err != nil {
		s.queueError(w, r, err)
		return
	}
	if node.State != jobqueue.NodeActive && node.State != jobqueue.NodeDraining {
		writeError(w, http.StatusConflict, fmt.Sprintf("node %q is %s; only an active node can be drained", id, node.State))
		return
	}
	if _, err := s.q.SetNodeState(ctx, id, jobqueue.NodeDraining); err != nil {
		s.queueError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "state": jobqueue.NodeDraining})
}
