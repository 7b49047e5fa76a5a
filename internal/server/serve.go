package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// DefaultDrainTimeout is how long Serve lets in-flight requests finish after its context
// ends.
const DefaultDrainTimeout = 30 * time.Second

// Serve answers HTTP on ln, with the connection deadlines and the connection cap of the
// server's Config, until ctx ends (a SIGTERM or SIGINT, say); then it stops
// accepting connections, lets the requests in flight finish for up to drain (0:
// DefaultDrainTimeout), aborts those still running, and shuts the engine and the chat
// template's sandbox down. It returns nil once drained (a drain that times out is logged,
// not an error).
func (s *Server) Serve(ctx context.Context, ln net.Listener, drain time.Duration) error {
	defer s.Close()
	if drain <= 0 {
		drain = DefaultDrainTimeout
	}
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
	}
	if s.cfg.StatsInterval > 0 && s.eng != nil { // an encoder alone has no engine steps to report
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		go s.logStats(sctx, s.cfg.StatsInterval)
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(limitConnections(ln, s.cfg.MaxConnections, &s.openConns, s.log)) }()
	select {
	case err := <-errc:
		s.shutdownEngine(context.Background())
		return err
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.log.Info("shutting down: draining requests in flight", "timeout", drain)
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err := hs.Shutdown(dctx)
	if errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("drain timeout: aborting the requests still in flight")
		// The expired context makes the engine abort what runs; the handlers then end.
		s.shutdownEngine(dctx)
		fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer fcancel()
		if err := hs.Shutdown(fctx); err != nil {
			hs.Close()
		}
		err = nil
	} else {
		s.shutdownEngine(context.Background())
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}

// shutdownEngine shuts the engine down, logging a failure.
func (s *Server) shutdownEngine(ctx context.Context) {
	if s.eng == nil {
		return
	}
	if err := s.eng.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		s.log.Error("engine shutdown", "err", err)
	}
}
