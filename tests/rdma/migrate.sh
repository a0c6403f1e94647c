#!/bin/sh
# tests/rdma/migrate.sh -- RDMAMIGRATESLOTS end to end over real RDMA,
# INSIDE the rxe-vm guest (tests/rdma/run.sh, `make test-rdma`).
#
# Three cluster-mode masters, each bound to its own address of rxe0:
#   A 10.99.0.1:30101 (slots 0-5460, the donor), B 10.99.0.2:30102
#   (5461-10922), C 10.99.0.3:30103 (10923-16383). A is filled with a few
#   thousand keys of every type and encoding in slots of 0-2999, plus a few
#   keys in a slot that is not moved.
#
#   rdma       A -> B 0-1999 2000-2999 TRANSPORT rdma: the reply says rdma
#              and the key count; B has every key with the same DEBUG
#              DIGEST-VALUE and PEXPIRETIME; A has none; both nodes' CLUSTER
#              NODES give the slots to B; INFO migration on A counts WRs and
#              chains and says migration_last_transport:rdma; DEBUG
#              SLOTCOMPACT CHECK finds nothing wrong in either node's blocks
#   back       B -> A TRANSPORT auto at migration-max-bandwidth 1mb: auto
#              picks rdma, the transfer takes the time the limit gives it,
#              data identical again, both nodes' blocks checked again
#   kill       migration-test-delay-patch 2000 on A, B SIGKILLed during the
#              delay: the migration fails, A keeps every key unchanged, no
#              frozen slot; B is restarted and has no open slot
#   cancel     migration-test-delay-transfer 2000, CANCEL: the error says
#              cancel, C holds none of the keys and imports nothing
#   bad data   A -> C with migration-test-corrupt "manifest 1" on C: the
#              error gives C's reason (bad manifest), C holds nothing, A
#              keeps every key and the slots, no node crashed
#   bgsave     A -> B with migration-test-delay-write: A and B BGSAVE
#              after both registered their blocks, before the first WRITE
#              (fork with live MRs), and both children still run when the
#              migration is over: migration and both BGSAVEs succeed, data
#              identical
#
# Prints "[ok]: ..." / "[err]: ..." per check and ends with
# "migrate: N passed, N failed". Environment: RDMA_REDIS_BIN, RDMA_REDIS_CLI,
# MIG_IPS ("ipA ipB ipC", default the rxe0 addresses), MIG_TRANSPORT
# (default rdma; tcp lets the script itself be tried without RDMA),
# MIG_KEEP_LOGS (a directory the three server logs are copied to).
BIN=${RDMA_REDIS_BIN:-bin/redis-server}
CLI=${RDMA_REDIS_CLI:-bin/redis-cli}
T=${MIG_TRANSPORT:-rdma}
set -- ${MIG_IPS:-10.99.0.1 10.99.0.2 10.99.0.3}
IPA=$1 IPB=$2 IPC=$3
PA=30101 PB=30102 PC=30103
RANGES="0-1999 2000-2999"
passed=0 failed=0
base=$(mktemp -d "${TMPDIR:-/tmp}/rdma-migrate.XXXXXX")
t0=$(date +%s)

check() { # name condition-result
    if [ "$2" = 0 ]; then echo "[ok]: $1"; passed=$((passed + 1))
    else echo "[err]: $1"; failed=$((failed + 1)); fi
}
say() { echo "    $*"; }
section() { echo "=== [$(($(date +%s) - t0)) s] $*"; }
stamp() { echo "    [$(($(date +%s) - t0)) s] $*"; }
cli() { # ip port args...
    h=$1 p=$2; shift 2
    timeout 120 "$CLI" -h "$h" -p "$p" "$@" | tr -d '\r'
}
field() { # name  (reads a flat field/value reply on stdin)
    awk -v f="$1" 'NR % 2 == 1 && $0 == f { getline; print; exit }'
}
info_field() { # ip port section name
    cli "$1" "$2" info "$3" | sed -n "s/^$4://p"
}

