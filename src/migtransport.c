/* migtransport.c -- block transport of slot migration: common part and the
 * TCP implementation. The RDMA implementation is in migrdma.c; the
 * interface and the wire format are described in migtransport.h.
 *
 * TCP protocol, one connection, the donor speaks first:
 *
 *  1. donor -> recipient: HELLO (migWireHello) carrying the token.
 *  2. recipient -> donor: WELCOME with MIG_STATUS_OK, or MIG_STATUS_BAD_TOKEN
 *     after which the recipient closes the connection. A peer that sends
 *     anything but a HELLO, closes, or has not sent all of its HELLO
 *     MIG_HANDSHAKE_MS after it connected is dropped too.
 *  3. donor -> recipient: any number of DATA records, a migWireRecord
 *     header followed by its payload, sent with writev() straight from
 *     the donor's blocks (up to IOV_MAX iovecs per call). The recipient
 *     reads the stream into a private buffer, validates each header's
 *     block id, offset and length against its registration, and only then
 *     stores the payload in the block: copied from that buffer, or, for
 *     the rest of a long one, read straight into the block (readv() of the
 *     payload plus the buffer). Runs of small records cost no system call
 *     each, long payloads no copy, and no byte of a header can ever land
 *     in block memory.
 *  4. donor -> recipient: DONE, the summary (total bytes, segments, digest
 *     of the extent list, then one big endian u64 per remote block: bytes
 *     written into it). The recipient compares it with what it counted.
 *  5. recipient -> donor: VERDICT, status plus an error text on failure.
 *
 * The listener survives strangers (migtransport.h, "Strangers"): it keeps
 * up to MIG_PENDING_MAX accepted peers whose HELLO is still incomplete
 * (struct migTcpPending, in the listener, so that they carry over from
 * one migAccept() call to the next) and polls them together with the
 * listening socket: one peer's silence delays nobody, each is dropped at
 * its own deadline, and when more are pending the oldest goes. A peer is
 * read only up to the end of its HELLO (the donor sends nothing more
 * before our WELCOME), and dropped at its first byte that cannot start
 * one.
 *
 * All sockets are non-blocking; every wait is a poll() bounded by a
 * deadline, so no call can hang on a silent peer. Writes use sendmsg()
 * with MSG_NOSIGNAL: a dead peer is an EPIPE error, not a SIGPIPE. No
 * read or write system call moves more than MIG_TCP_IO_MAX bytes (why:
 * at that definition).
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define MIGTRANSPORT_INTERNAL
#include "migtransport.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(migWireHello) == 48, "migWireHello wire layout");
_Static_assert(sizeof(migWireRecord) == 40, "migWireRecord wire layout");
_Static_assert(offsetof(migWireRecord, offset) == 16, "migWireRecord layout");
_Static_assert(offsetof(migWireHello, token) == 16, "migWireHello layout");

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif
/* iovecs per writev(): headers and payloads alternate. */
#define MIG_TCP_IOV (IOV_MAX & ~1)
/* The recipient's read-ahead buffer, and the shortest rest of a payload it
 * reads straight into the block rather than through that buffer
 * (migTcpWaitTransfer). */
#define MIG_TCP_STAGE (256 * 1024)
#define MIG_TCP_DIRECT_MIN (64 * 1024)
_Static_assert(MIG_TCP_STAGE >= 2 * MIG_TCP_DIRECT_MIN, "a stage holds small payloads whole");
/* The most bytes one read or write system call of a migration thread
 * moves. Kernels built without preemption (PREEMPT_NONE, and in effect
 * voluntary) only switch threads when the running one leaves the kernel
 * or sleeps, whatever its priority: a recv() of 4 MB into fresh blocks
 * (a page fault every 4 KB inside the copy) or a sendmsg() of 4 MB over
 * loopback (the receiving side's processing runs in the sender's
 * context) keeps the CPU for milliseconds, and a main thread woken by a
 * client on that CPU waits for it even with the migration thread in the
 * idle class. 128 KB is some tens of microseconds of copying; the extra
 * system calls cost a few ms per GB. */
#define MIG_TCP_IO_MAX (128 * 1024)
/* Largest payload of one DATA record; bigger segments are split. */
#define MIG_TCP_MAX_RECORD (1ULL << 30)
/* Most blocks one connection may register (bounds the DONE message). */
#define MIG_MAX_BLOCKS (1U << 24)
/* Longest error text a VERDICT may carry. */
#define MIG_VERDICT_TEXT 200

/* ============================== Helpers ================================== */

void migSetError(char *err, const char *fmt, ...) {
    va_list ap;
    if (err == NULL) return;
    va_start(ap, fmt);
    vsnprintf(err, MIG_ERR_LEN, fmt, ap);
    va_end(ap);
}

/* A listener dropped a peer: count it, and keep why for the error of a
 * migAccept() that ends without a donor (strangers are expected, so this
 * is no error by itself). */
void migListenerRefuse(migListener *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->lastRefusal, sizeof(l->lastRefusal), fmt, ap);
    va_end(ap);
    __atomic_add_fetch(&l->refused, 1, __ATOMIC_RELAXED);
}

int64_t migNowMs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *migKindName(migKind kind) {
    switch (kind) {
    case MIG_KIND_TCP: return "tcp";
    case MIG_KIND_RDMA: return "rdma";
    default: return "auto";
    }
}

int migParseKind(const char *s, migKind *kind) {
    if (!strcasecmp(s, "tcp")) *kind = MIG_KIND_TCP;
    else if (!strcasecmp(s, "rdma")) *kind = MIG_KIND_RDMA;
    else if (!strcasecmp(s, "auto")) *kind = MIG_KIND_AUTO;
    else return -1;
    return 0;
}

int migRdmaCompiled(void) {
#ifdef USE_RDMA
    return 1;
#else
    return 0;
#endif
}

#ifndef USE_RDMA
static const char *migNoRdma = "rdma: this build has no RDMA support "
    "(built with BUILD_RDMA=no, or without libibverbs-dev/librdmacm-dev)";
#endif

int migGenerateToken(char tok[MIG_TOKEN_LEN + 1], char *err) {
    unsigned char raw[MIG_TOKEN_LEN / 2];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            migSetError(err, "token: getrandom: %s", strerror(errno));
            return -1;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(tok + 2 * i, 3, "%02x", raw[i]);
    tok[MIG_TOKEN_LEN] = '\0';
    return 0;
}

/* Tokens are compared without an early exit, so that the time a wrong
 * token takes to be refused says nothing about how much of it matched. */
int migTokenEqual(const uint8_t *a, const uint8_t *b) {
    uint8_t diff = 0;
    for (int i = 0; i < MIG_TOKEN_LEN; i++) diff |= a[i] ^ b[i];
    return diff == 0;
}

/* The token as the fixed, zero padded wire field; -1 if it is empty or
 * too long. */
static int migTokenField(const char *token, uint8_t out[MIG_TOKEN_LEN]) {
    size_t len = token ? strlen(token) : 0;
    if (len == 0 || len > MIG_TOKEN_LEN) return -1;
    memset(out, 0, MIG_TOKEN_LEN);
    memcpy(out, token, len);
    return 0;
}

/* FNV-1a over the big endian (block, offset, length) of each extent, in
 * the order written: both ends compute the same value from the same list. */
uint64_t migDigestInit(void) {
    return 0xcbf29ce484222325ULL;
}

