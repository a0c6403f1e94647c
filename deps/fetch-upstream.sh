#!/usr/bin/env bash
# fetch-upstream.sh CACHE_DIR [--update]
#
# Obtains the pinned upstream base of this fork into CACHE_DIR and verifies
# it. Nothing fetched here is ever committed: the build re-creates the
# patched tree from these files (deps/prepare-tree.sh).
#
# Default source: Debian bookworm's source package "redis", downloaded with
# `apt-get source --download-only` (apt authenticates it through the signed
# Release files). The orig tarball is the same in every Debian revision and
# is pinned by SHA-256 (deps/upstream.env); the Debian revision is pinned by
# deps/upstream.lock (DEBIAN_REVISION and the SHA-256 of its .dsc and
# debian.tar.xz), so a checkout builds the same upstream every time and
# tests/upstream-skip.txt matches it. Debian's mirrors serve only the newest
# revision of each suite: once the locked one is gone, this fails and says
# to run `make update-upstream`.
#
#   (no option)  fetch exactly the locked revision; without a lock file,
#                take the newest revision apt knows and write the lock
#   --update     take the newest revision on the mirror and rewrite the lock
#                (`make update-upstream`), printing the old and new revision
#
# Alternative for non-Debian users: REDIS_TARBALL=/path/redis-7.0.15.tar.gz
# (upstream's release tarball, also pinned by SHA-256). Debian's security
# patches are then not applied, and the build says so; the lock is unused.
#
# Output, in CACHE_DIR:
#   orig.tar.gz     the verified upstream source
#   debian.tar.xz   Debian's packaging (patches) -- Debian source only
#   source.env      SOURCE=debian|upstream, PATCHLEVEL=<revision applied>
#   update.txt      --update only: the old -> new revision, for the Makefile
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/upstream.env"
usage="usage: fetch-upstream.sh CACHE_DIR [--update]"
cache=${1:?$usage}
mode=${2:-locked}
case "$mode" in locked|--update) ;; *) echo "$usage" >&2; exit 2 ;; esac
# The lock file; its path is overridable for the build-system tests.
lock=${RDMAMIG_UPSTREAM_LOCK:-$here/upstream.lock}
lockname=deps/upstream.lock
[ "$lock" = "$here/upstream.lock" ] || lockname=$lock
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

die() { echo "fetch-upstream: error: $*" >&2; exit 1; }
say() { echo "fetch-upstream: $*"; }

sha256() { sha256sum "$1" | cut -d' ' -f1; }

if [ -n "${REDIS_TARBALL:-}" ]; then
    [ "$mode" = locked ] || die "REDIS_TARBALL is set: --update (make update-upstream) moves the
Debian revision, which a build from upstream's tarball does not use. Unset REDIS_TARBALL."
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

# The lock: KEY=value lines, read (never sourced).
lockval() { sed -n "s/^$1=//p" "$lock" | tail -1; }
locked=""
refresh=yes     # apt-get update first, to see the mirror's newest (--update)
if [ -f "$lock" ]; then
    locked=$(lockval DEBIAN_REVISION)
    lock_dsc=$(lockval DEBIAN_DSC_SHA256)
    lock_deb=$(lockval DEBIAN_TARBALL_SHA256)
    [ -n "$locked" ] && [ -n "$lock_dsc" ] && [ -n "$lock_deb" ] ||
        die "$lockname lacks DEBIAN_REVISION, DEBIAN_DSC_SHA256 or DEBIAN_TARBALL_SHA256.
Restore it (git checkout $lockname), or run make update-upstream to take the
newest Debian revision and write it again."
elif [ "$mode" = locked ]; then
    say "no $lockname: taking the newest Debian revision and writing the lock"
    mode=--update refresh=no
fi

# The versions apt knows of the source package (every suite: bookworm and
# bookworm-security), as "epoch:version". apt-get source needs the epoch;
# the lock, like source.env, has none.
available() { apt-cache showsrc "$DEBIAN_SOURCE_PACKAGE" 2>/dev/null | sed -n 's/^Version: //p' | sort -u; }
newest() {
    local n="" v
    for v in $(available); do
        if [ -z "$n" ] || dpkg --compare-versions "$v" gt "$n"; then n=$v; fi
    done
    echo "$n"
}
noepoch() { echo "${1#*:}"; }     # 5:7.0.15-1~deb12u10 -> 7.0.15-1~deb12u10
find_locked() {
    local v
    for v in $(available); do
        if [ "$(noepoch "$v")" = "$locked" ]; then echo "$v"; return; fi
    done
}
# Is the locked revision newer than anything apt knows (its lists are old)?
lock_ahead() {
    local n; n=$(newest)
    [ -z "$n" ] || dpkg --compare-versions "$locked" gt "$(noepoch "$n")"
}

if [ "$mode" = --update ]; then
    # The newest on the mirror, not in apt's lists of some days ago.
    if [ $refresh = no ]; then
        :
    elif [ "$(id -u)" = 0 ]; then
        say "apt-get update (to see the newest revision on the mirror)"
        apt-get update -qq || say "apt-get update failed; using apt's current lists"
    else
        say "not root: apt's lists may be old (apt-get update as root refreshes them)"
    fi
    want=$(newest)
    [ -n "$want" ] || die "apt knows no version of the '$DEBIAN_SOURCE_PACKAGE' source package"
