package main

import (
	"errors"
	"os"
	"testing"
	"time"
)

// TestHandoffRun: the gate's byte releases the consumer (after the release
// hook, whose error keeps it from being released) and its end of file
// unopened ends it; a near exit is told to the parent once.
func TestHandoffRun(t *testing.T) {
	for _, tc := range []struct {
		name         string
		open         bool  // the parent writes the gate's byte, else only closes it
		near         bool  // the exit becomes near
		releaseErr   error // what the release hook returns
		wantErr      error
		wantNear     string
		wantReleased bool
	}{
		{name: "released, then near", open: true, near: true, wantNear: "n", wantReleased: true},
		{name: "released, never near", open: true, wantReleased: true},
		{name: "not needed", wantErr: errNotNeeded},
		{name: "release fails", open: true, releaseErr: errHealthTaken, wantErr: errHealthTaken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nearR, nearW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer nearR.Close()
			gateR, gateW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			h := newHandoff(nearW, gateR)
			exitNear := make(chan struct{})
			done := make(chan error, 1)
			go func() { done <- h.run(exitNear, func() error { return tc.releaseErr }) }()
			if tc.open {
				gateW.Write([]byte{'g'})
			}
			gateW.Close()
			if tc.wantReleased {
				select {
				case <-h.released:
				case <-time.After(10 * time.Second):
					t.Fatal("the gate's byte did not release the consumer")
				}
			}
			if tc.near {
				close(exitNear)
				b := make([]byte, 2)
				n, _ := nearR.Read(b)
				if got := string(b[:n]); got != tc.wantNear {
					t.Fatalf("the parent read %q, want %q", got, tc.wantNear)
				}
			}
			if tc.wantErr == nil {
				// Released, it runs until interrupted.
				select {
				case err := <-done:
					t.Fatalf("run ended on its own: %v", err)
				default:
				}
				h.interrupt()
			}
			if err := <-done; !errors.Is(err, tc.wantErr) {
				t.Fatalf("run = %v, want %v", err, tc.wantErr)
			}
			if !tc.wantReleased {
				select {
				case <-h.released:
					t.Fatal("released although the gate closed unopened")
				default:
				}
			}
		})
	}
}

var errHealthTaken = errors.New("--health-addr: address in use")
