/* xfer.c -- block transport of slot migration: the facade.
 *
 * The public functions of xfer.h, with the checks they share
 * (arguments, which end of a connection may call what, in which state,
 * the donor's segments against both registrations), the choice of a
 * transport (a kind asked for, or "auto": RDMA when it can listen or
 * connect, else TCP, with the reason kept in the listener's or the
 * connection's note), and the helpers both transports use: errors, the
 * clock, tokens, the wire encoding, the transfer summary and its check,
 * the registered blocks. What moves the bytes is a table of operations
 * per transport (xferOps, xferimpl.h): xferTcpOps in
 * xfertcp.c (the TCP protocol is described there) and xferRdmaOps in
 * xferrdma.c (the RDMA protocol); a listener and a connection carry
 * theirs, and everything here calls through it.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "xferimpl.h"

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

_Static_assert(sizeof(xferWireHello) == 48, "xferWireHello wire layout");
_Static_assert(sizeof(xferWireRecord) == 40, "xferWireRecord wire layout");
_Static_assert(offsetof(xferWireRecord, offset) == 16, "xferWireRecord layout");
_Static_assert(offsetof(xferWireHello, token) == 16, "xferWireHello layout");

/* Most blocks one connection may register (bounds the DONE message). */
#define XFER_MAX_BLOCKS (1U << 24)

/* ============================== Helpers ================================== */

void xferSetError(char *err, const char *fmt, ...) {
    va_list ap;
    if (err == NULL) return;
    va_start(ap, fmt);
    vsnprintf(err, XFER_ERR_LEN, fmt, ap);
    va_end(ap);
}

/* A listener dropped a peer: count it, and keep why for the error of a
 * xferAccept() that ends without a donor (strangers are expected, so this
 * is no error by itself). */
void xferListenerRefuse(xferListener *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->lastRefusal, sizeof(l->lastRefusal), fmt, ap);
    va_end(ap);
    __atomic_add_fetch(&l->refused, 1, __ATOMIC_RELAXED);
}

int64_t xferNowMs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *xferKindName(xferKind kind) {
    switch (kind) {
    case XFER_KIND_TCP: return "tcp";
    case XFER_KIND_RDMA: return "rdma";
    default: return "auto";
    }
}

int xferParseKind(const char *s, xferKind *kind) {
    if (!strcasecmp(s, "tcp")) *kind = XFER_KIND_TCP;
    else if (!strcasecmp(s, "rdma")) *kind = XFER_KIND_RDMA;
    else if (!strcasecmp(s, "auto")) *kind = XFER_KIND_AUTO;
    else return -1;
    return 0;
}

int xferGenerateToken(char tok[XFER_TOKEN_LEN + 1], char *err) {
    unsigned char raw[XFER_TOKEN_LEN / 2];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            xferSetError(err, "token: getrandom: %s", strerror(errno));
            return -1;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(tok + 2 * i, 3, "%02x", raw[i]);
    tok[XFER_TOKEN_LEN] = '\0';
    return 0;
}

/* Tokens are compared without an early exit, so that the time a wrong
 * token takes to be refused says nothing about how much of it matched. */
int xferTokenEqual(const uint8_t *a, const uint8_t *b) {
    uint8_t diff = 0;
    for (int i = 0; i < XFER_TOKEN_LEN; i++) diff |= a[i] ^ b[i];
    return diff == 0;
}

/* The token as the fixed, zero padded wire field; -1 if it is empty or
 * too long. */
static int xferTokenField(const char *token, uint8_t out[XFER_TOKEN_LEN]) {
    size_t len = token ? strlen(token) : 0;
    if (len == 0 || len > XFER_TOKEN_LEN) return -1;
    memset(out, 0, XFER_TOKEN_LEN);
    memcpy(out, token, len);
    return 0;
}

/* FNV-1a over the big endian (block, offset, length) of each extent, in
 * the order written: both ends compute the same value from the same list. */
uint64_t xferDigestInit(void) {
    return 0xcbf29ce484222325ULL;
}

