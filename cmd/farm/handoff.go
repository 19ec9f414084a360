package main

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/browserfarm/browserfarm/farm/fleet"
)

// handoff is a consumer's side of its parent's fleet.Config.Handoff: it
// stands by until the gate opens, and tells the parent when its own exit is
// near so that its successor can boot meanwhile.
type handoff struct {
	near, gate *os.File
	released   chan struct{} // closed when the gate opened and release succeeded
	stop       chan struct{} // closed by interrupt
	stopOnce   sync.Once
}

// openHandoff takes the two descriptors the parent passes under
// fleet.HandoffEnv; nil when the environment does not name them.
func openHandoff(getenv func(string) string) (*handoff, error) {
	if getenv(fleet.HandoffEnv) != "1" {
		return nil, nil
	}
	h := newHandoff(nil, nil)
	for _, d := range []struct {
		fd   int
		name string
		f    **os.File
	}{{fleet.ExitNearFD, "exit-near", &h.near}, {fleet.GateFD, "gate", &h.gate}} {
		var st syscall.Stat_t
		if err := syscall.Fstat(d.fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
			return nil, usagef("%s=1, but descriptor %d (the handoff's %s pipe) is not a pipe: unset %s unless farm's own fleet runs this process",
				fleet.HandoffEnv, d.fd, d.name, fleet.HandoffEnv)
		}
		// Chrome must not inherit them (the parent reads an end of file
		// when this process exits), and a nonblocking descriptor is one
		// the runtime's poller can interrupt with Close.
		syscall.CloseOnExec(d.fd)
		if err := syscall.SetNonblock(d.fd, true); err != nil {
			return nil, fmt.Errorf("handoff: descriptor %d: %w", d.fd, err)
		}
		*d.f = os.NewFile(uintptr(d.fd), "handoff-"+d.name)
	}
	return h, nil
}

func newHandoff(near, gate *os.File) *handoff {
	return &handoff{near: near, gate: gate, released: make(chan struct{}), stop: make(chan struct{})}
}

// errNotNeeded ends a standing-by consumer whose parent closed its gate
// without opening it.
var errNotNeeded = errors.New("handoff: the parent no longer needs this process")

// run reads the gate and, once exitNear closes, tells the parent. When the
// gate opens it calls release (what must hold before the consumer may
// register, such as binding its health address, which the predecessor held
// until it exited), then releases the consumer; a release error ends run
// with it, the consumer never released. It returns errNotNeeded when the
// gate closes unopened, else runs until interrupt: the process's end is the
// consumer's to decide (a stop drains it, and its health endpoint answers
// meanwhile), so run is not tied to the process's context.
func (h *handoff) run(exitNear <-chan struct{}, release func() error) error {
	opened := make(chan bool, 1)
	go func() { // ends when the parent writes or closes, or interrupt closes h.gate
		n, _ := h.gate.Read(make([]byte, 1))
		opened <- n == 1
	}()
	for {
		select {
		case ok := <-opened:
			if !ok {
				return errNotNeeded
			}
			if release != nil {
				if err := release(); err != nil {
					return err
				}
			}
			close(h.released)
			opened = nil
		case <-exitNear:
			exitNear = nil
			_, err := h.near.Write([]byte{'n'})
			_ = h.near.Close()
			if err != nil {
				return fmt.Errorf("handoff: telling the parent the exit is near: %w", err)
			}
		case <-h.stop:
			return nil
		}
	}
}

// interrupt ends run.
func (h *handoff) interrupt() {
	h.stopOnce.Do(func() { close(h.stop) })
	_ = h.gate.Close()
}
