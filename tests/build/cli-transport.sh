#!/usr/bin/env bash
# End-to-end tests of `redis-cli --cluster rebalance|reshard
# --cluster-transport rdma|tcp|legacy|auto` (src/climigrate.c,
# src/clitransport.c, patches/*redis-cli*) against servers that have
# RDMAMIGRATESLOTS (src/migration.c), run by `make test` (suite "ours")
# like every tests/build/*.sh.
#
# A 3-master cluster of bin/redis-server with a few thousand keys, then a
# 4th empty master, on a machine without an RDMA device (the recipient
# cannot listen on RDMA; with one, the rdma case below is skipped):
#   - a bad value is refused, --cluster help lists the option;
#   - rdma: rebalance and reshard fail with the server's clear error
#     ("migration failed in <phase>: ..."), exit non-zero, move nothing;
#   - tcp: rebalance moves a quarter of the slots with one RDMAMIGRATESLOTS
#     per donor (a "[OK] N slots from A to B: ... over tcp" summary each,
#     no MIGRATE), under a light write load on keys of the migrating slots
#     (background redis-cli -c SET/INCR loops; the donors hold the freeze a
#     little longer with migration-test-delay-transfer, and the writes copy
#     their keys rather than wait in it): no acknowledged write is lost, none
#     is refused, none waits for the transfer; then a reshard;
#   - legacy: upstream's MIGRATE path, no RDMAMIGRATESLOTS (the servers'
#     migration counters do not move);
#   - auto (the default): RDMAMIGRATESLOTS, the recipient falls back to
#     tcp (reshard, then rebalance).
#   - a donor with migration-max-bandwidth: redis-cli's TIMEOUT grows
#     with it (INFO migration_max_bandwidth), the reshard succeeds.
# After each move: --cluster check is clean (no open slot) and every key
# is on the owner of its slot, once, with its value (cli-transport-keys.py
# --check). The RDMAMIGRATESLOTS arguments are unit-tested in C
# (tests/c/clitransport-test-main.c), redis-cli's side in detail against a
# mock (cli-transport-mock.sh; setup and checks shared with it:
# tests/helpers/cli-transport-lib.sh).
#
# Prints one "[ok]: ..." or "[err]: ..." line per check; exits non-zero on
# failure. Ports: the first block P..P+3 (P = 33400, 33404, ... 33496) that
# no socket holds, with their bus ports P+10000..
# (CLI_TRANSPORT_PORT=P: that block only). CLI_TRANSPORT_KEEP=1 keeps the temporary directory (logs).
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
name=cli-transport
keys=3000
dir=$(mktemp -d /tmp/cli-transport.XXXXXX)
. tests/helpers/cli-transport-lib.sh

need_binaries
# The first block of 4 ports (and their bus ports) no socket uses.
if ! base=$(free_base "0 1 2 3 10000 10001 10002 10003" ${CLI_TRANSPORT_PORT:-$(seq 33400 4 33496)}); then
    err "no free block of 4 ports (and bus ports) in ${CLI_TRANSPORT_PORT:-33400-33499}: set CLI_TRANSPORT_PORT"
    exit 1
fi
ports=($base $((base + 1)) $((base + 2)) $((base + 3)))

# Start the four nodes.
for p in "${ports[@]}"; do
    mkdir -p "$dir/$p"
    bin/redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes \
        --cluster-config-file "$dir/$p/nodes.conf" --cluster-node-timeout 5000 \
        --dir "$dir/$p" --save '' --appendonly no --daemonize no \
        --enable-debug-command yes --logfile "$dir/$p/log" &
    pids+=($!)
done
for p in "${ports[@]}"; do
    for _ in $(seq 100); do
        $cli -p "$p" ping 2>/dev/null | grep -q PONG && break
        sleep 0.1
    done
done

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
wait_mesh || err "the 4 nodes know each other and the cluster is up"
check_clean "3 masters + an empty 4th"

