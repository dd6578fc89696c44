package ledgertest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

var acquireTests = map[string]func(*testing.T, Harness){
	"QueuedRunIsAcquired": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		claimed := f.claim(id).Run
		r := f.hold(id, longLease)
		if r.Status != ledger.StatusRunning || r.Attempt != 1 || r.AttemptID == "" || r.AttemptID == claimed.AttemptID {
			t.Fatalf("acquired run = %s attempt %d (%q); want running, attempt 1, a new attempt ID", r.Status, r.Attempt, r.AttemptID)
		}
		approx(t, "lease expiry", r.Deadline, r.UpdatedAt.Add(longLease))
		if got := f.get(id); got.Attempt != 1 || got.AttemptID != r.AttemptID || !got.Deadline.Equal(r.Deadline) {
			t.Fatalf("stored run = attempt %d (%q) until %v; Acquire answered %d (%q) until %v", got.Attempt, got.AttemptID, got.Deadline, r.Attempt, r.AttemptID, r.Deadline)
		}
	},
	"AbsentRunIsCreatedRunning": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		r := f.hold(id, longLease)
		want := identity(id)
		if r.Status != ledger.StatusRunning || r.Attempt != 1 || r.Job != want.Job || r.Namespace != want.Namespace ||
			r.Key != want.Key || !r.ScheduleTime.Equal(want.ScheduleTime) || r.PayloadHash != want.PayloadHash ||
			string(r.Payload) != string(want.Payload) || string(f.get(id).Payload) != string(want.Payload) {
			t.Fatalf("Acquire of an absent run = %+v; want it created running at attempt 1 with its identity", r)
		}
		if dup := f.claim(id); dup.Created || dup.Run.Status != ledger.StatusRunning {
			t.Fatalf("a late ingress claim = created %v, %s; want the running run", dup.Created, dup.Run.Status)
		}
	},
	"AbsentRunThatMustExistIsNotCreated": func(t *testing.T, h Harness) {
		// A message that may have outlived its run's record (older than the retention)
		// must not create the run again: it would run a finished run twice.
		f := setup(t, h)
		id := newRunID()
		_, err := f.l.Acquire(f.ctx, &ledger.AcquireParams{Identity: identity(id), AttemptID: uuid.NewString(), Lease: longLease, MustExist: true})
		wantErr(t, "Acquire of an absent run that must exist", err, ledger.ErrNotFound)
		_, err = f.l.Get(f.ctx, &ledger.GetParams{RunID: id})
		wantErr(t, "Get after a refused Acquire", err, ledger.ErrNotFound)
		f.claim(id)
		res, err := f.l.Acquire(f.ctx, &ledger.AcquireParams{Identity: identity(id), AttemptID: uuid.NewString(), Lease: longLease, MustExist: true})
		if err != nil || res.Outcome != ledger.OutcomeAcquired {
			t.Fatalf("Acquire of an existing run that must exist = %v, %v; want acquired", res, err)
		}
	},
	"OtherPayloadIsNeverAcquired": func(t *testing.T, h Harness) {
		// A delivery whose data does not hash to the run's stored payload hash (a forged
		// or stale message) must never run; the run is untouched.
		f := setup(t, h)
		for _, state := range []string{"queued", "expired lease"} {
			id := newRunID()
			before := f.claim(id).Run
			if state == "expired lease" {
				r, err := f.l.Acquire(f.ctx, &ledger.AcquireParams{Identity: identity(id), AttemptID: uuid.NewString(), Lease: time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				f.waitPast(r.Run.Deadline)
				before = f.get(id)
			}
			other := identity(id)
			other.Payload = []byte(`{"n":2}`)
			other.PayloadHash = ledger.PayloadHash(other.Payload)
			res, err := f.l.Acquire(f.ctx, &ledger.AcquireParams{Identity: other, AttemptID: uuid.NewString(), Lease: longLease})
			if err != nil || res.Outcome != ledger.OutcomePayloadMismatch {
				t.Fatalf("%s: Acquire with another payload = %v, %v; want payload_mismatch", state, res, err)
			}
			after := f.get(id)
			if after.Status != before.Status || after.Attempt != before.Attempt || after.AttemptID != before.AttemptID ||
				!after.UpdatedAt.Equal(before.UpdatedAt) || after.AttemptsMade != before.AttemptsMade {
				t.Fatalf("%s: a refused Acquire changed the run: %+v, was %+v", state, after, before)
			}
		}
	},
	"LiveLeaseIsHeld": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		f.claim(id)
		held := f.hold(id, longLease)
		res := f.acquire(id, longLease)
		if res.Outcome != ledger.OutcomeHeld {
			t.Fatalf("Acquire of a live lease = %v, want held", res.Outcome)
		}
		exact(t, "held until", res.Until, held.Deadline)
		if got := f.get(id); got.Attempt != 1 || got.AttemptID != held.AttemptID {
			t.Fatalf("a held Acquire changed the run to attempt %d (%q)", got.Attempt, got.AttemptID)
		}
	},
	"TerminalRunIsTerminal": func(t *testing.T, h Harness) {
		f := setup(t, h)
		done, failed := newRunID(), newRunID()
		r := f.hold(done, longLease)
		if _, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r)}); err != nil {
			t.Fatal(err)
		}
		r = f.hold(failed, longLease)
		if _, err := f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(r), Error: "bad input"}); err != nil {
			t.Fatal(err)
		}
		for id, status := range map[string]ledger.Status{done: ledger.StatusCompleted, failed: ledger.StatusFailed} {
			res := f.acquire(id, longLease)
			if res.Outcome != ledger.OutcomeFinished || res.Run.Status != status || res.Run.Attempt != 1 {
				t.Fatalf("Acquire of a %s run = %v (%s, attempt %d), want terminal and unchanged", status, res.Outcome, res.Run.Status, res.Run.Attempt)
			}
		}
	},
	"ConcurrentAcquireOneWinner": func(t *testing.T, h Harness) {
		for _, queued := range []bool{true, false} {
			f := setup(t, h)
			id := newRunID()
			if queued {
				f.claim(id)
			}
			res, errs := race(contenders, func(int) (*ledger.AcquireResult, error) { return f.tryAcquire(f.l, id, longLease) })
			winners := 0
			var winner *ledger.Run
			for i, r := range res {
				if !loserErr(errs[i]) {
					t.Fatalf("queued=%v: acquire %d: %v (want a result or ledger.ErrContended)", queued, i, errs[i])
				}
				if r == nil {
					continue
				}
				switch r.Outcome {
				case ledger.OutcomeAcquired:
					winners++
					winner = r.Run
				case ledger.OutcomeHeld:
				default:
					t.Fatalf("queued=%v: acquire %d = %v, want acquired or held", queued, i, r.Outcome)
				}
			}
			if winners != 1 {
				t.Fatalf("queued=%v: %d of %d concurrent worker claims acquired the run, want exactly 1", queued, winners, contenders)
			}
			if got := f.get(id); got.Attempt != 1 || got.AttemptID != winner.AttemptID {
				t.Fatalf("queued=%v: stored attempt %d (%q), winner %q", queued, got.Attempt, got.AttemptID, winner.AttemptID)
			}
		}
	},
	"ExpiredLeaseIsTakenOver": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		f.claim(id)
		old := f.hold(id, shortLease)
		f.waitPast(old.Deadline)
		r := f.hold(id, longLease)
		if r.Attempt != 2 || r.AttemptID == old.AttemptID || r.AttemptsMade != 1 || !contains(r.LastError, "lost its lease") {
			t.Fatalf("takeover = attempt %d (%q), made %d, error %q; want attempt 2, a new ID, the dead attempt counted", r.Attempt, r.AttemptID, r.AttemptsMade, r.LastError)
		}
		checkFencedOut(f, old, "after a takeover")
		if got := f.get(id); got.Attempt != 2 || got.AttemptID != r.AttemptID || got.Status != ledger.StatusRunning {
			t.Fatalf("the fenced-out attempt changed the run: %+v", got)
		}
	},
	"RenewExtendsTheLease": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		r := f.hold(id, shortLease)
		deadline := r.Deadline
		// Renew past the original lease; a contender must find it held throughout.
		for range 4 {
			time.Sleep(shortLease / 3)
			renewed, err := f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fence(r), Lease: shortLease})
			if err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if !renewed.Deadline.After(deadline) || renewed.Attempt != r.Attempt || renewed.AttemptID != r.AttemptID {
				t.Fatalf("Renew = until %v (attempt %d), want later than %v, same attempt", renewed.Deadline, renewed.Attempt, deadline)
			}
			deadline = renewed.Deadline
			approx(t, "renewed lease expiry", renewed.Deadline, renewed.UpdatedAt.Add(shortLease))
			if res := f.acquire(id, longLease); res.Outcome != ledger.OutcomeHeld || !res.Until.Equal(deadline) {
				t.Fatalf("Acquire during a renewed lease = %v until %v, want held until %v", res.Outcome, res.Until, deadline)
			}
		}
		got := f.get(id)
		if got.Attempt != 1 || !got.Deadline.Equal(deadline) {
			t.Fatalf("stored lease = attempt %d until %v, want attempt 1 until %v", got.Attempt, got.Deadline, deadline)
		}
	},
	"RetryAfterDelaysTheNextClaim": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		r := f.hold(id, longLease)
		rel, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r), Error: "429", RetryAfter: shortLease})
		if err != nil {
			t.Fatal(err)
		}
		approx(t, "NotBefore", rel.NotBefore, rel.UpdatedAt.Add(shortLease))
		res := f.acquire(id, longLease)
		if res.Outcome != ledger.OutcomeHeld || !res.Until.Equal(rel.NotBefore) {
			t.Fatalf("Acquire before Retry-After = %v until %v, want held until %v", res.Outcome, res.Until, rel.NotBefore)
		}
		f.waitPast(rel.NotBefore)
		if r2 := f.hold(id, longLease); r2.Attempt != 2 || !r2.NotBefore.IsZero() {
			t.Fatalf("Acquire after Retry-After = attempt %d, NotBefore %v; want attempt 2, no NotBefore", r2.Attempt, r2.NotBefore)
		}
	},
}