uint64_t migDigestExtent(uint64_t h, uint32_t block, uint64_t off,
                         uint64_t len) {
    unsigned char b[20];
    uint32_t be32 = htobe32(block);
    uint64_t be64o = htobe64(off), be64l = htobe64(len);
    memcpy(b, &be32, 4);
    memcpy(b + 4, &be64o, 8);
    memcpy(b + 12, &be64l, 8);
    for (size_t i = 0; i < sizeof(b); i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* Add one written extent to the connection's summary. */
int migAccountExtent(migConn *c, uint32_t block, uint64_t off, uint64_t len,
                     char *err) {
    if (block >= c->blockBytesLen) {
        uint32_t n = c->blockBytesLen ? c->blockBytesLen : 16;
        while (n <= block) n = n > UINT32_MAX / 2 ? UINT32_MAX : n * 2;
        uint64_t *p = realloc(c->blockBytes, (size_t)n * sizeof(*p));
        if (p == NULL) {
            migSetError(err, "%s: out of memory for the transfer summary",
                        migKindName(c->kind));
            return -1;
        }
        memset(p + c->blockBytesLen, 0,
               (size_t)(n - c->blockBytesLen) * sizeof(*p));
        c->blockBytes = p;
        c->blockBytesLen = n;
    }
    c->blockBytes[block] += len;
    c->digest = migDigestExtent(c->digest, block, off, len);
    c->stats.segments++;
    c->stats.payload_bytes += len;
    return 0;
}

void migEncodeRecord(migWireRecord *w, uint16_t type, uint32_t block,
                     uint32_t status, uint64_t offset, uint64_t length,
                     uint64_t digest) {
    w->magic = htobe32(MIG_WIRE_MAGIC);
    w->version = htobe16(MIG_WIRE_VERSION);
    w->type = htobe16(type);
    w->block = htobe32(block);
    w->status = htobe32(status);
    w->offset = htobe64(offset);
    w->length = htobe64(length);
    w->digest = htobe64(digest);
}

void migDecodeRecord(const migWireRecord *w, migWireRecord *h) {
    h->magic = be32toh(w->magic);
    h->version = be16toh(w->version);
    h->type = be16toh(w->type);
    h->block = be32toh(w->block);
    h->status = be32toh(w->status);
    h->offset = be64toh(w->offset);
    h->length = be64toh(w->length);
    h->digest = be64toh(w->digest);
}

void migEncodeHello(migWireHello *w, uint16_t type, uint32_t status,
                    const uint8_t *token) {
    memset(w, 0, sizeof(*w));
    w->magic = htobe32(MIG_WIRE_MAGIC);
    w->version = htobe16(MIG_WIRE_VERSION);
    w->type = htobe16(type);
    w->status = htobe32(status);
    if (token) memcpy(w->token, token, MIG_TOKEN_LEN);
}

/* Decode a HELLO/WELCOME from 'len' bytes (rdma_cm may pad private data).
 * Returns 0 if it is one of type 'type' of our magic and version. */
int migDecodeHello(const void *buf, size_t len, uint16_t type,
                   migWireHello *h) {
    if (buf == NULL || len < sizeof(*h)) return -1;
    memcpy(h, buf, sizeof(*h));
    h->magic = be32toh(h->magic);
    h->version = be16toh(h->version);
    h->type = be16toh(h->type);
    h->status = be32toh(h->status);
    if (h->magic != MIG_WIRE_MAGIC || h->version != MIG_WIRE_VERSION ||
        h->type != type) return -1;
    return 0;
}

/* Check the donor's DONE summary against what this recipient knows. A TCP
 * recipient counted every extent itself and requires equality; an RDMA
 * recipient saw nothing and requires every per-block count to fit its
 * block, and the counts to add up to the total. On success an RDMA
 * recipient adopts the donor's counts. Returns 0, or -1 with 'why'. */
int migCheckSummary(migConn *c, const migWireRecord *done,
                    const uint64_t *counts, char *why, size_t whylen) {
    uint32_t n = done->block;
    if (n > c->nblocks) {
        snprintf(why, whylen, "the summary covers %" PRIu32 " blocks but only "
                 "%" PRIu32 " are registered", n, c->nblocks);
        return -1;
    }
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (counts[i] > c->blocks[i].len) {
            snprintf(why, whylen, "the summary claims %" PRIu64 " bytes "
                     "written into block %" PRIu32 " of %" PRIu64 " bytes",
                     counts[i], i, c->blocks[i].len);
            return -1;
        }
        sum += counts[i];
    }
    if (sum != done->length) {
        snprintf(why, whylen, "the summary's per-block counts add up to %"
                 PRIu64 " bytes, its total says %" PRIu64, sum, done->length);
        return -1;
    }
    if (c->kind == MIG_KIND_TCP) {
        for (uint32_t i = 0; i < c->nblocks; i++) {
            uint64_t mine = i < c->blockBytesLen ? c->blockBytes[i] : 0;
            uint64_t theirs = i < n ? counts[i] : 0;
            if (mine != theirs) {
                snprintf(why, whylen, "block %" PRIu32 ": received %" PRIu64
                         " bytes, the donor says it sent %" PRIu64, i, mine,
                         theirs);
                return -1;
            }
        }
        if (c->stats.segments != done->offset || c->digest != done->digest) {
            snprintf(why, whylen, "received %" PRIu64 " segments (digest "
                     "%016" PRIx64 "), the donor says %" PRIu64 " (digest %016"
                     PRIx64 ")", c->stats.segments, c->digest, done->offset,
                     done->digest);
            return -1;
        }
        return 0;
    }
    /* RDMA: take the donor's word, now that it is known to be in bounds. */
    free(c->blockBytes);
    c->blockBytes = NULL;
    c->blockBytesLen = 0;
    if (n) {
        c->blockBytes = malloc((size_t)n * sizeof(uint64_t));
        if (c->blockBytes == NULL) {
            snprintf(why, whylen, "out of memory");
            return -1;
        }
        memcpy(c->blockBytes, counts, (size_t)n * sizeof(uint64_t));
        c->blockBytesLen = n;
    }
    c->digest = done->digest;
    c->stats.segments = done->offset;
    c->stats.payload_bytes = done->length;
    return 0;
}

/* A registered block's start, and its index in c->blocks. */
struct migBlockAddr {
    uintptr_t addr;
    uint32_t idx;
};

static int migBlockAddrCmp(const void *x, const void *y) {
    uintptr_t a = ((const struct migBlockAddr *)x)->addr;
    uintptr_t b = ((const struct migBlockAddr *)y)->addr;
    return a < b ? -1 : a > b;
}

static int migBlockHolds(const migBlock *b, uintptr_t a, uint64_t len) {
    uintptr_t s = (uintptr_t)b->addr;
    return a >= s && a - s <= b->len && len <= b->len - (a - s);
}

/* The registered block holding [p, p + len), or -1. Every segment a donor
 * writes is checked this way, and a migration registers thousands of
 * blocks and writes tens of thousands of segments: a binary search over
 * the blocks in address order (the one starting last at or before p is
 * the only candidate unless registered blocks overlap, which the linear
 * scan still covers). */
int migFindSendBlock(const migConn *c, const void *p, uint64_t len) {
    uintptr_t a = (uintptr_t)p;
    if (c->byAddr) {
        uint32_t lo = 0, hi = c->nblocks;       /* First start > a: hi. */
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (c->byAddr[mid].addr <= a) lo = mid + 1;
            else hi = mid;
        }
        if (lo > 0 && migBlockHolds(&c->blocks[c->byAddr[lo - 1].idx], a, len))
            return (int)c->byAddr[lo - 1].idx;
    }
    for (uint32_t i = 0; i < c->nblocks; i++)
        if (migBlockHolds(&c->blocks[i], a, len)) return (int)i;
    return -1;
}

migConn *migNewConn(migKind kind, int donor, int timeoutMs) {
    migConn *c = calloc(1, sizeof(*c));
    if (c == NULL) return NULL;
    c->kind = kind;
    c->donor = donor;
    c->timeoutMs = timeoutMs > 0 ? timeoutMs : 1;
    c->fd = -1;
    c->digest = migDigestInit();
    return c;
}

void migFreeConnCommon(migConn *c) {
    free(c->blocks);
    free(c->byAddr);
    free(c->blockBytes);
    free(c->watchExpect);
    free(c);
}

