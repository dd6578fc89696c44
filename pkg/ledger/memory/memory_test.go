package memory_test

import (
	"testing"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/ledgertest"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/worker/workertest"
)

func harness() ledgertest.Harness {
	return ledgertest.Harness{
		Open:        func(testing.TB) ledger.Driver { return memory.New(nil) },
		SupportsNow: true,
		Operations:  true,
	}
}

func TestConformance(t *testing.T) { ledgertest.Run(t, harness()) }

func BenchmarkLedger(b *testing.B) { ledgertest.Benchmark(b, harness()) }

func TestOpenByNameSharesTheStore(t *testing.T) {
	ctx := t.Context()
	a, err := ledger.Open(ctx, "memory://shared-test")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ledger.Open(ctx, "memory://shared-test")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ledger.Open(ctx, "memory://other-test")
	if err != nil {
		t.Fatal(err)
	}
	if a.Driver() != b.Driver() || a.Driver() == c.Driver() {
		t.Fatal("memory://NAME must return one store per name")
	}
	if _, err := ledger.Open(ctx, "memory://x?retention=1h"); err == nil {
		t.Fatal("an unknown query parameter was accepted")
	}
}

// BenchmarkBatch measures a run of 10,000 items through worker.Batch beside the same
// items as one worker.Effect each (the raw effect write), on this backend: items/s and
// ledger writes per item (workertest.BenchmarkBatch).
func BenchmarkBatch(b *testing.B) { workertest.BenchmarkBatch(b, harness().Open) }
