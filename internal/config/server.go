package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server timeouts and limits shared by both binaries.
const (
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout covers the body too: a -max-body payload arrives well within it.
	ReadTimeout    = 30 * time.Second
	WriteTimeout   = 60 * time.Second
	IdleTimeout    = 90 * time.Second
	MaxHeaderBytes = 64 << 10
	// ShutdownGrace is how long in-flight requests may take to finish after SIGTERM:
	// Cloud Run kills the instance 10 s after it.
	ShutdownGrace = 8 * time.Second
)

// NewServer returns an http.Server for h with the timeouts and limits above.
func NewServer(addr string, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// Serve serves srv on ln until ctx is done, then shuts it down gracefully: it stops
// accepting, lets in-flight requests finish for at most grace (or until Hurry(ctx) is
// closed), then closes what is left.
// It returns nil after a clean shutdown.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	go func() {
		select {
		case <-Hurry(ctx): // asked again to stop: cut the grace short
			cancel()
		case <-sctx.Done():
		}
	}()
	serr := srv.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	if serr != nil {
		return errors.Join(fmt.Errorf("shutdown within %s: %w", grace, serr), srv.Close())
	}
	return nil
}
