package jobqueue

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// State is where a job is in its life.
type State string

// The job states. pending, queued and processing are live; the other three are
// final (only Retry moves a failed or canceled job back to pending).
const (
	StatePending    State = "pending"    // waiting for the producer to assign it
	StateQueued     State = "queued"     // assigned to a node, not started
	StateProcessing State = "processing" // running on a node under a lease
	StateCompleted  State = "completed"  // done; its result row exists
	StateFailed     State = "failed"     // attempts exhausted or a permanent error
	StateCanceled   State = "canceled"   // canceled by a user
)

// States lists the job states in lifecycle order.
func States() []State {
	return []State{StatePending, StateQueued, StateProcessing, StateCompleted, StateFailed, StateCanceled}
}

// Valid reports whether s is one of the job states.
func (s State) Valid() bool {
	switch s {
	case StatePending, StateQueued, StateProcessing, StateCompleted, StateFailed, StateCanceled:
		return true
	}
	return false
}

// Finished reports whether s is a final state.
func (s State) Finished() bool {
	return s == StateCompleted || s == StateFailed || s == StateCanceled
}

// NodeState is the life state of a consumer node.
type NodeState string

// The node states.
const (
	NodeActive   NodeState = "active"   // takes new jobs
	NodeDraining NodeState = "draining" // finishes what it runs, takes nothing new
	NodeExited   NodeState = "exited"   // left cleanly
	NodeLost     NodeState = "lost"     // stopped heartbeating; its jobs were returned
)

// Live reports whether a node in state s is running: active or draining,
// not exited or lost.
func (s NodeState) Live() bool { return s == NodeActive || s == NodeDraining }

// Valid reports whether s is one of the node states.
func (s NodeState) Valid() bool {
	switch s {
	case NodeActive, NodeDraining, NodeExited, NodeLost:
		return true
	}
	return false
}

// Errors callers test for with errors.Is.
var (
	// ErrNotFound: no job (or node, or result) with that id.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyFinished: the job had already reached a final state, so the
	// completion or failure changed nothing. A *FinishedError carries the state.
	ErrAlreadyFinished = errors.New("job already finished")
	// ErrNotHeld: the job is live but not processing on the calling node any
	// more (its lease expired or its node was declared lost), so the failure
	// report was ignored.
	ErrNotHeld = errors.New("job not held by this node")
	// ErrBadNodeID: a node id outside the allowed form (see ValidateNodeID).
	ErrBadNodeID = errors.New("bad node id")
	// ErrFenced: a newer incarnation of the node registered, so whatever
	// this one sends is refused and its process must stop. A *FencedError
	// carries the incarnations.
	ErrFenced = errors.New("node id taken over by a newer incarnation")
	// ErrNodeIDInUse: Register found the id held by a live incarnation (one
	// heartbeating within Config.StaleAfter). A *NodeInUseError says who.
	ErrNodeIDInUse = errors.New("node id in use by a live process")
)

// FencedError says an incarnation of a node was superseded. It matches
// ErrFenced under errors.Is.
type FencedError struct {
	NodeID      string
	Incarnation int64 // the caller's
	Current     int64 // the node's current incarnation (0: the node is gone)
}