/* Copy a block list into the connection, checking it is sane. */
static int migSetBlocks(migConn *c, void *const addrs[], const uint64_t lens[],
                        uint32_t n, char *err) {
    const char *k = migKindName(c->kind);
    if (c->registered) {
        migSetError(err, "%s: blocks are already registered on this "
                    "connection", k);
        return -1;
    }
    if (n == 0 || n > MIG_MAX_BLOCKS) {
        migSetError(err, "%s: cannot register %" PRIu32 " blocks (1..%u)", k,
                    n, MIG_MAX_BLOCKS);
        return -1;
    }
    c->blocks = calloc(n, sizeof(*c->blocks));
    if (c->blocks == NULL) {
        migSetError(err, "%s: out of memory for %" PRIu32 " blocks", k, n);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (addrs[i] == NULL || lens[i] == 0 ||
            (uintptr_t)addrs[i] + lens[i] < (uintptr_t)addrs[i]) {
            migSetError(err, "%s: block %" PRIu32 " (%p, %" PRIu64 " bytes) "
                        "is not a valid memory range", k, i, addrs[i],
                        lens[i]);
            free(c->blocks);
            c->blocks = NULL;
            return -1;
        }
        c->blocks[i].addr = addrs[i];
        c->blocks[i].len = lens[i];
    }
    c->nblocks = n;
    /* The address index is a speed-up only: without memory for it,
     * migFindSendBlock scans. */
    if ((c->byAddr = malloc((size_t)n * sizeof(*c->byAddr))) != NULL) {
        for (uint32_t i = 0; i < n; i++) {
            c->byAddr[i].addr = (uintptr_t)addrs[i];
            c->byAddr[i].idx = i;
        }
        qsort(c->byAddr, n, sizeof(*c->byAddr), migBlockAddrCmp);
    }
    return 0;
}

/* ============================ TCP plumbing =============================== */

static int migSetNonBlock(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0) return -1;
    return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/* poll() one fd until 'events' or the deadline. 1 ready, 0 timeout, -1
 * error (errno). */
static int migPollFd(int fd, short events, int64_t deadline) {
    for (;;) {
        int64_t left = deadline - migNowMs();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (r > 0) return 1;
        if (r == 0) return 0;
        if (errno != EINTR) return -1;
    }
}

static void migFormatSockaddr(const struct sockaddr *sa, char *buf,
                              size_t len) {
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s->sin_addr, host, sizeof(host));
        port = ntohs(s->sin_port);
        snprintf(buf, len, "%s:%d", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof(host));
        port = ntohs(s->sin6_port);
        snprintf(buf, len, "[%s]:%d", host, port);
    } else {
        snprintf(buf, len, "?");
    }
}

/* One read() or readv() (of one or two iovecs, at most MIG_TCP_IO_MAX bytes
 * in all) that returns data: waits (poll, up to the deadline) while there
 * is none. Returns the byte count, 0 if the peer closed the
 * connection, or -1 with err set (what: what we wait for, and received:
 * the payload bytes received so far, UINT64_MAX for none to tell, for
 * messages). */
static ssize_t migTcpRecvSome(migConn *c, struct iovec *iov, int iovcnt,
                              int64_t deadline, int timeoutMs, const char *what,
                              uint64_t received, char *err) {
    /* At most MIG_TCP_IO_MAX bytes per call: the first iovec first. */
    struct iovec v[2];
    v[0] = iov[0];
    if (v[0].iov_len >= MIG_TCP_IO_MAX) {
        v[0].iov_len = MIG_TCP_IO_MAX;
        iovcnt = 1;
    } else if (iovcnt == 2) {
        v[1] = iov[1];
        if (v[1].iov_len > MIG_TCP_IO_MAX - v[0].iov_len)
            v[1].iov_len = MIG_TCP_IO_MAX - v[0].iov_len;
    }
    for (;;) {
        ssize_t r = iovcnt == 1 ? read(c->fd, v[0].iov_base, v[0].iov_len)
                                : readv(c->fd, v, iovcnt);
        if (r >= 0) {
            c->stats.tcp_bytes_received += (uint64_t)r;
            return r;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            migSetError(err, "tcp: reading %s from %s: %s", what, c->peer,
                        strerror(errno));
            return -1;
        }
        int p = migPollFd(c->fd, POLLIN, deadline);
        if (p == 0) {
            char got[48] = "";
            if (received != UINT64_MAX)
                snprintf(got, sizeof(got), " (%" PRIu64 " bytes received)", received);
            migSetError(err, "tcp: timeout after %d ms waiting for %s from %s%s",
                        timeoutMs, what, c->peer, got);
            return -1;
        }
        if (p < 0) {
            migSetError(err, "tcp: poll: %s", strerror(errno));
            return -1;
        }
    }
}

/* Read exactly len bytes before the deadline. 'what' names the thing read
 * in errors. */