else
    want=$(find_locked)
    if [ -z "$want" ] && [ "$(id -u)" = 0 ] && lock_ahead; then
        say "apt's lists do not have the locked revision $locked yet: apt-get update"
        apt-get update -qq || true
        want=$(find_locked)
    fi
    if [ -z "$want" ]; then
        has=$(for v in $(available); do noepoch "$v"; done | sort -V -r | paste -sd' ')
        if lock_ahead; then
            die "$lockname pins Debian revision $locked of '$DEBIAN_SOURCE_PACKAGE', newer than
any apt knows (${has:-none}): apt's lists are out of date. As root, run
  apt-get update
then run make again."
        fi
        die "$lockname pins Debian revision $locked of '$DEBIAN_SOURCE_PACKAGE',
but the mirror no longer serves it (Debian keeps only the newest revision of
each suite). The mirror has: $has (newest: $(noepoch "$(newest)")).
Run \`make update-upstream\` to move to it (then rerun make test: the skip
list, tests/upstream-skip.txt, may need review), and commit $lockname."
    fi
fi
revision=$(noepoch "$want")
case "$revision" in
    "$REDIS_VERSION"-*) ;;
    *) die "Debian's '$DEBIAN_SOURCE_PACKAGE' is now version $revision, not $REDIS_VERSION.
Our patches are for $REDIS_VERSION: build from upstream's tarball instead
(REDIS_TARBALL=/path/to/$UPSTREAM_TARBALL make), or rebase patches/." ;;
esac

dl="$cache/apt-source"
rm -rf "$dl" && mkdir -p "$dl"
if [ "$mode" = locked ]; then from="locked in $lockname"; else from="newest on the mirror"; fi
say "downloading Debian source package '$DEBIAN_SOURCE_PACKAGE' revision $revision ($from)"
(cd "$dl" && apt-get source --download-only "$DEBIAN_SOURCE_PACKAGE=$want" >apt-source.log 2>&1) || {
    cat "$dl/apt-source.log" >&2
    die "apt-get source --download-only $DEBIAN_SOURCE_PACKAGE=$want failed (see above); try 'apt-get update' as root"
}

dsc="$dl/${DEBIAN_SOURCE_PACKAGE}_$revision.dsc"
[ -f "$dsc" ] || die "apt-get source downloaded no $(basename "$dsc")"
got=$(sed -n 's/^Version: //p' "$dsc" | head -1)
[ "$got" = "$want" ] || die "$(basename "$dsc") is version $got, not $want"

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
want_deb=$(awk '/^Checksums-Sha256:/{on=1;next} /^[^ ]/{on=0} on{print $1, $3}' "$dsc" |
           awk -v f="$(basename "$deb")" '$2==f{print $1}')
got_dsc=$(sha256 "$dsc")
got_deb=$(sha256 "$deb")
[ -n "$want_deb" ] && [ "$want_deb" = "$got_deb" ] ||
    die "$(basename "$deb") does not match the checksum in $(basename "$dsc")"

# The locked revision must be, byte for byte, what the lock recorded: Debian
# never re-uploads a revision with other contents.
check_lock() {  # FILE GOT EXPECTED KEY
    [ "$2" = "$3" ] || die "$(basename "$1") (Debian revision $revision) has SHA-256
  $2
but $lockname expects ($4)
  $3
Refusing to build on an unverified base. If $lockname was edited by hand,
restore it (git checkout $lockname). If it is the committed one, the mirror
served other contents under the locked revision: find out why before
running make update-upstream."
}
if [ "$mode" = locked ]; then
    check_lock "$dsc" "$got_dsc" "$lock_dsc" DEBIAN_DSC_SHA256
    check_lock "$deb" "$got_deb" "$lock_deb" DEBIAN_TARBALL_SHA256
fi

cp "$orig" "$cache/orig.tar.gz"
cp "$deb" "$cache/debian.tar.xz"

# --update: (re)write the lock, before source.env, so that source.env stays
# newer than the lock the Makefile makes it depend on.
if [ "$mode" = --update ]; then
    new=$(mktemp "$lock.XXXXXX")
    {
        echo "# Written by deps/fetch-upstream.sh (\`make update-upstream\`); do not edit."
        echo "# The Debian revision of the source package \"$DEBIAN_SOURCE_PACKAGE\" that the build"
        echo "# applies and the SHA-256 of its files: make fetches exactly this revision"
        echo "# and refuses other contents. tests/upstream-skip.txt matches this revision."
        echo "DEBIAN_REVISION=$revision"
        echo "DEBIAN_DSC_SHA256=$got_dsc"
        echo "DEBIAN_TARBALL_SHA256=$got_deb"
    } > "$new"
    chmod 644 "$new"
    p=update-upstream; [ $refresh = yes ] || p=fetch-upstream
    if [ -f "$lock" ] && cmp -s "$new" "$lock"; then
        rm -f "$new"
        msg="$p: Debian revision $locked -> $revision (the newest): unchanged, $lockname is up to date"
    else
        mv -f "$new" "$lock"
        msg="$p: Debian revision ${locked:-(none locked)} -> $revision: wrote $lockname.
$p: run make test (tests/upstream-skip.txt may need review), then commit $lockname."
    fi
    printf '%s\n' "$msg" > "$cache/update.txt"
    printf '%s\n' "$msg"
fi

printf 'SOURCE=debian\nPATCHLEVEL=%s\n' "$revision" > "$cache/source.env"
say "verified $DEBIAN_ORIG_TARBALL (SHA-256 $DEBIAN_ORIG_SHA256)"
if [ "$mode" = locked ]; then
    say "Debian revision: $revision (locked in $lockname, SHA-256 verified)"
else
    say "Debian revision: $revision"
fi
