#!/usr/bin/env bash
# build-tree.sh      (tests/fuzz/fuzz.mk runs it for the migpatch target)
#
# A second build of the patched upstream tree, for fuzzing what needs the
# server's objects (src/slotblocks.c): build/fuzz/redis, prepared like
# build/redis (deps/prepare-tree.sh, our sources linked in) and compiled
# with clang, ASan, UBSan and libFuzzer's coverage, with libc malloc
# (MALLOC=libc: ASan then sees every heap allocation; the slot allocator
# maps its own blocks and needs no jemalloc; only slot compaction, which
# the fuzz targets do not use, needs jemalloc's defrag hooks). Then:
#   build/fuzz/redis-server-nomain.o   server.o with main() renamed
#                                      redisServerMain (libFuzzer has main)
#   build/fuzz/redis-link.txt          every other object of redis-server,
#                                      the deps' archives and the libraries
#                                      it links, for the harness's link line
# Rebuilds only what changed, as make does for build/redis.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
tree=build/fuzz/redis
cc=${FUZZ_CC:-clang}
jobs=${JOBS:-2}
flags=(CC="$cc" MALLOC=libc OPTIMIZATION=-O1 BUILD_TLS=no BUILD_RDMA=no
       CFLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
       LDFLAGS="-fsanitize=address,undefined")

# Prepared again when the base or a patch changed, as make does for
# build/redis ($(TREE)/.prepared).
stamp=$tree/.prepared
if [ ! -f "$stamp" ] || [ -n "$(find patches deps/prepare-tree.sh deps/upstream.env build/cache/source.env \
        -newer "$stamp" 2>/dev/null | head -1)" ]; then
    rm -rf "$tree"
    deps/prepare-tree.sh build/cache "$tree"
    touch "$stamp"
fi
deps/link-sources.sh "$tree"
make -C "$tree/src" -j"$jobs" "${flags[@]}" redis-server

# What the redis-server link line holds, as the tree's Makefile computes it.
vars=$(make -s -C "$tree/src" "${flags[@]}" -f Makefile -f "$repo/tests/fuzz/tree-vars.mk" \
    fuzz-print-REDIS_SERVER_OBJ fuzz-print-FINAL_LIBS)
objs=$(echo "$vars" | sed -n 1p)
libs=$(echo "$vars" | sed -n 2p)
objcopy --redefine-sym main=redisServerMain "$tree/src/server.o" build/fuzz/redis-server-nomain.o
{
    for o in $objs; do [ "$o" = server.o ] || printf '%s ' "$tree/src/$o"; done
    printf '%s ' build/fuzz/redis-server-nomain.o
    printf '%s ' "$tree"/deps/hiredis/libhiredis.a "$tree"/deps/lua/src/liblua.a \
        "$tree"/deps/hdr_histogram/libhdrhistogram.a
    echo "$libs"
} > build/fuzz/redis-link.txt.tmp
mv build/fuzz/redis-link.txt.tmp build/fuzz/redis-link.txt
