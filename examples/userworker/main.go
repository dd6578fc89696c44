// Command userworker is a worker binary of one's own, in its own module: the program a
// user writes to run jobs in Go. It opens a ledger and the Pub/Sub subscription and
// topic by URL, registers its jobs on a mux, and runs until SIGTERM or Ctrl-C.
//
// Against `go run ./cmd/ingress -dev -jobs jobs.json` (with {"jobs": {"send-invoice": {}}}),
// start it in this directory with the command the banner prints:
//
//	PUBSUB_EMULATOR_HOST=127.0.0.1:8085 RUNONCE_LEDGER=sqlite:///PATH/runonce-dev.db \
//	RUNONCE_SUBSCRIPTION=pubsub://runonce-dev/runs-worker RUNONCE_TOPIC=pubsub://runonce-dev/runs \
//	  go run .
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	_ "github.com/runonce/runonce/pkg/ledger/firestoreledger" // firestore://
	_ "github.com/runonce/runonce/pkg/ledger/sqlite"          // sqlite:// (-dev's ledger)

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	led, err := ledger.Open(ctx, cmp.Or(os.Getenv("RUNONCE_LEDGER"), "firestore://my-project"))
	if err != nil {
		return err
	}
	defer led.Close()
	sub, err := queue.OpenSubscriber(ctx, cmp.Or(os.Getenv("RUNONCE_SUBSCRIPTION"), "pubsub://my-project/runs-worker"), nil)
	if err != nil {
		return err
	}
	defer sub.Close()
	pub, err := queue.OpenPublisher(ctx, cmp.Or(os.Getenv("RUNONCE_TOPIC"), "pubsub://my-project/runs"), nil)
	if err != nil {
		return err
	}
	defer pub.Close()

	mux := worker.NewMux()
	mux.HandleFunc("send-invoice", sendInvoice)
	w, err := worker.New(&worker.Config{
		Ledger: led, Handler: mux, Subscriber: sub, Republish: pub,
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, nil)),
	})
	if err != nil {
		return err
	}
	return w.Run(ctx) // until ctx ends; then running jobs get the grace
}

// sendInvoice invoices the customer of the payload once per run: the effect's key goes
// downstream as Idempotency-Key, and a retry skips an invoice an earlier attempt sent.
func sendInvoice(ctx context.Context, j *worker.Job) error {
	var p struct {
		Customer string `json:"customer"`
	}
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		return worker.Permanent(fmt.Errorf("payload: %w", err))
	}
	return worker.Effect(ctx, "invoice", func(ctx context.Context, key string) error {
		// e.g. billing.Invoice(ctx, p.Customer, Idempotency-Key: key)
		worker.Logger(ctx).InfoContext(ctx, "invoice sent", slog.String("customer", p.Customer), slog.String("idempotency_key", key))
		return nil
	})
}
