package farm

import (
	"context"
	"slices"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/browserfarm/browserfarm/supervisor"
)

// fakeQueue is a consumerQueue and nodeIncarnation in memory: it hands out
// the jobs it holds, returns the outcomes it is told to, and records every
// call, so the consumer's own logic is tested without PostgreSQL.
type fakeQueue struct {
	mu sync.Mutex

	// scripted answers
	jobs         []jobqueue.Job  // handed out by Claim, in order
	perClaim     int             // at most this many jobs per Claim; 0: no limit
	claimErr     error           // Claim's error, when set
	claimErrs    []error         // Claim's errors, one per call, before claimErr
	complete     map[int64]error // each job's CompleteMany outcome
	manyErrs     []error         // CompleteMany's call errors, one per call, then nil
	failState    jobqueue.State  // what Fail answers
	failErr      error           // Fail's error
	beatErr      error           // HeartbeatLive's error
	releaseErr   error           // Release's error, for its first releaseFails calls (0: every call)
	releaseFails int
	stateErr     error                 // SetState's error
	register     []registerAnswer      // Register's answers, one per call
	limits       jobqueue.ResultLimits // ResultLimits
	gone         map[int64]bool        // jobs HeartbeatLive says are no longer the node's
	claimEntered chan<- struct{}       // told of every Claim call, when set (never blocks)
	claimBlock   <-chan struct{}       // Claim waits for it to close, when set, whatever its ctx

	// recorded calls
	claims     []int
	unclaims   []fakeUnclaim
	manyCalls  int
	completed  []int64
	fails      []fakeFail
	beats      [][]int64
	released   int
	states     []jobqueue.NodeState
	exits      []jobqueue.NodeLoad // Exit's final counts
	registered []jobqueue.NodeInfo
}

type fakeUnclaim struct {
	keep        []int64 // sorted
	afterClaims int     // Claim calls before it
}

type registerAnswer struct {
	node jobqueue.Node
	err  error
}

type fakeFail struct {
	id        int64
	class     string
	retriable bool
	text      string
	givenBack bool
	answer    *jobqueue.Result // FailKeeping's
}

func (f *fakeQueue) Register(_ context.Context, info jobqueue.NodeInfo) (jobqueue.Node, jobqueue.Reclaimed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registered = append(f.registered, info)
	if len(f.register) == 0 {
		return jobqueue.Node{ID: info.ID, Incarnation: int64(len(f.registered))}, jobqueue.Reclaimed{}, nil
	}
	a := f.register[0]
	f.register = f.register[1:]
	return a.node, jobqueue.Reclaimed{}, a.err
}

func (f *fakeQueue) Incarnation(jobqueue.Node) nodeIncarnation { return f }

func (f *fakeQueue) ResultLimits() jobqueue.ResultLimits { return f.limits }

func (f *fakeQueue) CompleteMany(_ context.Context, items []jobqueue.Completion) ([]jobqueue.CompleteOutcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.manyCalls++
	if len(f.manyErrs) > 0 {
		err := f.manyErrs[0]
		f.manyErrs = f.manyErrs[1:]
		if err != nil {
			return nil, err
		}
	}
	out := make([]jobqueue.CompleteOutcome, len(items))
	for i, it := range items {
		out[i] = jobqueue.CompleteOutcome{JobID: it.JobID, Err: f.complete[it.JobID]}
		if out[i].Err == nil {
			f.completed = append(f.completed, it.JobID)
		}
	}
	return out, nil
}

// Wakeups is not reached: the unit tests drive the claim loop themselves.
func (f *fakeQueue) Wakeups(string, *zap.Logger) wakeSource { return nil }

func (f *fakeQueue) Claim(_ context.Context, n int) ([]jobqueue.Job, error) {
	if f.claimEntered != nil {
		select {
		case f.claimEntered <- struct{}{}:
		default:
		}
	}
	if f.claimBlock != nil {
		<-f.claimBlock
	}
	f.mu.Lock()
	f.claims = append(f.claims, n)
	var out []jobqueue.Job
	err := f.claimErr
	if len(f.claimErrs) > 0 {
		err, f.claimErrs = f.claimErrs[0], f.claimErrs[1:]
	}
	if err == nil {
		k := min(n, len(f.jobs))
		if f.perClaim > 0 {
			k = min(k, f.perClaim)
		}
		out = append(out, f.jobs[:k]...)
		f.jobs = f.jobs[k:]
	}
	f.mu.Unlock()
	return out, err
}

