package ledgertest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

const skew = 10 * time.Minute

var clockTests = map[string]func(*testing.T, Harness){
	"SkewedCallersDecideNothingDifferently": func(t *testing.T, h Harness) {
		if h.SkewedClient == nil {
			t.Skip("the backend's clock is the process's by construction: no caller clock to skew")
		}
		f := setup(t, h)
		ahead := &checked{Ledger: h.SkewedClient(t, f.raw, skew), t: t}
		behind := &checked{Ledger: h.SkewedClient(t, f.raw, -skew), t: t}

		// A claim through a skewed client is stamped with the backend's time.
		id := newRunID()
		res, err := ahead.Claim(f.ctx, &ledger.ClaimParams{Identity: identity(id), AttemptID: uuid.NewString(), PickupTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		approx(t, "CreatedAt through a client 10 minutes ahead", res.Run.CreatedAt, time.Now())
		approxWithin(t, "pickup deadline through a client 10 minutes ahead", res.Run.Deadline, time.Now().Add(time.Hour), hintSlack)

		// A live lease is live for a client that thinks it expired 10 minutes ago.
		held := f.hold(id, shortLease+time.Second)
		got, err := f.tryAcquire(ahead, id, longLease)
		if err != nil || got.Outcome != ledger.OutcomeHeld {
			t.Fatalf("Acquire through a client 10 minutes ahead = %v, %v; want held (the lease is live by the backend's clock)", got, err)
		}
		if _, listed := f.listRescue(ahead)[id]; listed {
			t.Fatal("a client 10 minutes ahead lists a live lease for rescue")
		}

		// An expired lease is expired for a client that thinks it has 10 minutes left.
		f.waitPast(held.Deadline)
		got, err = f.tryAcquire(behind, id, shortLease)
		if err != nil || got.Outcome != ledger.OutcomeAcquired || got.Run.Attempt != 2 {
			t.Fatalf("Acquire through a client 10 minutes behind = %v, %v; want acquired at attempt 2 (the lease expired by the backend's clock)", got, err)
		}
		approx(t, "lease expiry through a client 10 minutes behind", got.Run.Deadline, time.Now().Add(shortLease))
		if _, listed := f.listRescue(behind)[id]; listed {
			t.Fatal("the new lease is listed for rescue")
		}
		f.waitPast(got.Run.Deadline)
		if _, listed := f.listRescue(behind)[id]; !listed {
			t.Fatal("a client 10 minutes behind does not list an expired lease for rescue")
		}
		renewed, err := behind.Renew(f.ctx, &ledger.RenewParams{Fence: fence(got.Run), Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		approx(t, "renewed lease through a client 10 minutes behind", renewed.Deadline, time.Now().Add(time.Minute))
	},
	"CallerSuppliedNow": func(t *testing.T, h Harness) {
		f := setup(t, h)
		at := time.Date(2031, 3, 4, 5, 6, 7, 891011000, time.UTC)
		id := newRunID()
		res, err := f.l.Claim(f.ctx, &ledger.ClaimParams{Identity: identity(id), AttemptID: uuid.NewString(), Now: at})
		if !h.SupportsNow {
			wantErr(t, "Claim with a Now on a backend that cannot honour it", err, ledger.ErrNowUnsupported)
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		exact(t, "CreatedAt", res.Run.CreatedAt, at)
		a, err := f.l.Acquire(f.ctx, &ledger.AcquireParams{Identity: identity(id), AttemptID: uuid.NewString(), Lease: time.Minute, Now: at})
		if err != nil || a.Outcome != ledger.OutcomeAcquired {
			t.Fatalf("Acquire at Now = %v, %v", a, err)
		}
		exact(t, "lease expiry", a.Run.Deadline, at.Add(time.Minute))
		b, err := f.l.Acquire(f.ctx, &ledger.AcquireParams{Identity: identity(id), AttemptID: uuid.NewString(), Now: at.Add(59 * time.Second)})
		if err != nil || b.Outcome != ledger.OutcomeHeld {
			t.Fatalf("Acquire at Now+59s = %v, %v; want held", b, err)
		}
		b, err = f.l.Acquire(f.ctx, &ledger.AcquireParams{Identity: identity(id), AttemptID: uuid.NewString(), Now: at.Add(61 * time.Second)})
		if err != nil || b.Outcome != ledger.OutcomeAcquired || b.Run.Attempt != 2 {
			t.Fatalf("Acquire at Now+61s = %v, %v; want acquired at attempt 2", b, err)
		}
		runs, err := f.l.ListRescue(f.ctx, &ledger.ListRescueParams{Now: at.Add(time.Hour)})
		if err != nil || len(runs) != 1 || runs[0].ID != id {
			t.Fatalf("ListRescue at Now+1h = %d runs, %v; want the run", len(runs), err)
		}
	},
}
