package client_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/client"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue/memqueue"
)

// An operator's program: list the queued runs of a job, look at one, and cancel it,
// with a reason the run's history keeps. The ingress here runs in process with
// authentication off; against a deployed one, set Client.Token (a Google ID token for
// -auth oidc).
func Example() {
	ctx := context.Background()
	url := startIngress() // e.g. https://runonce-ingress-….run.app
	c := &client.Client{BaseURL: url}

	page, err := c.List(ctx, &client.ListOptions{Job: "send-invoices", Status: ledger.StatusQueued})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range page.Runs {
		fmt.Printf("%s… %s %s %s\n", r.RunID[:12], r.Job, r.Key, r.Status)
	}
	run, err := c.Get(ctx, page.Runs[0].RunID, false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("attempts made: %d\n", run.AttemptsMade)
	res, err := c.Act(ctx, run.RunID, api.ActionCancel, &api.ActionRequest{Reason: "sent by hand"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s… is %s\n", res.RunID[:12], res.Status)
	// Output:
	// 4f6020f2102b… send-invoices invoices-2026-11 queued
	// attempts made: 0
	// 4f6020f2102b… is cancelled
}

// startIngress starts an ingress over the in-process ledger and queue with one run of
// send-invoices posted, and returns its URL.
func startIngress() string {
	topic := memqueue.NewTopic("runs")
	h, err := ingress.New(&ingress.Config{
		Ledger: ledger.New(memory.New(nil), nil), Publisher: topic.Publisher(), Auth: auth.None{}, Operators: auth.None{},
		Jobs: []string{"send-invoices"}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h) // lives as long as the example
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/jobs/send-invoices", strings.NewReader(`{"month":"2026-11"}`))
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "invoices-2026-11")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	return srv.URL
}
