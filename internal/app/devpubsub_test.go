package app_test

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/internal/app"
	"github.com/runonce/runonce/internal/syncbuf"
)

// TestDevPubSubPortIsStable: -dev's in-process Pub/Sub listens on the port
// -dev-pubsub-port names (8085 by default), the same on every start, and the banner
// prints it, so a joined worker's PUBSUB_EMULATOR_HOST stays right across restarts.
// Before, it took a new random port on every start. A port in use is refused, naming
// the flag.
func TestDevPubSubPortIsStable(t *testing.T) {
	t.Parallel()
	var f app.IngressFlags
	if d := app.IngressFlagSet(&f).Lookup("dev-pubsub-port").DefValue; d != strconv.Itoa(app.DevPubSubPort) || app.DevPubSubPort != 8085 {
		t.Fatalf("-dev-pubsub-port defaults to %s, want 8085 (the Pub/Sub emulator's port)", d)
	}
	pubsub := freeAddr(t)
	_, port, _ := strings.Cut(pubsub, ":")
	start := func(name string) (banner string, stop func()) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		outw := &syncbuf.Buffer{}
		done := make(chan error, 1)
		go func() {
			done <- app.RunIngress(ctx, []string{"-dev", "-dev-pubsub-port", port, "-addr", freeAddr(t), "-ledger", "memory://" + name, "-dev-concurrency", "0"}, nil, outw, io.Discard)
		}()
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(outw.String(), "/v1/runs/RUN_ID"); time.Sleep(20 * time.Millisecond) {
			select {
			case err := <-done:
				t.Fatalf("-dev ended before its banner: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("no banner within 20s")
			}
		}
		return outw.String(), func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("-dev: %v", err)
			}
		}
	}
	banner, stop := start("dev-pubsub-1")
	if !strings.Contains(banner, "PUBSUB_EMULATOR_HOST="+pubsub+" ") || !strings.Contains(banner, "the same on every start") {
		t.Fatalf("the banner does not print the Pub/Sub address %s as stable:\n%s", pubsub, banner)
	}
	// A second -dev on the same port is refused, naming the flag.
	err := app.RunIngress(t.Context(), []string{"-dev", "-dev-pubsub-port", port, "-addr", freeAddr(t), "-ledger", "memory://dev-pubsub-2"}, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), pubsub) || !strings.Contains(err.Error(), "-dev-pubsub-port") {
		t.Fatalf("a second -dev on the Pub/Sub port in use: %v; want an error naming %s and -dev-pubsub-port", err, pubsub)
	}
	stop()
	// Restarted, the same address.
	banner, stop = start("dev-pubsub-3")
	defer stop()
	if !strings.Contains(banner, "PUBSUB_EMULATOR_HOST="+pubsub+" ") {
		t.Fatalf("restarted, -dev's Pub/Sub is not at %s again:\n%s", pubsub, banner)
	}
}
