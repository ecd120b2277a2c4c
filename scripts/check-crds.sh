#!/usr/bin/env bash
# Fails when the committed CRDs differ from what `crdgen --chart` generates from the Rust types:
# both variants the chart's templates read (`v1alpha1/`: served v1alpha1 only; `conversion/`:
# v1alpha1 + v1beta1 with the conversion webhook stanza), and nothing else in that folder.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-charts/machine-controller-manager/files/crds}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo run --quiet -p mcm-api --bin crdgen -- --chart "$tmp" 2>/dev/null
if ! diff -ru "$dir" "$tmp"; then
	echo "error: $dir is stale; run 'make crds' and commit the result" >&2
	exit 1
fi
# The chart's legacy crds/ path is a symlink to the v1alpha1 variant (kept for tools that apply it
# directly); helm skips it through .helmignore so the CRDs are installed only by the templates.
legacy=charts/machine-controller-manager/crds
if [[ -e $legacy && ! -L $legacy ]]; then
	echo "error: $legacy must be a symlink to files/crds/v1alpha1, not a copy" >&2
	exit 1
fi
echo "CRDs: $(find "$tmp" -name '*.yaml' | wc -l) file(s) in $(find "$tmp" -mindepth 1 -maxdepth 1 -type d | wc -l) variant(s) up to date"
