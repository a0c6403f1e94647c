#!/bin/sh
# Entry point of `make test-rdma`, run INSIDE the rxe-vm guest (utils/rxe-vm)
# from the repository root. Runs every RDMA test script and ends with the
# line "rdma tests: N passed, N failed" that .ci/run counts. A script that
# prints its own "N passed, N failed" line is counted by it; otherwise by its
# exit status. Exits non-zero when any test failed or could not run -- in
# particular when there is no RDMA device, which must never pass vacuously.
pass=0 fail=0
if ! ls /sys/class/infiniband/ 2>/dev/null | grep -q .; then
    echo "rdma tests: no RDMA device in this machine (run through utils/rxe-vm)"
    echo "rdma tests: 0 passed, 1 failed"
    exit 1
fi
out=/tmp/rdma-test.out
for t in tests/rdma/smoke.sh tests/rdma/info.sh tests/rdma/migtransport.sh tests/rdma/migrate.sh; do
    echo "=== $t"
    sh "$t" > "$out" 2>&1
    rc=$?
    cat "$out"
    counts=$(sed -n 's/.*: \([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed.*/\1 \2/p' "$out" | tail -1)
    if [ -n "$counts" ]; then
        set -- $counts
        pass=$((pass + $1)); fail=$((fail + $2))
        [ "$rc" = 0 ] || [ "$2" != 0 ] || fail=$((fail + 1))
    elif [ "$rc" = 0 ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
    fi
done
echo "rdma tests: $pass passed, $fail failed"
[ $fail = 0 ]
