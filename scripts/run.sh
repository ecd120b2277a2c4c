#!/usr/bin/env bash
# `make run`: the whole system on this machine, as four processes under .run/.
#
#   scripts/run.sh                 start everything, apply examples/, show progress; Ctrl-C stops
#   scripts/run.sh --smoke         start everything, wait until the example machines are Running
#                                  (or --timeout seconds pass), stop everything; exit 0 on success
#   scripts/run.sh --timeout 300   how long --smoke waits (default 180; MCM_RUN_TIMEOUT)
#   scripts/run.sh --no-build      use the binaries of the last dev build as they are
#   scripts/run.sh --v1beta1       also serve machine.sapcloud.io/v1beta1 through the conversion
#                                  webhook (MCM_RUN_V1BETA1=1). Off by default, like the chart's
#                                  conversion.enabled: kubectl picks the highest served version,
#                                  so with v1beta1 served every kubectl command without a version
#                                  (those printed below, in the README and docs/) speaks v1beta1,
#                                  whose fields differ (a v1alpha1 patch such as providerSpec.tags
#                                  is dropped as an unknown field). See docs/user-guide.md.
#
# Processes (logs in .run/logs/<name>.log, pids in .run/<name>.pid):
#   sandbox   mcm-sandbox serve: an embedded Kubernetes API server used as both the control
#             cluster (Machine objects) and the target cluster (Nodes). Never a production
#             control plane; it keeps everything in memory.
#   webhook   machine-webhook in self-managed certificate mode: it issues its own CA and writes
#             the caBundle into the webhook configurations and the CRDs' conversion stanzas, both
#             rendered from the chart (service clientConfig; the sandbox maps the Service
#             default/machine-controller-manager-webhook to 127.0.0.1:<webhook port>).
#
# The sandbox enforces RBAC. The three components run as their own ServiceAccounts bound to the
# chart's RBAC (scripts/sandbox-identities.sh; kubeconfigs in .run/identities/); kubectl uses the
# admin kubeconfig. --smoke fails if any component was refused (403), if kubectl's default
# version is not v1alpha1 (v1beta1 with --v1beta1) or, with --v1beta1, if v1beta1 is not served
# through the conversion webhook.
#   provider  provider-virtual on a Unix socket: simulated VMs whose Nodes register in the sandbox.
#   manager   machine-controller-manager: the controllers.
#
# Ports (override with the environment variables): webhook MCM_RUN_WEBHOOK_PORT (19443), admin
# ports of the webhook MCM_RUN_WEBHOOK_ADMIN_PORT (19260), provider MCM_RUN_PROVIDER_PORT (19259)
# and manager MCM_RUN_MANAGER_PORT (19258). The sandbox picks a free port.
#
# Like a kubelet, a component that exits (the manager does when it loses its leader lease, e.g.
# during an API outage) is restarted with a backoff (1s, doubling to 30s; reset after 60s of
# running), and the screen says so: "manager exited (code N), restarting in Ns". Only the sandbox
# is not restarted: it keeps everything in memory, so everything stops when it exits.
# Ctrl-C (also with the output piped, `make run 2>&1 | tee log`), SIGTERM and SIGHUP stop every
# process: each one runs in its own process group, which is stopped as a whole.
#
# A second run stops the processes of the first (pids in .run/*.pid) and starts from a clean
# .run/: the sandbox keeps no state on disk and the provider's state file is wiped with it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

smoke=false
build=true
v1beta1=false
case ${MCM_RUN_V1BETA1:-} in 1 | true | yes) v1beta1=true ;; esac
timeout=${MCM_RUN_TIMEOUT:-180}
while [ $# -gt 0 ]; do
	case $1 in
	--smoke) smoke=true ;;
	--no-build) build=false ;;
	--v1beta1) v1beta1=true ;;
	--timeout)
		timeout=${2:?--timeout needs a number of seconds}
		shift
		;;
	--timeout=*) timeout=${1#--timeout=} ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "error: unknown argument $1 (try --help)" >&2
		exit 2
		;;
	esac
	shift
done
case $timeout in '' | *[!0-9]*)
	echo "error: --timeout must be a whole number of seconds, got '$timeout'" >&2
	exit 2
	;;
esac