static int migTcpReadFull(migConn *c, void *buf, size_t len, int64_t deadline,
                          int timeoutMs, const char *what, char *err) {
    unsigned char *p = buf;
    while (len) {
        struct iovec v = {p, len};
        ssize_t n = migTcpRecvSome(c, &v, 1, deadline, timeoutMs, what,
                                   UINT64_MAX, err);
        if (n < 0) return -1;
        if (n == 0) {
            migSetError(err, "tcp: %s closed the connection while we waited "
                        "for %s", c->peer, what);
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Send an iovec array completely, resuming after partial writes; each wait
 * for the socket to drain is bounded by the I/O timeout (no progress for
 * that long is an error). The array is modified. */
static int migTcpWritev(migConn *c, struct iovec *iov, int iovcnt,
                        const char *what, char *err) {
    while (iovcnt > 0) {
        /* At most MIG_TCP_IO_MAX bytes per call: the iovecs that fit,
         * or the start of the first one. */
        struct iovec first = iov[0];
        size_t bytes = iov[0].iov_len;
        int cnt = 1;
        while (cnt < iovcnt && bytes + iov[cnt].iov_len <= MIG_TCP_IO_MAX)
            bytes += iov[cnt++].iov_len;
        if (first.iov_len > MIG_TCP_IO_MAX) first.iov_len = MIG_TCP_IO_MAX;
        struct msghdr mh;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = cnt == 1 ? &first : iov;
        mh.msg_iovlen = (size_t)cnt;
        ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int r = migPollFd(c->fd, POLLOUT, migNowMs() + c->timeoutMs);
                if (r == 0) {
                    migSetError(err, "tcp: timeout after %d ms sending %s to "
                                "%s (the peer reads nothing)", c->timeoutMs,
                                what, c->peer);
                    return -1;
                }
                if (r < 0) {
                    migSetError(err, "tcp: poll: %s", strerror(errno));
                    return -1;
                }
                continue;
            }
            migSetError(err, "tcp: sending %s to %s: %s%s", what, c->peer,
                        strerror(errno), errno == EPIPE || errno == ECONNRESET
                        ? " (the recipient closed the connection)" : "");
            return -1;
        }
        c->stats.tcp_bytes_sent += (uint64_t)n;
        size_t left = (size_t)n;
        while (iovcnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0 && left) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

static int migTcpWriteFull(migConn *c, const void *buf, size_t len,
                           const char *what, char *err) {
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    return migTcpWritev(c, &iov, 1, what, err);
}

/* ============================= TCP listener ============================== */

/* An accepted peer whose HELLO is not complete yet. */
typedef struct migTcpPending {
    int fd;
    int64_t deadline;           /* dropped then if still incomplete */
    int boundMs;                /* its handshake bound, for the message */
    size_t got;                 /* bytes of hello[] received */
    unsigned char hello[sizeof(migWireHello)];
    char peer[80];
} migTcpPending;

static int migTcpListen(migListener *l, const char *bindaddr, int port,
                        char *err) {
    struct addrinfo hints, *res = NULL, *ai;
    char portstr[16];
    int rv, fd = -1, lastErrno = 0;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(portstr, sizeof(portstr), "%d", port);
    if ((rv = getaddrinfo(bindaddr, portstr, &hints, &res)) != 0) {
        migSetError(err, "tcp: cannot resolve bind address %s: %s",
                    bindaddr ? bindaddr : "*", gai_strerror(rv));
        return -1;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            lastErrno = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd, MIG_LISTEN_BACKLOG) == 0)
            break;
        lastErrno = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        migSetError(err, "tcp: cannot listen on %s:%d: %s",
                    bindaddr ? bindaddr : "*", port, strerror(lastErrno));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (migSetNonBlock(fd) ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        migSetError(err, "tcp: listener setup on %s:%d: %s",
                    bindaddr ? bindaddr : "*", port, strerror(errno));
        close(fd);
        return -1;
    }
    l->pending = calloc(MIG_PENDING_MAX, sizeof(*l->pending));
    if (l->pending == NULL) {
        migSetError(err, "tcp: out of memory");
        close(fd);
        return -1;
    }
    l->port = ntohs(ss.ss_family == AF_INET6 ?
                    ((struct sockaddr_in6 *)&ss)->sin6_port :
                    ((struct sockaddr_in *)&ss)->sin_port);
    l->fd = fd;
    return 0;
}

/* What migTcpServe() did with a pending peer. */
enum { MIG_HS_WAIT, MIG_HS_DROPPED, MIG_HS_DONE, MIG_HS_FATAL };

/* Remove pending peer i (closing its socket unless it was handed on). */
static void migTcpUnpend(migListener *l, int i, int closeFd) {
    if (closeFd) close(l->pending[i].fd);
    memmove(&l->pending[i], &l->pending[i + 1],
            (size_t)(l->npending - i - 1) * sizeof(*l->pending));
    l->npending--;
}

/* Drop every pending peer, counted as refused ('why' says why). */
static void migTcpDropAllPending(migListener *l, const char *why) {
    while (l->npending > 0) {
        migListenerRefuse(l, "tcp: %s: dropped (%s)", l->pending[0].peer, why);
        migTcpUnpend(l, 0, 1);
    }
}

/* Read what pending peer i has sent of its HELLO, without waiting, and
 * judge it once it is whole. MIG_HS_WAIT: incomplete, keep it; DROPPED:
 * refused and removed (a wrong token is told so first); DONE: *out is its
 * connection, WELCOME sent; FATAL: our own failure, err set. */
static int migTcpServe(migListener *l, int i, int ioTimeoutMs, migConn **out,
                       char *err) {
    migTcpPending *p = &l->pending[i];
    /* Any HELLO starts like this one: magic, version, type. */
    migWireHello w, h;
    const size_t head = offsetof(migWireHello, status);
    migEncodeHello(&w, MIG_MSG_HELLO, 0, NULL);

    while (p->got < sizeof(p->hello)) {
        ssize_t n = read(p->fd, p->hello + p->got, sizeof(p->hello) - p->got);
        if (n > 0) {
            size_t was = p->got;
            p->got += (size_t)n;
            size_t cmp = p->got < head ? p->got : head;
            if (was < cmp && memcmp(p->hello, &w, cmp)) {
                migListenerRefuse(l, "tcp: %s sent %zu bytes that do not "
                                  "start a migration HELLO (%02x%02x%02x%02x"
                                  "...): dropped", p->peer, p->got,
                                  p->hello[0], p->hello[1],
                                  p->got > 2 ? p->hello[2] : 0,
                                  p->got > 3 ? p->hello[3] : 0);
                migTcpUnpend(l, i, 1);
                return MIG_HS_DROPPED;
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return MIG_HS_WAIT;
        if (n == 0)
            migListenerRefuse(l, "tcp: %s closed the connection after %zu of "
                              "the %zu bytes of a HELLO: dropped", p->peer,
                              p->got, sizeof(p->hello));
        else
            migListenerRefuse(l, "tcp: reading the HELLO of %s: %s: dropped",
                              p->peer, strerror(errno));
        migTcpUnpend(l, i, 1);
        return MIG_HS_DROPPED;
    }

    if (migDecodeHello(p->hello, sizeof(p->hello), MIG_MSG_HELLO, &h)) {
        /* Its head was checked as it came: defensive only. */
        migListenerRefuse(l, "tcp: %s sent a malformed HELLO: dropped",
                          p->peer);
        migTcpUnpend(l, i, 1);
        return MIG_HS_DROPPED;
    }
    if (!migTokenEqual(h.token, l->token)) {
        /* Told so, best effort: a 48 byte write to a fresh socket fits. */
        migEncodeHello(&w, MIG_MSG_WELCOME, MIG_STATUS_BAD_TOKEN, NULL);
        ssize_t sent = send(p->fd, &w, sizeof(w), MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)sent;
        migListenerRefuse(l, "tcp: token mismatch: %s presented a wrong "
                          "token: dropped", p->peer);
        migTcpUnpend(l, i, 1);
        return MIG_HS_DROPPED;
    }
    migConn *c = migNewConn(MIG_KIND_TCP, 0, ioTimeoutMs);
    if (c == NULL) {
        migTcpUnpend(l, i, 1);
        migSetError(err, "tcp: out of memory");
        return MIG_HS_FATAL;
    }
    c->fd = p->fd;
    snprintf(c->peer, sizeof(c->peer), "%s", p->peer);
    migTcpUnpend(l, i, 0);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char werr[MIG_ERR_LEN];
    migEncodeHello(&w, MIG_MSG_WELCOME, MIG_STATUS_OK, NULL);
    if (migTcpWriteFull(c, &w, sizeof(w), "WELCOME", werr)) {
        /* It presented the token and left: nothing to do with it. */
        migListenerRefuse(l, "%s", werr);
        migClose(c);
        return MIG_HS_DROPPED;
    }
    *out = c;
    return MIG_HS_DONE;
}

/* Accept what is queued on the listening socket (up to a burst, so that
 * the pending peers get their turn), serving each new peer at once: a
 * donor's HELLO is usually there already, a closed peer's EOF too. When
 * MIG_PENDING_MAX peers are pending, they are served first and the oldest
 * dropped if none finished. Returns like migTcpServe(); MIG_HS_WAIT when
 * no donor was completed. */
static int migTcpAcceptBurst(migListener *l, int ioTimeoutMs, migConn **out,
                             char *err) {
    int hsMs = ioTimeoutMs < MIG_HANDSHAKE_MS ? ioTimeoutMs : MIG_HANDSHAKE_MS;
    for (int k = 0; k < 4 * MIG_PENDING_MAX; k++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            switch (errno) {
            case EINTR: continue;
            case EAGAIN:
#if EWOULDBLOCK != EAGAIN
            case EWOULDBLOCK:
#endif
                return MIG_HS_WAIT;
            /* The peer's problem, not the listener's (accept(2) says to
             * retry on these). */
            case ECONNABORTED: case EPROTO: case ENETDOWN: case ENOPROTOOPT:
            case EHOSTDOWN: case ENONET: case EHOSTUNREACH: case EOPNOTSUPP:
            case ENETUNREACH: case ETIMEDOUT: case EPERM:
                migListenerRefuse(l, "tcp: a connection to port %d failed "
                                  "before it was accepted: %s", l->port,
                                  strerror(errno));
                continue;
            }
            migSetError(err, "tcp: accept on port %d: %s%s", l->port,
                        strerror(errno), errno == EMFILE || errno == ENFILE ?
                        " (raise the limit of open files of the process)" : "");
            return MIG_HS_FATAL;
        }
        if (l->npending == MIG_PENDING_MAX) {
            for (int i = l->npending - 1; i >= 0; i--) {
                int r = migTcpServe(l, i, ioTimeoutMs, out, err);
                if (r == MIG_HS_DONE || r == MIG_HS_FATAL) {
                    /* The peer just accepted is dropped unheard, and
                     * counted like every other refused one. */
                    char peer[80];
                    migFormatSockaddr((struct sockaddr *)&ss, peer, sizeof(peer));
                    migListenerRefuse(l, "tcp: %s: dropped (%s)", peer, r == MIG_HS_DONE ?
                                      "the donor was accepted" : "the listener failed");
                    close(fd);
                    return r;
                }
            }
            if (l->npending == MIG_PENDING_MAX) {
                migListenerRefuse(l, "tcp: %s: dropped, the oldest of %d "
                                  "peers in their handshake",
                                  l->pending[0].peer, MIG_PENDING_MAX);
                migTcpUnpend(l, 0, 1);
            }
        }
        migTcpPending *p = &l->pending[l->npending++];
        memset(p, 0, sizeof(*p));
        p->fd = fd;
        p->deadline = migNowMs() + hsMs;
        p->boundMs = hsMs;
        migFormatSockaddr((struct sockaddr *)&ss, p->peer, sizeof(p->peer));
        int r = migTcpServe(l, l->npending - 1, ioTimeoutMs, out, err);
        if (r == MIG_HS_DONE || r == MIG_HS_FATAL) return r;
    }
    return MIG_HS_WAIT;
}

/* Wait until a peer presents the right token, or the wait ends. The
 * listening socket and every pending peer are polled together; each peer
 * is dropped at its own handshake deadline, and those still pending stay
 * in the listener for the next call (a donor that connected at the end of
 * this wait is served by the next). */
static migConn *migTcpAccept(migListener *l, int waitMs, int ioTimeoutMs,
                             char *err) {
    int64_t deadline = migNowMs() + waitMs;
    struct pollfd pfd[1 + MIG_PENDING_MAX];
    migConn *c = NULL;
    int r;

    for (;;) {
        /* Deadlines: a peer whose bytes arrived while we were not looking
         * still gets them read first. */
        int64_t now = migNowMs(), wake = deadline;
        for (int i = l->npending - 1; i >= 0; i--) {
            migTcpPending *p = &l->pending[i];
            if (p->deadline > now) continue;
            r = migTcpServe(l, i, ioTimeoutMs, &c, err);
            if (r == MIG_HS_DONE) goto accepted;
            if (r == MIG_HS_FATAL) return NULL;
            if (r == MIG_HS_WAIT) {
                migListenerRefuse(l, "tcp: %s sent %zu of the %zu bytes of a "
                                  "HELLO in %d ms: dropped", p->peer, p->got,
                                  sizeof(p->hello), p->boundMs);
                migTcpUnpend(l, i, 1);
            }
        }
        if (now >= deadline) {
            migSetError(err, "tcp: timeout after %d ms waiting for the donor "
                        "to connect to port %d", waitMs, l->port);
            return NULL;
        }
        pfd[0].fd = l->fd;
        pfd[0].events = POLLIN;
        for (int i = 0; i < l->npending; i++) {
            pfd[1 + i].fd = l->pending[i].fd;
            pfd[1 + i].events = POLLIN;
            pfd[1 + i].revents = 0;
            if (l->pending[i].deadline < wake) wake = l->pending[i].deadline;
        }
        int n = l->npending;
        int64_t left = wake - now;
        r = poll(pfd, (nfds_t)(1 + n), left < 0 ? 0 : left > INT_MAX ?
                 INT_MAX : (int)left);
        if (r < 0) {
            if (errno == EINTR) continue;
            migSetError(err, "tcp: poll: %s", strerror(errno));
            return NULL;
        }
        /* Backwards: removing peer i moves only those after it. */
        for (int i = n - 1; i >= 0; i--) {
            if (!pfd[1 + i].revents) continue;
            r = migTcpServe(l, i, ioTimeoutMs, &c, err);
            if (r == MIG_HS_DONE) goto accepted;
            if (r == MIG_HS_FATAL) return NULL;
        }
        if (pfd[0].revents & (POLLERR | POLLNVAL)) {
            migSetError(err, "tcp: the listening socket of port %d failed",
                        l->port);
            return NULL;
        }
        if (pfd[0].revents) {
            r = migTcpAcceptBurst(l, ioTimeoutMs, &c, err);
            if (r == MIG_HS_DONE) goto accepted;
            if (r == MIG_HS_FATAL) return NULL;
        }
    }

accepted:
    migTcpDropAllPending(l, "the donor was accepted");
    return c;
}

/* ============================== TCP donor ================================ */

static migConn *migTcpConnect(const char *host, int port, const uint8_t *token,
                              const char *bindaddr, int timeoutMs, char *err) {
    int64_t deadline = migNowMs() + timeoutMs;
    struct addrinfo hints, *res = NULL, *ai;
    char portstr[16];
    int rv, fd = -1;
    char lastErr[MIG_ERR_LEN] = "no address";

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(portstr, sizeof(portstr), "%d", port);
    if ((rv = getaddrinfo(host, portstr, &hints, &res)) != 0) {
        migSetError(err, "tcp: cannot resolve %s: %s", host, gai_strerror(rv));
        return NULL;
    }
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
                    SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            snprintf(lastErr, sizeof(lastErr), "socket: %s", strerror(errno));
            continue;
        }
        /* Our ephemeral port may lie in the range listeners use: with
         * SO_REUSEADDR its TIME_WAIT does not keep a listener from binding
         * that port after we are gone. */
        int reuse = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof(reuse));
        if (bindaddr && *bindaddr) {
            struct addrinfo bh, *br = NULL;
            memset(&bh, 0, sizeof(bh));
            bh.ai_family = ai->ai_family;
            bh.ai_socktype = SOCK_STREAM;
            bh.ai_flags = AI_PASSIVE;
            if (getaddrinfo(bindaddr, NULL, &bh, &br) != 0 ||
                bind(fd, br->ai_addr, br->ai_addrlen) < 0) {
                snprintf(lastErr, sizeof(lastErr), "cannot bind to %s: %s",
                         bindaddr, br ? strerror(errno) : "unresolvable");
                if (br) freeaddrinfo(br);
                close(fd);
                fd = -1;
                continue;
            }
            freeaddrinfo(br);
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        if (errno == EINPROGRESS) {
            int r = migPollFd(fd, POLLOUT, deadline);
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (r == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0
                && soerr == 0) break;
            if (r == 0)
                snprintf(lastErr, sizeof(lastErr), "timeout after %d ms",
                         timeoutMs);
            else
                snprintf(lastErr, sizeof(lastErr), "%s%s",
                         strerror(soerr ? soerr : errno),
                         soerr == ECONNREFUSED ? " (no listener)" : "");
        } else {
            snprintf(lastErr, sizeof(lastErr), "%s%s", strerror(errno),
                     errno == ECONNREFUSED ? " (no listener)" : "");
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        migSetError(err, "tcp: connect to %s:%d failed: %s", host, port,
                    lastErr);
        return NULL;
    }

    migConn *c = migNewConn(MIG_KIND_TCP, 1, timeoutMs);
    if (c == NULL) {
        close(fd);
        migSetError(err, "tcp: out of memory");
        return NULL;
    }
    c->fd = fd;
    snprintf(c->peer, sizeof(c->peer), "%s:%d", host, port);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    migWireHello w, h;
    migEncodeHello(&w, MIG_MSG_HELLO, 0, token);
    if (migTcpWriteFull(c, &w, sizeof(w), "the token (HELLO)", err))
        goto fail;
    if (migTcpReadFull(c, &w, sizeof(w), deadline, timeoutMs,
                       "the recipient's WELCOME", err)) {
        if (strstr(err ? err : "", "closed the connection"))
            migSetError(err, "tcp: %s closed the connection before answering "
                        "our token (not a migration listener, or it already "
                        "has its peer)", c->peer);
        goto fail;
    }
    if (migDecodeHello(&w, sizeof(w), MIG_MSG_WELCOME, &h)) {
        migSetError(err, "tcp: %s answered with something that is not a "
                    "migration WELCOME", c->peer);
        goto fail;
    }
    if (h.status == MIG_STATUS_BAD_TOKEN) {
        migSetError(err, "tcp: token mismatch: %s refused our token",
                    c->peer);
        goto fail;
    }
    if (h.status != MIG_STATUS_OK) {
        migSetError(err, "tcp: %s refused the connection (status %" PRIu32 ")",
                    c->peer, h.status);
        goto fail;
    }
    return c;

fail:
    close(c->fd);
    migFreeConnCommon(c);
    return NULL;
}

/* Write segments as DATA records: per batch one header array and an
 * iovec array alternating header / payload, handed to writev() in runs of
 * up to IOV_MAX iovecs. Payloads are never copied. */
static int migTcpWrite(migConn *c, const migSegment *segs, size_t n,
                       char *err) {
    size_t maxRecs = MIG_TCP_IOV / 2;
    migWireRecord *hdrs = malloc(maxRecs * sizeof(*hdrs));
    struct iovec *iov = malloc(MIG_TCP_IOV * sizeof(*iov));
    int rc = -1;
    if (hdrs == NULL || iov == NULL) {
        migSetError(err, "tcp: out of memory");
        goto out;
    }
    size_t i = 0;
    uint64_t done = 0;      /* bytes of segs[i] already framed */
    while (i < n) {
        size_t nrec = 0;
        while (i < n && nrec < maxRecs) {
            const migSegment *s = &segs[i];
            uint64_t chunk = s->len - done;
            if (chunk > MIG_TCP_MAX_RECORD) chunk = MIG_TCP_MAX_RECORD;
            migEncodeRecord(&hdrs[nrec], MIG_MSG_DATA, s->remote->id, 0,
                            s->remoteOffset + done, chunk, 0);
            iov[2 * nrec].iov_base = &hdrs[nrec];
            iov[2 * nrec].iov_len = sizeof(migWireRecord);
            iov[2 * nrec + 1].iov_base = (char *)s->local + done;
            iov[2 * nrec + 1].iov_len = chunk;
            if (migAccountExtent(c, s->remote->id, s->remoteOffset + done,
                                 chunk, err)) goto out;
            nrec++;
            done += chunk;
            if (done == s->len) {
                i++;
                done = 0;
            }
        }
        if (migTcpWritev(c, iov, (int)(2 * nrec), "block data", err))
            goto out;
    }
    rc = 0;
out:
    free(hdrs);
    free(iov);
    return rc;
}

/* DONE: the summary, then wait for the VERDICT. */
static int migTcpFinish(migConn *c, char *err) {
    uint32_t n = c->blockBytesLen;
    while (n > 0 && c->blockBytes[n - 1] == 0) n--;
    size_t len = sizeof(migWireRecord) + (size_t)n * 8;
    unsigned char *buf = malloc(len);
    if (buf == NULL) {
        migSetError(err, "tcp: out of memory");
        return -1;
    }
    migEncodeRecord((migWireRecord *)buf, MIG_MSG_DONE, n, 0,
                    c->stats.segments, c->stats.payload_bytes, c->digest);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t be = htobe64(c->blockBytes[i]);
        memcpy(buf + sizeof(migWireRecord) + (size_t)i * 8, &be, 8);
    }
    int rc = migTcpWriteFull(c, buf, len, "the DONE summary", err);
    free(buf);
    if (rc) return -1;

    migWireRecord w, v;
    int64_t deadline = migNowMs() + c->timeoutMs;
    if (migTcpReadFull(c, &w, sizeof(w), deadline, c->timeoutMs,
                       "the recipient's VERDICT", err)) return -1;
    migDecodeRecord(&w, &v);
    if (v.magic != MIG_WIRE_MAGIC || v.version != MIG_WIRE_VERSION ||
        v.type != MIG_MSG_VERDICT || v.length > MIG_VERDICT_TEXT) {
        migSetError(err, "tcp: %s answered DONE with something that is not a "
                    "VERDICT", c->peer);
        return -1;
    }
    char text[MIG_VERDICT_TEXT + 1];
    if (migTcpReadFull(c, text, v.length, deadline, c->timeoutMs,
                       "the VERDICT text", err)) return -1;
    text[v.length] = '\0';
    if (v.status != MIG_STATUS_OK) {
        migSetError(err, "tcp: the recipient rejected the transfer: %s",
                    v.length ? text : "(no reason given)");
        return -1;
    }
    return 0;
}

/* Best effort: tell the donor why we reject its transfer. */
static void migTcpSendVerdict(migConn *c, uint32_t status, const char *why) {
    unsigned char buf[sizeof(migWireRecord) + MIG_VERDICT_TEXT];
    size_t tl = why ? strlen(why) : 0;
    if (tl > MIG_VERDICT_TEXT) tl = MIG_VERDICT_TEXT;
    migEncodeRecord((migWireRecord *)buf, MIG_MSG_VERDICT, 0, status, 0, tl, 0);
    if (tl) memcpy(buf + sizeof(migWireRecord), why, tl);
    migTcpWriteFull(c, buf, sizeof(migWireRecord) + tl, "the VERDICT", NULL);
}

/* What the recipient has read from the connection and not parsed yet: the
 * headers of DATA records, the payloads of small ones, and whatever comes
 * with them (see migTcpWaitTransfer). Never block memory. */
typedef struct migTcpStage {
    unsigned char *buf;     /* MIG_TCP_STAGE bytes */
    size_t off, len;        /* unparsed bytes: buf[off, off + len) */
} migTcpStage;

/* Make the stage hold at least need (<= MIG_TCP_STAGE) unparsed bytes,
 * reading as much as the socket has. 0, or -1 with err set. */
static int migTcpStageFill(migConn *c, migTcpStage *st, size_t need,
                           int64_t deadline, int timeoutMs, const char *what,
                           char *err) {
    if (st->len >= need) return 0;
    memmove(st->buf, st->buf + st->off, st->len);
    st->off = 0;
    while (st->len < need) {
        struct iovec v = {st->buf + st->len, MIG_TCP_STAGE - st->len};
        ssize_t r = migTcpRecvSome(c, &v, 1, deadline, timeoutMs, what,
                                   c->stats.payload_bytes, err);
        if (r < 0) return -1;
        if (r == 0) {
            migSetError(err, "tcp: %s closed the connection while we waited "
                        "for %s", c->peer, what);
            return -1;
        }
        st->len += (size_t)r;
    }
    return 0;
}

/* Receive DATA records into the registered blocks until DONE. Each header
 * is validated before a single byte of its payload is stored: a block id,
 * offset or length that does not fit the registration ends the transfer
 * with an error naming it.
 *
 * The connection is read in big pieces into a private stage, and records
 * are parsed from there: a record's payload is copied from the stage into
 * its block, and once the stage is drained, a payload of at least
 * MIG_TCP_DIRECT_MIN bytes still to come is read straight into the block,
 * together with what follows it (readv() of the payload and the whole
 * stage). So a long payload costs no copy, and a run of small records (a
 * slot's blocks are shipped as many short ranges) no system call each;
 * no byte of a header ever lands in block memory. */
static int migTcpWaitTransfer(migConn *c, int timeoutMs, char *err) {
    int64_t deadline = migNowMs() + timeoutMs;
    migWireRecord raw, h;
    migTcpStage st = {malloc(MIG_TCP_STAGE), 0, 0};
    char why[MIG_ERR_LEN];
    int rc = -1;

    if (st.buf == NULL) {
        migSetError(err, "tcp: out of memory");
        return -1;
    }
    for (;;) {
        if (migTcpStageFill(c, &st, sizeof(raw), deadline, timeoutMs,
                            "the donor's data", err))
            goto out;
        memcpy(&raw, st.buf + st.off, sizeof(raw));
        st.off += sizeof(raw);
        st.len -= sizeof(raw);
        migDecodeRecord(&raw, &h);
        if (h.magic != MIG_WIRE_MAGIC || h.version != MIG_WIRE_VERSION) {
            migSetError(err, "tcp: %s sent a record with magic 0x%08" PRIx32
                        " version %u after %" PRIu64 " segments: not a "
                        "migration record", c->peer, h.magic, h.version,
                        c->stats.segments);
            goto out;
        }
        if (h.type == MIG_MSG_DONE) break;
        if (h.type != MIG_MSG_DATA) {
            migSetError(err, "tcp: %s sent a record of type %u where DATA or "
                        "DONE was expected", c->peer, h.type);
            goto out;
        }
        if (h.block >= c->nblocks) {
            snprintf(why, sizeof(why), "peer sent block id %" PRIu32 " but "
                     "only %" PRIu32 " blocks are registered", h.block,
                     c->nblocks);
            goto lying;
        }
        migBlock *b = &c->blocks[h.block];
        if (h.offset > b->len) {
            snprintf(why, sizeof(why), "peer sent offset %" PRIu64 " in block "
                     "%" PRIu32 " of %" PRIu64 " bytes", h.offset, h.block,
                     b->len);
            goto lying;
        }
        if (h.length > b->len - h.offset) {
            snprintf(why, sizeof(why), "peer sent %" PRIu64 " bytes at offset "
                     "%" PRIu64 " of block %" PRIu32 " of %" PRIu64 " bytes "
                     "(past its end)", h.length, h.offset, h.block, b->len);
            goto lying;
        }
        if (c->watchExpect) {
            uint64_t have = h.block < c->blockBytesLen ? c->blockBytes[h.block] : 0;
            if (h.length > c->watchExpect[h.block] - have) {
                snprintf(why, sizeof(why), "peer sent %" PRIu64 " more bytes "
                         "into block %" PRIu32 ", which already holds %" PRIu64
                         " of the %" PRIu64 " it is to receive", h.length,
                         h.block, have, c->watchExpect[h.block]);
                goto lying;
            }
        }
        if (migAccountExtent(c, h.block, h.offset, h.length, err)) goto out;

        /* The payload: what the stage holds of it, then the rest. */
        unsigned char *dst = b->addr + h.offset;
        uint64_t left = h.length;
        size_t take = left < st.len ? (size_t)left : st.len;
        memcpy(dst, st.buf + st.off, take);
        dst += take;
        left -= take;
        st.off += take;
        st.len -= take;
        while (left) {
            /* The stage is empty here. */
            struct iovec iov[2] = {
                {.iov_base = dst, .iov_len = left > SSIZE_MAX ? SSIZE_MAX : left},
                {.iov_base = st.buf, .iov_len = MIG_TCP_STAGE},
            };
            int direct = left >= MIG_TCP_DIRECT_MIN;
            ssize_t r = direct ? migTcpRecvSome(c, iov, 2, deadline, timeoutMs,
                                                "the donor's data",
                                                c->stats.payload_bytes - left, err)
                               : migTcpRecvSome(c, iov + 1, 1, deadline, timeoutMs,
                                                "the donor's data",
                                                c->stats.payload_bytes - left, err);
            if (r < 0) goto out;
            if (r == 0) {
                migSetError(err, "tcp: %s closed the connection in the middle "
                            "of a record (block %" PRIu32 ", %" PRIu64 " of %"
                            PRIu64 " bytes missing) after %" PRIu64
                            " segments", c->peer, h.block, left, h.length,
                            c->stats.segments - 1);
                goto out;
            }
            st.off = 0;
            if (direct) {
                if ((uint64_t)r <= left) {
                    dst += r;
                    left -= (uint64_t)r;
                    st.len = 0;
                } else {
                    st.len = (size_t)((uint64_t)r - left);
                    left = 0;
                }
            } else {
                st.len = (size_t)r;
                take = left < st.len ? (size_t)left : st.len;
                memcpy(dst, st.buf, take);
                dst += take;
                left -= take;
                st.off = take;
                st.len -= take;
            }
        }
        /* The block is whole: its owner may use it from now on. */
        if (c->watchDone && h.length &&
            c->blockBytes[h.block] == c->watchExpect[h.block] &&
            c->watchDone(c->watchCtx, h.block, err) == -1)
            goto out;
    }

    /* DONE: h.block per-block counts follow. */
    if (h.block > c->nblocks) {
        snprintf(why, sizeof(why), "peer's summary covers %" PRIu32 " blocks "
                 "but only %" PRIu32 " are registered", h.block, c->nblocks);
        goto lying;
    }
    uint64_t *counts = NULL;
    if (h.block) {
        size_t want = (size_t)h.block * 8, got = want < st.len ? want : st.len;
        counts = malloc(want);
        if (counts == NULL) {
            migSetError(err, "tcp: out of memory");
            goto out;
        }
        memcpy(counts, st.buf + st.off, got);
        st.off += got;
        st.len -= got;
        if (migTcpReadFull(c, (char *)counts + got, want - got, deadline,
                           timeoutMs, "the donor's summary", err)) {
            free(counts);
            goto out;
        }
        for (uint32_t i = 0; i < h.block; i++) counts[i] = be64toh(counts[i]);
    }
    int bad = migCheckSummary(c, &h, counts, why, sizeof(why));
    free(counts);
    if (bad) {
        migTcpSendVerdict(c, MIG_STATUS_BAD_SUMMARY, why);
        migSetError(err, "tcp: transfer from %s does not add up: %s", c->peer,
                    why);
        goto out;
    }
    migTcpSendVerdict(c, MIG_STATUS_OK, NULL);
    rc = 0;
    goto out;

lying:
    migTcpSendVerdict(c, MIG_STATUS_BAD_SUMMARY, why);
    migSetError(err, "tcp: %s; transfer from %s refused", why, c->peer);
out:
    free(st.buf);
    return rc;
}

/* ============================ Public entries ============================= */

migListener *migListen(migKind kind, const char *bindaddr, int port,
                       const char *token, char *err) {
    if (port < 0 || port > 65535) {
        migSetError(err, "%s: port %d out of range", migKindName(kind), port);
        return NULL;
    }
    migListener *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        migSetError(err, "%s: out of memory", migKindName(kind));
        return NULL;
    }
    l->fd = -1;
    snprintf(l->bindaddr, sizeof(l->bindaddr), "%s", bindaddr ? bindaddr : "");
    if (migTokenField(token, l->token)) {
        migSetError(err, "%s: the token must be 1..%d bytes",
                    migKindName(kind), MIG_TOKEN_LEN);
        free(l);
        return NULL;
    }
#ifdef USE_RDMA
    if (kind == MIG_KIND_RDMA || kind == MIG_KIND_AUTO) {
        char rerr[MIG_ERR_LEN];
        if (migRdmaListen(l, bindaddr, port, rerr) == 0) {
            l->kind = MIG_KIND_RDMA;
            return l;
        }
        if (kind == MIG_KIND_RDMA) {
            migSetError(err, "%s", rerr);
            free(l);
            return NULL;
        }
        snprintf(l->note, sizeof(l->note), "%s", rerr);
    }
#else
    if (kind == MIG_KIND_RDMA) {
        migSetError(err, "%s", migNoRdma);
        free(l);
        return NULL;
    }
    if (kind == MIG_KIND_AUTO) snprintf(l->note, sizeof(l->note), "%s",
                                        migNoRdma);
#endif
    if (migTcpListen(l, bindaddr, port, err)) {
        free(l);
        return NULL;
    }
    l->kind = MIG_KIND_TCP;
    return l;
}

