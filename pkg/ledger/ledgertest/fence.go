package ledgertest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

// checkFencedOut asserts that every fenced write by the attempt old holds is refused
// with ErrLeaseLost and changes nothing.
func checkFencedOut(f *fixture, old *ledger.Run, when string) {
	f.t.Helper()
	before := f.get(old.ID)
	fc := fence(old)
	writes := map[string]func() error{
		"Renew": func() error {
			_, err := f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fc, Lease: longLease})
			return err
		},
		"Complete": func() error { _, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fc}); return err },
		"Release": func() error {
			_, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fc, Error: "stale"})
			return err
		},
		"Fail": func() error { _, err := f.l.Fail(f.ctx, &ledger.FailParams{Fence: fc, Error: "stale"}); return err },
		"BeginEffect": func() error {
			_, err := f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: fc, Name: "stale-effect"})
			return err
		},
		"CompleteEffect": func() error {
			_, err := f.l.CompleteEffect(f.ctx, &ledger.CompleteEffectParams{Fence: fc, Name: "stale-effect"})
			return err
		},
	}
	for name, write := range writes {
		if err := write(); !errIsLeaseLost(err) {
			f.t.Fatalf("%s by attempt %d %s: error = %v, want ledger.ErrLeaseLost", name, old.Attempt, when, err)
		}
	}
	after := f.get(old.ID)
	if after.Status != before.Status || after.Attempt != before.Attempt || after.AttemptID != before.AttemptID ||
		!after.Deadline.Equal(before.Deadline) || after.AttemptsMade != before.AttemptsMade || after.LastError != before.LastError {
		f.t.Fatalf("refused writes %s changed the run from %+v to %+v", when, before, after)
	}
	if _, err := f.l.GetEffect(f.ctx, &ledger.GetEffectParams{RunID: old.ID, Name: "stale-effect"}); !errIsNotFound(err) {
		f.t.Fatalf("a refused BeginEffect %s left an effect record (GetEffect error = %v)", when, err)
	}
}

var fenceTests = map[string]func(*testing.T, Harness){
	"WrongAttemptIDIsRefused": func(t *testing.T, h Harness) {
		f := setup(t, h)
		r := f.hold(newRunID(), longLease)
		forged := *r
		forged.AttemptID = uuid.NewString()
		checkFencedOut(f, &forged, "with another attempt ID")
	},
	"WrongAttemptNumberIsRefused": func(t *testing.T, h Harness) {
		f := setup(t, h)
		r := f.hold(newRunID(), longLease)
		for _, n := range []int64{r.Attempt + 1, r.Attempt + 7} {
			forged := *r
			forged.Attempt = n
			checkFencedOut(f, &forged, "with another attempt number")
		}
	},
	"QueuedRunRefusesFencedWrites": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		claimed := f.claim(id).Run
		// The ingress claim's own ID with attempt 0 is not a worker's fence.
		forged := *claimed
		forged.Attempt = 1
		checkFencedOut(f, &forged, "on a queued run never acquired")
	},
	"ReleasedAttemptIsFencedOut": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		r := f.hold(id, longLease)
		if _, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r), Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		for name, err := range map[string]error{
			"Renew":    second(f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fence(r)})),
			"Complete": second(f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r)})),
			"Fail":     second(f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(r)})),
			"Effect":   second(f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: fence(r), Name: "e"})),
		} {
			wantErr(t, name+" after Release", err, ledger.ErrLeaseLost)
		}
		r2 := f.hold(id, longLease)
		checkFencedOut(f, r, "after a release and a new claim")
		if r2.Attempt != 2 {
			t.Fatalf("claim after release = attempt %d, want 2", r2.Attempt)
		}
	},
	"TerminalRunRefusesOtherTransitions": func(t *testing.T, h Harness) {
		f := setup(t, h)
		done := f.hold(newRunID(), longLease)
		if _, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(done)}); err != nil {
			t.Fatal(err)
		}
		failed := f.hold(newRunID(), longLease)
		if _, err := f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(failed), Error: "x"}); err != nil {
			t.Fatal(err)
		}
		for name, err := range map[string]error{
			"Renew of a completed run":   second(f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fence(done)})),
			"Release of a completed run": second(f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(done)})),
			"Fail of a completed run":    second(f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(done)})),
			"Effect of a completed run":  second(f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: fence(done), Name: "e"})),
			"Renew of a failed run":      second(f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fence(failed)})),
			"Complete of a failed run":   second(f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(failed)})),
			"Release of a failed run":    second(f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(failed)})),
			"Effect of a failed run":     second(f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: fence(failed), Name: "e"})),
			"Complete of an absent run":  second(f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: ledger.Fence{RunID: newRunID(), Attempt: 1, AttemptID: "x"}})),
			"Renew of an absent run":     second(f.l.Renew(f.ctx, &ledger.RenewParams{Fence: ledger.Fence{RunID: newRunID(), Attempt: 1, AttemptID: "x"}})),
			"Effect of an absent run":    second(f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: ledger.Fence{RunID: newRunID(), Attempt: 1, AttemptID: "x"}, Name: "e"})),
			"Release of an absent run":   second(f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: ledger.Fence{RunID: newRunID(), Attempt: 1, AttemptID: "x"}})),
			"Fail of an absent run":      second(f.l.Fail(f.ctx, &ledger.FailParams{Fence: ledger.Fence{RunID: newRunID(), Attempt: 1, AttemptID: "x"}})),
			"CompleteEffect, absent run": second(f.l.CompleteEffect(f.ctx, &ledger.CompleteEffectParams{Fence: ledger.Fence{RunID: newRunID(), Attempt: 1, AttemptID: "x"}, Name: "e"})),
			"CompleteEffect, failed run": second(f.l.CompleteEffect(f.ctx, &ledger.CompleteEffectParams{Fence: fence(failed), Name: "e"})),
			"CompleteEffect, done run":   second(f.l.CompleteEffect(f.ctx, &ledger.CompleteEffectParams{Fence: fence(done), Name: "e"})),
		} {
			wantErr(t, name, err, ledger.ErrLeaseLost)
		}
		if got := f.get(done.ID); got.Status != ledger.StatusCompleted {
			t.Fatalf("refused writes changed a completed run to %s", got.Status)
		}
		if got := f.get(failed.ID); got.Status != ledger.StatusFailed {
			t.Fatalf("refused writes changed a failed run to %s", got.Status)
		}
	},
	"MissingFenceIsInvalid": func(t *testing.T, h Harness) {
		f := setup(t, h)
		r := f.hold(newRunID(), longLease)
		_, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: ledger.Fence{RunID: r.ID}})
		wantErr(t, "Complete without a fence", err, ledger.ErrInvalid)
		_, err = f.l.Renew(f.ctx, &ledger.RenewParams{Fence: ledger.Fence{RunID: r.ID, Attempt: 1}})
		wantErr(t, "Renew without an attempt ID", err, ledger.ErrInvalid)
		_, err = f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: fence(r)})
		wantErr(t, "BeginEffect without a name", err, ledger.ErrInvalid)
	},
}

func second[T any](_ T, err error) error { return err }
