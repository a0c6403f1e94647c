# recipient-replica-gen.py N FIRST LAST [string|hash]: RESP commands for N
# keys spread evenly over slots FIRST..LAST, for redis-cli --pipe: SET of 64
# bytes (one in 4 with a TTL), or HSET of 10 fields of 100 bytes.
import sys
def crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xffff
    return crc
n, first, last = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
kind = sys.argv[4] if len(sys.argv) > 4 else "string"
tags = {}
i = 0
while len(tags) < last - first + 1:
    t = b"t%d" % i
    s = crc16(t) % 16384
    if first <= s <= last and s not in tags:
        tags[s] = t
    i += 1
slots = sorted(tags)
out = sys.stdout.buffer
val = b"v" * 64
for k in range(n):
    key = b"key:{" + tags[slots[k % len(slots)]] + b"}:%d" % k
    if kind == "hash":
        cmd = [b"HSET", key]
        for f in range(10):
            cmd += [b"field%d" % f, b"x" * 100]
    elif k % 4 == 0:
        cmd = [b"SET", key, val, b"PX", b"100000000"]
    else:
        cmd = [b"SET", key, val]
    out.write(b"*%d\r\n" % len(cmd) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in cmd))