out=$dir/out
p3=${ports[3]}
id0=$($cli -p ${ports[0]} cluster myid)
id3=$($cli -p "$p3" cluster myid)
rebalance=($cli --cluster rebalance 127.0.0.1:${ports[0]} --cluster-use-empty-masters)
# A summary line of RDMAMIGRATESLOTS (src/climigrate.c), to the new node.
summary_re="^\[OK\] [0-9]+ slots from 127\.0\.0\.1:[0-9]+ to 127\.0\.0\.1:[0-9]+: [0-9]+ keys, [0-9.]+ MB in [0-9.]+ s \([0-9.]+ MB/s\) over tcp; prepare [0-9]+ ms, transfer [0-9]+ ms, patch [0-9]+ ms, handover [0-9]+ ms, delete [0-9]+ ms; writes paused [0-9]+ ms \([0-9]+ ms per slot on average\), [0-9]+ commands held up to [0-9]+ ms, [0-9]+ replayed; keys [0-9]+ zero-copy, [0-9]+ serialized$"
# migration_total_migrations + migration_total_failed of every node.
mig_count() {
    local p n=0
    for p in "${ports[@]}"; do
        n=$((n + $($cli -p "$p" info migration | tr -d '\r' |
            awk -F: '/^migration_total_(migrations|failed):/ { s += $2 } END { print s + 0 }')))
    done
    echo $n
}

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

# The servers have the command now (detection sees it).
if [ -n "$($cli -p ${ports[0]} command info rdmamigrateslots | tr -d '\r\n')" ]; then
    ok "the servers have RDMAMIGRATESLOTS (COMMAND INFO)"
else
    err "the servers have RDMAMIGRATESLOTS (COMMAND INFO)"
    exit 1
fi

# rdma: without an RDMA device the recipient cannot listen on RDMA. The
# donor's error is printed, redis-cli exits non-zero at the first pair, and
# both nodes are rolled back: nothing moved, no open slot.
if ls /sys/class/infiniband/ 2>/dev/null | grep -q .; then
    echo "[skip]: $name: --cluster-transport rdma fails without an RDMA device (this machine has one)"
else
    rdma_rebalance=("${rebalance[@]}" --cluster-transport rdma)
    rdma_reshard=($cli --cluster reshard 127.0.0.1:${ports[0]} --cluster-from all
        --cluster-to "$id3" --cluster-slots 10 --cluster-yes --cluster-transport rdma)
    for what in rebalance reshard; do
        case $what in
            rebalance) cmd=("${rdma_rebalance[@]}") ;;
            reshard) cmd=("${rdma_reshard[@]}") ;;
        esac
        "${cmd[@]}" > "$out" 2>&1
        rc=$?
        donor=$(sed -En 's/^\*\*\* RDMAMIGRATESLOTS from 127\.0\.0\.1:([0-9]+) to 127\.0\.0\.1:'$p3' failed after [0-9.]+ s: ERR migration failed in [a-z]+: .*rdma.*/\1/p' "$out")
        if [ $rc != 0 ] && [ -n "$donor" ] && ! grep -q '^\[OK\]\|^Moving slot' "$out" &&
            [ "$(slots_of "$p3")" = 0 ] && [ "$($cli -p "$p3" dbsize)" = 0 ]; then
            ok "$what --cluster-transport rdma fails clearly, moves nothing: $(grep -o 'ERR migration failed.*' "$out" | head -1 | cut -c1-150)"
        else
            err "$what --cluster-transport rdma fails clearly and moves nothing (exit $rc)" "$out"
        fi
        last=$($cli -p "${donor:-${ports[0]}}" info migration | tr -d '\r' |
            grep -E '^migration_(last_status|state):' | sort | tr '\n' ' ')
        if [ "$last" = "migration_last_status:failed migration_state:idle " ]; then
            ok "after the failed rdma $what the donor is idle, last_status failed"
        else
            err "after the failed rdma $what the donor is idle, last_status failed ($last)"
        fi
        check_clean "after the failed rdma $what"
        # So that a leftover of a failed move does not fail every test
        # below: clear any open slot (the check above has reported it).
        if grep -q 'has slots in \(importing\|migrating\) state' "$dir/check.out"; then
            for p in "${ports[@]}"; do $cli -p "$p" cluster setslots stable 0-16383 > /dev/null; done
            echo "    (open slots left by the failed rdma $what cleared with CLUSTER SETSLOTS STABLE)"
        fi
    done
