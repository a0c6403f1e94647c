#!/usr/bin/env bash
# End-to-end tests of redis-cli's RDMAMIGRATESLOTS path (src/climigrate.c)
# against a stand-in for the server command, run by `make test` (suite
# "ours") like every tests/build/*.sh. It was written before the servers
# had the command and still isolates redis-cli's side: what exactly it
# sends, AUTH, progress on a terminal, a node without the command in a
# mixed cluster. cli-transport.sh runs the real thing. Setup and checks
# shared with it: tests/helpers/cli-transport-lib.sh.
#
# Each of 4 bin/redis-server cluster nodes sits behind
# tests/helpers/rdmamig-mock.py (the node announces the proxy's port, so
# redis-cli only talks to proxies), which answers COMMAND INFO
# RDMAMIGRATESLOTS, RDMAMIGRATESLOTS STATUS, and RDMAMIGRATESLOTS itself by
# moving the slots the stock way, slowly enough to be polled. The nodes
# have a password. Checks: a rebalance sends exactly one RDMAMIGRATESLOTS
# per donor->recipient pair, carrying that pair's slots as ranges,
# TRANSPORT, AUTH and TIMEOUT, prints progress and a summary per pair, and
# leaves a clean cluster with every key; a reshard from several sources
# sends one per source (on a terminal, with the progress line rewritten in
# place); in a mixed cluster (one node without the command), auto uses
# MIGRATE for that node's pairs and RDMAMIGRATESLOTS for the others; an
# error reply (TRANSPORT rdma, refused by the mock) stops redis-cli with a
# non-zero exit and the error, moving nothing.
#
# Prints one "[ok]: ..." or "[err]: ..." line per check; exits non-zero on
# failure. Ports: proxies P..P+3, nodes P+10..P+13 and the nodes' bus
# ports, for the first P = 33410, 33414, ... 33486 whose ports no socket
# holds (CLI_TRANSPORT_MOCK_PORT=P: that block only).
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
name="cli-transport mock"
keys=3000
dir=$(mktemp -d /tmp/cli-transport-mock.XXXXXX)
log=$dir/calls.log
. tests/helpers/cli-transport-lib.sh
declare -A proxy_pid
# Every node has a password: redis-cli must pass it on in RDMAMIGRATESLOTS
# (the mock uses it for its own connections and MIGRATEs).
export REDISCLI_AUTH=s3cret

need_binaries
# The first block no socket uses: proxies P..P+3, nodes P+10..P+13 and
# their bus ports.
if ! base=$(free_base "0 1 2 3 10 11 12 13 10010 10011 10012 10013" \
        ${CLI_TRANSPORT_MOCK_PORT:-$(seq 33410 4 33486)}); then
    err "no free block of ports in ${CLI_TRANSPORT_MOCK_PORT:-33410-33499}: set CLI_TRANSPORT_MOCK_PORT"
    exit 1
fi
ports=($base $((base + 1)) $((base + 2)) $((base + 3)))   # proxies

for p in "${ports[@]}"; do
    r=$((p + 10))
    mkdir -p "$dir/$r"
    bin/redis-server --port "$r" --bind 127.0.0.1 --cluster-enabled yes \
        --cluster-config-file "$dir/$r/nodes.conf" --cluster-node-timeout 5000 \
        --cluster-announce-port "$p" --cluster-announce-bus-port $((r + 10000)) \
        --requirepass s3cret --masterauth s3cret \
        --dir "$dir/$r" --save '' --appendonly no --logfile "$dir/$r/log" &
    pids+=($!)
    python3 tests/helpers/rdmamig-mock.py "$p" "$r" "$log" 2> "$dir/proxy-$p.log" &
    pids+=($!)
    proxy_pid[$p]=$!
done
for p in "${ports[@]}"; do
    for _ in $(seq 100); do
        $cli -p "$p" ping 2>/dev/null | grep -q PONG && break
        sleep 0.1
    done
done

# The cluster: 3 masters with the slots, an empty 4th (set up on the real
# ports; everything after goes through the proxies).
$cli -p $((base + 10)) cluster addslotsrange 0 5460 > /dev/null
$cli -p $((base + 11)) cluster addslotsrange 5461 10922 > /dev/null
$cli -p $((base + 12)) cluster addslotsrange 10923 16383 > /dev/null
for i in 1 2 3; do
    $cli -p $((base + 10)) cluster meet 127.0.0.1 $((base + 10 + i)) > /dev/null
