#!/usr/bin/env python3
"""cli-transport-keys.py N PORT -- writes N string keys (key:0.., values of
10..210 bytes) into the cluster that the node on 127.0.0.1:PORT belongs to,
each straight to its owner (from CLUSTER SLOTS) with one redis-cli --pipe
per node. Used by tests/build/cli-transport*.sh; run from the repository
root (it calls bin/redis-cli)."""

import subprocess
import sys

n, port = int(sys.argv[1]), sys.argv[2]


def crc16(b):
    crc = 0
    for c in b:
        crc ^= c << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xffff
    return crc


owner = {}
out = subprocess.run(["bin/redis-cli", "-p", port, "cluster", "slots"],
                     capture_output=True, text=True, check=True).stdout.split("\n")
# redis-cli's plain output of CLUSTER SLOTS: start, end, then per node ip,
# port, id (and hostname fields, possibly empty)...
i = 0
while i + 3 < len(out):
    if out[i].isdigit() and out[i + 1].isdigit() and out[i + 3].isdigit():
        for s in range(int(out[i]), int(out[i + 1]) + 1):
            owner[s] = out[i + 3]
        i += 4
    else:
        i += 1
per = {}
for k in range(n):
    key = "key:%d" % k
    val = "value-%d-" % k + "x" * (k % 200)
    per.setdefault(owner[crc16(key.encode()) % 16384], []).append(
        "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(val), val))
for p, cmds in per.items():
    subprocess.run(["bin/redis-cli", "-p", p, "--pipe"], input="".join(cmds),
                   text=True, check=True, capture_output=True)
