#!/usr/bin/env bash
# Tests of the build system itself (run by `make test`, suite "ours"):
# the pinned base is verified, the lock's Debian revision is what was fetched
# and a revision the mirror lacks is refused with advice, conflicting patches are reported by name,
# the patch workflow round-trips, BUILD_RDMA rejects bad values, and an
# edit to one of our files rebuilds only that file.
#
# Needs a finished `make` (build/cache and build/redis exist). Prints one
# "[ok]: name" or "[err]: name" line per test; exits non-zero on failure.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
. deps/upstream.env
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

ok() { echo "[ok]: $1"; }
err() { echo "[err]: $1"; shift; printf '  %s\n' "$@"; failed=1; }

# 1. A tarball whose hash is not the pinned one is refused, with advice.
cp build/cache/orig.tar.gz "$work/redis-7.0.15.tar.gz"
printf 'x' >> "$work/redis-7.0.15.tar.gz"
out=$(REDIS_TARBALL="$work/redis-7.0.15.tar.gz" deps/fetch-upstream.sh "$work/cache" 2>&1)
rc=$?
if [ $rc != 0 ] && [[ "$out" == *"expected $UPSTREAM_SHA256"* ]] && [ ! -e "$work/cache/source.env" ]; then
    ok "fetch refuses a tarball with the wrong SHA-256"
else
    err "fetch refuses a tarball with the wrong SHA-256" "rc=$rc" "$out"
fi

# 2. The cached Debian orig tarball still matches the pin.
if [ "$(sha256sum build/cache/orig.tar.gz | cut -d' ' -f1)" = "$DEBIAN_ORIG_SHA256" ]; then
    ok "cached upstream source matches the pinned SHA-256"
else
    err "cached upstream source matches the pinned SHA-256"
fi

# 2b. The cache holds the locked Debian revision, and a lock naming one the
#     mirror does not serve fails before downloading anything, saying what
#     to run. (No download: the revision is looked up in apt's lists.)
. build/cache/source.env
locked=$(sed -n 's/^DEBIAN_REVISION=//p' deps/upstream.lock)
if [ "$SOURCE" != debian ] || [ "$PATCHLEVEL" = "$locked" ]; then
    ok "the fetched Debian revision is the one in deps/upstream.lock ($locked)"
else
    err "the fetched Debian revision is the one in deps/upstream.lock" "source.env: $PATCHLEVEL, lock: $locked"
fi
sed 's/^DEBIAN_REVISION=.*/DEBIAN_REVISION=7.0.15-1~deb12u0/' deps/upstream.lock > "$work/upstream.lock"
out=$(RDMAMIG_UPSTREAM_LOCK="$work/upstream.lock" deps/fetch-upstream.sh "$work/lockcache" 2>&1)
rc=$?
if [ $rc != 0 ] && [[ "$out" == *"pins Debian revision 7.0.15-1~deb12u0"* ]] &&
   [[ "$out" == *"make update-upstream"* ]] && [ ! -e "$work/lockcache/source.env" ] &&
   [ ! -e "$work/lockcache/apt-source" ]; then
    ok "a locked Debian revision the mirror lacks is refused, pointing to make update-upstream"
else
    err "a locked Debian revision the mirror lacks is refused, pointing to make update-upstream" "rc=$rc" "$out"
fi

# 3. A patch of ours that conflicts with a Debian patch stops the build and
#    names that Debian patch. Re-applying Debian's newest CVE fix as if it
#    were ours is a guaranteed conflict on the files it touches.
mkdir -p "$work/deb" "$work/patches"
tar xJf build/cache/debian.tar.xz -C "$work/deb"
victim=$(grep -v -e '^#' -e '^debian-packaging/' "$work/deb/debian/patches/series" | grep CVE | tail -1)
cp "$work/deb/debian/patches/$victim" "$work/patches/0001-conflict.patch"
echo 0001-conflict.patch > "$work/patches/series"
out=$(RDMAMIG_PATCHES_DIR="$work/patches" deps/prepare-tree.sh build/cache "$work/tree" 2>&1)
rc=$?
if [ $rc != 0 ] && [[ "$out" == *"0001-conflict.patch does not apply"* ]] &&
   [[ "$out" == *"$victim"* ]] && [ ! -e "$work/tree" ]; then
    ok "a conflicting patch fails the build and names Debian's $victim"
else
    err "a conflicting patch fails the build and names the Debian patch" "rc=$rc" "$out"
fi

# 4. patch-tree / patch-export round trip: a git checkout with one commit
#    per patch, exported back to identical patches (dates aside).
if deps/prepare-tree.sh build/cache "$work/pt" --git >/dev/null 2>&1; then
    ncommits=$(git -C "$work/pt" rev-list --count base..HEAD)
    nours=$(grep -vc '^#' patches/series)
    mkdir -p "$work/exported"
    RDMAMIG_PATCHES_DIR="$work/exported" utils/patch-export.sh "$work/pt" >/dev/null 2>&1
    if [ "$ncommits" = "$nours" ] &&
       diff -r -I '^Date: ' patches "$work/exported" >"$work/diff" 2>&1; then
        ok "patch-tree has one commit per patch and patch-export round-trips ($nours patches)"
    else
        err "patch-tree/patch-export round trip" "commits=$ncommits patches=$nours" "$(head -20 "$work/diff")"
    fi
else
    err "patch-tree/patch-export round trip" "prepare-tree --git failed"
fi

# 5. BUILD_RDMA only takes auto|yes|no.
out=$(make -C build/redis/src -n BUILD_RDMA=maybe 2>&1)
if [ $? != 0 ] && [[ "$out" == *"BUILD_RDMA must be auto, yes or no (got 'maybe')"* ]]; then
    ok "BUILD_RDMA=maybe is rejected with a clear message"
else
    err "BUILD_RDMA=maybe is rejected with a clear message" "$out"
fi

# 6. Editing one of our files rebuilds that file only: no refetch, no
#    repatch, one compile, then the link. A first make settles what
#    depends on the repository's own state (release.h records its git
#    commit and whether the work tree is dirty).
make >/dev/null 2>&1
touch src/rdmamig.c
out=$(make 2>&1)
rc=$?
plain=$(printf '%s\n' "$out" | sed 's/\x1b\[[0-9;]*m//g')
compiled=$(printf '%s\n' "$plain" | grep -c '^ *CC .*\.o$')
if [ $rc = 0 ] && [[ "$out" != *fetch-upstream* ]] && [[ "$out" != *prepare-tree* ]] &&
   [ "$compiled" = 1 ] && [[ "$plain" == *"CC rdmamig.o"* ]]; then
    ok "editing src/rdmamig.c recompiles only rdmamig.o"
else
    err "editing src/rdmamig.c recompiles only rdmamig.o" "rc=$rc compiled=$compiled" "$out"
fi

exit $failed