start_node() { # name ip port
    d=$base/$1
    mkdir -p "$d"
    if [ "$(cli "$2" "$3" ping 2>/dev/null)" = PONG ]; then
        echo "    $2:$3 is taken by another server"; return 1
    fi
    timeout 900 "$BIN" --bind "$2" --port "$3" --cluster-port $(($3 + 10000)) \
        --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-node-timeout 15000 --cluster-announce-ip "$2" \
        --enable-debug-command yes --save "" --appendonly no \
        --protected-mode no --dir "$d" --logfile "$d/log" >/dev/null 2>&1 &
    n=0
    until [ "$(cli "$2" "$3" ping 2>/dev/null)" = PONG ]; do
        n=$((n + 1)); [ $n -gt 150 ] && { echo "    $1 does not start"; tail "$d/log"; return 1; }
        sleep 0.2
    done
    cli "$2" "$3" info server | sed -n 's/^process_id://p' > "$d/pid"
}
stop_all() {
    for n in A B C; do
        [ -f "$base/$n/pid" ] && kill -9 "$(cat "$base/$n/pid")" 2>/dev/null
    done
}
trap stop_all EXIT
trap 'exit 1' INT TERM HUP PIPE

# cluster_ok: every node says cluster_state:ok and knows 3 connected masters.
cluster_ok() {
    for hp in "$IPA $PA" "$IPB $PB" "$IPC $PC"; do
        set -- $hp
        printf 'cluster info\ncluster nodes\n' | "$CLI" -h "$1" -p "$2" 2>/dev/null |
            tr -d '\r' > "$base/cluster.tmp"
        grep -qx 'cluster_state:ok' "$base/cluster.tmp" || return 1
        [ "$(grep -c ' connected' "$base/cluster.tmp")" = 3 ] || return 1
        awk 'NF >= 8 && $3 ~ /fail|handshake|noaddr/ { bad = 1 } END { exit !bad }' \
            "$base/cluster.tmp" && return 1
    done
    return 0
}
wait_cluster_ok() {
    n=0
    until cluster_ok; do
        n=$((n + 1)); [ $n -gt 120 ] && return 1; sleep 0.5
    done
    return 0
}

# owners ip port slot...: the node ids owning the slots in that node's
# CLUSTER NODES, one line, in the order given.
owners() {
    h=$1 p=$2; shift 2
    cli "$h" "$p" cluster nodes | awk -v want="$*" '{
        for (i = 9; i <= NF; i++) {
            if ($i ~ /^\[/) continue
            n = split($i, r, "-"); lo[++m] = r[1]; hi[m] = (n == 2 ? r[2] : r[1]); id[m] = $1
        }}
        END { k = split(want, w, " ")
              for (j = 1; j <= k; j++) {
                  o = "none"
                  for (x = 1; x <= m; x++) if (w[j] + 0 >= lo[x] + 0 && w[j] + 0 <= hi[x] + 0) o = id[x]
                  printf "%s%s", o, (j < k ? " " : "\n") } }'
}
# repeat_id N id: "id id ... id" (N times), to compare with owners.
repeat_id() {
    n=$1 out=""
    while [ $n -gt 0 ]; do out="$out${out:+ }$2"; n=$((n - 1)); done
    echo "$out"
}
# importing ip port: the IMPORTING/MIGRATING entries of the node itself.
importing() {
    cli "$1" "$2" cluster nodes | awk '$3 ~ /myself/ { for (i = 9; i <= NF; i++) if ($i ~ /^\[/) print $i }'
}

