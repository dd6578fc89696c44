package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

// TestLoggerDefaultsToSlogDefault: a worker whose Config names no Logger logs to
// slog.Default(), as the ingress does; before, it discarded everything, so a worker of
// one's own written as the README shows logged nothing. Not parallel: it replaces the
// process's default logger.
func TestLoggerDefaultsToSlogDefault(t *testing.T) {
	var logs syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	w, err := worker.New(&worker.Config{Ledger: ledger.New(memory.New(nil), nil), Handler: worker.NewMux(), NoHandlerDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.CancelJobs)
	w.Process(t.Context(), &queue.Delivery{Message: message("mine", "k", "{}"), PublishTime: time.Now()})
	if !strings.Contains(logs.String(), "no handler for this job") {
		t.Fatalf("the default logger got nothing from a worker without Config.Logger:\n%s", logs.String())
	}
}

// countLogs counts the JSON log lines at level whose message starts with prefix; a
// prefix ending in "$" must be the whole message.
func countLogs(t *testing.T, logs, level, prefix string) int {
	t.Helper()
	n := 0
	for l := range strings.Lines(logs) {
		var e struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		whole, exact := strings.CutSuffix(prefix, "$")
		if e.Level == level && (exact && e.Msg == whole || !exact && strings.HasPrefix(e.Msg, prefix)) {
			n++
		}
	}
	return n
}

// TestRepeatedDeliveriesAreLoggedOnce: a worker that keeps receiving a job it has no
// handler for warns once per job, and a run held by another attempt is logged once per
// run and holding attempt; the repeats (every NoHandlerDelay, every nack) go to debug.
// Before, each delivery logged again: "no handler … nacked" every 10 s for ever next to
// a joined worker, "held by another attempt" every second in -dev.
func TestRepeatedDeliveriesAreLoggedOnce(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	mem := memory.New(nil)
	b := setup(t, mem, &worker.Config{NoHandlerDelay: time.Millisecond, Lease: time.Minute,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	b.mux.HandleFunc("known", func(context.Context, *worker.Job) error { return nil })

	// Deliveries of two jobs without a handler, concurrently, three each.
	var wg sync.WaitGroup
	for range 3 {
		for _, job := range []string{"mine", "theirs"} {
			wg.Go(func() { b.process(message(job, "k", "{}")) })
		}
	}
	wg.Wait()
	if warn, debug := countLogs(t, logs.String(), "WARN", "no handler"), countLogs(t, logs.String(), "DEBUG", "no handler"); warn != 2 || debug != 4 {
		t.Fatalf("6 deliveries of 2 jobs without a handler logged %d warnings and %d debug lines; want one warning per job, the rest at debug:\n%s", warn, debug, logs.String())
	}

	// A run another attempt holds, delivered eight times at once; then held by a new
	// attempt after its release.
	m := message("known", "held", "{}")
	hold := func() ledger.Fence {
		res, err := mem.Acquire(t.Context(), &ledger.AcquireParams{Identity: m.Identity, AttemptID: uuid.NewString(), Lease: time.Minute})
		if err != nil || res.Outcome != ledger.OutcomeAcquired {
			t.Fatalf("Acquire: %v %v", res, err)
		}
		return ledger.Fence{RunID: res.Run.ID, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}
	}
	deliver := func(n int) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if v := b.process(m); v.Outcome != worker.OutcomeHeld {
					t.Errorf("a delivery of a held run = %+v, want held", v)
				}
			})
		}
		wg.Wait()
	}
	f := hold()
	deliver(8)
	if _, err := mem.Release(t.Context(), &ledger.ReleaseParams{Fence: f, RetryAfter: 0}); err != nil {
		t.Fatal(err)
	}
	hold()
	deliver(2)
	if info, debug := countLogs(t, logs.String(), "INFO", "run held by another attempt"), countLogs(t, logs.String(), "DEBUG", "run held by another attempt"); info != 2 || debug != 8 {
		t.Fatalf("10 deliveries of a run held by 2 attempts in turn logged %d info and %d debug lines; want one per attempt, the rest at debug:\n%s", info, debug, logs.String())
	}
}

// TestShutdownReleaseSaysItsErrorOnce: a job that returns the cause its context was
// cancelled with (context.Cause, as a job should) is released with that error said
// once, in the run's record and in the log line; the worker logs one line when it has
// stopped, with no error attribute when there is none. Before, the release said
// "worker: shutting down (job error: worker: shutting down)", and the stop was logged
// with "error": null.
func TestShutdownReleaseSaysItsErrorOnce(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	b := setup(t, nil, &worker.Config{Lease: time.Minute, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	started := make(chan struct{})
	b.mux.HandleFunc("slow", func(ctx context.Context, _ *worker.Job) error {
		close(started)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	b.withQueue()
	stop := b.pull(10 * time.Millisecond)
	m := message("slow", "k", "{}")
	if _, err := b.ledger.Claim(t.Context(), &ledger.ClaimParams{Identity: m.Identity, AttemptID: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pub.Publish(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the job never started")
	}
	stop()
	r := b.run(m.Identity.RunID)
	if r.Status != ledger.StatusQueued || r.LastError != worker.ErrShutdown.Error() {
		t.Fatalf("after the shutdown the run is %s with last error %q; want queued, %q", r.Status, r.LastError, worker.ErrShutdown)
	}
	l := logs.String()
	if n := countLogs(t, l, "INFO", "run released for a retry: "+worker.ErrShutdown.Error()); n != 1 || strings.Contains(l, "job error") {
		t.Errorf("release lines naming the shutdown once: %d, want 1:\n%s", n, l)
	}
	if n := countLogs(t, l, "INFO", "worker: stopped$"); n != 1 || strings.Contains(l, `"error":null`) {
		t.Errorf("stop lines: %d, want 1 without an error attribute:\n%s", n, l)
	}
}
