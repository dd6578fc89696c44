package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/receivertest"
	"github.com/runonce/runonce/pkg/receiver/sqlite"
)

func open(tb testing.TB) receiver.Store {
	tb.Helper()
	s, err := sqlite.Open(tb.Context(), filepath.Join(tb.TempDir(), "receiver.db"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) { receivertest.Run(t, receivertest.Harness{Open: open}) }

// BenchmarkMiddlewareVsBare measures the receiver over SQLite against the bare handler
// (receivertest.Benchmark).
func BenchmarkMiddlewareVsBare(b *testing.B) {
	receivertest.Benchmark(b, receivertest.Harness{Open: open})
}

// BenchmarkMiddlewareVsBareRelaxedSync is BenchmarkMiddlewareVsBare with
// synchronous=normal: what the two synced writes of a new key cost.
func BenchmarkMiddlewareVsBareRelaxedSync(b *testing.B) {
	receivertest.Benchmark(b, receivertest.Harness{Open: func(tb testing.TB) receiver.Store {
		s, err := sqlite.Open(tb.Context(), filepath.Join(tb.TempDir(), "receiver.db"), &sqlite.Options{RelaxedSync: true})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { s.Close() })
		return s
	}})
}
