package farm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/farm/blobstore"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// These tests run the consumer's own logic against fakeQueue: no
// PostgreSQL, no Chrome. What needs a rendering Chrome (Run end to end, the
// render itself, egress checks) is covered by the integration tests.

func TestUnitCompleterRoutesEachOutcome(t *testing.T) {
	tooLarge := &jobqueue.ResultError{Class: jobqueue.ClassResultTooLarge, Msg: "data is 2 MiB, over 1 MiB"}
	invalid := &jobqueue.ResultError{Class: jobqueue.ClassResultInvalid, Msg: "data is not JSON"}
	finished := &jobqueue.FinishedError{JobID: 2, State: jobqueue.StateCanceled}
	fenced := &jobqueue.FencedError{NodeID: "unit-node", Incarnation: 1, Current: 2}
	for _, tc := range []struct {
		name          string
		outcomes      map[int64]error
		manyErrs      []error
		wantCompleted []int64
		wantFails     []fakeFail // text is not compared
		wantFenced    bool
	}{
		{name: "all written", wantCompleted: []int64{1, 2, 3}},
		{name: "one too large fails alone", outcomes: map[int64]error{2: tooLarge},
			wantCompleted: []int64{1, 3}, wantFails: []fakeFail{{id: 2, class: jobqueue.ClassResultTooLarge}}},
		{name: "one invalid fails alone", outcomes: map[int64]error{3: invalid},
			wantCompleted: []int64{1, 2}, wantFails: []fakeFail{{id: 3, class: jobqueue.ClassResultInvalid}}},
		{name: "already finished is dropped", outcomes: map[int64]error{2: finished},
			wantCompleted: []int64{1, 3}},
		{name: "whole batch unreachable then written", manyErrs: []error{errors.New("connection refused")},
			wantCompleted: []int64{1, 2, 3}},
		{name: "fenced stops the node", outcomes: map[int64]error{1: fenced},
			wantCompleted: []int64{2, 3}, wantFenced: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fq := &fakeQueue{complete: tc.outcomes, manyErrs: tc.manyErrs, failState: jobqueue.StateFailed}
			c := fakeConsumer(t, fq, 6, Off)
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { c.completer(ctx) })
			var jobs sync.WaitGroup
			for _, j := range fakeJobs(3) {
				jobs.Go(func() {
					c.complete(ctx, j, zap.NewNop(), &browser.Result{FinalURL: j.Spec.URL, Status: 200}, 0)
				})
			}
			jobs.Wait()
			stop()
			wg.Wait()

			got := fq.snapshot()
			slices.Sort(got.completed)
			if !slices.Equal(got.completed, tc.wantCompleted) {
				t.Errorf("completed %v, want %v", got.completed, tc.wantCompleted)
			}
			for i := range got.fails {
				got.fails[i].text = ""
			}
			if !slices.Equal(got.fails, tc.wantFails) {
				t.Errorf("fails %+v, want %+v", got.fails, tc.wantFails)
			}
			if st := c.Stats(); st.Completed != int64(len(tc.wantCompleted)) || st.Failed != int64(len(tc.wantFails)) {
				t.Errorf("stats %+v, want %d completed, %d failed", st, len(tc.wantCompleted), len(tc.wantFails))
			}
			if c.isFenced() != tc.wantFenced {
				t.Errorf("fenced = %v, want %v", c.isFenced(), tc.wantFenced)
			}
			if tc.manyErrs != nil && got.manyCalls < 2 {
				t.Errorf("CompleteMany called %d times; the refused batch was not retried", got.manyCalls)
			}
		})
	}
}

// TestUnitCompleterAnswersEachJobItsOwnOutcome: renders waiting together
// go in one CompleteMany, and each job hears its own outcome back.
func TestUnitCompleterAnswersEachJobItsOwnOutcome(t *testing.T) {
	tooLarge := &jobqueue.ResultError{Class: jobqueue.ClassResultTooLarge, Msg: "over the cap"}
	fq := &fakeQueue{complete: map[int64]error{1: tooLarge}}
	c := fakeConsumer(t, fq, 6, Off)
	// Three renders already waiting when the completer looks: one batch.
	c.completions = make(chan completion, 3)
	replies := make([]chan error, 3)
	for i := range replies {
		replies[i] = make(chan error, 1)
		c.completions <- completion{c: fq.Completion(int64(i+1), jobqueue.Result{}), reply: replies[i]}
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.completer(ctx) })
	var got []error
	for _, r := range replies {
		got = append(got, <-r)
	}
	stop()
	wg.Wait()
	if calls := fq.snapshot().manyCalls; calls != 1 {
		t.Errorf("%d CompleteMany calls for three waiting renders, want 1", calls)
	}
	if !errors.Is(got[0], tooLarge) || got[1] != nil || got[2] != nil {
		t.Errorf("replies %v, want [%v nil nil]", got, tooLarge)
	}
}

