// Package benchloop runs a benchmark's operations as a closed loop from a fixed number of
// goroutines and reports what every runonce benchmark reports: ops/s, p50 and p99, so that
// the figures of different packages compare: ledgertest.Benchmark's, receivertest's and
// each package's own benchmarks. It links the standard library only, so that the test
// kits of pkg/ link no database client through it; the baselines that do
// (internal/benchbase) are for runonce's own tests.
package benchloop
