#!/usr/bin/env bash
# Fails when the committed CRDs differ from what `crdgen` generates from the Rust types.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-charts/machine-controller-manager/crds}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo run --quiet -p mcm-api --bin crdgen -- "$tmp"
if ! diff -ru "$dir" "$tmp"; then
	echo "error: $dir is stale; run 'make crds' and commit the result" >&2
	exit 1
fi
echo "CRDs: $(ls "$tmp" | wc -l) file(s) up to date"
