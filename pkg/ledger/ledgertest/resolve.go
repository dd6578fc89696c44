package ledgertest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// resolveTests check an operator's resolution of an uncertain effect (ResolveEffect):
// the verdict lands on the effect and the run is queued again, in one write.
var resolveTests = map[string]func(*testing.T, Harness){
	"DoneRecordsTheRefAndRequeues":        testResolveDone,
	"NotDoneIsDoneAgainUnderTheSameKey":   testResolveNotDone,
	"RefusesARunThatIsNotFailed":          testResolveWrongStatus,
	"RefusesAnAbsentRunOrEffect":          testResolveAbsent,
	"RefusesAnEffectAlreadyDone":          testResolveAlreadyDone,
	"FencedByTheAttemptSeen":              testResolveFenced,
	"RefusesBadParameters":                testResolveInvalid,
	"ConcurrentResolvesAndRetriesOneWins": testResolveConcurrent,
}

// uncertainEffect is the effect whose outcome the failing attempt of uncertain left
// unknown.
const uncertainEffect = "run/2"

// uncertain returns a run its first attempt failed after doing effect "charge" and
// beginning uncertainEffect without marking it done (the answer of a start was lost).
func (f *fixture) uncertain(id string) *ledger.Run {
	f.t.Helper()
	f.claim(id)
	r := f.hold(id, longLease)
	f.begin(r, "charge")
	f.doneEffect(r, "charge")
	f.begin(r, uncertainEffect)
	out, err := f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(r), Error: "the start's outcome is unknown"})
	if err != nil {
		f.t.Fatalf("Fail: %v", err)
	}
	return out
}

func resolution(id string, done bool, ref, reason string) *ledger.ResolveEffectParams {
	return &ledger.ResolveEffectParams{OperatorParams: *operator(id, reason), Effect: uncertainEffect, Done: done, Ref: ref}
}

// lastEvent returns the latest event of run id's history.
func (f *fixture) lastEvent(id string) ledger.Event {
	f.t.Helper()
	h := f.get(id).History
	if len(h) == 0 {
		f.t.Fatalf("run %s has no history", id)
	}
	return h[len(h)-1]
}

// requeued checks that r is failed run as a retry queues it: fresh attempt budget,
// same attempt, a pickup deadline, no finish time.
func requeued(t *testing.T, what string, r, failed *ledger.Run) {
	t.Helper()
	if r.Status != ledger.StatusQueued || r.AttemptsMade != 0 || r.Attempt != failed.Attempt || !r.CompletedAt.IsZero() ||
		r.LastError != failed.LastError || !r.Deadline.After(r.UpdatedAt) {
		t.Fatalf("after %s: %s, %d attempts made, attempt %d, completed at %v, last error %q, deadline %v (written %v); "+
			"want queued, 0, %d, zero, %q, a pickup deadline after the write",
			what, r.Status, r.AttemptsMade, r.Attempt, r.CompletedAt, r.LastError, r.Deadline, r.UpdatedAt, failed.Attempt, failed.LastError)
	}
}

func testResolveDone(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	failed := f.uncertain(id)
	const ref = "projects/p/locations/l/workflows/w/executions/e-1"
	p := resolution(id, true, ref, "the execution ran: I found it in the console")
	p.Retention = 48 * time.Hour
	r, err := f.l.ResolveEffect(f.ctx, p)
	if err != nil {
		t.Fatalf("ResolveEffect(done): %v", err)
	}
	requeued(t, "ResolveEffect(done)", r, failed)
	if got := f.get(id); got.Status != ledger.StatusQueued || got.AttemptsMade != 0 {
		t.Fatalf("Get after ResolveEffect: %s with %d attempts made, want queued with 0", got.Status, got.AttemptsMade)
	}
	e := f.effect(id, uncertainEffect)
	if e.Status != ledger.EffectDone || e.Ref != ref || e.Attempt != failed.Attempt || e.DoneAt.IsZero() {
		t.Fatalf("the resolved effect = %+v; want done with ref %q, by attempt %d", e, ref, failed.Attempt)
	}
	exact(t, "the resolved effect's ExpireAt", e.ExpireAt, e.UpdatedAt.Add(p.Retention))
	ev := f.lastEvent(id)
	if ev.Kind != ledger.EventEffectResolved || ev.Actor != p.Actor || ev.Attempt != failed.Attempt ||
		!contains(ev.Text, uncertainEffect) || !contains(ev.Text, "happened") || !contains(ev.Text, p.Reason) || !contains(ev.Text, ref) {
		t.Fatalf("the history's last event = %+v; want effect_resolved by %s naming the effect, that it happened, the reason and the ref", ev, p.Actor)
	}
	next := f.hold(id, longLease)
	if next.Attempt != failed.Attempt+1 {
		t.Fatalf("the claim after ResolveEffect took attempt %d, want %d", next.Attempt, failed.Attempt+1)
	}
	if res := f.begin(next, uncertainEffect); !res.Done || res.Effect.Ref != ref {
		t.Fatalf("the next attempt's BeginEffect of the resolved effect = done %v, ref %q; want done, ref %q: it follows the execution", res.Done, res.Effect.Ref, ref)
	}
	if res := f.begin(next, "charge"); !res.Done {
		t.Fatal("after ResolveEffect, the effect the failed attempt did is not done: the run would redo it")
	}
}