# snap ip port file: "key digest pexpiretime" of every key of the key list.
snap() {
    xargs "$CLI" -h "$1" -p "$2" debug digest-value < "$base/keys" | tr -d '\r' > "$base/d.tmp"
    sed 's/^/PEXPIRETIME /' "$base/keys" | "$CLI" -h "$1" -p "$2" | tr -d '\r' > "$base/t.tmp"
    paste -d ' ' "$base/keys" "$base/d.tmp" "$base/t.tmp" > "$3"
}
same_as_orig() { # ip port
    snap "$1" "$2" "$base/now"
    cmp -s "$base/orig" "$base/now" && return 0
    diff "$base/orig" "$base/now" | head -5 | sed 's/^/    /'
    return 1
}
# blocks_sound ip port: DEBUG SLOTCOMPACT CHECK finds no key pointing at a
# dead or another slot's allocation, and no live allocation no key reaches
# (given a few seconds: the lazyfree thread may still be freeing values).
blocks_sound() {
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        "$CLI" -h "$1" -p "$2" debug slotcompact check | tr -d '\r' > "$base/check"
        awk 'NR % 2 == 1 { k = $0 } NR % 2 == 0 { v[k] = $0 }
             END { exit !(v["misplaced"] == "0" && v["dead"] == "0" && v["unreached"] == "0") }' \
            "$base/check" && return 0
        sleep 0.5
    done
    paste -d' ' - - < "$base/check" | sed 's/^/    /'
    return 1
}
# keys_in ip port: keys of the tag slots the node holds.
keys_in() {
    for s in $slots; do echo "cluster countkeysinslot $s"; done |
        "$CLI" -h "$1" -p "$2" | tr -d '\r' | awk '{ n += $1 } END { print n + 0 }'
}
# wait_phase ip port phase: RDMAMIGRATESLOTS STATUS reaches phase (10 s).
wait_phase() {
    n=0
    until [ "$(cli "$1" "$2" rdmamigrateslots status | field phase)" = "$3" ]; do
        n=$((n + 1)); [ $n -gt 100 ] && return 1; sleep 0.1
    done
    return 0
}
# delays_off ip port: every migration-test-delay-* of that node back to 0.
delays_off() {
    cli "$1" "$2" config set migration-test-delay-prepare 0 migration-test-delay-watch 0 migration-test-delay-transfer 0 migration-test-delay-write 0 migration-test-delay-chunk 0 migration-test-delay-patch 0 migration-test-delay-handover 0 migration-test-delay-handed 0 migration-test-delay-delete 0 >/dev/null
}
# delayed_migration phase to_ip to_port out: A migrates $RANGES to the
# given node with migration-test-delay-<phase> 2000, in the background
# ($bg: its pid, reply in out); $ph is 0 once A's STATUS shows the phase.
delayed_migration() {
    cli "$IPA" "$PA" config set "migration-test-delay-$1" 2000 >/dev/null
    cli "$IPA" "$PA" rdmamigrateslots "$2" "$3" $RANGES transport "$T" timeout 60000 > "$4" 2>&1 &
    bg=$!
    wait_phase "$IPA" "$PA" "$1"
    ph=$?
}
# c_import_ended: waits (up to 5 s) for C's import to end; true if it did
# and C holds no key and imports nothing.
c_import_ended() {
    n=0
    until [ "$(info_field "$IPC" "$PC" migration migration_state)" = idle ]; do
        n=$((n + 1)); [ $n -gt 50 ] && break; sleep 0.1
    done
    [ "$(cli "$IPC" "$PC" dbsize)" = 0 ] && [ -z "$(importing "$IPC" "$PC")" ] &&
        [ "$(info_field "$IPC" "$PC" migration migration_state)" = idle ]
}
show_reply() { # file
    tr '\n' ' ' < "$1" | sed 's/^/    reply: /'; echo
}

if [ ! -x "$BIN" ] || [ ! -x "$CLI" ]; then
    echo "[err]: $BIN or $CLI not built"
    echo "migrate: 0 passed, 1 failed"
    exit 1
fi

# ---------------------------------------------------------------- 1. setup
section "1. setup: three masters, data"
start_node A "$IPA" "$PA" && start_node B "$IPB" "$PB" && start_node C "$IPC" "$PC"
check "three cluster-mode masters start on $IPA, $IPB, $IPC" $?
cli "$IPA" "$PA" cluster addslotsrange 0 5460 >/dev/null
cli "$IPB" "$PB" cluster addslotsrange 5461 10922 >/dev/null
cli "$IPC" "$PC" cluster addslotsrange 10923 16383 >/dev/null
cli "$IPA" "$PA" cluster meet "$IPB" "$PB" $((PB + 10000)) >/dev/null
cli "$IPA" "$PA" cluster meet "$IPC" "$PC" $((PC + 10000)) >/dev/null
wait_cluster_ok
stamp "cluster ok"
check "cluster_state:ok on all three" $?
IDA=$(cli "$IPA" "$PA" cluster myid)
IDB=$(cli "$IPB" "$PB" cluster myid)
IDC=$(cli "$IPC" "$PC" cluster myid)

# Hash tags: 6 in distinct slots of 0-2999 (moved), 1 in 3000-5460 (stays).
i=0
while [ $i -lt 200 ]; do echo "cluster keyslot {t$i}"; i=$((i + 1)); done |
    "$CLI" -h "$IPA" -p "$PA" | tr -d '\r' |
    awk '{ s = $1; t = "t" (NR - 1)
           if (s < 3000 && !(s in seen) && n < 6) { seen[s] = 1; n++; print t, s }
           if (s >= 3000 && s <= 5460 && !stay) { stay = 1; print t, s, "stay" }
           if (s >= 5461 && s <= 10922 && !b) { b = 1; print t, s, "b", "b" } }' > "$base/tags"
