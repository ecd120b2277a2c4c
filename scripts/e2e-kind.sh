#!/usr/bin/env bash
# `make e2e-kind`: the e2e suite against a real Kubernetes API server (kind).
#
#   1. creates a kind cluster (name MCM_KIND_CLUSTER, default mcm-e2e) unless it exists,
#   2. builds the images from the root Dockerfile (manager, webhook, provider-virtual targets)
#      and loads them into the cluster,
#   3. installs the Helm chart charts/machine-controller-manager (webhook certificates
#      self-managed, v1beta1 conversion on, short timeouts like the sandbox suite),
#   4. runs `cargo test -p mcm-e2e` with MCM_E2E_KUBECONFIG and MCM_E2E_NAMESPACE set, so the
#      suite uses this cluster and skips (loudly) the scenarios that need the sandbox.
#
# Needs docker, kind, helm (or `make helm`), kubectl and cargo. It cannot run on the development
# machine of this repository (no container engine); see e2e/README.md.
# MCM_KIND_KEEP=1 keeps the cluster afterwards (default: deleted when this script created it).
set -euo pipefail
cd "$(dirname "$0")/.."

cluster=${MCM_KIND_CLUSTER:-mcm-e2e}
namespace=${MCM_E2E_NAMESPACE:-machine-controller-manager}
registry=${MCM_KIND_REGISTRY:-ghcr.io/machine-controller-manager-rs}
tag=${MCM_KIND_TAG:-e2e}
work=$(mktemp -d)
kubeconfig=$work/kubeconfig

for tool in docker kind kubectl cargo; do
	command -v "$tool" >/dev/null || { echo "error: $tool not found on PATH" >&2; exit 1; }
done
if command -v helm >/dev/null; then
	helm=(helm)
else
	helm=(scripts/helm.sh)
fi

created=false
if ! kind get clusters 2>/dev/null | grep -qx "$cluster"; then
	kind create cluster --name "$cluster" --wait 120s
	created=true
fi
cleanup() {
	if $created && [ -z "${MCM_KIND_KEEP:-}" ]; then
		kind delete cluster --name "$cluster" || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
kind get kubeconfig --name "$cluster" >"$kubeconfig"

echo ">>> building and loading the images (tag $tag)"
for target in machine-controller-manager machine-webhook provider-virtual; do
	docker build --target "$target" -t "$registry/$target:$tag" .
	kind load docker-image --name "$cluster" "$registry/$target:$tag"
done

echo ">>> installing the chart into namespace $namespace"
"${helm[@]}" upgrade --install mcm charts/machine-controller-manager \
	--kubeconfig "$kubeconfig" \
	--namespace "$namespace" --create-namespace \
	--set image.registry="$registry" \
	--set image.tag="$tag" \
	--set image.pullPolicy=Never \
	--set provider.image.repository="$registry/provider-virtual" \
	--set provider.image.tag="$tag" \
	--set provider.image.pullPolicy=Never \
	--set webhook.certificates.mode=self-managed \
	--set conversion.enabled=true \
	--set manager.config.machineHealthTimeout=20s \
	--set manager.config.machineDrainTimeout=60s \
	--set manager.config.machineSafetyOvershootingPeriod=2s \
	--set manager.config.machineSafetyOrphanVmsPeriod=5s \
	--wait --timeout 5m

echo ">>> running the e2e suite against kind"
MCM_E2E_KUBECONFIG=$kubeconfig MCM_E2E_NAMESPACE=$namespace \
	cargo test -p mcm-e2e -- --nocapture
