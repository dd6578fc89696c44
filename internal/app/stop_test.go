package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/internal/app"
	"github.com/runonce/runonce/internal/syncbuf"
)

// TestDevStopsWithOneLine: -dev (an ingress and a worker in one process) logs its
// worker's stop once, with no error attribute when there is none. Before, the worker
// and the command around it each logged a stop, both with "error": null.
func TestDevStopsWithOneLine(t *testing.T) {
	t.Parallel()
	var out, logs syncbuf.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- app.RunIngress(ctx, []string{"-dev", "-dev-pubsub-port", "0", "-addr", freeAddr(t), "-ledger", "memory://dev-stop", "-log-level", "debug"}, nil, &out, &logs)
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "/v1/runs/RUN_ID"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no banner within 20s:\n%s", logs.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("-dev: %v", err)
	}
	n := 0
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, `stopped"`) {
			n++
		}
	}
	if n != 1 || strings.Contains(logs.String(), `"error":null`) {
		t.Fatalf("-dev logged %d stop lines, want 1 without an error attribute:\n%s", n, logs.String())
	}
}
