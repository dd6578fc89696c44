// Package receivertest is the conformance suite every receiver.Store passes, against a
// real instance of its backend: the rules of the store's contract (claims, leases,
// fences, retention), races on one key and one run, and the middleware over the store
// (requests executed once, crashes and lost leases never replayed as success). A store's
// own test calls Run; only tests import this package.
package receivertest

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/receiver"
)

// Harness says how to open the store under test.
type Harness struct {
	// Open returns a new, empty store isolated from every other Open's (a fresh
	// schema, prefix or database), closed and dropped by tb.Cleanup.
	Open func(tb testing.TB) receiver.Store
	// ExpiresItself: the backend deletes a record once its ExpireAt passed by itself
	// (Redis key expiry), and Sweep may delete nothing.
	ExpiresItself bool
}

// Timing used by the suite. Leases are real and short, judged by each store's own
// clock, so every backend is tested the same way.
const (
	shortLease = 1500 * time.Millisecond
	longLease  = time.Minute
	retention  = time.Hour
	// shortRetention is the retention of records the suite lets expire.
	shortRetention = 1500 * time.Millisecond
	// slack is how far a store's timestamps may stray from the test's clock (the gap
	// between a call and the store's decision, on one machine).
	slack = 2 * time.Second
	// contenders is how many goroutines race on one key.
	contenders = 64
)

// Run runs the conformance suite against the store h opens.
func Run(t *testing.T, h Harness) {
	t.Helper()
	groups := []struct {
		name  string
		tests map[string]func(*testing.T, Harness)
	}{
		{"Claim", claimTests},
		{"Lease", leaseTests},
		{"Fence", fenceTests},
		{"Retention", retentionTests},
		{"HTTP", httpTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for name, fn := range g.tests {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					fn(t, h)
				})
			}
		})
	}
}

// fixture is one store under test with helpers that fail the test on unexpected errors.
type fixture struct {
	t   *testing.T
	s   receiver.Store
	ctx context.Context
}

func setup(t *testing.T, h Harness) *fixture {
	t.Helper()
	return &fixture{t: t, s: h.Open(t), ctx: t.Context()}
}

// newKey returns a fresh scoped key.
func newKey() string {
	return receiver.ScopedKey("receivertest", http.MethodPost, "/charges", uuid.NewString())
}

// newRun returns a fresh scoped run.
func newRun() string { return receiver.ScopedRun("receivertest", uuid.NewString()) }

var (
	fpA = receiver.Fingerprint("", []byte(`{"amount":1}`))
	fpB = receiver.Fingerprint("", []byte(`{"amount":2}`))
)

// params is a claim of key with fingerprint A, a fresh token, a long lease and retention.
func params(key string) *receiver.ClaimParams {
	return &receiver.ClaimParams{Key: key, Fingerprint: fpA, Token: uuid.NewString(), Lease: longLease, Retention: retention}
}

// fenced is p from attempt of run.
func fenced(p *receiver.ClaimParams, run string, attempt int64) *receiver.ClaimParams {
	p.Fence = &receiver.Fence{Run: run, Attempt: attempt}
	return p
}

func (f *fixture) claim(p *receiver.ClaimParams) *receiver.Claim {
	f.t.Helper()
	c, err := f.s.Claim(f.ctx, p)
	if err != nil {
		f.t.Fatalf("Claim(%s): %v", p.Key, err)
	}
	if c == nil {
		f.t.Fatalf("Claim(%s) = nil", p.Key)
	}
	return c
}

// claimWant claims and fails unless the outcome is want.
func (f *fixture) claimWant(p *receiver.ClaimParams, want receiver.Outcome) *receiver.Claim {
	f.t.Helper()
	c := f.claim(p)
	if c.Outcome != want {
		f.t.Fatalf("Claim(%s) = %s (%+v), want %s", p.Key, c.Outcome, c, want)
	}
	return c
}

func (f *fixture) get(key string) *receiver.Record {
	f.t.Helper()
	r, err := f.s.Get(f.ctx, key)
	if err != nil {
		f.t.Fatalf("Get(%s): %v", key, err)
	}
	return r
}

func (f *fixture) absent(key string) {
	f.t.Helper()
	if r, err := f.s.Get(f.ctx, key); !errors.Is(err, receiver.ErrNotFound) {
		f.t.Fatalf("Get(%s) = %+v, %v; want ErrNotFound", key, r, err)
	}
}

func (f *fixture) complete(key, token string, resp *receiver.Response, ret time.Duration) {
	f.t.Helper()
	if err := f.s.Complete(f.ctx, &receiver.CompleteParams{Key: key, Token: token, Response: resp, Retention: ret}); err != nil {
		f.t.Fatalf("Complete(%s): %v", key, err)
	}
}

// waitPast sleeps until t has passed on the test's clock, plus a margin for the store's.
func waitPast(t time.Time) { time.Sleep(time.Until(t) + 300*time.Millisecond) }

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error = %v, want %v", what, err, want)
	}
}

func approx(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if d := got.Sub(want); d < -slack || d > slack {
		t.Fatalf("%s = %v, want %v ± %v (off by %v)", what, got, want, slack, d)
	}
}

func exact(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Fatalf("%s = %v, want exactly %v", what, got, want)
	}
}

// race runs fn in n goroutines released at once and returns their results.
func race[T any](n int, fn func(i int) (T, error)) ([]T, []error) {
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		out   = make([]T, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			out[i], errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return out, errs
}

// loserErr reports whether err is an acceptable error for a loser of a race: the typed,
// retryable answer of contention.
func loserErr(err error) bool { return errors.Is(err, receiver.ErrContended) }