run_dir=$root/.run
logs=$run_dir/logs
kubeconfig=$run_dir/kubeconfig
namespace=default
deployment=worker-a
webhook_port=${MCM_RUN_WEBHOOK_PORT:-19443}
webhook_admin_port=${MCM_RUN_WEBHOOK_ADMIN_PORT:-19260}
provider_port=${MCM_RUN_PROVIDER_PORT:-19259}
manager_port=${MCM_RUN_MANAGER_PORT:-19258}
chart=$root/charts/machine-controller-manager
release=machine-controller-manager
webhook_service=machine-controller-manager-webhook
identities=$run_dir/identities

say() { printf '>>> %s\n' "$*"; }
fail() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

command -v kubectl >/dev/null || fail "kubectl not found on PATH (it is needed to install the CRDs and examples)"
command -v curl >/dev/null || fail "curl not found on PATH (it is needed for the readiness checks)"

# --- stop what a previous run left behind -------------------------------------------------------
# Only processes whose pid file we wrote and whose command line is still one of our binaries are
# stopped, so a recycled pid is never hit.
# Every component leads its own process group (setsid), so the group is signalled: whatever a
# component started goes with it.
signal_group() { # <signal> <pid>
	kill "-$1" -- "-$2" 2>/dev/null || kill "-$1" "$2" 2>/dev/null
}
stop_pid() { # <pid> <name>
	local pid=$1 name=$2
	kill -0 "$pid" 2>/dev/null || return 0
	signal_group TERM "$pid" || return 0
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	echo "warning: $name (pid $pid) did not stop within 10s; killing it" >&2
	signal_group KILL "$pid" || true
}
if [ -d "$run_dir" ]; then
	# The manager first and the API server last, as at Ctrl-C.
	for name in manager provider webhook sandbox; do
		pid_file=$run_dir/$name.pid
		[ -e "$pid_file" ] || continue
		pid=$(cat "$pid_file" 2>/dev/null || true)
		case $pid in '' | *[!0-9]*) continue ;; esac
		if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null |
			grep -qE '(mcm-sandbox|machine-webhook|provider-virtual|machine-controller-manager)'; then
			say "stopping $name of a previous run (pid $pid)"
			stop_pid "$pid" "$name"
		fi
	done
	rm -rf "$run_dir"
fi
mkdir -p "$logs" "$run_dir/provider-virtual"

