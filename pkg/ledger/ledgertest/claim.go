package ledgertest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

var claimTests = map[string]func(*testing.T, Harness){
	"NewRunIsQueued": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		claimID := uuid.NewString()
		res, err := f.l.Claim(f.ctx, &ledger.ClaimParams{Identity: identity(id), AttemptID: claimID, PickupTimeout: 3 * time.Minute, Retention: 48 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Created || res.PayloadMismatch {
			t.Fatalf("Claim = created %v, mismatch %v; want created, no mismatch", res.Created, res.PayloadMismatch)
		}
		want := identity(id)
		for _, r := range []*ledger.Run{res.Run, f.get(id)} {
			if r.ID != id || r.Namespace != want.Namespace || r.Job != want.Job || r.Key != want.Key ||
				!r.ScheduleTime.Equal(want.ScheduleTime) || r.PayloadHash != want.PayloadHash || string(r.Payload) != string(want.Payload) {
				t.Fatalf("run identity = %+v, want %+v", r, want)
			}
			if r.Status != ledger.StatusQueued || r.Attempt != 0 || r.AttemptID != claimID || r.AttemptsMade != 0 {
				t.Fatalf("new run = %s attempt %d (%q), made %d; want queued attempt 0 (%q)", r.Status, r.Attempt, r.AttemptID, r.AttemptsMade, claimID)
			}
			approx(t, "CreatedAt", r.CreatedAt, time.Now())
			exact(t, "UpdatedAt", r.UpdatedAt, r.CreatedAt)
			approxWithin(t, "pickup deadline", r.Deadline, r.CreatedAt.Add(3*time.Minute), hintSlack)
			approxWithin(t, "ExpireAt (the retention after the pickup deadline)", r.ExpireAt, r.UpdatedAt.Add(3*time.Minute+48*time.Hour), hintSlack)
			if !r.CompletedAt.IsZero() || !r.NotBefore.IsZero() {
				t.Fatalf("new run has CompletedAt %v, NotBefore %v; want zero", r.CompletedAt, r.NotBefore)
			}
		}
	},
	"DuplicateReturnsExisting": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		first := f.claim(id).Run
		again := f.claim(id)
		if again.Created || again.PayloadMismatch {
			t.Fatalf("second Claim = created %v, mismatch %v; want neither", again.Created, again.PayloadMismatch)
		}
		if again.Run.AttemptID != first.AttemptID || !again.Run.UpdatedAt.Equal(first.UpdatedAt) {
			t.Fatalf("duplicate claim changed the run: %+v, was %+v", again.Run, first)
		}
	},
	"DuplicateOfRunningRunLeavesIt": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		f.claim(id)
		held := f.hold(id, longLease)
		again := f.claim(id)
		if again.Created || again.Run.Status != ledger.StatusRunning || again.Run.Attempt != held.Attempt || again.Run.AttemptID != held.AttemptID {
			t.Fatalf("Claim of a running run = %+v; want it unchanged (attempt %d)", again.Run, held.Attempt)
		}
	},
	"PayloadMismatch": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		f.claim(id)
		other := identity(id)
		other.PayloadHash = ledger.PayloadHash([]byte(`{"n":2}`))
		res, err := f.l.Claim(f.ctx, &ledger.ClaimParams{Identity: other, AttemptID: uuid.NewString()})
		if err != nil {
			t.Fatal(err)
		}
		if res.Created || !res.PayloadMismatch || res.Run.PayloadHash != identity(id).PayloadHash {
			t.Fatalf("Claim with another payload = created %v, mismatch %v, hash %s; want a mismatch reported, the stored hash kept", res.Created, res.PayloadMismatch, res.Run.PayloadHash)
		}
	},
	"ConcurrentClaimsOneWinner": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		res, errs := race(contenders, func(int) (*ledger.ClaimResult, error) {
			return f.l.Claim(f.ctx, &ledger.ClaimParams{Identity: identity(id), AttemptID: uuid.NewString()})
		})
		winners := 0
		var winner string
		for i, r := range res {
			if !loserErr(errs[i]) {
				t.Fatalf("claim %d: %v (want a result or ledger.ErrContended)", i, errs[i])
			}
			if r != nil && r.Created {
				winners++
				winner = r.Run.AttemptID
			}
		}
		if winners != 1 {
			t.Fatalf("%d of %d concurrent claims created the run, want exactly 1", winners, contenders)
		}
		for i, r := range res {
			if r != nil && r.Run.AttemptID != winner {
				t.Fatalf("claim %d saw claim %q, the winner was %q", i, r.Run.AttemptID, winner)
			}
		}
		if got := f.get(id).AttemptID; got != winner {
			t.Fatalf("stored claim %q, winner %q", got, winner)
		}
	},
	"InvalidParams": func(t *testing.T, h Harness) {
		f := setup(t, h)
		_, err := f.l.Claim(f.ctx, &ledger.ClaimParams{Identity: identity("not-a-run-id"), AttemptID: "a"})
		wantErr(t, "Claim with a malformed run ID", err, ledger.ErrInvalid)
		_, err = f.l.Claim(f.ctx, &ledger.ClaimParams{Identity: identity(newRunID())})
		wantErr(t, "Claim without an attempt ID", err, ledger.ErrInvalid)
		_, err = f.l.Acquire(f.ctx, &ledger.AcquireParams{Identity: identity(newRunID())})
		wantErr(t, "Acquire without an attempt ID", err, ledger.ErrInvalid)
	},
	"GetMissing": func(t *testing.T, h Harness) {
		f := setup(t, h)
		_, err := f.l.Get(f.ctx, &ledger.GetParams{RunID: newRunID()})
		wantErr(t, "Get of an absent run", err, ledger.ErrNotFound)
		_, err = f.l.GetEffect(f.ctx, &ledger.GetEffectParams{RunID: newRunID(), Name: "x"})
		wantErr(t, "GetEffect of an absent effect", err, ledger.ErrNotFound)
	},
	"ExpediteKeepsTheRunAndMakesItDue": func(t *testing.T, h Harness) {
		// The ingress expedites a claim it could not publish. The record must stay: a
		// concurrent duplicate may already have been answered 2xx for it.
		f := setup(t, h)
		id := newRunID()
		claimID := uuid.NewString()
		c, err := f.l.Claim(f.ctx, &ledger.ClaimParams{Identity: identity(id), AttemptID: claimID, PickupTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.l.Expedite(f.ctx, &ledger.ExpediteParams{RunID: id, AttemptID: uuid.NewString()})
		wantErr(t, "Expedite by another claim", err, ledger.ErrLeaseLost)
		r, err := f.l.Expedite(f.ctx, &ledger.ExpediteParams{RunID: id, AttemptID: claimID})
		if err != nil {
			t.Fatalf("Expedite by its claim: %v", err)
		}
		if r.Status != ledger.StatusQueued || r.AttemptID != claimID || !r.Deadline.Before(c.Run.Deadline.Add(-50*time.Minute)) {
			t.Fatalf("expedited run = %s attempt %q deadline %v; want queued, the claim's attempt, due now (was %v)", r.Status, r.AttemptID, r.Deadline, c.Run.Deadline)
		}
		approx(t, "expedited Deadline", r.Deadline, r.UpdatedAt)
		if got := f.get(id); got.Status != ledger.StatusQueued || !got.Deadline.Equal(r.Deadline) {
			t.Fatalf("stored run after Expedite = %s deadline %v, want queued with deadline %v", got.Status, got.Deadline, r.Deadline)
		}
		if res := f.claim(id); res.Created || res.Run.AttemptID != claimID {
			t.Fatalf("a claim after Expedite: created %v attempt %q; want the existing run", res.Created, res.Run.AttemptID)
		}
		f.waitPast(r.Deadline)
		if _, ok := f.listRescue(f.l)[id]; !ok {
			t.Fatal("an expedited run is not listed for rescue once its deadline passed")
		}
		_, err = f.l.Expedite(f.ctx, &ledger.ExpediteParams{RunID: newRunID(), AttemptID: claimID})
		wantErr(t, "Expedite of an absent run", err, ledger.ErrNotFound)
	},
	"ExpediteRefusedOnceTaken": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		claimID := f.claim(id).Run.AttemptID
		held := f.hold(id, longLease)
		_, err := f.l.Expedite(f.ctx, &ledger.ExpediteParams{RunID: id, AttemptID: claimID})
		wantErr(t, "Expedite of a run a worker took", err, ledger.ErrLeaseLost)
		if got := f.get(id); got.Status != ledger.StatusRunning || !got.Deadline.Equal(held.Deadline) {
			t.Fatal("a refused Expedite changed the run")
		}
	},
}
