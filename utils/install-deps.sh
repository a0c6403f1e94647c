#!/usr/bin/env bash
# install-deps.sh [build|test|rdma|fuzz|all|bench]
#
# Installs the Debian 12 packages the build, the tests, the fuzz targets
# (clang with its sanitizer and libFuzzer runtimes: `make fuzz`) and the RDMA
# tests need, and makes sure apt has a deb-src entry (for `apt-get source
# redis`).
# "bench" adds what utils/bench/rebalance needs (Java + Maven for YCSB and
# its binding, matplotlib for the plots); it is not part of "all", so CI
# (.ci/run, which installs "all") never installs or runs the benchmark.
# Only what is missing is installed; nothing happens when all is present.
# Needs root when something is missing; otherwise prints the apt command.
set -euo pipefail
what=${1:-all}

pkgs_build="build-essential pkg-config python3 libibverbs-dev librdmacm-dev libxxhash-dev ca-certificates"
pkgs_test="tcl procps valgrind"
pkgs_rdma="rdma-core ibverbs-providers ibverbs-utils qemu-system-x86 busybox-static kmod cpio iproute2"
pkgs_bench="openjdk-17-jdk-headless maven python3-matplotlib util-linux"
# clang's -fsanitize=fuzzer,address,undefined links libclang_rt.* from
# libclang-rt-14-dev (a Recommends of clang, so named here).
pkgs_fuzz="clang libclang-rt-14-dev"
case "$what" in
    build) want="$pkgs_build" ;;
    test) want="$pkgs_build $pkgs_test" ;;
    rdma) want="$pkgs_build $pkgs_test $pkgs_rdma" ;;
    fuzz) want="$pkgs_build $pkgs_fuzz" ;;
    all) want="$pkgs_build $pkgs_test $pkgs_rdma $pkgs_fuzz" ;;
    bench) want="$pkgs_build $pkgs_bench" ;;
    *) echo "usage: install-deps.sh [build|test|rdma|fuzz|all|bench]" >&2; exit 2 ;;
esac

missing=()
for p in $want; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "install-deps: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
