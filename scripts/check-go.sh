#!/usr/bin/env bash
# The Go modules of the project (tools/control-plane, …): gofmt-clean, `go vet`-clean and their
# go.mod/go.sum tidy (nothing missing, nothing unused). Skipped loudly without Go; a failure under
# CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v go >/dev/null; then
	echo "!!! SKIPPED: the Go checks (go is not on PATH)" >&2
	[ "${CI:-}" = true ] && exit 1
	exit 0
fi
status=0
while IFS= read -r mod; do
	dir=$(dirname "$mod")
	unformatted=$(gofmt -l "$dir")
	if [ -n "$unformatted" ]; then
		echo "error: gofmt would change: $unformatted" >&2
		status=1
	fi
	# A module of pinned programs only (build tag `tools`) has no package to vet.
	if (cd "$dir" && go list ./... 2>/dev/null | grep -q .); then
		(cd "$dir" && go vet ./...) || status=1
	fi
	if ! (cd "$dir" && go mod tidy -diff >/dev/null 2>&1); then
		echo "error: $dir: go.mod/go.sum are not tidy (run 'go mod tidy' there)" >&2
		(cd "$dir" && go mod tidy -diff) >&2 || true
		status=1
	fi
done < <(git ls-files '*go.mod')
exit "$status"
