#!/usr/bin/env bash
# `make bench-upstream`: the rollout benchmark (controller/examples/deployment_bench.rs) once
# with our manager and provider-virtual and once with upstream's Go pair (its
# machine-controller-manager and its machine-controller around the in-memory driver, built by
# scripts/upstream-mcm.sh), each on fresh clusters, for a number of rounds; then the medians
# side by side as `ours | upstream | ratio` and the targets met or missed
# (docs/performance.md#against-upstream). Figures only, no timing asserts: it exits non-zero
# only when a run failed or our pair broke maxSurge or maxUnavailable (upstream's overshoot is
# a figure of the table).
#
#   BENCH_MACHINES=100          N (default 100)
#   BENCH_ROUNDS=3              rounds; each runs both pairs, ours first (default 3)
#   BENCH_API=sandbox|kube      the in-process sandboxes (default), or two control planes of
#                               scripts/control-plane.sh (kube-apiserver, etcd,
#                               kube-controller-manager) started fresh for every run
#   BENCH_ARGS="..."            more flags for every run (default: --steady-secs 60
#                               --restart-window-secs 30 --roll-limit-secs 900)
#   BENCH_OUT=DIR               where the summaries and logs go (default target/bench-upstream/<time>)
#   scripts/bench-upstream.sh --compare DIR   only print the table of an earlier run's summaries
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
start=$(date +%s)
step() { echo "bench-upstream: $1 ($(($(date +%s) - start))s)"; }

