package farm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/farm/blobstore"
	"github.com/browserfarm/browserfarm/internal/backoff"
	"github.com/browserfarm/browserfarm/internal/ctxtime"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// completion is one render handed to the batching completer.
type completion struct {
	c     jobqueue.Completion
	reply chan error
}

// complete hands a render to the batching completer and waits for its outcome.
func (c *Consumer) complete(ctx context.Context, j jobqueue.Job, log *zap.Logger, res *browser.Result, took time.Duration) {
	rec := ResultRecord(res)
	if c.cfg.Blobs != nil {
		// Not tied to Run's context: a render finished during a drain is
		// kept (c.reports).
		if err := blobstore.Offload(c.reports, c.cfg.Blobs, j.ID, j.Attempts, &rec); err != nil {
			c.blobsDown.Store(true)
			// The store's fault, not the job's (once: a job whose blobs
			// no store takes cannot run for ever).
			c.fail(j, log, givenBack(j, &browser.Error{Class: ClassBlobStore, Retriable: true, Err: err}, ClassBlobStore), took)
			return
		}
	}
	reply := make(chan error, 1)
	c.completions <- completion{c: c.inc.Completion(j.ID, rec), reply: reply}
	err := <-reply
	if c.cfg.Blobs != nil && err != nil && !errors.Is(err, errReport) {
		// The result was not recorded (refused, or the job is another's
		// now): nothing will point at this attempt's blobs. (After
		// errReport it may have been: they stay.)
		blobstore.Forget(c.reports, c.cfg.Blobs, rec.Blobs)
	}
	switch {
	case err == nil:
		c.mu.Lock()
		c.jobsCompleted++
		c.mu.Unlock()
		log.Debug("job completed", zap.Duration("took", took), zap.Int("status", res.Status))
	case errors.Is(err, jobqueue.ErrAlreadyFinished):
		// Canceled by a user, or finished elsewhere after its lease ran out:
		// the first outcome stands.
		log.Info("job was already finished; result dropped", zap.Error(err))
	case errors.Is(err, jobqueue.ErrFenced):
		c.noteFenced(err)
		log.Error("result refused: another process registered this node id", zap.Error(err))
	case errors.Is(err, errReport):
		log.Error("cannot record the job's result; its lease will expire and it will run again", zap.Error(err))
	default:
		// The queue refused the result itself (over a limit, not JSON, or
		// refused by the database): running the job again would produce
		// the same, so the job fails at once with the queue's class.
		class := "result"
		var re *jobqueue.ResultError
		if errors.As(err, &re) {
			class = re.Class
		}
		c.fail(j, log, &browser.Error{Class: class, Err: err}, took)
	}
}

// errReport marks a failure to reach the database while recording an outcome.
var errReport = errors.New("recording the outcome failed")

// fail records a failed attempt: retried with backoff by the queue when the
// error is retriable and attempts remain, failed at once otherwise.
func (c *Consumer) fail(j jobqueue.Job, log *zap.Logger, rerr error, took time.Duration) {
	c.failWithResult(j, log, rerr, took, nil)
}

// failWithResult is fail keeping what the page answered (res, when the
// browser returned one) as the result of a job that failed for good.
func (c *Consumer) failWithResult(j jobqueue.Job, log *zap.Logger, rerr error, took time.Duration, res *browser.Result) {
	retriable := browser.IsRetriable(rerr)
	class := browser.ClassOf(rerr)
	giveBack := errors.As(rerr, new(nodeFault))
	// The error may quote the job's URL or proxy; what is stored and
	// logged must not show their credentials.
	text := jobqueue.RedactText(rerr.Error(), j.Spec.Secrets()...)
	var answer *jobqueue.Result
	if res != nil && !giveBack {
		rec := ResultRecord(res)
		rec.FinalURL = jobqueue.RedactText(rec.FinalURL, j.Spec.Secrets()...)
		answer = &rec
	}
	var st jobqueue.State
	err := retryReport(c.reports, c.log, func(ctx context.Context) error {
		var err error
		switch {
		case giveBack:
			st, err = c.inc.GiveBack(ctx, j.ID, text, class)
		case answer != nil:
			st, err = c.inc.FailKeeping(ctx, j.ID, text, class, retriable, *answer)
		default:
			st, err = c.inc.Fail(ctx, j.ID, text, class, retriable)
		}
		return err
	})
	c.mu.Lock()
	if giveBack {
		c.jobsGivenBack++
	} else {
		c.jobsFailed++
	}
	c.mu.Unlock()
	switch {
	case err == nil:
		log.Warn("job attempt failed", zap.String("class", class), zap.Bool("retriable", retriable),
			zap.Bool("attempt_given_back", giveBack),
			zap.String("state", string(st)), zap.Duration("took", took), zap.String("error", text))
	case errors.Is(err, jobqueue.ErrFenced):
		c.noteFenced(err)
		log.Error("failure refused: another process registered this node id", zap.String("render_error", text), zap.Error(err))
	case errors.Is(err, jobqueue.ErrAlreadyFinished), errors.Is(err, jobqueue.ErrNotHeld):
		log.Info("job attempt failed, but the job is no longer this node's", zap.String("class", class),
			zap.String("render_error", text), zap.Error(err))
	default:
		log.Error("cannot record the job's failure; its lease will expire and it will run again",
			zap.String("class", class), zap.String("render_error", text), zap.Error(err))
	}
}

