package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/oklog/run"
	"go.uber.org/zap"
)

// node is what serveNode runs: a farm.Consumer.
type node interface {
	Run(ctx context.Context) error
	ExitNear() <-chan struct{}
	Healthy() error
}

// serveNode runs the node, its handoff with the parent (h, nil without
// one) and its health endpoint (on healthAddr, none if empty) as one
// run.Group. The node decides the process's end: ctx ending makes it
// drain, and the handoff and the health endpoint stay up until it has
// returned, so /healthz answers through the drain and the node's error is
// the group's. The health address is bound before the node may register:
// by the caller before its database wait (bound, nil if not), at once, or,
// standing by, when the gate opens (its predecessor holds it until it
// exits), so that a taken address fails the process before it has touched
// the queue.
func serveNode(ctx context.Context, n node, h *handoff, healthAddr string, bound net.Listener, log *zap.Logger) error {
	var g run.Group
	nctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g.Add(func() error { return n.Run(nctx) }, func(error) { cancel() })

	ln := bound // set before the node is released, read after
	bind := func() error {
		if ln != nil {
			return nil
		}
		var err error
		if ln, err = net.Listen("tcp", healthAddr); err != nil {
			return listenError("health-addr", healthAddr, err)
		}
		return nil
	}
	defer func() {
		if ln != nil {
			_ = ln.Close() // bound, but the group ended before serving it
		}
	}()
	var release func() error
	if healthAddr != "" {
		if h == nil {
			if err := bind(); err != nil {
				return err
			}
		} else {
			release = bind
		}
	}
	if h != nil {
		g.Add(func() error { return h.run(n.ExitNear(), release) }, func(error) { h.interrupt() })
	}
	if healthAddr != "" {
		srv := &http.Server{Handler: healthHandler(n.Healthy), ReadHeaderTimeout: 5 * time.Second}
		stop := make(chan struct{})
		g.Add(func() error {
			if h != nil {
				select {
				case <-h.released:
				case <-stop:
					return nil
				}
			}
			log.Info("health endpoint listening", zap.String("addr", ln.Addr().String()))
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("health server: %w", err)
			}
			return nil
		}, func(error) {
			close(stop) // run.Group interrupts each actor once
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		})
	}
	return g.Run()
}