// TestUnitFailKeepsTheAnswer: a failed attempt that came with what the page
// answered hands it to the queue with the failure (FailKeeping, which keeps
// it if the job fails for good), its credentials redacted; an attempt given
// back hands none.
func TestUnitFailKeepsTheAnswer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		res        *browser.Result
		wantClass  string
		wantRetry  bool
		wantBack   bool
		wantAnswer bool
	}{
		{name: "http error with an answer", err: &browser.Error{Class: browser.ClassHTTP, Err: errors.New("status 404")},
			res: &browser.Result{Status: 404, FinalURL: "https://u:secret@example.com/x"}, wantClass: browser.ClassHTTP, wantAnswer: true},
		{name: "retriable with an answer", err: &browser.Error{Class: browser.ClassHTTP, Retriable: true, Err: errors.New("status 503")},
			res: &browser.Result{Status: 503, FinalURL: "https://u:secret@example.com/x"}, wantClass: browser.ClassHTTP, wantRetry: true, wantAnswer: true},
		{name: "without an answer", err: &browser.Error{Class: browser.ClassHTTP, Err: errors.New("status 500")},
			wantClass: browser.ClassHTTP},
		{name: "given back", err: nodeFault{&browser.Error{Class: browser.ClassCanceled, Retriable: true, Err: errors.New("drain")}},
			res: &browser.Result{Status: 200}, wantClass: browser.ClassCanceled, wantRetry: true, wantBack: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fq := &fakeQueue{failState: jobqueue.StateFailed}
			c := fakeConsumer(t, fq, 6, Off)
			j := jobqueue.Job{ID: 7, Spec: jobqueue.Spec{URL: "https://u:secret@example.com/x"}}
			c.failWithResult(j, zap.NewNop(), tc.err, 0, tc.res)
			got := fq.snapshot()
			if len(got.fails) != 1 {
				t.Fatalf("fails %+v, want one", got.fails)
			}
			f := got.fails[0]
			if f.id != 7 || f.class != tc.wantClass || f.retriable != tc.wantRetry || f.givenBack != tc.wantBack {
				t.Fatalf("fail %+v, want job 7 class %q retriable %v given back %v", f, tc.wantClass, tc.wantRetry, tc.wantBack)
			}
			if (f.answer != nil) != tc.wantAnswer {
				t.Fatalf("answer %+v, want one: %v", f.answer, tc.wantAnswer)
			}
			if tc.wantAnswer {
				if f.answer.Status != tc.res.Status {
					t.Errorf("answer %+v, want status %d", f.answer, tc.res.Status)
				}
				if f.answer.FinalURL == tc.res.FinalURL || strings.Contains(f.answer.FinalURL, "secret") {
					t.Errorf("answer's final URL %q keeps the credentials", f.answer.FinalURL)
				}
			}
		})
	}
}

// TestUnitRenderFailure: a failure of the Chrome before the job's page was
// asked for gives the attempt back, unless the job's last attempt ended
// with a lost Chrome too; every other render failure is charged.
func TestUnitRenderFailure(t *testing.T) {
	lost := func(class string, before bool) error {
		err := fmt.Errorf("render: %w", &browser.Error{Class: class, Retriable: true, Err: errors.New("chrome 41")})
		if before {
			err = browser.MarkBeforePage(err)
		}
		return err
	}
	for _, tc := range []struct {
		name      string
		err       error
		lastClass string // the class of the job's previous attempt
		wantBack  bool
	}{
		{"hung before the page", lost(browser.ClassUnresponsive, true), "", true},
		{"crashed before the page", lost(browser.ClassCrashed, true), browser.ClassTimeout, true},
		{"hung before the page again", lost(browser.ClassUnresponsive, true), browser.ClassUnresponsive, false},
		{"hung before the page after a crash", lost(browser.ClassUnresponsive, true), browser.ClassCrashed, false},
		{"crashed before the page after a blob store failure", lost(browser.ClassCrashed, true), ClassBlobStore, true},
		{"hung with the page", lost(browser.ClassUnresponsive, false), "", false},
		{"crashed with the page", lost(browser.ClassCrashed, false), "", false},
		{"timeout", &browser.Error{Class: browser.ClassTimeout, Retriable: true, Err: errors.New("slow")}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fq := &fakeQueue{failState: jobqueue.StatePending}
			c := fakeConsumer(t, fq, 6, Off)
			j := jobqueue.Job{ID: 7, Attempts: 2, ErrorClass: tc.lastClass, Spec: jobqueue.Spec{URL: "https://example.com/"}}
			c.failWithResult(j, zap.NewNop(), renderFailure(j, tc.err), 0, nil)
			got := fq.snapshot()
			if len(got.fails) != 1 {
				t.Fatalf("fails %+v, want one", got.fails)
			}
			if f := got.fails[0]; f.givenBack != tc.wantBack || f.class != browser.ClassOf(tc.err) || !f.retriable {
				t.Fatalf("fail %+v, want class %q, retriable, given back %v", f, browser.ClassOf(tc.err), tc.wantBack)
			}
			// Counted as what was recorded: a given-back attempt is no failure.
			if st, back := c.Stats(), map[bool]int64{true: 1}[tc.wantBack]; st.GivenBack != back || st.Failed != 1-back {
				t.Errorf("stats %+v, want %d given back, %d failed", st, back, 1-back)
			}
		})
	}
}

