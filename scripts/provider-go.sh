#!/usr/bin/env bash
# The Go bridge for upstream's providers (provider-go/, docs/provider-authoring.md):
#   scripts/provider-go.sh check   the committed Go code of the driver contract matches the .proto
#                                  files (part of make lint)
#   scripts/provider-go.sh test    go test in provider-go and providers/azure, builds the bridge
#                                  binaries into target/go/, and runs the driver conformance kit
#                                  against the in-memory provider behind the bridge (part of make test)
# Without Go both print a loud SKIPPED banner; under CI=true that skip is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
CARGO=${CARGO:-cargo}

if ! command -v go >/dev/null; then
	echo "********" >&2
	echo "!!! SKIPPED: the Go bridge's checks and tests (go is not on PATH)" >&2
	echo "********" >&2
	[ "${CI:-}" = true ] && exit 1
	exit 0
fi

start=$(date +%s)
step() { echo "provider-go: $1 ($(($(date +%s) - start))s)"; }

case "${1:-}" in
check)
	step "checking that driverpb matches provider-proto/proto"
	(cd provider-go && go run ./internal/protogen -check)
	;;
test)
	step "go test ./... (bridge, in-memory driver)"
	(cd provider-go && go test ./...)
	step "go test ./... (the Azure provider behind the bridge)"
	(cd provider-go/providers/azure && go test ./...)
	out="$root/target/go"
	mkdir -p "$out"
	step "building target/go/mcm-provider-memory and target/go/mcm-provider-azure"
	(cd provider-go && go build -o "$out/mcm-provider-memory" ./cmd/mcm-provider-memory)
	(cd provider-go/providers/azure && go build -o "$out/mcm-provider-azure" .)
	step "building the conformance kit"
	$CARGO build -q -p mcm-provider-proto --example conformance
	dir=$(mktemp -d)
	"$out/mcm-provider-memory" --endpoint "unix://$dir/driver.sock" >"$dir/provider.log" 2>&1 &
	pid=$!
	trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
	for _ in $(seq 1 100); do
		[ -S "$dir/driver.sock" ] && break
		sleep 0.1
	done
	step "the conformance kit against the in-memory provider behind the bridge"
	if ! "${CARGO_TARGET_DIR:-$root/target}/debug/examples/conformance" "unix://$dir/driver.sock" provider-go/testdata/conformance-fixture.json; then
		echo "--- provider log ---" >&2
		tail -n 40 "$dir/provider.log" >&2
		exit 1
	fi
	step "done"
	;;
*)
	echo "usage: $0 check|test" >&2
	exit 2
	;;
esac