func testResolveNotDone(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	failed := f.uncertain(id)
	p := resolution(id, false, "", "nothing started: the API's audit log shows no call")
	r, err := f.l.ResolveEffect(f.ctx, p)
	if err != nil {
		t.Fatalf("ResolveEffect(not done): %v", err)
	}
	requeued(t, "ResolveEffect(not done)", r, failed)
	e := f.effect(id, uncertainEffect)
	if e.Status != ledger.EffectPending || e.Attempt != 0 || e.Ref != "" || !e.DoneAt.IsZero() {
		t.Fatalf("the resolved effect = %+v; want pending, begun by no attempt", e)
	}
	approx(t, "the resolved effect's ExpireAt", e.ExpireAt, e.UpdatedAt.Add(ledger.DefaultRetention))
	ev := f.lastEvent(id)
	if ev.Kind != ledger.EventEffectResolved || ev.Actor != p.Actor || !contains(ev.Text, uncertainEffect) ||
		!contains(ev.Text, "did not happen") || !contains(ev.Text, p.Reason) {
		t.Fatalf("the history's last event = %+v; want effect_resolved by %s naming the effect, that it did not happen, and the reason", ev, p.Actor)
	}
	next := f.hold(id, longLease)
	res := f.begin(next, uncertainEffect)
	if res.Done || res.PreviousAttempt != 0 || res.Effect.Key != ledger.EffectKey(id, uncertainEffect) || res.Effect.Attempt != next.Attempt {
		t.Fatalf("the next attempt's BeginEffect = done %v, previous attempt %d, key %s, attempt %d; "+
			"want new (previous 0: it runs afresh), under the same key, begun by attempt %d",
			res.Done, res.PreviousAttempt, res.Effect.Key, res.Effect.Attempt, next.Attempt)
	}
	if res := f.begin(next, "charge"); !res.Done {
		t.Fatal("after ResolveEffect, the effect the failed attempt did is not done: the run would redo it")
	}
}

// unchanged checks that a refused resolution left run id and its uncertain effect as
// they were.
func (f *fixture) unchanged(what string, run *ledger.Run, eff *ledger.Effect) {
	f.t.Helper()
	got := f.get(run.ID)
	if got.Status != run.Status || got.Attempt != run.Attempt || got.AttemptsMade != run.AttemptsMade || !got.UpdatedAt.Equal(run.UpdatedAt) {
		f.t.Fatalf("a refused %s changed the run: %s at %d (%d made, written %v), was %s at %d (%d made, written %v)",
			what, got.Status, got.Attempt, got.AttemptsMade, got.UpdatedAt, run.Status, run.Attempt, run.AttemptsMade, run.UpdatedAt)
	}
	if eff == nil {
		return
	}
	if e := f.effect(run.ID, eff.Name); e.Status != eff.Status || e.Attempt != eff.Attempt || e.Ref != eff.Ref || !e.UpdatedAt.Equal(eff.UpdatedAt) {
		f.t.Fatalf("a refused %s changed effect %s: %+v, was %+v", what, eff.Name, e, eff)
	}
}

