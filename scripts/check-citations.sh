#!/usr/bin/env bash
# The repository stands alone: comments and docs cite sections of docs/ (docs/behaviour.md for
# upstream behaviour, docs/architecture.md for our design rules), never material outside it.
#
# Fails when a tracked file
#   1. cites outside material: DESIGN.md, ../shared, shared/reference, the reference documents
#      (mcm-behaviour.md, webhooks-and-conversion, rust-stack.md, user-pain-points,
#      gardener-deployment.md), a bare section sign followed by a number, a quirk number
#      (Q<n>) instead of its docs/behaviour.md#q<n> link, or a tracker number (the word "issue"
#      followed by a number): a reader of the repository cannot open the tracker, so the text
#      says what it means;
#   2. links to docs/<file>.md#<anchor> (or, inside Markdown, <relative>.md#<anchor> or #<anchor>)
#      where <file> or <anchor> does not exist. Anchors are explicit <a id="..."> tags and
#      GitHub's heading slugs.
set -euo pipefail
cd "$(dirname "$0")/.."
self=scripts/check-citations.sh
status=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

git ls-files -z -- ':!:target/**' ':!:'"$self" |
	while IFS= read -r -d '' f; do
		case "$f" in
		*.rs | *.go | *.md | *.sh | *.yaml | *.yml | *.toml | *.proto | *.tpl | *.txt | *.json | Makefile | */Makefile | Dockerfile) printf '%s\0' "$f" ;;
		esac
	done >"$tmp/files"

# 1. Citations of material outside the repository.
outside='DESIGN\.md|DESIGN §|\.\./shared|/work/shared|shared/reference|mcm-behaviour\.md|webhooks-and-conversion|rust-stack\.md|user-pain-points|gardener-deployment\.md|§ ?[0-9]|\bQ[0-9]{1,2}\b|\b[Ii]ssues? #?[0-9]+'
# Allowed: quirk links written as [quirk Q<n>](...#q<n>) and the quirk list of docs/behaviour.md.
xargs -0 grep -HnE "$outside" <"$tmp/files" |
	sed -E 's/\[quirk Q[0-9]+\]\(/[quirk](/g; s/^(docs\/behaviour\.md:[0-9]+:<a id="q[0-9]+"><\/a>\*\*)Q[0-9]+ /\1/' |
	grep -E "$outside" >"$tmp/outside" || true
if [ -s "$tmp/outside" ]; then
	echo "error: citations of material outside the repository or of issue numbers (link a section of docs/ instead," >&2
	echo "       e.g. docs/behaviour.md#creation-flow or docs/architecture.md#pure-plans):" >&2
	sed 's/^/  /' "$tmp/outside" >&2
	status=1
fi

# Anchors of a Markdown file, one per line: explicit ids and GitHub heading slugs (outside code
# fences; repeated slugs get -1, -2, ...).
anchors() {
	local file=$1 out
	out="$tmp/anchors.$(printf '%s' "$file" | tr '/.' '__')"
	if [ ! -f "$out" ]; then
		{
			grep -oE '<a (name|id)="[^"]+"' "$file" | sed -E 's/.*="([^"]+)"/\1/' || true
			awk '
				/^[ \t]*(```|~~~)/ { fence = !fence; next }
				fence { next }
				/^#+[ \t]/ {
					h = $0
					sub(/^#+[ \t]+/, "", h); sub(/[ \t]+#*[ \t]*$/, "", h)
					h = tolower(h)
					gsub(/[^a-z0-9 _-]/, "", h)
					gsub(/ /, "-", h)
					if (h in seen) { n = seen[h]++; print h "-" n } else { seen[h] = 1; print h }
				}' "$file"
		} >"$out"
	fi
	printf '%s\n' "$out"
}

check_link() { # <citing file:line> <target file> <anchor>
	local where=$1 target=$2 anchor=$3
	if [ ! -f "$target" ]; then
		echo "error: $where: links to $target#$anchor, but $target does not exist" >&2
		return 1
	fi
	if ! grep -qxF -- "$anchor" "$(anchors "$target")"; then
		echo "error: $where: links to $target#$anchor, but $target has no anchor '$anchor'" >&2
		return 1
	fi
}

# 2a. docs/<file>.md#<anchor> anywhere (paths from the repository root).
xargs -0 grep -HnoE 'docs/[A-Za-z0-9_./-]+\.md#[A-Za-z0-9_-]+' <"$tmp/files" >"$tmp/links" || true
count=0
while IFS= read -r hit; do
	where=${hit%:*}
	link=${hit##*:}
	link=docs/${link#*docs/}
	count=$((count + 1))
	check_link "$where" "${link%%#*}" "${link#*#}" || status=1
done <"$tmp/links"

# 2b. Relative links inside Markdown: ](path.md#anchor) and ](#anchor).
while IFS= read -r -d '' md; do
	case "$md" in *.md) ;; *) continue ;; esac
	dir=$(dirname "$md")
	while IFS= read -r hit; do
		line=${hit%%:*}
		link=${hit#*:}
		link=${link#](}
		link=${link%)}
		case "$link" in http:* | https:* | docs/*) continue ;; esac
		path=${link%%#*}
		anchor=${link#*#}
		if [ -z "$path" ]; then
			target=$md
		else
			target=$(realpath -m --relative-to=. "$dir/$path")
		fi
		count=$((count + 1))
		check_link "$md:$line" "$target" "$anchor" || status=1
	done < <(grep -noE '\]\([^)# ]*#[A-Za-z0-9_-]+\)' "$md" || true)
done <"$tmp/files"

[ $status -eq 0 ] && echo "citations: nothing cited outside the repository; $count docs anchor links resolve"
exit $status
