//go:build unix

package benchloop

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// cpuNow reads this process's CPU time (getrusage) and the machine's busy time
// (/proc/stat's first line, every state but idle and iowait): the two that say, on a
// machine that the benchmark saturates, where the cores went.
func cpuNow() cpuTimes {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}
	}
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return cpuTimes{}
	}
	var busy int64
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return cpuTimes{}
		}
		busy += n
	}
	// /proc/stat counts in USER_HZ, 100 on every Linux architecture Go supports.
	return cpuTimes{self: self, machine: time.Duration(busy) * 10 * time.Millisecond, ok: true}
}
