#!/usr/bin/env bash
# The real Kubernetes control plane for the project's suites: etcd, kube-apiserver and
# kube-controller-manager as processes on loopback (docs/testing.md#the-real-control-plane).
#
#   scripts/control-plane.sh build                  build the three binaries (= make control-plane)
#   scripts/control-plane.sh start DIR              start all three, write DIR/admin.kubeconfig
#   scripts/control-plane.sh stop DIR               stop all three (nothing is left running)
#   scripts/control-plane.sh stop DIR kube-apiserver    stop one component (an API outage)
#   scripts/control-plane.sh start DIR kube-apiserver   start it again with the same flags and port
#   scripts/control-plane.sh bin-dir                print the folder of the built binaries
#
# `start DIR` picks free loopback ports, keeps etcd's data in DIR/etcd (fsync off: a test cluster),
# writes a small CA with client certificates (DIR/pki) for an admin (system:masters), for
# kube-controller-manager and for each identity the chart's roles bind (DIR/identities/*.kubeconfig),
# service-account signing keys, and returns once kube-apiserver's /readyz answers and
# kube-controller-manager's /healthz does. Logs stay in DIR/logs. Tunables (environment):
#   CONTROL_PLANE_NODE_GRACE   --node-monitor-grace-period of kube-controller-manager (default 40s)
#   CONTROL_PLANE_BIN_DIR      use binaries from this folder instead of building them
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
module="$root/tools/control-plane"
components=(etcd kube-apiserver kube-controller-manager)

