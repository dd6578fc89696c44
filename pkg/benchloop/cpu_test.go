//go:build linux

package benchloop

import (
	"runtime"
	"testing"
	"time"
)

// TestCPUNowCountsWork spins until this process has spent 100 ms of CPU and checks
// that the machine's busy time saw it (less its 10 ms granularity, on each of two
// reads) and that the process's time is not more than its cores could have spent.
func TestCPUNowCountsWork(t *testing.T) {
	c0 := cpuNow()
	if !c0.ok {
		t.Fatal("cpuNow: could not read getrusage or /proc/stat")
	}
	const want = 100 * time.Millisecond
	start := time.Now()
	var c cpuTimes
	for x := 0; ; x++ {
		if x%100000 == 0 {
			if c = cpuNow().sub(c0); c.self >= want {
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("process CPU %v after 30s of spinning: getrusage is not counting", c.self)
			}
		}
	}
	wall := time.Since(start)
	if !c.ok {
		t.Fatal("cpuNow: a later read failed")
	}
	if c.machine < c.self-20*time.Millisecond {
		t.Errorf("machine busy time %v is less than this process's %v", c.machine, c.self)
	}
	if most := wall*time.Duration(runtime.NumCPU()) + 20*time.Millisecond; c.machine > most {
		t.Errorf("machine busy time %v in %v of wall time on %d CPUs", c.machine, wall, runtime.NumCPU())
	}
}

// TestCPUSpentAddsSpans checks that CPUSpent adds up its spans and only those: two spans
// of 50 ms of spinning, each followed by 100 ms more that no span covers.
func TestCPUSpentAddsSpans(t *testing.T) {
	spin := func(d time.Duration) {
		c0 := cpuNow()
		for x := 0; ; x++ {
			if x%100000 == 0 && cpuNow().sub(c0).self >= d {
				return
			}
		}
	}
	var s CPUSpent
	for range 2 {
		m := MarkCPU()
		spin(50 * time.Millisecond)
		s.AddSince(m)
		spin(100 * time.Millisecond) // outside every span
	}
	if s.bad || s.spans != 2 {
		t.Fatalf("spent %+v, want two spans read", s)
	}
	if s.sum.self < 100*time.Millisecond || s.sum.self > 150*time.Millisecond {
		t.Errorf("two spans of 50 ms of CPU add up to %v", s.sum.self)
	}
}
