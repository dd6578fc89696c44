package memory_test

import (
	"testing"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/memory"
	"github.com/runonce/runonce/pkg/receiver/receivertest"
)

func TestConformance(t *testing.T) {
	receivertest.Run(t, receivertest.Harness{Open: func(testing.TB) receiver.Store { return memory.New(nil) }})
}

func TestOpenByNameSharesTheStore(t *testing.T) {
	ctx := t.Context()
	a, err := receiver.Open(ctx, "memory://shared")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := receiver.Open(ctx, "memory://shared")
	c, _ := receiver.Open(ctx, "memory://other")
	if a != b || a == c {
		t.Fatal("memory://NAME must return one store per name")
	}
	if _, err := receiver.Open(ctx, "memory://x?retention=1h"); err == nil {
		t.Fatal("an unknown query parameter was accepted")
	}
}

// BenchmarkMiddlewareVsBare measures the receiver over the in-process store against the
// bare handler (receivertest.Benchmark): the middleware's own cost, with no store round
// trip.
func BenchmarkMiddlewareVsBare(b *testing.B) {
	receivertest.Benchmark(b, receivertest.Harness{Open: func(testing.TB) receiver.Store { return memory.New(nil) }})
}