log() { echo "control-plane: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The cache lives outside the checkout so that a fresh clone (CI) reuses what an earlier build
# made on the same machine; its key is go.sum, so a change of any pinned version rebuilds.
cache_root() { echo "${CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcm-control-plane}"; }
cache_key() {
	(cat "$module/go.mod" "$module/go.sum"; go env GOVERSION GOOS GOARCH) | sha256sum | cut -c1-16
}
bin_dir() {
	if [ -n "${CONTROL_PLANE_BIN_DIR:-}" ]; then echo "$CONTROL_PLANE_BIN_DIR"; return; fi
	echo "$(cache_root)/$(cache_key)/bin"
}

build() {
	command -v go >/dev/null || die "go is not on PATH: the control plane is built from Go modules"
	local dir; dir=$(bin_dir)
	if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/kube-controller-manager" ] && [ -x "$dir/etcd" ]; then
		log "up to date: $dir ($(versions_line))"
		return
	fi
	local versions
	versions=$(cd "$module" && go list -m -f '{{.Path}}@{{.Version}}' k8s.io/kubernetes go.etcd.io/etcd/server/v3 | tr '\n' ' ')
	log "building etcd, kube-apiserver and kube-controller-manager from $versions into $dir"
	log "(a first build downloads about 300 MB of modules and compiles for 10-20 minutes on 2 cores)"
	local started tmp; started=$(date +%s); tmp="$dir.tmp.$$"
	rm -rf "$tmp"; mkdir -p "$tmp"
	# One target at a time so the log shows progress; the Go build cache makes the later ones
	# reuse what the earlier ones compiled.
	# kube's /version comes from variables its own release build sets at link time; without them
	# kube-apiserver reports v0.0.0-master.
	local kube_version ldflags pkg name t0
	kube_version=$(cd "$module" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
	ldflags=$(kube_ldflags "$kube_version")
	for pkg in go.etcd.io/etcd/server/v3 k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager; do
		name=${pkg##*/}; [ "$name" = v3 ] && name=etcd
		t0=$(date +%s)
		log "  go build $pkg"
		(cd "$module" && go build -ldflags "$ldflags" -o "$tmp/$name" "$pkg")
		log "  built $name in $(($(date +%s) - t0))s"
	done
	rm -rf "$dir"; mv "$tmp" "$dir"
	log "built in $(($(date +%s) - started))s: $(versions_line)"
}

kube_ldflags() { # <vMAJOR.MINOR.PATCH>
	local v=$1 major minor pkg=k8s.io/component-base/version
	major=${v#v}; major=${major%%.*}
	minor=${v#v*.}; minor=${minor%%.*}
	printf -- '-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean -X %s.buildDate=%s' \
		"$pkg" "$v" "$pkg" "$major" "$pkg" "$minor" "$pkg" "$pkg" "1970-01-01T00:00:00Z"
}

versions_line() {
	local dir; dir=$(bin_dir)
	printf '%s; %s' "$("$dir/kube-apiserver" --version 2>/dev/null)" "$("$dir/etcd" --version 2>/dev/null | head -n 1)"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# --- certificates -------------------------------------------------------------------------------

pki_client() { # <name> <CN> [O] : a client certificate signed by the cluster CA
	local name=$1 cn=$2 org=${3:-} subj
	subj="/CN=$cn"; [ -n "$org" ] && subj="/O=$org$subj"
	openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -subj "$subj" \
		-out "$pki/$name.csr" 2>/dev/null
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 30 -sha256 -extfile <(printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n') \
		-out "$pki/$name.crt" 2>/dev/null
	rm -f "$pki/$name.csr"
}

write_kubeconfig() { # <file> <client cert name> <server>
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: control-plane
  cluster:
    server: $3
    certificate-authority-data: $(base64 -w0 <"$pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 <"$pki/$2.crt")
    client-key-data: $(base64 -w0 <"$pki/$2.key")
contexts:
- name: $2
  context:
    cluster: control-plane
    user: $2
current-context: $2
EOF
}

make_pki() {
	mkdir -p "$pki"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 30 \
		-subj "/CN=mcm-test-control-plane-ca" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
	openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/apiserver.key" -subj "/CN=kube-apiserver" \
		-out "$pki/apiserver.csr" 2>/dev/null
	openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 30 -sha256 -out "$pki/apiserver.crt" -extfile <(printf '%s\n' \
		'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1' \
		'extendedKeyUsage=serverAuth' 'keyUsage=digitalSignature,keyEncipherment') 2>/dev/null
	rm -f "$pki/apiserver.csr"
	openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
	pki_client admin admin system:masters
	pki_client kube-controller-manager system:kube-controller-manager
	# The identities the chart's roles bind (templates/rbac.yaml, target-rbac.yaml): service
	# accounts of the release namespace `default`, authenticated by certificate so that a suite can
	# act as them before any token exists. A certificate's groups are its O fields; a service
	# account token adds the same two groups.
	local sa
	for sa in machine-controller-manager machine-controller-manager-webhook provider-virtual; do
		pki_client "sa-$sa" "system:serviceaccount:default:$sa" "system:serviceaccounts"
	done
}

# --- processes ----------------------------------------------------------------------------------

# Each component's command line is written to DIR/run/<name>.sh at the first start, so a stopped
# component comes back with the same flags and ports (an API outage, not a new cluster).
write_launchers() {
	local etcd_port peer_port api_port kcm_port grace bin
	etcd_port=$(free_port); peer_port=$(free_port); api_port=$(free_port); kcm_port=$(free_port)
	grace=${CONTROL_PLANE_NODE_GRACE:-40s}
	bin=$(bin_dir)
	mkdir -p "$dir/run" "$dir/logs" "$dir/etcd"
	chmod 700 "$dir/etcd"
	echo "$etcd_port" >"$dir/run/etcd-port"
	echo "$api_port" >"$dir/run/apiserver-port"
	echo "$kcm_port" >"$dir/run/kcm-port"
	cat >"$dir/run/etcd.sh" <<EOF
exec "$bin/etcd" --name test --data-dir "$dir/etcd" \\
	--listen-client-urls http://127.0.0.1:$etcd_port --advertise-client-urls http://127.0.0.1:$etcd_port \\
	--listen-peer-urls http://127.0.0.1:$peer_port --initial-advertise-peer-urls http://127.0.0.1:$peer_port \\
	--initial-cluster test=http://127.0.0.1:$peer_port --unsafe-no-fsync --log-level warn \\
	--quota-backend-bytes 8589934592
EOF
	# Every request is audited at Metadata level (who, verb, resource, answer code) so suites can
	# prove least privilege from what the real authorizer refused (403s in logs/audit.log).
	cat >"$dir/run/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
EOF
	# ServiceAccount admission stays on (pods get their token volume, as in every real cluster);
	# kube-controller-manager creates each namespace's `default` ServiceAccount.
	cat >"$dir/run/kube-apiserver.sh" <<EOF
exec "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:$etcd_port \\
	--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port $api_port \\
	--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \\
	--client-ca-file "$pki/ca.crt" --authorization-mode RBAC \\
	--service-account-issuer https://kubernetes.default.svc.cluster.local \\
	--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \\
	--service-cluster-ip-range 10.0.0.0/24 --allow-privileged=true --profiling=false \\
	--enable-priority-and-fairness=true --etcd-compaction-interval 10s \\
	--audit-policy-file "$dir/run/audit-policy.yaml" --audit-log-path "$dir/logs/audit.log" \\
	--audit-log-format json --audit-log-maxsize 200 --v=1
EOF
	cat >"$dir/run/kube-controller-manager.sh" <<EOF
exec "$bin/kube-controller-manager" --kubeconfig "$dir/kube-controller-manager.kubeconfig" \\
	--authentication-kubeconfig "$dir/kube-controller-manager.kubeconfig" \\
	--authorization-kubeconfig "$dir/kube-controller-manager.kubeconfig" \\
	--bind-address 127.0.0.1 --secure-port $kcm_port --leader-elect=false \\
	--controllers garbagecollector,namespace,serviceaccount,serviceaccount-token,nodelifecycle,disruption,deployment,replicaset,taint-eviction-controller,pvc-protection,pv-protection \\
	--use-service-account-credentials=true --service-account-private-key-file "$pki/sa.key" \\
	--root-ca-file "$pki/ca.crt" --node-monitor-grace-period $grace --profiling=false --v=1
EOF
}

pid_of() { cat "$dir/run/$1.pid" 2>/dev/null || true; }
alive() { local pid; pid=$(pid_of "$1"); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }

launch() { # <component>
	if alive "$1"; then log "$1 already running (pid $(pid_of "$1"))"; return; fi
	# setsid: the component outlives this script and a Ctrl-C of the caller's terminal.
	setsid bash "$dir/run/$1.sh" >>"$dir/logs/$1.log" 2>&1 </dev/null &
	echo $! >"$dir/run/$1.pid"
}

wait_for() { # <component> <what> <command…>: polls until the command succeeds (60 s at most)
	local name=$1 what=$2; shift 2
	local deadline=$(($(date +%s) + ${CONTROL_PLANE_START_TIMEOUT:-90}))
	until "$@" >/dev/null 2>&1; do
		alive "$name" || start_failed "$name" "exited"
		[ "$(date +%s)" -lt "$deadline" ] || start_failed "$name" "$what did not answer"
		sleep 0.2
	done
}

start_failed() { # <component> <what happened>: leaves nothing running behind a failed start
	tail -n 30 "$dir/logs/$1.log" >&2
	stop "" >/dev/null 2>&1 || true
	die "$1: $2 (log: $dir/logs/$1.log); everything stopped"
}

apiserver_ready() {
	curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
		"https://127.0.0.1:$(cat "$dir/run/apiserver-port")/readyz"
}
kcm_healthy() { curl -skf "https://127.0.0.1:$(cat "$dir/run/kcm-port")/healthz"; }
etcd_healthy() { curl -sf "http://127.0.0.1:$(cat "$dir/run/etcd-port")/health" | grep -q '"health":"true"'; }

start() {
	local only=${1:-}
	local t0; t0=$(date +%s%N)
	if [ -z "$only" ] && [ ! -f "$dir/run/kube-apiserver.sh" ]; then
		[ -x "$(bin_dir)/kube-apiserver" ] || build
		make_pki
		write_launchers
		local server="https://127.0.0.1:$(cat "$dir/run/apiserver-port")"
		write_kubeconfig "$dir/admin.kubeconfig" admin "$server"
		write_kubeconfig "$dir/kube-controller-manager.kubeconfig" kube-controller-manager "$server"
		mkdir -p "$dir/identities"
		for sa in machine-controller-manager machine-controller-manager-webhook provider-virtual; do
			write_kubeconfig "$dir/identities/$sa.kubeconfig" "sa-$sa" "$server"
		done
	fi
	[ -f "$dir/run/kube-apiserver.sh" ] || die "$dir holds no control plane: run 'start $dir' first"
	local c
	for c in "${components[@]}"; do
		[ -z "$only" ] || [ "$only" = "$c" ] || continue
		launch "$c"
		case $c in
		etcd) wait_for etcd "client port" etcd_healthy ;;
		kube-apiserver) wait_for kube-apiserver /readyz apiserver_ready ;;
		kube-controller-manager) wait_for kube-controller-manager /healthz kcm_healthy ;;
		esac
	done
	log "started ${only:-etcd, kube-apiserver and kube-controller-manager} in $(awk -v ns=$(($(date +%s%N) - t0)) 'BEGIN { printf "%.1f", ns / 1e9 }')s; kubeconfig: $dir/admin.kubeconfig"
}

stop() {
	local only=${1:-} c pid i
	for c in kube-controller-manager kube-apiserver etcd; do
		[ -z "$only" ] || [ "$only" = "$c" ] || continue
		pid=$(pid_of "$c")
		[ -n "$pid" ] || continue
		# The launcher exec'd the binary, so the pid is the component itself; setsid made it a
		# process group leader, so the group is signalled in case it spawned anything.
		kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
		for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL -- "-$pid" 2>/dev/null || true
		rm -f "$dir/run/$c.pid"
		log "stopped $c"
	done
}

cmd=${1:-}
case $cmd in
build) build ;;
bin-dir) bin_dir ;;
start | stop)
	dir=${2:?usage: $0 $cmd DIR [component]}
	mkdir -p "$dir"; dir=$(cd "$dir" && pwd); pki="$dir/pki"
	component=${3:-}
	if [ -n "$component" ] && [[ ! " ${components[*]} " =~ " $component " ]]; then
		die "unknown component '$component' (one of: ${components[*]})"
	fi
	"$cmd" "$component"
	;;
*)
	sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
