// Package pubsubtest runs an in-process Pub/Sub server (the client library's pstest
// fake) with a client connected to it: the queue of the embedded mode (-dev) and of the
// fast tests. It is a package of its own so that what links pkg/queue (the worker, the
// ingress) does not link the fake; only a program that runs it imports it.
package pubsubtest

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/runonce/runonce/pkg/queue"
)

// InProcess is an in-process Pub/Sub server (the client library's pstest fake) with a
// client connected to it: the embedded mode's queue and the fast tests' queue. Its
// messages live as long as the process.
type InProcess struct {
	// Server is the fake; tests inspect Server.Messages() (acks, modacks) and inject
	// errors with pstest.WithErrorInjection passed to NewInProcess.
	Server *pstest.Server
	// Client is connected to Server. Close closes it.
	Client  *pubsub.Client
	project string
	conn    *grpc.ClientConn
}

// NewInProcess starts a fake Pub/Sub server on a free loopback port and connects a
// client for project to it (PUBSUB_EMULATOR_HOST is ignored).
func NewInProcess(ctx context.Context, project string, opts ...pstest.ServerReactorOption) (*InProcess, error) {
	return NewInProcessAt(ctx, project, "localhost:0", opts...)
}

// NewInProcessAt is NewInProcess listening on addr (host:port; port 0 picks a free
// one), so that another process can reach it at an address that stays the same from
// one start to the next. An address in use is an error.
func NewInProcessAt(ctx context.Context, project, addr string, opts ...pstest.ServerReactorOption) (*InProcess, error) {
	srv, err := newServerAt(addr, opts)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("pubsubtest: connect to in-process Pub/Sub at %s: %w", srv.Addr, err), srv.Close())
	}
	c, err := queue.NewClient(ctx, project, &queue.ClientOptions{Options: []option.ClientOption{option.WithGRPCConn(conn)}})
	if err != nil {
		return nil, errors.Join(err, conn.Close(), srv.Close())
	}
	return &InProcess{Server: srv, Client: c, project: project, conn: conn}, nil
}

// newServerAt starts pstest's server on addr; pstest panics when it cannot listen.
func newServerAt(addr string, opts []pstest.ServerReactorOption) (srv *pstest.Server, err error) {
	defer func() {
		if r := recover(); r != nil {
			srv, err = nil, fmt.Errorf("pubsubtest: in-process Pub/Sub on %s: %v", addr, r)
		}
	}()
	return pstest.NewServerWithAddress(addr, opts...), nil
}

// Addr is the server's host:port, usable as PUBSUB_EMULATOR_HOST by another process.
func (p *InProcess) Addr() string { return p.Server.Addr }

// ConnOption returns the client option that connects another client (another
// component in the same process) to this server.
func (p *InProcess) ConnOption() option.ClientOption { return option.WithGRPCConn(p.conn) }

// URL returns pubsub://PROJECT/name for a topic or subscription ID of this server.
func (p *InProcess) URL(id string) string { return queue.Scheme + "://" + p.project + "/" + id }

// Close closes the client and stops the server.
func (p *InProcess) Close() error {
	var errs []error
	if err := p.Client.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := p.conn.Close(); err != nil && status.Code(err) != codes.Canceled {
		errs = append(errs, err)
	}
	if err := p.Server.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