func TestUnitHeartbeatRenewsOnlyLiveJobs(t *testing.T) {
	fq := &fakeQueue{}
	c := fakeConsumer(t, fq, 6, Off)
	c.live[3], c.live[5] = &liveJob{stop: func(error) {}}, &liveJob{stop: func(error) {}}
	c.heartbeat(context.Background())
	delete(c.live, 3) // its report was given up on: its lease must run out
	c.heartbeat(context.Background())

	got := fq.snapshot()
	if len(got.beats) != 2 {
		t.Fatalf("%d heartbeats, want 2", len(got.beats))
	}
	slices.Sort(got.beats[0])
	if !slices.Equal(got.beats[0], []int64{3, 5}) || !slices.Equal(got.beats[1], []int64{5}) {
		t.Errorf("renewed %v, want [[3 5] [5]]", got.beats)
	}
	if c.isFenced() {
		t.Error("fenced after accepted heartbeats")
	}
}

// TestUnitHeartbeatStopsJobsGone: a job the heartbeat says is no longer
// the node's (canceled meanwhile) stops at once, and records nothing: the
// queue holds no attempt of it here to fail. The others go on.
func TestUnitHeartbeatStopsJobsGone(t *testing.T) {
	fq := &fakeQueue{gone: map[int64]bool{1: true}}
	c := fakeConsumer(t, fq, 6, Off)
	jobsCtx, stopJobs := context.WithCancelCause(context.Background())
	var jobs sync.WaitGroup
	for _, j := range fakeJobs(2) {
		c.start(jobsCtx, &jobs, j) // each waits for a slot: no Chrome runs
	}
	c.heartbeat(context.Background())
	awaitHeld(t, c, 1)
	c.mu.Lock()
	_, live1 := c.live[1]
	c.mu.Unlock()
	if live1 {
		t.Error("the job gone is still live")
	}
	if got := fq.snapshot(); len(got.fails) != 0 {
		t.Errorf("outcomes recorded %+v, want none", got.fails)
	}
	stopJobs(errors.New("test over"))
	jobs.Wait()
}

// TestUnitJobsStoppedByTheNodesStop: jobs a fenced process's drain stops
// record nothing (the node's jobs are the id's new process's); jobs the
// drain timeout stops are given back, not charged.
func TestUnitJobsStoppedByTheNodesStop(t *testing.T) {
	fence := &jobqueue.FencedError{NodeID: "unit-node", Incarnation: 1, Current: 2}
	for _, tc := range []struct {
		name      string
		cause     error
		wantFails int
	}{
		{"fenced", &browser.Error{Class: browser.ClassCanceled, Retriable: true, Err: fence}, 0},
		{"drain timeout", errDrainCanceled, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fq := &fakeQueue{failState: jobqueue.StatePending}
			c := fakeConsumer(t, fq, 6, Off)
			jobsCtx, stopJobs := context.WithCancelCause(context.Background())
			var jobs sync.WaitGroup
			for _, j := range fakeJobs(2) {
				c.start(jobsCtx, &jobs, j) // each waits for a slot: no Chrome runs
			}
			stopJobs(tc.cause)
			jobs.Wait()
			got := fq.snapshot()
			if len(got.fails) != tc.wantFails {
				t.Fatalf("outcomes recorded %+v, want %d", got.fails, tc.wantFails)
			}
			for _, f := range got.fails {
				if !f.givenBack || f.class != browser.ClassCanceled {
					t.Errorf("outcome %+v, want canceled and given back", f)
				}
			}
		})
	}
}

