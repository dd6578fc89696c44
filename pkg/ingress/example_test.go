package ingress_test

import (
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue/memqueue"
)

// An ingress over the in-process ledger and queue (what -dev runs; in production a
// ledger.Open URL and queue.OpenPublisher). A caller posts a run with an
// Idempotency-Key; its retry of the same request is a duplicate of the same run, never
// a second one: both get 202 and the run's ID.
func Example() {
	topic := memqueue.NewTopic("runs")
	defer topic.Close()
	h, err := ingress.New(&ingress.Config{
		Ledger: ledger.New(memory.New(nil), nil), Publisher: topic.Publisher(), Auth: auth.None{},
		Jobs: []string{"send-invoices"}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	for range 2 { // a request and the caller's retry of it
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
		var out api.Response // the answer's JSON
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d run %s… %s, duplicate %v\n", resp.StatusCode, out.RunID[:12], out.Status, out.Duplicate)
	}
	// Output:
	// 202 run 4f6020f2102b… queued, duplicate false
	// 202 run 4f6020f2102b… queued, duplicate true
}