int migListenerPort(const migListener *l) {
    return l->port;
}

migKind migListenerKind(const migListener *l) {
    return l->kind;
}

const char *migListenerNote(const migListener *l) {
    return l->note;
}

migConn *migAccept(migListener *l, int waitMs, int ioTimeoutMs, char *err) {
    migConn *c;
    if (l->accepted) {
        migSetError(err, "%s: the listener on port %d already accepted its "
                    "one donor", migKindName(l->kind), l->port);
        return NULL;
    }
    if (waitMs <= 0) waitMs = 1;
    if (ioTimeoutMs <= 0) ioTimeoutMs = 1;
#ifdef USE_RDMA
    if (l->kind == MIG_KIND_RDMA) c = migRdmaAccept(l, waitMs, ioTimeoutMs, err);
    else
#endif
    c = migTcpAccept(l, waitMs, ioTimeoutMs, err);
    if (c) {
        l->accepted = 1;
    } else if (err && l->refused && strstr(err, "waiting for the donor")) {
        /* Whoever gives up waiting sees who came instead. */
        size_t len = strlen(err);
        snprintf(err + len, MIG_ERR_LEN - len, " (%" PRIu64 " other peers "
                 "dropped, the last: %s)", migListenerRefused(l),
                 l->lastRefusal);
    }
    return c;
}