// TestUnitNodeStopped: only a failure that is the drain timeout's cancel
// is the node's; a render that failed by itself while the drain canceled
// its context is the job's.
func TestUnitNodeStopped(t *testing.T) {
	drained, cancel := context.WithCancelCause(context.Background())
	cancel(errDrainCanceled)
	other, cancel2 := context.WithCancelCause(context.Background())
	cancel2(errors.New("test"))
	timeout := &browser.Error{Class: browser.ClassTimeout, Retriable: true, Err: context.DeadlineExceeded}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"the drain's cancel", drained, errDrainCanceled, true},
		{"the drain's cancel, wrapped", drained, fmt.Errorf("render: %w", errDrainCanceled), true},
		{"a call the drain canceled", drained, fmt.Errorf("the job's proxy: %w", context.Canceled), true},
		{"its own timeout during the drain", drained, timeout, false},
		{"running on", context.Background(), timeout, false},
		{"another cancel", other, fmt.Errorf("x: %w", context.Canceled), false},
	} {
		if got := nodeStopped(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: nodeStopped = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestUnitJobClaimedAgainKeepsItsLease: a job taken back from the node and
// given to it again is claimed while its earlier attempt's goroutine still
// ends. The earlier one's end must neither drop the newer attempt from the
// leases the heartbeat renews nor record anything against it.
func TestUnitJobClaimedAgainKeepsItsLease(t *testing.T) {
	fq := &fakeQueue{}
	c := fakeConsumer(t, fq, 6, Off)
	jobsCtx, stopJobs := context.WithCancelCause(context.Background())
	var jobs sync.WaitGroup
	j := fakeJobs(1)[0]
	c.start(jobsCtx, &jobs, j) // waits for a slot: no Chrome runs
	c.mu.Lock()
	earlier := c.live[j.ID]
	c.mu.Unlock()
	j.Attempts++
	c.start(jobsCtx, &jobs, j)
	earlier.stop(errJobGone)
	awaitHeld(t, c, 1)
	c.heartbeat(context.Background())
	got := fq.snapshot()
	if len(got.beats) != 1 || !slices.Equal(got.beats[0], []int64{j.ID}) {
		t.Errorf("renewed %v, want [[%d]]: the newer attempt's lease", got.beats, j.ID)
	}
	if len(got.fails) != 0 {
		t.Errorf("outcomes recorded %+v, want none", got.fails)
	}
	stopJobs(errors.New("test over"))
	jobs.Wait()
}

// awaitHeld waits until the consumer holds n claimed jobs. Nothing else
// reads busyChanged in these tests: a job's end signals it.
func awaitHeld(t *testing.T, c *Consumer, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		held := c.held
		c.mu.Unlock()
		if held == n {
			return
		}
		select {
		case <-c.busyChanged:
		case <-timeout:
			t.Fatalf("%d jobs held after 30 s, want %d", held, n)
		}
	}
}

func TestUnitFencedHeartbeatStopsTheClaimLoop(t *testing.T) {
	fq := &fakeQueue{beatErr: &jobqueue.FencedError{NodeID: "unit-node", Incarnation: 1, Current: 2}, jobs: fakeJobs(3)}
	c := fakeConsumer(t, fq, 6, Off)
	c.heartbeat(context.Background())
	if !c.isFenced() || !errors.Is(c.fenceCause, jobqueue.ErrFenced) {
		t.Fatalf("fenced %v, cause %v", c.isFenced(), c.fenceCause)
	}
	if r := runLoop(t, c); r != stopFenced {
		t.Errorf("loop stopped for %v, want fenced", r)
	}
	if got := fq.snapshot(); len(got.claims) != 0 {
		t.Errorf("a fenced node claimed %v", got.claims)
	}
}

func TestUnitFencedClaimStopsTheClaimLoop(t *testing.T) {
	fq := &fakeQueue{claimErr: &jobqueue.FencedError{NodeID: "unit-node", Incarnation: 1, Current: 2}}
	c := fakeConsumer(t, fq, 6, Off)
	if r := runLoop(t, c); r != stopFenced {
		t.Errorf("loop stopped for %v, want fenced", r)
	}
	if got := fq.snapshot(); len(got.claims) != 1 || !c.isFenced() {
		t.Errorf("claims %v, fenced %v: want one refused claim, then none", got.claims, c.isFenced())
	}
}

// TestUnitClaimLoopStopsAtExitAfterJobs: the loop claims no more than the
// free slots and the jobs the process may still start, and stops claiming
// once the last of those is claimed.
func TestUnitClaimLoopStopsAtExitAfterJobs(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		capacity, exitAfter, perClaim int
		queued                        int
		wantClaims                    []int
	}{
		{name: "exit before capacity", capacity: 6, exitAfter: 2, queued: 10, wantClaims: []int{2}},
		{name: "exit at capacity", capacity: 3, exitAfter: 3, queued: 10, wantClaims: []int{3}},
		{name: "trickle: each claim asks only what is left", capacity: 6, exitAfter: 4, perClaim: 1, queued: 10,
			wantClaims: []int{4, 3, 2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fq := &fakeQueue{jobs: fakeJobs(tc.queued), perClaim: tc.perClaim, failState: jobqueue.StateQueued}
			c := fakeConsumer(t, fq, tc.capacity, tc.exitAfter)
			c.cfg.PollInterval = 1 // a short claim is followed by the next poll at once
			if r := runLoop(t, c); r != stopExitDue {
				t.Errorf("loop stopped for %v, want exit-after-jobs", r)
			}
			got := fq.snapshot()
			if !slices.Equal(got.claims, tc.wantClaims) {
				t.Errorf("claims asked %v, want %v", got.claims, tc.wantClaims)
			}
			// The claimed jobs never got a slot (no Chrome): they were
			// handed back as retriable with their attempt given back, not
			// lost.
			if len(got.fails) != tc.exitAfter {
				t.Errorf("%d jobs handed back, want %d", len(got.fails), tc.exitAfter)
			}
			for _, f := range got.fails {
				if !f.retriable || !f.givenBack || f.class != browser.ClassCanceled {
					t.Errorf("handed back %+v, want retriable %q, attempt given back", f, browser.ClassCanceled)
				}
			}
		})
	}
}

