package web

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
)

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
	// Total is the nodes sampled over the chart window (Config.ChartWindow);
	// when more than maxChartNodes, Chosen is set and Series holds only
	// ChosenIDs, the maxChartNodes of them with the highest Chrome PSS there
	// (a node among them may have no sample since since).
	Total     int      `json:"total"`
	Chosen    bool     `json:"chosen,omitempty"`
	ChosenIDs []string `json:"chosen_ids,omitempty"`
	// ChosenOverSeconds is the chart window, when Chosen.
	ChosenOverSeconds int64 `json:"chosen_over_seconds,omitempty"`
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
	// Chosen over the chart window, whatever since asks for: the
	// dashboard's polls of the last bucket get the set its first load got,
	// and the set changes as slowly as the hour's peaks.
	top, total, err := s.chosen.get(ctx, s.q, now, s.cfg.ChartWindow)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	var only []string // nil: every node
	if total > len(top) {
		only = top
	}
	qp, np, err := s.q.Samples(ctx, since, step, only)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	qs, ns := columns(qp, np)
	ns.Total = total
	if only != nil {
		ns.Chosen, ns.ChosenIDs, ns.ChosenOverSeconds = true, only, int64(s.cfg.ChartWindow/time.Second)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"since":        since,
		"now":          now,
		"step_seconds": int64(step / time.Second),
		"queue":        qs,
		"nodes":        ns,
	})
}

// chosenNodes keeps the chart's choice of nodes (jobqueue.ChartNodes) for
// chosenNodesTTL, so that the dashboards' polls share one ranking.
type chosenNodes struct {
	mu    sync.Mutex
	at    time.Time
	ids   []string
	total int
}

func (c *chosenNodes) get(ctx context.Context, q *jobqueue.Queue, now time.Time, window time.Duration) ([]string, int, error) {
	c.mu.Lock()
	if !c.at.IsZero() && now.Sub(c.at) < chosenNodesTTL && now.Sub(c.at) >= 0 {
		ids, total := c.ids, c.total
		c.mu.Unlock()
		return ids, total, nil
	}
	c.mu.Unlock()
	ids, total, err := q.ChartNodes(ctx, now.Add(-window), maxChartNodes)
	if err != nil {
		return nil, 0, err
	}
	c.mu.Lock()
	c.at, c.ids, c.total = now, ids, total
	c.mu.Unlock()
	return ids, total, nil
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
	// The window counted starts at a whole minute (jobqueue.WindowStart).
	writeJSON(w, http.StatusOK, map[string]any{"since": jobqueue.WindowStart(since), "groups": groups})
}