port_busy() { (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in "$webhook_port" "$webhook_admin_port" "$provider_port" "$manager_port"; do
	if port_busy "$port"; then
		fail "port $port on 127.0.0.1 is in use (set MCM_RUN_*_PORT, see the header of $0)"
	fi
done

# --- build -------------------------------------------------------------------------------------
if $build; then
	say "building (dev profile)"
	# Exactly the packages and binaries the end-to-end tests build (e2e/src/binaries.rs, whose test
	# holds the two lists together): cargo unifies the features of the selected packages only, so
	# the same selection reuses what `make test` built (with --workspace, the features other members
	# enable, such as tokio's process, rebuilt about 30 crates).
	cargo build -p mcm-sandbox --bin mcm-sandbox -p mcm-webhook --bin machine-webhook \
		-p mcm-provider-virtual --bin provider-virtual -p mcm-controller --bin machine-controller-manager \
		-p kubectl-mcm --bin kubectl-mcm
fi
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin=${target_dir:-$root/target}/debug
for b in mcm-sandbox machine-webhook provider-virtual machine-controller-manager; do
	[ -x "$bin/$b" ] || fail "$bin/$b was not built (run without --no-build)"
done

# --- process management ------------------------------------------------------------------------
# Pids are kept in memory, not read back from .run/*.pid: a newer run may have replaced those files.
# (Two indexed arrays rather than an associative one: macOS ships bash 3.2.)
names=()
pid_values=()
# Per component: its command line (quoted, for a restart), the SECONDS it started, the backoff of
# its next restart and when a pending restart is due (empty = running).
commands=()
started_at=()
backoffs=()
restart_due=()
# Plain log files without colour codes (tracing-subscriber honours NO_COLOR).
export NO_COLOR=1
# As the image does (Dockerfile): mimalloc returns freed memory at once.
export MIMALLOC_PURGE_DELAY="${MIMALLOC_PURGE_DELAY:-0}"
# Children run in their own session (setsid) so that Ctrl-C reaches only this script, which then
# stops them in reverse start order: the manager first, the API server last.
start() { # <name> <command...>
	local name=$1
	shift
	# Appended: the log of a restarted component keeps what its previous run wrote.
	if command -v setsid >/dev/null; then
		setsid "$@" >>"$logs/$name.log" 2>&1 </dev/null &
	else
		"$@" >>"$logs/$name.log" 2>&1 </dev/null &
	fi
	local pid=$! i
	echo "$pid" >"$run_dir/$name.pid"
	for i in "${!names[@]}"; do
		if [ "${names[i]}" = "$name" ]; then
			pid_values[i]=$pid
			started_at[i]=$SECONDS
			restart_due[i]=""
			return
		fi
	done
	names+=("$name")
	pid_values+=("$pid")
	commands+=("$(printf '%q ' "$@")")
	started_at+=("$SECONDS")
	backoffs+=(1)
	restart_due+=("")
}
pid_of() {
	local i
	for i in "${!names[@]}"; do
		if [ "${names[i]}" = "$1" ]; then
			echo "${pid_values[i]}"
			return
		fi
	done
}
alive() { kill -0 "$(pid_of "$1")" 2>/dev/null; }

stopping=false
cleanup() {
	local status=$?
	$stopping && return
	stopping=true
	trap - INT TERM HUP
	# With the output piped (`make run | tee log`), Ctrl-C ends the reader too: writing to the
	# closed pipe must not kill this script before it has stopped the children.
	trap '' PIPE
	set +e
	if [ ${#names[@]} -gt 0 ]; then
		say "stopping ${names[*]}"
		local i
		for ((i = ${#names[@]} - 1; i >= 0; i--)); do
			stop_pid "$(pid_of "${names[i]}")" "${names[i]}"
			wait "$(pid_of "${names[i]}")" 2>/dev/null || true
			# Only our own pid file: a newer run may have written its own by now.
			if [ "$(cat "$run_dir/${names[i]}.pid" 2>/dev/null)" = "$(pid_of "${names[i]}")" ]; then
				rm -f "$run_dir/${names[i]}.pid"
			fi
		done
		say "stopped; logs stay in .run/logs/"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'exit 141' PIPE

show_log() { # <name>: the end of a log, for failures
	echo "--- last lines of .run/logs/$1.log ---" >&2
	tail -n 25 "$logs/$1.log" >&2 || true
}

wait_for() { # <name> <seconds> <check command...>
	local name=$1 seconds=$2
	shift 2
	local deadline=$((SECONDS + seconds))
	until "$@" >/dev/null 2>&1; do
		if ! alive "$name"; then
			show_log "$name"
			fail "$name exited during start-up"
		fi
		if [ $SECONDS -ge $deadline ]; then
			show_log "$name"
			fail "$name was not ready within ${seconds}s"
		fi
		sleep 0.2
	done
}
http_ok() { curl -fsS --max-time 2 "$1"; }
k() { kubectl --kubeconfig "$kubeconfig" "$@"; }

# --- sandbox API server ------------------------------------------------------------------------
say "starting the sandbox API server (log: .run/logs/sandbox.log)"
start sandbox "$bin/mcm-sandbox" serve --port 0 --kubeconfig "$kubeconfig" \
	--service "$namespace/$webhook_service=127.0.0.1:$webhook_port"
wait_for sandbox 30 test -s "$kubeconfig"
wait_for sandbox 30 k get --raw /readyz

# The CRDs and the webhook configurations exactly as the chart renders them for this release:
# v1alpha1 only by default (the chart's default), with --v1beta1 also v1beta1 with the conversion
# webhook stanza (conversion.enabled=true).
helm=$("$root/scripts/helm.sh" --path)
"$helm" template "$release" "$chart" --namespace "$namespace" \
	--set fullnameOverride=$release \
	--set webhook.certificates.mode=self-managed \
	--set conversion.enabled=$v1beta1 \
	--set provider.name=virtual \
	-s templates/crds.yaml -s templates/webhook-configurations.yaml >"$run_dir/chart-webhooks.yaml"
say "installing the CRDs and webhook configurations rendered from the chart"
k apply -f "$run_dir/chart-webhooks.yaml" >/dev/null
k wait --for=condition=Established --timeout=30s \
	crd/machines.machine.sapcloud.io crd/machinesets.machine.sapcloud.io \
	crd/machinedeployments.machine.sapcloud.io crd/machineclasses.machine.sapcloud.io >/dev/null

say "creating the components' identities with the chart's RBAC (.run/identities/)"
"$root/scripts/sandbox-identities.sh" "$kubeconfig" "$identities" "$namespace" >/dev/null

# --- webhook -----------------------------------------------------------------------------------
# With v1beta1 the webhook also injects its CA into the CRDs' conversion stanzas (as the chart
# passes --crd only with conversion.enabled).
crd_args=()
if $v1beta1; then
	for plural in machines machinesets machinedeployments machineclasses; do
		crd_args+=(--crd "$plural.machine.sapcloud.io")
	done
fi
# The certificate is issued for the Service's DNS names, which the sandbox uses as TLS server name
# when it calls the Service. failurePolicy Fail: nothing of machine.sapcloud.io is stored unchecked.
say "starting machine-webhook (log: .run/logs/webhook.log)"
start webhook env KUBECONFIG="$identities/webhook.kubeconfig" "$bin/machine-webhook" \
	--cert-mode self-managed \
	--namespace "$namespace" \
	--service-name "$webhook_service" \
	--secret-name "$webhook_service-certs" \
	--lease-name "$webhook_service-certs" \
	--identity machine-webhook-local \
	--mutating-webhook-configuration "$release" \
	--validating-webhook-configuration "$release" \
	${crd_args[@]+"${crd_args[@]}"} \
	--cert-reload-seconds 5 \
	--bind-address "127.0.0.1:$webhook_port" \
	--admin-address "127.0.0.1:$webhook_admin_port"
# Ready once the certificate is issued, which happens after the caBundle was injected.
wait_for webhook 60 http_ok "http://127.0.0.1:$webhook_admin_port/readyz"

# --- provider ----------------------------------------------------------------------------------
socket=$run_dir/driver.sock
if [ ${#socket} -gt 100 ]; then
	# Unix socket paths are limited to 108 bytes.
	socket=${TMPDIR:-/tmp}/mcm-run-$(id -u)/driver.sock
	mkdir -p "$(dirname "$socket")"
fi
rm -f "$socket"
say "starting provider-virtual on unix://$socket (log: .run/logs/provider.log)"
start provider "$bin/provider-virtual" \
	--endpoint "unix://$socket" \
	--target-kubeconfig "$identities/provider.kubeconfig" \
	--state-file "$run_dir/provider-virtual/state.json" \
	--metrics-address "127.0.0.1:$provider_port"
wait_for provider 30 test -S "$socket"
wait_for provider 30 http_ok "http://127.0.0.1:$provider_port/healthz"

# --- manager -----------------------------------------------------------------------------------
say "starting machine-controller-manager (log: .run/logs/manager.log)"
start manager "$bin/machine-controller-manager" \
	--control-kubeconfig "$identities/manager.kubeconfig" \
	--target-kubeconfig "$identities/manager.kubeconfig" \
	--namespace "$namespace" \
	--driver-endpoint "unix://$socket" \
	--address 127.0.0.1 \
	--port "$manager_port" \
	--machine-metrics-port 0
wait_for manager 60 http_ok "http://127.0.0.1:$manager_port/readyz"

# --- examples ----------------------------------------------------------------------------------
say "applying examples/"
k apply -f examples/

if $v1beta1; then
	api_note="API: v1alpha1 and v1beta1 (--v1beta1); kubectl defaults to v1beta1, so the commands
below, which are written for v1alpha1, need the version in the resource name, e.g.
machineclasses.v1alpha1.machine.sapcloud.io"
else
	api_note="API: machine.sapcloud.io/v1alpha1 (kubectl's default; --v1beta1 also serves v1beta1)"
fi
cat <<EOT

Everything runs. Logs: .run/logs/{sandbox,webhook,provider,manager}.log
$api_note
  export KUBECONFIG=$kubeconfig
  kubectl get machinedeployments,machinesets,machines,nodes        # mcd, mcs, mc
  kubectl scale machinedeployment $deployment --replicas=5
  kubectl patch machineclass virtual-small --type=merge \\
    -p '{"providerSpec":{"tags":{"team":"b"}}}'                            # hot update, no rollout
  kubectl patch machinedeployment $deployment --type=merge \\
    -p '{"spec":{"template":{"spec":{"class":{"name":"virtual-medium"}}}}}'   # roll to the other class
  kubectl annotate node <node> node.machine.sapcloud.io/preserve=now      # preserve a node
  kubectl annotate node <node> provider-virtual.mcm.gardener.cloud/conditions='Ready=False'
                                             # unhealthy: replaced after healthTimeout (2m)
  curl -X PUT -d '{"Ready":"False"}' http://127.0.0.1:$provider_port/admin/nodes/<node>/conditions
  kubectl delete machine <machine>                                      # replaced by its MachineSet
  kubectl delete machinedeployment $deployment
  export PATH=$bin:\$PATH        # kubectl finds the plugin kubectl-mcm (or: make install)
  kubectl mcm rollout status machinedeployment/$deployment        # also: history, undo, restart
  kubectl mcm status                                             # machines, nodes, stuck ones
More in examples/README.md and docs/user-guide.md. Metrics: http://127.0.0.1:$manager_port/metrics
EOT
if $smoke; then
	echo "Smoke run: waiting up to ${timeout}s for the machines of $deployment to be Running."
else
	echo "Progress below (a line when something changes). Ctrl-C stops everything."
fi
echo

# --- progress ----------------------------------------------------------------------------------
# One line: machines by phase, Nodes Ready. Empty phase = not yet picked up by the controller.
summary() {
	local desired phases nodes ready total
	desired=$(k get machinedeployment "$deployment" -o jsonpath='{.spec.replicas}' 2>/dev/null || echo "?")
	# A failed read is not "no machines": say the API server cannot be reached (an outage).
	# Each machine's phase in brackets, so that a machine without one is a line "[]".
	if ! phases=$(k get machines -o jsonpath='{range .items[*]}[{.status.currentStatus.phase}]{"\n"}{end}' 2>/dev/null); then
		printf 'desired %s | the API server is unreachable (machines and nodes unknown)\n' "$desired"
		return
	fi
	[ -z "$phases" ] ||
		phases=$(sed 's/^\[\]$/(new)/; s/^\[\(.*\)\]$/\1/' <<<"$phases" | sort | uniq -c |
			awk '{printf "%s%s %s", (NR>1?", ":""), $2, $1}')
	nodes=$(k get nodes -o jsonpath='{range .items[*]}{range .status.conditions[?(@.type=="Ready")]}{.status}{"\n"}{end}{end}' 2>/dev/null)
	ready=$(grep -c '^True$' <<<"$nodes" || true)
	total=$(k get nodes -o name 2>/dev/null | grep -c . || true)
	printf 'desired %s | machines: %s | nodes Ready %s/%s\n' "$desired" "${phases:-none}" "$ready" "$total"
}
all_running() { # desired machines all Running with Ready nodes
	local desired running ready
	desired=$(k get machinedeployment "$deployment" -o jsonpath='{.spec.replicas}' 2>/dev/null) || return 1
	running=$(k get machines -o jsonpath='{range .items[*]}{.status.currentStatus.phase}{"\n"}{end}' 2>/dev/null |
		grep -c '^Running$' || true)
	ready=$(k get nodes -o jsonpath='{range .items[*]}{range .status.conditions[?(@.type=="Ready")]}{.status}{"\n"}{end}{end}' 2>/dev/null |
		grep -c '^True$' || true)
	[ -n "$desired" ] && [ "$running" -eq "$desired" ] && [ "$ready" -ge "$desired" ] &&
		[ "$(k get machines -o name 2>/dev/null | grep -c . || true)" -eq "$desired" ]
}
# Restarts components that exited, like a kubelet restarts a container: with a backoff (1s,
# doubling to 30s, back to 1s after 60s of running). The sandbox holds all state in memory: when
# it exits everything stops.
check_children() {
	local i name pid code
	for i in "${!names[@]}"; do
		name=${names[i]}
		if [ -n "${restart_due[i]}" ]; then
			if [ "$SECONDS" -ge "${restart_due[i]}" ]; then
				say "restarting $name"
				eval "start $name ${commands[i]}"
			fi
			continue
		fi
		pid=${pid_values[i]}
		kill -0 "$pid" 2>/dev/null && continue
		code=0
		wait "$pid" 2>/dev/null || code=$?
		if [ "$name" = sandbox ]; then
			show_log "$name"
			fail "$name exited (code $code; see .run/logs/$name.log)"
		fi
		if [ $((SECONDS - started_at[i])) -ge 60 ]; then
			backoffs[i]=1
		fi
		say "$name exited (code $code), restarting in ${backoffs[i]}s (log: .run/logs/$name.log)"
		restart_due[i]=$((SECONDS + backoffs[i]))
		backoffs[i]=$((backoffs[i] * 2 > 30 ? 30 : backoffs[i] * 2))
	done
}

started=$SECONDS
last=""
last_print=$SECONDS
reported_done=false
reported_line=""
while true; do
	check_children
	line=$(summary)
	# A line when something changed, and every 15s while machines are still coming up.
	if [ "$line" != "$last" ] || { ! $reported_done && [ $((SECONDS - last_print)) -ge 15 ]; }; then
		printf '[%4ss] %s\n' $((SECONDS - started)) "$line"
		last=$line
		last_print=$SECONDS
	fi
	if all_running; then
		if $smoke; then
			echo
			k get machinedeployments,machinesets,machines,nodes
			# The version a plain `kubectl get machinedeployment` speaks.
			want_version=v1alpha1
			$v1beta1 && want_version=v1beta1
			explained=$(k explain machinedeployment.spec 2>&1) ||
				fail "kubectl explain machinedeployment.spec failed: $explained"
			grep -q "^VERSION: *$want_version\$" <<<"$explained" ||
				fail "kubectl's default version is not $want_version: $(grep VERSION <<<"$explained")"
			say "kubectl's default version is $want_version"
			if $v1beta1; then
				say "v1beta1 through the conversion webhook:"
				k get machinedeployments.v1beta1.machine.sapcloud.io ||
					fail "v1beta1 MachineDeployments are not served through the conversion webhook"
			elif k get machinedeployments.v1beta1.machine.sapcloud.io >/dev/null 2>&1; then
				fail "v1beta1 is served without --v1beta1"
			fi
			denials=$(k get --raw /sandbox/admin/denials)
			[ "$denials" = "{}" ] || fail "a component was refused by RBAC (403s per user): $denials"
			# ... and the limits hold: each identity is refused what the chart does not grant.
			refused() { # <identity> <kubectl arguments...>: the request must be refused with 403
				local out
				if out=$(kubectl --kubeconfig "$identities/$1.kubeconfig" "${@:2}" 2>&1); then
					fail "$1 was allowed: kubectl ${*:2}"
				fi
				grep -q '(Forbidden)' <<<"$out" || fail "$1: kubectl ${*:2}: want Forbidden, got: $out"
			}
			refused manager get secrets -n kube-public
			refused manager get secrets -A
			refused webhook patch machinedeployment "$deployment" -n "$namespace" --type=merge -p '{"spec":{"replicas":4}}'
			refused webhook delete machines --all -n "$namespace"
			refused provider get machines -n "$namespace"
			say "least privilege: no component was refused, and each is refused what the chart does not grant"
			say "smoke run passed in $((SECONDS - started))s"
			exit 0
		elif ! $reported_done; then
			say "all machines of $deployment are Running; try the commands above (Ctrl-C stops)"
			reported_done=true
			reported_line=$line
		fi
	elif [ "$line" != "$reported_line" ] && [[ $line != *unreachable* ]]; then
		# Said again only after the fleet changed (a scale, a roll), not after a check that
		# failed for a moment or an API outage: the line printed 27 times in one session.
		reported_done=false
	fi
	if $smoke && [ $((SECONDS - started)) -ge "$timeout" ]; then
		echo
		k get machinedeployments,machinesets,machines,nodes || true
		for name in "${names[@]}"; do show_log "$name"; done
		fail "smoke run: the machines of $deployment were not Running within ${timeout}s"
	fi
	sleep 3
done
