#!/usr/bin/env bash
# Pure plans (docs/architecture.md#pure-plans): every controller's plan.rs is pure decision logic.
# It must not import async runtimes, API clients, gRPC or HTTP stacks, nor read the clock: time is
# a parameter. The check covers plan.rs, plan_*.rs (their tests) and every file under a plan/ folder.
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden='(\btokio\b|kube::(Client|Api\b|api::Api|runtime)|kube_client|\btonic\b|\bhyper\b|\breqwest\b|async fn|\.await|SystemTime::now|Instant::now|Timestamp::now|Utc::now|thread_rng|rand::)'
status=0
count=0
while IFS= read -r -d '' file; do
	count=$((count + 1))
	if grep -nE "$forbidden" "$file" | grep -vE '^\s*[0-9]+:\s*//' ; then
		echo "error: $file is a plan module and must stay pure (no I/O, no async, no clock, no randomness)" >&2
		status=1
	fi
done < <(find . -path ./target -prune -o -type f \( -name plan.rs -o -name 'plan_*.rs' -o -path '*/plan/*.rs' \) -print0)
echo "plan.rs purity: $count file(s) checked"
exit $status
