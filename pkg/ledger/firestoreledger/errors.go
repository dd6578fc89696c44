package firestoreledger

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runonce/runonce/pkg/ledger"
)

// rpc names the kind of call an error came from: the same status code means different
// things for a read, a write with a precondition and a query.
type rpc int

const (
	rpcRead   rpc = iota // BatchGetDocuments
	rpcCreate            // Commit of a Create (exists=false precondition)
	rpcWrite             // Commit of an Update or Delete with an update-time precondition
	rpcQuery             // RunQuery
)

// Internal outcomes of a write that the operations turn into a retry or an answer;
// they never leave the package.
var (
	// errExists: a Create found the document already there.
	errExists = errors.New("firestoreledger: document already exists")
	// errStale: a write's update-time precondition failed (the document changed or
	// vanished since it was read): read again and decide again.
	errStale = fmt.Errorf("%w: the record changed since it was read", ledger.ErrConflict)
)

// mapErr is the one place where the client's errors become the ledger's: gRPC codes
// map to the ledger's sentinel errors (or to errExists/errStale, which the operations
// resolve), wrapped with what was being done.
func mapErr(kind rpc, err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	s, ok := status.FromError(err)
	if !ok {
		// Not a status: a context error, or an encoding error of the client.
		return fmt.Errorf("firestoreledger: %s: %w", what, err)
	}
	var sentinel error
	switch s.Code() {
	case codes.NotFound:
		sentinel = ledger.ErrNotFound
		if kind == rpcWrite {
			sentinel = errStale // deleted since it was read
		}
	case codes.AlreadyExists:
		sentinel = errExists
	case codes.FailedPrecondition:
		switch kind {
		case rpcWrite, rpcCreate:
			sentinel = errStale
		case rpcQuery:
			return fmt.Errorf("firestoreledger: %s: %w (a missing composite index? see the package documentation)", what, err)
		}
	case codes.Aborted:
		// A transaction that lost to another one (or, on the emulator, a write that
		// waited too long for a transaction's lock), after the client's own retries.
		sentinel = ledger.ErrContended
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Internal:
		sentinel = ledger.ErrUnavailable
	case codes.InvalidArgument:
		sentinel = ledger.ErrInvalid
		if msg := s.Message(); strings.Contains(msg, "maximum allowed size") || (strings.Contains(msg, "longer than") && strings.Contains(msg, "bytes.")) {
			sentinel = ledger.ErrTooLarge // a document over 1 MiB, or a field over ~1 MiB (Firestore's wording)
		}
	}
	if sentinel == nil {
		return fmt.Errorf("firestoreledger: %s: %w", what, err)
	}
	return fmt.Errorf("%w: %s: %w", sentinel, what, err)
}
