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
# Helm would install a chart's crds/ folder untemplated, bypassing crds.install and
# conversion.enabled: the CRDs live in files/crds/ and are rendered by templates/crds.yaml only.
if [[ -e charts/machine-controller-manager/crds ]]; then
	echo "error: charts/machine-controller-manager/crds must not exist (see templates/crds.yaml)" >&2
	exit 1
fi
echo "CRDs: $(find "$tmp" -name '*.yaml' | wc -l) file(s) in $(find "$tmp" -mindepth 1 -maxdepth 1 -type d | wc -l) variant(s) up to date"
