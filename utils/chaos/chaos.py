#!/usr/bin/env python3
"""chaos.py -- a seeded, bounded chaos run of RDMAMIGRATESLOTS (make chaos).

Starts its own 4-master cluster on 127.0.0.1 (no replicas, AOF with
appendfsync always), fills it with keys of every type, then for
CHAOS_SECONDS moves random slot ranges between random masters with
RDMAMIGRATESLOTS ... TRANSPORT tcp while client threads write through a
cluster-aware client, and strikes during the migrations (CANCEL on either
node, kill -9 and restart of a node, SIGSTOP/SIGCONT of a node) at a phase
seen in RDMAMIGRATESLOTS STATUS. At the end it stops the faults, waits for
the cluster to converge and verifies, without any repair, that no slot is
open or uncovered, every key lives once on its slot's owner, and no
acknowledged write is lost. See utils/chaos/README.md.

Environment: CHAOS_SECONDS (300), CHAOS_SEED (random when unset; printed),
CHAOS_PORT (first of 4 ports, 31000; the bus ports are +10000),
CHAOS_WRITERS (2-4, from the seed when unset), CHAOS_RATE (requests per
second per writer, 100), CHAOS_DIR (build/chaos), CHAOS_KEEP (1: keep the
nodes' AOFs after a passing run), CHAOS_AFFINITY (the nodes' slot-affinity:
yes, no, or mixed, the default: each node's from the seed, at least one of
each, so that both placements and pairs across them are struck).

Exit status: 0 when every check passed, 1 on a violation (the evidence is
printed and written to <run dir>/violations.txt), 2 on a setup error.
Python 3 standard library only."""

import atexit
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"
NSLOTS = 16384
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.path.join(REPO, "bin", "redis-server")
CLI = os.path.join(REPO, "bin", "redis-cli")

PHASES = ["prepare", "transfer", "patch", "link", "handover", "delete"]
DELAYABLE = ["prepare", "transfer", "patch", "handover", "delete"]
# Fault kinds and their weights in the draw.
FAULTS = [("none", 3), ("cancel-donor", 2), ("cancel-recipient", 2),
          ("kill-donor", 2), ("kill-recipient", 2), ("kill-other", 1),
          ("stop-donor", 2), ("stop-recipient", 2), ("stop-other", 1)]
TIMEOUTS_MS = [1500, 3000, 5000, 10000, 20000]
REQUEST_TIMEOUT = 5.0       # a writer's request, seconds
STOP_MAX_MS = 25000         # far below cluster-node-timeout: no PFAIL
NODE_TIMEOUT_MS = 60000


def log(msg):
    line = "%s %s" % (time.strftime("%H:%M:%S"), msg)
    print(line, flush=True)
    if RUN.logf:
        RUN.logf.write(line + "\n")
        RUN.logf.flush()


def note(msg):
    """To the run's log file only."""
    if RUN.logf:
        RUN.logf.write("%s %s\n" % (time.strftime("%H:%M:%S"), msg))
        RUN.logf.flush()


# ------------------------------------------------------------------ RESP --

class RespError(Exception):
    pass


def _crc16_table():
    t = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        t.append(crc & 0xffff)
    return t


CRC_TABLE = _crc16_table()


def keyslot(key):
    k = key if isinstance(key, bytes) else key.encode()
    s = k.find(b"{")
    if s >= 0:
        e = k.find(b"}", s + 1)
        if e > s + 1:
            k = k[s + 1:e]
    crc = 0
    for c in k:
        crc = ((crc << 8) & 0xffff) ^ CRC_TABLE[((crc >> 8) ^ c) & 0xff]
    return crc % NSLOTS


def _arg(a):
    if isinstance(a, bytes):
        return a
    return str(a).encode()


