// Package benchloop runs a benchmark's operations as a closed loop from a fixed number of
// goroutines and reports what every runonce benchmark reports: ops/s, p50 and p99, so that
// the figures of different packages compare. Only tests import it.
package benchloop