fi

# tcp: rebalance under a light write load. Three writers (one per donor's
# keys), each a loop of redis-cli -c INCR <k>:c / SET <k>:s <i> on 8 keys
# in the first 1000 slots of one of the 3 masters (upstream's rebalance
# takes a donor's first slots), logging every reply and its latency. The
# donors sleep 300 ms at the start of the transfer phase
# (migration-test-delay-transfer), inside the write freeze: writes to those
# slots copy their key out of the transfer and run (none may wait 250 ms).
mapfile -t wkeys < <(python3 tests/helpers/cli-transport-keys.py --in-first-slots 24 1000 ${ports[0]})
writer() { # log keys...
    local log=$1 i=0 k r t0 t1
    shift
    while [ ! -e "$dir/stop" ]; do
        i=$((i + 1))
        for k in "$@"; do
            t0=$EPOCHREALTIME
            r=$($cli -c -p ${ports[0]} incr "$k:c" 2>&1 | tr -d '\r\n')
            t1=$EPOCHREALTIME
            echo "c $k:c ${r// /_} $(( (${t1/./} - ${t0/./}) / 1000 ))" >> "$log"
            t0=$EPOCHREALTIME
            r=$($cli -c -p ${ports[0]} set "$k:s" "$i" 2>&1 | tr -d '\r\n')
            t1=$EPOCHREALTIME
            echo "s $k:s ${r// /_} $(( (${t1/./} - ${t0/./}) / 1000 )) $i" >> "$log"
        done
    done
}
for p in "${ports[@]:0:3}"; do $cli -p "$p" config set migration-test-delay-transfer 300 > /dev/null; done
used_memory() { $cli -p "$1" info memory | tr -d '\r' | sed -n 's/^used_memory://p'; }
empty_used=$(used_memory "$p3")
before=$(mig_count)
rm -f "$dir/stop"
wpids=()
for w in 0 1 2; do
    writer "$dir/writes.$w" "${wkeys[@]:$((w * 8)):8}" &
    wpids+=($!)
    pids+=($!)
done
sleep 1
"${rebalance[@]}" --cluster-transport tcp > "$out" 2>&1
rc=$?
sleep 1
touch "$dir/stop"
for w in "${wpids[@]}"; do wait "$w"; done
cp "$out" "$dir/rebalance-tcp.out"
for p in "${ports[@]:0:3}"; do $cli -p "$p" config set migration-test-delay-transfer 0 > /dev/null; done
n3=$(slots_of "$p3")
nsum=$(grep -Ec "$summary_re" "$out")
if [ $rc = 0 ] && [ "$nsum" = 3 ] &&
    [ "$(grep -Ec "^\[OK\] 136[56] slots from 127\.0\.0\.1:(${ports[0]}|${ports[1]}|${ports[2]}) to 127\.0\.0\.1:$p3: " "$out")" = 3 ] &&
    ! grep -q 'does not support\|^Moving slot' "$out" && [ "$n3" = 4096 ] &&
    [ "$(mig_count)" = $((before + 6)) ]; then
    ok "rebalance --cluster-transport tcp: 4096 slots to the new node, one RDMAMIGRATESLOTS per donor, over tcp"
    grep -E "$summary_re" "$out" | sed 's/^/    /'
else
    err "rebalance --cluster-transport tcp: 4096 slots to the new node, one RDMAMIGRATESLOTS per donor, over tcp (exit $rc, ${n3:-?} slots, $nsum summaries)" "$out"
fi
if [ "$(grep -Eo 'writes paused [0-9]+ ms' "$out" | awk '$3 >= 300' | wc -l)" = 3 ]; then
    ok "each donor held writes to its migrating slots >= 300 ms (writes paused in the summaries)"
else
    err "each donor held writes to its migrating slots >= 300 ms" "$out"
