package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// fakeNode stands in for a farm.Consumer: past its gate it "registers",
// and when its context ends it drains until the test lets it finish.
type fakeNode struct {
	gate     <-chan struct{} // nil without a handoff
	started  chan struct{}   // closed once past the gate
	draining chan struct{}   // closed when its context ended
	drained  chan struct{}   // closed by the test to end the drain
	err      error           // what Run returns after the drain
}

func newFakeNode(gate <-chan struct{}, err error) *fakeNode {
	return &fakeNode{gate: gate, started: make(chan struct{}), draining: make(chan struct{}), drained: make(chan struct{}), err: err}
}

func (f *fakeNode) Run(ctx context.Context) error {
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil
		}
	}
	close(f.started)
	<-ctx.Done()
	close(f.draining)
	<-f.drained
	return f.err
}

func (f *fakeNode) ExitNear() <-chan struct{} { return nil }
func (f *fakeNode) Healthy() error            { return nil }

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func handoffPipes(t *testing.T) (h *handoff, gateW *os.File) {
	t.Helper()
	nearR, nearW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	gateR, gateW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nearR.Close(); nearW.Close(); gateW.Close() })
	return newHandoff(nearW, gateR), gateW
}

// TestServeNodeDrain: a stop drains the node while /healthz still answers
// (a draining node is healthy, and orchestrators probe it meanwhile), and
// the group's error is the node's, with a handoff as without one.
func TestServeNodeDrain(t *testing.T) {
	for _, withHandoff := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "handoff"}[withHandoff], func(t *testing.T) {
			var h *handoff
			var gate <-chan struct{}
			if withHandoff {
				var gateW *os.File
				h, gateW = handoffPipes(t)
				gate = h.released
				if _, err := gateW.Write([]byte{'g'}); err != nil {
					t.Fatal(err)
				}
			}
			errDrained := errors.New("the node's own error")
			n := newFakeNode(gate, errDrained)
			addr := freeAddr(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- serveNode(ctx, n, h, addr, nil, zap.NewNop()) }()
			<-n.started // the health address is bound by now
			healthz := func() error {
				resp, err := http.Get("http://" + addr + "/healthz")
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return errors.New(resp.Status)
				}
				return nil
			}
			if err := healthz(); err != nil {
				t.Fatalf("/healthz while working: %v", err)
			}
			cancel()
			<-n.draining
			if err := healthz(); err != nil {
				t.Errorf("/healthz during the drain: %v", err)
			}
			close(n.drained)
			if err := <-done; !errors.Is(err, errDrained) {
				t.Errorf("serveNode = %v, want the node's error", err)
			}
			if healthz() == nil {
				t.Error("/healthz still answers after the node ended")
			}
		})
	}
}

// TestServeNodeHealthAddrTaken: a standing-by node whose health address
// is taken when its gate opens fails before it registers, with a usage
// error saying so, which the --respawn parent does not restart.
func TestServeNodeHealthAddrTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	h, gateW := handoffPipes(t)
	n := newFakeNode(h.released, nil)
	done := make(chan error, 1)
	go func() { done <- serveNode(context.Background(), n, h, taken.Addr().String(), nil, zap.NewNop()) }()
	if _, err := gateW.Write([]byte{'g'}); err != nil {
		t.Fatal(err)
	}
	err = <-done
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--health-addr") || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("serveNode = %v, want a usage error saying --health-addr is in use", err)
	}
	select {
	case <-n.started:
		t.Error("the node was released although its health address was taken")
	default:
	}
}
