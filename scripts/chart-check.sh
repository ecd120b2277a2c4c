#!/usr/bin/env bash
# `make chart-check`: checks the Helm chart end to end without a cluster.
#
#  1. helm lint --strict with the default values, every charts/<chart>/ci/*-values.yaml and every
#     preset charts/<chart>/values-*.yaml (e.g. values-gardener.yaml);
#  2. helm template of each of those variants, plus assertions on what each variant must (not)
#     contain, and renders that must fail (contradictory values);
#  3. every value in values.yaml documented there (a "# --" comment) and in docs/helm-chart.md
#     (`scripts/chart-check.sh --values-table` prints the table for that page);
#  4. every rendered manifest applied with `kubectl apply --dry-run=server` to a freshly started
#     mcm-sandbox (built with cargo) and, where Go is available, to a real kube-apiserver
#     (scripts/control-plane.sh; under CI=true its skip is a failure), after the stand-in CRDs of the operators the chart relies
#     on (cert-manager, prometheus-operator) from ci/stand-in-crds/; each variant must have every
#     object accepted;
#  5. the chart's contract with the binaries: the manager, the virtual provider and the webhook
#     (file and self-managed mode) start with the arguments the chart renders (only addresses,
#     kubeconfigs and paths swapped for local ones) and become healthy against the sandbox; in
#     self-managed mode the webhook must inject its caBundle into all eight webhooks of the
#     rendered configurations and the four rendered CRDs (conversion), applied for real;
#  6. the Gardener preset's objects, as the sandbox returns them, have Gardener's shape (names,
#     exact container command and args, ports, Role rule for rule, VPA) and the manager starts
#     with its exact args.
#
# helm comes from scripts/helm.sh (installed under .tools/ on first use).
set -euo pipefail
cd "$(dirname "$0")/.."

chart=charts/machine-controller-manager
release=mcm
namespace=mcm-system
helm=(scripts/helm.sh)

# Lists the values of values.yaml. Convention (helm-docs style): a value is documented by "# --"
# comment lines right above its key; keys with children and no such comment are sections. Prints
# the Markdown table rows (table) or the paths (paths), and UNDOCUMENTED <path> for values without
# a comment.
values_listing() {
	python3 - "$chart/values.yaml" "$1" <<'PY'
import re
import sys

lines = open(sys.argv[1]).read().split("\n")
stack, doc, leaves, undocumented = [], [], [], []
for n, line in enumerate(lines):
    s = line.strip()
    if s.startswith("# --"):
        doc = [s[4:].strip()]
        continue
    if s.startswith("#"):
        if doc:
            doc.append(s[1:].strip())
        continue
    if not s:
        doc = []
        continue
    m = re.match(r"^( *)([A-Za-z0-9_]+):(.*)$", line)
    if not m:
        doc = []  # list items and block content
        continue
    ind, key, rest = len(m.group(1)), m.group(2), m.group(3).strip()
    while stack and stack[-1][0] >= ind:
        stack.pop()
    if any(documented for _, _, documented in stack):
        doc = []  # inside a documented map value
        continue
    path = ".".join([k for _, k, _ in stack] + [key])
    following = next((l for l in lines[n + 1 :] if l.strip() and not l.strip().startswith("#")), "")
    has_children = not rest and len(following) - len(following.lstrip()) > ind
    if doc:
        leaves.append((path, rest or "(see values.yaml)", " ".join(doc)))
        if has_children:
            stack.append((ind, key, True))
    elif has_children:
        stack.append((ind, key, False))
    else:
        undocumented.append(path)
    doc = []
for path, default, text in leaves:
    text = text.replace("<", "&lt;").replace("|", "\\|")  # Markdown: no stray HTML tags or cells
    print(f"| `{path}` | `{default}` | {text} |" if sys.argv[2] == "table" else path)
for path in undocumented:
    print("UNDOCUMENTED " + path)
PY
}

values_table() {
	echo "| Value | Default | Meaning |"
	echo "|---|---|---|"
	values_listing table
}