func testResolveWrongStatus(t *testing.T, h Harness) {
	f := ops(t, h)
	// Running, with the effect begun by its holder.
	running := newRunID()
	f.claim(running)
	r := f.hold(running, longLease)
	f.begin(r, uncertainEffect)
	_, err := f.l.ResolveEffect(f.ctx, resolution(running, true, "x", "it ran"))
	wantErr(t, "ResolveEffect(running)", err, ledger.ErrWrongStatus)
	if !contains(err.Error(), "running") {
		t.Fatalf("ResolveEffect(running) = %v; want the error to say the run is running", err)
	}
	f.unchanged("ResolveEffect(running)", f.get(running), f.effect(running, uncertainEffect))
	// Queued again after a release, the effect left pending.
	if _, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r), Error: "503"}); err != nil {
		t.Fatal(err)
	}
	queued, eff := f.get(running), f.effect(running, uncertainEffect)
	_, err = f.l.ResolveEffect(f.ctx, resolution(running, false, "", "not started"))
	wantErr(t, "ResolveEffect(queued)", err, ledger.ErrWrongStatus)
	f.unchanged("ResolveEffect(queued)", queued, eff)
	// Cancelled.
	if _, err := f.l.Cancel(f.ctx, operator(running, "stop")); err != nil {
		t.Fatal(err)
	}
	cancelled := f.get(running)
	_, err = f.l.ResolveEffect(f.ctx, resolution(running, false, "", "not started"))
	wantErr(t, "ResolveEffect(cancelled)", err, ledger.ErrWrongStatus)
	f.unchanged("ResolveEffect(cancelled)", cancelled, eff)
	// Completed.
	done := newRunID()
	f.claim(done)
	d := f.hold(done, longLease)
	f.begin(d, uncertainEffect)
	if _, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(d)}); err != nil {
		t.Fatal(err)
	}
	_, err = f.l.ResolveEffect(f.ctx, resolution(done, true, "e-1", "it ran"))
	wantErr(t, "ResolveEffect(completed)", err, ledger.ErrWrongStatus)
	f.unchanged("ResolveEffect(completed)", f.get(done), f.effect(done, uncertainEffect))
}

func testResolveAbsent(t *testing.T, h Harness) {
	f := ops(t, h)
	absent := newRunID()
	_, err := f.l.ResolveEffect(f.ctx, resolution(absent, true, "e-1", "r"))
	wantErr(t, "ResolveEffect(absent run)", err, ledger.ErrNotFound)
	if _, err := f.l.Get(f.ctx, &ledger.GetParams{RunID: absent}); !errIsNotFound(err) {
		t.Fatalf("a resolution of an absent run created it: %v", err)
	}
	if _, err := f.l.GetEffect(f.ctx, &ledger.GetEffectParams{RunID: absent, Name: uncertainEffect}); !errIsNotFound(err) {
		t.Fatalf("a resolution of an absent run created its effect: %v", err)
	}
	id := newRunID()
	failed := f.uncertain(id)
	p := resolution(id, false, "", "r")
	p.Effect = "run/3"
	_, err = f.l.ResolveEffect(f.ctx, p)
	wantErr(t, "ResolveEffect(absent effect)", err, ledger.ErrNotFound)
	if !contains(err.Error(), `"run/3"`) {
		t.Fatalf("ResolveEffect(absent effect) = %v; want the error to name the effect", err)
	}
	f.unchanged("ResolveEffect(absent effect)", failed, nil)
	if _, err := f.l.GetEffect(f.ctx, &ledger.GetEffectParams{RunID: id, Name: "run/3"}); !errIsNotFound(err) {
		t.Fatalf("a resolution of an absent effect created it: %v", err)
	}
}

func testResolveAlreadyDone(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	failed := f.uncertain(id)
	charge := f.effect(id, "charge")
	p := resolution(id, false, "", "do it again")
	p.Effect = "charge"
	_, err := f.l.ResolveEffect(f.ctx, p)
	wantErr(t, "ResolveEffect(done effect)", err, ledger.ErrWrongStatus)
	if !contains(err.Error(), `"charge"`) || !contains(err.Error(), "done") {
		t.Fatalf("ResolveEffect(done effect) = %v; want the error to name the effect and say it is done", err)
	}
	f.unchanged("ResolveEffect(done effect)", failed, charge)
	// A resolved effect is settled: a second verdict is refused (the run is queued).
	if _, err := f.l.ResolveEffect(f.ctx, resolution(id, true, "e-1", "it ran")); err != nil {
		t.Fatal(err)
	}
	_, err = f.l.ResolveEffect(f.ctx, resolution(id, false, "", "changed my mind"))
	wantErr(t, "a second ResolveEffect", err, ledger.ErrWrongStatus)
}

func testResolveFenced(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	failed := f.uncertain(id)
	eff := f.effect(id, uncertainEffect)
	p := resolution(id, false, "", "stale page")
	p.Attempt = failed.Attempt + 1
	_, err := f.l.ResolveEffect(f.ctx, p)
	wantErr(t, "ResolveEffect at another attempt", err, ledger.ErrConflict)
	f.unchanged("ResolveEffect at another attempt", failed, eff)
	p.Attempt = failed.Attempt
	if _, err := f.l.ResolveEffect(f.ctx, p); err != nil {
		t.Fatalf("ResolveEffect at the run's attempt: %v", err)
	}
}

