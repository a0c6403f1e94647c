#!/usr/bin/env bash
# run.sh [TARGET...]     (what `make fuzz` runs, once the targets are built)
#
# For each target (default: every build/fuzz/*-fuzz), in turn:
#   1. replays tests/fuzz/regress/<target>/*, the inputs that once crashed
#      it (each must now pass);
#   2. fuzzes it for FUZZ_SECONDS (default 60), or FUZZ_RUNS executions if
#      set, starting from tests/fuzz/corpus/<target>/ (committed seeds), the
#      regressions, and build/fuzz/corpus/<target>/ (what earlier runs on
#      this machine found; new inputs go there, never into tests/).
# Prints per target the executions done, their rate, and the crashes found
# (a crashing input is left in build/fuzz/crashes/<target>/, with the log
# in build/test-logs/fuzz-<target>.log). A target passes with 0 crashes.
# Writes build/test-logs/fuzz.counts ("passed failed", one per target, as
# .ci/run sums them); the last line is "fuzz: N passed, N failed"; exits
# non-zero if any target failed.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
seconds=${FUZZ_SECONDS:-60}
runs=${FUZZ_RUNS:-}
logs=build/test-logs
mkdir -p "$logs"

targets=("$@")
if [ ${#targets[@]} = 0 ]; then
    for b in build/fuzz/*-fuzz; do [ -x "$b" ] && targets+=("$(basename "$b" -fuzz)"); done
fi

pass=0 fail=0
for t in "${targets[@]}"; do
    bin=build/fuzz/$t-fuzz work=build/fuzz/corpus/$t crashes=build/fuzz/crashes/$t
    regress=tests/fuzz/regress/$t log=$logs/fuzz-$t.log
    mkdir -p "$work" "$crashes"
    rm -f "$crashes"/*
    : > "$log"
    if [ ! -x "$bin" ]; then
        echo "fuzz: $t: $bin is not built (make fuzz-build)"
        fail=$((fail + 1))
        continue
    fi
    # ASan's defaults, spelled out; a leak is a failure too.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}

    # Options of this target (tests/fuzz/<target>.options: one line of
    # libFuzzer flags, each explained there).
    opts=()
    [ -f "tests/fuzz/$t.options" ] && read -r -a opts < <(grep -v '^#' "tests/fuzz/$t.options")

    nreg=0 bad=0
    regs=()
    if [ -d "$regress" ]; then
        for f in "$regress"/*; do [ -f "$f" ] && regs+=("$f"); done
    fi
    nreg=${#regs[@]}
    if [ "$nreg" -gt 0 ]; then
        if ! "$bin" -artifact_prefix="$crashes/" "${opts[@]}" "${regs[@]}" >> "$log" 2>&1; then
            echo "fuzz: $t: a regression input crashes again (see $log)"
            bad=1
        fi
    fi

    if [ -n "$runs" ]; then limit=(-runs="$runs"); else limit=(-max_total_time="$seconds"); fi
    dirs=("$work" "tests/fuzz/corpus/$t")
    [ "$nreg" -gt 0 ] && dirs+=("$regress")
    start=$(date +%s%N)
    "$bin" "${limit[@]}" -print_final_stats=1 -timeout=25 -rss_limit_mb=2048 "${opts[@]}" \
        -artifact_prefix="$crashes/" "${dirs[@]}" >> "$log" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    # libFuzzer's findings (slow-unit-* inputs are only slow: not counted).
    ncrash=$(find "$crashes" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
        -o -name 'oom-*' \) | wc -l)
    # A run that failed without leaving an input (could not start, killed)
    # still counts as one.
    if [ "$rc" != 0 ] && [ "$ncrash" = 0 ]; then ncrash=1; fi
    [ "$bad" = 1 ] && [ "$ncrash" = 0 ] && ncrash=1
    printf 'fuzz: %s: %s executions in %s s (%s/s), %s regression inputs replayed, %s crashes, corpus %s inputs\n' \
        "$t" "${execs:-0}" "$((ms / 1000))" "$(( ${execs:-0} * 1000 / (ms ? ms : 1) ))" "$nreg" \
        "$ncrash" "$(find "$work" -type f | wc -l)"
    if [ "$ncrash" = 0 ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        grep -m1 -A12 -E '^==[0-9]+==ERROR|^[a-z-]+-fuzz: |runtime error|deadly signal' "$log" | sed 's/^/    /'
        for f in "$crashes"/{crash,leak,timeout,oom}-*; do
            [ -f "$f" ] && echo "fuzz: $t: crashing input $f (replay: $bin $f; once fixed, keep it as $regress/<name>)"
        done
    fi
done
echo "$pass $fail" > "$logs/fuzz.counts"
echo "fuzz: $pass passed, $fail failed"
[ "$fail" = 0 ]
