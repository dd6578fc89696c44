package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/worker"
)

// DemoJob is the embedded mode's Go job: it waits, logs, and greets once through the
// effect API.
const DemoJob = "demo"

// DemoHTTPJob is the embedded mode's HTTP-target job: the worker calls the dev sink.
const DemoHTTPJob = "demo-http"

// DemoEffect is the one effect the demo job records.
const DemoEffect = "greet"

// demoHandler returns the demo job: it sleeps for the payload's "sleep" (a Go duration)
// or delay, then performs its one effect under the effect API, so that a retried or
// duplicated run greets once.
func demoHandler(delay time.Duration, log *slog.Logger) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, j *worker.Job) error {
		var p struct {
			Sleep string `json:"sleep"`
			Fail  string `json:"fail"`
		}
		_ = json.Unmarshal(j.Payload, &p) // any payload is fine; only these fields mean something
		d := delay
		if p.Sleep != "" {
			parsed, err := time.ParseDuration(p.Sleep)
			if err != nil {
				return worker.Permanent(fmt.Errorf("demo: payload sleep %q: %w", p.Sleep, err))
			}
			d = parsed
		}
		log.InfoContext(ctx, "demo job running", slog.String("run_id", j.RunID), slog.Int64("attempt", j.Attempt), slog.Duration("sleep", d))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if p.Fail == "permanent" {
			return worker.Permanent(fmt.Errorf("demo: asked to fail for good"))
		}
		err := worker.Effect(ctx, DemoEffect, func(ctx context.Context, key string) error {
			log.InfoContext(ctx, "demo effect: hello, once per run", slog.String("run_id", j.RunID), slog.String("idempotency_key", key))
			return nil
		})
		if err != nil {
			return err
		}
		// The run's answer, stored when it completes and replayed to every duplicate.
		return worker.SetResult(ctx, demoResult{Greeting: "hello, once per run", EffectKey: ledger.EffectKey(j.RunID, DemoEffect), Attempt: j.Attempt})
	})
}

// demoResult is what the demo job leaves as its run's result.
type demoResult struct {
	Greeting  string `json:"greeting"`
	EffectKey string `json:"effect_key"`
	Attempt   int64  `json:"attempt"`
}

// devSink is the downstream of the demo-http job: it counts calls per Idempotency-Key,
// and shows beside each key the run it was derived from (X-Runonce-Run-Id).
type devSink struct {
	mu    sync.Mutex
	calls map[string]*sinkKey
	log   *slog.Logger
}

// sinkKey is what the sink saw of one Idempotency-Key.
type sinkKey struct {
	RunID string `json:"run_id"`
	Calls int    `json:"calls"`
}

func newDevSink(log *slog.Logger) *devSink { return &devSink{calls: map[string]*sinkKey{}, log: log} }

func (s *devSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		type entry struct {
			Key string `json:"idempotency_key"`
			sinkKey
		}
		s.mu.Lock()
		out := make([]entry, 0, len(s.calls))
		for k, c := range s.calls {
			out = append(out, entry{k, *c})
		}
		s.mu.Unlock()
		sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
		// The JSON answer every runonce endpoint gives (pkg/internal/jsonhttp).
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(map[string]any{"calls": out})
		return
	}
	key, runID := r.Header.Get("Idempotency-Key"), r.Header.Get("X-Runonce-Run-Id")
	s.mu.Lock()
	c := s.calls[key]
	if c == nil {
		c = &sinkKey{RunID: runID}
		s.calls[key] = c
	}
	c.Calls++
	n := c.Calls
	s.mu.Unlock()
	s.log.InfoContext(r.Context(), "dev sink called", slog.String("idempotency_key", key),
		slog.String("run_id", runID), slog.Int("calls_with_this_key", n))
	w.WriteHeader(http.StatusNoContent)
}
