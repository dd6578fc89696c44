//go:build !unix

package benchloop

// cpuNow knows neither clock here (ok false): no CPU metrics are reported.
func cpuNow() cpuTimes { return cpuTimes{} }