tags=$(awk 'NF == 2 { print $1 }' "$base/tags" | tr '\n' ' ')
slots=$(awk 'NF == 2 { print $2 }' "$base/tags" | tr '\n' ' ')
stay=$(awk 'NF == 3 { print $1 }' "$base/tags")
stayslot=$(awk 'NF == 3 { print $2 }' "$base/tags")
btag=$(awk 'NF == 4 { print $1 }' "$base/tags")
tag1=$(echo $tags | cut -d' ' -f1)
slot1=$(echo $slots | cut -d' ' -f1)
say "tags (slot): $(awk 'NF == 2 { printf "%s(%s) ", $1, $2 }' "$base/tags"); stays: $stay($stayslot)"

# The data, as RESP commands (values over 64 KB do not fit inline).
awk -v tags="$tags" -v stay="$stay" '
function cmd(n,   i, s) {
    s = "*" n "\r\n"
    for (i = 1; i <= n; i++) s = s "$" length(a[i]) "\r\n" a[i] "\r\n"
    printf "%s", s
}
function k(t, name) { return "{" t "}" name }
function rep(c, n,   s) { s = ""; while (length(s) < n) s = s c; return substr(s, 1, n) }
BEGIN {
    nt = split(tags, T, " ")
    pad100 = rep("x", 100); pad1000 = rep("y", 1000)
    for (i = 0; i < 1600; i++) {           # strings: int, short, 100 B, 1000 B
        t = T[i % nt + 1]; a[1] = "SET"; a[2] = k(t, "s:" i)
        m = i % 4
        a[3] = m == 0 ? i * 7919 : m == 1 ? "v" i : m == 2 ? i pad100 : i pad1000
        cmd(3)
        if (i % 16 == 0) { a[1] = "EXPIRE"; a[3] = 3600 + i; cmd(3) }
    }
    for (i = 0; i < 4; i++) {              # big strings (300 KB, raw)
        a[1] = "SETRANGE"; a[2] = k(T[i % nt + 1], "big:" i); a[3] = 299999; a[4] = "z" i; cmd(4)
        a[1] = "SETRANGE"; a[3] = 1000; a[4] = rep("b", 5000); cmd(4)
    }
    for (i = 0; i < 200; i++) {            # small lists
        a[1] = "RPUSH"; a[2] = k(T[i % nt + 1], "l:" i)
        for (j = 0; j < 5; j++) a[3 + j] = "e" j "-" i
        a[8] = i; cmd(8)
        if (i % 20 == 0) { a[1] = "PEXPIRE"; a[3] = 7200000 + i; cmd(3) }
    }
    for (i = 0; i < 2; i++)                # long lists: several quicklist nodes
        for (b = 0; b < 30; b++) {
            a[1] = "RPUSH"; a[2] = k(T[i % nt + 1], "biglist:" i)
            for (j = 0; j < 100; j++) a[3 + j] = "item-" (b * 100 + j) (j % 10 == 0 ? pad100 : "")
            cmd(102)
        }
    for (i = 0; i < 300; i++) {            # small hashes (listpack)
        a[1] = "HSET"; a[2] = k(T[i % nt + 1], "h:" i)
        for (j = 0; j < 5; j++) { a[3 + 2 * j] = "f" j; a[4 + 2 * j] = "val" i "-" j }
        cmd(12)
        if (i % 30 == 0) { a[1] = "EXPIRE"; a[3] = 5000 + i; cmd(3) }
    }
    for (i = 0; i < 3; i++)                # big hashes: 1000 fields, hashtable
        for (b = 0; b < 10; b++) {
            a[1] = "HSET"; a[2] = k(T[i % nt + 1], "bighash:" i)
            for (j = 0; j < 100; j++) { a[3 + 2 * j] = "field" (b * 100 + j); a[4 + 2 * j] = "value" (b * 100 + j) }
            cmd(202)
        }
    for (i = 0; i < 200; i++) {            # intsets
        a[1] = "SADD"; a[2] = k(T[i % nt + 1], "is:" i)
        for (j = 0; j < 5; j++) a[3 + j] = i * 10 + j
        cmd(7)
    }
    a[1] = "SADD"; a[2] = k(T[1], "bigintset")
    for (j = 0; j < 400; j++) a[3 + j] = j * 3 - 500
    cmd(402)
    for (i = 0; i < 3; i++) {              # sets of strings: hashtable
        a[1] = "SADD"; a[2] = k(T[i % nt + 1], "hs:" i)
        for (j = 0; j < 300; j++) a[3 + j] = "member-" j
        cmd(302)
    }
    for (i = 0; i < 200; i++) {            # small zsets (listpack)
        a[1] = "ZADD"; a[2] = k(T[i % nt + 1], "z:" i)
        for (j = 0; j < 5; j++) { a[3 + 2 * j] = j * 1.5 + i; a[4 + 2 * j] = "m" j }
        cmd(12)
    }
    for (i = 0; i < 3; i++) {              # skiplists
        a[1] = "ZADD"; a[2] = k(T[i % nt + 1], "bigz:" i)
        for (j = 0; j < 300; j++) { a[3 + 2 * j] = j / 7; a[4 + 2 * j] = "member-" j }
        cmd(602)
        if (i == 0) { a[1] = "EXPIRE"; a[3] = 9000; cmd(3) }
    }
    for (i = 0; i < 3; i++)                # streams
        for (j = 0; j < 100; j++) {
            a[1] = "XADD"; a[2] = k(T[i % nt + 1], "x:" i); a[3] = (1000 + j) "-" i
            a[4] = "f"; a[5] = j; a[6] = "g"; a[7] = "payload-" j; cmd(7)
        }
    a[1] = "XGROUP"; a[2] = "CREATE"; a[3] = k(T[1], "x:0"); a[4] = "grp"; a[5] = "0"; cmd(5)
    for (i = 0; i < 20; i++) {             # keys that stay with A
        a[1] = "SET"; a[2] = k(stay, "stay:" i); a[3] = "still-here-" i; cmd(3)
    }
}' > "$base/data.resp"
stamp "data generated"
"$CLI" -h "$IPA" -p "$PA" --pipe < "$base/data.resp" > "$base/pipe.out" 2>&1
stamp "data loaded"
grep -q 'errors: 0, replies:' "$base/pipe.out"
check "the donor is filled through redis-cli --pipe ($(grep -o 'replies: [0-9]*' "$base/pipe.out"))" $?
cli "$IPA" "$PA" xreadgroup group grp c1 count 10 streams "{$tag1}x:0" '>' >/dev/null
: > "$base/keys"
for s in $slots; do
    cli "$IPA" "$PA" cluster getkeysinslot "$s" 100000 >> "$base/keys"
