package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/runonce/runonce/pkg/worker"
	"github.com/runonce/runonce/pkg/worker/workertest"
)

// A job leaves a result with SetResult: it is stored when the run completes, and every
// duplicate of the run is answered with it (the ingress's 200 carries it as result),
// replayed, never recomputed.
func ExampleSetResult() {
	h := workertest.New(nil, nil) // in a test: workertest.New(t, nil)
	h.Mux.HandleFunc("invoice", func(ctx context.Context, j *worker.Job) error {
		fmt.Println("charging, attempt", j.Attempt)
		return worker.SetResult(ctx, map[string]string{"invoice": "inv-7", "status": "paid"})
	})
	first := h.Deliver("invoice", "order-42", nil)
	fmt.Println(first.Outcome, string(first.Run.Result))
	again := h.Deliver("invoice", "order-42", nil) // a duplicate: the handler does not run
	fmt.Println(again.Outcome, string(again.Run.Result))
	// Output:
	// charging, attempt 1
	// completed {"invoice":"inv-7","status":"paid"}
	// duplicate_terminal {"invoice":"inv-7","status":"paid"}
}

// Batch runs a function per item, each under its own key; a retry after a failure (or a
// crash) skips every checkpoint already recorded done and does only what is left.
func ExampleBatch() {
	h := workertest.New(nil, nil)
	var mu sync.Mutex
	sent := map[string]int{}
	ids := make([]string, 250)
	for i := range ids {
		ids[i] = fmt.Sprintf("customer-%03d", i)
	}
	h.Mux.HandleFunc("reminders", func(ctx context.Context, j *worker.Job) error {
		rep, err := worker.Batch(ctx, "send", ids, func(ctx context.Context, id, key string) error {
			if id == "customer-230" && j.Attempt == 1 {
				// The run is released (ReleaseRun). The two checkpoints before this item's
				// (100 items each) are recorded done; items after it may have started.
				return errors.New("mail service: 503")
			}
			mu.Lock()
			sent[id]++ // a real job passes key downstream as Idempotency-Key
			mu.Unlock()
			return nil
		}, &worker.BatchOptions{Parallelism: 1})
		if err == nil {
			fmt.Printf("attempt %d: %d done, %d of them by an earlier attempt\n", j.Attempt, rep.Done, rep.Skipped)
		}
		return err
	})
	fmt.Println(h.Deliver("reminders", "2026-12-01", nil).Outcome)
	r := h.Deliver("reminders", "2026-12-01", nil)
	fmt.Println(r.Outcome, string(r.Run.Progress))
	fmt.Println("customer-000 sent", sent["customer-000"], "time(s); customer-199 sent", sent["customer-199"], "time(s)")
	// Output:
	// released
	// attempt 2: 250 done, 200 of them by an earlier attempt
	// completed {"send":{"done":250,"failed":0,"total":250}}
	// customer-000 sent 1 time(s); customer-199 sent 1 time(s)
}
