/* xfer.h -- block transport of slot migration: public interface.
 *
 * Moves byte ranges of memory blocks from a donor process into memory blocks
 * of a recipient process, over one data connection that is either RDMA (an
 * RC queue pair set up with librdmacm, one-sided RDMA WRITEs) or TCP
 * (writev() from the donor's blocks, read straight into the recipient's
 * blocks). Both implementations sit behind the functions below; a caller
 * never needs to know which one it got, except to report it. (Behind
 * them: xfer.c, the facade; xfertcp.c and xferrdma.c, the two
 * transports; xferimpl.h, what those three share.) Every name of this
 * layer starts with xfer / XFER_ (tests/build/layering.sh checks it).
 *
 * Sequence (the Redis protocol around it, docs/DESIGN.md "The protocol", carries the
 * port, the token and the block descriptors between the two nodes):
 *
 *   recipient                                donor
 *   ---------                                -----
 *   xferGenerateToken(tok)
 *   l = xferListen(kind, bind, port, tok)
 *       -> port, kind           ===(Redis: INITRDMASERVER reply)===>
 *   c = xferAccept(l, wait, timeout) <----   c = xferConnect(kind, host, port,
 *       (the peer must present tok first,                 tok, bind, timeout)
 *        else it is dropped, the listener stays usable)
 *   xferRegisterRecvBlocks(c, addr, len, n, desc)
 *       -> desc[]               ===(Redis: RDMAREGISTER reply)===>
 *                                            xferRegisterSendBlocks(c, ...)
 *                                            xferWriteBlocks(c, segs, n)...
 *   xferWaitTransfer(c, timeout)      <----   xferFinish(c)
 *       checks the donor's summary,  ---->       returns the recipient's
 *       answers with a verdict                   verdict
 *   xferClose(c), xferCloseListener(l)        xferClose(c)
 *
 * A listener hands out exactly one connection: once xferAccept() returned
 * one, further calls fail (close the listener right away: donors that
 * connect later are then refused).
 *
 * Strangers: anything may connect to a listener's port (a port scanner, a
 * health check, a client that got the port wrong, a loop connecting and
 * closing). Each peer costs only itself: a wrong token gets a WELCOME
 * saying XFER_STATUS_BAD_TOKEN and is dropped; a peer that sends anything
 * but a HELLO, closes, or has not sent its whole HELLO (TCP) or completed
 * its connection (RDMA) within the handshake bound is dropped; the
 * listener goes on waiting for the donor either way. A TCP listener runs
 * the handshakes of up to XFER_PENDING_MAX peers at once (when more are
 * pending it drops the oldest), so neither silent peers nor a flood of
 * connections keep the donor out; an RDMA listener handles one connection
 * request at a time, each bounded by the handshake bound. Peers still in
 * their handshake when the donor is accepted are dropped. Every dropped
 * peer counts in xferListenerRefused(); xferAccept() fails only when its
 * wait ends with no donor ("timeout ... waiting for the donor to
 * connect ...", with the refusals so far) or on an error of the listener
 * itself (its socket, poll, memory).
 *
 * Blocking and threads: every call blocks, with a timeout, and is meant for
 * a background thread (the donor's migration thread, the recipient's
 * transfer thread), never the Redis main thread. One connection is used by
 * one thread at a time. The library depends on libc (and libibverbs +
 * librdmacm when built with USE_RDMA) only, not on server.h, and allocates
 * with plain malloc/free: its own memory is a few KB per connection.
 *
 * Timeouts: xferConnect() takes a timeout for the connection setup that
 * also becomes the connection's I/O timeout: xferWriteBlocks() and
 * xferFinish() fail when the peer makes no progress for that long.
 * xferAccept() takes two: how long to wait for a donor (short, so that its
 * caller can look for a cancel between calls; the error then says
 * "timeout ... waiting for the donor to connect"), and the I/O timeout of
 * the connection it returns. The handshake has a bound of its own,
 * XFER_HANDSHAKE_MS (or the I/O timeout if shorter), counted from the
 * peer's connection and not from the start of the wait. Over TCP a
 * handshake in progress carries over from one xferAccept() call to the
 * next, so a donor that connects at the end of a short wait completes it
 * in the next call; over RDMA a connection request that arrives during
 * the wait is completed (or refused) before xferAccept() returns, which
 * may then be up to the handshake bound late.
 * xferWaitTransfer() takes an overall deadline for the whole transfer.
 *
 * Errors: functions return NULL or -1 and write into 'err' (XFER_ERR_LEN
 * bytes, may be NULL) one line saying what failed and where, prefixed with
 * the transport ("tcp: ...", "rdma: ..."). After any error a connection is
 * only good for xferClose(), which frees everything whatever the outcome: fds,
 * queue pairs, and every memory registration.
 *
 * Segments and block descriptors: the recipient registers n blocks and gets
 * one xferBlockDesc per block (id = its index; for RDMA also the remote
 * address and rkey). The donor writes xferSegment records: a local range that
 * lies inside one of its registered send blocks, copied to an offset of one
 * remote block. Segments must fit their remote block; the donor checks this
 * against the descriptors and, for TCP, the recipient checks it again
 * against its own registration (a lying peer gets an error, never a write
 * outside the registered blocks). Segments should not overlap.
 *
 * Completion check: xferFinish() sends a summary -- total bytes, number of
 * segments, bytes per remote block and a digest of the (block, offset,
 * length) list -- and waits for the recipient's verdict. With TCP the
 * recipient recomputes all of it from what it received; with RDMA (it saw
 * nothing of the one-sided writes) it checks the summary against its
 * registration. xferRecvBlockBytes() then tells the caller how many bytes
 * went into each block, which the migration layer checks against its
 * manifest.
 *
 * Wire format: every header is fixed size, big endian, and starts with
 * XFER_WIRE_MAGIC and XFER_WIRE_VERSION (the layouts are below, used by the
 * tests to play a lying peer).
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __XFER_H
#define __XFER_H

#include <stddef.h>
#include <stdint.h>

#define XFER_ERR_LEN 256
#define XFER_TOKEN_LEN 32        /* token: up to 32 bytes, 32 hex chars made */
/* How long a peer of a listener has, from its connection, to present its
 * token: a donor sends its HELLO as soon as it is connected, so a second
 * is plenty, and a stranger that says nothing is dropped after that. */
