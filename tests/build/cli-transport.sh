#!/usr/bin/env bash
# End-to-end tests of `redis-cli --cluster rebalance|reshard
# --cluster-transport rdma|tcp|legacy|auto` (src/climigrate.c,
# src/clitransport.c, patches/*redis-cli*), run by `make test` (suite
# "ours") like every tests/build/*.sh.
#
# A 3-master cluster of bin/redis-server with a few thousand keys, then a
# 4th empty master. The servers have no RDMAMIGRATESLOTS yet, so this
# checks the option, the detection and the fallback: a bad value is
# refused; tcp and rdma fail before anything moves; legacy rebalances with
# upstream's MIGRATE path; auto says it falls back and still moves the
# slots (reshard and rebalance); every key survives and `--cluster check`
# is clean after each move. The RDMAMIGRATESLOTS arguments themselves are
# unit-tested in C (tests/c/clitransport-test-main.c).
#
# Prints one "[ok]: ..." or "[err]: ..." line per check; exits non-zero on
# failure. Ports: 33400-33403 and their bus ports (CLI_TRANSPORT_PORT
# moves them).
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
base=${CLI_TRANSPORT_PORT:-33400}
ports=($base $((base + 1)) $((base + 2)) $((base + 3)))
cli=bin/redis-cli
keys=3000
failed=0
dir=$(mktemp -d /tmp/cli-transport.XXXXXX)
pids=()

cleanup() {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$dir"
}
trap cleanup EXIT

ok() { echo "[ok]: cli-transport: $1"; }
err() {
    echo "[err]: cli-transport: $1"
    [ -n "${2:-}" ] && [ -f "$2" ] && sed 's/^/    /' "$2" | tail -25
    failed=1
}

for b in bin/redis-server $cli; do
    [ -x "$b" ] || { err "$b not built (run make)"; exit 1; }
done
for p in "${ports[@]}"; do
    if ss -ltn 2>/dev/null | grep -Eq "[:.]($p|$((p + 10000)))[[:space:]]"; then
        err "port $p or $((p + 10000)) is in use: set CLI_TRANSPORT_PORT"
        exit 1
    fi
done

# Start the four nodes.
for p in "${ports[@]}"; do
    mkdir -p "$dir/$p"
    bin/redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes \
        --cluster-config-file "$dir/$p/nodes.conf" --cluster-node-timeout 5000 \
        --dir "$dir/$p" --save '' --appendonly no --daemonize no \
        --logfile "$dir/$p/log" &
    pids+=($!)
done
for p in "${ports[@]}"; do
    for _ in $(seq 100); do
        $cli -p "$p" ping 2>/dev/null | grep -q PONG && break
        sleep 0.1
    done
done

# check_clean LABEL: --cluster check passes and sees all keys (waits a few
# seconds for the new config to reach every node).
check_clean() {
    local out=$dir/check.out total
    for _ in $(seq 40); do
        $cli --cluster check 127.0.0.1:${ports[0]} > "$out" 2>&1 &&
            ! grep -q '\[WARNING\]\|\[ERR\]' "$out" && break
        sleep 0.25
    done
    if $cli --cluster check 127.0.0.1:${ports[0]} > "$out" 2>&1 &&
        grep -q 'All nodes agree about slots configuration' "$out" &&
        grep -q 'All 16384 slots covered' "$out" &&
        ! grep -q '\[WARNING\]\|\[ERR\]' "$out"; then
        ok "$1: --cluster check is clean"
    else
        err "$1: --cluster check is clean" "$out"
    fi
    total=0
    for p in "${ports[@]}"; do
        total=$((total + $($cli -p "$p" dbsize)))
    done
    if [ "$total" = "$keys" ]; then
        ok "$1: all $keys keys still there"
    else
        err "$1: all $keys keys still there (found $total)"
    fi
}

# slots_of PORT: how many slots the node at PORT serves.
slots_of() {
    $cli --cluster info 127.0.0.1:${ports[0]} 2>/dev/null |
        grep "^127.0.0.1:$1 " | sed -E 's/.* ([0-9]+) slots.*/\1/'
}

# The 3-master cluster, the keys, the 4th master.
if ! $cli --cluster create 127.0.0.1:${ports[0]} 127.0.0.1:${ports[1]} \
        127.0.0.1:${ports[2]} --cluster-yes > "$dir/create.out" 2>&1; then
    err "3-master cluster created" "$dir/create.out"
    exit 1
fi
for _ in $(seq 100); do
    $cli -p ${ports[0]} cluster info | grep -q 'cluster_state:ok' && break
    sleep 0.1
done
# Keys straight to their owners.
python3 tests/helpers/cli-transport-keys.py "$keys" ${ports[0]} ||
    err "$keys keys written"
if ! $cli --cluster add-node 127.0.0.1:${ports[3]} 127.0.0.1:${ports[0]} \
        > "$dir/add.out" 2>&1; then
    err "4th master added" "$dir/add.out"
    exit 1