// TestUnitClaimAfterALostAnswerUnclaimsFirst: a claim that failed on the
// way may have committed, leaving jobs processing on the node that nobody
// runs. Before it claims again the loop hands back, through Unclaim, every
// job processing here but the ones it started; then it claims as usual.
func TestUnitClaimAfterALostAnswerUnclaimsFirst(t *testing.T) {
	fq := &fakeQueue{jobs: fakeJobs(10), perClaim: 2, claimErrs: []error{nil, errors.New("connection reset by peer")},
		failState: jobqueue.StateQueued}
	c := fakeConsumer(t, fq, 6, 4)
	c.cfg.PollInterval = 1
	if r := runLoop(t, c); r != stopExitDue {
		t.Errorf("loop stopped for %v, want exit-after-jobs", r)
	}
	got := fq.snapshot()
	if !slices.Equal(got.claims, []int{4, 2, 2}) {
		t.Errorf("claims asked %v, want [4 2 2]", got.claims)
	}
	want := []fakeUnclaim{{keep: []int64{1, 2}, afterClaims: 2}}
	if len(got.unclaims) != 1 || !slices.Equal(got.unclaims[0].keep, want[0].keep) || got.unclaims[0].afterClaims != 2 {
		t.Errorf("unclaims %+v, want %+v: once, before the third claim, keeping the jobs started", got.unclaims, want)
	}
}

func TestUnitClaimable(t *testing.T) {
	for _, tc := range []struct {
		capacity, exitAfter, unacquired int
		wantFree, wantRemaining         int
	}{
		{capacity: 6, exitAfter: 80, wantFree: 6, wantRemaining: 80},
		{capacity: 6, exitAfter: 80, unacquired: 4, wantFree: 2, wantRemaining: 76},
		{capacity: 6, exitAfter: 80, unacquired: 6, wantFree: 0, wantRemaining: 74},
		{capacity: 6, exitAfter: 3, wantFree: 3, wantRemaining: 3},
		{capacity: 6, exitAfter: 3, unacquired: 3, wantFree: 0, wantRemaining: 0},
		{capacity: 2, exitAfter: Off, unacquired: 1, wantFree: 1, wantRemaining: math.MaxInt - 1},
	} {
		c := fakeConsumer(t, &fakeQueue{}, tc.capacity, tc.exitAfter)
		c.unacquired = tc.unacquired
		free, remaining := c.claimable()
		if free != tc.wantFree || remaining != tc.wantRemaining {
			t.Errorf("capacity %d, exit after %d, %d unacquired: free %d remaining %d, want %d %d",
				tc.capacity, tc.exitAfter, tc.unacquired, free, remaining, tc.wantFree, tc.wantRemaining)
		}
	}
}

