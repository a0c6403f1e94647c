#!/bin/sh
# tests/rdma/info.sh -- run INSIDE the rxe-vm guest (tests/rdma/run.sh).
# A redis-server of this build, started on an rxe0 address, must report
# that RDMA is compiled in and that it sees the SoftRoCE device:
# INFO server rdma_support:yes and rdma_devices >= 1.
BIN=${RDMA_REDIS_BIN:-bin/redis-server}
CLI=${RDMA_REDIS_CLI:-bin/redis-cli}
IP=10.99.0.3 PORT=30999
dir=$(mktemp -d "${TMPDIR:-/tmp}/rdma-info.XXXXXX")
passed=0 failed=0
check() { # name condition-result
    if [ "$2" = 0 ]; then echo "[ok]: $1"; passed=$((passed + 1))
    else echo "[err]: $1"; failed=$((failed + 1)); fi
}
timeout 60 "$BIN" --bind "$IP" --port "$PORT" --protected-mode no --dir "$dir" \
    --save "" --logfile "$dir/log" &
pid=$!
n=0
until "$CLI" -h "$IP" -p "$PORT" ping >/dev/null 2>&1; do
    n=$((n + 1)); [ $n -gt 100 ] && break; sleep 0.2
done
info=$("$CLI" -h "$IP" -p "$PORT" info server | tr -d '\r')
echo "$info" | grep -E '^(rdma_|upstream_patchlevel)' | sed 's/^/    /'
echo "$info" | grep -qx 'rdma_support:yes'; check "redis-server in the guest reports rdma_support:yes" $?
devs=$(echo "$info" | sed -n 's/^rdma_devices://p')
[ "${devs:-0}" -ge 1 ] 2>/dev/null; check "redis-server in the guest sees the rxe device (rdma_devices=$devs)" $?
"$CLI" -h "$IP" -p "$PORT" shutdown nosave >/dev/null 2>&1
wait $pid 2>/dev/null
rm -rf "$dir"
echo "rdma info: $passed passed, $failed failed"
[ $failed = 0 ]
