#!/usr/bin/env bash
# `make run`: start the system locally.
#
# What runs today (see README "Status"): the sandbox API server (an embedded, Kubernetes-compatible
# API server for development) with the machine.sapcloud.io CRDs installed, ready for kubectl. The
# webhook, the virtual provider and the manager's controllers are joined to this command by the
# integration issue. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

run_dir=.run
kubeconfig=$run_dir/kubeconfig
target_dir=${CARGO_TARGET_DIR:-target}

echo ">>> building"
cargo build --workspace --bins

mkdir -p "$run_dir"
# A second run replaces the first one's state: the sandbox keeps everything in memory.
rm -f "$kubeconfig"

echo ">>> starting the sandbox API server"
"$target_dir/debug/mcm-sandbox" serve --kubeconfig "$kubeconfig" &
sandbox_pid=$!
cleanup() {
	kill "$sandbox_pid" 2>/dev/null || true
	wait "$sandbox_pid" 2>/dev/null || true
	echo ">>> stopped"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for _ in $(seq 1 100); do
	[ -s "$kubeconfig" ] && break
	kill -0 "$sandbox_pid" 2>/dev/null || { echo "error: the sandbox exited during start-up" >&2; exit 1; }
	sleep 0.1
done
[ -s "$kubeconfig" ] || { echo "error: the sandbox wrote no kubeconfig within 10s" >&2; exit 1; }

if command -v kubectl >/dev/null; then
	echo ">>> installing the CRDs"
	kubectl --kubeconfig "$kubeconfig" apply -f charts/machine-controller-manager/crds/
	kubectl --kubeconfig "$kubeconfig" wait --for=condition=Established --timeout=30s \
		crd/machines.machine.sapcloud.io crd/machinesets.machine.sapcloud.io \
		crd/machinedeployments.machine.sapcloud.io crd/machineclasses.machine.sapcloud.io
else
	echo "warning: kubectl not found on PATH; the CRDs were not installed" >&2
fi

cat <<EOT

The sandbox API server is running. Try:
  export KUBECONFIG=$PWD/$kubeconfig
  kubectl api-resources --api-group=machine.sapcloud.io
  kubectl explain machinedeployment.spec.strategy
  kubectl get machinedeployments,machinesets,machines

Not running yet: the webhook, the virtual provider and the controllers (see README "Status").
Press Ctrl-C to stop.
EOT
wait "$sandbox_pid"
