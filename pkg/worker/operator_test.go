package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/worker"
)

func TestCancelStopsTheRunningJobWithADistinctCause(t *testing.T) {
	t.Parallel()
	mem := memory.New(nil)
	b := setup(t, mem, &worker.Config{Lease: 300 * time.Millisecond, Instance: "host-a/42"})
	var effectErr, cause error
	b.mux.HandleFunc("job", func(ctx context.Context, j *worker.Job) error {
		if _, err := mem.Cancel(ctx, &ledger.OperatorParams{RunID: j.RunID, Actor: "oncall@example.com", Reason: "must not go out"}); err != nil {
			t.Errorf("Cancel: %v", err)
		}
		<-ctx.Done() // the next renewal learns it
		cause = context.Cause(ctx)
		effectErr = worker.Effect(ctx, "send", func(context.Context, string) error {
			t.Error("an effect ran after the run was cancelled")
			return nil
		})
		return nil // and a success must not complete it
	})
	m := message("job", "k", "{}")
	v := b.process(m)
	if !v.Ack || v.Outcome != worker.OutcomeCancelled {
		t.Fatalf("verdict = %+v, want acked as cancelled", v)
	}
	if !errors.Is(cause, ledger.ErrCancelled) || effectErr == nil {
		t.Fatalf("job context cause = %v, effect error = %v; want ErrCancelled and a refused effect", cause, effectErr)
	}
	r := b.run(m.Identity.RunID)
	if r.Status != ledger.StatusCancelled {
		t.Fatalf("run = %s, want cancelled", r.Status)
	}
	if _, err := mem.GetEffect(t.Context(), &ledger.GetEffectParams{RunID: r.ID, Name: "send"}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the cancelled attempt recorded an effect: %v", err)
	}
	if len(r.History) != 2 || r.History[0].Kind != ledger.EventStarted || r.History[0].Worker != "host-a/42" {
		t.Fatalf("history = %+v, want the attempt started by host-a/42", r.History)
	}
}

func TestRetriedRunGetsAFreshAttemptBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil) // MaxAttempts 3
	var calls atomic.Int32
	b.mux.HandleFunc("flaky", func(context.Context, *worker.Job) error {
		if calls.Add(1) <= 3 {
			return errors.New("still broken")
		}
		return nil
	})
	m := message("flaky", "k", "{}")
	for range 3 {
		b.process(m)
	}
	if r := b.run(m.Identity.RunID); r.Status != ledger.StatusFailed {
		t.Fatalf("after 3 failures the run is %s, want failed", r.Status)
	}
	if _, err := b.ledger.Retry(t.Context(), &ledger.OperatorParams{RunID: m.Identity.RunID, Actor: "oncall", Reason: "fixed"}); err != nil {
		t.Fatal(err)
	}
	if v := b.process(m); v.Outcome != worker.OutcomeCompleted {
		t.Fatalf("the delivery after Retry = %s, want completed (attempt 4, the first of a fresh budget)", v.Outcome)
	}
	if r := b.run(m.Identity.RunID); r.Status != ledger.StatusCompleted || r.Attempt != 4 || !strings.Contains(r.LastError, "still broken") {
		t.Fatalf("run = %s at attempt %d (%q)", r.Status, r.Attempt, r.LastError)
	}
}
