package obs_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/chainguard-dev/clog/gcp"

	"github.com/runonce/runonce/internal/obs"
)

// BenchmarkLogger measures what turning durations into strings costs a log line: the
// logger the binaries use against clog's Cloud Logging handler alone, in the same run.
func BenchmarkLogger(b *testing.B) {
	line := func(b *testing.B, log *slog.Logger) {
		log = log.With(slog.String("component", "worker"))
		b.ReportAllocs()
		for b.Loop() {
			log.Info("run completed", slog.String("run_id", "8822aa694b19320f4b89c3cf69410d46c1b688b889a0e5f6ba559f46853f2251"),
				slog.String("job", "send-invoices"), slog.Int64("attempt", 2), slog.Duration("took", 1500*time.Millisecond))
		}
	}
	b.Run("clog-gcp", func(b *testing.B) { line(b, slog.New(gcp.NewHandlerForWriter(io.Discard, slog.LevelInfo))) })
	b.Run("obs.NewLogger", func(b *testing.B) { line(b, obs.NewLogger(io.Discard, slog.LevelInfo)) })
}
