#!/usr/bin/env bash
# `make lint` (dockerfile-check): checks by reading the root Dockerfile that its images keep the
# promises the chart, Gardener and docs/gardener.md rely on. No container engine is needed (the
# development machine and CI have none), so this is the only automatic check of the Dockerfile.
#
#  - every binary built (`--bin X`) is copied, as a single file, to the image root /, and the
#    runtime's working directory is /, so `./X` (Gardener's command for the manager) and `/X` both
#    start it; the builder links /usr/local/bin/X to /X and that directory is copied too;
#  - the runtime runs as uid/gid 65532 and no later stage changes the user or working directory;
#  - one stage per binary, `FROM runtime AS X`, with `ENTRYPOINT ["/X"]`; the manager's stage is
#    last (the default target of `docker build`).
#
#   scripts/check-dockerfile.sh [path/to/Dockerfile]
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - "${1:-Dockerfile}" <<'PY'
import json
import re
import sys

path = sys.argv[1]
problems = []

# Instructions with their continuation lines joined; comments and blank lines dropped.
instructions, pending = [], ""
for raw in open(path).read().split("\n"):
    line = raw.strip()
    if not pending and (not line or line.startswith("#")):
        continue
    if line.endswith("\\"):
        pending += line[:-1] + " "
        continue
    instructions.append(pending + line)
    pending = ""

stages = []  # (name, base, [(keyword, rest)])
for text in instructions:
    keyword, _, rest = text.partition(" ")
    keyword, rest = keyword.upper(), rest.strip()
    if keyword == "FROM":
        m = re.match(r"^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?$", rest, re.IGNORECASE)
        if not m:
            problems.append(f"cannot read FROM {rest!r}")
            continue
        stages.append((m.group(2) or "", m.group(1), []))
    elif stages:
        stages[-1][2].append((keyword, rest))
by_name = {name: (base, body) for name, base, body in stages}

builder = by_name.get("builder")
runtime = by_name.get("runtime")
if not builder or not runtime:
    sys.exit(f"{path}: needs the stages 'builder' and 'runtime'")

binaries = []
for keyword, rest in builder[1]:
    if keyword == "RUN":
        binaries += re.findall(r"--bin\s+(\S+)", rest)
if not binaries:
    problems.append("the builder builds no --bin")

# The builder's loop that copies the binaries and makes the /usr/local/bin links.
run = " ".join(rest for keyword, rest in builder[1] if keyword == "RUN")
loop = re.search(r"for\s+\w+\s+in\s+([^;]+);", run)
looped = loop.group(1).split() if loop else []
if sorted(looped) != sorted(binaries):
    problems.append(f"the builder's copy loop covers {looped}, but it builds {binaries}")
if not re.search(r'ln -s "/\$\w+" "/out/links/\$\w+"', run):
    problems.append("the builder does not link /out/links/<binary> to /<binary>")

# The runtime: binaries to /, links to /usr/local/bin, WORKDIR /, non-root USER.
at_root, links_copied, workdir, user = set(), False, None, None
for keyword, rest in runtime[1]:
    if keyword == "COPY":
        words = [w for w in rest.split() if not w.startswith("--")]
        if "--from=builder" not in rest.split() or len(words) < 2:
            continue
        *sources, destination = words
        if destination == "/":
            for source in sources:
                if source.endswith("/"):
                    problems.append(f"COPY {source} / copies a directory onto the root (copy single files)")
                at_root.add(source.rstrip("/").rsplit("/", 1)[-1])
        elif sources == ["/out/links/"] and destination == "/usr/local/bin/":
            links_copied = True
    elif keyword == "WORKDIR":
        workdir = rest
    elif keyword == "USER":
        user = rest
for binary in binaries:
    if binary not in at_root:
        problems.append(f"{binary} is not copied to the image root /")
if not links_copied:
    problems.append("the runtime does not copy /out/links/ to /usr/local/bin/")
if workdir != "/":
    problems.append(f"the runtime's WORKDIR is {workdir!r}, not '/'")
if user != "65532:65532":
    problems.append(f"the runtime's USER is {user!r}, not 65532:65532 (distroless nonroot)")

# One stage per binary on top of the runtime; none changes the user or working directory.
final = [name for name, base, _ in stages if base == "runtime"]
for name, base, body in stages:
    if base != "runtime":
        continue
    for keyword, rest in body:
        if keyword in ("USER", "WORKDIR"):
            problems.append(f"stage {name} sets {keyword} {rest} (keep the runtime's)")
    entrypoints = [rest for keyword, rest in body if keyword == "ENTRYPOINT"]
    try:
        entrypoint = json.loads(entrypoints[-1]) if entrypoints else None
    except json.JSONDecodeError:
        entrypoint = None
    if entrypoint != [f"/{name}"]:
        problems.append(f"stage {name}: ENTRYPOINT must be [\"/{name}\"], found {entrypoints}")
if sorted(final) != sorted(binaries):
    problems.append(f"stages on the runtime are {final}, binaries are {binaries}")
if not stages or stages[-1][0] != "machine-controller-manager":
    problems.append("the last stage (docker build's default target) must be machine-controller-manager")

if problems:
    for problem in problems:
        print(f"{path}: {problem}", file=sys.stderr)
    sys.exit(1)
print(f"dockerfile ok: {len(binaries)} binaries at / and in /usr/local/bin, WORKDIR /, USER 65532:65532")
PY
