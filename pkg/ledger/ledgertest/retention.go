package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

// claimFor claims id with the given retention and pickup timeout.
func (f *fixture) claimFor(id string, keep, pickup time.Duration) *ledger.Run {
	f.t.Helper()
	res, err := f.l.Claim(f.ctx, &ledger.ClaimParams{Identity: identity(id), AttemptID: uuid.NewString(), Retention: keep, PickupTimeout: pickup})
	if err != nil {
		f.t.Fatalf("Claim(%s): %v", id, err)
	}
	return res.Run
}

var retentionTests = map[string]func(*testing.T, Harness){
	"EveryWriteSetsExpireAt": func(t *testing.T, h Harness) {
		// ExpireAt is the retention after the latest of the write, the deadline and the
		// not-before: a run is never swept before its retry or its rescue is due.
		f := setup(t, h)
		id := newRunID()
		c := f.claimFor(id, time.Hour, 0)
		approxWithin(t, "claim ExpireAt", c.ExpireAt, c.Deadline.Add(time.Hour), hintSlack)
		a, err := f.l.Acquire(f.ctx, &ledger.AcquireParams{Identity: identity(id), AttemptID: uuid.NewString(), Lease: longLease, Retention: 2 * time.Hour})
		if err != nil || a.Outcome != ledger.OutcomeAcquired {
			t.Fatalf("Acquire = %v, %v", a, err)
		}
		approx(t, "acquire ExpireAt", a.Run.ExpireAt, a.Run.Deadline.Add(2*time.Hour))
		renewed, err := f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fence(a.Run), Lease: 3 * time.Hour, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		approx(t, "renew ExpireAt", renewed.ExpireAt, renewed.Deadline.Add(time.Hour))
		e, err := f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: fence(a.Run), Name: "e", Retention: 3 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		approx(t, "effect ExpireAt", e.Effect.ExpireAt, e.Effect.UpdatedAt.Add(3*time.Hour))
		rel, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(a.Run), Retention: 4 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		approx(t, "release ExpireAt", rel.ExpireAt, rel.Deadline.Add(4*time.Hour))
		d := f.hold(id, longLease)
		failed, err := f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(d), Retention: 5 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		approx(t, "fail ExpireAt", failed.ExpireAt, failed.UpdatedAt.Add(5*time.Hour))
	},
	"RetryAfterKeepsTheRunUntilItIsDue": func(t *testing.T, h Harness) {
		// A Retry-After as long as the retention must not let the run expire before the
		// retry is due: ExpireAt follows NotBefore.
		f := setup(t, h)
		id := newRunID()
		r := f.hold(id, longLease)
		rel, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r), RetryAfter: time.Hour, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		approx(t, "NotBefore", rel.NotBefore, rel.UpdatedAt.Add(time.Hour))
		if min := rel.NotBefore.Add(time.Hour); rel.ExpireAt.Before(min) {
			t.Fatalf("ExpireAt %v is before NotBefore + retention %v: the sweeper deletes the run before its retry", rel.ExpireAt, min)
		}
		r = f.hold(newRunID(), longLease)
		_, err = f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r), RetryAfter: 2 * time.Hour, Retention: time.Hour})
		wantErr(t, "Release with a retry after longer than the retention", err, ledger.ErrInvalid)
		_, err = f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r), RetryAfter: -time.Second})
		wantErr(t, "Release with a negative retry after", err, ledger.ErrInvalid)
		if got := f.get(r.ID); got.Status != ledger.StatusRunning {
			t.Fatalf("a refused Release changed the run to %s", got.Status)
		}
	},
	"ExpiredRecordStillDeduplicates": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		c := f.claimFor(id, time.Millisecond, time.Millisecond)
		f.waitPast(c.ExpireAt)
		if res := f.claim(id); res.Created || res.Run.AttemptID != c.AttemptID {
			t.Fatalf("Claim of a run past ExpireAt = created %v; want the existing run: it still deduplicates", res.Created)
		}
		r := f.hold(id, longLease)
		if _, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r), Retention: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		f.waitPast(f.get(id).ExpireAt)
		if res := f.acquire(id, longLease); res.Outcome != ledger.OutcomeFinished {
			t.Fatalf("Acquire of a completed run past ExpireAt = %v, want terminal", res.Outcome)
		}
	},
	"SweepDeletesExpiredRecords": func(t *testing.T, h Harness) {
		f := setup(t, h)
		gone, kept := newRunID(), newRunID()
		g := f.claimFor(gone, time.Millisecond, time.Millisecond)
		f.claimFor(kept, time.Hour, 0)
		f.waitPast(g.ExpireAt)
		n, err := f.l.Sweep(f.ctx, &ledger.SweepParams{})
		if err != nil {
			t.Fatal(err)
		}
		// The probes of waitPast are claimed with the default retention: not swept.
		if n != 1 {
			t.Fatalf("Sweep deleted %d records, want 1 (the expired run)", n)
		}
		_, err = f.l.Get(f.ctx, &ledger.GetParams{RunID: gone})
		wantErr(t, "Get of a swept run", err, ledger.ErrNotFound)
		f.get(kept)
		if !f.claim(gone).Created {
			t.Fatal("a claim after the sweep did not create the run anew")
		}
	},
	"EffectsLiveAsLongAsTheirRun": func(t *testing.T, h Harness) {
		// An effect past its own expire_at whose run lives on is kept: a later attempt
		// must still find it done. It goes once its run is gone.
		f := setup(t, h)
		id := newRunID()
		// A short lease and retention: the run itself may go soon after it ends (a
		// backend may move a live run's effect's expire_at to the run's).
		a, err := f.l.Acquire(f.ctx, &ledger.AcquireParams{Identity: identity(id), AttemptID: uuid.NewString(), Lease: shortLease, Retention: time.Millisecond})
		if err != nil || a.Outcome != ledger.OutcomeAcquired {
			t.Fatalf("Acquire = %v, %v", a, err)
		}
		r := a.Run
		if _, err := f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: fence(r), Name: "short", Retention: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		e, err := f.l.CompleteEffect(f.ctx, &ledger.CompleteEffectParams{Fence: fence(r), Name: "short", Retention: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		f.waitPast(e.ExpireAt)
		if _, err := f.l.Sweep(f.ctx, &ledger.SweepParams{}); err != nil {
			t.Fatal(err)
		}
		if got := f.effect(id, "short"); got.Status != ledger.EffectDone {
			t.Fatalf("effect after the sweep = %s, want done", got.Status)
		}
		// The run ends and expires; then its effect goes too.
		done, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r), Retention: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		f.waitPast(maxTime(done.ExpireAt, r.ExpireAt))
		for i := 0; ; i++ {
			if _, err := f.l.Sweep(f.ctx, &ledger.SweepParams{}); err != nil {
				t.Fatal(err)
			}
			_, err := f.l.GetEffect(f.ctx, &ledger.GetEffectParams{RunID: id, Name: "short"})
			if errors.Is(err, ledger.ErrNotFound) {
				break
			}
			if i == 3 {
				t.Fatalf("the effect of a swept run is still there after %d sweeps (%v)", i+1, err)
			}
		}
		_, err = f.l.Get(f.ctx, &ledger.GetParams{RunID: id})
		wantErr(t, "Get of the swept run", err, ledger.ErrNotFound)
	},
	"SweepIsBounded": func(t *testing.T, h Harness) {
		f := setup(t, h)
		var last time.Time
		for range 3 {
			last = f.claimFor(newRunID(), time.Millisecond, time.Millisecond).ExpireAt
		}
		f.waitPast(last)
		for _, want := range []int{2, 1, 0} {
			n, err := f.l.Sweep(f.ctx, &ledger.SweepParams{Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			if n != want {
				t.Fatalf("Sweep(limit 2) deleted %d, want %d", n, want)
			}
		}
	},
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
