#!/usr/bin/env python3
"""cli-transport-keys.py -- keys for tests/build/cli-transport*.sh; run
from the repository root (it calls bin/redis-cli). The cluster is the one
the node on 127.0.0.1:PORT belongs to; REDISCLI_AUTH is used as the
password when set.

  cli-transport-keys.py N PORT
      writes N string keys (key:0.., values of 10..210 bytes), each
      straight to its owner (from CLUSTER SLOTS), one redis-cli --pipe per
      node.
  cli-transport-keys.py --check N PORT
      checks those N keys: each one is on the master that owns its slot
      (CLUSTER NODES of PORT), exactly once, with its value; and no master
      holds a key of a slot it does not own (a stale copy). Prints what is
      wrong; exits 1 if anything is.
  cli-transport-keys.py --in-first-slots N K PORT
      prints N key names (w:<i>:{...}, one a line), spread over the
      masters that own slots, each in the first K slots a master owns:
      the slots upstream's rebalance takes first from a donor."""

import os
import socket
import subprocess
import sys


def crc16(b):
    crc = 0
    for c in b:
        crc ^= c << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xffff
    return crc


def keyslot(key):
    k = key.encode()
    s = k.find(b"{")
    if s >= 0:
        e = k.find(b"}", s + 1)
        if e > s + 1:
            k = k[s + 1:e]
    return crc16(k) % 16384


def value_of(k):
    return "value-%d-" % k + "x" * (k % 200)


class Conn:
    """A minimal RESP2 client: pipelined commands, parsed replies."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", int(port)), timeout=30)
        self.f = self.sock.makefile("rb")
        pw = os.environ.get("REDISCLI_AUTH")
        if pw:
            self.call("AUTH", pw)

    def send(self, cmds):
        out = []
        for args in cmds:
            out.append("*%d\r\n" % len(args))
            for a in args:
                a = str(a).encode()
                out.append("$%d\r\n" % len(a))
                out.append(a.decode("latin-1") + "\r\n")
        self.sock.sendall("".join(out).encode("latin-1"))

    def reply(self):
        line = self.f.readline()
        if not line:
            raise EOFError("connection closed")
        t, rest = line[:1], line[1:-2].decode("latin-1")
        if t == b"+":
            return rest
        if t == b"-":
            return RuntimeError(rest)
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode("latin-1")
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RuntimeError("bad reply line %r" % line)

    def call(self, *args):
        self.send([args])
        r = self.reply()
        if isinstance(r, RuntimeError):
            raise r
        return r


def masters(port):
    """[(port, [slots])] of every master, from CLUSTER NODES of port."""
    res = []
    for line in Conn(port).call("CLUSTER", "NODES").splitlines():
        f = line.split()
        if len(f) < 8 or "master" not in f[2].split(","):
            continue
        slots = []
        for r in f[8:]:
            if r.startswith("["):
                continue
            lo, _, hi = r.partition("-")
            slots += range(int(lo), int(hi or lo) + 1)
        res.append((int(f[1].split("@")[0].rsplit(":", 1)[1]), sorted(slots)))
    return sorted(res)


def write(n, port):
    owner = {}
    for p, slots in masters(port):
        for s in slots:
            owner[s] = p
    per = {}
    for k in range(n):
        key, val = "key:%d" % k, value_of(k)
        per.setdefault(owner[keyslot(key)], []).append(
            "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(val), val))
    for p, cmds in per.items():
        subprocess.run(["bin/redis-cli", "-p", str(p), "--pipe"], input="".join(cmds),
                       text=True, check=True, capture_output=True)


def check(n, port):
    problems = []
    owner = {}
    ms = masters(port)
    for p, slots in ms:
        for s in slots:
            owner[s] = p
    if len(owner) != 16384:
        problems.append("%d slots have an owner, not 16384" % len(owner))
    seen = {}
    for p, _ in ms:
        c = Conn(p)
        cursor, found = "0", []
        while True:
            cursor, batch = c.call("SCAN", cursor, "COUNT", 1000)
            found += batch
            if cursor == "0":
                break
        stray = [k for k in found if owner.get(keyslot(k)) != p]
        if stray:
            problems.append("127.0.0.1:%d holds %d keys of slots it does not own "
                            "(e.g. %s, slot %d)" % (p, len(stray), stray[0], keyslot(stray[0])))
        mine = sorted(set(k for k in found if k.startswith("key:")) - set(stray))
        c.send([("GET", k) for k in mine])
        for k in mine:
            v = c.reply()
            seen[k] = seen.get(k, 0) + 1
            i = int(k[4:])
            if i >= n or v != value_of(i):
                problems.append("%s on 127.0.0.1:%d: %r" % (k, p, (v or "")[:40]))
    missing = [k for k in ("key:%d" % i for i in range(n)) if k not in seen]
    if missing:
        problems.append("%d keys missing (e.g. %s, slot %d, owner 127.0.0.1:%s)" % (
            len(missing), missing[0], keyslot(missing[0]), owner.get(keyslot(missing[0]))))
    for p in problems[:20]:
        print(p)
    print("%d keys checked on %d masters: %s" % (
        n, len(ms), "%d problems" % len(problems) if problems else "all there, with their values"))
    return 1 if problems else 0


def in_first_slots(n, k, port):
    firsts = [slots[:k] for _, slots in masters(port) if slots]
    out, i = [], 0
    while len(out) < n:
        j = len(out) % len(firsts)
        key = "w:%d:{t%d}" % (len(out), i)
        i += 1
        if keyslot(key) in firsts[j]:
            out.append(key)
    print("\n".join(out))
    return 0


a = sys.argv[1:]
if a[:1] == ["--check"]:
    sys.exit(check(int(a[1]), a[2]))
elif a[:1] == ["--in-first-slots"]:
    sys.exit(in_first_slots(int(a[1]), int(a[2]), a[3]))
else:
    write(int(a[0]), a[1])
