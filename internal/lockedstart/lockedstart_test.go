package lockedstart

import (
	"errors"
	"os/exec"
	"testing"
)

// The child is started, its Wait error reaches exited, and a failed start is
// returned without a call to exited.
func TestStart(t *testing.T) {
	done := make(chan error, 1)
	if err := Start(exec.Command("sh", "-c", "exit 3"), func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := <-done; !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exited with %v, want exit status 3", err)
	}
	err := Start(exec.Command("/nonexistent/binary"), func(error) { t.Error("exited called after a failed start") })
	if err == nil {
		t.Fatal("a missing binary started")
	}
}
