package ledgertest

import (
	"strings"
	"testing"

	"github.com/runonce/runonce/pkg/ledger"
)

func (f *fixture) begin(r *ledger.Run, name string) *ledger.BeginEffectResult {
	f.t.Helper()
	res, err := f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: fence(r), Name: name})
	if err != nil {
		f.t.Fatalf("BeginEffect(%s, attempt %d): %v", name, r.Attempt, err)
	}
	return res
}

func (f *fixture) doneEffect(r *ledger.Run, name string) *ledger.Effect {
	f.t.Helper()
	e, err := f.l.CompleteEffect(f.ctx, &ledger.CompleteEffectParams{Fence: fence(r), Name: name})
	if err != nil {
		f.t.Fatalf("CompleteEffect(%s, attempt %d): %v", name, r.Attempt, err)
	}
	return e
}

func (f *fixture) effect(runID, name string) *ledger.Effect {
	f.t.Helper()
	e, err := f.l.GetEffect(f.ctx, &ledger.GetEffectParams{RunID: runID, Name: name})
	if err != nil {
		f.t.Fatalf("GetEffect(%s): %v", name, err)
	}
	return e
}

var effectTests = map[string]func(*testing.T, Harness){
	"Lifecycle": func(t *testing.T, h Harness) {
		f := setup(t, h)
		r := f.hold(newRunID(), longLease)
		res := f.begin(r, "charge")
		e := res.Effect
		if res.Done || res.PreviousAttempt != 0 || e.Status != ledger.EffectPending || e.Attempt != 1 ||
			e.Key != ledger.EffectKey(r.ID, "charge") || e.RunID != r.ID || e.Name != "charge" {
			t.Fatalf("BeginEffect of a new effect = %+v (done %v, previous %d); want pending at attempt 1 under EffectKey", e, res.Done, res.PreviousAttempt)
		}
		approx(t, "effect ExpireAt", e.ExpireAt, e.UpdatedAt.Add(ledger.DefaultRetention))
		if got := f.effect(r.ID, "charge"); got.Status != ledger.EffectPending || got.Attempt != 1 {
			t.Fatalf("stored effect = %s at %d, want pending at 1", got.Status, got.Attempt)
		}
		done := f.doneEffect(r, "charge")
		if done.Status != ledger.EffectDone || done.DoneAt.IsZero() || done.Attempt != 1 {
			t.Fatalf("CompleteEffect = %+v, want done at attempt 1", done)
		}
		if again := f.doneEffect(r, "charge"); !again.DoneAt.Equal(done.DoneAt) {
			t.Fatalf("a repeated CompleteEffect changed DoneAt from %v to %v", done.DoneAt, again.DoneAt)
		}
		if res := f.begin(r, "charge"); !res.Done {
			t.Fatal("BeginEffect of a done effect in the same attempt did not report it done")
		}
		if other := f.begin(r, "email"); other.Done || other.Effect.Key == e.Key {
			t.Fatal("two effect names of one run share a record")
		}
	},
	"DoneEffectIsSkippedByTheNextAttempt": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		r1 := f.hold(id, longLease)
		f.begin(r1, "charge")
		f.doneEffect(r1, "charge")
		if _, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r1), Error: "later step failed"}); err != nil {
			t.Fatal(err)
		}
		r2 := f.hold(id, longLease)
		res := f.begin(r2, "charge")
		if !res.Done || res.Effect.Attempt != 1 {
			t.Fatalf("attempt 2's BeginEffect of an effect attempt 1 did = done %v (attempt %d); want done by 1, skipped", res.Done, res.Effect.Attempt)
		}
	},
	"PendingEffectOfADeadAttempt": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		r1 := f.hold(id, shortLease)
		f.begin(r1, "charge") // the attempt dies here, in the middle of the effect
		if got := f.effect(id, "charge"); got.Status != ledger.EffectPending || got.Attempt != 1 {
			t.Fatalf("effect of the dying attempt = %s at %d, want pending at 1", got.Status, got.Attempt)
		}
		f.waitPast(r1.Deadline)
		r2 := f.hold(id, longLease)
		res := f.begin(r2, "charge")
		if res.Done || res.PreviousAttempt != 1 || res.Effect.Attempt != 2 || res.Effect.Status != ledger.EffectPending ||
			res.Effect.Key != ledger.EffectKey(id, "charge") {
			t.Fatalf("BeginEffect after a dead attempt = %+v (done %v, previous %d); want pending at 2, previous 1, same key", res.Effect, res.Done, res.PreviousAttempt)
		}
		_, err := f.l.CompleteEffect(f.ctx, &ledger.CompleteEffectParams{Fence: fence(r1), Name: "charge"})
		wantErr(t, "CompleteEffect by the dead attempt", err, ledger.ErrLeaseLost)
		f.doneEffect(r2, "charge")
		if got := f.effect(id, "charge"); got.Status != ledger.EffectDone || got.Attempt != 2 {
			t.Fatalf("effect = %s at %d, want done at 2", got.Status, got.Attempt)
		}
	},
	"RefIsRecordedWithTheEffect": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		r1 := f.hold(id, longLease)
		f.begin(r1, "start")
		ref := "projects/p/locations/l/workflows/w/executions/" + strings.Repeat("x", 36)
		done, err := f.l.CompleteEffect(f.ctx, &ledger.CompleteEffectParams{Fence: fence(r1), Name: "start", Ref: ref})
		if err != nil {
			t.Fatal(err)
		}
		if done.Ref != ref {
			t.Fatalf("CompleteEffect with a ref answered Ref %q, want %q", done.Ref, ref)
		}
		if got := f.effect(id, "start"); got.Ref != ref {
			t.Fatalf("stored effect's Ref = %q, want %q", got.Ref, ref)
		}
		if _, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r1), Error: "shut down while waiting"}); err != nil {
			t.Fatal(err)
		}
		r2 := f.hold(id, longLease)
		if res := f.begin(r2, "start"); !res.Done || res.Effect.Ref != ref {
			t.Fatalf("the next attempt's BeginEffect = done %v, Ref %q; want done with Ref %q", res.Done, res.Effect.Ref, ref)
		}
		f.begin(r2, "plain")
		if e := f.doneEffect(r2, "plain"); e.Ref != "" {
			t.Fatalf("an effect completed without a ref has Ref %q", e.Ref)
		}
		f.begin(r2, "big")
		_, err = f.l.CompleteEffect(f.ctx, &ledger.CompleteEffectParams{Fence: fence(r2), Name: "big", Ref: strings.Repeat("x", ledger.MaxEffectRef+1)})
		wantErr(t, "CompleteEffect with a ref over MaxEffectRef", err, ledger.ErrInvalid)
	},
	"CompleteWithoutBegin": func(t *testing.T, h Harness) {
		f := setup(t, h)
		r := f.hold(newRunID(), longLease)
		_, err := f.l.CompleteEffect(f.ctx, &ledger.CompleteEffectParams{Fence: fence(r), Name: "never-begun"})
		wantErr(t, "CompleteEffect of an effect never begun", err, ledger.ErrNotFound)
	},
}
