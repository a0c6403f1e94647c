/* xferimpl.h -- block transport of slot migration: what its
 * implementations share, and nobody else.
 *
 * The public interface is xfer.h. Behind it, xfer.c is the
 * facade (the public functions, the choice of a transport with "auto"
 * falling back from RDMA to TCP, and the helpers both transports use), and
 * each transport is one table of operations: xferTcpOps (xfertcp.c) and
 * xferRdmaOps (xferrdma.c). A listener and a connection carry the table of
 * their transport, and the facade calls through it: it never names a
 * function of either transport, and a transport never sees another's
 * state.
 *
 * Included by xfer.c, xfertcp.c and xferrdma.c only (and by the fuzz
 * harness of the TCP recipient, tests/fuzz/, which builds connections on
 * a fake socket and encodes wire records); callers of the transport use
 * xfer.h.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __XFERIMPL_H
#define __XFERIMPL_H

#include "xfer.h"

#include <stdarg.h>

/* One transport. The facade has already checked the arguments, the
 * connection's end (donor or recipient) and its state, and recorded the
 * blocks in c->blocks (xferRegister*Blocks) before an operation is called;
 * it sets c->registered / c->finished on success, and frees the listener
 * or the connection itself after closeListener / close. Every operation
 * fails like the public function it serves: -1 or NULL with 'err' set,
 * prefixed with the transport ("tcp: ...", "rdma: ..."). */
typedef struct xferOps {
    xferKind kind;               /* XFER_KIND_TCP or XFER_KIND_RDMA */
    /* 1 if the recipient sees every extent as it lands (TCP: it reads
     * them), so it checks the donor's summary against its own counts and
     * digest; 0 if the donor's writes are one-sided (RDMA), so it can only
     * check the summary's bounds and take its counts. */
    int recipientSeesWrites;
    /* Recipient: listen on bindaddr:port, filling l->port and the
     * transport's own fields of l. */
    int (*listen)(xferListener *l, const char *bindaddr, int port, char *err);
    xferConn *(*accept)(xferListener *l, int waitMs, int ioTimeoutMs,
                        char *err);
    /* Release what listen and accept left in l (not l itself). */
    void (*closeListener)(xferListener *l);
    /* Donor: connect and present the token (the wire field). */
    xferConn *(*connect)(const char *host, int port, const uint8_t *token,
                         const char *bindaddr, int timeoutMs, char *err);
    /* c->blocks holds the blocks: make them writable by the peer, fill
     * one descriptor per block. */
    int (*registerRecv)(xferConn *c, xferBlockDesc out[], char *err);
    /* c->blocks holds the blocks the donor will write from. */
    int (*registerSend)(xferConn *c, char *err);
    int (*waitTransfer)(xferConn *c, int timeoutMs, char *err);
    /* The segments were checked against both registrations. */
    int (*write)(xferConn *c, const xferSegment *segs, size_t n, char *err);
    int (*finish)(xferConn *c, char *err);
    /* Release the transport's part of c (not c itself). Not named close:
     * the fuzz build's seam (tests/fuzz/fakeio.h) turns every "close("
     * of the transport's files into its own. */
    void (*closeConn)(xferConn *c);
} xferOps;

extern const xferOps xferTcpOps;         /* xfertcp.c */
/* xferrdma.c; without USE_RDMA its listen and connect refuse with an error
 * saying the build has no RDMA support, and nothing else of it is set
 * (no listener or connection of that kind can exist). */
extern const xferOps xferRdmaOps;

typedef struct xferBlock {
    unsigned char *addr;
    uint64_t len;
    void *mr;                   /* RDMA: struct ibv_mr * */
} xferBlock;

struct xferListener {
    const xferOps *ops;
    xferKind kind;
    int port;
    uint8_t token[XFER_TOKEN_LEN];
    char bindaddr[64];
    char note[XFER_ERR_LEN];     /* why auto fell back to TCP */
    int accepted;               /* has handed out its one connection */
    uint64_t refused;           /* peers dropped (atomic: read by others) */
    char lastRefusal[XFER_ERR_LEN];      /* why the last one was */
    int fd;                     /* TCP */
    struct xferTcpPending *pending;      /* TCP: handshakes, oldest first */
    int npending;
    void *rdma;                 /* RDMA: xferRdmaListener */
};

struct xferConn {
    const xferOps *ops;
    xferKind kind;
    int donor;                  /* 1: donor end, 0: recipient end */
    int timeoutMs;              /* I/O timeout */
    char peer[80];
    char note[XFER_ERR_LEN];     /* why auto fell back to TCP */
    xferStats stats;
    xferOptions opts;
    int finished;               /* xferFinish/xferWaitTransfer succeeded */
    /* Registered blocks: the recipient's, or the donor's send blocks, and
     * their indexes in address order (xferFindSendBlock). */
    xferBlock *blocks;
    uint32_t nblocks;
    struct xferBlockAddr *byAddr;
    int registered;
    /* Summary of what was written: per remote block bytes, segments, and
     * the digest of the extent list. The donor builds it as it writes; a
     * TCP recipient as it receives; an RDMA recipient takes the donor's. */
    uint64_t *blockBytes;
    uint32_t blockBytesLen;
    uint64_t digest;
    /* xferWatchBlocks(): each block's byte count, and whom to tell. */
    uint64_t *watchExpect;
    xferBlockDoneFn *watchDone;
    void *watchCtx;
    int fd;                     /* TCP */
    int noPrefault;             /* TCP: the kernel refused MADV_POPULATE_WRITE */
    void *rdma;                 /* RDMA: xferRdmaConn */
};

/* Common helpers (xfer.c). */
void xferSetError(char *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void xferListenerRefuse(xferListener *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int64_t xferNowMs(void);
uint64_t xferDigestInit(void);
uint64_t xferDigestExtent(uint64_t h, uint32_t block, uint64_t off, uint64_t len);
int xferAccountExtent(xferConn *c, uint32_t block, uint64_t off, uint64_t len,
                      char *err);
int xferTokenEqual(const uint8_t *a, const uint8_t *b);
void xferEncodeRecord(xferWireRecord *w, uint16_t type, uint32_t block,
                      uint32_t status, uint64_t offset, uint64_t length,
                      uint64_t digest);
void xferDecodeRecord(const xferWireRecord *w, xferWireRecord *host);
void xferEncodeHello(xferWireHello *w, uint16_t type, uint32_t status,
                     const uint8_t *token);
int xferDecodeHello(const void *buf, size_t len, uint16_t type,
                    xferWireHello *host);
int xferCheckSummary(xferConn *c, const xferWireRecord *done,
                     const uint64_t *counts, char *why, size_t whylen);
int xferFindSendBlock(const xferConn *c, const void *p, uint64_t len);
/* A connection of the transport 'ops' (its kind, c->ops), nothing else
 * set up; xferClose() frees it. */
xferConn *xferNewConn(const xferOps *ops, int donor, int timeoutMs);
void xferFreeConnCommon(xferConn *c);

#endif /* __XFERIMPL_H */
