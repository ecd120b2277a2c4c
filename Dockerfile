# syntax=docker/dockerfile:1
# The binaries of machine-controller-manager in Rust, one image per binary (the Helm chart pulls
# <registry>/machine-controller-manager, <registry>/machine-webhook and <registry>/provider-virtual
# and passes only arguments). Every image holds all four binaries (the layers are shared); the
# target only chooses the entrypoint:
#
#   docker build -t <registry>/machine-controller-manager:<tag> .          (the default target)
#   docker build --target machine-webhook  -t <registry>/machine-webhook:<tag> .
#   docker build --target provider-virtual -t <registry>/provider-virtual:<tag> .
#   docker build --target mcm-sandbox      -t <registry>/mcm-sandbox:<tag> .
#
# Each binary lies at the image root and the working directory is /, so `./machine-controller-manager`
# (the command Gardener's Deployment runs) and `/machine-controller-manager` both start it; symbolic
# links under /usr/local/bin keep the paths of earlier images working.
#
# Not built in this repository's CI: the development machine has no container engine;
# scripts/check-dockerfile.sh (`make lint`) checks the layout promised above by reading this file.

# ---- build -------------------------------------------------------------------------------------
# Debian 12 (bookworm), the same glibc as the distroless runtime below.
FROM docker.io/library/rust:1.95-slim-bookworm AS builder
WORKDIR /src
COPY . .
# --locked: exactly the versions of Cargo.lock. Proto files are compiled by protox (pure Rust),
# TLS uses rustls with ring (needs only the C compiler of the image): no protoc, no OpenSSL.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --workspace \
        --bin machine-controller-manager \
        --bin machine-webhook \
        --bin provider-virtual \
        --bin mcm-sandbox \
    && mkdir -p /out/links \
    && for binary in machine-controller-manager machine-webhook provider-virtual mcm-sandbox; do \
           cp "target/release/$binary" /out/ && ln -s "/$binary" "/out/links/$binary" || exit 1; \
       done

# ---- runtime -----------------------------------------------------------------------------------
# glibc and libgcc only: no shell, no package manager; runs as uid/gid 65532 (nonroot).
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
LABEL org.opencontainers.image.description="Declarative lifecycle management of Kubernetes worker machines (Rust reimplementation of Gardener's machine-controller-manager)" \
      org.opencontainers.image.licenses="Apache-2.0"
# Single files, not a directory copied onto /, so the mode of / stays as distroless ships it.
COPY --from=builder /out/machine-controller-manager /out/machine-webhook /out/provider-virtual /out/mcm-sandbox /
# A directory copy keeps symbolic links as links.
COPY --from=builder /out/links/ /usr/local/bin/
WORKDIR /
USER 65532:65532
# mimalloc (the binaries' allocator) returns freed pages to the system after a delay of 1 s, but
# only when it allocates or frees again: after a relist or a mass deletion an idle manager kept
# some 40 MiB it no longer used. 0 returns them at once (docs/performance.md, manager memory).
ENV MIMALLOC_PURGE_DELAY=0

FROM runtime AS machine-webhook
LABEL org.opencontainers.image.title="machine-webhook"
ENTRYPOINT ["/machine-webhook"]

FROM runtime AS provider-virtual
LABEL org.opencontainers.image.title="provider-virtual"
ENTRYPOINT ["/provider-virtual"]

FROM runtime AS mcm-sandbox
LABEL org.opencontainers.image.title="mcm-sandbox"
ENTRYPOINT ["/mcm-sandbox"]

# Last, so that a plain `docker build` produces the manager image.
FROM runtime AS machine-controller-manager
LABEL org.opencontainers.image.title="machine-controller-manager"
ENTRYPOINT ["/machine-controller-manager"]
