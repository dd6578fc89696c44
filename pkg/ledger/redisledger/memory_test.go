package redisledger

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

// fillClaims claims new runs with a payload of size bytes from 8 goroutines until the
// server has refused want claims, and answers the claims it acknowledged (run ID →
// attempt ID) and the run IDs of those it refused with their errors.
func fillClaims(t *testing.T, l *Ledger, size, want int) (acked map[string]string, refused map[string]error) {
	t.Helper()
	ctx := t.Context()
	payload := bytes.Repeat([]byte("x"), size)
	acked, refused = map[string]string{}, map[string]error{}
	var (
		mu       sync.Mutex
		failures atomic.Int64
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(2 * time.Minute)
	for range 8 {
		wg.Go(func() {
			for failures.Load() < int64(want) && time.Now().Before(deadline) {
				id := ledger.Identity{RunID: ledger.KeyedRunID("oom", "job", uuid.NewString()), Namespace: "oom", Job: "job",
					PayloadHash: ledger.PayloadHash(payload), Payload: payload}
				attempt := uuid.NewString()
				_, err := l.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: attempt})
				mu.Lock()
				if err == nil {
					acked[id.RunID] = attempt
				} else {
					refused[id.RunID] = err
					failures.Add(1)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acked, refused
}

// TestOutOfMemoryLosesNothing fills a noeviction server with a small maxmemory with
// claims: every claim it acknowledged is still there, with its attempt; every one it
// refused answers ErrOutOfMemory (retryable, saying nothing was written) and left no
// record. Once the server is full, a duplicate of an acknowledged claim is still
// answered (a read), through the ingress too (202), a new claim through the ingress is
// 503 with Retry-After, and a worker nacks the delivery of an acknowledged run without
// running its job.
func TestOutOfMemoryLosesNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--maxmemory", "8mb", "--maxmemory-policy", "noeviction")
	ctx := t.Context()
	l, err := Open(ctx, s.url()+"?persistence=ignore", nil)
	if err != nil {
		t.Fatalf("Open on a noeviction server: %v", err)
	}
	defer l.Close()

	topic := queue.NewMemTopic("oom")
	t.Cleanup(func() { _ = topic.Close() })
	h, err := ingress.New(ingress.Config{Ledger: l, Publisher: topic.Publisher(), Namespace: "oom", Jobs: []string{"report"},
		Auth: auth.None{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	post := func(key string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/jobs/report", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp
	}
	if resp := post("before-full"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the ingress's claim before the server is full = %d, want 202", resp.StatusCode)
	}

	acked, refused := fillClaims(t, l, 4<<10, 100)
	t.Logf("%d claims acknowledged, %d refused", len(acked), len(refused))
	if len(acked) == 0 || len(refused) == 0 {
		t.Fatalf("%d claims acknowledged, %d refused: the server never filled", len(acked), len(refused))
	}
	for id, err := range refused {
		if !errors.Is(err, ErrOutOfMemory) || !errors.Is(err, ledger.ErrUnavailable) || !ledger.Retryable(err) ||
			!strings.Contains(err.Error(), "out of memory") || !strings.Contains(err.Error(), "nothing was written") {
			t.Fatalf("refused claim of %s = %v, want ErrOutOfMemory wrapping ledger.ErrUnavailable, saying nothing was written", id, err)
		}
		if _, err := l.Get(ctx, &ledger.GetParams{RunID: id}); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("the refused claim of %s left a record (%v): something was written", id, err)
		}
	}
	for id, attempt := range acked {
		r, err := l.Get(ctx, &ledger.GetParams{RunID: id})
		if err != nil || r.AttemptID != attempt || r.Status != ledger.StatusQueued {
			t.Fatalf("acknowledged claim %s after the server filled = %+v, %v; want it queued with attempt ID %s", id, r, err, attempt)
		}
	}

	// Pin the server full, whatever its clients' buffers free, for what follows.
	admin := redis.NewClient(&redis.Options{Addr: s.addr()})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
	var some string
	for id := range acked {
		some = id
		break
	}
	dup, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: some, Namespace: "oom", Job: "job",
		PayloadHash: ledger.PayloadHash(bytes.Repeat([]byte("x"), 4<<10))}, AttemptID: uuid.NewString()})
	if err != nil || dup.Created || dup.Run.AttemptID != acked[some] {
		t.Fatalf("duplicate claim on the full server = %+v, %v; want the acknowledged run", dup, err)
	}
	if resp := post("before-full"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the ingress's duplicate on the full server = %d, want 202", resp.StatusCode)
	}
	if resp := post("after-full"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the ingress's new claim on the full server = %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	mux := worker.NewMux()
	var ran atomic.Int32
	mux.HandleFunc("job", func(context.Context, *worker.Job) error { ran.Add(1); return nil })
	w, err := worker.New(&worker.Config{Ledger: l, Handler: mux, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.CancelJobs)
	run, err := l.Get(ctx, &ledger.GetParams{RunID: some})
	if err != nil {
		t.Fatal(err)
	}
	m := &queue.Message{Identity: ledger.Identity{RunID: run.ID, Namespace: run.Namespace, Job: run.Job, Key: run.Key,
		ScheduleTime: run.ScheduleTime, PayloadHash: run.PayloadHash, Payload: run.Payload}, EnqueuedAt: run.CreatedAt}
	v := w.Process(ctx, &queue.Delivery{Message: m, PublishTime: time.Now()})
	if v.Ack || ran.Load() != 0 {
		t.Fatalf("the worker's delivery on the full server: verdict %+v, job ran %d times; want a nack and no run", v, ran.Load())
	}
	if r, err := l.Get(ctx, &ledger.GetParams{RunID: some}); err != nil || r.Status != ledger.StatusQueued || r.Attempt != 0 {
		t.Fatalf("the run after the worker's refused claim = %+v, %v; want it queued, untouched", r, err)
	}
}
