"""rdmamig_resp.py -- what the Python helpers of the tests share
(cli-transport-keys.py, rdmamig-writer.py; imported from the script's own
directory): a key's hash slot, and a minimal RESP2 client."""

import socket


def _crc16_table():
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xffff)
    return table


_CRC16 = _crc16_table()


def crc16(b):
    """CRC16-XMODEM of bytes, as Redis Cluster computes it."""
    crc = 0
    for c in b:
        crc = ((crc << 8) & 0xffff) ^ _CRC16[(crc >> 8) ^ c]
    return crc


def keyslot(key):
    """The hash slot of a key (a str), its hash tag's if it has one."""
    k = key.encode()
    s = k.find(b"{")
    if s >= 0:
        e = k.find(b"}", s + 1)
        if e > s + 1:
            k = k[s + 1:e]
    return crc16(k) % 16384


class Conn:
    """A RESP2 connection: pipelined commands, parsed replies. An error
    reply is returned as a RuntimeError (call() raises it); a closed
    connection raises EOFError, no reply within the timeout an OSError
    (socket.timeout)."""

    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.f = self.sock.makefile("rb")

    def send(self, cmds):
        out = []
        for args in cmds:
            out.append(b"*%d\r\n" % len(args))
            for a in args:
                a = str(a).encode()
                out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))

    def reply(self):
        line = self.f.readline()
        if not line.endswith(b"\r\n"):
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
            return None if n < 0 else self.f.read(n + 2)[:-2].decode("latin-1")
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise EOFError("bad reply line %r" % line)

    def call(self, *args):
        self.send([args])
        r = self.reply()
        if isinstance(r, RuntimeError):
            raise r
        return r

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