done
sort -o "$base/keys" "$base/keys"
nkeys=$(wc -l < "$base/keys")
[ "$(keys_in "$IPA" "$PA")" = "$nkeys" ] && [ "$nkeys" -gt 2000 ]
check "the donor holds $nkeys keys in the tag slots" $?
snap "$IPA" "$PA" "$base/orig"
stamp "digests taken"
mem=$(info_field "$IPA" "$PA" memory used_memory_human)
say "donor used_memory $mem; encodings: $(for key in "{$tag1}bighash:0" "{$tag1}hs:0" \
    "{$tag1}is:0" "{$tag1}bigz:0" "{$tag1}z:0" \
    "{$tag1}biglist:0" "{$tag1}s:0" "{$tag1}big:0"; do
    printf '%s ' "$(cli "$IPA" "$PA" object encoding "$key")"; done)"
enc=$(for key in bighash:0 hs:0 is:0 bigz:0 z:0 h:0; do cli "$IPA" "$PA" object encoding "{$tag1}$key"; done | tr '\n' ' ')
[ "$enc" = "hashtable hashtable intset skiplist listpack listpack " ]
check "the keys cover hashtable hashes and sets, intsets, skiplists, listpacks ($enc)" $?
awk '$3 > 0' "$base/orig" > "$base/ttl"
[ "$(wc -l < "$base/ttl")" -gt 100 ]
check "$(wc -l < "$base/ttl") keys have a TTL" $?

# ------------------------------------------------------ 2. A -> B over rdma
section "2. A -> B, TRANSPORT $T"
cli "$IPA" "$PA" rdmamigrateslots "$IPB" "$PB" $RANGES transport "$T" timeout 120000 > "$base/r1" 2>&1
show_reply "$base/r1"
[ "$(field transport < "$base/r1")" = "$T" ] && [ "$(field keys < "$base/r1")" = "$nkeys" ]
check "RDMAMIGRATESLOTS A -> B transport $T: reply transport $(field transport < "$base/r1"), keys $(field keys < "$base/r1") of $nkeys" $?
same_as_orig "$IPB" "$PB"
stamp "digests compared"
check "B has every key with the same DEBUG DIGEST-VALUE and PEXPIRETIME" $?
[ "$(keys_in "$IPA" "$PA")" = 0 ]
check "A has no keys left in the moved slots" $?
[ "$(cli "$IPA" "$PA" cluster countkeysinslot "$stayslot")" = 20 ]
check "A keeps the 20 keys of slot $stayslot (not moved)" $?
want="$(repeat_id 8 "$IDB") $IDA $IDA"
[ "$(owners "$IPA" "$PA" 0 $slots 2999 3000 "$stayslot")" = "$want" ] &&
    [ "$(owners "$IPB" "$PB" 0 $slots 2999 3000 "$stayslot")" = "$want" ]
