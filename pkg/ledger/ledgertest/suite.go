package ledgertest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

// Timing used by the suite. Leases are real and short, so that every backend, including
// those that cannot replace their clock, is tested the same way.
const (
	shortLease = 1500 * time.Millisecond
	longLease  = time.Minute
	// slack is how far a backend's timestamps may stray from what the suite computes
	// (the gap between a transaction's read and its commit).
	slack = 2 * time.Second
	// hintSlack is how far the ingress claim's pickup deadline may stray: it only tells
	// the rescuer when to republish a run nobody picked up, and a backend whose one-RPC
	// claim cannot read the server's clock (Firestore) estimates it.
	hintSlack = 5 * time.Second
	// contenders is how many goroutines race on one key.
	contenders = 64
)

// Run runs the conformance suite against the backend h opens.
func Run(t *testing.T, h Harness) {
	t.Helper()
	groups := []struct {
		name  string
		tests map[string]func(*testing.T, Harness)
	}{
		{"Claim", claimTests},
		{"Acquire", acquireTests},
		{"Fence", fenceTests},
		{"Finish", finishTests},
		{"Effect", effectTests},
		{"Retention", retentionTests},
		{"Rescue", rescueTests},
		{"Clock", clockTests},
		{"Linearizability", linearizabilityTests},
		{"Operations", operationsTests},
		{"Resolve", resolveTests},
		{"Contention", contentionTests},
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

// fixture is one ledger under test with helpers that fail the test on unexpected errors.
type fixture struct {
	t *testing.T
	h Harness
	// l is the ledger under test behind the invariant checks (checked); raw is the
	// ledger without them, and drv its driver, for the harness.
	l   *ledger.Ledger
	raw *ledger.Ledger
	drv ledger.Driver
	ctx context.Context
}

func setup(t *testing.T, h Harness) *fixture {
	t.Helper()
	drv := h.Open(t)
	return &fixture{t: t, h: h, l: check(t, drv), raw: ledger.New(drv, nil), drv: drv, ctx: t.Context()}
}

// newRunID returns a fresh, valid run ID.
func newRunID() string { return ledger.KeyedRunID("ledgertest", "job", uuid.NewString()) }

func identity(id string) ledger.Identity {
	return ledger.Identity{
		RunID: id, Namespace: "ledgertest/ns", Job: "job", Key: "sched-job",
		ScheduleTime: time.Date(2026, 10, 16, 12, 0, 0, 0, time.UTC),
		PayloadHash:  ledger.PayloadHash([]byte(`{"n":1}`)),
		Payload:      []byte(`{"n":1}`),
	}
}

func (f *fixture) claim(id string) *ledger.ClaimResult {
	f.t.Helper()
	res, err := f.l.Claim(f.ctx, &ledger.ClaimParams{Identity: identity(id), AttemptID: uuid.NewString()})
	if err != nil {
		f.t.Fatalf("Claim(%s): %v", id, err)
	}
	return res
}

func (f *fixture) acquire(id string, lease time.Duration) *ledger.AcquireResult {
	f.t.Helper()
	res, err := f.tryAcquire(f.l, id, lease)
	if err != nil {
		f.t.Fatalf("Acquire(%s): %v", id, err)
	}
	return res
}

func (f *fixture) tryAcquire(l *ledger.Ledger, id string, lease time.Duration) (*ledger.AcquireResult, error) {
	attemptID, err := uuid.NewV7()
	if err != nil {
		f.t.Fatal(err)
	}
	return l.Acquire(f.ctx, &ledger.AcquireParams{Identity: identity(id), AttemptID: attemptID.String(), Lease: lease})
}

// hold acquires id and fails unless it was acquired.
func (f *fixture) hold(id string, lease time.Duration) *ledger.Run {
	f.t.Helper()
	res := f.acquire(id, lease)
	if res.Outcome != ledger.OutcomeAcquired {
		f.t.Fatalf("Acquire(%s) = %v until %v, want acquired", id, res.Outcome, res.Until)
	}
	return res.Run
}

func (f *fixture) get(id string) *ledger.Run {
	f.t.Helper()
	r, err := f.l.Get(f.ctx, &ledger.GetParams{RunID: id})
	if err != nil {
		f.t.Fatalf("Get(%s): %v", id, err)
	}
	return r
}

// waitPast sleeps until the backend's deadline d has certainly passed, judging by the
// records the backend writes: it compares d with the UpdatedAt of a fresh probe write.
func (f *fixture) waitPast(d time.Time) {
	f.t.Helper()
	for i := 0; ; i++ {
		probe := f.claim(newRunID()).Run
		if probe.UpdatedAt.After(d) {
			return
		}
		if i > 100 {
			f.t.Fatalf("the backend's clock did not pass %v (last seen %v)", d, probe.UpdatedAt)
		}
		time.Sleep(min(probe.UpdatedAt.Sub(d)*-1+50*time.Millisecond, time.Second))
	}
}

func fence(r *ledger.Run) ledger.Fence {
	return ledger.Fence{RunID: r.ID, Attempt: r.Attempt, AttemptID: r.AttemptID}
}

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

func approxWithin(t *testing.T, what string, got, want time.Time, within time.Duration) {
	t.Helper()
	if d := got.Sub(want); d < -within || d > within {
		t.Fatalf("%s = %v, want %v ± %v (off by %v)", what, got, want, within, d)
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

// loserErr reports whether err is an acceptable answer for the loser of a race: none,
// or the typed retryable answer of contention.
func loserErr(err error) bool { return err == nil || errors.Is(err, ledger.ErrContended) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func errIsLeaseLost(err error) bool { return errors.Is(err, ledger.ErrLeaseLost) }

func errIsNotFound(err error) bool { return errors.Is(err, ledger.ErrNotFound) }

func errIs(err, target error) bool { return errors.Is(err, target) }