compare() {
	python3 - "$1" <<'PY'
import glob, json, os, statistics, sys

out = sys.argv[1]
runs = {"ours": [], "upstream": []}
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    with open(path) as f:
        s = json.load(f)
    runs[s["pair"]].append(s)
if not runs["ours"] or not runs["upstream"]:
    sys.exit(f"bench-upstream: {out} lacks a summary of each pair")
first = runs["ours"][0]
n, surge, api = first["n"], first["surge"], first["api"]


def get(s, path):
    for key in path.split("."):
        if s is None:
            return None
        s = s.get(key)
    return s


def med(pair, fn):
    values = [v for v in (fn(s) for s in runs[pair]) if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=2):
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if float(v).is_integer() and abs(v) >= 100:
        return f"{int(v):,}"
    return f"{v:.{digits}f}"


def ratio(a, b):
    if a is None or b is None:
        return "—"
    if b == 0:
        return "0 vs 0" if a == 0 else "—"
    return f"{a / b:.2f}"


def per(field, phase, key):
    def fn(s):
        p = s.get(phase)
        if p is None:
            return None
        d = p.get("replaced") if key == "replaced" else n
        return p[field] / d if d else None
    return fn


def roll_rate(s):
    r = s.get("roll")
    if r is None or r["seconds"] <= 0:
        return None
    return r["replaced"] / (r["seconds"] / 60)


def peak_mib(s):
    phases = [s["scale_up"], s.get("roll"), s["delete"]]
    peaks = [p["manager_peak_mib"] for p in phases if p] + [s["restart"]["rss_peak_mib"]]
    return max(peaks)


def peak_all_mib(s):
    phases = [s["scale_up"], s.get("roll"), s["delete"]]
    return max(p["manager_peak_mib"] + p["provider_peak_mib"] for p in phases if p)


rows = []


def row(name, fn, digits=2, lower_is_better=True):
    a, b = med("ours", fn), med("upstream", fn)
    rows.append((name, fmt(a, digits), fmt(b, digits), ratio(a, b)))
    return a, b


def spread(pair, fn):
    values = [fn(s) for s in runs[pair]]
    return ", ".join(fmt(v) for v in values)


print()
print(f"Against upstream: N = {n}, maxSurge {surge}, maxUnavailable 0, on the {api}; "
      f"medians of {len(runs['ours'])} (ours) and {len(runs['upstream'])} (upstream) runs; "
      f"ratio = ours / upstream")
print("(\"manager\" = our manager | upstream's machine-controller-manager + machine-controller, "
      "whose machine-controller also runs the in-memory driver and its simulated kubelets; "
      "\"+ provider\" adds provider-virtual to ours)")
print()
scale = row("scale 0 → N, seconds", lambda s: s["scale_up"]["seconds"])
roll_complete = {p: all(get(s, "roll.completed") for s in runs[p]) for p in runs}
roll = row("rollout, seconds" + ("" if all(roll_complete.values()) else " (time-boxed: see rate)"),
           lambda s: get(s, "roll.seconds"))
rate = row("rollout, machines replaced per minute", roll_rate, 1)
row("delete, seconds", lambda s: s["delete"]["seconds"])
row("scale-up, manager CPU s", lambda s: s["scale_up"]["manager_cpu_seconds"])
row("scale-up, manager + provider CPU s",
    lambda s: s["scale_up"]["manager_cpu_seconds"] + s["scale_up"]["provider_cpu_seconds"])
row("rollout, manager CPU s", lambda s: get(s, "roll.manager_cpu_seconds"))
row("rollout, manager + provider CPU s",
    lambda s: s["roll"]["manager_cpu_seconds"] + s["roll"]["provider_cpu_seconds"] if s.get("roll") else None)
row("delete, manager CPU s", lambda s: s["delete"]["manager_cpu_seconds"])
row("scale-up, control requests per machine", per("control_requests", "scale_up", "n"))
row("scale-up, control writes per machine", per("control_writes", "scale_up", "n"))
row("scale-up, target writes per machine", per("target_writes", "scale_up", "n"))
writes_roll = row("rollout, control writes per replaced machine", per("control_writes", "roll", "replaced"))
row("rollout, target writes per replaced machine", per("target_writes", "roll", "replaced"))
row("rollout, control requests per replaced machine", per("control_requests", "roll", "replaced"))
row("delete, control writes per machine", per("control_writes", "delete", "n"))
row("delete, target writes per machine", per("target_writes", "delete", "n"))
row("steady state, control requests/min", lambda s: get(s, "steady.control_per_min"))
row("steady state, target requests/min", lambda s: get(s, "steady.target_per_min"))
row("steady state, writes", lambda s: get(s, "steady.writes"))
row("steady state, Lease requests/min", lambda s: get(s, "steady.lease_per_min"))
row("steady state, manager CPU s/min", lambda s: get(s, "steady.cpu_per_min"), 3)
row("restart: leading after, s", lambda s: s["restart"]["leading_after"])
row("restart: every object reconciled once after, s", lambda s: s["restart"]["reconciled_after"])
restart_writes = row("restart: writes in the window (Leases apart)", lambda s: s["restart"]["writes"])
row("restart: requests in the window (Leases apart)", lambda s: s["restart"]["requests"])
row("manager RSS idle, MiB", lambda s: s["manager_idle_mib"], 1)
row("manager peak RSS, scale-up, MiB", lambda s: s["scale_up"]["manager_peak_mib"], 1)
row("manager RSS settled after scale-up, MiB", lambda s: s["scale_up"]["manager_settled_mib"], 1)
row("manager peak RSS, restart window, MiB", lambda s: s["restart"]["rss_peak_mib"], 1)
row("manager peak RSS, rollout, MiB", lambda s: get(s, "roll.manager_peak_mib"), 1)
row("manager peak RSS, delete, MiB", lambda s: s["delete"]["manager_peak_mib"], 1)
memory = row("manager peak RSS, all phases, MiB", peak_mib, 1)
row("manager + provider peak RSS, all phases, MiB", peak_all_mib, 1)
width = max(len(r[0]) for r in rows)
print(f"| {'figure':<{width}} | ours | upstream | ratio |")
print(f"|{'-' * (width + 2)}|---|---|---|")
for name, a, b, r in rows:
    print(f"| {name:<{width}} | {a} | {b} | {r} |")

print()
print(f"Bounds (worst run): most Machines at once against N + maxSurge = {n + surge}; "
      f"fewest Running in the rollout against N − maxUnavailable = {n}")
for pair in runs:
    most = max(max(p["max_machines"] for p in (s["scale_up"], s.get("roll"), s["delete"]) if p) for s in runs[pair])
    with_fewest = [s for s in runs[pair] if get(s, "roll.min_running") is not None]
    worst = min(with_fewest, key=lambda s: get(s, "roll.min_running")) if with_fewest else None
    # What the others were doing at the fewest: Unknown ones lost their Node on their own,
    # terminating ones were taken away (older summaries lack the breakdown).
    missing = get(worst, "roll.min_running_missing") if worst else None
    why = f" ({', '.join(f'{c} {k}' for k, c in sorted(missing.items()))} then)" if missing else ""
    taken = [get(s, "roll.taken_below_floor") for s in runs[pair] if get(s, "roll.taken_below_floor") is not None]
    takes = f"; Running machines taken away below it: {max(taken)}" if taken else ""
    print(f"  {pair:<9} most {most} / {n + surge}{'  OVER by ' + str(most - n - surge) if most > n + surge else ''}; "
          f"fewest Running {get(worst, 'roll.min_running') if worst else '—'} / {n}{why}{takes}")

print()
print("Writes by verb and resource (median per machine; rollout per replaced machine), controllers only:")
for phase, key, label in [("scale_up", "n", "scale 0 → N"), ("roll", "replaced", "rollout"), ("delete", "n", "delete")]:
    for cluster in ["control", "target"]:
        keys = sorted({k for p in runs for s in runs[p] if s.get(phase) for k in s[phase][f"{cluster}_writes_by"]})
        if not keys:
            continue
        print(f"  {label}, {cluster}:")
        for k in keys:
            def fn(s, k=k):
                p = s.get(phase)
                if not p:
                    return None
                d = p["replaced"] if key == "replaced" else n
                return p[f"{cluster}_writes_by"].get(k, 0) / d if d else None
            a, b = med("ours", fn), med("upstream", fn)
            print(f"    {k:<34} {fmt(a):>8} {fmt(b):>8}")
for pair in runs:
    by = {}
    for s in runs[pair]:
        for k, v in s["restart"]["writes_by"].items():
            by.setdefault(k, []).append(v)
    print(f"  restart, {pair}: " + (", ".join(f"{k} {statistics.median(v):g}" for k, v in sorted(by.items())) or "no writes"))

print()
print("Spread of the runs:")
for pair in runs:
    print(f"  {pair:<9} scale-up s: {spread(pair, lambda s: s['scale_up']['seconds'])}; "
          f"rollout s: {spread(pair, lambda s: get(s, 'roll.seconds'))} "
          f"(completed: {', '.join(str(get(s, 'roll.completed')) for s in runs[pair])}); "
          f"peak MiB: {spread(pair, peak_mib)}")

print()
print("Targets (ratios of the medians above):")


def target(name, ok, detail):
    print(f"  {'met   ' if ok else 'MISSED'} {name}: {detail}")


if memory[0] is not None and memory[1]:
    target("memory ≤ 1/3 of upstream's pair", memory[0] <= memory[1] / 3,
           f"{memory[0]:.1f} vs {memory[1]:.1f} MiB, ratio {memory[0] / memory[1]:.2f}")
if writes_roll[0] is not None and writes_roll[1]:
    target("control writes per replaced machine ≤ 1/2", writes_roll[0] <= writes_roll[1] / 2,
           f"{writes_roll[0]:.2f} vs {writes_roll[1]:.2f}, ratio {writes_roll[0] / writes_roll[1]:.2f}")
if scale[0] is not None and scale[1]:
    target("scale-up wall time ≤ 1/2", scale[0] <= scale[1] / 2,
           f"{scale[0]:.1f} vs {scale[1]:.1f} s, ratio {scale[0] / scale[1]:.2f}")
if rate[0] and rate[1]:
    # Equal work per machine: the wall time ratio of a whole rollout is the inverse of the rates'.
    target("rollout wall time ≤ 1/2", rate[1] / rate[0] <= 0.5,
           f"{rate[0]:.1f} vs {rate[1]:.1f} machines replaced per minute, time ratio {rate[1] / rate[0]:.2f}"
           + ("" if all(roll_complete.values()) else " (upstream's rollout time-boxed: from the rates)"))
if restart_writes[0] is not None:
    target("restart writes 0", restart_writes[0] == 0,
           f"ours {fmt(restart_writes[0])}, upstream {fmt(restart_writes[1])}")
for pair in runs:
    most = max(max(p["max_machines"] for p in (s["scale_up"], s.get("roll"), s["delete"]) if p) for s in runs[pair])
    target(f"surge never above N + maxSurge ({pair})", most <= n + surge, f"most {most} / {n + surge}")
PY
}