uint64_t xferDigestExtent(uint64_t h, uint32_t block, uint64_t off,
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
int xferAccountExtent(xferConn *c, uint32_t block, uint64_t off, uint64_t len,
                      char *err) {
    if (block >= c->blockBytesLen) {
        uint32_t n = c->blockBytesLen ? c->blockBytesLen : 16;
        while (n <= block) n = n > UINT32_MAX / 2 ? UINT32_MAX : n * 2;
        uint64_t *p = realloc(c->blockBytes, (size_t)n * sizeof(*p));
        if (p == NULL) {
            xferSetError(err, "%s: out of memory for the transfer summary",
                         xferKindName(c->kind));
            return -1;
        }
        memset(p + c->blockBytesLen, 0,
               (size_t)(n - c->blockBytesLen) * sizeof(*p));
        c->blockBytes = p;
        c->blockBytesLen = n;
    }
    c->blockBytes[block] += len;
    c->digest = xferDigestExtent(c->digest, block, off, len);
    c->stats.segments++;
    c->stats.payload_bytes += len;
    return 0;
}

void xferEncodeRecord(xferWireRecord *w, uint16_t type, uint32_t block,
                      uint32_t status, uint64_t offset, uint64_t length,
                      uint64_t digest) {
    w->magic = htobe32(XFER_WIRE_MAGIC);
    w->version = htobe16(XFER_WIRE_VERSION);
    w->type = htobe16(type);
    w->block = htobe32(block);
    w->status = htobe32(status);
    w->offset = htobe64(offset);
    w->length = htobe64(length);
    w->digest = htobe64(digest);
}

void xferDecodeRecord(const xferWireRecord *w, xferWireRecord *h) {
    h->magic = be32toh(w->magic);
    h->version = be16toh(w->version);
    h->type = be16toh(w->type);
    h->block = be32toh(w->block);
    h->status = be32toh(w->status);
    h->offset = be64toh(w->offset);
    h->length = be64toh(w->length);
    h->digest = be64toh(w->digest);
}

void xferEncodeHello(xferWireHello *w, uint16_t type, uint32_t status,
                     const uint8_t *token) {
    memset(w, 0, sizeof(*w));
    w->magic = htobe32(XFER_WIRE_MAGIC);
    w->version = htobe16(XFER_WIRE_VERSION);
    w->type = htobe16(type);
    w->status = htobe32(status);
    if (token) memcpy(w->token, token, XFER_TOKEN_LEN);
}

/* Decode a HELLO/WELCOME from 'len' bytes (rdma_cm may pad private data).
 * Returns 0 if it is one of type 'type' of our magic and version. */
int xferDecodeHello(const void *buf, size_t len, uint16_t type,
                    xferWireHello *h) {
    if (buf == NULL || len < sizeof(*h)) return -1;
    memcpy(h, buf, sizeof(*h));
    h->magic = be32toh(h->magic);
    h->version = be16toh(h->version);
    h->type = be16toh(h->type);
    h->status = be32toh(h->status);
    if (h->magic != XFER_WIRE_MAGIC || h->version != XFER_WIRE_VERSION ||
        h->type != type) return -1;
    return 0;
}

/* Check the donor's DONE summary against what this recipient knows. A TCP
 * recipient counted every extent itself and requires equality; an RDMA
 * recipient saw nothing and requires every per-block count to fit its
 * block, and the counts to add up to the total. On success an RDMA
 * recipient adopts the donor's counts. Returns 0, or -1 with 'why'. */
int xferCheckSummary(xferConn *c, const xferWireRecord *done,
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
    if (c->ops->recipientSeesWrites) {
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
    /* One-sided writes: take the donor's word, now that it is known to be
     * in bounds. */
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
struct xferBlockAddr {
    uintptr_t addr;
    uint32_t idx;
};

static int xferBlockAddrCmp(const void *x, const void *y) {
    uintptr_t a = ((const struct xferBlockAddr *)x)->addr;
    uintptr_t b = ((const struct xferBlockAddr *)y)->addr;
    return a < b ? -1 : a > b;
}

static int xferBlockHolds(const xferBlock *b, uintptr_t a, uint64_t len) {
    uintptr_t s = (uintptr_t)b->addr;
    return a >= s && a - s <= b->len && len <= b->len - (a - s);
}

/* The registered block holding [p, p + len), or -1. Every segment a donor
 * writes is checked this way, and a migration registers thousands of
 * blocks and writes tens of thousands of segments: a binary search over
 * the blocks in address order (the one starting last at or before p is
 * the only candidate unless registered blocks overlap, which the linear
 * scan still covers). */
int xferFindSendBlock(const xferConn *c, const void *p, uint64_t len) {
    uintptr_t a = (uintptr_t)p;
    if (c->byAddr) {
        uint32_t lo = 0, hi = c->nblocks;       /* First start > a: hi. */
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (c->byAddr[mid].addr <= a) lo = mid + 1;
            else hi = mid;
        }
        if (lo > 0 && xferBlockHolds(&c->blocks[c->byAddr[lo - 1].idx], a, len))
            return (int)c->byAddr[lo - 1].idx;
    }
    for (uint32_t i = 0; i < c->nblocks; i++)
        if (xferBlockHolds(&c->blocks[i], a, len)) return (int)i;
    return -1;
}

xferConn *xferNewConn(const xferOps *ops, int donor, int timeoutMs) {
    xferConn *c = calloc(1, sizeof(*c));
    if (c == NULL) return NULL;
    c->ops = ops;
    c->kind = ops->kind;
    c->donor = donor;
    c->timeoutMs = timeoutMs > 0 ? timeoutMs : 1;
    c->fd = -1;
    c->digest = xferDigestInit();
    return c;
}

void xferFreeConnCommon(xferConn *c) {
    free(c->blocks);
    free(c->byAddr);
    free(c->blockBytes);
    free(c->watchExpect);
    free(c);
}

/* Copy a block list into the connection, checking it is sane. */
static int xferSetBlocks(xferConn *c, void *const addrs[], const uint64_t lens[],
                         uint32_t n, char *err) {
    const char *k = xferKindName(c->kind);
    if (c->registered) {
        xferSetError(err, "%s: blocks are already registered on this "
                     "connection", k);
        return -1;
    }
    if (n == 0 || n > XFER_MAX_BLOCKS) {
        xferSetError(err, "%s: cannot register %" PRIu32 " blocks (1..%u)", k,
                     n, XFER_MAX_BLOCKS);
        return -1;
    }
    c->blocks = calloc(n, sizeof(*c->blocks));
    if (c->blocks == NULL) {
        xferSetError(err, "%s: out of memory for %" PRIu32 " blocks", k, n);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (addrs[i] == NULL || lens[i] == 0 ||
            (uintptr_t)addrs[i] + lens[i] < (uintptr_t)addrs[i]) {
            xferSetError(err, "%s: block %" PRIu32 " (%p, %" PRIu64 " bytes) "
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
     * xferFindSendBlock scans. */
    if ((c->byAddr = malloc((size_t)n * sizeof(*c->byAddr))) != NULL) {
        for (uint32_t i = 0; i < n; i++) {
            c->byAddr[i].addr = (uintptr_t)addrs[i];
            c->byAddr[i].idx = i;
        }
        qsort(c->byAddr, n, sizeof(*c->byAddr), xferBlockAddrCmp);
    }
    return 0;
}

/* ============================ Public entries ============================= */

xferListener *xferListen(xferKind kind, const char *bindaddr, int port,
                         const char *token, char *err) {
    if (port < 0 || port > 65535) {
        xferSetError(err, "%s: port %d out of range", xferKindName(kind), port);
        return NULL;
    }
    xferListener *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        xferSetError(err, "%s: out of memory", xferKindName(kind));
        return NULL;
    }
    l->fd = -1;
    snprintf(l->bindaddr, sizeof(l->bindaddr), "%s", bindaddr ? bindaddr : "");
    if (xferTokenField(token, l->token)) {
        xferSetError(err, "%s: the token must be 1..%d bytes",
                     xferKindName(kind), XFER_TOKEN_LEN);
        free(l);
        return NULL;
    }
    /* RDMA first when asked for, or for "auto", which falls back to TCP
     * and keeps why (a build without RDMA refuses it, and says so). */
    if (kind == XFER_KIND_RDMA || kind == XFER_KIND_AUTO) {
        char rerr[XFER_ERR_LEN];
        if (xferRdmaOps.listen(l, bindaddr, port, rerr) == 0) {
            l->ops = &xferRdmaOps;
            l->kind = xferRdmaOps.kind;
            return l;
        }
        if (kind == XFER_KIND_RDMA) {
            xferSetError(err, "%s", rerr);
            free(l);
            return NULL;
        }
        snprintf(l->note, sizeof(l->note), "%s", rerr);
    }
    if (xferTcpOps.listen(l, bindaddr, port, err)) {
        free(l);
        return NULL;
    }
    l->ops = &xferTcpOps;
    l->kind = xferTcpOps.kind;
    return l;
}

int xferListenerPort(const xferListener *l) {
    return l->port;
}

xferKind xferListenerKind(const xferListener *l) {
    return l->kind;
}

const char *xferListenerNote(const xferListener *l) {
    return l->note;
}

xferConn *xferAccept(xferListener *l, int waitMs, int ioTimeoutMs, char *err) {
    xferConn *c;
    if (l->accepted) {
        xferSetError(err, "%s: the listener on port %d already accepted its "
                     "one donor", xferKindName(l->kind), l->port);
        return NULL;
    }
    if (waitMs <= 0) waitMs = 1;
    if (ioTimeoutMs <= 0) ioTimeoutMs = 1;
    c = l->ops->accept(l, waitMs, ioTimeoutMs, err);
    if (c) {
        l->accepted = 1;
    } else if (err && l->refused && strstr(err, "waiting for the donor")) {
        /* Whoever gives up waiting sees who came instead. */
        size_t len = strlen(err);
        snprintf(err + len, XFER_ERR_LEN - len, " (%" PRIu64 " other peers "
                 "dropped, the last: %s)", xferListenerRefused(l),
                 l->lastRefusal);
    }
    return c;
}

uint64_t xferListenerRefused(const xferListener *l) {
    return __atomic_load_n(&l->refused, __ATOMIC_RELAXED);
}

const char *xferListenerLastRefusal(const xferListener *l) {
    return l->lastRefusal;
}

void xferCloseListener(xferListener *l) {
    if (l == NULL) return;
    l->ops->closeListener(l);
    free(l);
}

int xferRegisterRecvBlocks(xferConn *c, void *const addrs[], const uint64_t lens[],
                           uint32_t n, xferBlockDesc out[], char *err) {
    if (c->donor) {
        xferSetError(err, "%s: xferRegisterRecvBlocks on a donor connection",
                     xferKindName(c->kind));
        return -1;
    }
    if (xferSetBlocks(c, addrs, lens, n, err)) return -1;
    if (c->ops->registerRecv(c, out, err)) return -1;
    c->registered = 1;
    return 0;
}

int xferWatchBlocks(xferConn *c, const uint64_t expect[], xferBlockDoneFn *done,
                    void *ctx, char *err) {
    if (c->donor || !c->registered || c->finished || c->watchExpect) {
        xferSetError(err, "%s: xferWatchBlocks needs a recipient connection "
                     "with registered blocks, once, before the transfer",
                     xferKindName(c->kind));
        return -1;
    }
    for (uint32_t i = 0; i < c->nblocks; i++) {
        if (expect[i] > c->blocks[i].len) {
            xferSetError(err, "%s: block %" PRIu32 " is to receive %" PRIu64
                         " bytes but has %" PRIu64, xferKindName(c->kind), i,
                         expect[i], c->blocks[i].len);
            return -1;
        }
    }
    c->watchExpect = malloc((size_t)(c->nblocks ? c->nblocks : 1) * sizeof(uint64_t));
    if (c->watchExpect == NULL) {
        xferSetError(err, "%s: out of memory", xferKindName(c->kind));
        return -1;
    }
    memcpy(c->watchExpect, expect, (size_t)c->nblocks * sizeof(uint64_t));
    c->watchDone = done;
    c->watchCtx = ctx;
    return 0;
}

int xferWaitTransfer(xferConn *c, int timeoutMs, char *err) {
    if (c->donor || !c->registered) {
        xferSetError(err, "%s: xferWaitTransfer needs a recipient connection "
                     "with registered blocks", xferKindName(c->kind));
        return -1;
    }
    if (timeoutMs <= 0) timeoutMs = 1;
    int rc = c->ops->waitTransfer(c, timeoutMs, err);
    if (rc == 0) c->finished = 1;
    return rc;
}

uint64_t xferRecvBlockBytes(const xferConn *c, uint32_t i) {
    if (!c->finished || i >= c->blockBytesLen) return 0;
    return c->blockBytes[i];
}

xferConn *xferConnect(xferKind kind, const char *host, int port, const char *token,
                      const char *bindaddr, int timeoutMs, char *err) {
    uint8_t tok[XFER_TOKEN_LEN];
    if (timeoutMs <= 0) timeoutMs = 1;
    if (host == NULL || port <= 0 || port > 65535) {
        xferSetError(err, "%s: bad destination %s:%d", xferKindName(kind),
                     host ? host : "(null)", port);
        return NULL;
    }
    if (xferTokenField(token, tok)) {
        xferSetError(err, "%s: the token must be 1..%d bytes",
                     xferKindName(kind), XFER_TOKEN_LEN);
        return NULL;
    }
    /* RDMA first when asked for, or for "auto" (see xferListen()). */
    if (kind == XFER_KIND_RDMA || kind == XFER_KIND_AUTO) {
        char rerr[XFER_ERR_LEN];
        xferConn *c = xferRdmaOps.connect(host, port, tok, bindaddr, timeoutMs,
                                          rerr);
        if (c || kind == XFER_KIND_RDMA) {
            if (c == NULL) xferSetError(err, "%s", rerr);
            return c;
        }
        /* auto: no RDMA path to the peer (or no RDMA listener): TCP. A
         * refused token is final. */
        if (strstr(rerr, "token mismatch")) {
            xferSetError(err, "%s", rerr);
            return NULL;
        }
        xferConn *t = xferTcpOps.connect(host, port, tok, bindaddr, timeoutMs,
                                         err);
        if (t) snprintf(t->note, sizeof(t->note), "%s", rerr);
        return t;
    }
    return xferTcpOps.connect(host, port, tok, bindaddr, timeoutMs, err);
}

int xferRegisterSendBlocks(xferConn *c, const void *const addrs[],
                           const uint64_t lens[], uint32_t n, char *err) {
    if (!c->donor) {
        xferSetError(err, "%s: xferRegisterSendBlocks on a recipient connection",
                     xferKindName(c->kind));
        return -1;
    }
    if (xferSetBlocks(c, (void *const *)addrs, lens, n, err)) return -1;
    if (c->ops->registerSend(c, err)) return -1;
    c->registered = 1;
    return 0;
}

/* Donor side checks shared by both transports: every local range inside a
 * registered send block, every remote range inside its descriptor. */
static int xferCheckSegments(xferConn *c, const xferSegment *segs, size_t n,
                             char *err) {
    const char *k = xferKindName(c->kind);
    for (size_t i = 0; i < n; i++) {
        const xferSegment *s = &segs[i];
        if (s->remote == NULL || s->len == 0) {
            xferSetError(err, "%s: segment %zu has %s", k, i,
                         s->remote ? "zero length" : "no remote block");
            return -1;
        }
        if (xferFindSendBlock(c, s->local, s->len) < 0) {
            xferSetError(err, "%s: segment %zu (%p, %" PRIu64 " bytes) is not "
                         "inside a registered send block", k, i, s->local,
                         s->len);
            return -1;
        }
        if (s->remoteOffset > s->remote->len ||
            s->len > s->remote->len - s->remoteOffset) {
            xferSetError(err, "%s: segment %zu (%" PRIu64 " bytes at offset %"
                         PRIu64 ") does not fit remote block %" PRIu32 " of %"
                         PRIu64 " bytes", k, i, s->len, s->remoteOffset,
                         s->remote->id, s->remote->len);
            return -1;
        }
    }
    return 0;
}

int xferWriteBlocks(xferConn *c, const xferSegment *segs, size_t n, char *err) {
    if (!c->donor || !c->registered) {
        xferSetError(err, "%s: xferWriteBlocks needs a donor connection with "
                     "registered send blocks", xferKindName(c->kind));
        return -1;
    }
    if (c->finished) {
        xferSetError(err, "%s: xferWriteBlocks after xferFinish",
                     xferKindName(c->kind));
        return -1;
    }
    if (xferCheckSegments(c, segs, n, err)) return -1;
    return c->ops->write(c, segs, n, err);
}

int xferFinish(xferConn *c, char *err) {
    if (!c->donor) {
        xferSetError(err, "%s: xferFinish on a recipient connection",
                     xferKindName(c->kind));
        return -1;
    }
    int rc = c->ops->finish(c, err);
    if (rc == 0) c->finished = 1;
    return rc;
}

void xferSetOptions(xferConn *c, const xferOptions *o) {
    c->opts = *o;
}

xferKind xferConnKind(const xferConn *c) {
    return c->kind;
}

const char *xferConnPeer(const xferConn *c) {
    return c->peer;
}

const char *xferConnNote(const xferConn *c) {
    return c->note;
}

void xferGetStats(const xferConn *c, xferStats *out) {
    *out = c->stats;
}

void xferClose(xferConn *c) {
    if (c == NULL) return;
    c->ops->closeConn(c);
    xferFreeConnCommon(c);
}
