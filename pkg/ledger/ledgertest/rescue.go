package ledgertest

import (
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

func (f *fixture) listRescue(l *ledger.Ledger) map[string]*ledger.Run {
	f.t.Helper()
	runs, err := l.ListRescue(f.ctx, &ledger.ListRescueParams{})
	if err != nil {
		f.t.Fatalf("ListRescue: %v", err)
	}
	out := map[string]*ledger.Run{}
	for i, r := range runs {
		if i > 0 && r.Deadline.Before(runs[i-1].Deadline) {
			f.t.Fatalf("ListRescue is not ordered by deadline: %v after %v", r.Deadline, runs[i-1].Deadline)
		}
		out[r.ID] = r
	}
	return out
}

func rescueOf(r *ledger.Run) *ledger.RescueParams {
	return &ledger.RescueParams{RunID: r.ID, Status: r.Status, Attempt: r.Attempt, Deadline: r.Deadline, PickupTimeout: 2 * time.Minute}
}

var rescueTests = map[string]func(*testing.T, Harness){
	"ListRescue": func(t *testing.T, h Harness) {
		f := setup(t, h)
		overdue, fresh, expired, live, done := newRunID(), newRunID(), newRunID(), newRunID(), newRunID()
		q := f.claimFor(overdue, 0, time.Millisecond)
		f.claimFor(fresh, 0, time.Hour)
		e := f.hold(expired, shortLease)
		f.hold(live, longLease)
		c := f.hold(done, shortLease)
		if _, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(c)}); err != nil {
			t.Fatal(err)
		}
		f.waitPast(maxTime(q.Deadline, e.Deadline))
		got := f.listRescue(f.l)
		if len(got) != 2 || got[overdue] == nil || got[expired] == nil {
			t.Fatalf("ListRescue = %d runs %v; want exactly the overdue queued run and the expired lease", len(got), keys(got))
		}
		if got[expired].Status != ledger.StatusRunning || got[overdue].Status != ledger.StatusQueued {
			t.Fatalf("listed statuses %s, %s; want running, queued", got[expired].Status, got[overdue].Status)
		}
		n, err := f.l.ListRescue(f.ctx, &ledger.ListRescueParams{Limit: 1})
		if err != nil || len(n) != 1 || n[0].ID != overdue {
			t.Fatalf("ListRescue(limit 1) = %d runs, %v; want the oldest deadline only", len(n), err)
		}
	},
	"RescueQueued": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		q := f.claimFor(id, 0, time.Millisecond)
		f.waitPast(q.Deadline)
		listed := f.listRescue(f.l)[id]
		if listed == nil {
			t.Fatal("an overdue queued run is not listed")
		}
		r, err := f.l.Rescue(f.ctx, rescueOf(listed))
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != ledger.StatusQueued || r.Attempt != 0 || r.AttemptsMade != 0 {
			t.Fatalf("rescued queued run = %+v; want queued, attempt 0, nothing counted", r)
		}
		approx(t, "new pickup deadline", r.Deadline, r.UpdatedAt.Add(2*time.Minute))
		if f.listRescue(f.l)[id] != nil {
			t.Fatal("a rescued run is still listed")
		}
		_, err = f.l.Rescue(f.ctx, rescueOf(listed))
		wantErr(t, "a second rescue of the same listing", err, ledger.ErrConflict)
		if got := f.hold(id, longLease); got.Attempt != 1 {
			t.Fatalf("claim after rescue = attempt %d, want 1", got.Attempt)
		}
	},
	"RescueExpiredLease": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		old := f.hold(id, shortLease)
		f.waitPast(old.Deadline)
		listed := f.listRescue(f.l)[id]
		if listed == nil {
			t.Fatal("an expired lease is not listed")
		}
		r, err := f.l.Rescue(f.ctx, rescueOf(listed))
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != ledger.StatusQueued || r.AttemptsMade != 1 || !contains(r.LastError, "lost its lease") {
			t.Fatalf("rescued lease = %+v; want queued with the dead attempt counted", r)
		}
		checkFencedOut(f, old, "after a rescue")
		if got := f.hold(id, longLease); got.Attempt != 2 {
			t.Fatalf("claim after rescue = attempt %d, want 2", got.Attempt)
		}
	},
	"RescueRefusedWhenTheRunMoved": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		q := f.claimFor(id, 0, time.Millisecond)
		f.waitPast(q.Deadline)
		listed := f.listRescue(f.l)[id]
		f.hold(id, longLease) // a worker got the message after all
		_, err := f.l.Rescue(f.ctx, rescueOf(listed))
		wantErr(t, "Rescue of a run acquired since it was listed", err, ledger.ErrConflict)
		live := f.get(id)
		_, err = f.l.Rescue(f.ctx, rescueOf(live))
		wantErr(t, "Rescue of a live lease", err, ledger.ErrConflict)
		if got := f.get(id); got.Status != ledger.StatusRunning || got.Attempt != 1 {
			t.Fatalf("refused rescues changed the run to %s at %d", got.Status, got.Attempt)
		}
	},
	"ConcurrentRescueOneWinner": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		q := f.claimFor(id, 0, time.Millisecond)
		f.waitPast(q.Deadline)
		listed := f.listRescue(f.l)[id]
		_, errs := race(16, func(int) (*ledger.Run, error) { return f.l.Rescue(f.ctx, rescueOf(listed)) })
		wins := 0
		for i, err := range errs {
			switch {
			case err == nil:
				wins++
			case !errIs(err, ledger.ErrConflict) && !errIs(err, ledger.ErrContended):
				t.Fatalf("rescue %d: %v, want success, ErrConflict or ErrContended", i, err)
			}
		}
		if wins != 1 {
			t.Fatalf("%d of 16 concurrent rescues of one listing succeeded, want exactly 1", wins)
		}
	},
}

func keys(m map[string]*ledger.Run) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k[:8])
	}
	return out
}
