#!/bin/sh
# tests/rdma/migtransport.sh -- the block transport over RDMA (src/xferrdma.c)
# with bin/migtransport-test, INSIDE the rxe-vm guest (tests/rdma/run.sh,
# `make test-rdma`). The recipient binds 10.99.0.1, the donor 10.99.0.2:
# two addresses of rxe0, so the two ends talk over a real RC queue pair.
#
#   happy          ~10 MB in 16 blocks (some above 1 MiB), 1..40 segments
#                  each, shuffled: every byte verified, and the stats show
#                  the RDMA path was used (WRs, chains, RDMA bytes)
#   chains         --max-chain 4 --max-wr-bytes 64k: many chains, big
#                  segments split into several WRs, verified
#   deep           --max-wr-bytes 4k: thousands of WRs per call, chains of
#                  half the send queue, posting waits for room, verified
#   auto           --kind auto on rxe0 addresses picks RDMA
#   wrong-token    refused on both ends ("token mismatch"), then the same
#                  listener accepts the right donor
#   no-listener    rdma_connect with nobody listening is rejected
#   kill-donor     donor SIGKILLed half way: recipient errors, no hang
#   kill-recipient recipient SIGKILLed after registering: donor errors
#   overrun        a forged descriptor 4 KB longer than the block: the
#                  recipient's NIC refuses the WRITE (its MR ends with the
#                  block), both ends report it, the guard is intact
#   timeout        accept and transfer waits time out on time
#   short-waits    the recipient accepts in waits of 1 ms (the recipient
#                  thread's are 250 ms, to see a cancel): the connection's
#                  establishment gets the I/O timeout, not the rest of a
#                  wait (before, it was torn down and the donor got
#                  RDMA_CM_EVENT_CONNECT_ERROR); then a verified transfer
#
# Prints "[ok]: ..." / "[err]: ..." per case and a last line
# "migtransport: N passed, N failed". Every process runs under timeout(1).
BIN=${MIGTEST_BIN:-bin/migtransport-test}
R=10.99.0.1 D=10.99.0.2
passed=0 failed=0
log=$(mktemp "${TMPDIR:-/tmp}/migtransport.XXXXXX")

if [ ! -x "$BIN" ]; then
    echo "[err]: $BIN not built"
    echo "migtransport: 0 passed, 1 failed"
    exit 1
fi

# run NAME EXPECT-ERE ARGS...: exit 0, PASS, and the log matches EXPECT-ERE.
run() {
    name=$1 expect=$2
    shift 2
    echo "=== $name: $BIN $*"
    timeout 300 "$BIN" "$@" > "$log" 2>&1
    rc=$?
    sed 's/^/    /' "$log"
    if [ $rc = 0 ] && grep -q ': PASS$' "$log" && grep -Eq "$expect" "$log"; then
        echo "[ok]: migtransport rdma: $name"
        passed=$((passed + 1))
    else
        echo "[err]: migtransport rdma: $name (exit $rc, or log lacks /$expect/)"
        failed=$((failed + 1))
    fi
}

RDMA_USED='donor\] stats: transport rdma, segments [1-9][0-9]*, payload [1-9][0-9]* bytes, wr_posted [1-9][0-9]*, chains_posted [1-9][0-9]*, rdma_bytes_written [1-9]'

run happy "verified every byte of 16 blocks" \
    --kind rdma --bind $R --donor-bind $D --port 45401 --blocks 16 --timeout 60000
grep -Eq "$RDMA_USED" "$log" || { echo "[err]: migtransport rdma: happy did not use RDMA WRITEs"; failed=$((failed + 1)); }
run chains "chains_posted ([5-9][0-9]|[1-9][0-9][0-9]+)" \
    --kind rdma --bind $R --donor-bind $D --port 45402 --blocks 16 --seed 3 \
    --max-chain 4 --max-wr-bytes 64k --timeout 60000
run deep "wr_posted [0-9]{4,}, chains_posted ([6-9]|[1-9][0-9]+)," \
    --kind rdma --bind $R --donor-bind $D --port 45408 --blocks 16 --seed 5 \
    --max-wr-bytes 4k --timeout 60000
run auto "auto chose rdma" \
    --kind auto --bind $R --donor-bind $D --port 45403 --blocks 8 --timeout 60000
run wrong-token 'donor\] wrong token refused: "rdma: token mismatch' \
    --case wrong-token --kind rdma --bind $R --donor-bind $D --port 45404 --blocks 8 --timeout 60000
grep -q 'recipient\] wrong token refused: "rdma: token mismatch' "$log" || { echo "[err]: migtransport rdma: recipient did not report the token mismatch"; failed=$((failed + 1)); }
run no-listener "rejected \(no listener" \
    --case no-listener --kind rdma --bind $R --donor-bind $D --port 45499 --timeout 20000
run kill-donor 'donor killed mid-transfer: "rdma: ' \
    --case kill-donor --kind rdma --bind $R --donor-bind $D --port 45405 --blocks 16 --timeout 60000
run kill-recipient 'recipient killed: "rdma: ' \
    --case kill-recipient --kind rdma --bind $R --donor-bind $D --port 45406 --blocks 16 --timeout 60000
run overrun 'donor writing past its block: "rdma: .*guards intact' \
    --case rdma-overrun --kind rdma --bind $R --donor-bind $D --port 45409 --blocks 8 --timeout 60000
grep -Eq 'writing past the recipient.s block: "rdma: .*(access|flushed|disconnected)' "$log" || { echo "[err]: migtransport rdma: overrun: the donor did not report the refused WRITE"; failed=$((failed + 1)); }
run timeout 'silent donor: "rdma: timeout after 1500 ms' \
    --case timeout --kind rdma --bind $R --donor-bind $D --port 45407 --blocks 8 --timeout 60000
run short-waits 'accepted after [0-9]+ waits of 1 ms' \
    --case short-waits --kind rdma --bind $R --donor-bind $D --port 45410 --blocks 8 --timeout 60000

rm -f "$log"
echo "migtransport: $passed passed, $failed failed"
[ $failed = 0 ]
