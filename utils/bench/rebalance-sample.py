#!/usr/bin/env python3
"""rebalance-sample.py -- the 1-second samplers of utils/bench/rebalance.

Two subcommands, both run in the background by the harness and stopped
with SIGTERM (they flush and exit cleanly):

  sample OUT.jsonl HOST:PORT:PID [HOST:PORT:PID...]
      Once a second, one JSON line per tick:
        {"t": <unix time>, "nodes": {"<port>": {...}, ...}}
      per node: cpu_proc (utime+stime of the whole redis-server process,
      seconds, cumulative, from /proc/PID/stat), cpu_main (the same for the
      main thread only, /proc/PID/task/PID/stat: its tid is the pid),
      keys (db0), used_memory, used_memory_rss, instantaneous_ops_per_sec,
      total_commands_processed, and every field of INFO migration and
      INFO slotalloc when the server has those sections (our build). A node
      that does not answer is recorded as {"down": true}. Also, per CPU of
      the host, "cpus": {"<n>": {"busy", "idle", "steal"}}: cumulative
      seconds from /proc/stat (busy: user, nice, system, irq, softirq;
      idle: idle, iowait; steal: time the hypervisor gave another guest),
      to tell a slower host from a slower server.

  stamp OUT.log
      Copies stdin to OUT.log, one line per input line, prefixed with the
      unix time it arrived ("1763900000.123 <line>"); carriage returns
      split lines too (redis-benchmark redraws its progress line with \\r);
      ANSI colour codes are dropped.
      Used for the rebalance command's output (per-donor phase marks) and
      for redis-benchmark's progress in --load redis-benchmark mode.

Talks RESP over a plain socket (no redis-cli process per reading), so a
tick costs the servers three INFO calls each.
"""
import json
import os
import re
import signal
import socket
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
KEEP = ("used_memory", "used_memory_rss", "instantaneous_ops_per_sec",
        "total_commands_processed", "used_cpu_sys_main_thread",
        "used_cpu_user_main_thread")
ANSI = re.compile(r"\x1b\[[0-9;]*m")   # redis-cli colours its --cluster output
stopping = False


def on_term(signum, frame):
    global stopping
    stopping = True


class Node:
    def __init__(self, spec):
        host, port, pid = spec.rsplit(":", 2)
        self.host, self.port, self.pid = host, int(port), int(pid)
        self.sock = None
        self.buf = b""

    def _connect(self):
        self.sock = socket.create_connection((self.host, self.port), timeout=2)
        self.buf = b""

    def _readline(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _readn(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def info(self, section):
        """INFO <section> as a dict of strings; {} when the section is absent."""
        if self.sock is None:
            self._connect()
        cmd = "*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n" % (len(section), section)
        self.sock.sendall(cmd.encode())
        head = self._readline()
        if head[:1] == b"-":
            return {}
        if head[:1] != b"$":
            raise ConnectionError("unexpected reply %r" % head[:40])
        body = self._readn(int(head[1:])).decode(errors="replace")
        out = {}
        for line in body.split("\r\n"):
            if line and not line.startswith("#") and ":" in line:
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def cpu(self):
        """(process cpu s, main thread cpu s) from /proc, or (None, None)."""
        res = []
        for path in ("/proc/%d/stat" % self.pid, "/proc/%d/task/%d/stat" % (self.pid, self.pid)):
            try:
                with open(path) as f:
                    # the command name (field 2) may hold spaces: split after ")"
                    rest = f.read().rsplit(")", 1)[1].split()
                res.append((int(rest[11]) + int(rest[12])) / CLK_TCK)  # utime, stime
            except (OSError, IndexError, ValueError):
                res.append(None)
        return res


def num(v):
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def host_cpus():
    """Per CPU: cumulative busy, idle and steal seconds (/proc/stat)."""
    hz = os.sysconf("SC_CLK_TCK")
    cpus = {}
    try:
        with open("/proc/stat") as f:
            for line in f:
                parts = line.split()
                if not parts[0].startswith("cpu") or parts[0] == "cpu":
                    continue
                v = [int(x) for x in parts[1:9]] + [0] * 8
                cpus[parts[0][3:]] = {"busy": round((v[0] + v[1] + v[2] + v[5] + v[6]) / hz, 2),
                                      "idle": round((v[3] + v[4]) / hz, 2),
                                      "steal": round(v[7] / hz, 2)}
    except OSError:
        pass
    return cpus


def sample(out_path, specs):
    nodes = [Node(s) for s in specs]
    with open(out_path, "a") as out:
        next_t = time.time()
        while not stopping:
            tick = {"t": round(time.time(), 3), "nodes": {}, "cpus": host_cpus()}
            for n in nodes:
                rec = {}
                rec["cpu_proc"], rec["cpu_main"] = n.cpu()
                try:
                    main = {}
                    for sec in ("memory", "stats", "cpu", "keyspace"):
                        main.update(n.info(sec))
                    for k in KEEP:
                        if k in main:
                            rec[k] = num(main[k])
                    db0 = main.get("db0", "keys=0")
                    rec["keys"] = int(db0.split(",")[0].split("=")[1])
                    for sec in ("migration", "slotalloc"):
                        for k, v in n.info(sec).items():
                            rec[k] = num(v)
                except (OSError, ConnectionError, ValueError):
                    n.sock = None
                    rec["down"] = True
                tick["nodes"][str(n.port)] = rec
            out.write(json.dumps(tick) + "\n")
            out.flush()
            next_t += 1.0
            delay = next_t - time.time()
            if delay > 0:
                time.sleep(delay)
            else:
                next_t = time.time()


def stamp(out_path):
    with open(out_path, "a") as out:
        buf = ""
        while True:
            chunk = os.read(0, 65536)
            if not chunk:
                break
            buf += ANSI.sub("", chunk.decode(errors="replace")).replace("\r", "\n")
            *lines, buf = buf.split("\n")
            now = time.time()
            for line in lines:
                if line.strip():
                    out.write("%.3f %s\n" % (now, line))
            out.flush()
        if buf.strip():
            out.write("%.3f %s\n" % (time.time(), buf))


def main():
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    if len(sys.argv) >= 4 and sys.argv[1] == "sample":
        sample(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 3 and sys.argv[1] == "stamp":
        stamp(sys.argv[2])
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
