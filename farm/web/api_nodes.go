package web

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/browserfarm/browserfarm/farm/wake"
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
		age := n.HeartbeatAge.Seconds()
		live := n.State.Live()
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
	if !node.State.Live() {
		writeError(w, http.StatusConflict, fmt.Sprintf("node %q is %s; only an active node can be drained", id, node.State))
		return
	}
	if _, err := s.q.SetNodeState(ctx, id, jobqueue.NodeDraining); err != nil {
		s.queueError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "state": jobqueue.NodeDraining})
}

// wakePoll is a node's long-poll for wake-ups (see package wake): it
// answers when the node got work, or after ?wait= (at most the hub's
// MaxWait, which is also the default; 0 answers at once, registering the
// node).
func (s *server) wakePoll(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := jobqueue.ValidateNodeID(id); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	wait := s.cfg.Wake.MaxWait()
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("wait: %q is not a duration of 0 or more (e.g. 25s)", v))
			return
		}
		wait = min(d, wait)
	}
	woken, err := s.cfg.Wake.Wait(r.Context(), id, wait)
	switch {
	case errors.Is(err, wake.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "this producer is shutting down; poll again")
	case err != nil:
		// The client went away; its answer has nowhere to go.
	default:
		writeJSON(w, http.StatusOK, wake.Answer{Woken: woken})
	}
}
