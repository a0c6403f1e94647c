#!/usr/bin/env bash
# fetch-upstream.sh CACHE_DIR
#
# Obtains the pinned upstream base of this fork into CACHE_DIR and verifies
# it. Nothing fetched here is ever committed: the build re-creates the
# patched tree from these files (deps/prepare-tree.sh).
#
# Default source: Debian bookworm's source package "redis", downloaded with
# `apt-get source --download-only` (apt authenticates it through the signed
# Release files). Debian's mirrors only serve the newest revision of the
# package, so we take whatever is newest and record it; the orig tarball is
# the same in every revision and is pinned by SHA-256 (deps/upstream.env).
#
# Alternative for non-Debian users: REDIS_TARBALL=/path/redis-7.0.15.tar.gz
# (upstream's release tarball, also pinned by SHA-256). Debian's security
# patches are then not applied, and the build says so.
#
# Output, in CACHE_DIR:
#   orig.tar.gz     the verified upstream source
#   debian.tar.xz   Debian's packaging (patches) -- Debian source only
#   source.env      SOURCE=debian|upstream, PATCHLEVEL=<revision applied>
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/upstream.env"
cache=${1:?usage: fetch-upstream.sh CACHE_DIR}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

die() { echo "fetch-upstream: error: $*" >&2; exit 1; }
say() { echo "fetch-upstream: $*"; }

sha256() { sha256sum "$1" | cut -d' ' -f1; }

if [ -n "${REDIS_TARBALL:-}" ]; then
    [ -f "$REDIS_TARBALL" ] || die "REDIS_TARBALL=$REDIS_TARBALL does not exist"
    got=$(sha256 "$REDIS_TARBALL")
    [ "$got" = "$UPSTREAM_SHA256" ] || die "$REDIS_TARBALL has SHA-256 $got,
expected $UPSTREAM_SHA256 ($UPSTREAM_TARBALL).
Download $UPSTREAM_TARBALL from the Redis release archive again, or unset
REDIS_TARBALL to use Debian's source package."
    cp "$REDIS_TARBALL" "$cache/orig.tar.gz"
    rm -f "$cache/debian.tar.xz"
    printf 'SOURCE=upstream\nPATCHLEVEL=%s\n' "$REDIS_VERSION-upstream" > "$cache/source.env"
    say "using upstream tarball $REDIS_TARBALL (verified); no Debian patches"
    exit 0
fi

command -v apt-get >/dev/null ||
    die "apt-get not found. On a non-Debian system, download $UPSTREAM_TARBALL
(SHA-256 $UPSTREAM_SHA256) and run: REDIS_TARBALL=/path/to/$UPSTREAM_TARBALL make"

# apt-get source needs a deb-src entry. Add one for the configured Debian
# mirrors when we are root; otherwise say exactly what to run.
have_src() { apt-cache showsrc "$DEBIAN_SOURCE_PACKAGE" 2>/dev/null | grep '^Version:' >/dev/null; }
if ! have_src; then
    if [ "$(id -u)" = 0 ]; then
        if [ -f /etc/apt/sources.list.d/debian.sources ] &&
           grep -q '^Types: deb$' /etc/apt/sources.list.d/debian.sources; then
            say "adding deb-src to /etc/apt/sources.list.d/debian.sources"
            sed -i 's/^Types: deb$/Types: deb deb-src/' /etc/apt/sources.list.d/debian.sources
        elif [ -f /etc/apt/sources.list ] && grep -q '^deb ' /etc/apt/sources.list; then
            say "adding deb-src lines to /etc/apt/sources.list"
            grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' >> /etc/apt/sources.list
        fi
        apt-get update -qq || true
    fi
    have_src || die "no deb-src entry for Debian's '$DEBIAN_SOURCE_PACKAGE' source package.
As root, run:
  sed -i 's/^Types: deb\$/Types: deb deb-src/' /etc/apt/sources.list.d/debian.sources && apt-get update
(or add 'deb-src' lines to /etc/apt/sources.list), then run make again."
fi

dl="$cache/apt-source"
rm -rf "$dl" && mkdir -p "$dl"
say "downloading Debian source package '$DEBIAN_SOURCE_PACKAGE' (newest revision)"
(cd "$dl" && apt-get source --download-only "$DEBIAN_SOURCE_PACKAGE" >apt-source.log 2>&1) || {
    cat "$dl/apt-source.log" >&2
    die "apt-get source --download-only $DEBIAN_SOURCE_PACKAGE failed (see above); try 'apt-get update' as root"
}

dsc=$(ls "$dl"/*.dsc 2>/dev/null | head -1)
[ -n "$dsc" ] || die "apt-get source downloaded no .dsc file"
revision=$(sed -n 's/^Version: //p' "$dsc" | head -1)
revision=${revision#*:}      # drop the epoch: 5:7.0.15-1~deb12u10 -> 7.0.15-1~deb12u10
case "$revision" in
    "$REDIS_VERSION"-*) ;;
    *) die "Debian's '$DEBIAN_SOURCE_PACKAGE' is now version $revision, not $REDIS_VERSION.
Our patches are for $REDIS_VERSION: build from upstream's tarball instead
(REDIS_TARBALL=/path/to/$UPSTREAM_TARBALL make), or rebase patches/." ;;
esac

orig="$dl/$DEBIAN_ORIG_TARBALL"
[ -f "$orig" ] || die "the source package has no $DEBIAN_ORIG_TARBALL"
got=$(sha256 "$orig")
[ "$got" = "$DEBIAN_ORIG_SHA256" ] || die "$DEBIAN_ORIG_TARBALL has SHA-256 $got,
expected $DEBIAN_ORIG_SHA256.
Refusing to build on an unverified base. Remove $cache and retry; if the
mismatch persists, Debian changed the tarball: check the package's changelog
and update DEBIAN_ORIG_SHA256 in deps/upstream.env only after reviewing it."

deb=$(ls "$dl"/*.debian.tar.* 2>/dev/null | head -1)
[ -n "$deb" ] || die "the source package has no debian.tar.* file"
# apt verified the .dsc against the signed Release files; check the
# packaging tarball against the .dsc too, so a stale cache cannot slip in.
want=$(awk '/^Checksums-Sha256:/{on=1;next} /^[^ ]/{on=0} on{print $1, $3}' "$dsc" |
       awk -v f="$(basename "$deb")" '$2==f{print $1}')
[ -n "$want" ] && [ "$want" = "$(sha256 "$deb")" ] ||
    die "$(basename "$deb") does not match the checksum in $(basename "$dsc")"

cp "$orig" "$cache/orig.tar.gz"
cp "$deb" "$cache/debian.tar.xz"
printf 'SOURCE=debian\nPATCHLEVEL=%s\n' "$revision" > "$cache/source.env"
say "verified $DEBIAN_ORIG_TARBALL (SHA-256 $DEBIAN_ORIG_SHA256)"
say "Debian revision: $revision"