done
wait_mesh || { err "the 4 nodes know each other and the cluster is up"; exit 1; }
python3 tests/helpers/cli-transport-keys.py "$keys" ${ports[0]} ||
    err "$keys keys written"

check_clean "3 masters + an empty 4th"

# Rebalance (auto): one call per pair, every call to the new node.
out=$dir/out
: > "$log"
: > "$log.events"
$cli --cluster rebalance 127.0.0.1:${ports[0]} --cluster-use-empty-masters > "$out" 2>&1
rc=$?
p3=${ports[3]}
old3="(${ports[0]}|${ports[1]}|${ports[2]})"
ere="^$old3 RDMAMIGRATESLOTS 127.0.0.1 $p3( [0-9]+(-[0-9]+)?)+ TRANSPORT auto AUTH s3cret TIMEOUT [0-9]+$"
if [ $rc = 0 ] && [ "$(wc -l < "$log")" = 3 ] && [ "$(grep -Ec "$ere" "$log")" = 3 ] &&
    [ "$(cut -d' ' -f1 "$log" | sort -u | wc -l)" = 3 ] &&
    ! grep -q 'does not support' "$out" && [ "$(slots_of "$p3")" = 4096 ]; then
    ok "rebalance sends one RDMAMIGRATESLOTS per pair, slots as ranges, AUTH ($(awk '{print NF - 10}' "$log" | tr '\n' ' ')ranges)"
else
    err "rebalance sends one RDMAMIGRATESLOTS per pair, slots as ranges, AUTH (exit $rc)" "$out"
    sed 's/^/    call: /' "$log" | cut -c1-200
fi
# Ranges cover exactly the slots the new node got.
if python3 - "$log" <<'EOF'
import sys
slots = []
for line in open(sys.argv[1]):
    for a in line.split()[4:]:
        if a == "TRANSPORT":
            break
        lo, _, hi = a.partition("-")
        slots += range(int(lo), int(hi or lo) + 1)
sys.exit(0 if len(slots) == 4096 and len(set(slots)) == 4096 else 1)
EOF
then
    ok "the ranges sent add up to the 4096 slots moved, no slot twice"
else
    err "the ranges sent add up to the 4096 slots moved, no slot twice"
fi
if [ "$(grep -Ec "^\[OK\] 13(65|66) slots from 127.0.0.1:$old3 to 127.0.0.1:$p3: [0-9]+ keys, [0-9.]+ MB in [0-9.]+ s \([0-9.]+ MB/s\) over tcp; prepare [0-9]+ ms, transfer [0-9]+ ms, patch 0 ms, handover [0-9]+ ms, delete [0-9]+ ms; writes paused [0-9]+ ms; keys [0-9]+ zero-copy, 0 serialized$" "$out")" = 3 ]; then
    ok "a summary line per pair (keys, MB, MB/s, transport, phases)"
else
    err "a summary line per pair (keys, MB, MB/s, transport, phases)" "$out"
fi
# The next pair starts while the last donor deletes (the mock stays 0.3 s
# in "delete"): each call but the first comes before the reply of the one
# before it, and the summaries still all come.
if python3 - "$log.events" <<'EOF'
import sys
ev = [l.split() for l in open(sys.argv[1])]
calls = [float(t) for t, _, w in ev if w == "call"]
replies = [float(t) for t, _, w in ev if w == "reply"]
sys.exit(0 if len(calls) == 3 == len(replies) and
         all(calls[i + 1] < replies[i] for i in range(2)) else 1)
EOF
then
    ok "each pair starts while the donor before it deletes (its reply comes later)"
else
    err "each pair starts while the donor before it deletes (its reply comes later)" "$log.events"
fi
if [ "$(grep -c "^    slots handed over to 127.0.0.1:$p3 after [0-9.]* s; 127.0.0.1:[0-9]* deletes its copies while the next move starts (its summary follows)$" "$out")" = 3 ]; then
    ok "a line says so for each pair"
else
    err "a line says so for each pair" "$out"
