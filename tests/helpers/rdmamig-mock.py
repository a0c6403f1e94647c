#!/usr/bin/env python3
"""rdmamig-mock.py -- a stand-in for RDMAMIGRATESLOTS, for testing
redis-cli's side of block migration before the server has the command.

    rdmamig-mock.py LISTEN_PORT BACKEND_PORT LOG_FILE [nosupport|oldversion]

A proxy in front of one real cluster node (bin/redis-server on
BACKEND_PORT, started with cluster-announce-port LISTEN_PORT and
cluster-announce-bus-port BACKEND_PORT+10000, so the cluster and redis-cli
only ever see the proxy's port). It forwards every command, one reply per
request, except:

  COMMAND INFO RDMAMIGRATESLOTS   a non-nil entry: "this node has it"
  RDMAMIGRATESLOTS STATUS         phase, slots, keys, bytes... (flat array)
  RDMAMIGRATESLOTS <host> <port> <ranges> [TRANSPORT t] [AUTH ..|AUTH2 ..]
                   [TIMEOUT ms]
                                  logs its arguments to LOG_FILE, then moves
                                  the slots the stock way (CLUSTER SETSLOTS
                                  IMPORTING/MIGRATING, GETKEYSINSLOT +
                                  MIGRATE, SETSLOTS NODE) slowly enough to be
                                  polled, stays DELETE_DELAY in phase
                                  "delete" after the handover, and replies
                                  with the fixed fields of the interface
                                  (issue 4). TRANSPORT rdma fails before
                                  anything changes, like a node without an
                                  RDMA device. While LOG_FILE.fail-delete
                                  exists, the reply after the delete phase
                                  is an error instead.

Each call and each reply is also written to LOG_FILE.events, with the
time, so that a test sees which calls overlapped.

The recipient's real port is the announced <port> plus (BACKEND_PORT -
LISTEN_PORT). With "nosupport" it plays a node without the command
(COMMAND INFO gives nil, the command is unknown); with "oldversion", a
node of 0.1.0, which has the command but announces no
migration_protocol_version in INFO. The AUTH/AUTH2 of RDMAMIGRATESLOTS is used for the mock's
own connections to both nodes and its MIGRATEs. Test-only, RESP2 only.
"""

import os
import socket
import socketserver
import sys
import threading
import time

LISTEN, BACKEND, LOG = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
SUPPORT = sys.argv[4:5] != ["nosupport"]
OLDVERSION = sys.argv[4:5] == ["oldversion"]
OFFSET = BACKEND - LISTEN
SLOT_DELAY = 0.002      # seconds per slot: lets redis-cli poll STATUS
DELETE_DELAY = 0.3      # seconds in phase "delete", after the handover

status_lock = threading.Lock()
status = {"phase": "idle"}