uint64_t migListenerRefused(const migListener *l) {
    return __atomic_load_n(&l->refused, __ATOMIC_RELAXED);
}

const char *migListenerLastRefusal(const migListener *l) {
    return l->lastRefusal;
}

void migCloseListener(migListener *l) {
    if (l == NULL) return;
#ifdef USE_RDMA
    if (l->kind == MIG_KIND_RDMA) migRdmaCloseListener(l);
#endif
    for (int i = 0; i < l->npending; i++) close(l->pending[i].fd);
    free(l->pending);
    if (l->fd >= 0) close(l->fd);
    free(l);
}

int migRegisterRecvBlocks(migConn *c, void *const addrs[], const uint64_t lens[],
                          uint32_t n, migBlockDesc out[], char *err) {
    if (c->donor) {
        migSetError(err, "%s: migRegisterRecvBlocks on a donor connection",
                    migKindName(c->kind));
        return -1;
    }
    if (migSetBlocks(c, addrs, lens, n, err)) return -1;
#ifdef USE_RDMA
    if (c->kind == MIG_KIND_RDMA) {
        if (migRdmaRegisterRecv(c, out, err)) return -1;
        c->registered = 1;
        return 0;
    }
#endif
    for (uint32_t i = 0; i < n; i++) {
        out[i].id = i;
        out[i].rkey = 0;
        out[i].addr = 0;
        out[i].len = lens[i];
    }
    c->registered = 1;
    return 0;
}

