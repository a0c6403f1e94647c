#!/usr/bin/env bash
# Tests of utils/run-tests.sh's retry of upstream unit tests (run by `make
# test`, suite "ours"): against a fake tree whose ./runtest fails some
# tests in the suite and passes or fails them again when run alone, a test
# that passes alone counts as passed and is named as such, one that fails
# twice stays a failure, and nothing is retried after an exception or past
# TEST_RETRY_MAX failures.
#
# Prints one "[ok]: name" or "[err]: name" line per test; exits non-zero on
# failure.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

ok() { echo "[ok]: $1"; }
err() { echo "[err]: $1"; shift; printf '  %s\n' "$@"; failed=1; }

# The fake tree: ./runtest prints, for the whole suite, the lines of
# $work/suite.out and exits 1 if any says [err] or [exception]; with
# --only NAME it passes NAME if NAME is listed in $work/pass-alone, else
# fails it again. Every call is logged in $work/calls.
mkdir -p "$work/tree/src"
printf '#!/bin/sh\necho fake\n' > "$work/tree/src/redis-server"
cat > "$work/tree/runtest" <<'EOS'
#!/usr/bin/env bash
w=$(dirname "$0")/..
only= file=
while [ $# -gt 0 ]; do
    case "$1" in
        --only) only=$2; shift ;;
        --single) file=$2; shift ;;
    esac
    shift
done
echo "${file:-suite}|$only" >> "$w/calls"
if [ -z "$only" ]; then
    cat "$w/suite.out"
    grep -qE '^\[(err|exception)\]' "$w/suite.out" && exit 1
    exit 0
fi
if grep -qxF "$only" "$w/pass-alone"; then echo "[ok]: $only (12 ms)"; exit 0; fi
echo "[err]: $only in tests/$file.tcl"; exit 1
EOS
chmod +x "$work/tree/runtest" "$work/tree/src/redis-server"

# run: run-tests.sh unit against the fake tree; sets out, rc, counts.
run() {
    rm -rf "$work/logs"; : > "$work/calls"
    out=$(RUN_TESTS_TREE="$work/tree" RUN_TESTS_LOGS="$work/logs" TEST_CLIENTS=1 TEST_RETRY_MAX=3 \
          "$repo/utils/run-tests.sh" unit 2>&1)
    rc=$?
    counts=$(cat "$work/logs/unit.counts" 2>/dev/null)
}

# 1. One test failed in the suite and passes alone: the suite passes.
printf '[ok]: a (1 ms)\n[err]: Flaky one in tests/unit/x.tcl\nExpected 1.51 < 1.4\n[ok]: b (1 ms)\n' > "$work/suite.out"
echo "Flaky one" > "$work/pass-alone"
run
if [ $rc = 0 ] && [ "$counts" = "3 0" ] && [[ "$out" == *"passed alone on retry"*"Flaky one (unit/x)"* ]] &&
   [[ "$out" == *"3 passed, 0 failed"* ]] && grep -qx "unit/x|Flaky one" "$work/calls"; then
    ok "a test that fails in the suite and passes alone counts as passed, named"
else
    err "a test that fails in the suite and passes alone counts as passed, named" "rc=$rc counts=$counts" "$out"
fi

# 2. Two failed: one passes alone, the other fails again and stays failed.
printf '[ok]: a (1 ms)\n[err]: Flaky one in tests/unit/x.tcl\n[err]: Broken one in tests/unit/y.tcl\n' > "$work/suite.out"
echo "Flaky one" > "$work/pass-alone"
run
if [ $rc != 0 ] && [ "$counts" = "2 1" ] && [[ "$out" == *"'Broken one' failed again alone"* ]] &&
   [[ "$out" == *"failed tests"* ]] && [[ "$out" == *"2 passed, 1 failed"* ]]; then
    ok "a test that fails again alone stays a failure"
else
    err "a test that fails again alone stays a failure" "rc=$rc counts=$counts" "$out"
fi

# 3. An exception (a file aborted): nothing is retried.
printf '[ok]: a (1 ms)\n[err]: Flaky one in tests/unit/x.tcl\n[exception]: Executing test client: boom\n' > "$work/suite.out"
echo "Flaky one" > "$work/pass-alone"
run
if [ $rc != 0 ] && [ "$counts" = "1 2" ] && ! grep -q '|Flaky' "$work/calls"; then
    ok "nothing is retried after an exception"
else
    err "nothing is retried after an exception" "rc=$rc counts=$counts" "$(cat "$work/calls")"
fi

# 4. More failures than TEST_RETRY_MAX: nothing is retried.
printf '[err]: t%d in tests/unit/x.tcl\n' 1 2 3 4 > "$work/suite.out"
printf 't%d\n' 1 2 3 4 > "$work/pass-alone"
run
if [ $rc != 0 ] && [ "$counts" = "0 4" ] && [ "$(wc -l < "$work/calls")" = 1 ]; then
    ok "nothing is retried past TEST_RETRY_MAX failures"
else
    err "nothing is retried past TEST_RETRY_MAX failures" "rc=$rc counts=$counts" "$(cat "$work/calls")"
fi

exit $failed
