#!/usr/bin/env bash
# Tests of the block transport's TCP implementation (src/xfertcp.c),
# natively, with bin/migtransport-test (src/migtransporttest.c): run by
# `make test` (suite "ours") like every tests/build/*.sh.
#
# Every case of the tool once natively, then once more under valgrind (no
# invalid access, no leak, in both the recipient and the forked donor).
# Prints one "[ok]: ..." or "[err]: ..." line per case; exits non-zero on
# failure. Ports: 45100-45299 (MIGTEST_PORT_BASE moves them).
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
bin=bin/migtransport-test
base=${MIGTEST_PORT_BASE:-45100}
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

if [ ! -x "$bin" ]; then
    echo "[err]: migtransport: $bin not built (run make)"
    exit 1
fi

# run NAME EXPECT-ERE CMD...: the command must exit 0, print PASS and match
# EXPECT-ERE.
run() {
    local name=$1 expect=$2
    shift 2
    local try rc
    for try in 1 2 3 4 5 6 7 8; do
        timeout 120 "$@" > "$log" 2>&1
        rc=$?
        # The port was taken: the machine's ephemeral port range covers
        # ours, and any program's outgoing connections (in TIME_WAIT) can
        # hold it. Move to another port of 45100-45999 and retry.
        grep -q 'Address already in use' "$log" || break
        # (Every command below ends with --port PORT.)
        port=$((base + RANDOM % (46000 - base)))
        local a=("$@")
        a[-1]=$port
        set -- "${a[@]}"
    done
    if [ $rc = 0 ] && grep -q ': PASS$' "$log" && grep -Eq "$expect" "$log"; then
        echo "[ok]: migtransport tcp: $name"
    else
        echo "[err]: migtransport tcp: $name (exit $rc)"
        sed 's/^/    /' "$log" | tail -25
        failed=1
    fi
}

# Each case its own port: $port is bumped by next_port (not in a subshell).
port=$base
next_port() { port=$((port + 1)); }

# Natively.
next_port
run "happy path: every byte of 48 blocks verified (807 segments in 2 calls, 3 writevs)" \
    'verified every byte of 48 blocks.*guards intact' \
    $bin --case happy --port "$port"
next_port
run "happy path, 200 blocks of 1..400 segments, another seed" \
    'verified every byte of 200 blocks' \
    $bin --case happy --blocks 200 --pieces 400 --seed 7 --port "$port"
# Long segments (read straight into the blocks past the recipient's
# 256 KiB read-ahead) mixed with short ones (parsed from it).
next_port
run "happy path, 64 MiB in few and long segments" \
    'verified every byte of [0-9]+ blocks \(67108864 bytes\)' \
    $bin --case happy --blocks 4 --total 64m --pieces 3 --seed 3 --port "$port"
next_port
run "kind auto picks TCP without an RDMA device, and says why" \
    'auto chose tcp: rdma: .*(no RDMA device|not an address of an RDMA device|no RDMA support)' \
    $bin --case happy --kind auto --port "$port"
next_port
run "wrong token refused on both ends, the same accept then takes the right donor" \
    'recipient\] wrong token refused: "tcp: token mismatch' \
    $bin --case wrong-token --port "$port"
# Strangers on the data port before the donor: each is dropped, the
# listener keeps accepting, the donor gets in well before the I/O timeout.
next_port
run "a stranger sending 48 random bytes is dropped, the donor then accepted" \
    'recipient\] accepted the donor after [0-9]+ ms, 1 strangers dropped, the last: "tcp: .* do not start a migration HELLO' \
    $bin --case stranger-garbage --port "$port"
next_port
run "a stranger with a wrong token gets BAD_TOKEN and is dropped, the donor then accepted" \
    'recipient\] accepted the donor after [0-9]+ ms, 1 strangers dropped, the last: "tcp: token mismatch' \
    $bin --case stranger-token --port "$port"
next_port
run "a stranger closing after 5 bytes is dropped, the donor then accepted" \
    'recipient\] accepted the donor after [0-9]+ ms, 1 strangers dropped, the last: "tcp: .* closed the connection after 5 of the 48 bytes' \
    $bin --case stranger-short --port "$port"
next_port
run "a silent stranger is dropped after the handshake bound, another does not delay the donor" \
    'second silent stranger was dropped' \
    $bin --case stranger-silent --port "$port"
next_port
run "a flood of ~1000 connect-and-close per second: the donor accepted, transfer verified" \
    'flood: [0-9]+ connections .*\(ok\)' \
    $bin --case flood --port "$port"
next_port
run "no listener: connect fails with a clear error" \
    'Connection refused \(no listener\)' \
    $bin --case no-listener --port "$port"
next_port
run "donor killed mid-transfer: recipient errors before its timeout, guards intact" \
    'donor killed mid-transfer: "tcp: .*closed the connection' \
    $bin --case kill-donor --port "$port"
next_port
run "recipient killed: donor errors before its timeout" \
    'recipient killed: "tcp: ' \
    $bin --case kill-recipient --port "$port"
next_port
run "lying peer: block id out of range refused, nothing written" \
    'peer sent block id 51 but only 48 blocks are registered' \
    $bin --case lie-block --port "$port"
next_port
run "lying peer: offset past the block refused, nothing written" \
    'peer sent offset [0-9]+ in block 0' \
    $bin --case lie-offset --port "$port"
next_port
run "lying peer: length past the block refused, nothing written" \
    'past its end' \
    $bin --case lie-length --port "$port"
next_port
run "lying peer: summary that does not add up refused" \
    'does not add up: the summary claims' \
    $bin --case lie-summary --port "$port"
next_port
run "lying peer: more bytes into a block than it is to receive refused" \
    'peer sent 16 more bytes into block 0, which already holds' \
    $bin --case lie-overfill --port "$port"
next_port
run "forged descriptor past the block: the recipient refuses, guards intact" \
    'donor writing past its block: "tcp: peer sent [0-9]+ bytes at offset 0 of block 0 .*past its end' \
    $bin --case rdma-overrun --port "$port"
next_port
run "timeouts: accept with nobody connecting, silent donor" \
    'silent donor: "tcp: timeout after 1500 ms waiting for the donor' \
    $bin --case timeout --port "$port"
next_port
run "accept in waits of 1 ms: the token's handshake carries over, transfer verified" \
    'accepted after [0-9]+ waits of 1 ms' \
    $bin --case short-waits --port "$port"

# Under valgrind (smaller data: valgrind is ~20x slower).
if command -v valgrind > /dev/null; then
    vg=(valgrind -q --error-exitcode=1 --leak-check=full)
    for c in happy wrong-token kill-donor kill-recipient lie-block lie-offset lie-length lie-summary lie-overfill rdma-overrun timeout short-waits \
             stranger-garbage stranger-token stranger-short stranger-silent flood; do
        next_port
        run "valgrind clean: $c" ': PASS$' \
            "${vg[@]}" $bin --case "$c" --blocks 16 --timeout 30000 --port "$port"
    done
    next_port
    run "valgrind clean: no-listener" ': PASS$' "${vg[@]}" $bin --case no-listener --port "$port"
else
    echo "[err]: migtransport tcp: valgrind not installed"
    failed=1
fi
exit $failed