#define XFER_HANDSHAKE_MS 1000
/* RDMA: from rdma_accept() to ESTABLISHED, which sets up queue pairs (slow
 * on emulated devices such as SoftRoCE in a VM): a longer bound, and only
 * peers that passed the token check wait that long. */
#define XFER_RDMA_HANDSHAKE_MS 5000
/* TCP: handshakes a listener runs at once; listen() backlog (both). */
#define XFER_PENDING_MAX 16
#define XFER_LISTEN_BACKLOG 128

typedef enum xferKind {
    XFER_KIND_AUTO = 0,          /* RDMA when usable, else TCP */
    XFER_KIND_TCP = 1,
    XFER_KIND_RDMA = 2,
} xferKind;

typedef struct xferListener xferListener;
typedef struct xferConn xferConn;

/* What the recipient hands the donor for one registered block. */
typedef struct xferBlockDesc {
    uint32_t id;                /* index in the recipient's registration */
    uint32_t rkey;              /* RDMA: rkey of the block's MR; TCP: 0 */
    uint64_t addr;              /* RDMA: remote virtual address; TCP: 0 */
    uint64_t len;               /* block length in bytes */
} xferBlockDesc;

/* One copy: 'len' bytes at 'local' (inside a registered send block) go to
 * 'remoteOffset' of the remote block 'remote'. */
typedef struct xferSegment {
    const void *local;
    uint64_t len;
    const xferBlockDesc *remote;
    uint64_t remoteOffset;
} xferSegment;

/* Per connection counters (INFO migration_* fields). */
typedef struct xferStats {
    uint64_t wr_posted;         /* RDMA WRITE work requests posted */
    uint64_t chains_posted;     /* ibv_post_send() calls of WRITE chains */
    uint64_t rdma_bytes_written;/* bytes written with RDMA WRITEs */
    uint64_t tcp_bytes_sent;    /* payload + headers sent over TCP */
    uint64_t tcp_bytes_received;/* payload + headers received over TCP */
    uint64_t segments;          /* segments written (donor) / received */
    uint64_t payload_bytes;     /* segment bytes written / received */
} xferStats;

/* Knobs, mostly for tests; zero = default. */
typedef struct xferOptions {
    uint32_t maxChain;          /* RDMA: at most this many WRs per chain */
    uint64_t maxWrBytes;        /* RDMA: split WRs above this many bytes */
} xferOptions;

/* --------------------------- Common helpers ----------------------------- */
const char *xferKindName(xferKind kind);
int xferParseKind(const char *s, xferKind *kind);
/* Fill tok with XFER_TOKEN_LEN random hex characters and a terminator. */
int xferGenerateToken(char tok[XFER_TOKEN_LEN + 1], char *err);
/* 1 if this build has the RDMA transport compiled in. */
int xferRdmaCompiled(void);

/* ------------------------------ Recipient ------------------------------- */
xferListener *xferListen(xferKind kind, const char *bindaddr, int port,
                         const char *token, char *err);
int xferListenerPort(const xferListener *l);
xferKind xferListenerKind(const xferListener *l);   /* never AUTO */
/* Why "auto" did not pick RDMA ("" if it did, or was not asked to). */
const char *xferListenerNote(const xferListener *l);
xferConn *xferAccept(xferListener *l, int waitMs, int ioTimeoutMs, char *err);
/* Peers this listener dropped so far (see "Strangers" above). Safe to call
 * from another thread while the listener is open. */