func testResolveInvalid(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	failed := f.uncertain(id)
	eff := f.effect(id, uncertainEffect)
	for name, p := range map[string]*ledger.ResolveEffectParams{
		"no reason":         {OperatorParams: ledger.OperatorParams{RunID: id, Actor: "a"}, Effect: uncertainEffect, Done: true, Ref: "e-1"},
		"done, no ref":      {OperatorParams: *operator(id, "r"), Effect: uncertainEffect, Done: true},
		"no actor":          {OperatorParams: ledger.OperatorParams{RunID: id, Reason: "r"}, Effect: uncertainEffect},
		"no effect":         {OperatorParams: *operator(id, "r"), Done: true, Ref: "e-1"},
		"a ref, not done":   {OperatorParams: *operator(id, "r"), Effect: uncertainEffect, Ref: "e-1"},
		"a ref over 1 KiB":  {OperatorParams: *operator(id, "r"), Effect: uncertainEffect, Done: true, Ref: strings.Repeat("x", ledger.MaxEffectRef+1)},
		"a bad run ID":      {OperatorParams: *operator("nope", "r"), Effect: uncertainEffect},
		"a reason too long": {OperatorParams: *operator(id, strings.Repeat("x", ledger.MaxReason+1)), Effect: uncertainEffect},
	} {
		_, err := f.l.ResolveEffect(f.ctx, p)
		wantErr(t, "ResolveEffect with "+name, err, ledger.ErrInvalid)
	}
	f.unchanged("ResolveEffect with bad parameters", failed, eff)
	p := resolution(id, true, strings.Repeat("x", ledger.MaxEffectRef), "a ref at the limit")
	if _, err := f.l.ResolveEffect(f.ctx, p); err != nil {
		t.Fatalf("ResolveEffect with a ref of %d bytes: %v", ledger.MaxEffectRef, err)
	}
	if e := f.effect(id, uncertainEffect); e.Ref != p.Ref {
		t.Fatalf("the ref at the limit was stored as %d bytes, want %d", len(e.Ref), len(p.Ref))
	}
}

// testResolveConcurrent races resolutions (both verdicts) and retries of one failed run:
// each needs the run failed, so exactly one lands, and the run and the effect are as
// that one left them.
func testResolveConcurrent(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	failed := f.uncertain(id)
	const n = 18
	_, errs := race(n, func(i int) (*ledger.Run, error) {
		reason := fmt.Sprintf("operator %d", i)
		switch i % 3 {
		case 0:
			return f.l.Retry(f.ctx, operator(id, reason))
		case 1:
			return f.l.ResolveEffect(f.ctx, resolution(id, true, fmt.Sprintf("e-%d", i), reason))
		}
		return f.l.ResolveEffect(f.ctx, resolution(id, false, "", reason))
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("operators %d and %d both acted on one failed run", winner, i)
			}
			winner = i
		case errors.Is(err, ledger.ErrWrongStatus), loserErr(err):
		default:
			t.Fatalf("operator %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("none of %d concurrent resolutions and retries succeeded: %v", n, errs)
	}
	run, eff := f.get(id), f.effect(id, uncertainEffect)
	if run.Status != ledger.StatusQueued || run.AttemptsMade != 0 {
		t.Fatalf("after the race the run is %s with %d attempts made; want queued with 0", run.Status, run.AttemptsMade)
	}
	acted := 0
	for _, e := range run.History {
		if e.Kind == ledger.EventRetried || e.Kind == ledger.EventEffectResolved {
			acted++
			if e.Text != fmt.Sprintf("operator %d", winner) && !contains(e.Text, fmt.Sprintf(": operator %d", winner)) {
				t.Fatalf("the history records %+v; the winner was operator %d", e, winner)
			}
		}
	}
	if acted != 1 {
		t.Fatalf("the history records %d operators' actions, want 1", acted)
	}
	want := map[int]string{
		0: fmt.Sprintf("pending, begun by attempt %d (a retry leaves it uncertain)", failed.Attempt),
		1: fmt.Sprintf("done with ref e-%d", winner),
		2: "pending, begun by no attempt",
	}[winner%3]
	ok := map[int]bool{
		0: eff.Status == ledger.EffectPending && eff.Attempt == failed.Attempt,
		1: eff.Status == ledger.EffectDone && eff.Ref == fmt.Sprintf("e-%d", winner),
		2: eff.Status == ledger.EffectPending && eff.Attempt == 0,
	}[winner%3]
	if !ok {
		t.Fatalf("operator %d won, but the effect is %s by attempt %d with ref %q; want %s", winner, eff.Status, eff.Attempt, eff.Ref, want)
	}
}