int migWatchBlocks(migConn *c, const uint64_t expect[], migBlockDoneFn *done,
                   void *ctx, char *err) {
    if (c->donor || !c->registered || c->finished || c->watchExpect) {
        migSetError(err, "%s: migWatchBlocks needs a recipient connection "
                    "with registered blocks, once, before the transfer",
                    migKindName(c->kind));
        return -1;
    }
    for (uint32_t i = 0; i < c->nblocks; i++) {
        if (expect[i] > c->blocks[i].len) {
            migSetError(err, "%s: block %" PRIu32 " is to receive %" PRIu64
                        " bytes but has %" PRIu64, migKindName(c->kind), i,
                        expect[i], c->blocks[i].len);
            return -1;
        }
    }
    c->watchExpect = malloc((size_t)(c->nblocks ? c->nblocks : 1) * sizeof(uint64_t));
    if (c->watchExpect == NULL) {
        migSetError(err, "%s: out of memory", migKindName(c->kind));
        return -1;
    }
    memcpy(c->watchExpect, expect, (size_t)c->nblocks * sizeof(uint64_t));
    c->watchDone = done;
    c->watchCtx = ctx;
    return 0;
}

int migWaitTransfer(migConn *c, int timeoutMs, char *err) {
    if (c->donor || !c->registered) {
        migSetError(err, "%s: migWaitTransfer needs a recipient connection "
                    "with registered blocks", migKindName(c->kind));
        return -1;
    }
    if (timeoutMs <= 0) timeoutMs = 1;
    int rc;
#ifdef USE_RDMA
    if (c->kind == MIG_KIND_RDMA) rc = migRdmaWaitTransfer(c, timeoutMs, err);
    else
#endif
    rc = migTcpWaitTransfer(c, timeoutMs, err);
    if (rc == 0) c->finished = 1;
    return rc;
}

