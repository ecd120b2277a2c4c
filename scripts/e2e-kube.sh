#!/usr/bin/env bash
# `make e2e-kube`: the end-to-end scenarios with the real binaries as processes against a real
# control plane (etcd, kube-apiserver, kube-controller-manager built from Go modules): each system
# of the suite starts its own with scripts/control-plane.sh (docs/testing.md#the-real-control-plane).
# Scenarios that need the sandbox's admin API print their SKIPPED line with the reason.
#   MCM_E2E_ONLY=rollout scripts/e2e-kube.sh      only the scenarios whose name contains a word
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/control-plane.sh build
MCM_E2E_API_SERVER=kube cargo test -p mcm-e2e -- --nocapture "$@"
