package schedule_test

import (
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/schedule"
)

// BenchmarkTicks: one tick of a minutely schedule in a zone with DST.
func BenchmarkTicks(b *testing.B) {
	s := schedule.MustParse("* * * * *", "Europe/Berlin")
	from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	for b.Loop() {
		for range s.Ticks(from, from.Add(time.Hour)) {
			n++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/tick")
}

// BenchmarkPrev: the previous tick of a daily schedule.
func BenchmarkPrev(b *testing.B) {
	s := schedule.MustParse("30 2 * * *", "America/New_York")
	at := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for b.Loop() {
		if _, ok := s.Prev(at); !ok {
			b.Fatal("no previous tick")
		}
	}
}