fi
check_clean "after the tcp rebalance"
# The donors' slots were chosen whole by slot group (cliPickSlots): the
# 3-master layout splits 2 groups of 256 between masters, and a quarter of
# each master is its parts of groups, none split, so no donor gave a slot
# an arena of its own first (upstream's first 1,365 slots split one).
isolated=$(for p in "${ports[@]:0:3}"; do
    $cli -p "$p" info migration | tr -d '\r' | sed -n 's/^migration_last_isolated_slots://p'
done | tr '\n' ' ')
group=$($cli -p "${ports[0]}" info slotalloc | tr -d '\r' | sed -n 's/^slotalloc_group_slots://p')
if [ "$group" = 256 ] && [ "$isolated" = "0 0 0 " ]; then
    ok "the rebalance kept each donor's parts of slot groups whole (groups of $group, isolated slots per donor: $isolated)"
else
    err "the rebalance kept each donor's parts of slot groups whole (groups of ${group:-?}, isolated slots per donor: $isolated)" "$out"
fi
# The new node accounts the memory of the keys it adopted: used_memory grew
# by at least what its slot blocks hold now (plus the keyspace's own
# growth). If the allocations adopted from the blocks never enter
# used_memory, their frees later take it that much lower: with enough keys
# below zero (INFO shows ~1.8e19, maxmemory refuses every write as OOM).
inblocks=$($cli -p "$p3" info slotalloc | tr -d '\r' | sed -n 's/^slotalloc_used_bytes://p')
used=$(used_memory "$p3")
if [ $((used - empty_used)) -ge "${inblocks:-0}" ]; then
    ok "the new node's used_memory grew by at least its slot blocks' contents ($empty_used -> $used, $inblocks in blocks)"
else
    err "the new node's used_memory grew by at least its slot blocks' contents ($empty_used -> $used: +$((used - empty_used)), but $inblocks in blocks)"
fi

# The writes: every acknowledged INCR counted, the last acknowledged SET
# kept; no write refused; none waited for the delayed transfer (a write
# to a key in flight copies the key and runs: migration-write-copy-max-size,
# and the donors say they copied some); the keys moved.
cat "$dir"/writes.[012] > "$dir/writes"
if python3 - "$dir/writes" "$p3" > "$dir/writes.check" 2>&1 <<'EOF'
import subprocess, sys
acked, last, errors, held, total = {}, {}, [], 0, 0
for line in open(sys.argv[1]):
    f = line.split()
    kind, key, reply, ms = f[0], f[1], f[2], int(f[3])
    total += 1
    held += ms >= 250
    if kind == "c" and reply.lstrip("-").isdigit():
        acked.setdefault(key, []).append(int(reply))
    elif kind == "s" and reply == "OK":
        last[key] = int(f[4])
    else:
        errors.append(line.strip())
lost = []
def get(key):
    return subprocess.run(["bin/redis-cli", "-c", "-p", sys.argv[2], "get", key],
                          capture_output=True, text=True).stdout.strip()
def on_new_node(key):
    r = subprocess.run(["bin/redis-cli", "-p", sys.argv[2], "exists", key],
                       capture_output=True, text=True).stdout.strip()
    return r == "1"
moved = 0
for key, rs in acked.items():
    v = get(key)
    moved += on_new_node(key)
    # one writer per key: the replies are 1..n, the value is n
    if rs != list(range(1, len(rs) + 1)) or v != str(len(rs)):
        lost.append("%s: %d INCRs acknowledged (last reply %d), value %s" % (key, len(rs), rs[-1], v))
for key, i in last.items():
    v = get(key)
    moved += on_new_node(key)
    if v != str(i):
        lost.append("%s: last acknowledged SET %d, value %s" % (key, i, v))
for l in (lost + errors)[:20]:
    print(l)
nkeys = len(acked) + len(last)
print("%d writes, %d acknowledged (%d INCR, %d SET), %d refused or failed, "
      "%d waited >= 250 ms, %d lost; %d of %d keys now on the new node" % (
      total, total - len(errors), sum(map(len, acked.values())),
      total - len(errors) - sum(map(len, acked.values())), len(errors), held,
      len(lost), moved, nkeys))