class Conn:
    """A buffered RESP connection."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        i = self.buf.index(b"\r\n")
        ln, self.buf = self.buf[:i], self.buf[i + 2:]
        return ln

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def raw_reply(self):
        """One whole reply, as bytes."""
        ln = self.line()
        out = ln + b"\r\n"
        t = ln[:1]
        if t in (b"$", b"="):
            n = int(ln[1:])
            if n >= 0:
                out += self.exact(n + 2)
        elif t in (b"*", b"~", b">", b"%"):
            n = int(ln[1:])
            for _ in range(max(n, 0) * (2 if t == b"%" else 1)):
                out += self.raw_reply()
        return out

    def request(self):
        """One request: (list of bytes args, raw bytes)."""
        ln = self.line()
        if not ln.startswith(b"*"):
            return ln.split(), ln + b"\r\n"
        raw = ln + b"\r\n"
        args = []
        for _ in range(int(ln[1:])):
            hdr = self.line()
            data = self.exact(int(hdr[1:]) + 2)
            raw += hdr + b"\r\n" + data
            args.append(data[:-2])
        return args, raw


def encode(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def call(conn, *args):
    """Sends a command, returns the parsed reply (str, int, list, None, or
    an Exception for an error)."""
    conn.sock.sendall(encode(*args))
    return parse(conn)


def parse(conn):
    ln = conn.line()
    t, rest = ln[:1], ln[1:]
    if t == b"+":
        return rest.decode()
    if t == b"-":
        return Exception(rest.decode())
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        return None if n < 0 else conn.exact(n + 2)[:-2].decode("latin-1")
    if t == b"*":
        n = int(rest)
        return None if n < 0 else [parse(conn) for _ in range(n)]
    raise ValueError(ln)


def connect(port):
    return Conn(socket.create_connection(("127.0.0.1", port)))


def parse_ranges(args):
    slots = []
    for a in args:
        a = a.decode()
        lo, _, hi = a.partition("-")
        slots.extend(range(int(lo), int(hi or lo) + 1))
    return slots


def set_status(**kw):
    with status_lock:
        status.update(kw)


def status_reply():
    with status_lock:
        flat = []
        for k, v in status.items():
            flat += [k, v]
    return encode(*flat)


def event(what):
    with open(LOG + ".events", "a") as f:
        f.write("%.6f %d %s\n" % (time.time(), LISTEN, what))


def migrate(args):
    """RDMAMIGRATESLOTS host port ranges... [options]: returns the reply."""
    with open(LOG, "a") as f:
        f.write("%d %s\n" % (LISTEN, " ".join(a.decode() for a in args)))
    event("call")
    reply = migrate_slots(args)
    event("reply")
    return reply


def migrate_slots(args):
    host, port = args[1].decode(), int(args[2])
    i, ranges = 3, []
    while i < len(args) and args[i].upper() not in (b"TRANSPORT", b"AUTH",
                                                    b"AUTH2", b"TIMEOUT"):
        ranges.append(args[i])
        i += 1
    opts = [a.decode() for a in args[i:]]
    transport = opts[opts.index("TRANSPORT") + 1] if "TRANSPORT" in opts else "auto"
    if transport == "rdma":
        return b"-ERR prepare phase: rdma: no RDMA device for 127.0.0.1 (mock); slots stay STABLE\r\n"
    # The password the client passed is what the mock's own connections
    # and its MIGRATEs use, so a missing or wrong AUTH fails here.
    auth, migrate_auth = [], []
    if "AUTH" in opts:
        auth = [opts[opts.index("AUTH") + 1]]
    elif "AUTH2" in opts:
        auth = opts[opts.index("AUTH2") + 1:opts.index("AUTH2") + 3]
    if auth:
        migrate_auth = ["AUTH2" if len(auth) == 2 else "AUTH"] + auth
    slots = parse_ranges(ranges)
    t0 = time.time()
    set_status(phase="prepare", transport="tcp", slots=0, keys=0, bytes=0,
               bytes_total=len(slots) * 100)
    donor, recip = connect(BACKEND), connect(port + OFFSET)
    for node in (donor, recip) if auth else ():
        r = call(node, "AUTH", *auth)
        if isinstance(r, Exception):
            return b"-ERR prepare phase: AUTH refused: %s\r\n" % str(r).encode()
    donor_id, recip_id = call(donor, "CLUSTER", "MYID"), call(recip, "CLUSTER", "MYID")
    for node, state, other in ((recip, "IMPORTING", donor_id),
                               (donor, "MIGRATING", recip_id)):
        r = call(node, "CLUSTER", "SETSLOTS", state, other, *ranges)
        if isinstance(r, Exception):
            return b"-ERR prepare phase: %s\r\n" % str(r).encode()
    t1 = time.time()
    keys = nbytes = 0
    for n, slot in enumerate(slots):
        while True:
            ks = call(donor, "CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not ks:
                break
            for k in ks:
                u = call(donor, "MEMORY", "USAGE", k)
                nbytes += u if isinstance(u, int) else 0
            r = call(donor, "MIGRATE", host, port + OFFSET, "", 0, 5000,
                     *migrate_auth, "KEYS", *ks)
            if isinstance(r, Exception):
                return b"-ERR transfer phase: %s\r\n" % str(r).encode()
            keys += len(ks)
        set_status(phase="transfer", slots=n + 1, keys=keys, bytes=nbytes)
        time.sleep(SLOT_DELAY)
    t2 = time.time()
    set_status(phase="handover")
    for node in (recip, donor):
        r = call(node, "CLUSTER", "SETSLOTS", "NODE", recip_id, *ranges)
        if isinstance(r, Exception):
            return b"-ERR handover phase: %s\r\n" % str(r).encode()
    t3 = time.time()
    set_status(phase="delete")
    time.sleep(DELETE_DELAY)
    t4 = time.time()
    ms = lambda a, b: int((b - a) * 1000)
    set_status(phase="done", bytes_total=nbytes)
    if os.path.exists(LOG + ".fail-delete"):
        return b"-ERR delete phase: mock: the donor failed after the handover\r\n"
    return encode("transport", "tcp", "slots", len(slots), "keys", keys,
                  "bytes", nbytes, "keys_zero_copy", keys, "keys_serialized",
                  0, "prepare_ms", ms(t0, t1), "transfer_ms", ms(t1, t2),
                  "patch_ms", 0, "handover_ms", ms(t2, t3), "delete_ms", ms(t3, t4),
                  "write_pause_ms", ms(t1, t3), "mock_field", "ignored")


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        client = Conn(self.request)
        backend = None
        try:
            while True:
                args, raw = client.request()
                if not args:
                    continue
                cmd = args[0].upper()
                if not SUPPORT and cmd == b"RDMAMIGRATESLOTS":
                    self.request.sendall(b"-ERR unknown command 'RDMAMIGRATESLOTS'\r\n")
                elif not SUPPORT and cmd == b"COMMAND" and len(args) == 3 and \
                        args[1].upper() == b"INFO":
                    self.request.sendall(b"*1\r\n*-1\r\n")
                elif (cmd == b"COMMAND" and len(args) == 3 and args[1].upper() == b"INFO"
                        and args[2].upper() == b"RDMAMIGRATESLOTS"):
                    self.request.sendall(b"*1\r\n" + encode("rdmamigrateslots"))
                elif cmd == b"RDMAMIGRATESLOTS" and len(args) == 2 and \
                        args[1].upper() == b"STATUS":
                    self.request.sendall(status_reply())
                elif cmd == b"RDMAMIGRATESLOTS":
                    self.request.sendall(migrate(args))
                else:
                    if backend is None:
                        backend = connect(BACKEND)
                    backend.sock.sendall(raw)
                    reply = backend.raw_reply()
                    if OLDVERSION and cmd == b"INFO" and reply.startswith(b"$"):
                        body = reply[reply.index(b"\r\n") + 2:-2]
                        body = b"".join(l for l in body.splitlines(True)
                                        if not l.startswith(b"migration_protocol_version:"))
                        reply = b"$%d\r\n%s\r\n" % (len(body), body)
                    self.request.sendall(reply)
        except (EOFError, ConnectionError, OSError):
            pass
        finally:
            if backend is not None:
                backend.sock.close()


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


if __name__ == "__main__":
    Server(("127.0.0.1", LISTEN), Handler).serve_forever()