check "CLUSTER NODES on A and B: B owns 0-2999, A still owns 3000-5460" $?
[ -z "$(importing "$IPA" "$PA")$(importing "$IPB" "$PB")" ]
check "no MIGRATING/IMPORTING left on A or B" $?
cli "$IPA" "$PA" info migration > "$base/infoA"
sed -n 's/^/    A: /p' "$base/infoA" | grep -E 'rdma|transport|last_status|frozen_slots|total_migrations'
wr=$(sed -n 's/^migration_rdma_wr_posted://p' "$base/infoA")
ch=$(sed -n 's/^migration_rdma_chains_posted://p' "$base/infoA")
lt=$(sed -n 's/^migration_last_transport://p' "$base/infoA")
[ "${wr:-0}" -gt 0 ] && [ "${ch:-0}" -gt 0 ] && [ "$lt" = "$T" ] ||
    { [ "$T" = tcp ] && [ "$lt" = tcp ]; }
check "INFO migration on A: rdma_wr_posted $wr, chains_posted $ch, last_transport $lt" $?
cli "$IPB" "$PB" get "{$tag1}s:12" | grep -qx 95028 &&
    cli "$IPA" "$PA" get "{$tag1}s:12" | grep -qx "MOVED $slot1 $IPB:$PB"
check "B serves the keys, A redirects them with MOVED" $?
blocks_sound "$IPA" "$PA" && blocks_sound "$IPB" "$PB"
check "DEBUG SLOTCOMPACT CHECK on A and B: every key's block memory live and its own, nothing unreached" $?

# --------------------------------------------------- 3. B -> A, TRANSPORT auto
section "3. B -> A, TRANSPORT auto, at migration-max-bandwidth 1mb"
# The way back paced at 1 MB/s: about 2.5 s for these ~2.6 MB of blocks
# (unpaced: 0.1-0.3 s here), in chunks of 64 KB.
cli "$IPB" "$PB" config set migration-max-bandwidth 1mb > /dev/null
cli "$IPB" "$PB" rdmamigrateslots "$IPA" "$PA" $RANGES transport auto timeout 120000 > "$base/r2" 2>&1
cli "$IPB" "$PB" config set migration-max-bandwidth 0 > /dev/null
show_reply "$base/r2"
due=$(( $(field bytes < "$base/r2") * 1000 / 1048576 ))
[ "$(field throttled_ms < "$base/r2")" -gt $((due / 2)) ] &&
    [ "$(field transfer_ms < "$base/r2")" -ge $((due - 200)) ]
check "migration-max-bandwidth 1mb: transfer $(field transfer_ms < "$base/r2") ms for $(field bytes < "$base/r2") bytes (due $due ms), waited $(field throttled_ms < "$base/r2") ms" $?
[ "$(field transport < "$base/r2")" = "$T" ] && [ "$(field keys < "$base/r2")" = "$nkeys" ]
check "RDMAMIGRATESLOTS B -> A transport auto chose $(field transport < "$base/r2"), keys $(field keys < "$base/r2")" $?
same_as_orig "$IPA" "$PA"
check "A has every key back, digests and TTLs identical" $?
want=$(repeat_id 8 "$IDA")
[ "$(keys_in "$IPB" "$PB")" = 0 ] && [ "$(owners "$IPA" "$PA" 0 $slots 2999)" = "$want" ] &&
    [ "$(owners "$IPB" "$PB" 0 $slots 2999)" = "$want" ]
check "B holds none of them, A owns 0-2999 again (both views)" $?
[ "$(info_field "$IPB" "$PB" migration migration_last_transport)" = "$T" ] &&
    { [ "$T" = tcp ] || [ "$(info_field "$IPB" "$PB" migration migration_rdma_chains_posted)" -gt 0 ]; }
check "INFO migration on B: last_transport $T, chains posted" $?
blocks_sound "$IPA" "$PA" && blocks_sound "$IPB" "$PB"
check "DEBUG SLOTCOMPACT CHECK on A and B after the way back" $?