sys.exit(1 if lost or errors or held != 0 or moved != nkeys or nkeys != 48 else 0)
EOF
then
    ok "writes during the tcp rebalance: $(tail -1 "$dir/writes.check")"
else
    err "writes during the tcp rebalance: no acknowledged write lost, none refused, none waited for the transfer, all keys moved" "$dir/writes.check"
fi
copied=0
for p in "${ports[@]:0:3}"; do
    n=$($cli -p "$p" info migration | tr -d '\r' | sed -n 's/^migration_total_keys_copied://p')
    copied=$((copied + ${n:-0}))
done
if [ "$copied" -gt 0 ]; then
    ok "the donors copied $copied keys out of their transfers rather than hold writes to them"
else
    err "the donors copied no key out of their transfers (migration_total_keys_copied)" "$dir/writes.check"
fi

# tcp reshard: 500 slots from the new node back to the first.
$cli --cluster reshard 127.0.0.1:${ports[0]} --cluster-from "$id3" --cluster-to "$id0" \
    --cluster-slots 500 --cluster-yes --cluster-transport tcp > "$out" 2>&1
rc=$?
if [ $rc = 0 ] && [ "$(grep -Ec "$summary_re" "$out")" = 1 ] &&
    grep -q "^\[OK\] 500 slots from 127.0.0.1:$p3 to 127.0.0.1:${ports[0]}: " "$out" &&
    ! grep -q '^Moving slot' "$out" && [ "$(slots_of "$p3")" = 3596 ]; then
    ok "reshard --cluster-transport tcp: 500 slots in one RDMAMIGRATESLOTS over tcp"
else
    err "reshard --cluster-transport tcp: 500 slots in one RDMAMIGRATESLOTS over tcp (exit $rc)" "$out"
fi
check_clean "after the tcp reshard"

# legacy: upstream's MIGRATE path, no detection message, no migration on
# any server.
before=$(mig_count)
"${rebalance[@]}" --cluster-transport legacy > "$out" 2>&1
rc=$?
n3=$(slots_of "$p3")
if [ $rc = 0 ] && [ "${n3:-0}" -ge 4090 ] && ! grep -q 'RDMAMIGRATESLOTS\|^\[OK\] [0-9]* slots from' "$out" &&
    grep -q "Moving [0-9]* slots from 127.0.0.1:${ports[0]} to 127.0.0.1:$p3" "$out" &&
    [ "$(mig_count)" = "$before" ]; then
    ok "rebalance --cluster-transport legacy moves slots with MIGRATE ($((n3 - 3596)) to the new node)"
else
    err "rebalance --cluster-transport legacy moves slots with MIGRATE (exit $rc, ${n3:-?} slots, migrations $before -> $(mig_count))" "$out"
fi
check_clean "after the legacy rebalance"

# auto (the default): RDMAMIGRATESLOTS TRANSPORT auto; the recipient has
# no RDMA device and falls back to tcp. Reshard 500 slots from the new
# node to the first...
$cli --cluster reshard 127.0.0.1:${ports[0]} --cluster-from "$id3" --cluster-to "$id0" \
    --cluster-slots 500 --cluster-yes > "$out" 2>&1
rc=$?
if [ $rc = 0 ] && ! grep -q 'does not support\|^Moving slot' "$out" &&
    grep -q "with RDMAMIGRATESLOTS (transport auto" "$out" &&
    grep -Eq "$summary_re" "$out" &&
    grep -q "^\[OK\] 500 slots from 127.0.0.1:$p3 to 127.0.0.1:${ports[0]}: " "$out" &&
    [ "$(slots_of "$p3")" = $((n3 - 500)) ]; then
    ok "reshard (auto): 500 slots with RDMAMIGRATESLOTS, over tcp"
else
    err "reshard (auto): 500 slots with RDMAMIGRATESLOTS, over tcp (exit $rc)" "$out"