def encode(cmds):
    out = []
    for args in cmds:
        out.append(b"*%d\r\n" % len(args))
        for a in args:
            a = _arg(a)
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    """One RESP2 connection to 127.0.0.1:port; every read is bounded by
    the socket timeout. Any OSError/EOFError leaves it unusable: close."""

    def __init__(self, port, timeout=5.0):
        self.port = port
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rf = self.sock.makefile("rb")

    def settimeout(self, t):
        self.sock.settimeout(t)

    def close(self):
        for x in (self.rf, self.sock):
            try:
                x.close()
            except OSError:
                pass

    def read(self):
        line = self.rf.readline()
        if not line.endswith(b"\r\n"):
            raise EOFError("connection closed by 127.0.0.1:%d" % self.port)
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RespError(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rf.read(n + 2)
            if len(data) != n + 2:
                raise EOFError("connection closed by 127.0.0.1:%d" % self.port)
            return data[:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise EOFError("bad reply line %r from 127.0.0.1:%d" % (line[:80], self.port))

    def call(self, *args):
        self.sock.sendall(encode([args]))
        r = self.read()
        if isinstance(r, RespError):
            raise r
        return r

    def pipeline(self, cmds, batch=500):
        """Replies in order; error replies are RespError values."""
        out = []
        for i in range(0, len(cmds), batch):
            part = cmds[i:i + batch]
            self.sock.sendall(encode(part))
            out.extend(self.read() for _ in part)
        return out


def s(x):
    return x.decode(errors="replace") if isinstance(x, bytes) else x


def pairs(reply):
    """A RESP2 flat field/value array as a dict of str -> value."""
    return {s(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}


def one_call(port, *args, timeout=5.0):
    c = Conn(port, timeout)
    try:
        return c.call(*args)
    finally:
        c.close()


def try_call(port, *args, timeout=2.0):
    """The reply, or the exception (never raises)."""
    try:
        return one_call(port, *args, timeout=timeout)
    except (RespError, OSError, EOFError, ValueError) as e:
        return e


# ---------------------------------------------------------------- nodes --

class Node:
    def __init__(self, idx, port, root, affinity):
        self.idx = idx
        self.affinity = affinity
        self.port = port
        self.dir = os.path.join(root, "node%d-%d" % (idx, port))
        self.conf = os.path.join(self.dir, "redis.conf")
        self.logfile = os.path.join(self.dir, "redis.log")
        self.proc = None
        self.stopped = False
        self.expect_dead = False    # killed by us, not restarted yet
        self.starts = 0
        os.makedirs(self.dir)
        with open(self.conf, "w") as f:
            f.write("\n".join([
                "port %d" % port, "bind %s" % HOST, "protected-mode no",
                "daemonize no", "dir %s" % self.dir, "logfile %s" % self.logfile,
                "loglevel notice",
                "cluster-enabled yes", "cluster-config-file nodes.conf",
                "cluster-node-timeout %d" % NODE_TIMEOUT_MS,
                "appendonly yes", "appendfsync always", 'save ""',
                "enable-debug-command yes", "slot-affinity %s" % affinity,
                "list-compress-depth 1",
                ""]))

    def name(self):
        return "n%d(:%d,%s)" % (self.idx, self.port, self.affinity)

    def start(self):
        self.starts += 1
        out = open(os.path.join(self.dir, "stdout.log"), "ab")
        # setpriv --pdeathsig: the node dies with this script's main thread,
        # however this script ends (even kill -9).
        self.proc = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", SERVER, self.conf],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.dir)
        out.close()
        self.stopped = False
        self.expect_dead = False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        if self.proc is None:
            return
        self.expect_dead = True
        try:
            self.proc.send_signal(signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self.stopped = False

    def sigstop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGSTOP)
            self.stopped = True

    def sigcont(self):
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
        self.stopped = False

    def wait_ready(self, timeout=120):
        """PONG (not LOADING) within timeout seconds."""
        end = time.time() + timeout
        while time.time() < end:
            if not self.alive():
                return False
            r = try_call(self.port, "PING", timeout=2.0)
            if r == "PONG":
                return True
            time.sleep(0.1)
        return False

    def log_tail(self, n=30):
        try:
            with open(self.logfile, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
            return lines[-n:]
        except OSError:
            return []


class Run:
    logf = None
    nodes = []


RUN = Run()


def cleanup():
    for n in RUN.nodes:
        if n.proc is not None and n.proc.poll() is None:
            try:
                n.proc.send_signal(signal.SIGCONT)
                n.proc.send_signal(signal.SIGKILL)
                n.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass


def port_free(p):
    sk = socket.socket()
    try:
        sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sk.bind((HOST, p))
        return True
    except OSError:
        return False
    finally:
        sk.close()


# --------------------------------------------------------- cluster view --

def parse_nodes(text):
    """CLUSTER NODES -> (myself id, {id: (port, flags)}, {slot: id}, open)."""
    me, nodes, owner, opened = None, {}, {}, []
    for line in s(text).splitlines():
        f = line.split()
        if len(f) < 8:
            continue
        nid, port = f[0], int(f[1].split("@")[0].rsplit(":", 1)[1])
        flags = f[2].split(",")
        nodes[nid] = (port, flags)
        if "myself" in flags:
            me = nid
        for r in f[8:]:
            if r.startswith("["):
                opened.append(r)
                continue
            lo, _, hi = r.partition("-")
            for sl in range(int(lo), int(hi or lo) + 1):
                owner[sl] = nid
    return me, nodes, owner, opened


def node_view(port):
    """This node's view, or None when it does not answer."""
    try:
        c = Conn(port, 3.0)
        try:
            info = s(c.call("CLUSTER", "INFO"))
            text = c.call("CLUSTER", "NODES")
        finally:
            c.close()
    except (RespError, OSError, EOFError):
        return None
    me, nodes, owner, opened = parse_nodes(text)
    state = re.search(r"cluster_state:(\w+)", info)
    return {"me": me, "nodes": nodes, "owner": owner, "open": opened,
            "state": state.group(1) if state else "?"}


def views():
    return {n.port: node_view(n.port) for n in RUN.nodes}


def converged(vs):
    """(True, '') when every node answers, says ok, sees every node as a
    healthy master and agrees on the owner of all 16384 slots."""
    ref = None
    for port, v in vs.items():
        if v is None:
            return False, ":%d does not answer" % port
        if v["state"] != "ok":
            return False, ":%d cluster_state %s" % (port, v["state"])
        if v["open"]:
            return False, ":%d has open slots %s" % (port, " ".join(v["open"][:3]))
        if len(v["nodes"]) != len(RUN.nodes):
            return False, ":%d knows %d nodes" % (port, len(v["nodes"]))
        for nid, (p, flags) in v["nodes"].items():
            bad = [f for f in flags if f in ("fail", "fail?", "handshake", "noaddr")]
            if bad or "master" not in flags:
                return False, ":%d sees :%d as %s" % (port, p, ",".join(flags))
        m = {sl: v["nodes"][nid][0] for sl, nid in v["owner"].items()}
        if len(m) != NSLOTS:
            return False, ":%d: %d slots have an owner" % (port, len(m))
        if ref is None:
            ref = m
        elif m != ref:
            diff = [sl for sl in range(NSLOTS) if m.get(sl) != ref.get(sl)]
            return False, ":%d disagrees on %d slots (first %d)" % (port, len(diff), diff[0])
    return True, ""


def owner_map(vs=None):
    """slot -> port, from the first answering node's view (the converged
    map when the nodes agree)."""
    vs = vs or views()
    for v in vs.values():
        if v:
            return {sl: v["nodes"][nid][0] for sl, nid in v["owner"].items()}
    return {}


def wait_converged(timeout):
    end = time.time() + timeout
    why = ""
    while time.time() < end:
        ok, why = converged(views())
        if ok:
            return True, ""
        time.sleep(0.25)
    return False, why


# -------------------------------------------------------- cluster client --

RETRYABLE = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN")


class ClusterClient:
    """Routes by CLUSTER SLOTS, follows MOVED/ASK, retries TRYAGAIN,
    CLUSTERDOWN, LOADING and connection errors with a bounded backoff.
    call() returns ("ok", reply, _), ("unknown", why, _): the command may
    have run, or ("failed", why, _): it did not run."""

    def __init__(self, ports, rng):
        self.ports = list(ports)
        self.rng = rng
        self.slots = [None] * NSLOTS
        self.conns = {}
        self.last_refresh = 0.0
        self.refresh()

    def refresh(self):
        self.last_refresh = time.time()
        for p in self.rng.sample(self.ports, len(self.ports)):
            try:
                r = one_call(p, "CLUSTER", "SLOTS", timeout=2.0)
            except (RespError, OSError, EOFError):
                continue
            for ent in r:
                port = int(ent[2][1])
                for sl in range(ent[0], ent[1] + 1):
                    self.slots[sl] = port
            return

    def conn(self, port):
        c = self.conns.get(port)
        if c is None:
            c = Conn(port, REQUEST_TIMEOUT)
            self.conns[port] = c
        return c

    def drop(self, port):
        c = self.conns.pop(port, None)
        if c:
            c.close()

    def close(self):
        for p in list(self.conns):
            self.drop(p)

    def call(self, args, idempotent, key_index=1):
        """-> (outcome, reply or why, maybe_ran): maybe_ran says an attempt
        before the last one may have run (its reply was lost)."""
        slot = keyslot(_arg(args[key_index]))
        maybe_ran = False
        asking = None
        why = ""
        deadline = time.time() + 30
        for attempt in range(12):
            if time.time() > deadline:
                break
            port = asking or self.slots[slot] or self.rng.choice(self.ports)
            try:
                c = self.conn(port)
            except OSError as e:
                why = "io: connect :%d: %s" % (port, e)
                self._backoff(attempt)
                continue
            try:
                if asking:
                    c.call("ASKING")
                r = c.call(*args)
                return "ok", r, maybe_ran
            except RespError as e:
                why = str(e)
                word = why.split(" ", 1)[0]
                asking = None
                if word == "MOVED":
                    self.slots[slot] = int(why.split()[2].rsplit(":", 1)[1])
                    if time.time() - self.last_refresh > 1:
                        self.refresh()
                    continue
                if word == "ASK":
                    asking = int(why.split()[2].rsplit(":", 1)[1])
                    continue
                if word in RETRYABLE:
                    self._backoff(attempt)
                    continue
                # Any other error: refused, it did not run (an earlier
                # attempt may have).
                return ("unknown" if maybe_ran else "failed"), why, maybe_ran
            except (OSError, EOFError) as e:
                why = "io: %s :%d" % (e.__class__.__name__, port)
                self.drop(port)
                maybe_ran = True
                if not idempotent:
                    return "unknown", why, maybe_ran
                self._backoff(attempt)
                if time.time() - self.last_refresh > 1:
                    self.refresh()
        return ("unknown" if maybe_ran else "failed"), why, maybe_ran

    def _backoff(self, attempt):
        time.sleep(min(1.0, 0.02 * (2 ** attempt)) * (0.5 + self.rng.random() / 2))


# ---------------------------------------------------------------- writers --

NCOUNTERS = 8
NCOLL = 6       # collection keys of each type per writer


class Writer(threading.Thread):
    """Writes through a ClusterClient at a bounded rate and records every
    outcome: 'ack' (acknowledged), 'unk' (may have run), 'fail' (did not)."""

    def __init__(self, tid, seed, ports, rate, stop):
        super().__init__(daemon=True, name="writer-%d" % tid)
        self.tid = tid
        self.seed = seed
        self.rng = random.Random("%d-writer-%d" % (seed, tid))
        self.ports = ports
        self.rate = rate
        self.stop_ev = stop
        self.sets = {}          # key -> [value, state]
        self.incr = {}          # counter -> [acked, unknown]
        self.coll = {}          # key -> [(member, value, state)] in order
        self.dels = {}          # key -> (set_state, del_state)
        self.counts = {"ack": 0, "unk": 0, "fail": 0}
        self.errors = {}        # unexpected error reply -> a command it answered
        self.last_cmd = None
        self.refusals = []      # the first writes that never ran, and why
        self.n = 0

    def record(self, res):
        st, why = {"ok": "ack", "unknown": "unk", "failed": "fail"}[res[0]], res[1]
        self.counts[st] += 1
        if st == "fail" and len(self.refusals) < 20:
            self.refusals.append("%s: %s" % (self.last_cmd, why))
        if st != "ack" and not why.startswith("io:") and why.split(" ", 1)[0] not in RETRYABLE:
            # An error no retry cures: clients are never refused a write.
            self.errors.setdefault(why[:120], self.last_cmd)
        return st

    def run(self):
        # (Its own generator: retries and backoffs do not shift the ops.)
        cc = ClusterClient(self.ports, random.Random("%d-client-%d" % (self.seed, self.tid)))
        t0 = time.time()
        try:
            while not self.stop_ev.is_set():
                self.n += 1
                self.step(cc, self.n)
                nxt = t0 + self.n / self.rate
                now = time.time()
                if nxt > now:
                    self.stop_ev.wait(nxt - now)
                elif now - nxt > 1:
                    t0 = now - self.n / self.rate   # behind: no burst
        finally:
            cc.close()

    def call(self, cc, cmd, idempotent):
        self.last_cmd = " ".join(cmd)[:80]
        return cc.call(cmd, idempotent)

    def step(self, cc, n):
        t = self.tid
        x = self.rng.random()
        if x < 0.40:
            key = "k:%d:%d" % (t, n)
            val = "v:%d:%d:%s" % (t, n, "x" * self.rng.randint(0, 200))
            self.sets[key] = [val, self.record(self.call(cc, ["SET", key, val], True))]
        elif x < 0.55:
            key = "c:%d" % self.rng.randrange(NCOUNTERS)
            st = self.record(self.call(cc, ["INCR", key], False))
            ent = self.incr.setdefault(key, [0, 0])
            if st == "ack":
                ent[0] += 1
            elif st == "unk":
                ent[1] += 1
        elif x < 0.95:
            kind = self.rng.choice("hlsz")
            key = "%s:%d:%d" % (kind, t, self.rng.randrange(NCOLL))
            mem, val = "m%d" % n, "%d" % n
            cmd = {"h": ["HSET", key, mem, "val-" + val], "l": ["RPUSH", key, mem],
                   "s": ["SADD", key, mem], "z": ["ZADD", key, val, mem]}[kind]
            st = self.record(self.call(cc, cmd, kind != "l"))
            self.coll.setdefault(key, []).append((mem, val, st))
        else:
            # A key set then deleted; the DEL is checked only when no
            # attempt of the SET may run after it (its first was acked).
            key = "d:%d:%d" % (t, n)
            res = self.call(cc, ["SET", key, "gone"], True)
            st1 = self.record(res)
            clean = st1 == "ack" and not res[2]
            st2 = self.record(self.call(cc, ["DEL", key], True))
            self.dels[key] = ("ack" if clean else "unclean", st2)


# ------------------------------------------------------------------ fill --

FAR_MS = 10 ** 9    # TTLs about 11 days ahead


def fill_commands(rng):
    """[(key, [command, ...])]: every type and encoding, some TTLs, a few
    ~100 KB values."""
    out = []
    now_ms = int(time.time() * 1000)

    def add(key, cmds):
        if rng.random() < 0.2:
            cmds.append(["PEXPIREAT", key, now_ms + FAR_MS + rng.randrange(FAR_MS)])
        out.append((key, cmds))

    def word(n):
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))

    strings = [("str", 6000, lambda i: word(rng.randint(1, 300))),
               ("tiny", 40000, lambda i: i),    # many keys: a link of several slices
               ("int", 1000, lambda i: rng.randint(-10 ** 12, 10 ** 12)),
               ("big", 10, lambda i: word(100) * 1000)]
    for name, nkeys, value in strings:
        for i in range(nkeys):
            k = "f:%s:%d" % (name, i)
            add(k, [["SET", k, value(i)]])
    # (name, keys, sizes, sizes of every 20th key: another encoding, the
    # command, the arguments of one element)
    colls = [("hash", 800, (1, 20), (200, 600), "HSET",
              lambda j: ["fld%d" % j, word(rng.randint(1, 40))]),
             ("list", 800, (1, 30), (1000, 3000), "RPUSH", lambda j: [word(rng.randint(1, 30))]),
             ("iset", 600, (1, 50), (600, 1000), "SADD", lambda j: [rng.randint(0, 10 ** 9)]),
             ("set", 600, (1, 50), (200, 600), "SADD", lambda j: [word(rng.randint(3, 20))]),
             ("zset", 600, (1, 30), (200, 600), "ZADD",
              lambda j: [repr(rng.uniform(-1000, 1000)), word(rng.randint(3, 20))])]
    for name, nkeys, small, large, cmd, elem in colls:
        for i in range(nkeys):
            k = "f:%s:%d" % (name, i)
            args = [cmd, k]
            for j in range(rng.randint(*(small if i % 20 else large))):
                args += elem(j)
            add(k, [args])
    for i in range(3):
        k = "f:bighash:%d" % i
        add(k, [["HSET", k, "a", word(100) * 1000, "b", "small"]])
    for i in range(2):
        k = "f:biglist:%d" % i
        add(k, [["RPUSH", k, "head", word(100) * 1000, "tail"]])
    for i in range(300):
        k = "f:stream:%d" % i
        cmds = []
        for j in range(rng.randint(1, 60)):
            cmds.append(["XADD", k, "%d-%d" % (1000 + j, rng.randint(0, 3)),
                         "f", word(rng.randint(1, 30)), "n", j])
        if i % 3 == 0:
            cmds.append(["XGROUP", "CREATE", k, "g1", "0"])
            cmds.append(["XREADGROUP", "GROUP", "g1", "c1", "COUNT", 3, "STREAMS", k, ">"])
        add(k, cmds)
    return out


def run_fill(fill, owner):
    per = {}
    for key, cmds in fill:
        per.setdefault(owner[keyslot(key)], []).extend(cmds)
    for port, cmds in per.items():
        c = Conn(port, 60)
        try:
            for r in c.pipeline(cmds, 200):
                if isinstance(r, RespError):
                    raise RuntimeError("fill on :%d: %s" % (port, r))
        finally:
            c.close()


def snapshot_fill(keys, owner):
    """key -> (type, digest, pexpiretime) from the slot owners."""
    per = {}
    for k in keys:
        per.setdefault(owner[keyslot(k)], []).append(k)
    snap = {}
    for port, ks in per.items():
        c = Conn(port, 60)
        try:
            cmds = []
            for k in ks:
                cmds += [["TYPE", k], ["DEBUG", "DIGEST-VALUE", k], ["PEXPIRETIME", k]]
            rs = c.pipeline(cmds, 300)
        finally:
            c.close()
        for i, k in enumerate(ks):
            snap[k] = tuple(s(x) if not isinstance(x, list) else s(x[0])
                            for x in rs[3 * i:3 * i + 3])
    return snap


# ----------------------------------------------------------------- chaos --

class Stats:
    def __init__(self):
        self.attempted = 0
        self.succeeded = 0
        self.failed = {}        # cause -> n
        self.faults = {}        # kind@phase -> n
        self.missed = {}        # kind@phase never seen -> n
        self.not_converged = 0
        self.cancel_ok_completed = 0    # CANCEL said OK, the migration succeeded
        self.restarts = 0
        self.history = []       # (iteration, donor, recipient, lo, hi, desc, outcome)


def bump(d, k, n=1):
    d[k] = d.get(k, 0) + n


def classify(err):
    """A failed migration's cause, from its error text."""
    m = re.search(r"migration failed in (\w+): (.*?)(; both nodes are back.*)?$", err)
    if not m:
        return "refused: " + re.sub(r"[0-9]+", "N", err)[:50]
    phase, why = m.group(1), m.group(2).lower()
    for cause, pat in [("cancelled", r"cancel"), ("timeout", r"timed? ?out|deadline"),
                       ("connection", r"connection|closed|reset|eof|broken pipe|i/o"),
                       ("refused", r"refus|already|not allowed"),
                       ("resolved-not-owned", r"does not own")]:
        if re.search(pat, why):
            return "%s@%s" % (cause, phase)
    return "other@%s: %s" % (phase, re.sub(r"[0-9]+", "N", why)[:60])


class Migration(threading.Thread):
    def __init__(self, donor, recipient, lo, hi, timeout_ms, sock_timeout):
        super().__init__(daemon=True)
        self.args = ["RDMAMIGRATESLOTS", HOST, recipient.port,
                     "%d-%d" % (lo, hi) if hi > lo else "%d" % lo,
                     "TRANSPORT", "tcp", "TIMEOUT", timeout_ms]
        self.donor = donor
        self.sock_timeout = sock_timeout
        self.result = None      # ("ok", fields) | ("error", text) | ("lost", why)
        self.started = threading.Event()

    def run(self):
        try:
            c = Conn(self.donor.port, self.sock_timeout)
        except OSError as e:
            self.result = ("lost", "connect: %s" % e)
            self.started.set()
            return
        try:
            c.sock.sendall(encode([self.args]))
            self.started.set()
            r = c.read()
            if isinstance(r, RespError):
                self.result = ("error", str(r))
            else:
                self.result = ("ok", pairs(r))
        except socket.timeout:
            self.result = ("lost", "no reply within %.0f s" % self.sock_timeout)
        except (OSError, EOFError) as e:
            self.result = ("lost", "%s: %s" % (e.__class__.__name__, e))
        finally:
            self.started.set()
            c.close()


class Poller:
    """RDMAMIGRATESLOTS STATUS of a node, on a connection kept open."""

    def __init__(self, node):
        self.node = node
        self.c = None

    def phase(self):
        if self.node.stopped or not self.node.alive():
            return None
        try:
            if self.c is None:
                self.c = Conn(self.node.port, 0.5)
            return s(pairs(self.c.call("RDMAMIGRATESLOTS", "STATUS")).get("phase"))
        except (RespError, OSError, EOFError):
            self.close()
            return None

    def close(self):
        if self.c:
            self.c.close()
            self.c = None


def status(node):
    r = try_call(node.port, "RDMAMIGRATESLOTS", "STATUS")
    return pairs(r) if isinstance(r, list) else None


class Chaos:
    def __init__(self, seed, violations, stats):
        self.rng = random.Random("%d-chaos" % seed)
        self.viol = violations
        self.st = stats

    def plan(self):
        """Every draw of an iteration, always the same number of them."""
        r = self.rng
        kinds, weights = zip(*FAULTS)
        p = {
            "u_donor": r.random(), "u_rcpt": r.random(), "u_range": r.random(),
            "u_start": r.random(), "len": r.randint(1, 200),
            "timeout": r.choice(TIMEOUTS_MS),
            "fault": r.choices(kinds, weights)[0],
            "phase": r.choice(PHASES),
            "u_other": r.random(),
            "delay": r.random() < 0.4, "delay_ms": r.randint(100, 2500),
            "strike_frac": r.random() * r.random(),
            "restart_s": r.uniform(0.0, 2.0),
            "stop_class": r.random(), "stop_u": r.random(),
        }
        alt = r.choice(DELAYABLE)
        p["delay_phase"] = p["phase"] if p["phase"] in DELAYABLE else alt
        return p

    def stop_ms(self, p):
        c, u = p["stop_class"], p["stop_u"]
        if c < 0.4:
            ms = 100 + u * 1400
        elif c < 0.7:
            ms = 1500 + u * 4500
        else:       # past the migration's TIMEOUT
            ms = p["timeout"] + 500 + u * 4000
        return int(min(ms, STOP_MAX_MS))

    def pick(self, p, omap):
        """(donor, recipient, other, lo, hi) from the current owners."""
        nodes = RUN.nodes
        byport = {n.port: n for n in nodes}
        owning = sorted({port for port in omap.values()})
        if not owning:
            return None
        donor = byport[owning[int(p["u_donor"] * len(owning))]]
        others = [n for n in nodes if n is not donor]
        rcpt = others[int(p["u_rcpt"] * len(others))]
        rest = [n for n in others if n is not rcpt]
        other = rest[int(p["u_other"] * len(rest))]
        ranges, lo = [], None
        for sl in range(NSLOTS + 1):
            mine = sl < NSLOTS and omap.get(sl) == donor.port
            if mine and lo is None:
                lo = sl
            elif not mine and lo is not None:
                ranges.append((lo, sl - 1))
                lo = None
        a, b = ranges[int(p["u_range"] * len(ranges))]
        n = min(p["len"], b - a + 1)
        start = a + int(p["u_start"] * (b - a + 1 - n + 1))
        start = min(start, b - n + 1)
        return donor, rcpt, other, start, start + n - 1

    def iteration(self, i):
        p = self.plan()
        vs = views()
        ok, _ = converged(vs)
        omap = owner_map(vs)
        picked = self.pick(p, omap)
        if picked is None:
            log("iteration %d: no owner map; skipped" % i)
            return
        donor, rcpt, other, lo, hi = picked
        kind, phase = p["fault"], p["phase"]
        target = {"donor": donor, "recipient": rcpt, "other": other}.get(kind.split("-")[-1])
        desc = "%s@%s" % (kind, phase) if kind != "none" else "none"
        delay_txt = ""
        if p["delay"]:
            r = try_call(donor.port, "CONFIG", "SET", "migration-test-delay-" + p["delay_phase"],
                         p["delay_ms"])
            delay_txt = " delay %s %dms" % (p["delay_phase"], p["delay_ms"])
            if isinstance(r, Exception):
                delay_txt += " (refused: %s)" % r
        stop_ms = self.stop_ms(p) if kind.startswith("stop") else 0
        tmo = p["timeout"]
        # The call returns after TIMEOUT, plus whatever time its donor
        # or a stopped recipient it keeps asking took; then a margin.
        sock_timeout = (tmo + stop_ms + (p["delay_ms"] if p["delay"] else 0)) / 1000.0 + 60
        self.st.attempted += 1
        log("#%d %s -> %s slots %d-%d (%d) timeout %d ms, fault %s%s%s" % (
            i, donor.name(), rcpt.name(), lo, hi, hi - lo + 1, tmo, desc,
            (" (%s, %d ms)" % (target.name(), stop_ms)) if stop_ms else
            (" (%s)" % target.name()) if target else "", delay_txt))
        mig = Migration(donor, rcpt, lo, hi, tmo, sock_timeout)
        mig.start()
        mig.started.wait(10)
        struck = None
        if kind != "none":
            struck = self.strike(p, mig, donor, rcpt, target, stop_ms)
        mig.join(sock_timeout + 10)
        if mig.is_alive():
            self.viol.append("iteration %d: the migration call did not return within %.0f s "
                             "(%s -> %s slots %d-%d); donor STATUS %s" % (
                                 i, sock_timeout + 10, donor.name(), rcpt.name(), lo, hi,
                                 status(donor)))
            result = ("lost", "call did not return")
        else:
            result = mig.result
        self.settle(i)
        outcome = self.outcome(i, result, donor, rcpt, lo, hi, struck, desc)
        self.st.history.append((i, donor.port, rcpt.port, lo, hi, desc + delay_txt, outcome))
        self.check_range(i, lo, hi, donor, rcpt, desc)

    def strike(self, p, mig, donor, rcpt, target, stop_ms):
        kind, phase = p["fault"], p["phase"]
        # The recipient says "transfer" from INITRDMASERVER on, before the
        # donor's prepare: every phase is the donor's but link.
        polls = [Poller(rcpt if phase == "link" else donor)]
        seen = False
        end = time.time() + p["timeout"] / 1000.0 + 30
        try:
            while mig.is_alive() and time.time() < end:
                if any(pl.phase() == phase for pl in polls):
                    seen = True
                    break
                if phase != "link":     # (the link is short: poll at once)
                    time.sleep(0.002)
        finally:
            for pl in polls:
                pl.close()
        key = "%s@%s" % (kind, phase)
        if not seen:
            bump(self.st.missed, key)
            note("  phase %s not seen before the migration ended: no %s" % (phase, kind))
            return None
        if p["delay"] and p["delay_phase"] == phase:
            # Somewhere in the widened window, if the migration is still on.
            mig.join(p["delay_ms"] / 1000.0 * p["strike_frac"])
            if not mig.is_alive():
                bump(self.st.missed, key)
                note("  the migration ended before the strike: no %s" % kind)
                return None
        bump(self.st.faults, key)
        if kind.startswith("cancel"):
            r = try_call(target.port, "RDMAMIGRATESLOTS", "CANCEL", timeout=5.0)
            txt = "OK" if r == "OK" else "refused: %s" % r
            note("  CANCEL on %s: %s" % (target.name(), txt))
            return "cancel " + ("OK" if r == "OK" else "refused")
        if kind.startswith("kill"):
            target.kill9()
            note("  kill -9 %s (pid %d)" % (target.name(), target.proc.pid))
            time.sleep(p["restart_s"])
            self.restart(target)
            return "killed"
        if kind.startswith("stop"):
            target.sigstop()
            note("  SIGSTOP %s for %d ms" % (target.name(), stop_ms))
            end = time.time() + stop_ms / 1000.0
            while time.time() < end:
                time.sleep(0.05)
            target.sigcont()
            note("  SIGCONT %s" % target.name())
            return "stopped"
        return None

    def restart(self, node):
        node.start()
        self.st.restarts += 1
        if not node.wait_ready(120):
            self.viol.append("%s did not answer PING within 120 s after its restart; log:\n    %s"
                             % (node.name(), "\n    ".join(node.log_tail())))
        note("  restarted %s (pid %d)" % (node.name(), node.proc.pid))

    def check_crashes(self, when):
        for n in RUN.nodes:
            if not n.alive() and not n.expect_dead:
                self.viol.append("%s died by itself (%s; exit %s); log tail:\n    %s" % (
                    n.name(), when, n.proc.returncode if n.proc else None,
                    "\n    ".join(n.log_tail(40))))
                log("CRASH: %s died by itself (%s)" % (n.name(), when))
                self.restart(n)
            elif not n.alive():
                self.restart(n)

    def settle(self, i, quiet=False):
        """Every node up and running, no migration on any, the cluster
        converged (bounded)."""
        for n in RUN.nodes:
            if n.stopped:
                n.sigcont()
        self.check_crashes("iteration %s" % i)
        end = time.time() + 120
        busy = []
        while time.time() < end:
            busy = [(n, st) for n in RUN.nodes for st in [status(n)]
                    if st is None or s(st.get("state")) != "idle"]
            if not busy:
                break
            time.sleep(0.1)
        if busy:
            self.viol.append("iteration %s: 120 s after the migration call ended, still "
                             "running or not answering: %s" % (i, "; ".join(
                                 "%s %s" % (n.name(), {k: s(v) for k, v in (st or {}).items()
                                                      if k in ("role", "phase", "import_state",
                                                               "resolving", "last_error")})
                                 for n, st in busy)))
        for n in RUN.nodes:
            try_call(n.port, "CONFIG", "SET", *[a for ph in DELAYABLE
                                                 for a in ("migration-test-delay-" + ph, 0)])
        ok, why = wait_converged(90)
        if not ok:
            self.st.not_converged += 1
            log("  iteration %s: not converged after 90 s: %s" % (i, why))
        return ok

    def outcome(self, i, result, donor, rcpt, lo, hi, struck, desc):
        what, detail = result
        omap = owner_map()
        owners = {omap.get(sl) for sl in range(lo, hi + 1)}
        where = ("recipient" if owners == {rcpt.port} else "donor" if owners == {donor.port}
                 else "split:" + ",".join(str(x) for x in owners))
        if what == "ok" and struck == "cancel OK":
            # A CANCEL answered +OK promises a rollback (it is refused once
            # the donor has begun its handover).
            self.st.cancel_ok_completed += 1
            self.viol.append("iteration %d: CANCEL answered +OK, yet the migration of "
                             "slots %d-%d succeeded" % (i, lo, hi))
        if what == "ok":
            self.st.succeeded += 1
            out = "ok (%s keys, %s bytes)" % (s(detail.get("keys")), s(detail.get("bytes")))
            if where != "recipient":
                self.viol.append("iteration %d: RDMAMIGRATESLOTS replied OK but slots %d-%d "
                                 "are owned by the %s (%s -> %s)" % (
                                     i, lo, hi, where, donor.name(), rcpt.name()))
        elif what == "error":
            cause = classify(detail)
            bump(self.st.failed, cause)
            out = "failed: %s" % detail
            if where != "donor" and not cause.startswith("refused"):
                self.viol.append("iteration %d: the migration failed (%s) but slots %d-%d "
                                 "are owned by the %s (%s -> %s)" % (
                                     i, detail, lo, hi, where, donor.name(), rcpt.name()))
        else:
            cause = "no-reply(%s)->%s" % ("donor killed" if struck == "killed" and
                                          desc.startswith("kill-donor") else detail[:30], where)
            bump(self.st.failed, cause)
            out = "no reply (%s); slots now on the %s" % (detail, where)
        if where.startswith("split"):
            self.viol.append("iteration %d: slots %d-%d are split between owners %s after "
                             "the migration (%s)" % (i, lo, hi, where, out))
        log("  -> %s%s" % (out, "" if struck is None else " [%s]" % struck))
        return out

    def check_range(self, i, lo, hi, donor, rcpt, desc):
        """Keys of the moved slots only on their owner (every node asked)."""
        ok, _ = converged(views())
        if not ok:
            return
        omap = owner_map()
        for n in RUN.nodes:
            try:
                c = Conn(n.port, 10)
                try:
                    rs = c.pipeline([["CLUSTER", "COUNTKEYSINSLOT", sl] for sl in range(lo, hi + 1)])
                finally:
                    c.close()
            except (OSError, EOFError) as e:
                note("  check of slots %d-%d on %s: %s" % (lo, hi, n.name(), e))
                continue
            for sl, cnt in zip(range(lo, hi + 1), rs):
                if isinstance(cnt, int) and cnt > 0 and omap.get(sl) != n.port:
                    self.viol.append(
                        "iteration %d (%s, %s -> %s): %s holds %d keys of slot %d, owned by :%s"
                        % (i, desc, donor.name(), rcpt.name(), n.name(), cnt, sl, omap.get(sl)))


# ---------------------------------------------------------------- verify --

class Verifier:
    def __init__(self, violations, history):
        self.viol = violations
        self.history = history

    def slot_story(self, sl):
        its = ["#%d %s->%s %s: %s" % (i, d, r, desc, out)
               for (i, d, r, lo, hi, desc, out) in self.history if lo <= sl <= hi]
        return "; slot %d was in migrations: %s" % (sl, " | ".join(its[-6:]) or "none")

    def bad(self, msg, key=None):
        if key is not None:
            msg += self.slot_story(keyslot(key))
        self.viol.append(msg)

    def cluster_check(self):
        for n in RUN.nodes:
            try:
                r = subprocess.run([CLI, "--cluster", "check", "%s:%d" % (HOST, n.port)],
                                   capture_output=True, text=True, timeout=120)
                out = r.stdout + r.stderr
            except subprocess.TimeoutExpired:
                self.bad("redis-cli --cluster check %s timed out" % n.name())
                continue
            problems = [ln for ln in out.splitlines() if "[WARNING]" in ln or "[ERR]" in ln]
            if problems or "[OK] All 16384 slots covered." not in out or r.returncode != 0:
                self.bad("redis-cli --cluster check %s:%d (exit %d):\n    %s" % (
                    HOST, n.port, r.returncode, "\n    ".join(out.splitlines()[-40:])))

    def scan_all(self, omap):
        """key -> [ports holding it]; checks every key is in a slot its node
        owns, with CLUSTER COUNTKEYSINSLOT over all 16384 slots."""
        where = {}
        for n in RUN.nodes:
            c = Conn(n.port, 60)
            try:
                keys, cur = [], b"0"
                for _ in range(100000):
                    cur, batch = c.call("SCAN", cur, "COUNT", 1000)
                    keys += batch
                    if cur == b"0":
                        break
                keys = set(keys)
                counts = c.pipeline([["CLUSTER", "COUNTKEYSINSLOT", sl] for sl in range(NSLOTS)], 2000)
                dbsize = c.call("DBSIZE")
                sample = random.Random(n.port).sample(sorted(keys), min(200, len(keys)))
                ks = c.pipeline([["CLUSTER", "KEYSLOT", k] for k in sample])
            finally:
                c.close()
            for k, sl in zip(sample, ks):
                if sl != keyslot(k):
                    self.bad("CLUSTER KEYSLOT %s = %s, the script computes %d" % (s(k), sl, keyslot(k)))
            per_slot = {}
            for k in keys:
                sk = s(k)
                where.setdefault(sk, []).append(n.port)
                sl = keyslot(k)
                per_slot[sl] = per_slot.get(sl, 0) + 1
                if omap.get(sl) != n.port:
                    self.bad("key %s (slot %d) is on %s, the slot is owned by :%s" % (
                        sk, sl, n.name(), omap.get(sl)), sk)
            for sl in range(NSLOTS):
                cnt = counts[sl]
                if omap.get(sl) != n.port and cnt:
                    self.bad("%s: CLUSTER COUNTKEYSINSLOT %d = %s, the slot is owned by :%s" % (
                        n.name(), sl, cnt, omap.get(sl)))
                if cnt != per_slot.get(sl, 0):
                    self.bad("%s: CLUSTER COUNTKEYSINSLOT %d = %s, SCAN found %d keys" % (
                        n.name(), sl, cnt, per_slot.get(sl, 0)))
            if dbsize != len(keys):
                self.bad("%s: DBSIZE %s, SCAN found %d keys" % (n.name(), dbsize, len(keys)))
        for k, ports in where.items():
            if len(ports) > 1:
                self.bad("key %s is on %d nodes: %s" % (k, len(ports), ports), k)
        return where

    def fetch(self, where, keys, cmd):
        """key -> reply of cmd(key) on the node that holds it (keys held
        by no node are left out)."""
        per = {}
        for k in keys:
            if k in where:
                per.setdefault(where[k][0], []).append(k)
        out = {}
        for port, ks in per.items():
            c = Conn(port, 120)
            try:
                rs = c.pipeline([cmd(k) for k in ks], 1000)
            finally:
                c.close()
            out.update(zip(ks, rs))
        return out

    def check_fill(self, where, snap):
        missing = [k for k in snap if k not in where]
        for k in missing[:50]:
            self.bad("fill key %s (slot %d) is missing on every node" % (k, keyslot(k)), k)
        if len(missing) > 50:
            self.bad("... %d fill keys missing in all" % len(missing))
        now = snapshot_fill([k for k in snap if k in where],
                            {keyslot(k): where[k][0] for k in snap if k in where})
        nbad = 0
        for k, got in now.items():
            if got != snap[k]:
                nbad += 1
                if nbad <= 50:
                    self.bad("fill key %s on :%d: (type, digest, pexpiretime) expected %s, found %s"
                             % (k, where[k][0], snap[k], got), k)
        if nbad > 50:
            self.bad("... %d fill keys differ in all" % nbad)

    def check_writes(self, where, writers):
        nbad = [0]

        def bad(msg, key):
            nbad[0] += 1
            if nbad[0] <= 100:
                self.bad(msg, key)

        sets = {}
        for w in writers:
            sets.update(w.sets)
        got = self.fetch(where, sets, lambda k: ["GET", k])
        for k, (val, st) in sets.items():
            if k not in where:
                if st == "ack":
                    bad("acknowledged SET %s is missing on every node (expected %r)" % (k, val[:60]), k)
                continue
            v = s(got[k]) if not isinstance(got[k], RespError) else str(got[k])
            if st == "fail":
                bad("SET %s was refused (never ran) but the key exists on :%d with %r"
                    % (k, where[k][0], v[:60]), k)
            elif v != val:
                bad("SET %s (%s) on :%d: expected %r, found %r" % (k, st, where[k][0],
                                                                    val[:60], v[:60]), k)
        # counters
        acked, unknown = {}, {}
        for w in writers:
            for k, (a, u) in w.incr.items():
                acked[k] = acked.get(k, 0) + a
                unknown[k] = unknown.get(k, 0) + u
        got = self.fetch(where, acked, lambda k: ["GET", k])
        for k in acked:
            v = int(got[k]) if k in got and not isinstance(got[k], RespError) else 0
            if not acked[k] <= v <= acked[k] + unknown[k]:
                bad("counter %s on :%s = %d, expected between %d (acknowledged INCRs) and %d "
                    "(+ unknown)" % (k, where.get(k, ["none"])[0], v, acked[k],
                                     acked[k] + unknown[k]), k)
        # collections
        coll = {}
        for w in writers:
            coll.update(w.coll)
        cmds = {"h": lambda k: ["HGETALL", k], "l": lambda k: ["LRANGE", k, 0, -1],
                "s": lambda k: ["SMEMBERS", k], "z": lambda k: ["ZRANGE", k, 0, -1, "WITHSCORES"]}
        got = {}
        for kind, cmd in cmds.items():
            got.update(self.fetch(where, [k for k in coll if k[0] == kind], cmd))
        for k, ops in coll.items():
            kind = k[0]
            r = got.get(k, [])
            if isinstance(r, RespError):
                bad("%s on :%d: %s" % (k, where[k][0], r), k)
                continue
            r = [s(x) for x in r]
            attempted = {m: (v, st) for m, v, st in ops}
            if kind == "l":
                found = r
                pos = {}
                for j, m in enumerate(found):
                    if m not in attempted or attempted[m][1] == "fail":
                        bad("list %s holds %r, never pushed (or refused)" % (k, m), k)
                    elif m in pos and attempted[m][1] == "ack":
                        bad("list %s holds the acknowledged %r twice" % (k, m), k)
                    pos.setdefault(m, j)
                last = -1
                for m, v, st in ops:
                    if st != "ack":
                        continue
                    if m not in pos:
                        bad("list %s: acknowledged RPUSH %r is missing (%d elements on :%s)" % (
                            k, m, len(found), where.get(k, ["none"])[0]), k)
                    elif pos[m] < last:
                        bad("list %s: acknowledged %r is before an earlier acknowledged "
                            "element" % (k, m), k)
                    else:
                        last = pos[m]
                continue
            if kind == "h":
                found = dict(zip(r[::2], r[1::2]))
                want = {m: "val-%s" % v for m, (v, st) in attempted.items()}
            elif kind == "z":
                found = {m: str(int(float(sc))) for m, sc in zip(r[::2], r[1::2])}
                want = {m: v for m, (v, st) in attempted.items()}
            else:
                found = {m: None for m in r}
                want = {m: None for m in attempted}
            for m, fv in found.items():
                if m not in attempted or attempted[m][1] == "fail":
                    bad("%s holds %r, never written (or refused)" % (k, m), k)
                elif fv != want[m]:
                    bad("%s member %r: expected %r, found %r" % (k, m, want[m], fv), k)
            for m, (v, st) in attempted.items():
                if st == "ack" and m not in found:
                    bad("%s: acknowledged member %r is missing (%d members on :%s)" % (
                        k, m, len(found), where.get(k, ["none"])[0]), k)
        # deleted keys stay deleted
        for w in writers:
            for k, (st1, st2) in w.dels.items():
                if k in where and st1 == "ack" and st2 == "ack":
                    bad("key %s was deleted (DEL acknowledged) but is on :%d" % (k, where[k][0]), k)
        # no key nobody wrote
        known = set(sets) | set(acked) | set(coll)
        for w in writers:
            known |= set(w.dels)
        for k in where:
            if not k.startswith("f:") and k not in known:
                bad("key %s on %s was never written" % (k, where[k]), k)
        if nbad[0] > 100:
            self.bad("... %d write violations in all" % nbad[0])

    def check_blocks(self):
        for n in RUN.nodes:
            for tries in range(50):
                r = try_call(n.port, "DEBUG", "SLOTCOMPACT", "CHECK", timeout=120)
                if not isinstance(r, list):
                    self.bad("%s: DEBUG SLOTCOMPACT CHECK: %s" % (n.name(), r))
                    break
                d = {k: s(v) for k, v in pairs(r).items()}
                if d.get("problem") is None and d.get("unreached") == 0:
                    break
                if d.get("problem") is not None or tries == 49:
                    self.bad("%s: DEBUG SLOTCOMPACT CHECK finds the slot blocks unsound: %s"
                             % (n.name(), d))
                    break
                time.sleep(0.1)

    def check_logs(self):
        for n in RUN.nodes:
            try:
                with open(n.logfile, "rb") as f:
                    text = f.read().decode(errors="replace")
            except OSError:
                continue
            hits = [ln for ln in text.splitlines()
                    if "BUG" in ln or "Assertion" in ln or "crashed by signal" in ln]
            if hits:
                self.bad("%s: its log (%s) says:\n    %s" % (n.name(), n.logfile,
                                                            "\n    ".join(hits[:20])))


def selftest(writers, seed):
    """CHAOS_SELFTEST=1: damage the data the way a bug would before the
    checks, which must then report each damage (the verdict is FAIL)."""
    cc = ClusterClient([n.port for n in RUN.nodes], random.Random(seed))
    w = writers[0]
    lost = next(k for k, (v, st) in w.sets.items() if st == "ack")
    ctr = next(iter(w.incr))
    lst = next(k for k in w.coll if k[0] == "l")
    for cmd in (["DEL", lost], ["INCRBY", ctr, 1000], ["APPEND", "f:str:1", "x"],
                ["RPUSH", lst, "phantom"], ["SET", "k:99:1", "phantom"]):
        log("chaos: selftest: %s -> %s" % (" ".join(map(str, cmd)), cc.call(cmd, False)[:2]))
    cc.close()


# ------------------------------------------------------------------ main --

def main():
    seconds = float(os.environ.get("CHAOS_SECONDS") or 300)
    seed_env = os.environ.get("CHAOS_SEED") or ""
    seed = int(seed_env) if seed_env else random.SystemRandom().randrange(1, 10 ** 6)
    base = int(os.environ.get("CHAOS_PORT") or 31000)
    nwriters = int(os.environ.get("CHAOS_WRITERS") or (2 + seed % 3))
    rate = float(os.environ.get("CHAOS_RATE") or 100)
    root = os.environ.get("CHAOS_DIR") or os.path.join(REPO, "build", "chaos")
    affinity = os.environ.get("CHAOS_AFFINITY") or "mixed"
    if affinity == "mixed":
        # From the seed, and never all alike.
        draw = random.Random(seed * 7919 + 1)
        affinities = [draw.choice(("yes", "no")) for _ in range(4)]
        if len(set(affinities)) == 1:
            affinities[draw.randrange(4)] = "no" if affinities[0] == "yes" else "yes"
    elif affinity in ("yes", "no"):
        affinities = [affinity] * 4
    else:
        print("chaos: CHAOS_AFFINITY must be yes, no or mixed, not '%s'" % affinity,
              file=sys.stderr)
        return 2
    print("chaos: CHAOS_SEED=%d CHAOS_SECONDS=%g (4 masters on 127.0.0.1:%d-%d, slot-affinity "
          "%s, %d writers at %g req/s each)" % (seed, seconds, base, base + 3,
                                                  "/".join(affinities), nwriters, rate), flush=True)
    for b in (SERVER, CLI):
        if not os.access(b, os.X_OK):
            print("chaos: %s is missing: run make first" % b, file=sys.stderr)
            return 2
    ports = [base + i for i in range(4)]
    busy = [p for p in ports + [p + 10000 for p in ports] if not port_free(p)]
    if busy:
        print("chaos: ports in use: %s; set CHAOS_PORT" % busy, file=sys.stderr)
        return 2
    rundir = os.path.join(root, "seed%d-%s" % (seed, time.strftime("%Y%m%d-%H%M%S")))
    os.makedirs(rundir)
    RUN.logf = open(os.path.join(rundir, "chaos.log"), "w")
    log("chaos: run directory %s" % rundir)

    atexit.register(cleanup)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(130))

    violations = []
    stats = Stats()
    RUN.nodes = [Node(i, p, rundir, affinities[i]) for i, p in enumerate(ports)]
    for n in RUN.nodes:
        n.start()
    for n in RUN.nodes:
        if not n.wait_ready(60):
            print("chaos: %s did not start; see %s" % (n.name(), n.logfile), file=sys.stderr)
            return 2
    r = subprocess.run([CLI, "--cluster", "create"] + ["%s:%d" % (HOST, p) for p in ports]
                       + ["--cluster-yes"], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        print("chaos: cluster create failed:\n%s%s" % (r.stdout, r.stderr), file=sys.stderr)
        return 2
    ok, why = wait_converged(120)
    if not ok:
        print("chaos: the new cluster did not converge: %s" % why, file=sys.stderr)
        return 2

    fill = fill_commands(random.Random("%d-fill" % seed))
    omap = owner_map()
    run_fill(fill, omap)
    snap = snapshot_fill([k for k, _ in fill], omap)
    big = sum(1 for k in snap if "big" in k)
    log("chaos: filled %d keys (%d of ~100 KB; strings, hashes, lists, sets, zsets, "
        "streams; %d with a TTL)" % (len(snap), big,
                                     sum(1 for v in snap.values() if v[2] != -1)))

    stop = threading.Event()
    writers = [Writer(t, seed, ports, rate, stop) for t in range(nwriters)]
    for w in writers:
        w.start()

    chaos = Chaos(seed, violations, stats)
    t_end = time.time() + seconds
    i = 0
    while time.time() < t_end:
        i += 1
        chaos.iteration(i)
        if len(violations) > 200:
            log("chaos: over 200 violations: stopping early")
            break

    log("chaos: faults stopped after %d migrations; the writers stop" % i)
    stop.set()
    for w in writers:
        w.join(REQUEST_TIMEOUT * 12 + 60)
    for n in RUN.nodes:
        n.sigcont()
    chaos.check_crashes("the end")
    chaos.settle("end")
    ok, why = wait_converged(180)
    if not ok:
        violations.append("the cluster did not converge within 180 s after the faults "
                          "stopped: %s" % why)

    if os.environ.get("CHAOS_SELFTEST") == "1":
        selftest(writers, seed)
    log("chaos: verifying")
    v = Verifier(violations, stats.history)
    v.cluster_check()
    vs = views()
    omap = owner_map(vs)
    for port, view in vs.items():
        if view is None:
            continue
        m = {sl: view["nodes"][nid][0] for sl, nid in view["owner"].items()}
        if m != omap:
            diff = [sl for sl in range(NSLOTS) if m.get(sl) != omap.get(sl)]
            violations.append(":%d disagrees on the owner of %d slots (e.g. slot %d: %s vs %s)"
                              % (port, len(diff), diff[0], m.get(diff[0]), omap.get(diff[0])))
    where = v.scan_all(omap)
    v.check_fill(where, snap)
    v.check_writes(where, writers)
    log("chaos: checked %d keys on the nodes: %d fill keys, %d SETs, %d counters, %d "
        "collections (%d members), %d deleted keys" % (
            len(where), len(snap), sum(len(w.sets) for w in writers), NCOUNTERS,
            sum(len(w.coll) for w in writers),
            sum(len(ops) for w in writers for ops in w.coll.values()),
            sum(len(w.dels) for w in writers)))
    v.check_blocks()
    v.check_logs()

    acked = sum(w.counts["ack"] for w in writers)
    unknown = sum(w.counts["unk"] for w in writers)
    refused = sum(w.counts["fail"] for w in writers)
    for w in writers:
        for x in w.refusals:
            note("writer %d: never ran: %s" % (w.tid, x))
        for err, cmd in w.errors.items():
            violations.append("writer %d: %s was answered -%s" % (w.tid, cmd, err))
    verdict = "PASS" if not violations else "FAIL (%d violations)" % len(violations)
    if violations:
        with open(os.path.join(rundir, "violations.txt"), "w") as f:
            f.write("\n".join(violations) + "\n")
        log("VIOLATIONS (also in %s/violations.txt):" % rundir)
        for x in violations[:100]:
            log("  " + x)
    fmt = lambda d: ", ".join("%s=%d" % kv for kv in sorted(d.items())) or "none"
    summary = ("chaos summary: seed=%d seconds=%g migrations attempted=%d succeeded=%d "
               "failed=%d [%s]; faults injected=%d [%s]; phase not reached=%d [%s]; "
               "CANCEL OK yet completed=%d; restarts=%d; not converged between "
               "migrations=%d; writes acknowledged=%d "
               "unknown=%d refused=%d; verdict=%s" % (
                   seed, seconds, stats.attempted, stats.succeeded,
                   sum(stats.failed.values()), fmt(stats.failed), sum(stats.faults.values()),
                   fmt(stats.faults), sum(stats.missed.values()), fmt(stats.missed),
                   stats.cancel_ok_completed, stats.restarts, stats.not_converged, acked, unknown, refused, verdict))
    log(summary)
    cleanup()
    if not violations and os.environ.get("CHAOS_KEEP") != "1":
        for n in RUN.nodes:
            shutil.rmtree(os.path.join(n.dir, "appendonlydir"), ignore_errors=True)
    log("chaos: logs in %s" % rundir)
    return 0 if not violations else 1


if __name__ == "__main__":
    sys.exit(main())
