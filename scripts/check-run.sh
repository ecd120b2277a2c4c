#!/usr/bin/env bash
# Checks what `make run` (scripts/run.sh) promises about its processes, on the real binaries:
#   1. a component that exits is restarted ("manager exited (code N), restarting in Ns");
#   2. an API outage (POST /sandbox/admin/unavailable) makes the manager lose its lease, but it does
#      not exit: it campaigns again in-process and leads again once the API is back; meanwhile the
#      progress lines say the API server is unreachable (never "machines: none") and the fleet,
#      Running all along, is not announced Running again (skip with CHECK_RUN_OUTAGE=0);
#   3. SIGINT to the process group of `run.sh | tee` (Ctrl-C with the output piped) stops every
#      process: none whose command line names this run's .run/ folder remains.
# Steps 1 and 2 are skipped with CHECK_RUN_RESTART=0. The transcript is printed at the end and kept
# in the file named by CHECK_RUN_TRANSCRIPT (default: a temporary file). Arguments go to run.sh
# (e.g. --no-build). Uses ports 2944x unless MCM_RUN_*_PORT are set, so a `make run` elsewhere on
# this machine does not collide.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
run_dir=$root/.run
export MCM_RUN_WEBHOOK_PORT=${MCM_RUN_WEBHOOK_PORT:-29443}
export MCM_RUN_WEBHOOK_ADMIN_PORT=${MCM_RUN_WEBHOOK_ADMIN_PORT:-29260}
export MCM_RUN_PROVIDER_PORT=${MCM_RUN_PROVIDER_PORT:-29259}
export MCM_RUN_MANAGER_PORT=${MCM_RUN_MANAGER_PORT:-29258}
transcript=${CHECK_RUN_TRANSCRIPT:-$(mktemp -t check-run.XXXXXX)}
: >"$transcript"

