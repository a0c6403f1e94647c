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
import subprocess
import sys

sys.dont_write_bytecode = True  # (no __pycache__ in the source tree)
from rdmamig_resp import Conn as RespConn, keyslot


def value_of(k):
    return "value-%d-" % k + "x" * (k % 200)


class Conn(RespConn):
    """A connection to 127.0.0.1:port (REDISCLI_AUTH as the password)."""

    def __init__(self, port):
        super().__init__("127.0.0.1", port, 30)
        pw = os.environ.get("REDISCLI_AUTH")
        if pw:
            self.call("AUTH", pw)


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
