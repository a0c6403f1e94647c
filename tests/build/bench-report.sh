#!/usr/bin/env bash
# Tests of utils/bench/rebalance-report.py's steadiness rule (run by `make
# test`, suite "ours"): the issue's drop and p99 goals are only judged
# against a steady "before" window. On synthetic YCSB status logs:
#   - `steady DIR SECONDS MAX_CV` accepts a flat load, refuses a rising
#     one and one with too few samples yet;
#   - the rendered report says "not judged" for a before window that
#     climbs (a client still warming up, which once printed "met" for a
#     drop of -91 %) while still judging the speed and the failed
#     requests, and met / NOT met with the right figures for a steady
#     one;
#   - results.json carries each system's tput_before_cv_pct;
#   - `rounds` (--rounds N) gives each system's medians and every round's
#     values, and a "NO" for a round whose replicas did not end in sync.
#
# Prints one "[ok]: name" or "[err]: name" line per test; exits non-zero on
# failure. Needs python3 only (no matplotlib: no plots are drawn then).
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
report="$repo/utils/bench/rebalance-report.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

ok() { echo "[ok]: $1"; }
err() { echo "[err]: $1"; shift; printf '  %s\n' "$@"; failed=1; }

# make_system DIR SYSTEM REBALANCE_S OPS... : a system's raw files, one
# YCSB status line a second from t0 = 1795760000 (2026-11-17 04:13:20
# UTC) with the given ops/s, p99 1000 us (2000 us from the rebalance on);
# the rebalance starts after the 20th second.
make_system() {
    local dir=$1/$2 system=$2 rb=$3
    shift 3
    mkdir -p "$dir"
    python3 - "$dir" "$system" "$rb" "$@" <<'EOF'
import json, sys, datetime
d, system, rb, ops = sys.argv[1], sys.argv[2], float(sys.argv[3]), [float(x) for x in sys.argv[4:]]
t0 = 1795760000
rs = t0 + 20
with open(d + "/ycsb.log", "w") as f:
    f.write("YCSB Client 0.17.0\n\n")
    for i, o in enumerate(ops, 1):
        t = datetime.datetime.fromtimestamp(t0 + i, datetime.timezone.utc)
        p99 = 2000 if rs < t0 + i <= rs + rb + 1 else 1000
        f.write("%s:000 %d sec: %d operations; %.2f current ops/sec; est completion in 1 hour "
                "[READ: Count=%d, Max=9000, Min=30, Avg=400.00, 90=700, 99=%d, 99.9=3000, "
                "99.99=5000] \n" % (t.strftime("%Y-%m-%d %H:%M:%S"), i, i * 1000, o, o, p99))
with open(d + "/marks.jsonl", "w") as f:
    for t, m in ((t0, "load_start"), (rs - 10, "measure_start"), (rs, "rebalance_start"),
                 (rs + rb, "rebalance_end"), (rs + rb + 10, "measure_end")):
        f.write(json.dumps({"t": t, "mark": m}) + "\n")
with open(d + "/result.json", "w") as f:
    json.dump({"system": system, "available": True, "rebalance_exit": 0,
               "keys_total": 1000, "keys_new_node": 250}, f)
EOF
}

# 20 s before the rebalance (the last 10 are the before window), then the
# rebalance and the after window.
flat="40000 41000 39000 40500 39500 40000 40200 39800 40100 39900
      40000 40400 39600 40000 40300 39700 40100 39900 40000 40000"
rising="8000 8500 9000 9500 10000 11000 12000 13000 14000 15000
        8600 8900 10000 10500 11100 14500 11800 16800 20700 24000"
during="28000 28000 28000 28000"
after="40000 40000 40000 40000 40000 40000 40000 40000 40000 40000 40000"

# --- steady: the harness's gate ------------------------------------------
out="$work/gate"
# shellcheck disable=SC2086
make_system "$out" flat 3 $flat
# shellcheck disable=SC2086
make_system "$out" rising 3 $rising
# shellcheck disable=SC2086
make_system "$out" short 3 40000 40000 40000
cv=$(python3 "$report" steady "$out/flat" 10 10); rc=$?
if [ "$rc" = 0 ] && awk "BEGIN { exit !($cv < 2) }"; then
    ok "steady: a flat load passes (CV $cv %)"
else
    err "steady: a flat load passes" "exit $rc, printed '$cv'"
fi
cv=$(python3 "$report" steady "$out/rising" 10 10); rc=$?
if [ "$rc" = 1 ] && awk "BEGIN { exit !($cv > 10) }"; then
    ok "steady: a climbing load is refused (CV $cv %)"
else
    err "steady: a climbing load is refused" "exit $rc, printed '$cv'"
fi
cv=$(python3 "$report" steady "$out/short" 10 10); rc=$?
if [ "$rc" = 1 ] && [ "$cv" = - ]; then
    ok "steady: too few samples yet is not steady"
else
    err "steady: too few samples yet is not steady" "exit $rc, printed '$cv'"
fi

# --- the report's verdicts -------------------------------------------------
render() { # dir: renders the report of stock-p1000 and ours-tcp there
    RB_OUT=$1 RB_SYSTEMS=stock-p1000,ours-tcp RB_VSIZE=1000 RB_BEFORE=10 RB_AFTER=10 \
        python3 "$report" >/dev/null 2>"$1/stderr"
}