uint64_t migRecvBlockBytes(const migConn *c, uint32_t i) {
    if (!c->finished || i >= c->blockBytesLen) return 0;
    return c->blockBytes[i];
}

migConn *migConnect(migKind kind, const char *host, int port, const char *token,
                    const char *bindaddr, int timeoutMs, char *err) {
    uint8_t tok[MIG_TOKEN_LEN];
    if (timeoutMs <= 0) timeoutMs = 1;
    if (host == NULL || port <= 0 || port > 65535) {
        migSetError(err, "%s: bad destination %s:%d", migKindName(kind),
                    host ? host : "(null)", port);
        return NULL;
    }
    if (migTokenField(token, tok)) {
        migSetError(err, "%s: the token must be 1..%d bytes",
                    migKindName(kind), MIG_TOKEN_LEN);
        return NULL;
    }
#ifdef USE_RDMA
    if (kind == MIG_KIND_RDMA || kind == MIG_KIND_AUTO) {
        char rerr[MIG_ERR_LEN];
        int noListener = 0;
        migConn *c = migRdmaConnect(host, port, tok, bindaddr, timeoutMs,
                                    &noListener, rerr);
        if (c || kind == MIG_KIND_RDMA) {
            if (c == NULL) migSetError(err, "%s", rerr);
            return c;
        }
        /* auto: no RDMA path to the peer (or no RDMA listener): TCP. A
         * refused token is final. */
        if (strstr(rerr, "token mismatch")) {
            migSetError(err, "%s", rerr);
            return NULL;
        }
        (void)noListener;
        migConn *t = migTcpConnect(host, port, tok, bindaddr, timeoutMs, err);
        if (t) snprintf(t->note, sizeof(t->note), "%s", rerr);
        return t;
    }
#else
    if (kind == MIG_KIND_RDMA) {
        migSetError(err, "%s", migNoRdma);
        return NULL;
    }
    if (kind == MIG_KIND_AUTO) {
        migConn *t = migTcpConnect(host, port, tok, bindaddr, timeoutMs, err);
        if (t) snprintf(t->note, sizeof(t->note), "%s", migNoRdma);
        return t;
    }
#endif
    return migTcpConnect(host, port, tok, bindaddr, timeoutMs, err);
}

int migRegisterSendBlocks(migConn *c, const void *const addrs[],
                          const uint64_t lens[], uint32_t n, char *err) {
    if (!c->donor) {
        migSetError(err, "%s: migRegisterSendBlocks on a recipient connection",
                    migKindName(c->kind));
        return -1;
    }
    if (migSetBlocks(c, (void *const *)addrs, lens, n, err)) return -1;
#ifdef USE_RDMA
    if (c->kind == MIG_KIND_RDMA && migRdmaRegisterSend(c, err)) return -1;
#endif
    c->registered = 1;
    return 0;
}

/* Donor side checks shared by both transports: every local range inside a
 * registered send block, every remote range inside its descriptor. */
static int migCheckSegments(migConn *c, const migSegment *segs, size_t n,
                            char *err) {
    const char *k = migKindName(c->kind);
    for (size_t i = 0; i < n; i++) {
        const migSegment *s = &segs[i];
        if (s->remote == NULL || s->len == 0) {
            migSetError(err, "%s: segment %zu has %s", k, i,
                        s->remote ? "zero length" : "no remote block");
            return -1;
        }
        if (migFindSendBlock(c, s->local, s->len) < 0) {
            migSetError(err, "%s: segment %zu (%p, %" PRIu64 " bytes) is not "
                        "inside a registered send block", k, i, s->local,
                        s->len);
            return -1;
        }
        if (s->remoteOffset > s->remote->len ||
            s->len > s->remote->len - s->remoteOffset) {
            migSetError(err, "%s: segment %zu (%" PRIu64 " bytes at offset %"
                        PRIu64 ") does not fit remote block %" PRIu32 " of %"
                        PRIu64 " bytes", k, i, s->len, s->remoteOffset,
                        s->remote->id, s->remote->len);
            return -1;
        }
    }
    return 0;
}

int migWriteBlocks(migConn *c, const migSegment *segs, size_t n, char *err) {
    if (!c->donor || !c->registered) {
        migSetError(err, "%s: migWriteBlocks needs a donor connection with "
                    "registered send blocks", migKindName(c->kind));
        return -1;
    }
    if (c->finished) {
        migSetError(err, "%s: migWriteBlocks after migFinish",
                    migKindName(c->kind));
        return -1;
    }
    if (migCheckSegments(c, segs, n, err)) return -1;
#ifdef USE_RDMA
    if (c->kind == MIG_KIND_RDMA) return migRdmaWrite(c, segs, n, err);
#endif
    return migTcpWrite(c, segs, n, err);
}

int migFinish(migConn *c, char *err) {
    if (!c->donor) {
        migSetError(err, "%s: migFinish on a recipient connection",
                    migKindName(c->kind));
        return -1;
    }
    int rc;
#ifdef USE_RDMA
    if (c->kind == MIG_KIND_RDMA) rc = migRdmaFinish(c, err);
    else
#endif
    rc = migTcpFinish(c, err);
    if (rc == 0) c->finished = 1;
    return rc;
}

void migSetOptions(migConn *c, const migOptions *o) {
    c->opts = *o;
}

migKind migConnKind(const migConn *c) {
    return c->kind;
}

const char *migConnPeer(const migConn *c) {
    return c->peer;
}

const char *migConnNote(const migConn *c) {
    return c->note;
}

void migGetStats(const migConn *c, migStats *out) {
    *out = c->stats;
}

int migTcpFd(const migConn *c) {
    return c->kind == MIG_KIND_TCP ? c->fd : -1;
}

void migClose(migConn *c) {
    if (c == NULL) return;
#ifdef USE_RDMA
    if (c->kind == MIG_KIND_RDMA) migRdmaClose(c);
#endif
    if (c->fd >= 0) close(c->fd);
    migFreeConnCommon(c);
}
