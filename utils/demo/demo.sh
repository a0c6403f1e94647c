#!/usr/bin/env bash
# demo.sh  (make demo; the data set is written by load.tcl beside it)
#
# Shows, on loopback, the operation this project exists to speed up:
# a 3-master Redis Cluster holding data gets a 4th, empty master and
# `redis-cli --cluster rebalance` moves a quarter of the slots to it.
# It starts every server itself, prints what happened (keys, slots, time,
# MB/s, whether every key survived) and stops every server it started,
# even when interrupted.
#
# The rebalance uses the block path: `--cluster-transport auto` sends one
# RDMAMIGRATESLOTS per donor, which moves the slots' memory blocks over
# RDMA, or over TCP where the recipient has no RDMA device (as on most
# machines); redis-cli prints one summary line per donor.
#
# Knobs: DEMO_KEYS (default 200000), DEMO_VALUE_SIZE (bytes, default 100),
# DEMO_PORT (first of four ports, default 30701).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin="$repo/bin"
keys=${DEMO_KEYS:-200000}
vsize=${DEMO_VALUE_SIZE:-100}
base=${DEMO_PORT:-30701}
ports="$base $((base + 1)) $((base + 2)) $((base + 3))"
new=$((base + 3))

[ -x "$bin/redis-server" ] || { echo "demo: build first (make)" >&2; exit 1; }
dir=$(mktemp -d /tmp/rdmamig-demo.XXXXXX)
pids=()

cleanup() {
    local p
    for p in $ports; do "$bin/redis-cli" -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '\n== %s\n' "$*"; }
cli() { "$bin/redis-cli" -p "$@"; }
info_field() { cli "$1" info "$2" | tr -d '\r' | sed -n "s/^$3://p"; }
keycount() { local n=0 p; for p in $ports; do n=$((n + $(cli "$p" dbsize))); done; echo $n; }
shape() {
    local p
    for p in $ports; do
        printf '  127.0.0.1:%s  %6s keys  %5s slots\n' "$p" "$(cli "$p" dbsize)" \
            "$(cli "$p" cluster nodes | awk '/myself/ { n = 0; for (i = 9; i <= NF; i++) {
                split($i, r, "-"); n += (r[2] == "" ? 1 : r[2] - r[1] + 1) } print n }')"
    done
}
wait_ok() { # ports...
    local p
    for p in "$@"; do
        for _ in $(seq 200); do
            [ "$(info_field "$p" cluster cluster_enabled)" = 1 ] &&
            [ "$(cli "$p" cluster info | tr -d '\r' | sed -n 's/^cluster_state://p')" = ok ] && break
            sleep 0.1
        done
    done
}

for p in $ports; do
    if cli "$p" ping >/dev/null 2>&1; then
        echo "demo: port $p is in use; set DEMO_PORT to a free range" >&2; exit 1
    fi
done

say "$("$bin/redis-server" --version)"
say "starting 4 cluster-enabled servers on 127.0.0.1 ports $ports (data in $dir)"
for p in $ports; do
    mkdir -p "$dir/$p"
    "$bin/redis-server" --port "$p" --bind 127.0.0.1 --cluster-enabled yes \
        --cluster-config-file "$dir/$p/nodes.conf" --dir "$dir/$p" \
        --save "" --appendonly no --logfile "$dir/$p/redis.log" &
    pids+=($!)
done
for p in $ports; do
    for _ in $(seq 100); do cli "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done

say "creating a 3-master cluster"
"$bin/redis-cli" --cluster create 127.0.0.1:$base 127.0.0.1:$((base + 1)) \
    127.0.0.1:$((base + 2)) --cluster-yes >/dev/null
wait_ok $base $((base + 1)) $((base + 2))

say "loading $keys keys of $vsize bytes (spread over all slots, redis-cli --pipe)"
specs=()
for p in $base $((base + 1)) $((base + 2)); do
    specs+=("$p=$(cli "$p" cluster nodes | awk '/myself/ { r = ""; for (i = 9; i <= NF; i++)
        r = r (r == "" ? "" : ",") $i; print r }')")
done
tclsh "$here/load.tcl" "$keys" "$vsize" "$dir" "${specs[@]}"
for p in $base $((base + 1)) $((base + 2)); do
    cli "$p" --pipe < "$dir/$p.resp" | tail -1 | sed "s/^/  127.0.0.1:$p: /"
done
before=$(keycount)
echo "  $before keys in the cluster"

say "adding an empty 4th master (127.0.0.1:$new)"
"$bin/redis-cli" --cluster add-node 127.0.0.1:$new 127.0.0.1:$base >/dev/null
wait_ok $ports
shape

say "rebalancing: redis-cli --cluster rebalance --cluster-use-empty-masters --cluster-transport auto (memory blocks, RDMAMIGRATESLOTS)"
t0=$(date +%s.%N)
"$bin/redis-cli" --cluster rebalance 127.0.0.1:$base --cluster-use-empty-masters \
    --cluster-transport auto > "$dir/rebalance.log" 2>&1 ||
    { cat "$dir/rebalance.log"; echo "demo: rebalance failed" >&2; exit 1; }
t1=$(date +%s.%N)
# one summary per donor: slots, keys, MB, time, transport, phases, write pause
grep '^\[OK\] [0-9]* slots from\|does not support' "$dir/rebalance.log" | sed 's/^/  /' |
    fold -s -w 100 | sed 's/^\([^ ]\)/      \1/'
wait_ok $ports
shape

after=$(keycount)
moved=$(cli "$new" dbsize)
# MB: the memory blocks sent (the summaries), or the recipient's data set
# when slots moved with MIGRATE
mb=$(sed -n 's/^\[OK\] [0-9]* slots from .* keys, \([0-9.]*\) MB in .*/\1/p' "$dir/rebalance.log" |
    awk '{ s += $1 } END { if (NR) print s }')
what="MB of memory blocks"
if [ -z "$mb" ]; then
    mb=$(info_field "$new" memory used_memory_dataset | awk '{ print $1 / 1048576 }')
    what="MB of data"
fi
secs=$(awk "BEGIN { print $t1 - $t0 }")
say "what happened"
awk -v s="$secs" -v k="$moved" -v m="$mb" -v w="$what" 'BEGIN {
    printf "  moved %d keys (%.1f %s) to the new master in %.1f s: %.0f keys/s, %.1f MB/s\n",
        k, m, w, s, k / s, m / s }'
if [ "$after" = "$before" ]; then
    echo "  keys before: $before, after: $after -- nothing lost"
else
    echo "  keys before: $before, after: $after -- MISMATCH" >&2; exit 1
fi
"$bin/redis-cli" --cluster check 127.0.0.1:$base > "$dir/check.log" 2>&1 &&
    echo "  redis-cli --cluster check: all slots covered, no open slots" ||
    { cat "$dir/check.log"; echo "demo: cluster check failed" >&2; exit 1; }

say "stopping the servers"
cleanup
trap - EXIT
left=0
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left=$((left + 1)); done
echo "  $left server processes left running"
[ $left = 0 ]
