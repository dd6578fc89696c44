#!/usr/bin/env bash
# Installs the tools deploy/'s checks run, when missing or at another version:
#   tflint   v0.64.0 with `go install` (its terraform ruleset is bundled: no plugin
#            download, deploy/terraform/.tflint.hcl enables nothing else)
#   ShellCheck from Debian (apt-get; as root, or with sudo)
# and checks that terraform is there (it cannot be installed from here: HashiCorp's
# releases are not reachable; the machines ship it). Safe to run again: it does nothing
# when everything is in place. Called by scripts/test.sh.
set -euo pipefail

TFLINT_VERSION=v0.64.0

log() { printf 'tools: %s\n' "$*" >&2; }

tflint=$(command -v tflint || echo "$(go env GOPATH)/bin/tflint")
have=$("$tflint" --version 2>/dev/null || true)
if [[ $have != *"version ${TFLINT_VERSION#v}"* ]]; then
	log "installing tflint $TFLINT_VERSION"
	go install "github.com/terraform-linters/tflint@$TFLINT_VERSION"
fi

if ! command -v shellcheck >/dev/null; then
	log "installing shellcheck"
	sudo=
	if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq shellcheck >/dev/null
fi

if ! command -v terraform >/dev/null; then
	log "terraform is missing: deploy's fmt check fails in CI without it (it cannot be downloaded here)"
	exit 1
fi