fi
check_clean "after the auto reshard"
# ... and rebalance back with an explicit auto.
"${rebalance[@]}" --cluster-transport auto > "$out" 2>&1
rc=$?
n=$(slots_of "$p3")
if [ $rc = 0 ] && ! grep -q 'does not support\|^Moving slot' "$out" &&
    grep -Eq "$summary_re" "$out" && [ "${n:-0}" -ge 4090 ]; then
    ok "rebalance --cluster-transport auto: RDMAMIGRATESLOTS over tcp ($((n - n3 + 500)) slots to the new node)"
else
    err "rebalance --cluster-transport auto: RDMAMIGRATESLOTS over tcp (exit $rc, ${n:-?} slots)" "$out"
fi
check_clean "after the auto rebalance"

# Slots without keys move too (a cluster holds many: here ~2,800 of the
# 16384 slots have keys). RDMAMIGRATESLOTS straight to the node: 5 empty
# slots of the new node back to the first.
mapfile -t empty < <($cli -p "$p3" cluster nodes | awk '/myself/ { for (i = 9; i <= NF; i++) print $i }' |
    awk -F- '{ for (s = $1; s <= ($2 == "" ? $1 : $2); s++) print s }' | head -300 |
    while read -r s; do [ "$($cli -p "$p3" cluster countkeysinslot "$s")" = 0 ] && echo "$s"; done | head -5)
r=$($cli -p "$p3" rdmamigrateslots 127.0.0.1 ${ports[0]} "${empty[@]}" transport tcp 2>&1 | tr '\n' ' ')
if [ "${#empty[@]}" = 5 ] && [[ "$r" == "transport tcp slots 5 keys 0 "* ]]; then
    ok "RDMAMIGRATESLOTS of 5 slots without keys (${empty[*]})"
else
    err "RDMAMIGRATESLOTS of 5 slots without keys (${empty[*]}): $r"
fi
check_clean "after moving slots without keys"

# A donor with migration-max-bandwidth: redis-cli gives the migration a
# TIMEOUT long enough for the donor's data at that pace (60 s + its
# used_memory at 1 MB/s, instead of at 10 MB/s), and the slots move.
$cli -p "$p3" config set migration-max-bandwidth 1mb > /dev/null
used=$($cli -p "$p3" info memory | tr -d '\r' | awk -F: '/^used_memory:/ { print $2 }')
$cli --cluster reshard 127.0.0.1:${ports[0]} --cluster-from "$id3" --cluster-to "$id0" \
    --cluster-slots 100 --cluster-yes --cluster-transport tcp > "$out" 2>&1
rc=$?
$cli -p "$p3" config set migration-max-bandwidth 0 > /dev/null
shown=$(sed -n 's/.*with RDMAMIGRATESLOTS (transport tcp, timeout \([0-9]*\) ms).*/\1/p' "$out" | head -1)
want=$((60000 + ${used:-0} / 1048))
if [ $rc = 0 ] && [ -n "$shown" ] && [ "${used:-0}" -gt 0 ] &&
    [ "$shown" -ge $((want - want / 50)) ] && [ "$shown" -le $((want + want / 50)) ] &&
    grep -q "^\[OK\] 100 slots from 127.0.0.1:$p3 to 127.0.0.1:${ports[0]}: " "$out"; then
    ok "reshard from a donor limited to 1 MB/s: TIMEOUT $shown ms (60 s + used_memory $used B at 1 MB/s)"
else
    err "reshard from a donor limited to 1 MB/s: TIMEOUT ${shown:-?} ms, want about $want (exit $rc)" "$out"
fi
check_clean "after the limited reshard"

# Nothing went wrong on the servers' side.
if grep -q 'BUG\|ASSERT\|crashed' "$dir"/*/log; then
    err "no crash or assertion in the server logs"
    grep -h -B2 -A5 'BUG\|ASSERT\|crashed' "$dir"/*/log | head -30 | sed 's/^/    /'
else
    ok "no crash or assertion in the server logs"
fi
for p in "${ports[@]}"; do
    kill -0 "${pids[$(( p - base ))]}" 2>/dev/null || err "server $p still running"
done

exit $failed
