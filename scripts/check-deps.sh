#!/usr/bin/env bash
# Dependency rules (docs/architecture.md#dependency-rules): TLS through ring only, exactly one
# version each of kube and k8s-openapi in the graph, and no gRPC stack in provider-proto without `grpc`.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
if cargo tree --workspace -e normal,build -i aws-lc-rs >/dev/null 2>&1; then
	echo "error: aws-lc-rs is in the dependency graph; use ring only:" >&2
	cargo tree --workspace -e normal,build -i aws-lc-rs >&2 || true
	status=1
fi
for crate in kube k8s-openapi; do
	versions=$(cargo tree --workspace -e normal,build --prefix none --format '{p}' 2>/dev/null \
		| awk -v c="$crate" '$1 == c { print $2 }' | sort -u)
	n=$(printf '%s\n' "$versions" | grep -c . || true)
	if [ "$n" -gt 1 ]; then
		echo "error: $crate appears in $n versions: $(echo $versions)" >&2
		status=1
	fi
done
# The plain driver contract (provider-proto without its `grpc` feature, used by pure decision code)
# pulls no gRPC or async runtime.
wire=$(cargo tree -p mcm-provider-proto --no-default-features -e normal --prefix none --format '{p}' 2>/dev/null \
	| awk '{ print $1 }' | grep -E '^(tokio|tonic|hyper|prost|tower)' | sort -u || true)
if [ -n "$wire" ]; then
	echo "error: mcm-provider-proto without the grpc feature depends on: $(echo $wire)" >&2
	status=1
fi
[ $status -eq 0 ] && echo "dependency rules: ring only, one kube and one k8s-openapi, a plain provider-proto without grpc"
exit $status