if [ "${1:-}" = "--compare" ]; then
	compare "$2"
	exit 0
fi

machines=${BENCH_MACHINES:-100}
rounds=${BENCH_ROUNDS:-3}
api=${BENCH_API:-sandbox}
args=${BENCH_ARGS:---steady-secs 60 --restart-window-secs 30 --roll-limit-secs 900}
out=${BENCH_OUT:-$root/target/bench-upstream/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"

step "building our manager, provider-virtual and the benchmark (release)"
cargo build --release --quiet -p mcm-controller -p mcm-provider-virtual \
	--bin machine-controller-manager --bin provider-virtual --example deployment_bench
step "building upstream's pair"
scripts/upstream-mcm.sh build
if [ "$api" = kube ]; then
	step "building the control plane (cached)"
	scripts/control-plane.sh build
fi
bench="$root/target/release/examples/deployment_bench"

dirs=()
cleanup() {
	for d in "${dirs[@]}"; do
		scripts/control-plane.sh stop "$d" >/dev/null 2>&1 || true
	done
}
trap cleanup EXIT

status=0
for round in $(seq 1 "$rounds"); do
	for pair in ours upstream; do
		name="$pair-$round"
		step "round $round of $rounds: $pair, N = $machines, on the $api"
		extra=()
		if [ "$api" = kube ]; then
			control="$out/$name-control" target="$out/$name-target"
			dirs=("$control" "$target")
			scripts/control-plane.sh start "$control" >/dev/null
			scripts/control-plane.sh start "$target" >/dev/null
			extra=(--api kube --control-dir "$control" --target-dir "$target")
		fi
		# shellcheck disable=SC2086 # args is a list of flags
		rc=0
		BENCH_KEEP_LOGS=${BENCH_KEEP_LOGS:-} "$bench" --pair "$pair" --machines "$machines" $args "${extra[@]}" \
			--summary "$out/$name.json" >"$out/$name.txt" 2> >(tee "$out/$name.progress" >&2) || rc=$?
		if [ "$rc" = 2 ] && [ "$pair" = upstream ]; then
			# Exit 2 is a broken maxSurge or maxUnavailable bound: a figure of upstream's, shown
			# in the table, not a failure of this benchmark.
			echo "bench-upstream: upstream broke maxSurge or maxUnavailable in round $round (see the bounds below)" >&2
		elif [ "$rc" != 0 ]; then
			echo "bench-upstream: the $pair run of round $round failed (exit $rc); its output is $out/$name.txt" >&2
			status=1
		fi
		if [ "$api" = kube ]; then
			cleanup
			# The control planes' data and logs are large: keep only the audit logs' size.
			for d in "${dirs[@]}"; do
				du -sh "$d/logs/audit.log" 2>/dev/null | sed "s|^|bench-upstream: audit log |" || true
				rm -rf "$d"
			done
			dirs=()
		fi
	done
done
step "the runs' full output is in $out"
compare "$out"
step "done"
exit "$status"
