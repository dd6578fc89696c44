package worker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runonce/runonce/pkg/worker"
	"github.com/runonce/runonce/pkg/worker/workertest"
)

// Jobs are registered by name on a Mux, as handlers on net/http's ServeMux; the error a
// handler returns decides the run.
func ExampleMux_HandleFunc() {
	h := workertest.New(nil, nil) // in a test: workertest.New(t, nil)
	h.Mux.HandleFunc("nightly-report", func(ctx context.Context, j *worker.Job) error {
		fmt.Printf("report for %s, attempt %d\n", j.ScheduleTime.Format(time.DateOnly), j.Attempt)
		return nil
	})
	r := h.DeliverScheduled("nightly-report", "nightly", time.Date(2026, 11, 1, 2, 0, 0, 0, time.UTC), nil)
	fmt.Println(r.Outcome)
	// Output:
	// report for 2026-11-01, attempt 1
	// completed
}

// Permanent fails a run for good; RetryAfter releases it for a retry no sooner than the
// delay (bounded by Config.MaxRetryAfter); any other error releases it at once.
func ExamplePermanent() {
	h := workertest.New(nil, nil)
	h.Mux.HandleFunc("charge", func(ctx context.Context, j *worker.Job) error {
		switch string(j.Payload) {
		case `"card declined"`:
			return worker.Permanent(errors.New("card declined"))
		case `"rate limited"`:
			return worker.RetryAfter(30*time.Second, errors.New("429 from the payment API"))
		}
		return nil
	})
	for _, p := range []string{`"card declined"`, `"rate limited"`} {
		r := h.Deliver("charge", p, []byte(p))
		fmt.Printf("%s: %s (%s)\n", p, r.Outcome, r.Run.Status)
	}
	// Output:
	// "card declined": failed (failed)
	// "rate limited": released (queued)
}

// AtMostOnce is for a downstream that takes no idempotency key: an effect an earlier
// attempt began and did not finish is skipped and reported, not done again.
func ExampleAtMostOnce() {
	h := workertest.New(nil, nil)
	calls := 0
	h.Mux.HandleFunc("page-oncall", func(ctx context.Context, j *worker.Job) error {
		err := worker.AtMostOnce(ctx, "page", func(context.Context, string) error {
			calls++
			if calls == 1 {
				return errors.New("connection reset") // did the page go out? nobody knows
			}
			return nil
		})
		if errors.Is(err, worker.ErrEffectUncertain) {
			return worker.Permanent(err) // report it; never page twice
		}
		return err
	})
	for range 2 {
		r := h.Deliver("page-oncall", "incident-7", nil)
		fmt.Println(r.Outcome)
	}
	fmt.Println("pages sent:", calls)
	// Output:
	// released
	// failed
	// pages sent: 1
}
