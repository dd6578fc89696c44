package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

// A job that charges a card and emails a receipt. Each side effect goes through
// worker.Effect: its key is recorded before the effect, passed downstream as
// Idempotency-Key, and an effect an earlier attempt finished is skipped. Here the email
// fails on the first attempt; the retry emails without charging again.
func Example() {
	charges, emails := 0, 0
	mux := worker.NewMux()
	mux.HandleFunc("send-invoice", func(ctx context.Context, j *worker.Job) error {
		err := worker.Effect(ctx, "charge", func(ctx context.Context, key string) error {
			charges++ // e.g. payments.Charge(ctx, amount, Idempotency-Key: key)
			return nil
		})
		if err != nil {
			return err
		}
		return worker.Effect(ctx, "email", func(ctx context.Context, key string) error {
			emails++
			if emails == 1 {
				return errors.New("smtp: timeout") // any error: the run is released for a retry
			}
			return nil
		})
	})

	w, err := worker.New(&worker.Config{Ledger: ledger.New(memory.New(nil), nil), Handler: mux})
	if err != nil {
		log.Fatal(err)
	}
	// What the ingress publishes for a Cloud Scheduler call; the worker usually receives
	// it from Pub/Sub (Worker.Run) or a push subscription (Worker.Handler).
	tick := time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC)
	msg := &queue.Message{Identity: ledger.Identity{
		RunID: ledger.ScheduledRunID("my-project/us-central1", "send-invoice", "monthly-invoices", tick),
		Job:   "send-invoice", Key: "monthly-invoices", ScheduleTime: tick,
	}}
	for range 3 { // a delivery, its retry, and a duplicate delivery
		v := w.Process(context.Background(), &queue.Delivery{Message: msg})
		fmt.Printf("%s (ack %v)\n", v.Outcome, v.Ack)
	}
	fmt.Printf("charged %d time(s), emailed %d time(s)\n", charges, emails)
	// Output:
	// released (ack false)
	// completed (ack true)
	// duplicate_terminal (ack true)
	// charged 1 time(s), emailed 2 time(s)
}
