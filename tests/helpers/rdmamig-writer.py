#!/usr/bin/env python3
"""rdmamig-writer.py -- a cluster-aware background writer for the
RDMAMIGRATESLOTS fault tests (tests/unit/rdmamig/migrate-matrix.tcl).

  rdmamig-writer.py HOST PORT PREFIX RANGES ACKFILE STOPFILE

Until STOPFILE exists, two threads each SET unique keys to unique values:
one into the slots of RANGES ("40-49 60", the slots a migration moves:
keys PREFIX:m:{tag}:<n>, one hash tag per slot, in turn), one into any
other slot (PREFIX:o:<n>). Each write goes to the master that owns the
key's slot as far as the writer knows (CLUSTER SLOTS of any node that
answers, then every MOVED); a MOVED, ASK, TRYAGAIN, CLUSTERDOWN or
LOADING reply, a connection error or no reply within 2 s (a write held by
a frozen slot, a stopped or killed node) is not acknowledged: the key is
tried again, with the same value, until some node says OK. Only a +OK is
an acknowledgement: the line "key value" is then appended to ACKFILE
(flushed at once). Once stopped, the writer writes "done <acked>
<attempts not acknowledged> {<why> <count>, ...}" to ACKFILE.done and
exits. A write every 2 ms at most per thread: a light load. It also
stops, without ACKFILE.done, once the process that started it is gone (a
test client killed, a CI run stopped), so that it never writes into the
servers a later test starts on the same port. Run from anywhere:
rdmamig_resp.py is imported from the script's directory."""

import os
import sys
import threading
import time

sys.dont_write_bytecode = True  # (no __pycache__ in the source tree)
from rdmamig_resp import Conn, keyslot

TIMEOUT = 2.0


def expand(ranges):
    slots = set()
    for r in ranges.split():
        lo, _, hi = r.partition("-")
        slots.update(range(int(lo), int(hi or lo) + 1))
    return slots


class Writer:
    def __init__(self, seed):
        self.seeds = [seed]         # every node ever heard of
        self.owner = {}             # slot -> (host, port)
        self.errors = {}            # kind of failure -> count
        self.lock = threading.Lock()

    def refresh(self):
        for addr in list(self.seeds):
            try:
                c = Conn(*addr, TIMEOUT)
                c.send([("CLUSTER", "SLOTS")])
                slots = c.reply()
                c.close()
            except (OSError, EOFError):
                continue
            if not isinstance(slots, list):
                continue
            with self.lock:
                for r in slots:
                    a = (r[2][0] or addr[0], int(r[2][1]))
                    if a not in self.seeds:
                        self.seeds.append(a)
                    for s in range(int(r[0]), int(r[1]) + 1):
                        self.owner[s] = a
            return


PARENT = os.getppid()


def run(w, names, ackfile, stopfile, stats, i):
    conns = {}
    n = 0
    key = None
    while not os.path.exists(stopfile):
        if os.getppid() != PARENT:
            os._exit(1)         # Orphaned: whoever would stop it is gone.
        if key is None:
            key, value = names(n), "v-%d-%s" % (n, "x" * (n % 50))
            n += 1
        slot = keyslot(key)
        with w.lock:
            addr = w.owner.get(slot)
        try:
            if addr is None:
                raise EOFError("no owner known")
            if addr not in conns:
                conns[addr] = Conn(*addr, TIMEOUT)
            conns[addr].send([("SET", key, value)])
            r = conns[addr].reply()
        except (OSError, EOFError) as e:
            c = conns.pop(addr, None)
            if c:
                c.close()
            r = e
        if r == "OK":
            with w.lock:
                ackfile.write("%s %s\n" % (key, value))
                ackfile.flush()
            stats[i][0] += 1
            key = None
        else:
            stats[i][1] += 1
            msg = str(r)
            kind = (msg.split() or ["?"])[0] if isinstance(r, RuntimeError) else type(r).__name__
            with w.lock:
                w.errors[kind] = w.errors.get(kind, 0) + 1
            if msg.startswith("MOVED "):
                host, _, port = msg.split()[2].rpartition(":")
                with w.lock:
                    w.owner[slot] = (host or addr[0], int(port))
                    if w.owner[slot] not in w.seeds:
                        w.seeds.append(w.owner[slot])
            else:
                time.sleep(0.05)
                w.refresh()
        time.sleep(0.002)
    for c in conns.values():
        c.close()


def main():
    host, port, prefix, ranges, ackpath, stopfile = sys.argv[1:7]
    moving = expand(ranges)
    tag_of, t = {}, 0
    while len(tag_of) < len(moving):
        slot = keyslot("t%d" % t)
        if slot in moving and slot not in tag_of:
            tag_of[slot] = "t%d" % t
        t += 1
    tags = [tag_of[s] for s in sorted(moving)]

    def moving_name(n):
        return "%s:m:{%s}:%d" % (prefix, tags[n % len(tags)], n)

    def other_name(n):
        while True:
            k = "%s:o:%d" % (prefix, n)
            if keyslot(k) not in moving:
                return k
            n += 1000000

    w = Writer((host, int(port)))
    w.refresh()
    stats = [[0, 0], [0, 0]]
    with open(ackpath, "w") as ackfile:
        threads = [threading.Thread(target=run, args=(w, f, ackfile, stopfile, stats, i))
                   for i, f in enumerate((moving_name, other_name))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    with open(ackpath + ".done", "w") as f:
        f.write("done %d %d {%s}\n" % (stats[0][0] + stats[1][0], stats[0][1] + stats[1][1],
                                       ", ".join("%s %d" % e for e in sorted(w.errors.items()))))


main()
