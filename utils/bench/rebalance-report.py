#!/usr/bin/env python3
"""rebalance-report.py -- turns the raw data of utils/bench/rebalance into
results.json, report.md (also printed) and one timeline PNG per system.

results.json is a JSON array, one object per system (see REQUIRED below);
meta.json the run's command line, date and machine.

Run by utils/bench/rebalance at the end (it passes RB_* environment
variables: output directory, systems, command line, machine); can be re-run
by hand on an output directory:

    RB_OUT=build/bench/rebalance utils/bench/rebalance-report.py

With --rounds N > 1 each round is rendered so in RB_OUT/round<k>/, and
then `rebalance-report.py rounds` (RB_OUT the parent) summarizes the
rounds' results.json into RB_OUT/results.json and report.md: per system
the median and every round's value of the rebalance time, the replica
catch-up time (--replicas 1) and the recipient's main-thread CPU per GB.

Inputs per system, in RB_OUT/<system>/:
  result.json     what the harness saw (availability, keys, exit status)
  marks.jsonl     {"t", "mark"}: measure_start, rebalance_start/end, ...
  ycsb.log        YCSB's 1-second status lines (-s, status.interval=1,
                  hdrhistogram: the percentiles of each line are over that
                  second only); ycsb.out its final summary
  redis-benchmark.log   (--load redis-benchmark) stamped progress lines
  samples.jsonl   rebalance-sample.py: per-node CPU (process, main
                  thread), keys, INFO migration/slotalloc, once a second
  rebalance.log   the rebalance command's output, stamped per line; the
                  "Moving N slots from A to B" lines mark per-donor phases
  verify.json     (workload a) writes acknowledged / lost

Definitions (also written into report.md):
  windows     before = the --before seconds up to the rebalance start;
              during = rebalance start to end; after = the --after seconds
              after its end. A 1-second sample ending at t covers (t-1, t].
  throughput  mean client ops/s over a window's 1-second samples
  steadiness  the coefficient of variation (population standard deviation
              / mean) of the before window's 1-second throughputs; above
              RB_STEADY_CV % (default 10) the client load was not steady
              when the rebalance started (a client still warming up, a
              noisy host), and the drop and p99 goals are not judged: a
              drop against a moving baseline says nothing. The harness
              waits for a steady load before it starts the rebalance
              (--steady-wait); this is what it reached.
  avg/p99     mean over a window's seconds of that second's mean latency
              and 99th percentile (the worst of READ and UPDATE; YCSB's
              status lines give Avg, 90, 99, 99.9, 99.99, no median);
              "worst second" = the highest 1-second p99
  replica caught up  (--replicas 1) seconds from the rebalance start until
              the new master's replica held as many keys as the new master
              (both polled every 0.05 s once the rebalance returned); the
              "rebalance wall time" is then "rebalance returned"
  MB moved    keys on the new node after the rebalance x --value-size
              (payload bytes, 10^6 B per MB)
  CPU per GB  main-thread CPU seconds (utime + stime of the main thread,
              /proc/PID/task/PID/stat) during the rebalance, summed over
              the three donors, and of the recipient, per GB moved. It
              includes serving the client load at the same time.
  servers' CPU  CPU-seconds per second of the four server processes
              (every thread, /proc/PID/stat) before and during the
              rebalance: pinned to one CPU (--pin yes), how much of it
              they used; what is left before is what a migration can use
              without taking it from the clients. From the samples around
              each window (1 s apart): a rebalance of a few seconds is
              measured with part of the seconds before and after it.
  host steal  CPU-seconds per second, summed over the host's CPUs, that
              the hypervisor gave other guests (/proc/stat "steal") in
              each window: a window whose clients and servers all slowed
              while this rose measured a busier host, not the system.
"""
import json
import math
import os
import re
import statistics
import sys
from datetime import datetime, timezone

OUT = os.environ.get("RB_OUT") or (sys.argv[1] if len(sys.argv) > 1 else "")
if not OUT:
    sys.exit("rebalance-report.py: set RB_OUT to the output directory")
SYSTEMS = os.environ.get("RB_SYSTEMS", "stock,stock-p1000,ours-legacy,ours-tcp,ours-rdma").split(",")
VSIZE = int(os.environ.get("RB_VSIZE", "1000"))
BEFORE = float(os.environ.get("RB_BEFORE", "10"))
AFTER = float(os.environ.get("RB_AFTER", "10"))
STEADY_CV = float(os.environ.get("RB_STEADY_CV", "10"))

# Every object in results.json has these keys (null when not measured).
REQUIRED = ("system", "available", "rebalance_s", "replica_caught_up_s", "mb_moved", "mb_per_s", "keys_per_s",
            "tput_before", "tput_during", "tput_after", "tput_drop_pct", "p99_before_us",
            "p99_during_us", "p99_after_us", "client_errors", "writes_acked", "writes_lost")
STATUS_RE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}) (\d+) sec: (\d+) operations; "
                       r"([\d.]+) current ops/sec;(.*)$")
BRACKET_RE = re.compile(r"\[([A-Z][A-Z-]*): ([^\]]*)\]")
RB_PROGRESS_RE = re.compile(r"rps=([\d.]+) \(overall: [\d.]+\) avg_msec=([\d.]+)")
MOVING_RE = re.compile(r"Moving (\d+) slots from (\S+) to (\S+)")
SUMMARY_RE = re.compile(r"\[OK\] \d+ slots from \S+ to \S+: .*")   # RDMAMIGRATESLOTS, per donor


