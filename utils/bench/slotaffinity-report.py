#!/usr/bin/env python3
"""slotaffinity-report.py -- turns the raw readings of utils/bench/slotaffinity
(SA_RAW, one JSON object per line) into OUTDIR/results.json and
OUTDIR/report.md, and prints the report. Run by slotaffinity, which passes
everything in SA_* environment variables; not meant to be run by hand
(it can be, to re-render a report from a kept raw.jsonl)."""

import json
import os
import statistics

env = os.environ
raw_path = env["SA_RAW"]
out = env["SA_OUT"]
rows = [json.loads(l) for l in open(raw_path) if l.strip()]

MB = 1e6


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def sel(**kw):
    return [r for r in rows if all(r.get(k) == v for k, v in kw.items())]


def fmt_int(x):
    return "-" if x is None else f"{x:,.0f}"


def fmt_f(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def fmt_mb(x):
    return "-" if x is None else f"{x / MB:,.1f}"


def pct(ratio):
    return "-" if ratio is None else f"{(ratio - 1) * 100:+.1f}%"


def ratio(a, b):
    return None if a is None or not b else a / b


# ---------------------------------------------------------------- summaries

def rate_summary(phase):
    """Per test: medians of rps and latencies for no and yes, the ratio of
    medians, and the range of the per-round yes/no ratios."""
    tests = []
    for r in rows:
        if r["phase"] == phase and "rps" in r and r["test"] not in tests:
            tests.append(r["test"])
    res = {}
    for t in tests:
        d = {}
        for c in ("no", "yes"):
            rs = sel(phase=phase, config=c, test=t)
            d[c] = {k: med([x[k] for x in rs]) for k in ("rps", "avg_ms", "p50_ms", "p99_ms")}
            d[c]["rounds"] = len(rs)
            d[c]["rps_all"] = [x["rps"] for x in sorted(rs, key=lambda x: x["round"])]
        per_round = []
        for n in sel(phase=phase, config="no", test=t):
            y = sel(phase=phase, config="yes", test=t, round=n["round"])
            if y and n["rps"]:
                per_round.append(y[0]["rps"] / n["rps"])
        d["rps_ratio"] = ratio(d["yes"]["rps"], d["no"]["rps"])
        d["rps_ratio_rounds"] = per_round
        d["p99_ratio"] = ratio(d["yes"]["p99_ms"], d["no"]["p99_ms"])
        res[t] = d
    return res


MEMF = ("used_memory", "used_memory_rss", "mem_fragmentation_ratio",
        "allocator_allocated", "allocator_active", "allocator_resident",
        "slotalloc_blocks", "slotalloc_huge_blocks", "slotalloc_reserved_bytes",
        "slotalloc_used_bytes", "slotalloc_free_bytes", "slotalloc_live_allocs",
        "slotalloc_metadata_bytes", "slotalloc_cached_empty_blocks")


def memory_summary():
    res = {}
    for vsize in sorted({r["vsize"] for r in sel(phase="memory") if "vsize" in r}, reverse=True):
        d = {}
        for name, c, stage in (("no", "no", "loaded"), ("yes_loaded", "yes", "loaded"),
                               ("yes_compacted", "yes", "compacted")):
            rs = sel(phase="memory", config=c, stage=stage, vsize=vsize)
            if not rs:
                continue
            d[name] = {k: med([x.get(k) for x in rs]) for k in MEMF}
            d[name]["keys"] = med([x["keys"] for x in rs])
            d[name]["rounds"] = len(rs)
        base = d.get("no", {})
        for name in ("yes_loaded", "yes_compacted"):
            if name in d:
                d[name]["used_memory_vs_no"] = ratio(d[name]["used_memory"], base.get("used_memory"))
                d[name]["rss_vs_no"] = ratio(d[name]["used_memory_rss"], base.get("used_memory_rss"))
        res[str(vsize)] = d
    return res


def compaction_summary():
    res = {}
    for r in rows:
        if r.get("test") != "compact":
            continue
        w = r["workload"]
        res.setdefault(w, {"phase": r["phase"], "runs": []})["runs"].append(r)
    for w, d in res.items():
        runs = d["runs"]
        d["keys_moved"] = med([x["keys_moved"] for x in runs])
        d["relocated_bytes"] = med([x["relocated_bytes"] for x in runs])
        d["compaction_usec"] = med([x["compaction_usec"] for x in runs])
        d["wall_usec"] = med([x["wall_usec"] for x in runs])
        # bytes per microsecond = MB/s (MB = 10^6 bytes); median over runs.
        d["server_mb_s"] = med([x["relocated_bytes"] / x["compaction_usec"]
                                for x in runs if x["compaction_usec"]])
        d["wall_mb_s"] = med([x["relocated_bytes"] / x["wall_usec"]
                              for x in runs if x["wall_usec"]])
        d["server_mb_s_rounds"] = [round(x["relocated_bytes"] / x["compaction_usec"], 1)
                                   for x in runs if x["compaction_usec"]]
        d["bytes_per_key"] = ratio(d["relocated_bytes"], d["keys_moved"])
        del d["runs"]
    return res


summary = {
    "throughput": rate_summary("throughput"),
    "relocated": rate_summary("relocated"),
    "updates": rate_summary("updates"),
    "bigwrites": rate_summary("bigwrites"),
    "lists": rate_summary("lists"),
    "memory": memory_summary(),
    "compaction": compaction_summary(),
}
meta = {
    "command": env["SA_CMDLINE"],
    "date": env["SA_DATE"],
    "elapsed_s": int(env["SA_ELAPSED"]),
    "server_version": env["SA_VERSION"],
    "cpu": env["SA_CPU"],
    "cpus": int(env["SA_NCPU"]),
    "kernel": env["SA_KERNEL"],
    "pinning": env["SA_PINNING"],
    "bin": env["SA_BIN"],
    "rounds": int(env["SA_ROUNDS"]),
    "sizes_preset": env["SA_SIZES"],
    "sizes": {
        "throughput_requests_per_test": int(env["SA_TP_REQUESTS"]),
        "throughput_keyspace": int(env["SA_TP_KEYSPACE"]),
        "relocated_keys": int(env["SA_REL_KEYS"]),
        "relocated_requests_per_test": int(env["SA_REL_REQUESTS"]),
        "relocated_value_bytes": int(env["SA_REL_VSIZE"]),
        "memory_keys": int(env["SA_MEM_KEYS"]),
        "compaction_slot_mb": int(env["SA_COMP_MB"]),
        "updates_keys": int(env.get("SA_UPD_KEYS", "0")),
        "updates_requests_per_test": int(env.get("SA_UPD_REQUESTS", "0")),
        "bigwrites_elements": int(env.get("SA_BIG_ELEMS", "0")),
        "bigwrites_requests_per_test": int(env.get("SA_BIG_REQUESTS", "0")),
        "lists_keys": int(env.get("SA_LST_KEYS", "0")),
        "lists_requests_per_test": int(env.get("SA_LST_REQUESTS", "0")),
        "clients": int(env["SA_CLIENTS"]),
    },
}
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump({"meta": meta, "summary": summary, "raw": rows}, f, indent=1)

# ---------------------------------------------------------------- report

L = []
s = meta["sizes"]
L += [
    "# slot-affinity yes vs no",
    "",
    f"- command: `{meta['command']}`",
    f"- date: {meta['date']} (took {meta['elapsed_s']} s)",
    f"- server: `{meta['server_version']}` (binaries from `{meta['bin']}`)",
    f"- CPU: {meta['cpu']} ({meta['cpus']} CPUs), {meta['kernel']}; pinning: {meta['pinning']}",
    f"- {meta['rounds']} rounds, no/yes alternating (odd rounds no first, even rounds yes first), "
    "medians shown; a fresh one-node cluster (all 16384 slots) per measurement"
    + ("" if meta["sizes_preset"] == "full" else f" — **{meta['sizes_preset']} sizes**"),
    "- native speed on a shared machine: read the yes/no ratios, not the absolute numbers",
    "",
]


def rate_table(title, note, data):
    if not data:
        return
    L.extend([f"## {title}", "", note, "",
              "| test | rps no | rps yes | yes/no | per-round yes/no | p99 ms no | p99 ms yes |",
              "|---|---:|---:|---:|---|---:|---:|"])
    for t, d in data.items():
        rr = ", ".join(f"{x:.3f}" for x in d["rps_ratio_rounds"])
        L.append(f"| {t} | {fmt_int(d['no']['rps'])} | {fmt_int(d['yes']['rps'])} | "
                 f"{fmt_f(d['rps_ratio'], 3)} | {rr} | {fmt_f(d['no']['p99_ms'], 3)} | "
                 f"{fmt_f(d['yes']['p99_ms'], 3)} |")
    L.append("")


rate_table("1. Throughput, fresh keys (born in jemalloc)",
           f"`redis-benchmark -t set,get,hset,lpush,zadd -n {s['throughput_requests_per_test']} "
           f"-r {s['throughput_keyspace']} -c {s['clients']} -P 1 --csv` on an empty server.",
           summary["throughput"])
rate_table("2. Throughput on relocated keys",
           f"{s['relocated_keys']:,} keys `key:<12 digits>` of {s['relocated_value_bytes']} B "
           "(raw strings) preloaded; with yes, `DEBUG SLOTCOMPACT ALL` then moved them into slot "
           f"blocks. Then, in this order, `-t get`, `APPEND key:__rand_int__ xy` (reallocs the "
           f"value in its block), `-t set -d {s['relocated_value_bytes']}` (frees the block "
           f"copy), each `-n {s['relocated_requests_per_test']} -r {s['relocated_keys']} "
           f"-c {s['clients']} -P 1`.",
           summary["relocated"])
if summary["relocated"]:
    mb = {}
    for c in ("no", "yes"):
        rs = sel(phase="relocated", config=c, test="memory_before")
        mb[c] = (med([x["used_memory"] for x in rs]), med([x["used_memory_rss"] for x in rs]))
    if mb["no"][0] and mb["yes"][0]:
        L += [f"Before the requests: used_memory {fmt_mb(mb['no'][0])} MB (no) vs "
                    f"{fmt_mb(mb['yes'][0])} MB (yes, compacted), RSS {fmt_mb(mb['no'][1])} vs "
                    f"{fmt_mb(mb['yes'][1])} MB (no MEMORY PURGE here).", ""]

if summary["memory"]:
  L += ["## 3. Memory", "",
      f"{s['memory_keys']:,} distinct keys `k:<i>` per value size, loaded with `redis-cli --pipe`; "
      "`MEMORY PURGE` and 1.2 s of settling before every reading. MB = 10^6 bytes. "
      "Goal (issue 3): yes within 5% of no.", "",
      "| values | config | keys | used_memory MB | vs no | RSS MB | vs no | frag ratio | "
      "slot blocks | block MB | in blocks MB | free in blocks MB | metadata MB |",
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
labels = {"no": "no", "yes_loaded": "yes, loaded", "yes_compacted": "yes, after SLOTCOMPACT ALL"}
for vsize, d in summary["memory"].items():
    for name in ("no", "yes_loaded", "yes_compacted"):
        if name not in d:
            continue
        m = d[name]
        blocks = m["slotalloc_blocks"] if name != "no" else None
        L.append(
            f"| {vsize} B | {labels[name]} | {fmt_int(m['keys'])} | {fmt_mb(m['used_memory'])} | "
            f"{pct(m.get('used_memory_vs_no'))} | {fmt_mb(m['used_memory_rss'])} | "
            f"{pct(m.get('rss_vs_no'))} | {fmt_f(m['mem_fragmentation_ratio'])} | "
            f"{fmt_int(blocks)} | "
            f"{fmt_mb(m['slotalloc_reserved_bytes']) if name != 'no' else '-'} | "
            f"{fmt_mb(m['slotalloc_used_bytes']) if name != 'no' else '-'} | "
            f"{fmt_mb(m['slotalloc_free_bytes']) if name != 'no' else '-'} | "
            f"{fmt_mb(m['slotalloc_metadata_bytes']) if name != 'no' else '-'} |")
if summary["memory"]:
    L.append("")
for vsize, d in summary["memory"].items():
    c = d.get("yes_compacted")
    if c and c.get("rss_vs_no") is not None:
        ok = c["rss_vs_no"] <= 1.05 and (c["used_memory_vs_no"] or 0) <= 1.05
        L.append(f"- {vsize} B values, compacted: used_memory {pct(c['used_memory_vs_no'])}, "
                 f"RSS {pct(c['rss_vs_no'])} against no: goal of +5% "
                 f"{'met' if ok else '**not met**'}.")
if summary["memory"]:
    L.append("")

if summary["compaction"]:
  L += ["## 4. Compaction speed", "",
      "`DEBUG SLOTCOMPACT`; bytes = delta of `slotalloc_relocated_bytes` (usable sizes copied); "
      "server time = delta of `slotalloc_compaction_usec`; wall = seen by redis-cli (includes "
      "its start and the round trip). MB = 10^6 bytes. Goal (issue 3): over 1 GB/s (1000 MB/s).",
      "",
      "| workload | keys moved | MB moved | B/key | server ms | MB/s (server) | per round | "
      "MB/s (wall) | goal |",
      "|---|---:|---:|---:|---:|---:|---|---:|---|"]
order = sorted(summary["compaction"].items(),
               key=lambda kv: {"compaction": 0, "memory": 1, "relocated": 2,
                               "updates": 3}.get(kv[1]["phase"], 4))
for w, d in order:
    ok = d["server_mb_s"] is not None and d["server_mb_s"] >= 1000
    goal = ("met" if ok else "**not met**") if d["phase"] == "compaction" else "n/a (many slots)"
    L.append(f"| {w} | {fmt_int(d['keys_moved'])} | {fmt_mb(d['relocated_bytes'])} | "
             f"{fmt_int(d['bytes_per_key'])} | {fmt_f(d['compaction_usec'] / 1000, 1)} | "
             f"{fmt_int(d['server_mb_s'])} | "
             f"{', '.join(f'{x:,.0f}' for x in d['server_mb_s_rounds'])} | "
             f"{fmt_int(d['wall_mb_s'])} | {goal} |")
if summary["compaction"]:
    L.append("")
rate_table("5. Updates of relocated hashes, background relocation on",
           f"{s['updates_keys']:,} hashes `key:<12 digits>` of 10 fields x 100 B (hashtable "
           "encoded, like YCSB's records) preloaded; with yes, `DEBUG SLOTCOMPACT ALL` then "
           "moved them into slot blocks. Then, with `slot-affinity-cpu 10` (with yes, each new "
           "value is written over the old one in its slot blocks, or allocated there: "
           "nothing left for the background cycle), `HSET key:__rand_int__ field3 "
           f"<100 B>` and `HGETALL key:__rand_int__`, each `-n {s['updates_requests_per_test']} "
           f"-r {s['updates_keys']} -c {s['clients']} -P 1`.",
           summary["updates"])
rate_table("6. New elements of relocated big keys, background relocation on",
           f"One hash (fields of 20 B), one set, one sorted set and one stream of "
           f"{s['bigwrites_elements']:,} elements each (hash table, skiplist, stream) preloaded; with yes, "
           "`DEBUG SLOTCOMPACT ALL` then moved them into slot blocks. Then, with "
           "`slot-affinity-cpu 10`, `SADD bigset n:__rand_int__`, `ZADD bigzset __rand_int__ "
           f"n:__rand_int__`, `HSET bighash n:__rand_int__ x` and `XADD bigstream * f x`, each `-n "
           f"{s['bigwrites_requests_per_test']} -r 100000000 -c {s['clients']} -P 1`; then "
           "`SREM bigset m__rand_int__`, `ZREM bigzset z__rand_int__` and `HDEL bighash "
           f"f__rand_int__` (the preloaded elements), each `-n {s['bigwrites_requests_per_test']} "
           f"-r {s['bigwrites_elements']}`.",
           summary["bigwrites"])
cyc = [x["compaction_usec"] for x in sel(phase="bigwrites", config="yes", test="cycle")]
if cyc:
    L.append("Background cycle's main-thread time during the seven tests (delta of "
             "`slotalloc_compaction_usec`), yes: median "
             f"{fmt_f(med(cyc) / 1000, 1)} ms (per round: "
             + ", ".join(f"{x / 1000:.1f}" for x in cyc) + " ms).")
    L.append("")
rate_table("7. Pushes, pops and edits of relocated lists, background relocation on",
           f"{s['lists_keys']:,} lists `list:<12 digits>` of 10 elements x 10 B preloaded; with "
           "yes, `DEBUG SLOTCOMPACT ALL` then moved them into slot blocks. Then, with "
           "`slot-affinity-cpu 10`, `LPUSH list:__rand_int__ x` and `RPOP list:__rand_int__` "
           "(and, in runs after 2026-11-27 morning, in this order: LPUSH, `LSET ... 0 y`, `LINSERT ... BEFORE "
           "xxxxxxxxxx y`, `LREM ... 1 y`, RPOP, `LTRIM ... 0 7`), "
           f"each `-n {s['lists_requests_per_test']} -r {s['lists_keys']} -c {s['clients']} -P 1`.",
           summary["lists"])
cyc = [x["compaction_usec"] for x in sel(phase="lists", config="yes", test="cycle")]
if cyc:
    L.append("Background cycle's main-thread time during these tests (delta of "
             "`slotalloc_compaction_usec`), yes: median "
             f"{fmt_f(med(cyc) / 1000, 1)} ms (per round: "
             + ", ".join(f"{x / 1000:.1f}" for x in cyc) + " ms).")
    L.append("")
L.append("Raw per-round numbers: `results.json` (`raw`), `raw.jsonl`.")
L.append("")

text = "\n".join(L)
with open(os.path.join(out, "report.md"), "w") as f:
    f.write(text)
print(text)