func TestUnitHandBack(t *testing.T) {
	for _, tc := range []struct {
		name         string
		releaseErr   error
		releaseFails int
		claimLost    bool
		wantReleases int
		wantUnclaims int
		wantFenced   bool
	}{
		{name: "released", wantReleases: 1},
		{name: "release refused: fenced", releaseErr: &jobqueue.FencedError{NodeID: "unit-node", Incarnation: 1, Current: 2},
			wantReleases: 1, wantFenced: true},
		{name: "release failed once: retried", releaseErr: errors.New("connection reset"), releaseFails: 1, wantReleases: 2},
		// A claim whose answer was lost as the node stopped: the jobs it
		// may have taken are given back with the unstarted ones.
		{name: "a claim's answer lost", claimLost: true, wantReleases: 1, wantUnclaims: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fq := &fakeQueue{releaseErr: tc.releaseErr, releaseFails: tc.releaseFails, jobs: fakeJobs(2)}
			c := fakeConsumer(t, fq, 6, Off)
			c.claimLost = tc.claimLost
			c.handBack(stopSignal)
			got := fq.snapshot()
			if !slices.Equal(got.states, []jobqueue.NodeState{jobqueue.NodeDraining}) || got.released != tc.wantReleases {
				t.Errorf("states %v, released %d times; want draining, then %d releases", got.states, got.released, tc.wantReleases)
			}
			if len(got.unclaims) != tc.wantUnclaims {
				t.Errorf("unclaims %+v, want %d", got.unclaims, tc.wantUnclaims)
			}
			if c.isFenced() != tc.wantFenced {
				t.Errorf("fenced = %v, want %v", c.isFenced(), tc.wantFenced)
			}
		})
	}
}

func TestUnitRegisterTakesOverOnlyADeadProcessOfThisHost(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := dead.ProcessState.Pid()
	if browser.ProcessRuns(deadPID) {
		t.Skipf("pid %d was reused at once", deadPID)
	}
	inUse := func(host string, pid int) error {
		return &jobqueue.NodeInUseError{NodeID: "unit-node", Hostname: host, PID: pid, Incarnation: 4}
	}
	for _, tc := range []struct {
		name      string
		holder    error
		wantCalls int
		wantErr   bool
	}{
		{name: "free id", wantCalls: 1},
		{name: "dead process of this host", holder: inUse("unit-host", deadPID), wantCalls: 2},
		{name: "live process of this host", holder: inUse("unit-host", 1), wantCalls: 1, wantErr: true},
		{name: "process of another host", holder: inUse("other-host", deadPID), wantCalls: 1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fq := &fakeQueue{}
			if tc.holder != nil {
				fq.register = []registerAnswer{{err: tc.holder}}
			}
			c := fakeConsumer(t, fq, 6, Off)
			_, _, err := c.register(context.Background())
			if (err != nil) != tc.wantErr {
				t.Fatalf("register: %v, want error %v", err, tc.wantErr)
			}
			got := fq.snapshot()
			if len(got.registered) != tc.wantCalls {
				t.Fatalf("%d registrations, want %d", len(got.registered), tc.wantCalls)
			}
			if tc.wantCalls == 2 && got.registered[1].Replaces != 4 {
				t.Errorf("takeover replaces incarnation %d, want 4", got.registered[1].Replaces)
			}
		})
	}
}

// runLoop runs the claim loop in poll-only mode until it stops, then ends
// the jobs it started (they wait in Acquire: no Chrome) and returns why it
// stopped.
func runLoop(t *testing.T, c *Consumer) stopReason {
	t.Helper()
	return runLoopWoken(t.Context(), c, nil)
}

// runLoopWoken is runLoop until ctx ends, woken by wake.
func runLoopWoken(ctx context.Context, c *Consumer, wake <-chan jobqueue.Notification) stopReason {
	ready := make(chan struct{})
	close(ready)
	jobsCtx, cancelJobs := context.WithCancelCause(context.Background())
	var jobs sync.WaitGroup
	r := c.loop(ctx, wakeups{ready: ready, c: wake}, make(chan struct{}), jobsCtx, &jobs)
	cancelJobs(&browser.Error{Class: browser.ClassCanceled, Retriable: true, Err: errors.New("test over")})
	jobs.Wait()
	return r
}

