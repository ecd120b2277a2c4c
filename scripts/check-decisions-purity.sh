#!/usr/bin/env bash
# The decisions crate (`decisions/`, mcm-decisions) is pure: snapshot + settings + now -> actions
# (docs/architecture.md#pure-plans). Its Cargo.toml is the first guard: what it does not depend on, it cannot
# call. This script checks what the compiler alone cannot:
#  1. the crate builds on its own, so a feature another member switches on (workspace feature
#     unification) cannot have hidden a missing dependency;
#  2. its normal dependency tree holds no async runtime, API client, gRPC or HTTP stack, TLS or
#     randomness;
#  3. its non-test code reads no clock, environment, file system, network or process, starts no
#     thread and logs nothing (the shells log what a decision led to). Test code is found by
#     place: a file's `#[cfg(test)]` tail, files named tests.rs, and everything under a tests/
#     or upstream/ folder (declared as `#[cfg(test)]` modules).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0

cargo check -q -p mcm-decisions --lib

forbidden_crates='^(tokio|mio|kube-client|kube-runtime|tonic|prost|hyper|hyper-util|h2|axum|tower|reqwest|rustls|rand|getrandom|tracing)$'
found=$(cargo tree -q -p mcm-decisions -e normal --prefix none --format '{p}' \
	| awk '{print $1}' | sort -u | grep -E "$forbidden_crates" || true)
if [ -n "$found" ]; then
	echo "error: mcm-decisions depends on $(echo $found); see: cargo tree -p mcm-decisions -e normal -i <crate>" >&2
	status=1
fi

forbidden_code='(SystemTime::now|Instant::now|Timestamp::now|Zoned::now|std::env|std::fs|std::net|std::process|std::thread|\btracing::|\blog::|println!|eprintln!|dbg!|thread_rng|\brand::)'
count=0
while IFS= read -r -d '' file; do
	count=$((count + 1))
	# Test code may print; the check stops at a file's test module.
	if awk '/^#\[cfg\(test\)\]/ { exit } { print FILENAME ":" FNR ": " $0 }' "$file" \
		| grep -E "$forbidden_code" | grep -vE '^[^:]+:[0-9]+: *//'; then
		echo "error: $file is decision code: no clock, environment, I/O, threads or logging" >&2
		status=1
	fi
done < <(find decisions/src -type f -name '*.rs' ! -name tests.rs ! -path '*/tests/*' \
	! -path '*/upstream/*' -print0)
[ $status -eq 0 ] && echo "decisions purity: $count file(s) checked, no I/O dependency in the tree"
exit $status
