#!/usr/bin/env bash
# patch-export.sh [TREE_DIR]   (make patch-export)
#
# Turns the commits of the patch tree made by `make patch-tree` (default
# build/patch-tree) back into patches/: one `git format-patch` file per
# commit after the "base" tag (upstream + Debian's patches), numbered in
# order, and patches/series listing them. Old patch files are replaced.
# Commit messages become the patches' descriptions, so write them well.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=${1:-$repo/build/patch-tree}
patches=${RDMAMIG_PATCHES_DIR:-$repo/patches}   # overridable for tests
[ -d "$tree/.git" ] || { echo "patch-export: $tree is not a patch tree; run 'make patch-tree' first" >&2; exit 1; }
git -C "$tree" rev-parse -q --verify base >/dev/null ||
    { echo "patch-export: $tree has no 'base' tag" >&2; exit 1; }
if [ -n "$(git -C "$tree" status --porcelain --untracked-files=no)" ]; then
    echo "patch-export: $tree has uncommitted changes; commit them (one commit per patch) first" >&2
    exit 1
fi
out=$(mktemp -d)
git -C "$tree" format-patch -q --no-signature --zero-commit --no-stat -N \
    --abbrev=12 -o "$out" base..HEAD
rm -f "$patches"/*.patch
{
    echo "# Our patches to upstream files, applied in this order after Debian's"
    echo "# security patches (deps/prepare-tree.sh). Edit them with"
    echo "# 'make patch-tree' and 'make patch-export' (see README.md)."
    for f in "$out"/*.patch; do
        [ -e "$f" ] || continue
        mv "$f" "$patches/"
        basename "$f"
    done
} > "$patches/series"
rm -rf "$out"
echo "patch-export: wrote $(grep -vc '^#' "$patches/series") patches to patches/"
