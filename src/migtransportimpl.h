/* migtransportimpl.h -- block transport of slot migration: what its
 * implementations share, and nobody else.
 *
 * The public interface is migtransport.h. Behind it, migtransport.c is the
 * facade (the public functions, the choice of a transport with "auto"
 * falling back from RDMA to TCP, and the helpers both transports use), and
 * each transport is one table of operations: migTcpOps (migtcp.c) and
 * migRdmaOps (migrdma.c). A listener and a connection carry the table of
 * their transport, and the facade calls through it: it never names a
 * function of either transport, and a transport never sees another's
 * state.
 *
 * Included by migtransport.c, migtcp.c and migrdma.c only (and by the fuzz
 * harness of the TCP recipient, tests/fuzz/, which builds connections on
 * a fake socket and encodes wire records); callers of the transport use
 * migtransport.h.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __MIGTRANSPORTIMPL_H
#define __MIGTRANSPORTIMPL_H

#include "migtransport.h"

#include <stdarg.h>

/* One transport. The facade has already checked the arguments, the
 * connection's end (donor or recipient) and its state, and recorded the
 * blocks in c->blocks (migRegister*Blocks) before an operation is called;
 * it sets c->registered / c->finished on success, and frees the listener
 * or the connection itself after closeListener / close. Every operation
 * fails like the public function it serves: -1 or NULL with 'err' set,
 * prefixed with the transport ("tcp: ...", "rdma: ..."). */
typedef struct migTransportOps {
    migKind kind;               /* MIG_KIND_TCP or MIG_KIND_RDMA */
    /* Recipient: listen on bindaddr:port, filling l->port and the
     * transport's own fields of l. */
    int (*listen)(migListener *l, const char *bindaddr, int port, char *err);
    migConn *(*accept)(migListener *l, int waitMs, int ioTimeoutMs,
                       char *err);
    /* Release what listen and accept left in l (not l itself). */
    void (*closeListener)(migListener *l);
    /* Donor: connect and present the token (the wire field). */
    migConn *(*connect)(const char *host, int port, const uint8_t *token,
                        const char *bindaddr, int timeoutMs, char *err);
    /* c->blocks holds the blocks: make them writable by the peer, fill
     * one descriptor per block. */
    int (*registerRecv)(migConn *c, migBlockDesc out[], char *err);
    /* c->blocks holds the blocks the donor will write from. */
    int (*registerSend)(migConn *c, char *err);
    int (*waitTransfer)(migConn *c, int timeoutMs, char *err);
    /* The segments were checked against both registrations. */
    int (*write)(migConn *c, const migSegment *segs, size_t n, char *err);
    int (*finish)(migConn *c, char *err);
    /* Release the transport's part of c (not c itself). Not named close:
     * the fuzz build's seam (tests/fuzz/fakeio.h) turns every "close("
     * of the transport's files into its own. */
    void (*closeConn)(migConn *c);
} migTransportOps;

extern const migTransportOps migTcpOps;         /* migtcp.c */
/* migrdma.c; without USE_RDMA its listen and connect refuse with an error
 * saying the build has no RDMA support, and nothing else of it is set
 * (no listener or connection of that kind can exist). */
extern const migTransportOps migRdmaOps;

typedef struct migBlock {
    unsigned char *addr;
    uint64_t len;
    void *mr;                   /* RDMA: struct ibv_mr * */
} migBlock;

struct migListener {
    const migTransportOps *ops;
    migKind kind;
    int port;
    uint8_t token[MIG_TOKEN_LEN];
    char bindaddr[64];
    char note[MIG_ERR_LEN];     /* why auto fell back to TCP */
    int accepted;               /* has handed out its one connection */
    uint64_t refused;           /* peers dropped (atomic: read by others) */
    char lastRefusal[MIG_ERR_LEN];      /* why the last one was */
    int fd;                     /* TCP */
    struct migTcpPending *pending;      /* TCP: handshakes, oldest first */
    int npending;
    void *rdma;                 /* RDMA: migRdmaListener */
};

struct migConn {
    const migTransportOps *ops;
    migKind kind;
    int donor;                  /* 1: donor end, 0: recipient end */
    int timeoutMs;              /* I/O timeout */
    char peer[80];
    char note[MIG_ERR_LEN];     /* why auto fell back to TCP */
    migStats stats;
    migOptions opts;
    int finished;               /* migFinish/migWaitTransfer succeeded */
    /* Registered blocks: the recipient's, or the donor's send blocks, and
     * their indexes in address order (migFindSendBlock). */
    migBlock *blocks;
    uint32_t nblocks;
    struct migBlockAddr *byAddr;
    int registered;
    /* Summary of what was written: per remote block bytes, segments, and
     * the digest of the extent list. The donor builds it as it writes; a
     * TCP recipient as it receives; an RDMA recipient takes the donor's. */
    uint64_t *blockBytes;
    uint32_t blockBytesLen;
    uint64_t digest;
    /* migWatchBlocks(): each block's byte count, and whom to tell. */
    uint64_t *watchExpect;
    migBlockDoneFn *watchDone;
    void *watchCtx;
    int fd;                     /* TCP */
    void *rdma;                 /* RDMA: migRdmaConn */
};

/* Common helpers (migtransport.c). */
void migSetError(char *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void migListenerRefuse(migListener *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int64_t migNowMs(void);
uint64_t migDigestInit(void);
uint64_t migDigestExtent(uint64_t h, uint32_t block, uint64_t off, uint64_t len);
int migAccountExtent(migConn *c, uint32_t block, uint64_t off, uint64_t len,
                     char *err);
int migTokenEqual(const uint8_t *a, const uint8_t *b);
void migEncodeRecord(migWireRecord *w, uint16_t type, uint32_t block,
                     uint32_t status, uint64_t offset, uint64_t length,
                     uint64_t digest);
void migDecodeRecord(const migWireRecord *w, migWireRecord *host);
void migEncodeHello(migWireHello *w, uint16_t type, uint32_t status,
                    const uint8_t *token);
int migDecodeHello(const void *buf, size_t len, uint16_t type,
                   migWireHello *host);
int migCheckSummary(migConn *c, const migWireRecord *done,
                    const uint64_t *counts, char *why, size_t whylen);
int migFindSendBlock(const migConn *c, const void *p, uint64_t len);
/* A connection of the transport 'ops' (its kind, c->ops), nothing else
 * set up; migClose() frees it. */
migConn *migNewConn(const migTransportOps *ops, int donor, int timeoutMs);
void migFreeConnCommon(migConn *c);

#endif /* __MIGTRANSPORTIMPL_H */
