#!/usr/bin/env bash
# The project's one test command (the README's and CI's): installs the pinned linters,
# installs chromium when missing, fetches the google provider's schema (npm, cached;
# deploy/tools.sh), starts every service the tests need (PostgreSQL, Redis, the
# Firestore, Pub/Sub and Spanner emulators; services.sh installs redis-server when
# missing), runs gofmt, go vet, staticcheck and the whole suite with -race, and stops what it
# started, whatever happens. Extra arguments go to `go test` (e.g. -run Ledger).
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2
export CLOUDSDK_CORE_DISABLE_PROMPTS=1
export GOFLAGS=${GOFLAGS:--buildvcs=false}

gobin=$(go env GOPATH)/bin
if ! "$gobin/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
	echo "test: installing staticcheck $STATICCHECK_VERSION" >&2
	go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi

if ! command -v chromium >/dev/null; then
	echo "test: installing chromium (Debian's, for the dashboard's browser tests)" >&2
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

echo "test: tools for the deploy checks (tflint, shellcheck, terraform, the google provider's schema)" >&2
deploy/tools.sh

work=$(mktemp -d "${TMPDIR:-/tmp}/runonce-test.XXXXXX")
chmod 755 "$work"
cleanup() {
	scripts/services.sh stop "$work" || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "test: gofmt" >&2
mapfile -t gofiles < <(git ls-files --cached --others --exclude-standard '*.go')
unformatted=$(gofmt -l "${gofiles[@]}")
if [ -n "$unformatted" ]; then
	echo "gofmt would change: $unformatted" >&2
	exit 1
fi
# The workspace's modules (go.work): ./... does not reach into the nested ones.
modules=(./... ./deploy/... ./loadtest/... ./peerbench/... ./examples/userworker/... ./examples/receiver/...)
echo "test: no merge conflict markers" >&2
if git grep -nE '^(<<<<<<< |>>>>>>> |=======$)' -- ':!*.sum' ':!go.work.sum'; then
	echo "unresolved merge conflict markers (above)" >&2
	exit 1
fi
echo "test: go vet" >&2
go vet "${modules[@]}"
echo "test: staticcheck" >&2
"$gobin/staticcheck" "${modules[@]}"
for m in deploy loadtest peerbench examples/userworker examples/receiver; do
	echo "test: go mod tidy -diff in $m" >&2
	(cd "$m" && GOWORK=off go mod tidy -diff)
done

echo "test: starting services" >&2
eval "$(scripts/services.sh start "$work")"
export CI=${CI:-true}

# A budget of executions, not of time: with a duration, Go 1.26's fuzzing coordinator can
# report its own deadline as the target's failure ("context deadline exceeded", no input
# written) when its workers are starved at the end (go.dev/issue/75804, fixed in Go 1.27).
echo "test: fuzz FuzzDeriveKey (20,000 inputs)" >&2
go test -run '^$' -fuzz FuzzDeriveKey -fuzztime 20000x ./pkg/ingress

# peerbench holds benchmarks only (make bench-floors runs them, for minutes): go vet and
# staticcheck above build it, the test run leaves it out rather than build River with
# -race for no test.
tested=()
for m in "${modules[@]}"; do
	[ "$m" = ./peerbench/... ] || tested+=("$m")
done
echo "test: go test ${RACE--race} $*" >&2
# shellcheck disable=SC2086 # RACE is empty or one flag
go test ${RACE--race} -count=1 -timeout 15m "$@" "${tested[@]}"
