#!/usr/bin/env python3
"""Strangers on a migration data port (tests/unit/rdmamig/migrate-strangers.tcl).

    rdmamig-strangers.py --port P --stop-file F [--first KIND] [--ready-file R]
                         [--rate N] [--spin-ms MS] [--flood-max N]
                         [--flood-ms MS]

Plays everything but a donor against the recipient's data listener
(src/xfertcp.c) on 127.0.0.1:P, which exists only from the
recipient's INITRDMASERVER until the end of its transfer:

 1. spin: connect again and again (a refused connect costs microseconds)
    until the listener is there, so that the strangers come before the
    donor, which connects as soon as it has read the INITRDMASERVER reply;
 2. one stranger of each kind: 48 random bytes ("garbage"), a HELLO with
    a wrong token ("token", to be answered with a BAD_TOKEN WELCOME), the
    first 5 bytes of a HELLO and a close ("short": shutdown(SHUT_WR), so
    that it still sees the recipient drop it), and one that says nothing
    and stays open ("silent"). The kind --first (default garbage)
    uses the connection of the spin: the only one sure to come before
    the donor; the others follow at once, and may come after it;
 3. flood: connect and close (every other one with a reset) about --rate
    times a second until the stop file exists, --flood-max connections or
    --flood-ms.

Meanwhile it watches the open strangers: when the recipient closed them,
and what it answered. Prints one line per stranger and a last "flood:"
line, e.g.

    spin: connected after 41 ms, 1893 refused attempts
    garbage: dropped after 2 ms
    token: BAD_TOKEN WELCOME, dropped after 0 ms
    short: dropped after 1 ms
    silent: dropped after 3 ms
    flood: 2900 connections, 2950 attempts in 3010 ms

Loopback only; every loop is bounded in time and count. Exit status 0,
or 1 if the listener never appeared (stdout says so).
"""

import argparse
import errno
import os
import select
import socket
import struct
import sys
import time

MAGIC, VERSION, HELLO, WELCOME, BAD_TOKEN = 0x524D4947, 1, 1, 2, 1
HELLO_LEN = 48  # xferWireHello


def ms_since(t0):
    return int((time.monotonic() - t0) * 1000)


def hello(token):
    """A xferWireHello: magic, version, type, status, reserved, token."""
    return struct.pack(">IHHII32s", MAGIC, VERSION, HELLO, 0, 0, token)


class Stranger:
    """An open stranger: when it was dropped, what it was told."""

    def __init__(self, name, sock):
        self.name, self.sock, self.t0 = name, sock, time.monotonic()
        self.sock.setblocking(False)
        self.got = b""
        self.dropped_ms = None

    def poll(self):
        if self.dropped_ms is not None:
            return
        try:
            data = self.sock.recv(256)
        except BlockingIOError:
            return
        except OSError:  # reset
            data = b""
        if data:
            self.got += data
            return
        self.dropped_ms = ms_since(self.t0)
        self.sock.close()

    def report(self):
        line = self.name + ": "
        if self.name == "token":
            ok = (len(self.got) >= HELLO_LEN and
                  struct.unpack(">IHHI", self.got[:12]) == (MAGIC, VERSION, WELCOME, BAD_TOKEN))
            line += "BAD_TOKEN WELCOME, " if ok else "no BAD_TOKEN WELCOME (%d bytes), " % len(self.got)
        if self.dropped_ms is None:
            return line + "still open"
        return line + "dropped after %d ms" % self.dropped_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--first", default="garbage",
                    choices=["garbage", "token", "short", "silent"])
    ap.add_argument("--ready-file")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--spin-ms", type=int, default=20000)
    ap.add_argument("--flood-max", type=int, default=30000)
    ap.add_argument("--flood-ms", type=int, default=30000)
    a = ap.parse_args()
    addr = ("127.0.0.1", a.port)

    if a.ready_file:
        open(a.ready_file, "w").close()
    t0, refused, first = time.monotonic(), 0, None
    while first is None:
        if ms_since(t0) > a.spin_ms or refused > 50000000:
            print("spin: no listener on port %d after %d ms, %d attempts" % (a.port, ms_since(t0), refused))
            return 1
        s = socket.socket()
        try:
            s.connect(addr)
            first = s
        except OSError:
            s.close()
            refused += 1
            if refused % 1000 == 0 and os.path.exists(a.stop_file):
                print("spin: stopped before the listener came, %d attempts" % refused)
                return 1
    print("spin: connected after %d ms, %d refused attempts" % (ms_since(t0), refused))

    strangers = []
    kinds = ["garbage", "token", "short", "silent"]
    kinds.remove(a.first)
    for kind in [a.first] + kinds:
        try:
            s = first if kind == a.first else socket.create_connection(addr, timeout=2)
        except ConnectionRefusedError:
            # The donor is in and the listener closed (it takes one donor):
            # the others meet no listener at all.
            print("%s: refused (the listener had closed)" % kind)
            continue
        try:
            if kind == "garbage":
                s.sendall(os.urandom(HELLO_LEN))
            elif kind == "token":
                s.sendall(hello(b"not-the-token".ljust(32, b"x")))
            elif kind == "short":
                s.sendall(hello(b"")[:5])
                s.shutdown(socket.SHUT_WR)
        except OSError:
            # Reset before it said its piece: the listener had already
            # dropped it (a connection still in its backlog when the donor
            # came and the listener closed). Its first poll reports it.
            pass
        strangers.append(Stranger(kind, s))

    t1, attempts, connected = time.monotonic(), 0, 0
    reset = struct.pack("ii", 1, 0)
    while (attempts < a.flood_max and ms_since(t1) < a.flood_ms and
           not os.path.exists(a.stop_file)):
        # Non-blocking, no wait: over loopback a listener with room in its
        # backlog completes the handshake within connect(); once it has
        # its donor it accepts no more, the backlog fills and drops SYNs,
        # and the pace must not depend on that.
        s = socket.socket()
        s.setblocking(False)
        if attempts % 2:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, reset)
        err = s.connect_ex(addr)
        if err == errno.EINPROGRESS and select.select([], [s], [], 0)[1]:
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        connected += err == 0
        s.close()
        attempts += 1
        for st in strangers:
            st.poll()
        wait = t1 + attempts / a.rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    # The last answers (the listener is closed by now, or soon).
    for _ in range(20):
        for st in strangers:
            st.poll()
        if all(st.dropped_ms is not None for st in strangers):
            break
        select.select([], [], [], 0.05)
    for st in strangers:
        print(st.report())
    print("flood: %d connections, %d attempts in %d ms" % (connected, attempts, ms_since(t1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