fi
# Every node must know every other, and see the cluster up (a node that
# does not answers MIGRATE with CLUSTERDOWN), before slots move.
for _ in $(seq 200); do
    known=0
    for p in "${ports[@]}"; do
        [ "$($cli -p "$p" cluster nodes | grep -c ' connected')" = 4 ] &&
            $cli -p "$p" cluster info | grep -q 'cluster_state:ok' &&
            known=$((known + 1))
    done
    [ $known = 4 ] && break
    sleep 0.1
done
[ $known = 4 ] || err "the 4 nodes know each other and the cluster is up"
check_clean "3 masters + an empty 4th"

out=$dir/out
rebalance=($cli --cluster rebalance 127.0.0.1:${ports[0]} --cluster-use-empty-masters)

# A bad value is refused before anything is done.
"${rebalance[@]}" --cluster-transport udp > "$out" 2>&1
rc=$?
if [ $rc != 0 ] &&
    grep -q "Invalid --cluster-transport 'udp': use rdma, tcp, legacy or auto" "$out"; then
    ok "a bad --cluster-transport value is refused"
else
    err "a bad --cluster-transport value is refused (exit $rc)" "$out"
fi

# --cluster help lists the option for reshard and rebalance.
if [ "$($cli --cluster help 2>&1 | grep -c -- '--cluster-transport <rdma|tcp|legacy|auto>')" = 2 ]; then
    ok "--cluster help lists --cluster-transport for reshard and rebalance"
else
    err "--cluster help lists --cluster-transport for reshard and rebalance"
fi

# tcp and rdma require RDMAMIGRATESLOTS: fail before moving anything.
for t in tcp rdma; do
    "${rebalance[@]}" --cluster-transport $t > "$out" 2>&1
    rc=$?
    if [ $rc != 0 ] &&
        grep -q "does not support RDMAMIGRATESLOTS, required by --cluster-transport $t" "$out" &&
        grep -q 'No slot was moved' "$out" && [ "$(slots_of ${ports[3]})" = 0 ]; then
        ok "rebalance --cluster-transport $t fails clearly and moves nothing"
    else
        err "rebalance --cluster-transport $t fails clearly and moves nothing (exit $rc)" "$out"
    fi
done
id3=$($cli -p ${ports[3]} cluster myid)
$cli --cluster reshard 127.0.0.1:${ports[0]} --cluster-from all --cluster-to "$id3" \
    --cluster-slots 10 --cluster-yes --cluster-transport tcp > "$out" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q 'required by --cluster-transport tcp' "$out" &&
    ! grep -q '^Moving slot' "$out" && [ "$(slots_of ${ports[3]})" = 0 ]; then
    ok "reshard --cluster-transport tcp fails clearly and moves nothing"
else
    err "reshard --cluster-transport tcp fails clearly and moves nothing (exit $rc)" "$out"
fi

# legacy: upstream's MIGRATE path, no detection message.
"${rebalance[@]}" --cluster-transport legacy > "$out" 2>&1
rc=$?
n3=$(slots_of ${ports[3]})
if [ $rc = 0 ] && [ "${n3:-0}" -ge 4000 ] && ! grep -q 'RDMAMIGRATESLOTS' "$out"; then
    ok "rebalance --cluster-transport legacy moves slots with MIGRATE ($n3 to the new node)"
else
    err "rebalance --cluster-transport legacy moves slots with MIGRATE (exit $rc, ${n3:-?} slots)" "$out"
fi
check_clean "after the legacy rebalance"

# auto (the default) on nodes without RDMAMIGRATESLOTS: one line per node,
# then MIGRATE. Reshard 500 slots from the new node to the first...
id0=$($cli -p ${ports[0]} cluster myid)
$cli --cluster reshard 127.0.0.1:${ports[0]} --cluster-from "$id3" --cluster-to "$id0" \
    --cluster-slots 500 --cluster-yes > "$out" 2>&1
rc=$?
if [ $rc = 0 ] &&
    grep -q ">>> 127.0.0.1:${ports[0]} does not support RDMAMIGRATESLOTS: moving its slots with MIGRATE (legacy)" "$out" &&
    grep -q ">>> 127.0.0.1:${ports[3]} does not support RDMAMIGRATESLOTS" "$out" &&
    [ "$(grep -c '^Moving slot' "$out")" = 500 ] &&
    [ "$(slots_of ${ports[3]})" = $((n3 - 500)) ]; then
    ok "reshard (auto) says it falls back to MIGRATE, and moves 500 slots"
else
    err "reshard (auto) says it falls back to MIGRATE, and moves 500 slots (exit $rc)" "$out"
fi
check_clean "after the auto reshard"
# ... and rebalance back with an explicit auto.
"${rebalance[@]}" --cluster-transport auto > "$out" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q 'does not support RDMAMIGRATESLOTS: moving its slots with MIGRATE' "$out" &&
    [ "$(slots_of ${ports[3]})" = "$n3" ]; then
    ok "rebalance --cluster-transport auto says it falls back, and rebalances"
else
    err "rebalance --cluster-transport auto says it falls back, and rebalances (exit $rc)" "$out"
fi
check_clean "after the auto rebalance"

exit $failed
