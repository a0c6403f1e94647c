#!/bin/sh
# tests/rdma/smoke.sh -- RDMA WRITE smoke test over SoftRoCE.
#
# Runs INSIDE an rxe-vm guest, from the repository root:
#
#   mkdir -p bin
#   cc -O2 -Wall -Wextra -Werror -o bin/rdma-smoke tests/tools/rdmasmoke.c -libverbs -lrdmacm
#   utils/rxe-vm/rxe-vm --ips 4 --cpus 2 --timeout 600 -- sh tests/rdma/smoke.sh
#   (or simply: make test-rdma, which runs tests/rdma/run.sh)
#
# Needs the rxe device rxe0 with 10.99.0.1 and 10.99.0.2 on its netdev (what
# rxe-vm sets up). For each case it starts `rdma-smoke server` on 10.99.0.1
# in the background, runs `rdma-smoke client` from 10.99.0.2 against it and
# checks both exit codes and logs:
#   default  256 WRs in one chain, every byte verified
#   split    256 WRs cut into 16 chains by --max-chain 16, verified
#   corrupt  one byte flipped on purpose: both sides must exit 3 and name
#            the offset (the verifier is not vacuous)
#   no-server  a client with nobody listening must fail
# Every process runs under timeout(1), so the script cannot hang.
#
# Environment: RDMA_SMOKE_BIN (default bin/rdma-smoke), RDMA_SMOKE_TIMEOUT
# (seconds per process, default 120).

BIN=${RDMA_SMOKE_BIN:-bin/rdma-smoke}
PTIMEOUT=${RDMA_SMOKE_TIMEOUT:-120}
SERVER_IP=10.99.0.1
CLIENT_IP=10.99.0.2
passed=0
failed=0

say() { echo "rdma smoke: $*"; }
die() { echo "rdma smoke: FATAL: $*" >&2; exit 1; }

[ -x "$BIN" ] || die "$BIN not found or not executable (build it first, see the header of $0)"
command -v timeout >/dev/null 2>&1 || die "timeout(1) not found"

say "ibv_devices:"
ibv_devices 2>&1 | sed 's/^/    /'
say "rdma link:"
rdma link show 2>&1 | sed 's/^/    /'
if ! ibv_devices 2>/dev/null | grep -qw rxe0 && [ ! -e /sys/class/infiniband/rxe0 ]; then
    die "RDMA device rxe0 not present: run this inside utils/rxe-vm/rxe-vm"
fi
for ip in $SERVER_IP $CLIENT_IP; do
    ip -4 addr show 2>/dev/null | grep -q "inet $ip/" ||
        die "address $ip not configured (need rxe-vm --ips 2 or more)"
done

LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/rdma-smoke.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$LOGDIR"' EXIT

# Wait until the server logged that it listens (or died), at most 30 s.
wait_listening() {
    log=$1 pid=$2 n=0
    while [ $n -lt 150 ]; do
        grep -q "listening on" "$log" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.2
        n=$((n + 1))
    done
    return 1
}

# run_case NAME PORT 'CLIENT ARGS' WANT_EXIT 'CLIENT LOG ERE' 'SERVER LOG ERE'
# Both processes must exit with WANT_EXIT and log lines matching the EREs;
# a passing case (WANT_EXIT 0) must also show the OK verdict on both sides.
run_case() {
    name=$1 port=$2 cargs=$3 want=$4 cexpect=$5 sexpect=$6
    slog="$LOGDIR/$name.server" clog="$LOGDIR/$name.client"
    say "=== case $name: client ${cargs:-(default options)}"
    timeout "$PTIMEOUT" "$BIN" server --bind $SERVER_IP --port "$port" >"$slog" 2>&1 &
    spid=$!
    if wait_listening "$slog" $spid; then
        # shellcheck disable=SC2086 # cargs is a list of options
        timeout "$PTIMEOUT" "$BIN" client --bind $CLIENT_IP --connect $SERVER_IP \
            --port "$port" $cargs >"$clog" 2>&1
        crc=$?
    else
        echo "server did not start listening" >"$clog"
        crc=125
        kill "$spid" 2>/dev/null
    fi
    wait $spid
    src=$?
    sed 's/^/    /' "$slog"
    sed 's/^/    /' "$clog"
    why=""
    [ $src -eq "$want" ] || why="$why server exit $src (want $want);"
    [ $crc -eq "$want" ] || why="$why client exit $crc (want $want);"
    if [ "$want" -eq 0 ]; then
        grep -Eq "verified [0-9]+ bytes: OK" "$slog" || why="$why no 'verified ... OK' from the server;"
        grep -Eq "verdict: verified [0-9]+ bytes: OK" "$clog" || why="$why client did not get an OK verdict;"
    fi
    grep -Eq "$cexpect" "$clog" || why="$why client log lacks /$cexpect/;"
    grep -Eq "$sexpect" "$slog" || why="$why server log lacks /$sexpect/;"
    if [ -z "$why" ]; then
        say "case $name: PASS (server exit $src, client exit $crc)"
        passed=$((passed + 1))
    else
        say "case $name: FAIL:$why"
        failed=$((failed + 1))
    fi
}

# Default: 256 WRs of 16 KiB; rxe's send queue holds them all, one chain.
run_case default 7471 "" 0 \
    "posted 256 RDMA WRITE WRs in 1 chain\(s\) \(only last of each chain signaled\)" \
    "verified 4194304 bytes: OK"

# Forced small chain limit: 256 WRs must go out as 16 chains of 16.
run_case split 7472 "--wrs 256 --max-chain 16" 0 \
    "posted 256 RDMA WRITE WRs in 16 chain\(s\) \(only last of each chain signaled\)" \
    "verified 4194304 bytes: OK"

# One flipped byte must be caught, at the right offset, by both sides.
run_case corrupt 7473 "--max-chain 100 --corrupt-at 1234567" 3 \
    "MISMATCH, first bad byte at offset 1234567" \
    "first mismatch at offset 1234567 .* 1 of 4194304 bytes differ"

# Nobody listening: the client must fail, not pass vacuously.
say "=== case no-server: client against a port nobody listens on"
nlog="$LOGDIR/no-server.client"
timeout "$PTIMEOUT" "$BIN" client --bind $CLIENT_IP --connect $SERVER_IP \
    --port 7479 --timeout 10 >"$nlog" 2>&1
nrc=$?
sed 's/^/    /' "$nlog"
if [ $nrc -ne 0 ] && [ $nrc -ne 124 ] && grep -q "ERROR" "$nlog"; then
    say "case no-server: PASS (client failed as it should, exit $nrc)"
    passed=$((passed + 1))
else
    say "case no-server: FAIL (client exit $nrc, want a non-zero exit with an error)"
    failed=$((failed + 1))
fi

say "$passed passed, $failed failed"
[ $failed -eq 0 ]
