#!/usr/bin/env bash
# Upstream's Go machine-controller-manager, pinned by bench/upstream/go.mod, for
# `make bench-upstream` (docs/performance.md#against-upstream):
#   scripts/upstream-mcm.sh build   go test, then builds into target/go/:
#     machine-controller-manager   upstream's cmd/machine-controller-manager, unmodified, from the
#                                  module cache
#     machine-controller           upstream's machine controller around
#                                  the in-memory driver of provider-go/memdriver
# Without Go it prints a loud SKIPPED banner; under CI=true that skip is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if ! command -v go >/dev/null; then
	echo "********" >&2
	echo "!!! SKIPPED: upstream's machine-controller-manager (go is not on PATH)" >&2
	echo "********" >&2
	[ "${CI:-}" = true ] && exit 1
	exit 0
fi

start=$(date +%s)
step() { echo "upstream-mcm: $1 ($(($(date +%s) - start))s)"; }
out="$root/target/go"

case "${1:-}" in
build)
	version=$(cd bench/upstream && go list -m -f '{{.Version}}' github.com/gardener/machine-controller-manager)
	step "upstream machine-controller-manager $version, $(go version | cut -d' ' -f3)"
	step "go test ./... (bench/upstream)"
	(cd bench/upstream && go test ./...)
	mkdir -p "$out"
	step "building target/go/machine-controller-manager (upstream's command, unmodified)"
	(cd bench/upstream && go build -o "$out/machine-controller-manager" github.com/gardener/machine-controller-manager/cmd/machine-controller-manager)
	step "building target/go/machine-controller (upstream's app.Run with the in-memory driver)"
	(cd bench/upstream && go build -o "$out/machine-controller" ./cmd/machine-controller)
	step "done"
	;;
*)
	echo "usage: $0 build" >&2
	exit 2
	;;
esac