if [[ ${1:-} == --values-table ]]; then
	values_table
	exit 0
fi

tmp=$(mktemp -d)
pids=()
cleanup() {
	[[ -f $tmp/control-plane/run/kube-apiserver.sh ]] && scripts/control-plane.sh stop "$tmp/control-plane" >/dev/null 2>&1
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
	echo "chart-check: $*" >&2
	exit 1
}

command -v kubectl >/dev/null || fail "kubectl not found on PATH"
"${helm[@]}" version --short >/dev/null

# Helm logs an INFO line for any symbolic link in a chart loaded from a source tree; none is
# expected, but such noise is kept out of what we show.
quiet() { grep -v 'found symbolic link in path' || true; }

variants=(default)
for file in "$chart"/ci/*-values.yaml; do
	variants+=("$(basename "$file" -values.yaml)")
done
# Presets for users (values-<name>.yaml at the chart root) are variants too.
for file in "$chart"/values-*.yaml; do
	variant=$(basename "$file" .yaml)
	variants+=("${variant#values-}")
done
values_args() {
	if [[ -f $chart/values-$1.yaml ]]; then
		echo "--values=$chart/values-$1.yaml"
	elif [[ $1 != default ]]; then
		echo "--values=$chart/ci/$1-values.yaml"
	fi
}

echo "== values documented"
if values_listing paths | grep '^UNDOCUMENTED '; then
	fail "values.yaml: the values above have no '# --' comment"
fi
# The page ends with the generated table, which must match values.yaml (defaults and texts).
if ! diff -u <(sed -n '/^## Values$/,$p' docs/helm-chart.md | tail -n +3) <(values_table) >"$tmp/values.diff"; then
	cat "$tmp/values.diff" >&2
	fail "the values table of docs/helm-chart.md is stale: replace it with 'scripts/chart-check.sh --values-table'"
fi
echo "values ok: $(values_listing paths | wc -l) documented in values.yaml and docs/helm-chart.md"

echo "== helm lint (${#variants[@]} value sets)"
for variant in "${variants[@]}"; do
	# shellcheck disable=SC2046
	if ! "${helm[@]}" lint --strict "$chart" --namespace "$namespace" $(values_args "$variant") >"$tmp/lint.log" 2>&1; then
		quiet <"$tmp/lint.log"
		fail "helm lint failed for $variant"
	fi
	echo "lint ok: $variant"
done

echo "== helm template"
for variant in "${variants[@]}"; do
	# shellcheck disable=SC2046
	"${helm[@]}" template "$release" "$chart" --namespace "$namespace" $(values_args "$variant") \
		>"$tmp/$variant.yaml" 2> >(quiet >&2) || fail "helm template failed for $variant"
	echo "rendered $variant: $(grep -c '^kind:' "$tmp/$variant.yaml") objects"
done

# What each variant promises, checked on the rendered text.
has() { grep -qE -- "$2" "$tmp/$1.yaml" || fail "$1: expected a line matching '$2'"; }
lacks() { ! grep -qE -- "$2" "$tmp/$1.yaml" || fail "$1: unexpected line matching '$2'"; }
count() {
	local got
	got=$(grep -cE -- "$2" "$tmp/$1.yaml" || true)
	[[ $got == "$3" ]] || fail "$1: expected $3 line(s) matching '$2', got $got"
}
count default '^kind: CustomResourceDefinition' 4
lacks default '^  conversion:'
lacks default '^(  - |    )name: v1beta1$'
count default '^kind: (Validating|Mutating)WebhookConfiguration' 2
for kind in machine machineset machinedeployment machineclass; do
	has default "path: /validate-machine-sapcloud-io-$kind\$"
	has default "path: /mutate-machine-sapcloud-io-$kind\$"
done
count default 'cert-manager.io/inject-ca-from: mcm-system/mcm-machine-controller-manager-webhook-serving' 2
has default '--driver-endpoint=unix:///run/mcm/driver.sock'
has default '--endpoint=unix:///run/mcm/driver.sock'
has default 'readOnlyRootFilesystem: true'
has default 'runAsNonRoot: true'
has default 'type: RuntimeDefault'
has default '^kind: ClusterRole$'
lacks default '^ *caBundle:'
# The gRPC driver path: machine-level series on the manager's providermetrics port, the driver's
# own on driver-metrics; --machine-metrics-port only when it is not the binary's default.
count default '^            - name: providermetrics$' 1
count default '^            - name: driver-metrics$' 1
lacks default '--machine-metrics-port'
has default '- machineclasses/status$'
# Split mode from the chart's own list: no driver, no machine-side flags for the manager (the
# sidecar keeps its own), the sidecar on providermetrics.
lacks machine-controller '^[^#]*(--driver-endpoint|driver-socket|driver-metrics|--machine-metrics-port)'
count machine-controller '--machine-creation-timeout' 1
has machine-controller '"--namespace=mcm-system"'
count machine-controller '^            - name: providermetrics$' 1
# The Gardener preset (split mode); its objects are checked in detail on the sandbox below.
lacks gardener '--driver-endpoint'
lacks gardener 'driver-socket'
count gardener '^kind: (CustomResourceDefinition|ClusterRole|ClusterRoleBinding|(Validating|Mutating)WebhookConfiguration)$' 0
count gardener '^kind: VerticalPodAutoscaler$' 1
count conversion '^    strategy: Webhook' 4
count conversion '^(  - |    )name: v1beta1$' 4
count conversion 'cert-manager.io/inject-ca-from' 6
count conversion '^          port: 8443' 4
lacks cert-manager '^kind: Issuer'
has cert-manager 'kind: ClusterIssuer'
count self-managed '^kind: Certificate' 0
has self-managed '--cert-mode=self-managed'
lacks self-managed 'inject-ca-from'
lacks self-managed 'customresourcedefinitions'
count conversion-self-managed '--crd=.*\.machine\.sapcloud\.io' 4
has conversion-self-managed 'customresourcedefinitions'
count crds-off '^kind: CustomResourceDefinition' 0
# A Go provider behind the bridge: the bridge's two arguments, none of provider-virtual's.
has go-bridge '^            - --endpoint=unix:///run/mcm/driver.sock$'
has go-bridge '^            - --metrics-address=0.0.0.0:10261$'
lacks go-bridge '--state-file'
has go-bridge '--driver-endpoint=unix:///run/mcm/driver.sock'
has go-bridge 'name: provider-azure$'
lacks crds-off 'WebhookConfiguration'
lacks crds-off '^kind: ClusterRole'
has crds-off 'namespace: shoot--dev--ci'
has target-rbac '^kind: ClusterRole$'
has target-rbac 'name: machine-controller-manager$'
has target-rbac '--target-kubeconfig=/etc/mcm/target/kubeconfig'
count monitoring '^kind: ServiceMonitor' 2
count monitoring '^kind: PrometheusRule' 1
for alert in MachineControllerManagerDown MachineFailed MachineStuck MachineSetFrozen MachineWebhookErrors; do
	has monitoring "alert: $alert\$"
done
has custom-provider '--target-kubeconfig=none'
has custom-provider '@sha256:0000'
echo "assertions ok"

echo "== renders that must fail"
must_fail() {
	local why=$1
	shift
	if "${helm[@]}" template "$release" "$chart" "$@" >/dev/null 2>"$tmp/fail.log"; then
		fail "rendering with $* succeeded, but must fail ($why)"
	fi
	grep -q "$why" "$tmp/fail.log" || {
		cat "$tmp/fail.log" >&2
		fail "rendering with $* failed without saying '$why'"
	}
	echo "refused: $*"
}
must_fail "conversion.enabled needs crds.install" --set conversion.enabled=true --set crds.install=false
must_fail "conversion.enabled needs webhook.enabled" --set conversion.enabled=true --set webhook.enabled=false
must_fail "needs manager.targetKubeconfig.secretName" --set manager.targetKubeconfig.mode=secret
must_fail "use inCluster, secret or none" --set manager.targetKubeconfig.mode=somewhere
must_fail "use cert-manager or self-managed" --set webhook.certificates.mode=helm
must_fail "use driver or machine-controller" --set provider.mode=sidecar
must_fail "needs provider.args" --set provider.mode=machine-controller --set provider.image.tag=v1
must_fail "needs provider.image.tag or provider.image.digest" --set provider.mode=machine-controller --set 'provider.args={--port=10259}'
must_fail "must differ" --set provider.metricsPort=10259
must_fail "must differ" --set manager.machineMetricsPort=10258

echo "== kubectl apply --dry-run=server on a fresh sandbox"
cargo build --quiet -p mcm-sandbox --bin mcm-sandbox
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
sandbox_bin="$target_dir/debug/mcm-sandbox"
[[ -x $sandbox_bin ]] || fail "no sandbox binary at $sandbox_bin"
export KUBECONFIG="$tmp/kubeconfig"
"$sandbox_bin" serve --port 0 --kubeconfig "$KUBECONFIG" >"$tmp/sandbox.log" 2>&1 &
sandbox_pid=$!
pids+=("$sandbox_pid")
for _ in $(seq 1 100); do
	if [[ -s $KUBECONFIG ]] && kubectl get --raw /readyz >/dev/null 2>&1; then
		break
	fi
	kill -0 "$sandbox_pid" 2>/dev/null || {
		cat "$tmp/sandbox.log" >&2
		fail "the sandbox exited"
	}
	sleep 0.2
done
kubectl get --raw /readyz >/dev/null || fail "the sandbox did not become ready"

# Applies every variant with --dry-run=server to the cluster of $KUBECONFIG; $1 names it.
dry_run_variants() {
	local server=$1 ns variant expected accepted
	for ns in "$namespace" shoot--dev--ci kube-system; do
		kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
	done
	kubectl apply -f "$chart/ci/stand-in-crds/" >/dev/null
	kubectl wait --for=condition=Established --timeout=30s \
		crd/certificates.cert-manager.io crd/issuers.cert-manager.io crd/clusterissuers.cert-manager.io \
		crd/servicemonitors.monitoring.coreos.com crd/prometheusrules.monitoring.coreos.com \
		crd/verticalpodautoscalers.autoscaling.k8s.io >/dev/null
	total=0
	for variant in "${variants[@]}"; do
		expected=$(grep -c '^kind:' "$tmp/$variant.yaml")
		if ! kubectl apply --dry-run=server -f "$tmp/$variant.yaml" >"$tmp/apply.log" 2>&1; then
			cat "$tmp/apply.log" >&2
			fail "$server refused objects of $variant"
		fi
		accepted=$(grep -c '(server dry run)$' "$tmp/apply.log" || true)
		if [[ $accepted != "$expected" ]]; then
			cat "$tmp/apply.log" >&2
			fail "$variant: $accepted of $expected objects accepted by $server"
		fi
		if grep -qi 'warning' "$tmp/apply.log"; then
			grep -i 'warning' "$tmp/apply.log" >&2
			fail "$variant: $server warned (unknown or dropped fields)"
		fi
		echo "dry-run ok on $server: $variant ($accepted objects)"
		total=$((total + accepted))
	done
}
dry_run_variants "the sandbox"

# The same on a real kube-apiserver (docs/testing.md#the-real-control-plane), where Go can build it.
if command -v go >/dev/null; then
	echo "== kubectl apply --dry-run=server on kube-apiserver"
	scripts/control-plane.sh build
	scripts/control-plane.sh start "$tmp/control-plane"
	sandbox_kubeconfig=$KUBECONFIG
	export KUBECONFIG="$tmp/control-plane/admin.kubeconfig"
	dry_run_variants kube-apiserver
	kube_total=$total
	export KUBECONFIG=$sandbox_kubeconfig
	scripts/control-plane.sh stop "$tmp/control-plane" >/dev/null
	rm -rf "$tmp/control-plane"
else
	[[ ${CI:-} == true ]] && fail "go is not on PATH: the dry-run on kube-apiserver cannot run (a failure under CI=true)"
	echo "!!! SKIPPED: the dry-run on kube-apiserver (go is not on PATH)" >&2
	kube_total=0
fi

echo "== the Gardener shape (objects as the sandbox returns them)"
for variant in default gardener; do
	kubectl apply --dry-run=server -o json -f "$tmp/$variant.yaml" >"$tmp/$variant.json" ||
		fail "$variant: no JSON from the sandbox"
done
# Facts from Gardener's deployment of the Go machine-controller-manager
# (docs/behaviour.md#gardener-deployment), written out here, not taken from the
# chart: what the preset must render and what the cluster-autoscaler needs by default.
python3 - "$tmp/default.json" "$tmp/gardener.json" "$namespace" <<'PY' || fail "the Gardener shape is not as promised (see above)"
import itertools
import json
import sys

default_path, gardener_path, namespace = sys.argv[1:]
problems = []


def objects(path):
    document = json.load(open(path))
    items = document["items"] if document.get("kind") == "List" else [document]
    return {(o["kind"], o["metadata"]["name"]): o for o in items}


def expect(what, got, wanted):
    if got != wanted:
        problems.append(f"{what}: expected {wanted!r}, got {got!r}")


def container(deployment, name):
    found = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return found[0] if found else {}


def ports(entries):
    return {p["name"]: p.get("containerPort", p.get("port")) for p in entries or []}


# Default values: the cluster-autoscaler finds Deployment machine-controller-manager.
default = objects(default_path)
if ("Deployment", "machine-controller-manager") not in default:
    problems.append("default: no Deployment machine-controller-manager (the cluster-autoscaler needs it)")

gardener = objects(gardener_path)
for kind in ("Deployment", "ServiceAccount", "Service", "PodDisruptionBudget"):
    if (kind, "machine-controller-manager") not in gardener:
        problems.append(f"gardener: no {kind} machine-controller-manager")
for kind, _ in gardener:
    if kind in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        problems.append(f"gardener: renders a {kind} (gardenlet and Gardener own those)")

deployment = gardener.get(("Deployment", "machine-controller-manager"), {})
pod = deployment.get("spec", {}).get("template", {}).get("spec", {})
expect("gardener: priorityClassName", pod.get("priorityClassName"), "gardener-system-300")
expect("gardener: serviceAccountName", pod.get("serviceAccountName"), "machine-controller-manager")
manager = container(deployment, "machine-controller-manager")
expect("gardener: manager command", manager.get("command"), ["./machine-controller-manager"])
target = "/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig/kubeconfig"
expect("gardener: manager args", manager.get("args"), [
    "--control-kubeconfig=inClusterConfig", "--machine-safety-overshooting-period=1m",
    f"--namespace={namespace}", "--port=10258", "--safety-up=2", "--safety-down=1",
    f"--target-kubeconfig={target}", "--concurrent-syncs=30", "--kube-api-qps=150",
    "--kube-api-burst=200", "--v=3",
])
expect("gardener: manager ports", ports(manager.get("ports")), {"metrics": 10258})
expect("gardener: manager liveness probe",
       manager.get("livenessProbe", {}).get("httpGet", {}).get("path"), "/healthz")
sidecar = container(deployment, "machine-controller-manager-provider-aws")
expect("gardener: sidecar command", sidecar.get("command"), ["./machine-controller"])
expect("gardener: sidecar ports", ports(sidecar.get("ports")), {"providermetrics": 10259})
if "--port=10259" not in sidecar.get("args", []):
    problems.append("gardener: the sidecar machine-controller does not serve on --port=10259")
service = gardener.get(("Service", "machine-controller-manager"), {})
expect("gardener: Service ports", ports(service.get("spec", {}).get("ports")),
       {"metrics": 10258, "providermetrics": 10259})
vpas = [o for (kind, _), o in gardener.items() if kind == "VerticalPodAutoscaler"]
expect("gardener: VPA targets", [v["spec"]["targetRef"]["name"] for v in vpas], ["machine-controller-manager"])
expect("gardener: VPA controlledValues",
       {p.get("controlledValues") for v in vpas for p in v["spec"]["resourcePolicy"]["containerPolicies"]},
       {"RequestsOnly"})
pdb = gardener.get(("PodDisruptionBudget", "machine-controller-manager"), {})
expect("gardener: PDB maxUnavailable", pdb.get("spec", {}).get("maxUnavailable"), 1)


# Gardener's Role in the shoot namespace, as single permissions (group, resource, verb, name).
def expand(groups, resources, verbs, names=("",)):
    return set(itertools.product(groups, resources, verbs, names))


all_verbs = ["create", "get", "list", "patch", "update", "watch", "delete", "deletecollection"]
wanted = (
    expand(["machine.sapcloud.io"], [
        f"{kind}{sub}" for kind in ("machineclasses", "machinedeployments", "machines", "machinesets")
        for sub in ("", "/status")], all_verbs)
    | expand([""], ["secrets"], all_verbs)
    | expand(["", "events.k8s.io"], ["events"], ["get", "list", "create", "patch", "update"])
    | expand(["coordination.k8s.io"], ["leases"], ["create"])
    | expand(["coordination.k8s.io"], ["leases"], ["get", "watch", "update"],
             ["machine-controller", "machine-controller-manager"])
)
roles = [o for (kind, _), o in gardener.items() if kind == "Role"]
bindings = [o for (kind, _), o in gardener.items() if kind == "RoleBinding"
            and any(s.get("name") == "machine-controller-manager" for s in o.get("subjects", []))]
bound = {b["roleRef"]["name"] for b in bindings}
got = set()
for role in roles:
    if role["metadata"]["name"] in bound:
        for rule in role.get("rules", []):
            got |= expand(rule.get("apiGroups", []), rule.get("resources", []), rule.get("verbs", []),
                          rule.get("resourceNames") or [""])
for permission in sorted(wanted - got):
    problems.append(f"gardener: the Role lacks {permission}")
for permission in sorted(got - wanted):
    problems.append(f"gardener: the Role grants more than Gardener's: {permission}")

for problem in problems:
    print(problem, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
echo "gardener shape ok: names, exact command and args, ports 10258/10259, Role rule for rule, VPA, PDB"

echo "== the binaries accept what the chart renders"
cargo build --quiet -p mcm-controller -p mcm-webhook -p mcm-provider-virtual --bins
bin="$target_dir/debug"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# The args of one container in a rendered variant, one per line.
container_args() {
	awk -v name="$2" '$0 ~ "- name: " name "$" {f=1} f&&/args:/{a=1;next} a&&/^ *- /{sub(/^ *- /,""); gsub(/^"|"$/,""); print; next} a{exit}' "$tmp/$1.yaml"
}
# Starts a binary with the rendered args of a container, where each given --flag=value replaces
# the value of that rendered flag (local addresses, kubeconfigs, paths); every given flag must be
# among the rendered ones. A given +--flag=value is a local-only addition for a port the chart
# leaves at the binary's default (which may be taken on a shared machine): appended when the
# binary's --help lists the flag. Waits until http://127.0.0.1:$port/healthz answers.
start_rendered() {
	local variant=$1 container=$2 binary=$3 port=$4
	shift 4
	local rendered=() args=() extra=() replacing=() arg flag used=0
	for flag in "$@"; do
		if [[ $flag == +* ]]; then
			flag=${flag#+}
			if "$bin/$binary" --help 2>/dev/null | grep -q -- "${flag%%=*}[ =]"; then
				extra+=("$flag")
			fi
		else
			replacing+=("$flag")
		fi
	done
	mapfile -t rendered < <(container_args "$variant" "$container")
	[[ ${#rendered[@]} -gt 3 ]] || fail "$variant: found no args of container $container"
	for arg in "${rendered[@]}"; do
		for flag in "${replacing[@]}"; do
			if [[ ${arg%%=*} == "${flag%%=*}" ]]; then
				arg=$flag
				used=$((used + 1))
			fi
		done
		args+=("$arg")
	done
	[[ $used == "${#replacing[@]}" ]] || fail "$variant/$container: the chart renders only $used of the flags ${replacing[*]}"
	args+=("${extra[@]}")
	"$bin/$binary" "${args[@]}" >"$tmp/$binary-$variant.log" 2>&1 &
	local pid=$!
	pids+=("$pid")
	for _ in $(seq 1 100); do
		if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
			echo "started: $binary with the ${#rendered[@]} rendered args of $variant/$container (${#replacing[@]} localised, ${#extra[@]} added)"
			return
		fi
		kill -0 "$pid" 2>/dev/null || {
			cat "$tmp/$binary-$variant.log" >&2
			fail "$binary exited with the rendered args of $variant/$container"
		}
		sleep 0.2
	done
	fail "$binary did not become healthy on port $port"
}
ready() { [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz") == 200 ]]; }

port=$(free_port)
start_rendered default machine-controller-manager machine-controller-manager "$port" \
	--control-kubeconfig="$KUBECONFIG" --target-kubeconfig="$KUBECONFIG" --port="$port" \
	--driver-endpoint="unix://$tmp/driver.sock" +--machine-metrics-port="$(free_port)"
# The Gardener preset's manager: Gardener's exact args (without --driver-endpoint).
port=$(free_port)
start_rendered gardener machine-controller-manager machine-controller-manager "$port" \
	--control-kubeconfig="$KUBECONFIG" --target-kubeconfig="$KUBECONFIG" --port="$port"
port=$(free_port)
start_rendered machine-controller machine-controller-manager machine-controller-manager "$port" \
	--control-kubeconfig="$KUBECONFIG" --target-kubeconfig="$KUBECONFIG" --port="$port"
port=$(free_port)
start_rendered default provider-virtual provider-virtual "$port" --endpoint="unix://$tmp/driver.sock" \
	--state-file="$tmp/state.json" --metrics-address="127.0.0.1:$port" --target-kubeconfig="$KUBECONFIG"
port=$(free_port)
start_rendered default machine-webhook machine-webhook "$port" --bind-address=127.0.0.1:0 \
	--admin-address="127.0.0.1:$port" --tls-cert-file="$tmp/missing.crt" --tls-private-key-file="$tmp/missing.key"
! ready "$port" || fail "the file-mode webhook is ready without a certificate"

# Self-managed mode with conversion: apply the variant for real, then the webhook must fill in
# every caBundle the chart left out.
kubectl apply -f "$tmp/conversion-self-managed.yaml" >/dev/null
port=$(free_port)
start_rendered conversion-self-managed machine-webhook machine-webhook "$port" \
	--bind-address=127.0.0.1:0 --admin-address="127.0.0.1:$port" --cert-reload-seconds=1
bundles() {
	{
		kubectl get mutatingwebhookconfiguration,validatingwebhookconfiguration -l app.kubernetes.io/instance="$release" \
			-o jsonpath='{range .items[*].webhooks[*]}{.name}={.clientConfig.caBundle}{"\n"}{end}'
		kubectl get crd -l app.kubernetes.io/instance="$release" \
			-o jsonpath='{range .items[*]}{.metadata.name}={.spec.conversion.webhook.clientConfig.caBundle}{"\n"}{end}'
	} | grep -c '=LS0t' || true
}
for _ in $(seq 1 100); do
	[[ $(bundles) == 12 ]] && ready "$port" && break
	sleep 0.2
done
[[ $(bundles) == 12 ]] || fail "self-managed webhook: $(bundles) of 12 caBundles injected"
ready "$port" || fail "self-managed webhook not ready"
echo "self-managed webhook: 12 of 12 caBundles injected (8 webhooks, 4 CRDs), ready"

echo "chart-check: ${#variants[@]} value sets, $total objects accepted by the sandbox and $kube_total by kube-apiserver, binaries agree with the chart"