def jsonl(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    return out


def fnum(v):
    try:
        x = float(v)
        return None if math.isnan(x) else x
    except (TypeError, ValueError):
        return None


def parse_ycsb(d):
    """[(t_end, ops_per_s, avg_us, p99_us, failed_ops)] from YCSB's status lines."""
    samples = []
    path = os.path.join(d, "ycsb.log")
    if not os.path.exists(path):
        return samples
    with open(path, errors="replace") as f:
        for line in f:
            m = STATUS_RE.match(line.strip())
            if not m:
                continue
            t = datetime.strptime(m.group(1)[:19], "%Y-%m-%d %H:%M:%S").replace(
                tzinfo=timezone.utc).timestamp() + int(m.group(1)[20:]) / 1000.0
            ops = float(m.group(4))
            avg = p99 = None
            failed = 0
            for name, body in BRACKET_RE.findall(m.group(5)):
                kv = dict(x.split("=", 1) for x in body.split(", ") if "=" in x)
                count = int(fnum(kv.get("Count")) or 0)
                if name.endswith("-FAILED"):
                    failed += count
                    continue
                if name.startswith("CLEANUP") or count == 0:
                    continue
                a, b = fnum(kv.get("Avg")), fnum(kv.get("99"))
                avg = a if avg is None or (a is not None and a > avg) else avg
                p99 = b if p99 is None or (b is not None and b > p99) else p99
            samples.append((t, ops, avg, p99, failed))
    return samples


def stamped_matches(d, name, regex):
    """(timestamp, match) for each line of the stamped log d/name (each
    line starts with the time it was written) whose rest matches regex."""
    path = os.path.join(d, name)
    if not os.path.exists(path):
        return
    with open(path, errors="replace") as f:
        for line in f:
            ts, _, rest = line.partition(" ")
            m = regex.search(rest)
            if m:
                yield float(ts), m


def parse_redis_benchmark(d):
    """1-second bins of redis-benchmark's stamped progress (rps, avg ms)."""
    bins = {}
    for ts, m in stamped_matches(d, "redis-benchmark.log", RB_PROGRESS_RE):
        b = bins.setdefault(math.ceil(ts), [])
        b.append((float(m.group(1)), float(m.group(2)) * 1000.0))
    return [(t, statistics.mean(x[0] for x in v), statistics.mean(x[1] for x in v), None, 0)
            for t, v in sorted(bins.items())]


def final_failed(d):
    """Failed operations in YCSB's final summary ([READ-FAILED], Operations, N)."""
    n = 0
    path = os.path.join(d, "ycsb.out")
    if os.path.exists(path):
        with open(path, errors="replace") as f:
            for line in f:
                m = re.match(r"\[([A-Z-]+-FAILED)\], Operations, (\d+)", line)
                if m:
                    n += int(m.group(2))
    return n


def window(samples, lo, hi, overlap=False):
    """Samples in (lo, hi]: those ending inside it, or (overlap) touching it
    at all, so that a rebalance shorter than a second still has one."""
    if overlap:
        return [s for s in samples if s[0] > lo and s[0] - 1.0 < hi]
    return [s for s in samples if lo < s[0] <= hi]


def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.mean(xs) if xs else None


def cv_pct(xs):
    """Coefficient of variation of xs, in %: None for fewer than 3 values."""
    xs = [x for x in xs if x is not None]
    if len(xs) < 3 or statistics.mean(xs) <= 0:
        return None
    return round(100.0 * statistics.pstdev(xs) / statistics.mean(xs), 1)


def load_samples(d):
    """(samples, load): the client's 1-second samples in a system's
    directory d and which load generator made them."""
    if os.path.exists(os.path.join(d, "ycsb.log")):
        return parse_ycsb(d), "ycsb"
    if os.path.exists(os.path.join(d, "redis-benchmark.log")):
        return parse_redis_benchmark(d), "redis-benchmark"
    return [], "none"   # --load none: the migration alone


def steady_main(argv):
    """rebalance-report.py steady DIR SECONDS MAX_CV: prints the CV (%) of
    the client throughput over the last SECONDS 1-second samples in DIR
    (a system's directory, its load still running); exits 0 when it is at
    most MAX_CV, 1 when not (or too few samples yet: prints "-")."""
    d, secs, max_cv = argv[0], int(argv[1]), float(argv[2])
    samples = load_samples(d)[0]
    last = samples[-1][0] if samples else 0
    tps = [x[1] for x in samples if x[0] > last - secs]
    cv = cv_pct(tps) if len(tps) >= max(secs - 1, 3) else None
    print("-" if cv is None else cv)
    return 0 if cv is not None and cv <= max_cv else 1


def phases(d):
    """[(t, label)] from the stamped rebalance output: one per donor."""
    out = []
    for ts, m in stamped_matches(d, "rebalance.log", MOVING_RE):
        label = "%s slots from :%s" % (m.group(1), m.group(2).rsplit(":", 1)[1])
        # (the block path says it twice: upstream's line, then redis-cli's
        # ">>> Moving ... with RDMAMIGRATESLOTS")
        if not out or out[-1][1] != label:
            out.append((ts, label))
    return out


def block_summaries(d):
    """redis-cli's summary line of each RDMAMIGRATESLOTS (--cluster-transport
    tcp|rdma|auto): slots, keys, MB, transport, phase times, write pause."""
    path = os.path.join(d, "rebalance.log")
    if not os.path.exists(path):
        return []
    with open(path, errors="replace") as f:
        return [m.group(0) for m in (SUMMARY_RE.search(l) for l in f) if m]


def info_phases(sj):
    """[(t, label)] where a node's INFO migration field named *phase* (our
    build, issue 4) changes value: the per-phase marks of the block
    migration, at the sampler's 1-second resolution."""
    out, last = [], {}
    for s in sj:
        for port, n in s["nodes"].items():
            for k, v in n.items():
                if k.startswith("migration_") and "phase" in k and isinstance(v, str):
                    if last.get((port, k)) not in (None, v) and v not in ("", "none", "idle"):
                        out.append((s["t"], ":%s %s" % (port, v)))
                    last[(port, k)] = v
    return out


def cpu_delta(samples_jsonl, port, key, t0, t1):
    """Growth of nodes[port][key] between the last sample <= t0 and the first >= t1."""
    a = b = None
    for s in samples_jsonl:
        v = s["nodes"].get(str(port), {}).get(key)
        if v is None:
            continue
        if s["t"] <= t0:
            a = v
        if s["t"] >= t1 and b is None:
            b = v
    if b is None and samples_jsonl:
        b = samples_jsonl[-1]["nodes"].get(str(port), {}).get(key)
    return None if a is None or b is None else b - a


def samples_around(samples_jsonl, t0, t1):
    """The last sample <= t0 and the first >= t1, or the last sample when
    the sampler stopped before t1 (None, None if there is no sample <= t0
    or they do not span any time)."""
    a = b = None
    for s in samples_jsonl:
        if s["t"] <= t0:
            a = s
        if s["t"] >= t1 and b is None:
            b = s
    if b is None and samples_jsonl:
        b = samples_jsonl[-1]
    if a is None or b is None or b["t"] <= a["t"]:
        return None, None
    return a, b


def steal_share(samples_jsonl, t0, t1):
    """Seconds per second the hypervisor gave other guests, summed over the
    host's CPUs, between the samples around t0..t1 (None when the samples
    have no "cpus", i.e. older runs)."""
    a, b = samples_around(samples_jsonl, t0, t1)
    if a is None or not a.get("cpus") or not b.get("cpus"):
        return None
    st = sum(b["cpus"][c]["steal"] - a["cpus"][c]["steal"] for c in b["cpus"] if c in a["cpus"])
    return round(st / (b["t"] - a["t"]), 3)


def cpu_share(samples_jsonl, ports, t0, t1):
    """CPU-seconds per second that the server processes of ports (every
    thread) used between the samples around t0..t1: with the servers
    pinned to one CPU, how busy that CPU was with them (1.0: all of it).
    None without two samples around the window."""
    a, b = samples_around(samples_jsonl, t0, t1)
    if a is None:
        return None
    used = 0.0
    for p in ports:
        va = a["nodes"].get(str(p), {}).get("cpu_proc")
        vb = b["nodes"].get(str(p), {}).get("cpu_proc")
        if va is None or vb is None:
            return None
        used += vb - va
    return round(used / (b["t"] - a["t"]), 2)


def analyse(system):
    d = os.path.join(OUT, system)
    res_path = os.path.join(d, "result.json")
    if not os.path.exists(res_path):
        return {"system": system, "available": False, "reason": "not run (no result.json)"}
    with open(res_path) as f:
        base = json.load(f)
    r = {"system": system}
    r.update(base)
    if not base.get("available"):
        return r
    marks = {m["mark"]: m for m in jsonl(os.path.join(d, "marks.jsonl"))}
    rs, re_ = marks["rebalance_start"]["t"], marks["rebalance_end"]["t"]
    samples, r["load"] = load_samples(d)
    keys = base.get("keys_new_node", 0)
    r["rebalance_s"] = round(re_ - rs, 2)
    r["keys_moved"] = keys
    r["mb_moved"] = round(keys * VSIZE / 1e6, 1)
    r["mb_per_s"] = round(r["mb_moved"] / r["rebalance_s"], 2) if r["rebalance_s"] > 0 else None
    r["keys_per_s"] = round(keys / r["rebalance_s"]) if r["rebalance_s"] > 0 else None
    me = marks.get("measure_end", {}).get("t")
    if me is not None:   # the last status line is the stop itself
        samples = [x for x in samples if x[0] <= me]
    wins = {"before": window(samples, rs - BEFORE, rs), "during": window(samples, rs, re_, True),
            "after": window(samples, re_, re_ + AFTER)}
    for w, ss in wins.items():
        tp = mean([s[1] for s in ss])
        r["tput_" + w] = round(tp) if tp is not None else None
        avg, p99 = mean([s[2] for s in ss]), mean([s[3] for s in ss])
        r["avg_%s_us" % w] = round(avg) if avg is not None else None
        r["p99_%s_us" % w] = round(p99) if p99 is not None else None
        r["errors_" + w] = sum(s[4] for s in ss)
    r["tput_before_cv_pct"] = cv_pct([s[1] for s in wins["before"]])
    dur = [s[3] for s in wins["during"] if s[3] is not None]
    r["p99_during_max_us"] = round(max(dur)) if dur else None
    if r["tput_before"] and r["tput_during"] is not None:
        r["tput_drop_pct"] = round(100.0 * (1 - r["tput_during"] / r["tput_before"]), 1)
    else:
        r["tput_drop_pct"] = None
    r["client_errors"] = max(final_failed(d), sum(s[4] for s in samples))
    sj = jsonl(os.path.join(d, "samples.jsonl"))
    ports = sorted(int(p) for p in sj[0]["nodes"]) if sj else []
    gb = r["mb_moved"] / 1000.0
    # ports: the 4 masters (P..P+3; the last is the recipient), then with
    # --replicas 1 their replicas (P+4..P+7: P+7 is the new master's)
    if len(ports) >= 4 and gb > 0:
        donors = [cpu_delta(sj, p, "cpu_main", rs, re_) for p in ports[:3]]
        recip = cpu_delta(sj, ports[3], "cpu_main", rs, re_)
        r["donor_main_cpu_s"] = round(sum(x for x in donors if x is not None), 2)
        r["recipient_main_cpu_s"] = round(recip, 2) if recip is not None else None
        r["donor_main_cpu_s_per_gb"] = round(r["donor_main_cpu_s"] / gb, 1)
        r["recipient_main_cpu_s_per_gb"] = round(recip / gb, 1) if recip is not None else None
        procs = [cpu_delta(sj, p, "cpu_proc", rs, re_) for p in ports]
        r["all_nodes_process_cpu_s"] = round(sum(x for x in procs if x is not None), 2)
        r["all_nodes_process_cpu_s_per_gb"] = round(r["all_nodes_process_cpu_s"] / gb, 1)
        r["servers_cpu_before"] = cpu_share(sj, ports, rs - BEFORE, rs)
        r["servers_cpu_during"] = cpu_share(sj, ports, rs, re_)
        caught = r.get("replica_caught_up_s")
        if len(ports) == 8 and caught is not None:
            # the new master's replica, from the rebalance start until it
            # held every key (main thread: applying the stream)
            rc = cpu_delta(sj, ports[7], "cpu_main", rs, rs + caught)
            r["new_replica_main_cpu_s"] = round(rc, 2) if rc is not None else None
            r["new_replica_main_cpu_s_per_gb"] = round(rc / gb, 1) if rc is not None else None
    r["host_steal_before"] = steal_share(sj, rs - BEFORE, rs)
    r["host_steal_during"] = steal_share(sj, rs, re_)
    r["host_steal_after"] = steal_share(sj, re_, re_ + AFTER)
    # Which data path carried the blocks: the transport counters of INFO
    # migration, summed over the nodes, grown during the rebalance.
    for key, name in (("migration_rdma_wr_posted", "rdma_wr_posted"),
                      ("migration_rdma_chains_posted", "rdma_chains_posted"),
                      ("migration_rdma_bytes_written", "rdma_bytes_written"),
                      ("migration_tcp_bytes_sent", "tcp_bytes_sent")):
        ds = [cpu_delta(sj, p, key, rs, re_) for p in ports]
        r[name] = sum(x for x in ds if x is not None) if any(x is not None for x in ds) else None
    v_path = os.path.join(d, "verify.json")
    if os.path.exists(v_path):
        with open(v_path) as f:
            v = json.load(f)
        r["writes_acked"], r["writes_lost"] = v["writes_acked"], v["writes_lost"]
        r["writes_failed"], r["fields_checked"] = v.get("writes_failed"), v.get("fields_checked")
    else:
        r["writes_acked"] = r["writes_lost"] = None
    ph = phases(d) + info_phases(sj)
    r["phases"] = [{"t_rel_s": round(t - rs, 2), "what": w} for t, w in sorted(ph)]
    mig = sorted({k for s in sj for n in s["nodes"].values() for k in n if k.startswith("migration_")})
    r["info_migration_fields"] = mig
    r["block_summaries"] = block_summaries(d)
    r["_samples"], r["_sj"], r["_rs"], r["_re"], r["_marks"] = samples, sj, rs, re_, marks
    return r


def plot(r, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rs, re_ = r["_rs"], r["_re"]
    me = r["_marks"].get("measure_end", {}).get("t")
    s = r["_samples"]
    t = [x[0] - 0.5 - rs for x in s]   # a sample covers (t-1, t]: plot at its middle
    fig, axes = plt.subplots(3, 1, figsize=(10, 8.5), sharex=True,
                             gridspec_kw={"height_ratios": [3, 3, 2]})
    ax = axes[0]
    ax.plot(t, [x[1] for x in s], color="tab:blue", lw=1.2)
    ax.set_ylabel("client ops/s")
    ax.set_ylim(bottom=0)
    title = "%s: %s keys (%.0f MB) moved in %.1f s" % (r["system"], format(r["keys_moved"], ","),
                                                     r["mb_moved"], r["rebalance_s"])
    if r.get("tput_drop_pct") is not None:
        title += ", throughput %+.0f%% during" % (-r["tput_drop_pct"])
        if not steady(r):
            title += "\n(the load was not steady before: throughput CV %.0f%%; not a drop figure)" % (
                r["tput_before_cv_pct"])
    if r["system"] == "ours-rdma":
        title += "\nSoftRoCE in a QEMU guest under emulation: correctness and phases, not speed"
    ax.set_title(title, fontsize=11)
    if r.get("load") == "none":
        for a in axes[:2]:
            a.text(0.5, 0.5, "no client load (--load none)", transform=a.transAxes,
                   ha="center", va="center", color="dimgray")
    ax = axes[1]
    avg = [(a, x[2]) for a, x in zip(t, s) if x[2]]
    p99 = [(a, x[3]) for a, x in zip(t, s) if x[3]]
    if p99:
        ax.plot([a for a, _ in p99], [b for _, b in p99], color="tab:red", lw=1.2, label="p99")
    if avg:
        ax.plot([a for a, _ in avg], [b for _, b in avg], color="tab:green", lw=1.2, label="mean")
    if p99 or avg:
        ax.set_yscale("log")
        ax.legend(loc="upper left", fontsize=8)
    ax.set_ylabel("latency (us, log)")
    ax = axes[2]
    sj = [x for x in r["_sj"] if me is None or x["t"] <= me + 1.5]
    ports = sorted(int(p) for p in sj[0]["nodes"]) if sj else []
    for i, p in enumerate(ports):
        xs, ys = [], []
        for a, b in zip(sj, sj[1:]):
            va, vb = a["nodes"][str(p)].get("cpu_main"), b["nodes"][str(p)].get("cpu_main")
            if va is not None and vb is not None and b["t"] > a["t"]:
                xs.append((a["t"] + b["t"]) / 2 - rs)
                ys.append(100.0 * (vb - va) / (b["t"] - a["t"]))
        label = ":%d %s" % (p, "recipient" if i == 3 else "donor" if i < 3 else
                            "replica of :%d" % ports[i - 4] if i - 4 < len(ports) else "replica")
        ax.plot(xs, ys, lw=1, label=label)
    ax.set_ylabel("main thread CPU %")
    ax.set_xlabel("seconds since rebalance start")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=7, ncol=4)
    # Not measured: everything before the "before" window (the warm-up and
    # any wait for a steady load).
    ms = rs - BEFORE if "measure_start" in r["_marks"] else None
    if r.get("load") == "none":
        ms = None   # no client warm-up to shade
    x0 = min(t) - 1 if t else (min(x["t"] for x in sj) - rs if sj else -1)
    for ax in axes:
        ax.set_xlim(left=x0)
        if ms is not None:
            ax.axvspan(x0, ms - rs, color="gray", alpha=0.12, lw=0)
        ax.axvspan(0, re_ - rs, color="orange", alpha=0.15)
        ax.axvline(0, color="black", lw=0.8, ls="--")
        ax.axvline(re_ - rs, color="black", lw=0.8, ls="--")
        for ph in r["phases"]:
            ax.axvline(ph["t_rel_s"], color="gray", lw=0.6, ls=":")
        ax.grid(alpha=0.3)
    y = axes[0].get_ylim()[1]
    axes[0].text(0, y * 0.97, " rebalance start", fontsize=8, va="top")
    if ms is not None:
        axes[0].text(x0, y * 0.97, " client warm-up (not measured)", fontsize=8,
                     va="top", color="dimgray")
    axes[0].text(re_ - rs, y * 0.97, " end", fontsize=8, va="top")
    for ph in r["phases"]:
        axes[0].text(ph["t_rel_s"], y * 0.05, " " + ph["what"], fontsize=7, rotation=90,
                     va="bottom", color="dimgray")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def steady(r):
    """Whether the client load was steady before the rebalance (unknown: yes)."""
    cv = r.get("tput_before_cv_pct")
    return cv is None or cv <= STEADY_CV


def fmt(v, suffix="", digits=None):
    if v is None:
        return "-"
    if isinstance(v, float) and digits is not None:
        return ("%." + str(digits) + "f%s") % (v, suffix)
    if isinstance(v, (int, float)):
        return format(round(v), ",") + suffix
    return str(v) + suffix


def main():
    rows = [analyse(s) for s in SYSTEMS]
    avail = [r for r in rows if r.get("available")]
    plots = {}
    for r in avail:
        p = os.path.join(OUT, r["system"] + ".png")
        if plot(r, p):
            plots[r["system"]] = os.path.basename(p)
    clean = []
    for r in rows:
        c = {k: None for k in REQUIRED}
        c.update({k: v for k, v in r.items() if not k.startswith("_")})
        clean.append(c)
    # A render again (RB_OUT only) keeps what the run recorded.
    meta = {}
    if os.path.exists(os.path.join(OUT, "meta.json")):
        with open(os.path.join(OUT, "meta.json")) as f:
            meta = json.load(f)
    meta.update({k[3:].lower(): v for k, v in os.environ.items() if k.startswith("RB_")})
    if "out" in meta:
        meta["out"] = os.path.abspath(meta["out"])
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(clean, f, indent=1)
    with open(os.path.join(OUT, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)

    L = []
    L.append("# Rebalance benchmark: 3 -> 4 masters" +
             (" (no client load)" if meta.get("load") == "none" else " under client load"))
    L.append("")
    L.append("- command: `%s`" % meta.get("cmdline", "?"))
    L.append("- date: %s, total %s s" % (meta.get("date", "?"), meta.get("elapsed", "?")))
    L.append("- machine: %s CPUs (%s), %s, %s RAM" % (meta.get("ncpu", "?"), meta.get("cpu", "?"),
                                                    meta.get("kernel", "?"), meta.get("mem", "?")))
    if meta.get("load") == "none":
        client = "no client load"
    else:
        client = "workload %s (%s, %s client threads)" % (
            meta.get("workload", "?").upper(), meta.get("load", "?"), meta.get("threads", "?"))
    L.append("- data: %s records x %s B (hashes field0..field9), %s, "
             "%s s before / %s s after; pinning: %s%s"
             % (format(int(meta.get("records", 0)), ","), meta.get("vsize", "?"), client,
                meta.get("before", "?"), meta.get("after", "?"), meta.get("pinning", "?"),
                "; one replica per master (--replicas 1)" if meta.get("replicas") == "1" else ""))
    if meta.get("round") and meta.get("rounds", "1") != "1":
        L.append("- round %s of %s" % (meta["round"], meta.get("rounds", "?")))
    L.append("")
    cols = [r["system"] for r in rows]
    L.append("| | " + " | ".join(cols) + " |")
    L.append("|---|" + "---|" * len(cols))

    def row(label, f):
        cells = []
        for r in rows:
            cells.append(f(r) if r.get("available") else "-")
        L.append("| %s | %s |" % (label, " | ".join(cells)))

    L.append("| ran | " + " | ".join("yes" if r.get("available") else "not available (below)"
                                      for r in rows) + " |")
    with_replicas = any(r.get("replicas") for r in rows)
    row("rebalance wall time" + (" (rebalance returned)" if with_replicas else ""),
        lambda r: fmt(r["rebalance_s"], " s", 1)
        + ("" if r.get("rebalance_exit", 0) == 0 else " (exit %d!)" % r["rebalance_exit"]))
    if with_replicas:
        row("replica caught up (new master's replica holds every key; s from the start)",
            lambda r: fmt(r.get("replica_caught_up_s"), " s", 1))
    row("keys moved", lambda r: fmt(r["keys_moved"]))
    row("MB moved", lambda r: fmt(r["mb_moved"], "", 1))
    row("MB/s", lambda r: fmt(r["mb_per_s"], "", 2))
    row("keys/s", lambda r: fmt(r["keys_per_s"]))
    row("client ops/s before", lambda r: fmt(r["tput_before"]))
    row("client ops/s during", lambda r: fmt(r["tput_during"]))
    row("client ops/s after", lambda r: fmt(r["tput_after"]))
    row("client ops/s before: variation (CV)", lambda r: fmt(r.get("tput_before_cv_pct"), " %", 1)
        + (" (not steady)" if not steady(r) else ""))
    row("throughput drop during", lambda r: fmt(r["tput_drop_pct"], " %", 1))
    row("p99 before (us)", lambda r: fmt(r["p99_before_us"]))
    row("p99 during (us, mean / worst second)",
        lambda r: fmt(r["p99_during_us"]) + " / " + fmt(r["p99_during_max_us"]))
    row("p99 after (us)", lambda r: fmt(r["p99_after_us"]))
    row("mean latency before / during / after (us)", lambda r: " / ".join(
        fmt(r["avg_%s_us" % w]) for w in ("before", "during", "after")))
    row("donor main-thread CPU-s per GB (3 donors)", lambda r: fmt(r.get("donor_main_cpu_s_per_gb"), "", 1))
    row("recipient main-thread CPU-s per GB", lambda r: fmt(r.get("recipient_main_cpu_s_per_gb"), "", 1))
    row("recipient main-thread CPU-s during the rebalance", lambda r: fmt(r.get("recipient_main_cpu_s"), "", 2))
    if with_replicas:
        row("new master's replica: main-thread CPU-s per GB (start to caught up)",
            lambda r: fmt(r.get("new_replica_main_cpu_s_per_gb"), "", 1))
    procs = "all 8 processes, replicas included" if with_replicas else "all 4 processes"
    row("%s: CPU-s per GB (every thread)" % procs,
        lambda r: fmt(r.get("all_nodes_process_cpu_s_per_gb"), "", 1))
    row("servers' CPU use before / during (CPU-s per s, %s)" % procs,
        lambda r: fmt(r.get("servers_cpu_before"), "", 2) + " / " + fmt(r.get("servers_cpu_during"), "", 2))
    row("host CPU stolen by other guests before / during / after (CPU-s per s)",
        lambda r: " / ".join(fmt(r.get("host_steal_" + w), "", 2) for w in ("before", "during", "after")))
    row("client errors (failed ops)", lambda r: fmt(r["client_errors"]))
    row("writes acked / lost", lambda r: "-" if r.get("writes_acked") is None
        else "%s / %s" % (fmt(r["writes_acked"]), fmt(r["writes_lost"])))
    row("keys after (the 4 masters)", lambda r: fmt(r["keys_total"]))
    if with_replicas:
        row("new master / its replica: keys after", lambda r: fmt(r.get("keys_new_node")) + " / "
            + fmt(r.get("keys_new_replica")))
        row("every replica holds its master's keys after", lambda r: {True: "yes", False: "NO"}.get(
            r.get("replicas_in_sync"), "-"))
    L.append("")
    for r in rows:
        if not r.get("available"):
            L.append("**%s**: %s" % (r["system"], r.get("reason", "not run")))
            L.append("")
    for r in rows:
        if not r.get("available"):
            continue
        L.append("**%s** (%s)" % (r["system"], r.get("flavour", "")))
        L.append("")
        L.append("- rebalance: `%s`" % r.get("rebalance_command", ""))
        if r.get("note"):
            L.append("- note: " + r["note"])
        if r["system"] == "ours-rdma":
            L.append("- **Software RDMA (SoftRoCE) inside a QEMU guest under TCG emulation: correctness "
                     "and phase breakdown only; these times say nothing about speed.**")
        if r["phases"]:
            L.append("- phases (s after the start): " + "; ".join(
                "%.1f %s" % (p["t_rel_s"], p["what"]) for p in r["phases"]))
        if r.get("rdma_wr_posted") or r.get("tcp_bytes_sent"):
            L.append("- data path (INFO migration, all nodes, during the rebalance): %s RDMA WRITE WRs "
                     "in %s chains, %.1f MB written by RDMA; %.1f MB sent over TCP" % (
                         fmt(r["rdma_wr_posted"]), fmt(r["rdma_chains_posted"]),
                         (r["rdma_bytes_written"] or 0) / 1e6, (r["tcp_bytes_sent"] or 0) / 1e6))
        elif r["system"] == "ours-rdma":
            L.append("- **data path: no RDMA WRITE was posted (INFO migration): the RDMA path was NOT used**")
        if r.get("block_summaries"):
            L.append("- RDMAMIGRATESLOTS summaries (redis-cli):")
            for b in r["block_summaries"]:
                L.append("  - `%s`" % b)
        if r["info_migration_fields"]:
            L.append("- INFO migration fields sampled: " + ", ".join(r["info_migration_fields"]))
        if r["system"] in plots:
            L.append("")
            L.append("![%s](%s)" % (r["system"], plots[r["system"]]))
        L.append("")
    L.append("Definitions: throughput = mean of 1-second client samples; p99 = mean over the window's "
             "seconds of each second's p99 (worst of READ/UPDATE; YCSB hdrhistogram per status "
             "interval), worst second in the during column; MB moved = keys on the new node x value "
             "size; CPU-s per GB = main-thread CPU time (/proc task stat) during the rebalance per GB "
             "moved, including serving the client load (if any); client errors = YCSB operations that failed "
             "(errors, timeouts, reads of a missing record); writes lost = (key, field)s whose value "
             "after the run is not that of a latest acknowledged write.")
    stock = next((r for r in rows if r["system"] == "stock-p1000"), None)
    alone = meta.get("load") == "none"
    # ours-tcp is what the goals are set for; the -normal/-low/-idle
    # variants (when run) are judged the same way, against the same stock row.
    judged = [r for r in rows if r["system"].startswith("ours-tcp-")]
    judged.insert(0, next((r for r in rows if r["system"] == "ours-tcp"),
                          {"system": "ours-tcp"}))
    for ours in judged:
        L.append("")
        if alone:   # No client load: the migration alone, judged as issue 4 judges it.
            L.append("Goals of the migration alone (issue 4; %s against stock-p1000, same run, "
                     "no client load):" % ours["system"])
        else:
            L.append("Goals (%s against stock-p1000, same run): " % ours["system"])
        if not (ours.get("available") and stock and stock.get("available")):
            L.append("- pending: %s and stock-p1000 must both have run" % ours["system"])
            continue

        def g(name, ok, detail):
            L.append("- %s: %s (%s)" % (name, "met" if ok else "NOT met", detail))
        sp = stock["rebalance_s"] / ours["rebalance_s"] if ours["rebalance_s"] else float("inf")
        g("rebalance >= 20x faster", sp >= 20, "%.1fx" % sp)
        if alone:
            for who in ("donor", "recipient"):
                a, b = stock.get(who + "_main_cpu_s_per_gb"), ours.get(who + "_main_cpu_s_per_gb")
                ratio = a / b if a and b else None
                g("%s main-thread CPU per GB >= 10x less" % who, bool(ratio and ratio >= 10),
                  fmt(ratio, "x", 1))
        else:
            ratio = (ours["p99_during_us"] or 0) / ours["p99_before_us"] if ours["p99_before_us"] else None
            if not steady(ours):
                # Errors and lost writes are judged all the same.
                L.append("- throughput drop < 10%%, p99 during < 2x before: not judged: the "
                         "client load was not steady before the rebalance (throughput CV %s, "
                         "over %s %%); measured %s and %s" % (
                             fmt(ours["tput_before_cv_pct"], " %", 1), fmt(STEADY_CV),
                             fmt(ours["tput_drop_pct"], " %", 1), fmt(ratio, "x", 2)))
            else:
                g("throughput drop < 10%", (ours["tput_drop_pct"] or 0) < 10,
                  fmt(ours["tput_drop_pct"], " %", 1))
                g("p99 during < 2x before", ratio is not None and ratio < 2, fmt(ratio, "x", 2))
            g("zero failed client requests", ours["client_errors"] == 0, fmt(ours["client_errors"]))
            g("zero lost acknowledged writes", not ours.get("writes_lost"),
              "workload A not run" if ours.get("writes_acked") is None else fmt(ours["writes_lost"]))
    text = "\n".join(L) + "\n"
    with open(os.path.join(OUT, "report.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def same_note(note):
    """A note with its "config: name value ..." part in name order (CONFIG
    GET with a pattern lists in no fixed order), so that the same note of
    two rounds reads the same."""
    parts = []
    for part in (note or "").split("; "):
        if part.startswith("config: "):
            w = part[len("config: "):].split()
            if len(w) % 2 == 0:
                part = "config: " + " ".join(sorted(" ".join(w[i:i + 2]) for i in range(0, len(w), 2)))
        parts.append(part)
    return "; ".join(parts)


def rounds_main():
    """RB_OUT/round<k>/results.json (k = 1..RB_ROUNDS) -> RB_OUT/results.json
    (one object per system: medians and every round's values) and
    RB_OUT/report.md (also printed)."""
    meta = {}   # a render again (RB_OUT only) keeps what the run recorded
    if os.path.exists(os.path.join(OUT, "meta.json")):
        with open(os.path.join(OUT, "meta.json")) as f:
            meta = json.load(f)
    meta.update({k[3:].lower(): v for k, v in os.environ.items() if k.startswith("RB_")})
    systems = meta["systems"].split(",") if meta.get("systems") else SYSTEMS
    n = int(meta.get("rounds") or 0)
    if not n:
        n = len([x for x in os.listdir(OUT) if re.match(r"round\d+$", x)])
    per = []   # per round: {system: result}
    for k in range(1, n + 1):
        path = os.path.join(OUT, "round%d" % k, "results.json")
        rs = []
        if os.path.exists(path):
            with open(path) as f:
                rs = json.load(f)
        per.append({r["system"]: r for r in rs})
    keys = ("rebalance_s", "replica_caught_up_s", "recipient_main_cpu_s", "recipient_main_cpu_s_per_gb",
            "donor_main_cpu_s_per_gb", "new_replica_main_cpu_s_per_gb", "all_nodes_process_cpu_s_per_gb",
            "mb_moved", "mb_per_s", "tput_drop_pct", "keys_total", "keys_new_node", "keys_new_replica",
            "rebalance_exit", "replicas_in_sync")
    out = []
    for sysname in systems:
        rr = [p.get(sysname) or {"available": False, "reason": "not run"} for p in per]
        o = {"system": sysname, "rounds": n,
             "available_rounds": sum(1 for r in rr if r.get("available"))}
        o["available"] = o["available_rounds"] > 0
        for k in keys:
            vals = [r.get(k) if r.get("available") else None for r in rr]
            o[k + "_rounds"] = vals
            if k not in ("keys_total", "keys_new_node", "keys_new_replica", "rebalance_exit",
                         "replicas_in_sync"):
                o[k + "_median"] = median(vals)
        o["rebalance_s"] = o["rebalance_s_median"]
        o["replica_caught_up_s"] = o["replica_caught_up_s_median"]
        o["replicas"] = next((r.get("replicas") for r in rr if r.get("available")), None)
        o["reasons"] = [r.get("reason") for r in rr if not r.get("available")]
        o["notes"] = [same_note(r.get("note")) for r in rr]
        out.append(o)
    meta["out"] = os.path.abspath(OUT)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(out, f, indent=1)
    with open(os.path.join(OUT, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)

    def vals(o, k, suffix="", digits=1):
        return ", ".join(fmt(v, suffix, digits) for v in o[k + "_rounds"])

    avail = [o for o in out if o["available"]]
    best = min((o["rebalance_s_median"] for o in avail if o["rebalance_s_median"]), default=None)
    bestc = min((o["replica_caught_up_s_median"] for o in avail if o["replica_caught_up_s_median"]),
                default=None)
    with_replicas = any(o.get("replicas") for o in avail)
    L = []
    L.append("# Rebalance benchmark: 3 -> 4 masters, %d rounds%s%s" % (
        n, ", one replica per master" if with_replicas else "",
        " (no client load)" if meta.get("load") == "none" else " under client load"))
    L.append("")
    L.append("- command: `%s`" % meta.get("cmdline", "?"))
    L.append("- date: %s, total %s s; the systems alternate within each round (%s, then again)"
             % (meta.get("date", "?"), meta.get("elapsed", "?"), ", ".join(systems)))
    L.append("- machine: %s CPUs (%s), %s, %s RAM; pinning: %s" % (
        meta.get("ncpu", "?"), meta.get("cpu", "?"), meta.get("kernel", "?"), meta.get("mem", "?"),
        meta.get("pinning", "?")))
    L.append("- data: %s records x %s B; each round's full report: round1/report.md .. round%d/report.md"
             % (format(int(meta.get("records", 0)), ","), meta.get("vsize", "?"), n))
    L.append("")
    hdr = ["system", "rebalance returned: median", "x fastest median", "rounds"]
    if with_replicas:
        hdr += ["replica caught up: median", "x fastest median", "rounds"]
    hdr += ["recipient main-thread CPU-s per GB: median (rounds)", "MB moved (median)",
            "keys after = records, exit 0" + (", replicas in sync" if with_replicas else "")]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "---|" * len(hdr))
    records = int(meta.get("records", 0) or 0)
    for o in out:
        if not o["available"]:
            L.append("| %s | not available: %s |" % (o["system"], "; ".join(x or "?" for x in o["reasons"])))
            continue
        m = o["rebalance_s_median"]
        cells = [o["system"], fmt(m, " s", 2), fmt(m / best if m and best else None, "x", 2),
                 vals(o, "rebalance_s", "", 2)]
        if with_replicas:
            c = o["replica_caught_up_s_median"]
            cells += [fmt(c, " s", 2), fmt(c / bestc if c and bestc else None, "x", 2),
                      vals(o, "replica_caught_up_s", "", 2)]
        cells.append("%s (%s)" % (fmt(o["recipient_main_cpu_s_per_gb_median"], "", 1),
                                  vals(o, "recipient_main_cpu_s_per_gb", "", 1)))
        cells.append(fmt(o["mb_moved_median"], "", 1))
        ok = []
        for i in range(n):
            good = (o["keys_total_rounds"][i] == records and o["rebalance_exit_rounds"][i] == 0
                    and (not with_replicas or o["replicas_in_sync_rounds"][i] is True))
            ok.append("yes" if good else ("-" if o["keys_total_rounds"][i] is None else "NO"))
        cells.append(", ".join(ok))
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    L.append("Times in seconds from the rebalance start; \"rounds\" lists round 1, 2, ... in order; "
             "x fastest median = this system's median / the lowest median of the row's column. "
             "A round that did not run a system shows -.")
    for o in out:   # each distinct note once, with the rounds it came from
        seen = {}
        for i, note in enumerate(o["notes"]):
            if note:
                seen.setdefault(note, []).append(str(i + 1))
        for note, which in seen.items():
            L.append("")
            L.append("- %s, round%s %s: %s" % (o["system"], "s" if len(which) > 1 else "",
                                               ", ".join(which), note))
    text = "\n".join(L) + "\n"
    with open(os.path.join(OUT, "report.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "steady":
        sys.exit(steady_main(sys.argv[2:]))
    if len(sys.argv) == 2 and sys.argv[1] == "rounds":
        rounds_main()
        sys.exit(0)
    main()
