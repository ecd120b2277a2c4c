#!/usr/bin/env bash
# `make bench`: run every benchmark binary in release mode. They print figures (medians and ratios)
# and assert nothing: the machines are shared and noisy.
set -euo pipefail
cd "$(dirname "$0")/.."
ran=0
for spec in $(cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
m = json.load(sys.stdin)
for p in m["packages"]:
    for t in p["targets"]:
        if "example" in t["kind"] and t["name"].endswith("_bench"):
            print(p["name"] + ":" + t["name"])
'); do
	pkg=${spec%%:*}; ex=${spec#*:}
	echo "=== $pkg / $ex"
	cargo run --release --quiet -p "$pkg" --example "$ex"
	ran=$((ran + 1))
done
echo "benchmarks run: $ran"