// TestUnitHealthWatchesTheClaimLoop: a claim loop held in a call (a Claim
// that does not return) makes the node unhealthy once it has not begun a
// turn for its poll interval plus healthLoopGrace, and not before; a turn
// clears it, and a loop that has ended is no stall.
func TestUnitHealthWatchesTheClaimLoop(t *testing.T) {
	entered, unblock := make(chan struct{}, 1), make(chan struct{})
	fq := &fakeQueue{claimEntered: entered, claimBlock: unblock}
	c := fakeConsumer(t, fq, 6, Off)
	lastTurn := func() time.Time {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.lastTurn
	}
	grace := c.cfg.PollInterval + healthLoopGrace
	if err := c.claimLoopStalled(time.Now().Add(24 * time.Hour)); err != nil {
		t.Fatalf("no claim loop yet: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	wake := make(chan jobqueue.Notification, 1)
	stopped := make(chan stopReason, 1)
	go func() { stopped <- runLoopWoken(ctx, c, wake) }()
	claimed := func() {
		t.Helper()
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatal("no claim within 30 s")
		}
	}
	claimed()
	held := lastTurn()
	if err := c.claimLoopStalled(held.Add(grace)); err != nil {
		t.Errorf("unhealthy at the grace's end: %v", err)
	}
	if err := c.claimLoopStalled(held.Add(grace + time.Millisecond)); err == nil || !strings.Contains(err.Error(), "claim loop") {
		t.Errorf("a loop held past the grace: %v, want the claim loop named", err)
	}
	close(unblock)
	wake <- jobqueue.Notification{Payload: "1"}
	claimed() // the next turn's
	turned := lastTurn()
	if !turned.After(held) {
		t.Fatalf("the loop's turn was not marked: %v, then %v", held, turned)
	}
	if err := c.claimLoopStalled(turned.Add(grace + time.Millisecond)); err == nil {
		t.Error("no stall measured from the latest turn")
	}
	cancel()
	if r := <-stopped; r != stopSignal {
		t.Errorf("loop stopped for %v, want the signal", r)
	}
	if err := c.claimLoopStalled(time.Now().Add(24 * time.Hour)); err != nil {
		t.Errorf("a loop that ended: %v", err)
	}
}

// TestRegisterReportsThresholds: the node row gets the supervisor's
// thresholds, with the supervisor's Off as the row's 0, which the dashboard
// and the producer read as off.
func TestRegisterReportsThresholds(t *testing.T) {
	for _, tc := range []struct {
		name                string
		recycle, exitAfter  int
		wantRecycle, wantEx int
	}{
		{"defaults", 20, 80, 20, 80},
		{"exit off", 20, Off, 20, 0},
		{"both off", Off, Off, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fq := &fakeQueue{}
			c := fakeConsumer(t, fq, 6, tc.exitAfter)
			c.cfg.Supervisor.ChromeRecycleJobs = tc.recycle
			if _, _, err := c.register(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := fq.snapshot().registered
			if len(got) != 1 || got[0].ChromeRecycleJobs != tc.wantRecycle || got[0].ExitAfterJobs != tc.wantEx {
				t.Fatalf("registered %+v, want recycle %d, exit %d", got, tc.wantRecycle, tc.wantEx)
			}
		})
	}
}

// TestUnitBlobsOfUnrecordedResults: an attempt whose result is recorded
// keeps its blobs; one whose result is not (the job finished elsewhere,
// the result refused) leaves none in the store.
func TestUnitBlobsOfUnrecordedResults(t *testing.T) {
	finished := &jobqueue.FinishedError{JobID: 2, State: jobqueue.StateCanceled}
	invalid := &jobqueue.ResultError{Class: jobqueue.ClassResultInvalid, Msg: "data is not JSON"}
	dir := t.TempDir()
	store, err := blobstore.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fq := &fakeQueue{complete: map[int64]error{2: finished, 3: invalid}, failState: jobqueue.StateFailed}
	c := fakeConsumer(t, fq, 6, Off)
	c.cfg.Blobs = store
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.completer(ctx) })
	for _, j := range fakeJobs(3) {
		c.complete(ctx, j, zap.NewNop(), &browser.Result{FinalURL: j.Spec.URL, Status: 200, HTML: fmt.Sprintf("<p>%d</p>", j.ID)}, 0)
	}
	stop()
	wg.Wait()
	var left []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			left = append(left, filepath.ToSlash(rel))
		}
		return nil
	})
	if len(left) != 1 || !strings.HasPrefix(left[0], "jobs/1/") {
		t.Errorf("blobs left %v, want job 1's only", left)
	}
}

