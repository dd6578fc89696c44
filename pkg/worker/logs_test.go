package worker_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

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
	w, err := worker.New(&worker.Config{Ledger: memory.New(nil), Handler: worker.NewMux(), NoHandlerDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.CancelJobs)
	w.Process(t.Context(), &queue.Delivery{Message: message("mine", "k", "{}"), PublishTime: time.Now()})
	if !strings.Contains(logs.String(), "no handler for this job") {
		t.Fatalf("the default logger got nothing from a worker without Config.Logger:\n%s", logs.String())
	}
}
