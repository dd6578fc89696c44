package benchloop

import (
	"testing"
	"time"
)

// cpuTimes is the CPU time this process and the whole machine spent: up to one instant
// (cpuNow), between two (sub), or over several spans (add).
type cpuTimes struct {
	self, machine time.Duration
	ok            bool // every read behind it succeeded
}

// sub returns the CPU spent between o and t.
func (t cpuTimes) sub(o cpuTimes) cpuTimes {
	return cpuTimes{self: t.self - o.self, machine: t.machine - o.machine, ok: t.ok && o.ok}
}

// add returns the CPU of the spans t and o together.
func (t cpuTimes) add(o cpuTimes) cpuTimes {
	return cpuTimes{self: t.self + o.self, machine: t.machine + o.machine, ok: t.ok && o.ok}
}

// CPUMark is a reading of this process's and the machine's CPU clocks (MarkCPU), where
// a span that CPUSpent adds up starts.
type CPUMark struct{ t cpuTimes }

// MarkCPU reads the CPU clocks.
func MarkCPU() CPUMark { return CPUMark{cpuNow()} }

// CPUSpent adds up the CPU spent over spans of one kind of operation, for a benchmark
// that runs its own rounds (Interleaved and Rounds use it for theirs). Its zero value
// has no span.
type CPUSpent struct {
	sum   cpuTimes
	spans int
	bad   bool // a read behind a span failed
}

// AddSince adds the span from m to now.
func (s *CPUSpent) AddSince(m CPUMark) {
	d := cpuNow().sub(m.t)
	s.bad = s.bad || !d.ok
	s.sum = s.sum.add(d)
	s.spans++
}

// Report reports what the spans cost per operation, for ops operations of kind name:
// NAME-cpu-us/op, this process's CPU, and NAME-machine-cpu-us/op, the whole machine's
// (nothing where the clocks cannot be read).
func (s *CPUSpent) Report(b *testing.B, name string, ops int) {
	if s.bad || s.spans == 0 || ops == 0 {
		return
	}
	b.ReportMetric(float64(s.sum.self.Microseconds())/float64(ops), name+"-cpu-us/op")
	b.ReportMetric(float64(s.sum.machine.Microseconds())/float64(ops), name+"-machine-cpu-us/op")
}
