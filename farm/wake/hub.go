// Package wake carries assignment wake-ups from producers to nodes over
// HTTP long-polls, so that a fleet need not LISTEN on PostgreSQL.
//
// Why: PostgreSQL 15 signals every listening backend of a database on each
// notifying commit, whatever the channel. With a thousand nodes LISTENing,
// every submit, assignment round and freed slot wakes a thousand server
// processes, each of which reads the notification queue and discards what
// is not its own: O(fleet) server work per job, which at a thousand nodes
// uses the cores. With this package only the producers LISTEN (on
// jobqueue.ChannelAssigned, which names the nodes a commit assigned to),
// and each node holds one HTTP request to a producer that returns when the
// node got work (Hub, on the producer; Client, on the node). A node then
// holds one PostgreSQL connection fewer, and none in session state.
//
// Wake-ups are hints, as notifications are: a node claims what the queue
// holds for it when woken and also polls at a slow interval, so a wake-up
// lost to a restart or a reconnect costs latency, never a job.
package wake

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
)

// Defaults of HubConfig.
const (
	// DefaultMaxWait bounds one long-poll: well under the 60 s idle timeout
	// of common load balancers (AWS ALB, nginx), so that none cuts a poll.
	DefaultMaxWait = 25 * time.Second
	// DefaultForget is how long a node that stopped polling is remembered.
	DefaultForget = time.Minute
)

// HubConfig configures NewHub. Its fields follow the rule of every config
// struct: 0 means the documented default, a negative value is a
// programming error that NewHub reports by panicking with the field's name.
type HubConfig struct {
	// MaxWait is the longest a poll is held open. 0: DefaultMaxWait.
	MaxWait time.Duration
	// Forget: a node that has not polled for this long is dropped with any
	// wake-up it has not collected. 0: DefaultForget.
	Forget time.Duration
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

// ErrClosed is what Wait returns once the hub is closed (the producer is
// shutting down): the node should poll another producer, or this one
// again after a pause.
var ErrClosed = errors.New("wake hub closed")

// Hub holds the nodes' long-polls on one producer and answers them when
// the nodes are woken. A node that is woken while no poll of it is parked
// (between two polls) finds the wake-up waiting at its next poll, so none is
// lost in the gap; only nodes that polled within Forget are remembered,
// which bounds the hub by the fleet polling it. The first poll of a node the
// hub does not remember is answered "woken" at once: the node may have
// been woken here before (a restarted producer, a load balancer that sent
// its last polls to another producer, a node silent for longer than
// Forget), and one claim too many is cheaper than a wake-up lost.
type Hub struct {
	cfg    HubConfig
	closed chan struct{}
	once   sync.Once

	mu        sync.Mutex
	nodes     map[string]*entry
	lastPrune time.Time
}

// entry is one node's state.
type entry struct {
	// pending: woken while no poll was parked; the next poll returns at once.
	pending bool
	// ch is closed to wake the parked polls; nil when none is parked.
	ch      chan struct{}
	waiters int
	seen    time.Time
}

// NewHub returns an empty hub.
func NewHub(cfg HubConfig) *Hub {
	if err := errors.Join(
		cfgrule.Resolve("MaxWait", &cfg.MaxWait, DefaultMaxWait, false),
		cfgrule.Resolve("Forget", &cfg.Forget, DefaultForget, false),
	); err != nil {
		panic("wake.NewHub: HubConfig." + err.Error())
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Hub{cfg: cfg, closed: make(chan struct{}), nodes: map[string]*entry{}, lastPrune: cfg.Now()}
}

// MaxWait is the longest Wait holds a poll.
func (h *Hub) MaxWait() time.Duration { return h.cfg.MaxWait }

// Wait parks a poll of the node until it is woken (true), wait (at most
// MaxWait) passes (false), or ctx ends (ctx's error). A node with a wake-up
// pending, or that the hub does not remember, returns at once, woken. A
// wait of 0 only registers the node, so that wake-ups from now on are kept
// for its next poll: a node makes such a call first, then claims, then
// polls, and misses nothing assigned in between.
func (h *Hub) Wait(ctx context.Context, nodeID string, wait time.Duration) (bool, error) {
	select {
	case <-h.closed:
		return false, ErrClosed
	default:
	}
	h.mu.Lock()
	h.prune()
	e := h.nodes[nodeID]
	if e == nil {
		h.nodes[nodeID] = &entry{seen: h.cfg.Now()}
		h.mu.Unlock()
		return true, nil
	}
	e.seen = h.cfg.Now()
	if e.pending {
		e.pending = false
		h.mu.Unlock()
		return true, nil
	}
	if wait <= 0 {
		h.mu.Unlock()
		return false, nil
	}
	if e.ch == nil {
		e.ch = make(chan struct{})
	}
	ch := e.ch
	e.waiters++
	h.mu.Unlock()

	t := time.NewTimer(min(wait, h.cfg.MaxWait))
	defer t.Stop()
	var err error
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
		err = ctx.Err()
	case <-h.closed:
		err = ErrClosed
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	e.waiters--
	e.seen = h.cfg.Now()
	woken := false
	select {
	case <-ch:
		woken = true
	default:
		if e.waiters == 0 && e.ch == ch {
			e.ch = nil
		}
	}
	if woken && err != nil {
		// Woken as the poll ended without an answer: keep it for the next.
		e.pending = true
		return false, err
	}
	return woken, err
}

// Wake wakes the nodes' parked polls, or keeps a wake-up for their next
// poll. Nodes that have not polled this hub are ignored: they poll another
// producer, or LISTEN.
func (h *Hub) Wake(nodeIDs ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range nodeIDs {
		if e := h.nodes[id]; e != nil {
			e.wake()
		}
	}
	h.prune()
}

// WakeAll wakes every node: wake-ups may have been missed (the producer's
// LISTEN connection was re-established).
func (h *Hub) WakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.nodes {
		e.wake()
	}
	h.prune()
}

func (e *entry) wake() {
	if e.ch != nil {
		close(e.ch)
		e.ch = nil
		return
	}
	e.pending = true
}

// prune drops the nodes that stopped polling, at most every Forget/2, so
// that neither a fleet scaled in nor polls for made-up ids grow the hub
// for good. Called with h.mu held.
func (h *Hub) prune() {
	now := h.cfg.Now()
	if now.Sub(h.lastPrune) < h.cfg.Forget/2 {
		return
	}
	h.lastPrune = now
	for id, e := range h.nodes {
		if e.waiters == 0 && now.Sub(e.seen) > h.cfg.Forget {
			delete(h.nodes, id)
		}
	}
}

// Nodes is how many nodes the hub remembers (polling, or polled within
// Forget).
func (h *Hub) Nodes() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prune()
	return len(h.nodes)
}

// Close answers every parked poll with ErrClosed, and every later one:
// call it before shutting the HTTP server down, which waits for handlers.
func (h *Hub) Close() {
	h.once.Do(func() { close(h.closed) })
}
