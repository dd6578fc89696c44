package worker_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
	"github.com/runonce/runonce/pkg/worker"
)

// A worker binary of one's own: a ledger, a subscription to pull from, the topic the
// rescuer republishes to, a mux of jobs, and Run until the context ends. In production
// the ledger and the queue are opened by URL (ledger.Open(ctx, "firestore://my-project"),
// queue.OpenSubscriber(ctx, "pubsub://my-project/runs-worker", nil),
// queue.OpenPublisher(ctx, "pubsub://my-project/runs", nil)) and ctx is
// signal.NotifyContext(ctx, syscall.SIGTERM); here they are in-process.
func ExampleWorker_Run() {
	ctx, stop := context.WithCancel(context.Background())
	ps, err := pubsubtest.NewInProcess(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer ps.Close()
	if _, err := queue.EnsureTopic(ctx, ps.Client, "runs"); err != nil {
		log.Fatal(err)
	}
	if _, err := queue.EnsureSubscription(ctx, ps.Client, "runs", "runs-worker", nil); err != nil {
		log.Fatal(err)
	}
	led := memory.New(nil)
	sub := queue.NewSubscriber(ps.Client, "runs-worker", nil)
	pub := queue.NewPublisher(ps.Client, "runs", nil)
	defer pub.Close()

	mux := worker.NewMux()
	mux.HandleFunc("send-invoice", func(ctx context.Context, j *worker.Job) error {
		fmt.Printf("invoicing %s\n", j.Payload)
		stop() // one run is enough for the example: stop the worker
		return nil
	})
	w, err := worker.New(&worker.Config{Ledger: ledger.New(led, nil), Handler: mux, Subscriber: sub, Republish: pub})
	if err != nil {
		log.Fatal(err)
	}

	// What the ingress publishes for a run (it claims the run first).
	payload := []byte(`{"customer":"c-1"}`)
	msg := &queue.Message{Identity: ledger.Identity{
		RunID: ledger.KeyedRunID("my-project", "send-invoice", "2026-11"), Namespace: "my-project",
		Job: "send-invoice", Key: "2026-11", PayloadHash: ledger.PayloadHash(payload), Payload: payload,
	}, EnqueuedAt: time.Now()}
	if _, err := pub.Publish(ctx, msg); err != nil {
		log.Fatal(err)
	}

	if err := w.Run(ctx); err != nil { // until ctx ends, then the grace, then it returns
		log.Fatal(err)
	}
	run, err := led.Get(context.Background(), &ledger.GetParams{RunID: msg.Identity.RunID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.Status)
	// Output:
	// invoicing {"customer":"c-1"}
	// completed
}

// An HTTP target from a jobs file: the worker POSTs the run's payload to the job's URL
// with the run's Idempotency-Key, the same for every attempt, and a 2xx completes the
// run. A worker serves the jobs of a file with MuxFromJobs (auth: oidc jobs need
// HTTPTargetOptions.Token, worker.GoogleIDTokens() on Google Cloud).
func ExampleHTTPTarget() {
	billing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("%s %s %s, Idempotency-Key present: %v\n", r.Method, r.URL.Path, body, r.Header.Get("Idempotency-Key") != "")
	}))
	defer billing.Close()

	js, err := jobs.Parse(strings.NewReader(`{"jobs": {"send-invoices": {
		"url": "` + billing.URL + `/run-invoices", "method": "POST", "timeout": "25m", "max_attempts": 5}}}`))
	if err != nil {
		log.Fatal(err)
	}
	mux := worker.NewMux()
	worker.MuxFromJobs(mux, js, nil)
	w, err := worker.New(&worker.Config{Ledger: ledger.New(memory.New(nil), nil), Handler: mux})
	if err != nil {
		log.Fatal(err)
	}

	payload := []byte(`{"month":"2026-11"}`)
	msg := &queue.Message{Identity: ledger.Identity{
		RunID: ledger.KeyedRunID("ns", "send-invoices", "2026-11"), Job: "send-invoices", Key: "2026-11",
		PayloadHash: ledger.PayloadHash(payload), Payload: payload,
	}}
	for range 2 { // a delivery and a duplicate: the target is called once
		v := w.Process(context.Background(), &queue.Delivery{Message: msg})
		fmt.Println(v.Outcome)
	}
	// Output:
	// POST /run-invoices {"month":"2026-11"}, Idempotency-Key present: true
	// completed
	// duplicate_terminal
}