// failingStore is a blob store that refuses every Put while down is set,
// and says on failedProbes when it refused a probe.
type failingStore struct {
	blobstore.Store
	down         atomic.Bool
	failedProbes chan struct{}
}

func (s *failingStore) Put(ctx context.Context, key string, data []byte, contentType string) error {
	if s.down.Load() {
		if strings.HasPrefix(key, "probes/") {
			s.failedProbes <- struct{}{}
		}
		return errors.New("AccessDenied")
	}
	return s.Store.Put(ctx, key, data, contentType)
}

// TestUnitBlobStoreDown: a result whose blobs cannot be stored gives its
// attempt back (not twice in a row for the same job), and the node takes no
// job — handing its queued ones back — until the store takes a blob again.
func TestUnitBlobStoreDown(t *testing.T) {
	dir, err := blobstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := &failingStore{Store: dir, failedProbes: make(chan struct{}, 1)}
	store.down.Store(true)
	fq := &fakeQueue{failState: jobqueue.StatePending}
	c := fakeConsumer(t, fq, 6, Off)
	c.cfg.Blobs = store
	jobs := fakeJobs(2)
	jobs[1].ErrorClass = ClassBlobStore // its previous attempt failed the same way
	for _, j := range jobs {
		c.complete(t.Context(), j, zap.NewNop(), &browser.Result{FinalURL: j.Spec.URL, Status: 200, HTML: "<p>x</p>"}, 0)
	}
	got := fq.snapshot()
	if len(got.fails) != 2 || got.fails[0].class != ClassBlobStore || !got.fails[0].givenBack || !got.fails[0].retriable ||
		got.fails[1].givenBack || !got.fails[1].retriable {
		t.Fatalf("outcomes %+v, want job 1 given back and job 2 charged, both retriable %s", got.fails, ClassBlobStore)
	}
	if !c.blobsDown.Load() {
		t.Fatal("the node did not note the store down")
	}

	// The claim loop holds; once the store works, a probe lets it claim.
	fq.mu.Lock()
	fq.jobs = fakeJobs(1)
	fq.mu.Unlock()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	jobsCtx, stopJobs := context.WithCancel(context.Background())
	defer func() { stopJobs(); wg.Wait() }()
	done := make(chan stopReason, 1)
	go func() {
		ready := make(chan struct{})
		close(ready)
		done <- c.loop(ctx, wakeups{ready: ready}, make(chan struct{}), jobsCtx, &wg)
	}()
	// The first probe (after blobProbeFirst) fails: the loop hands the
	// queued jobs back again and claims nothing.
	<-store.failedProbes
	if got := fq.snapshot(); len(got.claims) != 0 || got.released < 1 {
		t.Fatalf("while the store fails: claims %v, releases %d; want none and at least one", got.claims, got.released)
	}
	// Waiting for the store is no stall: a restart would not mend it.
	if err := c.claimLoopStalled(time.Now().Add(24 * time.Hour)); err != nil {
		t.Errorf("while the store fails: %v", err)
	}
	store.down.Store(false)
	deadline := time.Now().Add(30 * time.Second)
	for len(fq.snapshot().claims) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no claim 30s after the store recovered")
		}
		time.Sleep(time.Millisecond)
	}
	if c.blobsDown.Load() {
		t.Error("the node claimed with the store still noted down")
	}
	if got := fq.snapshot(); got.released < 2 {
		t.Errorf("%d releases, want one per failed probe and one at the start", got.released)
	}
	cancel()
	<-done
}

// TestMessageBound: a node reads Chrome's answers up to the browser's
// default bound, and up to what its extract cap lets a value be, escaped.
func TestMessageBound(t *testing.T) {
	for _, tc := range []struct {
		dataBytes, screenshotBytes int
		want                       int
	}{
		{0, 0, browser.DefaultMaxMessageBytes},
		{jobqueue.DefaultMaxDataBytes, jobqueue.DefaultMaxScreenshotBytes, browser.DefaultMaxMessageBytes},
		{64 << 20, 0, 6*(64<<20) + 1<<20},
		// A 96 MiB PNG is 128 MiB of base64.
		{0, 96 << 20, 128<<20 + 1<<20},
	} {
		if got := messageBound(jobqueue.ResultLimits{DataBytes: tc.dataBytes, ScreenshotBytes: tc.screenshotBytes}); got != tc.want {
			t.Errorf("data_bytes %d, screenshot_bytes %d: bound %d, want %d", tc.dataBytes, tc.screenshotBytes, got, tc.want)
		}
	}
}
