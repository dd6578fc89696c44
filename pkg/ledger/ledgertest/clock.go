package ledgertest

import (
	"errors"
	"sync/atomic"
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
		ahead := check(t, h.SkewedClient(t, f.drv, func() time.Duration { return skew }))
		behind := check(t, h.SkewedClient(t, f.drv, func() time.Duration { return -skew }))

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
	// A client whose process clock steps after it learned the backend's clock (a
	// backend that estimates the server's time from its own, for a write that cannot
	// read it first, may then stamp a run ahead of the server's time) still leaves each
	// run's history in time order.
	"HistoryInOrderWhenTheClockSteps": func(t *testing.T, h Harness) {
		if h.SkewedClient == nil {
			t.Skip("the backend's clock is the process's by construction: no caller clock to skew")
		}
		if !h.Operations {
			t.Skip("the backend keeps no history")
		}
		f := setup(t, h)
		var step atomic.Int64
		c := check(t, h.SkewedClient(t, f.drv, func() time.Duration { return time.Duration(step.Load()) }))
		for _, d := range []time.Duration{250 * time.Millisecond, -250 * time.Millisecond} {
			// Teach the client the backend's clock, then step its process clock.
			step.Store(0)
			if _, err := c.Get(f.ctx, &ledger.GetParams{RunID: newRunID()}); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("Get of an absent run: %v", err)
			}
			step.Store(int64(d))
			id := newRunID()
			if _, err := c.Claim(f.ctx, &ledger.ClaimParams{Identity: identity(id), AttemptID: uuid.NewString(), PickupTimeout: time.Hour}); err != nil {
				t.Fatal(err)
			}
			a, err := c.Acquire(f.ctx, &ledger.AcquireParams{Identity: identity(id), AttemptID: uuid.NewString(), Lease: longLease, Worker: "w"})
			if err != nil || a.Outcome != ledger.OutcomeAcquired {
				t.Fatalf("Acquire = %v, %v", a, err)
			}
			if _, err := c.Renew(f.ctx, &ledger.RenewParams{Fence: fence(a.Run), Lease: longLease}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(a.Run)}); err != nil {
				t.Fatal(err)
			}
			r := f.get(id)
			if len(r.History) < 3 {
				t.Fatalf("history of a claimed, started and completed run: %+v", r.History)
			}
			for i := 1; i < len(r.History); i++ {
				if r.History[i].At.Before(r.History[i-1].At) {
					t.Fatalf("process clock stepped %v: history out of order at %d: %s at %v before %s at %v", d, i,
						r.History[i].Kind, r.History[i].At, r.History[i-1].Kind, r.History[i-1].At)
				}
			}
		}
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
