#!/usr/bin/env bash
# Installs the tools deploy/'s checks run, when missing or at another version:
#   tflint   v0.64.0 with `go install` (its terraform ruleset is bundled: no plugin
#            download, deploy/terraform/.tflint.hcl enables nothing else)
#   ShellCheck from Debian (apt-get; as root, or with sudo)
#   the Google provider's schema: the .jsii manifest of the npm package
#            @cdktf/provider-google (generated from the provider's own schema), fetched
#            with `npm pack` once and cached in ${XDG_CACHE_HOME:-~/.cache}/runonce
# and checks that terraform is there (it cannot be installed from here: HashiCorp's
# releases are not reachable; the machines ship it). Safe to run again: it does nothing
# when everything is in place. Called by scripts/test.sh.
set -euo pipefail

TFLINT_VERSION=v0.64.0
# 16.12.1 carries the google provider 6.50.0 (deploy/schema_test.go says which).
CDKTF_GOOGLE_VERSION=16.12.1

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

cache=${XDG_CACHE_HOME:-$HOME/.cache}/runonce
jsii=$cache/cdktf-provider-google-$CDKTF_GOOGLE_VERSION.jsii
if [ ! -s "$jsii" ]; then
	if ! command -v npm >/dev/null; then
		log "installing npm"
		sudo=
		if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
		$sudo apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq npm >/dev/null
	fi
	log "fetching the google provider's schema (@cdktf/provider-google@$CDKTF_GOOGLE_VERSION)"
	mkdir -p "$cache"
	tmp=$(mktemp -d)
	(cd "$tmp" && npm pack --silent "@cdktf/provider-google@$CDKTF_GOOGLE_VERSION" >/dev/null)
	tar -xzf "$tmp"/cdktf-provider-google-"$CDKTF_GOOGLE_VERSION".tgz -C "$tmp" package/.jsii
	mv "$tmp/package/.jsii" "$jsii"
	rm -rf "$tmp"
fi

if ! command -v terraform >/dev/null; then
	log "terraform is missing: deploy's fmt check fails in CI without it (it cannot be downloaded here)"
	exit 1
fi