# ------------------------------------- 4a. the recipient dies during the patch
section "4a. B killed during the patch delay"
delayed_migration patch "$IPB" "$PB" "$base/r3"
kill -9 "$(cat "$base/B/pid")"
wait $bg
stamp "migration returned"
show_reply "$base/r3"
[ $ph = 0 ] && grep -q '^ERR migration failed' "$base/r3"
check "B SIGKILLed during the patch delay: the migration replies an error" $?
same_as_orig "$IPA" "$PA"
stamp "digests compared"
check "A has every key with the same digests and TTLs" $?
[ "$(info_field "$IPA" "$PA" migration migration_frozen_slots)" = 0 ] &&
    [ "$(info_field "$IPA" "$PA" migration migration_state)" = idle ]
check "A: migration_frozen_slots:0, migration_state:idle" $?
[ "$(owners "$IPA" "$PA" 0 $slots 2999)" = "$(repeat_id 8 "$IDA")" ] && [ -z "$(importing "$IPA" "$PA")" ]
check "A still owns the slots, nothing MIGRATING" $?
cli "$IPA" "$PA" set "{$tag1}after-kill" 1 | grep -qx OK
check "A accepts writes to the slots again" $?
cli "$IPA" "$PA" del "{$tag1}after-kill" >/dev/null
delays_off "$IPA" "$PA"
start_node B "$IPB" "$PB"
stamp "B restarted"
check "B restarts (same nodes.conf)" $?
imp=$(importing "$IPB" "$PB")
[ -n "$imp" ] && say "restarted B came back with: $(echo $imp | cut -c1-80)..."
[ -z "$imp" ] && [ "$(cli "$IPB" "$PB" dbsize)" = 0 ]
check "the restarted B has no open slot and no key of the failed import" $?
[ -z "$imp" ] || cli "$IPB" "$PB" cluster setslots stable $RANGES >/dev/null
wait_cluster_ok
stamp "cluster ok"
check "cluster_state:ok again with the restarted B" $?

# ----------------------------------------------- 4b. CANCEL during the transfer
section "4b. CANCEL during the transfer delay"
delayed_migration transfer "$IPC" "$PC" "$base/r4"
cli "$IPA" "$PA" rdmamigrateslots cancel > "$base/c4"
wait $bg
show_reply "$base/r4"
[ $ph = 0 ] && grep -qx OK "$base/c4" && grep -q '^ERR migration failed.*cancel' "$base/r4"
check "CANCEL during the transfer delay: +OK, the migration's error says cancel" $?
c_import_ended
check "C holds none of the keys, no IMPORTING, its import ended ($(info_field "$IPC" "$PC" migration migration_last_status))" $?
same_as_orig "$IPA" "$PA" && [ "$(info_field "$IPA" "$PA" migration migration_frozen_slots)" = 0 ] &&
    [ "$(info_field "$IPA" "$PA" migration migration_last_status)" = cancelled ]
check "A keeps every key unchanged, no frozen slot, last_status cancelled" $?
delays_off "$IPA" "$PA"

# ------------------------------------------ 4c. bad data found by the recipient
# migration-test-corrupt on C damages the manifest of the second slot it
# patches (over RDMA, once every byte is in): the import fails, the donor's
# error carries C's reason, both roll back.
section "4c. a damaged manifest found by the recipient"
cli "$IPC" "$PC" config set migration-test-corrupt "manifest 1" >/dev/null
cli "$IPA" "$PA" rdmamigrateslots "$IPC" "$PC" $RANGES transport "$T" timeout 60000 > "$base/r4c" 2>&1
cli "$IPC" "$PC" config set migration-test-corrupt "" >/dev/null
show_reply "$base/r4c"
grep -q '^ERR migration failed.*slot [0-9]*: bad manifest' "$base/r4c"
check "the migration fails with the recipient's reason (bad manifest)" $?
c_import_ended && [ "$(info_field "$IPC" "$PC" migration migration_last_status)" = failed ]
check "C holds none of the keys, no IMPORTING, last_status failed" $?
same_as_orig "$IPA" "$PA" && [ "$(info_field "$IPA" "$PA" migration migration_frozen_slots)" = 0 ] &&
    [ "$(owners "$IPA" "$PA" 0 $slots 2999)" = "$(repeat_id 8 "$IDA")" ]
check "A keeps every key unchanged and owns the slots" $?
grep -q "crashed by signal" "$base/A/log" "$base/C/log"
[ $? = 1 ]
check "no crash on A or C" $?

# ------------------------------------------- 5. BGSAVE in the middle (fork + MRs)
section "5. BGSAVE in the middle of a migration"
# migration-test-delay-write holds the donor after both ends registered
# their blocks and before the first WRITE: A and B fork there, with live
# MRs (B's allow remote writes). rdb-key-save-delay keeps both children
# saving (A ~2500 keys x 2 ms, B 300 keys of its own x 20 ms) until after
# the WRITEs and the adoption.
i=0
while [ $i -lt 300 ]; do echo "set {$btag}own:$i v$i"; i=$((i + 1)); done |
    "$CLI" -h "$IPB" -p "$PB" | grep -c OK > "$base/own"
