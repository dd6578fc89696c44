package ledger_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
)

// A run's life in the ledger, as the ingress and a worker drive it: the ingress claims
// the run (a duplicate request finds the same record), a worker acquires it under a
// lease and completes it through its fence, and a later delivery of the same run is
// told that it is finished. Every backend (memory here, PostgreSQL, Firestore, …)
// answers the same.
func Example() {
	ctx := context.Background()
	l := ledger.New(memory.New(nil), nil)

	payload := []byte(`{"month":"2026-11"}`)
	id := ledger.Identity{
		RunID:     ledger.KeyedRunID("my-project", "send-invoices", "invoices-2026-11"),
		Namespace: "my-project", Job: "send-invoices", Key: "invoices-2026-11",
		PayloadHash: ledger.PayloadHash(payload), Payload: payload,
	}
	for range 2 { // a request and its duplicate
		res, err := l.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: "01a24a82-0000-7000-8000-000000000001"})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("claim: created %v, %s\n", res.Created, res.Run.Status)
	}

	acq, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: id, AttemptID: "01a24a82-0000-7000-8000-000000000002", Lease: 30 * time.Second, Worker: "host-a"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("acquire: %s attempt %d\n", acq.Outcome, acq.Run.Attempt)
	run, err := l.Complete(ctx, &ledger.CompleteParams{Fence: ledger.Fence{RunID: id.RunID, Attempt: acq.Run.Attempt, AttemptID: acq.Run.AttemptID}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("complete:", run.Status)

	again, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: id, AttemptID: "01a24a82-0000-7000-8000-000000000003", Lease: 30 * time.Second, Worker: "host-b"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("redelivery:", again.Outcome)
	// Output:
	// claim: created true, queued
	// claim: created false, queued
	// acquire: acquired attempt 1
	// complete: completed
	// redelivery: finished
}
