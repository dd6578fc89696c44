// Package peerbench measures runonce beside a peer that does the same work another way:
// BenchmarkRiverVsWorker runs River's worker (github.com/riverqueue/river) and
// runonce's worker on the same PostgreSQL, no-op jobs, at concurrency 8 and 32.
//
// It is a module of its own, github.com/runonce/runonce/peerbench, with a go.mod that
// replaces runonce with the repository root, so that River is never a dependency of the
// root module a user imports. The repository's go.work makes it visible from the root:
//
//	go test -run '^$' -bench BenchmarkRiverVsWorker -benchtime 2000x ./peerbench/
//
// scripts/bench-floors.sh runs it in `make bench-floors` (BENCHMARKS.md).
package peerbench