# scenario NAME OURS_BEFORE...: stock-p1000 with a steady load and a 20 s
# rebalance, ours-tcp with the given 20 s before its 3 s rebalance; the
# report rendered into $work/NAME. Returns render's status.
scenario() {
    out="$work/$1"
    shift
    # shellcheck disable=SC2086
    make_system "$out" stock-p1000 20 $flat $during $during $during $during $during $after
    # shellcheck disable=SC2086
    make_system "$out" ours-tcp 3 "$@" $during $after
    render "$out"
}

# shellcheck disable=SC2086
if ! scenario unsteady $rising; then
    err "report renders" "$(cat "$out/stderr")"
elif grep -q 'not judged: the client load was not steady' "$out/report.md" &&
     ! grep -q 'throughput drop < 10%: met' "$out/report.md" &&
     ! grep -q 'p99 during < 2x before: met' "$out/report.md" &&
     grep -q 'rebalance >= 20x faster: NOT met' "$out/report.md" &&
     grep -q 'zero failed client requests: met (0)' "$out/report.md"; then
    ok "report: a climbing before window is not judged (the speed and errors still are)"
else
    err "report: a climbing before window is not judged" "$(grep -A6 '^Goals' "$out/report.md")"
fi
cvs=$(python3 -c 'import json, sys
r = {x["system"]: x for x in json.load(open(sys.argv[1]))}
print(r["stock-p1000"]["tput_before_cv_pct"], r["ours-tcp"]["tput_before_cv_pct"])' "$out/results.json")
read -r cv_stock cv_ours <<< "$cvs"
if awk "BEGIN { exit !($cv_stock < 2 && $cv_ours > 30) }" &&
   grep -q '^| client ops/s before: variation (CV) | .* | .* (not steady) |$' "$out/report.md"; then
    ok "report: each system's CV in results.json and the table ($cv_stock %, $cv_ours %)"
else
    err "report: each system's CV in results.json and the table" "$cvs" \
        "$(grep 'variation' "$out/report.md")"
fi

# shellcheck disable=SC2086
if ! scenario steady $flat; then
    err "report renders (steady)" "$(cat "$out/stderr")"
elif grep -q 'throughput drop < 10%: NOT met (30.0 %)' "$out/report.md" &&
     grep -q 'p99 during < 2x before: NOT met (2.00x)' "$out/report.md" &&
     ! grep -q 'not judged' "$out/report.md"; then
    ok "report: a steady before window is judged (drop 30.0 %, p99 2.00x)"
else
    err "report: a steady before window is judged" "$(grep -A6 '^Goals' "$out/report.md")"
fi

# rounds: three rounds' results.json as the per-round renders write them
# (--replicas 1); ours-tcp's third round ended with a replica out of sync.
out="$work/rounds"
python3 - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
vals = {"valkey-asm": [(6.2, 6.4), (4.4, 4.6), (6.5, 6.9)], "ours-tcp": [(8.8, 9.5), (7.5, 8.2), (7.4, 8.1)]}
for k in range(3):
    os.makedirs("%s/round%d" % (out, k + 1))
    rows = [{"system": s, "available": True, "replicas": 1, "rebalance_s": v[k][0],
             "replica_caught_up_s": v[k][1], "recipient_main_cpu_s_per_gb": 4.0 + k,
             "mb_moved": 249.9, "keys_total": 1000, "keys_new_node": 250, "rebalance_exit": 0,
             "replicas_in_sync": not (s == "ours-tcp" and k == 2), "note": ""}
            for s, v in vals.items()]
    json.dump(rows, open("%s/round%d/results.json" % (out, k + 1), "w"))
json.dump({"systems": "valkey-asm,ours-tcp", "rounds": "3", "records": "1000", "replicas": "1",
           "load": "none", "cmdline": "utils/bench/rebalance --rounds 3"}, open(out + "/meta.json", "w"))
EOF
if ! RB_OUT="$out" python3 "$report" rounds >/dev/null 2>"$out/stderr"; then
    err "rounds: renders" "$(cat "$out/stderr")"
else
    got=$(python3 -c 'import json, sys
r = {x["system"]: x for x in json.load(open(sys.argv[1]))}
v, o = r["valkey-asm"], r["ours-tcp"]
print(v["rebalance_s_median"], v["replica_caught_up_s_median"], o["rebalance_s_median"],
      o["replica_caught_up_s_median"], o["rebalance_s_rounds"], o["recipient_main_cpu_s_per_gb_median"])' "$out/results.json")
    if [ "$got" = "6.2 6.4 7.5 8.2 [8.8, 7.5, 7.4] 5.0" ] &&
       grep -q '^| valkey-asm | 6.20 s | 1.00x | 6.20, 4.40, 6.50 | 6.40 s | 1.00x | 6.40, 4.60, 6.90 | .* | yes, yes, yes |$' "$out/report.md" &&
       grep -q '^| ours-tcp | 7.50 s | 1.21x | 8.80, 7.50, 7.40 | 8.20 s | 1.28x | .* | yes, yes, NO |$' "$out/report.md"; then
        ok "rounds: medians, every round's value, a replica out of sync is a NO"
    else
        err "rounds: medians, every round's value" "$got" "$(grep '^| ' "$out/report.md")"
    fi
fi

exit $failed
