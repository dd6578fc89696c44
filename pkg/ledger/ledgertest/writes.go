package ledgertest

import (
	"bytes"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

// TransitionWrite is one write of a run that a backend sent, as its test saw it on the
// wire: the fields (or columns) it set, and the size of the request that carried it.
type TransitionWrite struct {
	Fields []string
	Bytes  int
}

// WriteLog keeps the writes a backend's test sees on the wire, for CheckTransitionWrites.
// It is safe for concurrent use.
type WriteLog struct {
	mu     sync.Mutex
	writes []TransitionWrite
}

// Add keeps w.
func (l *WriteLog) Add(w TransitionWrite) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, w)
}

// Take returns the writes kept since the last Take.
func (l *WriteLog) Take() []TransitionWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.writes
	l.writes = nil
	return out
}

// CheckTransitionWrites checks that a backend whose transitions write a run's record
// field by field writes only what each transition changes. Each of its writes should
// leave out the run's payload, its identity and its creation time: no transition
// changes them, and a payload may be most of what the backend stores.
//
// The run has a 64 KiB payload. It goes through an ingress claim, a worker claim and a
// renewal on l, a second renewal through other, and a completion on l after other wrote
// last (other may be l). After each step, take returns the writes the backend sent since
// it was last called. Every write after the ingress claim's must set none of unchanged
// (the backend's names for those fields), and its request must be smaller than the
// payload. The run read back after each step must be the one the call returned, so that
// every field the step changed was written.
func CheckTransitionWrites(t *testing.T, ld, otherd ledger.Driver, take func() []TransitionWrite, unchanged []string) {
	t.Helper()
	l, other := ledger.New(ld, nil), ledger.New(otherd, nil)
	ctx := t.Context()
	payload := bytes.Repeat([]byte("x"), 64<<10)
	ident := ledger.Identity{
		RunID: ledger.KeyedRunID("ns", "job", uuid.NewString()), Namespace: "ns", Job: "job", Key: "k",
		ScheduleTime: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC), PayloadHash: ledger.PayloadHash(payload), Payload: payload,
	}
	if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	if w := take(); len(w) != 1 || w[0].Bytes < len(payload) {
		t.Fatalf("the ingress claim wrote %+v, want one write that carries the payload", w)
	}
	check := func(what string, returned *ledger.Run) {
		t.Helper()
		ws := take()
		if len(ws) == 0 {
			t.Fatalf("%s wrote nothing", what)
		}
		for _, w := range ws {
			t.Logf("%s sets %v: a request of %d bytes", what, w.Fields, w.Bytes)
			for _, f := range unchanged {
				if slices.Contains(w.Fields, f) {
					t.Errorf("%s sets %s, which it does not change", what, f)
				}
			}
			if w.Bytes >= len(payload) {
				t.Errorf("%s sent a request of %d bytes: the payload (%d) again", what, w.Bytes, len(payload))
			}
		}
		got, err := other.Get(ctx, &ledger.GetParams{RunID: ident.RunID})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, returned) {
			t.Errorf("%s: the run read back is\n%+v\nwant the one returned\n%+v", what, got, returned)
		}
	}

	a, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ident, AttemptID: uuid.NewString(), Lease: time.Minute})
	if err != nil || a.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire = %+v, %v", a, err)
	}
	check("the worker claim of a queued run", a.Run)
	f := ledger.Fence{RunID: ident.RunID, Attempt: a.Run.Attempt, AttemptID: a.Run.AttemptID}
	r, err := l.Renew(ctx, &ledger.RenewParams{Fence: f, Lease: 2 * time.Minute, Progress: []byte(`{"done":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	check("the holder's renewal", r)
	r, err = other.Renew(ctx, &ledger.RenewParams{Fence: f, Lease: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	check("a renewal through the other ledger", r)
	r, err = l.Complete(ctx, &ledger.CompleteParams{Fence: f, Result: []byte(`{"sent":3}`)})
	if err != nil {
		t.Fatal(err)
	}
	check("the completion", r)
}
