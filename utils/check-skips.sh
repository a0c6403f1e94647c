#!/usr/bin/env bash
# check-skips.sh   (make check-skips)
#
# Shows that every upstream test listed in tests/upstream-skip.txt fails the
# same way without our patches: builds build/vanilla (the same upstream
# source and Debian patches, none of ours), runs each listed unit test
# there and in build/redis (ours), and prints both outcomes side by side.
# Exit status 0 when every listed test fails identically in both trees,
# 1 otherwise (then the entry is wrong: fix the test or our code instead).
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
vanilla="$repo/build/vanilla"
ours="$repo/build/redis"
skips="$repo/tests/upstream-skip.txt"
[ -x "$ours/src/redis-server" ] || { echo "check-skips: run make first" >&2; exit 1; }

stale=0
for f in deps/upstream.env deps/prepare-tree.sh build/cache/source.env; do
    [ "$repo/$f" -nt "$vanilla/.prepared" ] && stale=1
done
if [ $stale = 1 ] || [ ! -x "$vanilla/src/redis-server" ]; then
    empty=$(mktemp -d)
    echo "# no patches" > "$empty/series"
    RDMAMIG_PATCHES_DIR="$empty" "$repo/deps/prepare-tree.sh" "$repo/build/cache" "$vanilla" || exit 1
    rm -rf "$empty"
    make -C "$vanilla" -j"${JOBS:-2}" BUILD_TLS=no > "$repo/build/vanilla.log" 2>&1 ||
        { tail -20 "$repo/build/vanilla.log"; exit 1; }
    touch "$vanilla/.prepared"
fi

# outcome TREE UNIT NAME: "[ok]", "[err]: <first line of the failure>" or
# "[exception]: <message>" (an error that aborts the whole suite)
outcome() {
    local out
    out=$(cd "$1" && ./runtest --clients 1 --single "$2" --only "$3" 2>&1 |
          sed 's/\x1b\[[0-9;]*m//g')
    if printf '%s\n' "$out" | grep -q '^\[ok\]:'; then echo "[ok]"
    elif printf '%s\n' "$out" | grep -q '^\[err\]:'; then
        printf '%s\n' "$out" | grep -A1 -m1 '^\[err\]:' | tail -1 | sed 's/^/[err]: /'
    else
        printf '%s\n' "$out" | grep -m1 '^\[exception\]:' || echo "[none]: the test did not run"
    fi
}

status=0
while IFS= read -r line; do
    name=$(printf '%s\n' "$line" | sed -n 's/^unit: \(.*\) -- .*/\1/p')
    [ -n "$name" ] || continue
    # A /regexp entry is searched for as a pattern ($vars in test names
    # match its wildcards); a plain name literally.
    case "$name" in
        /*) file=$(grep -rlE "test [{\"]${name#/}" "$ours/tests/unit" "$ours/tests/integration" | head -1) ;;
        *) file=$(grep -rlF "test {$name}" "$ours/tests/unit" "$ours/tests/integration" | head -1) ;;
    esac
    [ -n "$file" ] || { echo "check-skips: cannot find the unit of '$name'"; status=1; continue; }
    unit=${file#"$ours/tests/"}; unit=${unit%.tcl}
    a=$(outcome "$vanilla" "$unit" "$name")
    b=$(outcome "$ours" "$unit" "$name")
    echo "$name ($unit)"
    echo "  without our patches: $a"
    echo "  with our patches:    $b"
    if [ "$a" = "[ok]" ] || [ "$a" != "$b" ]; then status=1; echo "  -> NOT the same failure"; fi
done < "$skips"
exit $status