note() { printf '[check %4ss] %s\n' "$SECONDS" "$*" | tee -a "$transcript"; }
fail() {
	note "FAILED: $*"
	finish 1
}
# Our processes: those whose command line or KUBECONFIG names this run's .run/ folder (the
# kubeconfig, the socket, the state file), whatever their pid.
leftovers() {
	local f pid
	for f in /proc/[0-9]*/cmdline; do
		pid=${f#/proc/}
		pid=${pid%/cmdline}
		[ "$pid" = $$ ] && continue
		# The webhook names the kubeconfig only in its environment (KUBECONFIG=...).
		if { tr '\0' ' ' <"$f" 2>/dev/null | grep -q -- "$run_dir/" ||
			tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -q "^KUBECONFIG=$run_dir/"; } &&
			! tr '\0' ' ' <"$f" 2>/dev/null | grep -q 'check-run.sh'; then
			echo "$pid $(tr '\0' ' ' <"$f" 2>/dev/null | cut -c1-120)"
		fi
	done
}
wait_output() { # <seconds> <extended regex>: waits until run.sh has printed a matching line
	local deadline=$((SECONDS + $1))
	until grep -qE -- "$2" "$output"; do
		[ $SECONDS -lt $deadline ] || return 1
		kill -0 "$group" 2>/dev/null || return 1
		sleep 0.5
	done
}
count_output() { grep -cE -- "$1" "$output" || true; }
# The same, in what run.sh printed after line $1 of its output.
count_output_after() { tail -n "+$(($1 + 1))" "$output" | grep -cE -- "$2" || true; }

output=$(mktemp -t check-run-output.XXXXXX)
group=""
finish() {
	local status=$1
	if [ -n "$group" ] && kill -0 -- "-$group" 2>/dev/null; then
		kill -TERM -- "-$group" 2>/dev/null || true
	fi
	echo "--- run.sh output (through tee) ---" >>"$transcript"
	cat "$output" >>"$transcript"
	cat "$transcript"
	echo "(transcript: $transcript)"
	exit "$status"
}

# Job control: the pipeline gets its own process group (SIGINT is not ignored in it, as for a
# command typed at a terminal), and its id is the group to signal, as the terminal does at Ctrl-C.
set -m
scripts/run.sh "$@" 2>&1 | tee "$output" >/dev/null &
group=$!
set +m
note "started run.sh | tee as process group $group"
wait_output 600 '^Everything runs' || fail "run.sh did not start everything (see $output)"
note "everything runs"
# The fleet is Running (and said so) before the manager is killed. A kill between CreateMachine
# and InitializeMachine would leave the examples' VMs (`initialization: silent`, reported like a
# real cloud's) uninitialised until the creation timeout, as upstream's would; and the progress
# lines across the outage below are compared with this announcement.
wait_output 240 '^>>> all machines of .* are Running' ||
	fail "the example machines were not announced Running"
note "the example machines are Running"

if [ "${CHECK_RUN_RESTART:-1}" != 0 ]; then
	manager=$(cat "$run_dir/manager.pid")
	note "killing the manager (pid $manager) with SIGKILL"
	kill -KILL "$manager"
	wait_output 30 '^>>> manager exited \(code 137\), restarting in [0-9]+s' ||
		fail "no restart announced after the manager was killed"
	wait_output 60 '^>>> restarting manager' || fail "the manager was not restarted"
	sleep 1
	restarted=$(cat "$run_dir/manager.pid")
	[ "$restarted" != "$manager" ] && kill -0 "$restarted" 2>/dev/null ||
		fail "no new manager process after the restart"
	note "manager restarted as pid $restarted"
	# The restarted manager has the killed one's identity (hostname and port): it takes the Lease at once.
	deadline=$((SECONDS + 90))
	until [ "$(grep -c 'became leader' "$run_dir/logs/manager.log" || true)" -ge 2 ]; do
		[ $SECONDS -lt $deadline ] || fail "the restarted manager did not become leader"
		sleep 0.5
	done
	note "restarted manager is the leader"

	if [ "${CHECK_RUN_OUTAGE:-1}" != 0 ]; then
		exits=$(count_output '^>>> manager exited')
		leads=$(grep -c 'became leader' "$run_dir/logs/manager.log" || true)
		leader_metric() {
			curl -fsS --max-time 2 "http://127.0.0.1:$MCM_RUN_MANAGER_PORT/metrics" 2>/dev/null |
				grep -E '^leader_election_master_status\{name="machine-controller-manager"\} ' | awk '{print $2}'
		}
		announced=$(count_output '^>>> all machines of .* are Running')
		before_outage=$(wc -l <"$output")
		note "API outage of 30s (POST /sandbox/admin/unavailable)"
		echo '{"seconds": 30}' | kubectl --kubeconfig "$run_dir/kubeconfig" create --raw /sandbox/admin/unavailable -f - >/dev/null
		outage=$SECONDS
		deadline=$((SECONDS + 60))
		until [ "$(leader_metric)" = 0 ]; do
			[ $SECONDS -lt $deadline ] || fail "the manager did not give up its lease during the outage"
			sleep 0.5
		done
		note "manager lost its lease $((SECONDS - outage))s into the outage"
		deadline=$((SECONDS + 120))
		until [ "$(grep -c 'became leader' "$run_dir/logs/manager.log" || true)" -gt "$leads" ] &&
			[ "$(leader_metric)" = 1 ]; do
			[ $SECONDS -lt $deadline ] || fail "the manager did not lead again after the outage"
			sleep 0.2
		done
		note "manager leads again $((SECONDS - outage - 30))s after the API came back"
		[ "$(count_output '^>>> manager exited')" -eq "$exits" ] ||
			fail "the manager exited around the outage; it must campaign again in-process"
		# What a user reads during the outage: the API server is unreachable, never "no machines";
		# and the fleet that was Running all along is not announced Running a second time.
		[ "$(count_output_after "$before_outage" '\| the API server is unreachable')" -ge 1 ] ||
			fail "no progress line said the API server is unreachable during the outage"
		[ "$(count_output_after "$before_outage" 'machines: none')" -eq 0 ] ||
			fail "a progress line said 'machines: none' while the machines existed (the outage)"
		sleep 6 # two progress polls after the manager leads again
		[ "$(count_output '^>>> all machines of .* are Running')" -eq "$announced" ] ||
			fail "'all machines ... are Running' was said again after the outage, with no fleet change"
		note "progress lines: the outage said 'unreachable', no 'machines: none', Running said once"
		{
			echo "--- manager log: freeze, lease and exit lines ---"
			grep -iE 'frozen|freez|lease|leader|exit' "$run_dir/logs/manager.log" | cut -c1-220 | tail -n 15
		} >>"$transcript"
	fi
fi

note "SIGINT to process group $group (run.sh | tee)"
kill -INT -- "-$group"
deadline=$((SECONDS + 30))
while kill -0 -- "-$group" 2>/dev/null; do
	[ $SECONDS -lt $deadline ] || break
	sleep 0.2
done
sleep 0.5
left=$(leftovers)
if [ -n "$left" ]; then
	note "processes left after SIGINT:"
	echo "$left" | tee -a "$transcript"
	# Not ours to keep running: stop them so the machine is clean again.
	echo "$left" | while read -r pid _; do kill -TERM "$pid" 2>/dev/null || true; done
	group=""
	fail "SIGINT with piped output left processes running"
fi
group=""
note "no process of this run remains after SIGINT"
note "PASSED"
finish 0
