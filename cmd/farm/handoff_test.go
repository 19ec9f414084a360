package main

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestHandoffRun: the gate's byte releases the consumer and its end of file
// unopened ends it; a near exit is told to the parent once.
func TestHandoffRun(t *testing.T) {
	for _, tc := range []struct {
		name         string
		open         bool // the parent writes the gate's byte, else only closes it
		near         bool // the exit becomes near
		wantErr      error
		wantNear     string
		wantReleased bool
	}{
		{name: "released, then near", open: true, near: true, wantNear: "n", wantReleased: true},
		{name: "released, never near", open: true, wantReleased: true},
		{name: "not needed", wantErr: errNotNeeded},
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
			h := &handoff{near: nearW, gate: gateR, released: make(chan struct{})}
			exitNear := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- h.run(ctx, exitNear) }()
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
				cancel()
			}
			h.interrupt()
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
