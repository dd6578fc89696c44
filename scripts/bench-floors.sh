#!/usr/bin/env bash
# Runs the paired floor benchmarks (BENCHMARKS.md): starts the services with a durable
# PostgreSQL (fsync on) and the other services, runs each benchmark three times (-count 3), each of which
# alternates rounds of runonce and of its floor in one process, prints the machine's load
# before and after, and stops what it started. Extra arguments go to every `go test`.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d "${TMPDIR:-/tmp}/runonce-bench.XXXXXX")
chmod 755 "$work"
cleanup() {
	scripts/services.sh stop "$work" || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

eval "$(RUNONCE_PG_DURABLE=1 scripts/services.sh start "$work")"
export CI=${CI:-}

bench() { go test -run '^$' -count 3 "$@"; }
echo "bench: $(date -u '+%Y-%m-%d %H:%M UTC'), at $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (uncommitted changes)')"
echo "bench: machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
echo "bench: load before: $(uptime)"
bench -bench 'BenchmarkPostgresIngressVsBare|BenchmarkFirestoreIngressVsBare' -benchtime 2000x "$@" ./pkg/ingress/
bench -bench BenchmarkDuplicateVsNew -benchtime 4000x "$@" ./pkg/ledger/postgres/
bench -bench BenchmarkDuplicateVsNew -benchtime 2000x "$@" ./pkg/ledger/sqlite/
bench -bench BenchmarkDuplicateVsNew -benchtime 4000x "$@" ./pkg/ledger/redisledger/
bench -bench BenchmarkDuplicateVsNew -benchtime 1000x "$@" ./pkg/ledger/firestoreledger/
bench -bench BenchmarkDuplicateVsNew -benchtime 1000x "$@" ./pkg/ledger/spannerledger/
bench -bench BenchmarkPostgresNoopJobsVsChain -benchtime 2000x "$@" ./pkg/worker/
# The worker's two PostgreSQL calls per job against the raw chain's two statements, with
# no Pub/Sub: what the worker's ratio owes to the statements alone.
bench -bench BenchmarkWorkerCallsVsChain -benchtime 4000x "$@" ./pkg/ledger/postgres/
# The same chain's two statements on the ledger's own runs table, with and without the
# history rows and the secondary indexes: the floor that the schema sets the worker; and
# the worker's calls unbatched, on a runs table with an index fewer, and on one with its
# primary key alone, with and without the claim's history row (the most a change of the
# data model could give them).
bench -bench BenchmarkSchemaFloor -benchtime 4000x "$@" ./pkg/ledger/postgres/
bench -bench BenchmarkFirestoreNoopJobsVsChain -benchtime 2000x "$@" ./pkg/worker/
# The downstream receiver (pkg/receiver): a wrapped no-op handler against the bare one.
bench -bench BenchmarkMiddlewareVsBare -benchtime 2000x "$@" ./pkg/receiver/postgres/ ./pkg/receiver/sqlite/ ./pkg/receiver/memory/
# The real stack's binaries over PostgreSQL and the Pub/Sub emulator: the ingress against
# the bare handler, its peak RSS at 1,000 requests/s, and 1, 2 and 4 worker processes on
# one subscription.
bench -bench BenchmarkIngressBinaryVsBare -benchtime 2000x "$@" ./cmd/ingress/
bench -bench BenchmarkIngressPeakRSS -benchtime 10000x "$@" ./cmd/ingress/
bench -bench BenchmarkWorkerProcesses -benchtime 3000x "$@" ./cmd/ingress/
# Time to start, from the ingress's 202 to the job's first line, per backend (-dev's
# SQLite, PostgreSQL and Firestore with the Pub/Sub emulator), beside a raw
# publish→receive on the same transport.
bench -bench BenchmarkTimeToStart -benchtime 1000x "$@" ./cmd/ingress/
# A peer: River's worker (its default configuration, and with its fetch cooldown at its
# minimum) beside runonce's worker, on the same PostgreSQL (peerbench: a module of its
# own, so that River is no dependency of runonce's).
bench -bench BenchmarkRiverVsWorker -benchtime 2000x "$@" ./peerbench/
# The embedded default end to end: the built binary with -dev over HTTP. It needs no
# service, so they are stopped first: after the runs above the emulators keep using CPU
# (the Pub/Sub emulator about a third of a core), which -dev would share; and what they
# left to write back is flushed, so that -dev's fsyncs do not queue behind it.
scripts/services.sh stop "$work"
sync
echo "bench: load before -dev: $(uptime)"
bench -bench BenchmarkDevEndToEnd -benchtime 6000x "$@" ./cmd/ingress/
echo "bench: load after: $(uptime)"
