package web

import (
	"context"
	"net/http"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// hostsRecent is how far back GET /api/hosts looks for a host's last start.
const hostsRecent = 10 * time.Minute

// hostView is one row of GET /api/hosts: what runs on the host, against
// the politeness limit that applies to it, and when it may start again.
type hostView struct {
	jobqueue.HostActivity
	// MaxConcurrent is the host's limit of jobs at once, farm-wide (0: none).
	MaxConcurrent int `json:"max_concurrent"`
	// MinIntervalMS is the least time between two starts (0: none).
	MinIntervalMS int64 `json:"min_interval_ms"`
	// NextStartAt is when the host's next job may start, when that is in
	// the future: the last start plus the minimum interval.
	NextStartAt *time.Time `json:"next_start_at,omitempty"`
	// AtLimit is true when the host runs as many jobs as it may.
	AtLimit bool `json:"at_limit"`
}

// listHosts answers GET /api/hosts: hosts with jobs in flight or a recent
// start, with their politeness, so that a crawl held back by the per-host
// default explains itself.
func (s *server) listHosts(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	hosts, err := s.q.HostActivity(ctx, hostsRecent)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	now := s.cfg.Now()
	out := make([]hostView, len(hosts))
	for i, h := range hosts {
		v := hostView{HostActivity: h}
		if s.cfg.HostPolicy != nil {
			p := s.cfg.HostPolicy(h.Host)
			v.MaxConcurrent, v.MinIntervalMS = p.MaxConcurrent, p.MinInterval.Milliseconds()
			v.AtLimit = p.MaxConcurrent > 0 && h.Queued+h.Processing >= int64(p.MaxConcurrent)
			if h.LastStartedAt != nil && p.MinInterval > 0 {
				if next := h.LastStartedAt.Add(p.MinInterval); next.After(now) {
					v.NextStartAt = &next
				}
			}
		}
		out[i] = v
	}
	writeJSON(w, http.StatusOK, map[string]any{"hosts": out, "now": now, "politeness_known": s.cfg.HostPolicy != nil})
}

// batchProgress answers GET /api/batches/{id}: the batch's jobs by state.
// The dashboard derives the rate and the ETA from successive answers.
func (s *server) batchProgress(w http.ResponseWriter, r *http.Request) {
	if err := jobqueue.ValidateBatchID(r.PathValue("id")); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	c, err := s.q.BatchCounts(ctx, r.PathValue("id"))
	if err != nil {
		s.queueError(w, r, err)
		return
	}
	if c.Total == 0 {
		writeError(w, http.StatusNotFound, "no batch "+r.PathValue("id"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"batch_id": r.PathValue("id"), "total": c.Total,
		"by_state": c.By, "finished": c.Finished(), "now": s.cfg.Now()})
}