// nodeFault marks an attempt's error as the node's, not the job's (the node
// stopped before the job started, or could not store its result): the
// attempt is given back (Incarnation.GiveBack) rather than charged.
type nodeFault struct{ error }

func (e nodeFault) Unwrap() error { return e.error }

// renderFailure is what a failed render is recorded as: when the Chrome
// the job was given crashed or hung before the job's page was asked for
// (browser.FailedBeforePage), the failure is the node's (givenBack): of the
// jobs a hostile page's Chrome takes down with it, only those whose page
// had been asked for are charged.
func renderFailure(j jobqueue.Job, err error) error {
	if browser.FailedBeforePage(err) {
		return givenBack(j, err, browser.ChromeLossClasses()...)
	}
	return err
}

// givenBack makes err, a failure the node caused, a nodeFault — unless the
// job's last attempt failed with one of the classes of that cause
// (classes): then it is charged, so that a job that always meets that
// failure (whatever it does to cause it) cannot run for ever, and a job
// that only met it by chance loses at most every other attempt to it.
func givenBack(j jobqueue.Job, err error, classes ...string) error {
	if slices.Contains(classes, j.ErrorClass) {
		return err
	}
	return nodeFault{err}
}

// retryReport runs a database write until it succeeds, fails for a reason
// that retrying cannot change, reportTimeout passes or base ends. base is
// Consumer.reports, not Run's context: an outcome is worth recording during
// a drain.
func retryReport(base context.Context, log *zap.Logger, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(base, reportTimeout)
	defer cancel()
	pause := 100 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil || errors.Is(err, jobqueue.ErrAlreadyFinished) || errors.Is(err, jobqueue.ErrNotHeld) ||
			errors.Is(err, jobqueue.ErrNotFound) || errors.Is(err, jobqueue.ErrFenced) {
			return err
		}
		wait := backoff.Jitter(pause)
		log.Warn("recording a job outcome failed; retrying", zap.Duration("retry_in", wait), zap.Error(err))
		if !ctxtime.Sleep(ctx, wait) {
			return fmt.Errorf("%w: %w", errReport, err)
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// completer records renders in batches: it takes what is waiting at the
// moment (up to maxCompleteBatch) and completes it in one CompleteMany, so a
// busy node pays one commit for several jobs and an idle one no delay. It
// returns when ctx ends; Run stops it only after every job goroutine ended.
func (c *Consumer) completer(ctx context.Context) {
	for {
		var batch []completion
		select {
		case <-ctx.Done():
			return
		case x := <-c.completions:
			batch = append(batch, x)
		}
	gather:
		for len(batch) < maxCompleteBatch {
			select {
			case x := <-c.completions:
				batch = append(batch, x)
			default:
				break gather
			}
		}
		items := make([]jobqueue.Completion, len(batch))
		for i, x := range batch {
			items[i] = x.c
		}
		var outcomes []jobqueue.CompleteOutcome
		err := retryReport(c.reports, c.log, func(ctx context.Context) error {
			var err error
			outcomes, err = c.q.CompleteMany(ctx, items)
			return err
		})
		for i, x := range batch {
			if err != nil {
				x.reply <- err
				continue
			}
			x.reply <- outcomes[i].Err
		}
	}
}