func (e *FencedError) Error() string {
	if e.Current == 0 {
		return fmt.Sprintf("node %q incarnation %d: the node is no longer registered", e.NodeID, e.Incarnation)
	}
	if !e.Superseded() {
		return fmt.Sprintf("node %q incarnation %d: the node is registered at an earlier incarnation, %d (the database lost this registration)",
			e.NodeID, e.Incarnation, e.Current)
	}
	return fmt.Sprintf("node %q incarnation %d was superseded by incarnation %d (another process registered the id)",
		e.NodeID, e.Incarnation, e.Current)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Superseded reports whether a later registration of the id fenced the
// caller: another process holds it. Otherwise the node's row is gone (the
// producer deleted a node it had long declared lost) or holds an earlier
// incarnation (a database restored or failed over to a point before the
// caller registered): no process holds the id, and registering again is
// safe.
func (e *FencedError) Superseded() bool { return e.Current > e.Incarnation }

// NodeInUseError says which live process holds a node id. It matches
// ErrNodeIDInUse under errors.Is.
type NodeInUseError struct {
	NodeID       string
	Hostname     string // of the holder
	PID          int    // of the holder on its host (0: not reported)
	Incarnation  int64  // the holder's
	HeartbeatAge time.Duration
}

func (e *NodeInUseError) Error() string {
	return fmt.Sprintf("node id %q is held by a live process (pid %d on %s, incarnation %d, heartbeat %s ago); "+
		"give this process another --node-id, or stop the other one",
		e.NodeID, e.PID, e.Hostname, e.Incarnation, e.HeartbeatAge.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrNodeIDInUse) true.
func (e *NodeInUseError) Is(target error) bool { return target == ErrNodeIDInUse }

// FinishedError says a job was already in a final state. It matches
// ErrAlreadyFinished under errors.Is.
type FinishedError struct {
	JobID int64
	State State
}

func (e *FinishedError) Error() string {
	return fmt.Sprintf("job %d already finished (%s): nothing changed", e.JobID, e.State)
}

// Is makes errors.Is(err, ErrAlreadyFinished) true.
func (e *FinishedError) Is(target error) bool { return target == ErrAlreadyFinished }

// Job is one row of the queue.
type Job struct {
	ID          int64  `json:"id"`
	BatchID     string `json:"batch_id"`
	State       State  `json:"state"`
	Priority    int    `json:"priority"`
	Spec        Spec   `json:"spec"`
	Host        string `json:"host"`
	NodeID      string `json:"node_id,omitempty"` // "" when no node holds or held it
	Attempts    int    `json:"attempts"`
	MaxAttempts int    `json:"max_attempts"`
	// RunAfter: a pending job is not assigned before this time (retry backoff).
	RunAfter       time.Time  `json:"run_after"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	QueuedAt       *time.Time `json:"queued_at,omitempty"`
	StartedAt      *time.Time `json:"started_at,omitempty"`
	FinishedAt     *time.Time `json:"finished_at,omitempty"`
	LastError      string     `json:"last_error,omitempty"`
	ErrorClass     string     `json:"error_class,omitempty"`
	ParentID       int64      `json:"parent_id,omitempty"` // 0 for a submitted job
	CrawlID        int64      `json:"crawl_id"`            // the root job of its crawl (its own id for a root)
	Depth          int        `json:"depth"`
}

// Timings are the phases of one render, in milliseconds.
type Timings struct {
	NavigationMS int64 `json:"navigation_ms"`
	WaitMS       int64 `json:"wait_ms"`
	ActionsMS    int64 `json:"actions_ms"`
	ExtractMS    int64 `json:"extract_ms"`
	TotalMS      int64 `json:"total_ms"`
}

// Result is what a completed job produced. Exactly one exists per completed job.
type Result struct {
	JobID    int64  `json:"job_id"`
	NodeID   string `json:"node_id"`
	FinalURL string `json:"final_url"`
	Status   int    `json:"status"` // HTTP status of the main document
	Title    string `json:"title"`
	// Data is the JSON value of the spec's extract expression (nil without one).
	Data json.RawMessage `json:"data,omitempty"`
	HTML string          `json:"html,omitempty"`
	// HTMLTruncated says HTML was cut at the node's cap (2 MiB); a page of
	// exactly that size is not.
	HTMLTruncated bool     `json:"html_truncated,omitempty"`
	Screenshot    []byte   `json:"screenshot,omitempty"` // PNG
	ConsoleErrors []string `json:"console_errors,omitempty"`
	Timings       Timings  `json:"timings"`
	// Links are the followable links found on the page (spec.follow); the
	// queue turns them into child jobs.
	Links []string `json:"links,omitempty"`
	// LinksOverLimit counts links the page had beyond a limit —
	// follow.max_links, MaxCollectedLinks, or MaxURLLength (a link longer
	// than a job's URL may be) — which were not followed.
	// A node reports those it did not collect; the queue adds those past
	// max_links when it completes the job.
	LinksOverLimit int `json:"links_over_limit"`
	// Blobs say where HTML and Screenshot went when the node keeps them in a
	// blob store: those fields are then empty here.
	Blobs     []BlobRef `json:"blobs,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// The kinds of blob a result can have.
const (
	BlobHTML       = "html"
	BlobScreenshot = "screenshot"
)

// BlobRef is one result blob kept outside the database.
type BlobRef struct {
	Kind   string `json:"kind"` // BlobHTML or BlobScreenshot
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // hex
}

// Blob returns the result's blob of that kind, if it has one.
func (r Result) Blob(kind string) (BlobRef, bool) {
	for _, b := range r.Blobs {
		if b.Kind == kind {
			return b, true
		}
	}
	return BlobRef{}, false
}

// NodeInfo is what a node says about itself when it registers.
type NodeInfo struct {
	ID       string // see ValidateNodeID
	Hostname string
	// Capacity is the node's concurrent Chrome sessions, 1..1000. The node's
	// supervisor owns the number; the queue stores what the node reports.
	Capacity int
	Version  string
	// PID is the registering process's id on Hostname, so that a later
	// process on the same host can tell whether this one is gone.
	PID int
	// Replaces is an incarnation of the id the caller knows to be dead (its
	// process is gone: same host, pid not running). Register takes the id
	// over from it even while its last heartbeat is fresh; from any other
	// live incarnation it does not.
	Replaces int64

	// ChromeRecycleJobs and ExitAfterJobs are the node's recycling
	// thresholds (0: off), stored so that readers show the node's own.
	ChromeRecycleJobs int
	ExitAfterJobs     int
}

// NodeLoad is what a node reports with each heartbeat.
type NodeLoad struct {
	CPUPercent            float64 `json:"cpu_percent"`
	MemUsedBytes          int64   `json:"mem_used_bytes"`
	MemTotalBytes         int64   `json:"mem_total_bytes"`
	ChromePSSBytes        int64   `json:"chrome_pss_bytes"` // proportional set size of the Chrome process tree
	BusySessions          int     `json:"busy_sessions"`
	JobsSinceChromeStart  int64   `json:"jobs_since_chrome_start"`
	JobsSinceProcessStart int64   `json:"jobs_since_process_start"`
	ChromeRestarts        int64   `json:"chrome_restarts"`
	// Chrome retirements and losses of the current process so far, which
	// the queue adds into the node's lifetime counters as they grow.
	ChromeRecycles       int64 `json:"chrome_recycles"`
	ChromeMemoryRecycles int64 `json:"chrome_memory_recycles"`
	ChromeCrashes        int64 `json:"chrome_crashes"`
	// What became of the current process's wiped contexts so far (see
	// Counters.ContextsReused), added into the lifetime counters likewise.
	ContextsReused   int64 `json:"contexts_reused"`
	ContextsReplaced int64 `json:"contexts_replaced"`

	// ChromePSSMinBytes and ChromePSSMaxBytes are the range of the Chrome
	// PSS the node saw since its previous heartbeat: a recycle's peak and
	// trough, which one value per heartbeat misses. Both 0: no range,
	// ChromePSSBytes stands for it. In a Node read back: the range since
	// the dashboard's last sample.
	ChromePSSMinBytes int64 `json:"chrome_pss_min_bytes"`
	ChromePSSMaxBytes int64 `json:"chrome_pss_max_bytes"`
}

// Node is a consumer node as the queue sees it.
type Node struct {
	ID       string    `json:"id"`
	Hostname string    `json:"hostname"`
	Version  string    `json:"version"`
	Capacity int       `json:"capacity"`
	State    NodeState `json:"state"`
	// Incarnation numbers the node's current registration: every Register
	// takes a new one, and what an older one sends is refused (ErrFenced).
	Incarnation     int64     `json:"incarnation"`
	PID             int       `json:"pid"`
	ProcessRestarts int64     `json:"process_restarts"`
	Load            NodeLoad  `json:"load"`
	RegisteredAt    time.Time `json:"registered_at"`
	StartedAt       time.Time `json:"started_at"`
	HeartbeatAt     time.Time `json:"heartbeat_at"`
	// HeartbeatAge is how long ago HeartbeatAt was by the database's clock,
	// which stamped it and by which the rescue judges it (filled by
	// ListNodes): a reader's own clock may be skewed.
	HeartbeatAge   time.Duration `json:"-"`
	StateChangedAt time.Time     `json:"state_changed_at"`
	// Queued and Processing count the jobs the node holds now (filled by ListNodes).
	Queued     int `json:"queued"`
	Processing int `json:"processing"`
	// Lifetime counts the node id's events across its process restarts.
	Lifetime Counters `json:"lifetime"`

	// The node's recycling thresholds, as it reported them (0: off).
	ChromeRecycleJobs int `json:"chrome_recycle_jobs"`
	ExitAfterJobs     int `json:"exit_after_jobs"`
}
