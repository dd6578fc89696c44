package targets_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/targets/targetstest"
	"github.com/runonce/runonce/pkg/worker"
)

// resolveRun is an operator's resolution of a failed run's uncertain start (runonce runs
// resolve): it happened, ref naming the execution, or it did not.
func (b *bench) resolveRun(m *queue.Message, done bool, ref string) {
	b.t.Helper()
	p := &ledger.ResolveEffectParams{
		OperatorParams: ledger.OperatorParams{RunID: m.Identity.RunID, Actor: "ops@example.com", Reason: "looked for the key"},
		Effect:         worker.RunEffect, Done: done, Ref: ref,
	}
	if _, err := b.led.ResolveEffect(b.t.Context(), p); err != nil {
		b.t.Fatal(err)
	}
}

// failUncertain delivers m to w until its run fails over a start whose outcome its
// look-ups, all failing, never learn.
func (b *bench) failUncertain(w *worker.Worker, m *queue.Message, list string) {
	b.t.Helper()
	b.fake.FailEvery(list, targetstest.Status(codes.Unavailable, "try again"))
	if v := b.drive(w, m, 8); v.Outcome != worker.OutcomeFailed {
		b.t.Fatalf("run ended %s while its look-ups failed, want failed; last error %s", v.Outcome, b.run(m).LastError)
	}
}

// An operator settles a start whose outcome stayed unknown, end to end: said started,
// with the execution's name, the next attempt follows that execution and starts none,
// though the look-ups still fail; said not started, it starts once, without a look-up
// first.
func TestOperatorResolvesAnUncertainStart(t *testing.T) {
	for _, kind := range apiKinds {
		t.Run(kind.kind+"/done", func(t *testing.T) {
			b := newBench(t, kind.kind, kind.resource, `, "wait": false, "timeout": "300ms"`)
			w := b.worker()
			b.fake.LoseNextAnswer(kind.start, targetstest.Status(codes.Internal, "backend error"))
			m := newMessage(`{}`)
			b.failUncertain(w, m, kind.list)
			started := b.fake.Started()
			if len(started) != 1 {
				t.Fatalf("started %v, want the one whose answer was lost", started)
			}
			b.resolveRun(m, true, started[0])
			if v := b.drive(w, m, 3); v.Outcome != worker.OutcomeCompleted {
				t.Fatalf("resolved run ended %s, want completed; last error %s", v.Outcome, b.run(m).LastError)
			}
			b.wantOneRecorded(m, "the run resolved as started started again")
		})
		t.Run(kind.kind+"/not_done", func(t *testing.T) {
			b := newBench(t, kind.kind, kind.resource, `, "wait": false, "timeout": "300ms"`)
			w := b.worker()
			// An answer after which the call may have reached the service: nothing
			// started, but nothing proves it.
			b.fake.FailNext(kind.start, targetstest.Status(codes.Unavailable, "connection reset"))
			m := newMessage(`{}`)
			b.failUncertain(w, m, kind.list)
			if s := b.fake.Started(); len(s) != 0 {
				t.Fatalf("started %v before the resolution", s)
			}
			b.resolveRun(m, false, "")
			before := len(b.fake.Calls())
			if v := b.drive(w, m, 3); v.Outcome != worker.OutcomeCompleted {
				t.Fatalf("resolved run ended %s, want completed; last error %s", v.Outcome, b.run(m).LastError)
			}
			b.wantOneRecorded(m, "the run resolved as not started")
			// The first call after the resolution is the start: no look-up before it
			// (the listing after a start, for a racing duplicate, may follow).
			if after := b.fake.Calls()[before:]; len(after) == 0 || after[0].Method != kind.start {
				t.Fatalf("calls after the resolution %v; want the start first: the operator said nothing started", methods(after))
			}
		})
	}
}

func methods(calls []targetstest.Call) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.Method
	}
	return out
}
