//go:build !unix

package benchloop

import "time"

// cpuTimes is the CPU time this process and the whole machine had spent at one instant:
// never known here (ok false), so no CPU metrics are reported.
type cpuTimes struct {
	self, machine time.Duration
	ok            bool
}

func cpuNow() cpuTimes { return cpuTimes{} }

func (t cpuTimes) sub(o cpuTimes) cpuTimes { return cpuTimes{} }