uint64_t xferListenerRefused(const xferListener *l);
/* Why the last of them was dropped, one line ("" if none); from the thread
 * that calls xferAccept(), or once it returned. */
const char *xferListenerLastRefusal(const xferListener *l);
void xferCloseListener(xferListener *l);

int xferRegisterRecvBlocks(xferConn *c, void *const addrs[], const uint64_t lens[],
                           uint32_t n, xferBlockDesc out[], char *err);
/* Optional, after xferRegisterRecvBlocks() and before xferWaitTransfer():
 * expect[i] is the exact byte count block i is to receive. A TCP recipient
 * then refuses (as a lying peer) any record that would take a block past
 * its count, and calls done(ctx, i, err) from inside xferWaitTransfer() as
 * soon as block i holds all of its bytes. The block is never written
 * again after that, so the caller may use it while the rest arrives.
 * done returns 0, or -1 with err set to end the transfer with that error.
 * An RDMA recipient sees none of the one-sided writes and never calls
 * done: every block is complete once xferWaitTransfer() returned. */
typedef int xferBlockDoneFn(void *ctx, uint32_t block, char *err);
int xferWatchBlocks(xferConn *c, const uint64_t expect[], xferBlockDoneFn *done,
                    void *ctx, char *err);
int xferWaitTransfer(xferConn *c, int timeoutMs, char *err);
/* After xferWaitTransfer() succeeded: bytes written into block i. */
uint64_t xferRecvBlockBytes(const xferConn *c, uint32_t i);

/* -------------------------------- Donor --------------------------------- */
xferConn *xferConnect(xferKind kind, const char *host, int port, const char *token,
                      const char *bindaddr, int timeoutMs, char *err);
int xferRegisterSendBlocks(xferConn *c, const void *const addrs[],
                           const uint64_t lens[], uint32_t n, char *err);
int xferWriteBlocks(xferConn *c, const xferSegment *segs, size_t n, char *err);
int xferFinish(xferConn *c, char *err);

/* ------------------------------ Both ends ------------------------------- */
void xferSetOptions(xferConn *c, const xferOptions *o);
xferKind xferConnKind(const xferConn *c);            /* never AUTO */
const char *xferConnPeer(const xferConn *c);        /* "host:port" */
/* Donor with "auto": why RDMA was not used ("" if it was). */
const char *xferConnNote(const xferConn *c);
void xferGetStats(const xferConn *c, xferStats *out);
void xferClose(xferConn *c);
/* Tests only: the TCP socket of a connection (-1 for RDMA), to play a
 * peer that breaks the protocol. */
int xferTcpFd(const xferConn *c);

/* ----------------------------- Wire format ------------------------------ */

#define XFER_WIRE_MAGIC 0x524d4947U      /* "RMIG" */
#define XFER_WIRE_VERSION 1

/* Message types (xferWireHello.type, xferWireRecord.type). */
#define XFER_MSG_HELLO 1     /* donor -> recipient: the token */
#define XFER_MSG_WELCOME 2   /* recipient -> donor: token accepted or not */
#define XFER_MSG_DATA 3      /* donor -> recipient, TCP: header + payload */
#define XFER_MSG_DONE 4      /* donor -> recipient: the summary */
#define XFER_MSG_VERDICT 5   /* recipient -> donor: summary checked */

/* Status codes (WELCOME, VERDICT). */
#define XFER_STATUS_OK 0
#define XFER_STATUS_BAD_TOKEN 1
#define XFER_STATUS_BAD_SUMMARY 2

/* HELLO and WELCOME (TCP: first bytes each way; RDMA: connect private data
 * and reject private data). 48 bytes, within the 56 bytes of private data
 * an RC connect request can carry. */
typedef struct xferWireHello {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t status;            /* WELCOME: XFER_STATUS_* */
    uint32_t reserved;
    uint8_t token[XFER_TOKEN_LEN];       /* HELLO: zero padded */
} xferWireHello;

/* TCP DATA record header, followed by 'length' payload bytes; also the
 * head of DONE (then followed by 'block' u64 per-block byte counts) and of
 * VERDICT (followed by 'length' bytes of error text). */
typedef struct xferWireRecord {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t block;     /* DATA: block id; DONE: number of counts that follow */
    uint32_t status;    /* VERDICT: XFER_STATUS_*; else 0 */
    uint64_t offset;    /* DATA: offset in the block; DONE: segments */
    uint64_t length;    /* DATA: payload bytes; DONE: total bytes;
                         * VERDICT: error text bytes */
    uint64_t digest;    /* DONE: digest of the (block, offset, length) list */
} xferWireRecord;

#endif /* __XFER_H */
