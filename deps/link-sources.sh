#!/usr/bin/env bash
# link-sources.sh TREE_DIR
#
# Places our own files into the patched upstream tree as relative symlinks:
# every file under src/ goes to TREE/src/, every file under tests/ to
# TREE/tests/ (beside upstream's tests, so they use the same helpers).
# Runs on every build; it is cheap and idempotent, and because the tree
# holds links, an edit to one of our files only recompiles that file.
# Links to files that no longer exist in the repository are removed.
# In a git tree (make patch-tree) the links are added to .git/info/exclude
# so they never end up in an exported patch.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
tree=${1:?usage: link-sources.sh TREE_DIR}
[ -d "$tree/src" ] || { echo "link-sources: $tree is not a prepared tree" >&2; exit 1; }
tree=$(cd "$tree" && pwd)

list="$tree/.rdmamig-links"
new=$(mktemp)
for top in src tests; do
    [ -d "$repo/$top" ] || continue
    (cd "$repo" && find "$top" -type f ! -name '*.o' ! -name '*.d') | sort | while read -r f; do
        dst="$tree/$f"
        if [ -e "$dst" ] && [ ! -L "$dst" ]; then
            echo "link-sources: error: $f would replace an upstream file; change upstream files with a patch in patches/" >&2
            exit 1
        fi
        mkdir -p "$(dirname "$dst")"
        [ -L "$dst" ] && [ "$(readlink -f "$dst")" = "$repo/$f" ] || ln -sfr "$repo/$f" "$dst"
        echo "$f"
    done >> "$new"
done
# Drop links whose source was deleted.
if [ -f "$list" ]; then
    comm -23 <(sort "$list") <(sort "$new") | while read -r f; do
        [ -L "$tree/$f" ] && rm -f "$tree/$f"
    done
fi
mv "$new" "$list"
if [ -d "$tree/.git" ]; then
    { echo ".rdmamig-links"; echo "src/upstream_patchlevel.h"; sed 's#^#/#' "$list"; } |
        sort -u > "$tree/.git/info/exclude"
fi
