#!/usr/bin/env bash
# The suites on the real control plane (docs/testing.md#the-real-control-plane): builds etcd,
# kube-apiserver and kube-controller-manager from Go modules (cached), starts them in a temporary
# folder, runs the sandbox conformance suite against them, stops them, then runs the e2e suite on
# control planes of its own (scripts/e2e-kube.sh) and prints what each part took.
# Without Go it prints loudly that it skipped them; under CI=true a skip is a failure.
#   scripts/test-kube.sh                 build, start, run every suite, stop
#   KEEP_CONTROL_PLANE=1 scripts/test-kube.sh    leave the conformance control plane running
#   TEST_KUBE_E2E=0 scripts/test-kube.sh         the conformance suite only
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

banner() { printf '\n%s\n%s\n%s\n' "$(printf '!%.0s' {1..78})" "$1" "$(printf '!%.0s' {1..78})" >&2; }
if ! command -v go >/dev/null; then
	banner "SKIPPED: the real-control-plane suites (go is not on PATH; the control plane is built from Go modules)"
	[ "${CI:-}" = true ] && { echo "test-kube: under CI=true a skipped suite is a failure" >&2; exit 1; }
	exit 0
fi

t0=$(date +%s)
scripts/control-plane.sh build
t_build=$(($(date +%s) - t0))

dir=$(mktemp -d "${TMPDIR:-/tmp}/mcm-control-plane.XXXXXX")
cleanup() {
	if [ "${KEEP_CONTROL_PLANE:-}" = 1 ]; then
		echo "test-kube: control plane left running in $dir (scripts/control-plane.sh stop $dir; rm -rf $dir)" >&2
	else
		scripts/control-plane.sh stop "$dir" >/dev/null 2>&1 || true
		rm -rf "$dir"
	fi
}
trap cleanup EXIT

t1=$(date +%s)
scripts/control-plane.sh start "$dir"
t_start=$(($(date +%s) - t1))
server_version=$(kubectl --kubeconfig "$dir/admin.kubeconfig" version -o json 2>/dev/null |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')
echo "test-kube: kube-apiserver $server_version" >&2
case $server_version in
v1.3[4-9].* | v1.[4-9][0-9].*) ;;
*) echo "test-kube: expected kube-apiserver v1.34 or newer, got '$server_version'" >&2; exit 1 ;;
esac

t2=$(date +%s)
echo "=== sandbox conformance suite on kube-apiserver" >&2
set +e
SANDBOX_CONFORMANCE_KUBECONFIG="$dir/admin.kubeconfig" \
	cargo test -p mcm-sandbox --test conformance -- --nocapture 2>&1 | tee "$dir/conformance.log" |
	grep --line-buffered -E '^test result|SKIPPED|panicked|^test .* FAILED|Compiling|Running'
status=${PIPESTATUS[0]}
set -e
t_conformance=$(($(date +%s) - t2))
if [ "$status" -ne 0 ]; then
	grep -A 6 'panicked at' "$dir/conformance.log" | grep -v '^ *[0-9]*: \|^ *at ' >&2 || true
	echo "test-kube: the conformance suite failed on kube-apiserver (log: $dir/conformance.log; logs of the control plane: $dir/logs)" >&2
	KEEP_CONTROL_PLANE=1
	exit 1
fi

cleanup
trap - EXIT

# The e2e suite starts a control plane of its own per system (scripts/e2e-kube.sh).
t3=$(date +%s)
echo "=== e2e suite on kube-apiserver (make e2e-kube)" >&2
if [ "${TEST_KUBE_E2E:-1}" = 1 ]; then
	scripts/e2e-kube.sh
else
	echo "test-kube: TEST_KUBE_E2E=0: the e2e suite on kube-apiserver is not run" >&2
fi
t_e2e=$(($(date +%s) - t3))

echo "test-kube: build ${t_build}s, start ${t_start}s, conformance ${t_conformance}s, e2e ${t_e2e}s, total $(($(date +%s) - t0))s" >&2