fi
if grep -Eq '^    transfer: [0-9]+ slots, [0-9.]+/[0-9.]+ MB, [0-9.]+ MB/s, [0-9]+ keys, [0-9.]+ s$' "$out"; then
    ok "progress lines from RDMAMIGRATESLOTS STATUS (not a TTY: one per phase or 3 s)"
else
    err "progress lines from RDMAMIGRATESLOTS STATUS" "$out"
fi
check_clean "after the rebalance"

# An error reply stops redis-cli: non-zero exit, the error, nothing moved.
id0=$($cli -p ${ports[0]} cluster myid)
id3=$($cli -p "$p3" cluster myid)
: > "$log"
$cli --cluster reshard 127.0.0.1:${ports[0]} --cluster-from "$id3" --cluster-to "$id0" \
    --cluster-slots 100 --cluster-yes --cluster-transport rdma > "$out" 2>&1
rc=$?
if [ $rc != 0 ] && [ "$(wc -l < "$log")" = 1 ] && grep -q ' TRANSPORT rdma ' "$log" &&
    grep -q "RDMAMIGRATESLOTS from 127.0.0.1:$p3 to 127.0.0.1:${ports[0]} failed after [0-9.]* s: ERR prepare phase: rdma: no RDMA device" "$out" &&
    [ "$(slots_of "$p3")" = 4096 ]; then
    ok "an error reply is printed, redis-cli exits non-zero, nothing moved"
else
    err "an error reply is printed, redis-cli exits non-zero, nothing moved (exit $rc)" "$out"
fi
check_clean "after the failed reshard"

# Reshard from all the others: one call per source, TRANSPORT tcp; on a
# terminal (script(1) gives it one) the progress line is rewritten in place.
: > "$log"
n0=$(slots_of ${ports[0]})
script -qec "$cli --cluster reshard 127.0.0.1:${ports[0]} --cluster-from all \
    --cluster-to $id0 --cluster-slots 1500 --cluster-yes --cluster-transport tcp" \
    /dev/null < /dev/null > "$out" 2>&1
rc=$?
tr -d '\r' < "$out" > "$out.lines"
if [ $rc = 0 ] && [ "$(wc -l < "$log")" = 3 ] &&
    [ "$(grep -Ec "^(${ports[1]}|${ports[2]}|$p3) RDMAMIGRATESLOTS 127.0.0.1 ${ports[0]} .* TRANSPORT tcp AUTH s3cret TIMEOUT [0-9]+$" "$log")" = 3 ] &&
    ! grep -q "^Moving slot" "$out.lines" && [ "$(grep -c '^\[OK\] 500 slots from' "$out.lines")" = 3 ] &&
    [ "$(slots_of ${ports[0]})" = $((n0 + 1500)) ]; then
    ok "reshard from all: one RDMAMIGRATESLOTS per source, 1500 slots moved"
else
    err "reshard from all: one RDMAMIGRATESLOTS per source, 1500 slots moved (exit $rc, $n0 -> $(slots_of ${ports[0]}) slots)" "$out.lines"
    sed 's/^/    call: /' "$log" | cut -c1-200
fi
# (Each poll writes "\r    transfer: ..." over the last one: with the \r
# removed, the polls of one pair end up on one line.)
if grep -q $'\r    transfer: [0-9]* slots' "$out" &&
    grep -q 'transfer: [0-9]* slots.*transfer: [0-9]* slots' "$out.lines"; then
    ok "on a terminal the progress line is rewritten in place"
else
    err "on a terminal the progress line is rewritten in place" "$out.lines"
fi
check_clean "after the tcp reshard"

# A move that fails after its early return (its donor's reply is an error,
# read when the reshard ends): the error is printed and redis-cli exits
# non-zero; the slots were handed over, so they are moved.
touch "$log.fail-delete"
n0=$(slots_of ${ports[0]})
$cli --cluster reshard 127.0.0.1:${ports[0]} --cluster-from "$id3" --cluster-to "$id0" \
    --cluster-slots 100 --cluster-yes --cluster-transport tcp > "$out" 2>&1
