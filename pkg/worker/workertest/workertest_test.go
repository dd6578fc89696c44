package workertest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/worker"
	"github.com/runonce/runonce/pkg/worker/workertest"
)

func TestRetryRunsAgainAndSkipsDoneEffects(t *testing.T) {
	h := workertest.New(t, nil)
	charges, keys := 0, map[string]bool{}
	tries := 0
	h.Mux.HandleFunc("invoice", func(ctx context.Context, j *worker.Job) error {
		tries++
		if err := worker.Effect(ctx, "charge", func(_ context.Context, key string) error {
			charges++
			keys[key] = true
			return nil
		}); err != nil {
			return err
		}
		if tries == 1 {
			return worker.RetryAfter(time.Hour, errors.New("smtp: 421"))
		}
		return nil
	})
	first := h.Deliver("invoice", "2026-11", []byte(`{"c":1}`))
	if first.Outcome != worker.OutcomeReleased || first.Ack || first.Run.Status != ledger.StatusQueued {
		t.Fatalf("first delivery = %s (ack %v), run %s; want released", first.Outcome, first.Ack, first.Run.Status)
	}
	if !workertest.Done(first.Effects["charge"]) {
		t.Fatalf("effects after the first attempt = %v, want charge done", first.Effects)
	}
	second := h.Deliver("invoice", "2026-11", []byte(`{"c":1}`)) // the retry, its hour skipped
	if second.Outcome != worker.OutcomeCompleted || second.Run.Attempt != 2 {
		t.Fatalf("retry = %s at attempt %d, want completed at attempt 2", second.Outcome, second.Run.Attempt)
	}
	dup := h.Deliver("invoice", "2026-11", []byte(`{"c":1}`))
	if dup.Outcome != worker.OutcomeTerminal || !dup.Ack {
		t.Fatalf("duplicate = %s, want %s and acked", dup.Outcome, worker.OutcomeTerminal)
	}
	if charges != 1 || len(keys) != 1 {
		t.Fatalf("charged %d times with %d keys, want once", charges, len(keys))
	}
}

func TestPermanentErrorFailsAndAnotherPayloadNeverRuns(t *testing.T) {
	h := workertest.New(t, nil)
	ran := 0
	h.Mux.HandleFunc("job", func(context.Context, *worker.Job) error {
		ran++
		return worker.Permanent(errors.New("no such customer"))
	})
	if r := h.DeliverScheduled("job", "nightly", time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC), nil); r.Outcome != worker.OutcomeFailed || r.Run.LastError != "no such customer" {
		t.Fatalf("= %s %q, want failed with the error", r.Outcome, r.Run.LastError)
	}
	h.Deliver("job", "k", []byte("a"))
	if r := h.Deliver("job", "k", []byte("b")); r.Outcome != worker.OutcomePayloadMismatch || !r.Ack {
		t.Fatalf("a delivery with another payload = %s, want %s", r.Outcome, worker.OutcomePayloadMismatch)
	}
	if ran != 2 {
		t.Fatalf("the job ran %d times, want 2 (never for the other payload)", ran)
	}
}

// A job that sends a receipt once per scheduled run, tested without a ledger or Pub/Sub.
func Example() {
	h := workertest.New(nil, nil) // in a test: workertest.New(t, nil)
	h.Mux.HandleFunc("receipt", func(ctx context.Context, j *worker.Job) error {
		return worker.Effect(ctx, "email", func(_ context.Context, key string) error {
			return nil // mail.Send(ctx, …, Idempotency-Key: key)
		})
	})
	tick := time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC)
	for range 2 {
		r := h.DeliverScheduled("receipt", "daily-receipts", tick, []byte(`{"order":42}`))
		fmt.Println(r.Outcome, r.Run.Status, workertest.Done(r.Effects["email"]))
	}
	// Output:
	// completed completed true
	// duplicate_terminal completed true
}
