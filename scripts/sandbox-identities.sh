#!/usr/bin/env bash
# Gives the manager, the webhook and provider-virtual each its own identity in a cluster (the
# sandbox of `make run`, or any other), bound to exactly the RBAC that the chart renders, so that
# they run under least privilege as they would when installed by the chart.
#
#   scripts/sandbox-identities.sh <admin-kubeconfig> <out-dir> [namespace [control-namespace]]
#
# Creates the ServiceAccounts machine-controller-manager, machine-controller-manager-webhook and
# provider-virtual in <namespace> (default: default; the chart's release namespace), applies the chart's control and target RBAC
# (templates/rbac.yaml and templates/target-rbac.yaml, rendered with fullnameOverride
# machine-controller-manager, self-managed webhook certificates, conversion on and the virtual
# provider; the target roles bind the manager and provider-virtual, which in the chart share the
# manager pod's identity; the manager's control Role goes to <control-namespace>, default
# <namespace>), and writes <out-dir>/{manager,webhook,provider}.kubeconfig with
# ServiceAccount tokens from the TokenRequest API, and <out-dir>/rbac.yaml (what was applied).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
admin=${1:?usage: $0 <admin-kubeconfig> <out-dir> [namespace]}
out=${2:?usage: $0 <admin-kubeconfig> <out-dir> [namespace]}
ns=${3:-default}
control_ns=${4:-$ns}
release=machine-controller-manager
manager_sa=machine-controller-manager
webhook_sa=machine-controller-manager-webhook
provider_sa=provider-virtual

k() { kubectl --kubeconfig "$admin" "$@"; }
helm=${HELM:-$("$root/scripts/helm.sh" --path)}
mkdir -p "$out"

for sa in "$manager_sa" "$webhook_sa" "$provider_sa"; do
	k -n "$ns" create serviceaccount "$sa" --dry-run=client -o yaml | k apply -f - >/dev/null
done

"$helm" template "$release" "$root/charts/machine-controller-manager" --namespace "$ns" \
	--set fullnameOverride=machine-controller-manager \
	--set webhook.certificates.mode=self-managed \
	--set conversion.enabled=true \
	--set provider.name=virtual \
	--set manager.controlNamespace="$control_ns" \
	--set "target.rbac.subjects[0].kind=ServiceAccount" \
	--set "target.rbac.subjects[0].name=$manager_sa" \
	--set "target.rbac.subjects[0].namespace=$ns" \
	--set "target.rbac.subjects[1].kind=ServiceAccount" \
	--set "target.rbac.subjects[1].name=$provider_sa" \
	--set "target.rbac.subjects[1].namespace=$ns" \
	-s templates/rbac.yaml -s templates/target-rbac.yaml >"$out/rbac.yaml"
k apply -f "$out/rbac.yaml" >/dev/null

server=$(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
ca=$(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
write_kubeconfig() { # <file> <service account>
	local token
	token=$(k -n "$ns" create token "$2" --duration=24h)
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandbox
  cluster:
    server: $server
$([ -n "$ca" ] && echo "    certificate-authority-data: $ca")
contexts:
- name: $2
  context:
    cluster: sandbox
    user: $2
    namespace: $ns
current-context: $2
users:
- name: $2
  user:
    token: $token
EOF
	chmod 600 "$1"
}
write_kubeconfig "$out/manager.kubeconfig" "$manager_sa"
write_kubeconfig "$out/webhook.kubeconfig" "$webhook_sa"
write_kubeconfig "$out/provider.kubeconfig" "$provider_sa"
echo "identities: $out/{manager,webhook,provider}.kubeconfig (RBAC: $out/rbac.yaml)"