func (f *fakeQueue) Unclaim(_ context.Context, keep []int64) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unclaims = append(f.unclaims, fakeUnclaim{keep: slices.Sorted(slices.Values(keep)), afterClaims: len(f.claims)})
	return nil, nil
}

func (f *fakeQueue) Fail(_ context.Context, jobID int64, errText, class string, retriable bool) (jobqueue.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails = append(f.fails, fakeFail{id: jobID, class: class, retriable: retriable, text: errText})
	return f.failState, f.failErr
}

func (f *fakeQueue) FailKeeping(_ context.Context, jobID int64, errText, class string, retriable bool, answer jobqueue.Result) (jobqueue.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails = append(f.fails, fakeFail{id: jobID, class: class, retriable: retriable, text: errText, answer: &answer})
	return f.failState, f.failErr
}

func (f *fakeQueue) GiveBack(_ context.Context, jobID int64, errText, class string) (jobqueue.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails = append(f.fails, fakeFail{id: jobID, class: class, retriable: true, text: errText, givenBack: true})
	return f.failState, f.failErr
}

func (f *fakeQueue) Completion(jobID int64, res jobqueue.Result) jobqueue.Completion {
	return jobqueue.Completion{JobID: jobID, NodeID: "fake", Incarnation: 1, Result: res}
}

func (f *fakeQueue) Release(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released++
	if f.releaseFails > 0 && f.released > f.releaseFails {
		return int64(len(f.jobs)), nil
	}
	return int64(len(f.jobs)), f.releaseErr
}

func (f *fakeQueue) SetState(_ context.Context, st jobqueue.NodeState, _ string) (jobqueue.Reclaimed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states = append(f.states, st)
	return jobqueue.Reclaimed{}, f.stateErr
}

func (f *fakeQueue) Exit(_ context.Context, _ string, final jobqueue.NodeLoad) (jobqueue.Reclaimed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states = append(f.states, jobqueue.NodeExited)
	f.exits = append(f.exits, final)
	return jobqueue.Reclaimed{}, f.stateErr
}

func (f *fakeQueue) HeartbeatLive(_ context.Context, _ jobqueue.NodeLoad, live []int64) (jobqueue.NodeState, []int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beats = append(f.beats, live)
	var gone []int64
	for _, id := range live {
		if f.gone[id] {
			gone = append(gone, id)
		}
	}
	return jobqueue.NodeActive, gone, f.beatErr
}

// snapshot returns a copy of the recorded calls, safe to read.
func (f *fakeQueue) snapshot() fakeQueue {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fakeQueue{claims: append([]int(nil), f.claims...), manyCalls: f.manyCalls,
		completed: append([]int64(nil), f.completed...), fails: append([]fakeFail(nil), f.fails...),
		beats:    append([][]int64(nil), f.beats...),
		released: f.released, states: append([]jobqueue.NodeState(nil), f.states...),
		registered: append([]jobqueue.NodeInfo(nil), f.registered...), unclaims: append([]fakeUnclaim(nil), f.unclaims...)}
}

// fakeConsumer is a Consumer over fq with a supervisor that is never run:
// its slots are counted (capacity, exit after exitAfter jobs) but no Chrome
// starts, so a claimed job waits in Acquire until its context ends. No
// egress proxy either: nothing here renders.
func fakeConsumer(t *testing.T, fq *fakeQueue, capacity, exitAfter int) *Consumer {
	t.Helper()
	cfg := DefaultConsumerConfig(nil)
	cfg.NodeID, cfg.Hostname, cfg.Capacity = "unit-node", "unit-host", capacity
	cfg.Supervisor.Capacity, cfg.Supervisor.ExitAfterJobs = capacity, exitAfter
	cfg.Logger = zap.NewNop()
	cfg.Supervisor.Logger = cfg.Logger
	cfg.Load = func(context.Context) (MachineLoad, error) { return MachineLoad{}, nil }
	sup, err := supervisor.New(cfg.Supervisor)
	if err != nil {
		t.Fatal(err)
	}
	c := newConsumer(cfg, fq, sup, cfg.Logger)
	c.inc = fq // as Run's registration sets it
	return c
}

// fakeJobs returns n jobs with ids 1..n.
func fakeJobs(n int) []jobqueue.Job {
	out := make([]jobqueue.Job, n)
	for i := range out {
		out[i] = jobqueue.Job{ID: int64(i + 1), Attempts: 1, Spec: jobqueue.Spec{URL: "https://example.com/"}}
	}
	return out
}