rc=$?
rm -f "$log.fail-delete"
if [ $rc != 0 ] && grep -q "slots handed over to 127.0.0.1:${ports[0]}" "$out" &&
    grep -q "RDMAMIGRATESLOTS from 127.0.0.1:$p3 to 127.0.0.1:${ports[0]} failed after [0-9.]* s: ERR delete phase: mock: the donor failed after the handover" "$out" &&
    [ "$(slots_of ${ports[0]})" = $((n0 + 100)) ]; then
    ok "an error read after the early return: printed, redis-cli exits non-zero"
else
    err "an error read after the early return: printed, redis-cli exits non-zero (exit $rc)" "$out"
fi
check_clean "after the reshard that failed late"

# replace_proxy PORT MODE: the proxy of PORT plays another node (MODE:
# nosupport, oldversion; see rdmamig-mock.py).
replace_proxy() {
    pkill -f "rdmamig-mock.py $1 " 2>/dev/null
    for _ in $(seq 50); do $cli -p "$1" ping >/dev/null 2>&1 || break; sleep 0.1; done
    for _ in $(seq 50); do
        python3 tests/helpers/rdmamig-mock.py "$1" $(($1 + 10)) "$log" "$2" \
            2> "$dir/proxy-$1.log" &
        pids+=($!)
        sleep 0.3
        $cli -p "$1" ping 2>/dev/null | grep -q PONG && break
    done
}

# A mixed cluster: the 4th node loses the command (its proxy now plays an
# older node). auto moves the pairs with it through MIGRATE, the others with
# RDMAMIGRATESLOTS, in the same rebalance.
replace_proxy "$p3" nosupport
: > "$log"
$cli --cluster rebalance 127.0.0.1:${ports[0]} > "$out" 2>&1
rc=$?
if [ $rc = 0 ] &&
    [ "$(grep -c ">>> 127.0.0.1:$p3 does not support RDMAMIGRATESLOTS: moving its slots with MIGRATE (legacy)" "$out")" = 1 ] &&
    [ "$(grep -c 'does not support' "$out")" = 1 ] &&
    [ "$(wc -l < "$log")" -ge 1 ] && ! grep -q "127.0.0.1 $p3 \|^$p3 " "$log" &&
    grep -q "^Moving [0-9]* slots from 127.0.0.1:[0-9]* to 127.0.0.1:$p3$" "$out" &&
    [ "$(slots_of "$p3")" = 4096 ]; then
    ok "mixed cluster, auto: MIGRATE for the node without the command, RDMAMIGRATESLOTS for the rest ($(wc -l < "$log") calls)"
else
    err "mixed cluster, auto: MIGRATE for the node without the command, RDMAMIGRATESLOTS for the rest (exit $rc)" "$out"
    sed 's/^/    call: /' "$log" | cut -c1-200
fi
check_clean "after the mixed rebalance"

# A node of another protocol version (0.1.0: the command, but no
# migration_protocol_version in INFO): auto moves the pairs with it through
# MIGRATE. Weight 0 sends its slots back to the others.
replace_proxy "$p3" oldversion
: > "$log"
id3=$($cli -p "$p3" cluster myid)
$cli --cluster rebalance 127.0.0.1:${ports[0]} --cluster-weight "$id3=0" > "$out" 2>&1
rc=$?
if [ $rc = 0 ] &&
    [ "$(grep -c ">>> 127.0.0.1:$p3 speaks slot migration protocol version 1, this redis-cli [0-9]*: its slots cannot move as blocks with it" "$out")" = 1 ] &&
    [ "$(grep -c ">>> 127.0.0.1:$p3: moving its slots with MIGRATE (legacy)" "$out")" = 1 ] &&
    ! grep -q 'does not support' "$out" &&
    ! grep -q "127.0.0.1 $p3 \|^$p3 " "$log" &&
    { n3=$(slots_of "$p3"); [ "${n3:-0}" = 0 ]; }; then
    ok "mixed versions, auto: MIGRATE for the node of another protocol version"
else
    err "mixed versions, auto: MIGRATE for the node of another protocol version (exit $rc)" "$out"
    echo "    slots of the proxied node: $(slots_of "$p3"); calls: $(wc -l < "$log")"
    sed 's/^/    call: /' "$log" | cut -c1-200
fi
check_clean "after the mixed-version rebalance"

exit $failed
