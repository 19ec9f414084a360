package testsite

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server is the site served on a loopback port.
type Server struct {
	// URL is the base URL, such as http://127.0.0.1:41234, without a slash.
	URL string

	srv       *http.Server
	stop      chan struct{}
	closeOnce sync.Once
	closeErr  error
	serveErr  error
	served    chan struct{}
	unwatch   func() bool
}

// Start serves the site on 127.0.0.1 on a free port. The server stops when
// ctx ends or Close is called, whichever comes first; Close also waits for it.
func Start(ctx context.Context, opts Options) (*Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testsite: listening on 127.0.0.1: %w", err)
	}
	stop := make(chan struct{})
	s := &Server{
		URL:    "http://" + ln.Addr().String(),
		stop:   stop,
		served: make(chan struct{}),
		srv: &http.Server{
			Handler:           newSite(opts, stop),
			ReadHeaderTimeout: 10 * time.Second,
		},
	}
	go func() {
		defer close(s.served)
		// Serve returns http.ErrServerClosed after Close; nothing else is
		// expected on a loopback listener.
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = err
		}
	}()
	s.unwatch = context.AfterFunc(ctx, func() { s.shutdown() })
	return s, nil
}

// shutdown stops the server: it ends every waiting handler first, then closes
// the listener and every connection.
func (s *Server) shutdown() {
	s.closeOnce.Do(func() {
		close(s.stop)
		if err := s.srv.Close(); err != nil {
			s.closeErr = err
		}
	})
}

// Close stops the server and waits until it no longer serves.
func (s *Server) Close() error {
	s.unwatch()
	s.shutdown()
	<-s.served
	return errors.Join(s.closeErr, s.serveErr)
}