cli "$IPA" "$PA" config set rdb-key-save-delay 2000 >/dev/null
cli "$IPB" "$PB" config set rdb-key-save-delay 20000 >/dev/null
cli "$IPA" "$PA" config set migration-test-delay-write 2500 >/dev/null
cli "$IPA" "$PA" rdmamigrateslots "$IPB" "$PB" $RANGES transport "$T" timeout 120000 > "$base/r5" 2>&1 &
bg=$!
n=0
until grep -q 'migration-test-delay-write:' "$base/A/log"; do
    n=$((n + 1)); [ $n -gt 300 ] && break; sleep 0.1
done
cli "$IPA" "$PA" bgsave > "$base/b5a"
cli "$IPB" "$PB" bgsave > "$base/b5b"
stamp "BGSAVE on A and B, with the blocks registered on both"
r5a=$(cli "$IPA" "$PA" rdmamigrateslots status | field bytes)
wait $bg
stamp "migration returned"
alive=$(info_field "$IPA" "$PA" persistence rdb_bgsave_in_progress)$(info_field "$IPB" "$PB" persistence rdb_bgsave_in_progress)
show_reply "$base/r5"
say "$(grep 'migration-test-delay-write:' "$base/A/log" | cut -d' ' -f5- | tail -1)"
say "BGSAVE A: $(cat "$base/b5a"); BGSAVE B: $(cat "$base/b5b"); bytes sent when they forked: $r5a; children still saving after the migration (A B): $alive"
[ "$(cat "$base/own")" = 300 ] && grep -q 'started' "$base/b5a" && grep -q 'started' "$base/b5b" && [ "$r5a" = 0 ]
check "BGSAVE on A and on B started after both registered their blocks, before any WRITE" $?
[ "$(field transport < "$base/r5")" = "$T" ] && [ "$(field keys < "$base/r5")" = "$nkeys" ]
check "the migration A -> B succeeds alongside the BGSAVEs" $?
[ "$alive" = 11 ]
check "both BGSAVE children outlived the WRITEs and the adoption" $?
same_as_orig "$IPB" "$PB"
check "B has every key with the same digests and TTLs" $?
[ "$(keys_in "$IPA" "$PA")" = 0 ] && [ "$(cli "$IPB" "$PB" dbsize)" = $((nkeys + 300)) ]
check "A has none of them; B holds them and its own 300" $?
cli "$IPA" "$PA" config set rdb-key-save-delay 0 >/dev/null
cli "$IPB" "$PB" config set rdb-key-save-delay 0 >/dev/null
n=0
while [ "$(info_field "$IPA" "$PA" persistence rdb_bgsave_in_progress)$(info_field "$IPB" "$PB" persistence rdb_bgsave_in_progress)" != 00 ]; do
    n=$((n + 1)); [ $n -gt 300 ] && break; sleep 0.2
done
[ "$(info_field "$IPA" "$PA" persistence rdb_last_bgsave_status)" = ok ] &&
    [ "$(info_field "$IPB" "$PB" persistence rdb_last_bgsave_status)" = ok ]
check "rdb_last_bgsave_status:ok on A and B" $?
delays_off "$IPA" "$PA"
# The dump B saved during the patch delay must load (no adopted keys yet).
for n in A B C; do
    grep -E 'WARNING|panic|ASSERT|Guru' "$base/$n/log" | grep -v 'overcommit\|THP\|Slot migration (' | sed "s/^/    $n log: /" | head -5
done
grep -q 'Guru\|ASSERT' "$base/A/log" "$base/B/log" "$base/C/log"
[ $? = 1 ]
check "no crash or assertion in any server log" $?

echo "    elapsed $(($(date +%s) - t0)) s"
stop_all
trap - EXIT
if [ $failed != 0 ]; then
    for n in A B C; do echo "    --- $n log (tail)"; tail -15 "$base/$n/log" | sed 's/^/    /'; done
fi
[ -n "$MIG_KEEP_LOGS" ] && mkdir -p "$MIG_KEEP_LOGS" &&
    for n in A B C; do cp "$base/$n/log" "$MIG_KEEP_LOGS/$n.log"; done
rm -rf "$base"
echo "migrate: $passed passed, $failed failed"
[ $failed = 0 ]
