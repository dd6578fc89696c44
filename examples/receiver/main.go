// Command receiver is a downstream service that runonce's worker calls, in its own
// module: a payment service whose POST /charges charges a customer, once per
// Idempotency-Key, however often the call is retried or delivered, and never for an
// attempt of a run that a newer attempt has superseded.
//
// The handler is wrapped in pkg/receiver's middleware over a SQLite store (the same file
// as its charges): a retry of a charge that completed is answered with the stored
// response (Idempotent-Replayed: true), one that arrives while the charge runs is told
// 409 with Retry-After, and a charge whose process died mid-way is executed again once
// its lease passed. The worker's X-Runonce-Run-Id and X-Runonce-Attempt are trusted only
// from a caller that presents the shared secret RECEIVER_WORKER_TOKEN as
// X-Worker-Token (on Cloud Run, check the worker's OIDC token instead).
//
// Try it with -dev and a jobs file whose job calls it:
//
//	RECEIVER_WORKER_TOKEN=s3cret go run . -addr 127.0.0.1:8090
//	# jobs.json: {"jobs": {"charge": {"url": "http://127.0.0.1:8090/charges",
//	#                                 "headers": {"X-Worker-Token": "s3cret"}}}}
//	go run ./cmd/ingress -dev -jobs jobs.json   # from the repository's root
//	curl -X POST localhost:8080/v1/jobs/charge -H 'Idempotency-Key: invoice-42' -d '{"customer":"c-1","amount":100}'
//	curl localhost:8090/charges
package main

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // database/sql's "sqlite", for the charges

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/sqlite"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	addr := flag.String("addr", "127.0.0.1:8090", "address to listen on")
	path := flag.String("db", "receiver.db", "the SQLite file of the charges and the receiver's records")
	work := flag.Duration("work", 0, "how long a charge takes (a slow payment provider)")
	lease := flag.Duration("lease", receiver.DefaultLease, "how long a charge's key stays claimed after its process died")
	flag.Parse()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	token := os.Getenv("RECEIVER_WORKER_TOKEN")
	if token == "" {
		logger.Warn("RECEIVER_WORKER_TOKEN is unset: the worker's run headers are not trusted, and superseded attempts are not fenced")
	}

	store, err := sqlite.Open(ctx, *path, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	db, err := sql.Open("sqlite", "file:"+store.Path()+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS charges (
		id INTEGER PRIMARY KEY, idempotency_key TEXT, run_id TEXT, attempt INTEGER, customer TEXT, amount INTEGER)`); err != nil {
		return err
	}

	rc, err := receiver.New(store, &receiver.Options{
		Lease:  *lease,
		Logger: logger,
		// The run headers are believed only from a caller that proved it is the worker.
		TrustRunHeaders: func(r *http.Request) bool {
			return token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Worker-Token")), []byte(token)) == 1
		},
	})
	if err != nil {
		return err
	}
	s := &service{db: db, work: *work, log: logger}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", rc.Wrap(http.HandlerFunc(s.charge)))
	mux.HandleFunc("GET /charges", s.list)
	go rc.SweepEvery(ctx, time.Hour)

	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	logger.Info("listening", slog.String("addr", *addr))
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type service struct {
	db   *sql.DB
	work time.Duration
	log  *slog.Logger
}

type chargeRequest struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// charge charges the customer: the side effect the receiver makes happen once per key.
func (s *service) charge(w http.ResponseWriter, r *http.Request) {
	var req chargeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Customer == "" || req.Amount <= 0 {
		http.Error(w, `want {"customer": "…", "amount": N > 0}`, http.StatusBadRequest) // stored: a retry gets it too
		return
	}
	info, _ := receiver.FromContext(r.Context())
	log := s.log.With(slog.String("idempotency_key", info.Key), slog.String("run_id", info.RunID), slog.Int64("attempt", info.Attempt))
	log.Info("charging", slog.String("customer", req.Customer))
	select {
	case <-time.After(s.work):
	case <-r.Context().Done():
		http.Error(w, "cancelled before charging", http.StatusServiceUnavailable) // not stored: a retry charges
		return
	}
	res, err := s.db.ExecContext(r.Context(), `INSERT INTO charges (idempotency_key, run_id, attempt, customer, amount) VALUES (?, ?, ?, ?, ?)`,
		info.Key, info.RunID, info.Attempt, req.Customer, req.Amount)
	if err != nil {
		http.Error(w, "charge failed: "+err.Error(), http.StatusInternalServerError) // not stored: a retry charges
		return
	}
	id, _ := res.LastInsertId()
	log.Info("charged", slog.Int64("charge_id", id))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"charge_id": %d, "customer": %q, "amount": %d}`+"\n", id, req.Customer, req.Amount)
}

// list answers every charge, as JSON.
func (s *service) list(w http.ResponseWriter, r *http.Request) {
	rows, err := s.db.QueryContext(r.Context(), `SELECT id, idempotency_key, run_id, attempt, customer, amount FROM charges ORDER BY id`)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer rows.Close()
	type charge struct {
		ID             int64  `json:"charge_id"`
		IdempotencyKey string `json:"idempotency_key"`
		RunID          string `json:"run_id"`
		Attempt        int64  `json:"attempt"`
		Customer       string `json:"customer"`
		Amount         int64  `json:"amount"`
	}
	out := []charge{}
	for rows.Next() {
		var c charge
		if err := rows.Scan(&c.ID, &c.IdempotencyKey, &c.RunID, &c.Attempt, &c.Customer, &c.Amount); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out = append(out, c)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
