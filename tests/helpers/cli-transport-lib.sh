# cli-transport-lib.sh -- what tests/build/cli-transport.sh and
# tests/build/cli-transport-mock.sh share; sourced by both, from the
# repository root, after they set:
#   name    the prefix of their "[ok]: ..." / "[err]: ..." lines
#   ports   the 4 ports redis-cli talks to (ports[0] is the entry node;
#           they may set it after sourcing, once ports_free found some)
#   keys    how many keys tests/helpers/cli-transport-keys.py wrote
#   dir     their temporary directory (removed on exit, unless
#           CLI_TRANSPORT_KEEP=1)
# It defines cli, failed, pids (processes to kill on exit, with the trap),
# ok, err, need_binaries, ports_free, free_base, wait_mesh, check_clean
# and slots_of.

cli=bin/redis-cli
failed=0
pids=()

cleanup() {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    if [ "${CLI_TRANSPORT_KEEP:-}" = 1 ]; then
        echo "(CLI_TRANSPORT_KEEP=1: logs kept in $dir)"
    else
        rm -rf "$dir"
    fi
}
trap cleanup EXIT

ok() { echo "[ok]: $name: $1"; }
err() {
    echo "[err]: $name: $1"
    # (the file's last lines, without colours, long ones cut)
    [ -n "${2:-}" ] && [ -f "$2" ] &&
        sed 's/\x1b\[[0-9;]*m//g; s/^/    /' "$2" | cut -c1-300 | tail -25
    failed=1
}

need_binaries() {
    local b
    for b in bin/redis-server $cli; do
        [ -x "$b" ] || { err "$b not built (run make)"; exit 1; }
    done
}

# ports_free P...: no socket at all, in any state, has one of these as its
# local port. Ports 33400-33499 lie in Linux's ephemeral range: a client
# socket, or one in TIME-WAIT, of an earlier run can hold one for a minute
# (a redis-cli's ephemeral port in TIME-WAIT is enough: redis-server then
# fails with "Address already in use").
ports_free() {
    local used p
    used=$(ss -Htan 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }' | sort -u)
    for p in "$@"; do
        grep -qx "$p" <<< "$used" && return 1
    done
    return 0
}

# free_base "OFFSETS" CANDIDATES...: prints the first candidate base P
# such that every P+offset is free (ports_free), waiting up to 70 s for
# TIME-WAITs to expire if none is; returns non-zero if none became free.
free_base() {
    local offsets=$1 b o ps
    shift
    for _ in $(seq 35); do
        for b in "$@"; do
            ps=()
            for o in $offsets; do ps+=($((b + o))); done
            ports_free "${ps[@]}" && { echo "$b"; return 0; }
        done
        sleep 2
    done
    return 1
}

# wait_mesh: every node knows the 4 others and sees the cluster up (a node
# that does not answers MIGRATE with CLUSTERDOWN) -- before slots move.
# Returns non-zero after 20 s.
wait_mesh() {
    local known p
    for _ in $(seq 200); do
        known=0
        for p in "${ports[@]}"; do
            [ "$($cli -p "$p" cluster nodes | grep -c ' connected')" = 4 ] &&
                $cli -p "$p" cluster info | grep -q 'cluster_state:ok' &&
                known=$((known + 1))
        done
        [ $known = 4 ] && return 0
        sleep 0.1
    done
    return 1
}

# check_clean LABEL: --cluster check passes (all slots covered, no open
# slot, all nodes agree; it waits a few seconds for a new config to reach
# every node), and every key written by cli-transport-keys.py is there,
# on the node that owns its slot, with its value.
check_clean() {
    local out=$dir/check.out
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
    if python3 tests/helpers/cli-transport-keys.py --check "$keys" ${ports[0]} > "$out.keys" 2>&1; then
        ok "$1: all $keys keys on their owners with their values"
    else
        err "$1: all $keys keys on their owners with their values" "$out.keys"
    fi
}

# slots_of PORT: how many slots the node at PORT serves.
slots_of() {
    $cli --cluster info 127.0.0.1:${ports[0]} 2>/dev/null |
        grep "^127.0.0.1:$1 " | sed -E 's/.* ([0-9]+) slots.*/\1/'
}
