package benchloop

import "time"

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
