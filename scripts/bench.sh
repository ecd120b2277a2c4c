#!/usr/bin/env bash
# `make bench`: the rollout benchmark (controller/examples/deployment_bench.rs) in release mode:
# 0 → N machines (with the timeline of each machine's stages), a steady state and a SIGKILL restart
# of the manager with N Running, a full rollout and deletion, with the real manager and provider
# binaries; it prints per phase wall time, requests and writes by verb and resource, CPU and RSS,
# and the most machines seen against replicas + maxSurge. Figures only, no timing asserts
# (docs/performance.md).
#   BENCH_MACHINES=100 make bench      quick check (under a minute)
#   BENCH_ARGS="--faults" make bench   with a lagging watch and injected conflicts
#   scripts/bench.sh --all             every *_bench example of the workspace instead
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--all" ]; then
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
		if [ "$ex" = deployment_bench ]; then
			cargo build --release --quiet --bin machine-controller-manager --bin provider-virtual
		fi
		cargo run --release --quiet -p "$pkg" --example "$ex"
		ran=$((ran + 1))
	done
	echo "benchmarks run: $ran"
	exit 0
fi
cargo build --release --quiet --bin machine-controller-manager --bin provider-virtual
# shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
cargo run --release --quiet -p mcm-controller --example deployment_bench -- \
	--machines "${BENCH_MACHINES:-1000}" ${BENCH_ARGS:-}
