// Package testutil holds the helpers that the tests of several packages
// share. Only _test.go files import it: it links `testing`, which must stay
// out of the farm binary (go list -deps ./cmd/farm | grep -x testing prints
// nothing).
package testutil

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testsite"
)

// pollEvery is how often Eventually checks its condition: often enough that a
// test does not idle, rarely enough not to load a shared 2-core machine.
const pollEvery = 10 * time.Millisecond

// Eventually polls cond until it holds and fails the test if it still does
// not after within. within bounds a hung condition only; it is never what a
// test measures, so make it generous.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(pollEvery)
	}
}

// ExitCode is the exit code of a process that err (from exec.Cmd's Wait,
// Run or Output) reports ended; it fails the test when the process did not
// exit by itself (killed by a signal) or never ran.
func ExitCode(tb testing.TB, err error) int {
	tb.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode()
	}
	tb.Fatalf("the process ended with %v", err)
	return -1
}

// StartSite serves internal/testsite for one test and closes it when the
// test ends.
func StartSite(tb testing.TB, opts testsite.Options) *testsite.Server {
	tb.Helper()
	s, err := testsite.Start(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("testsite: %v", err)
		}
	})
	return s
}

// Background runs run on a goroutine until the test ends; its cleanup then
// cancels run's context, waits for it to return and fails the test if it
// returned an error. what names run in that failure. The returned channel
// is closed when run returns, for a test that must notice an early end.
func Background(tb testing.TB, what string, run func(ctx context.Context) error) <-chan struct{} {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	var err error
	go func() {
		defer close(ended)
		err = run(ctx)
	}()
	tb.Cleanup(func() {
		cancel()
		<-ended
		if err != nil {
			tb.Errorf("%s: %v", what, err)
		}
	})
	return ended
}
