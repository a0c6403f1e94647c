/* rdmasmoke.c -- RDMA WRITE smoke test, the seed of the slot migration
 * transport.
 *
 * Usage:
 *
 *   rdma-smoke server --bind ADDR [--port P] [--bytes N] [--timeout S]
 *   rdma-smoke client --bind ADDR --connect ADDR [--port P] [--bytes N]
 *                     [--wrs K] [--max-chain M] [--seed X] [--timeout S]
 *                     [--corrupt-at OFF]
 *
 * The two processes are bound to two different IPv4 addresses of the same
 * RDMA device (with SoftRoCE: 10.99.0.1 and 10.99.0.2 on rxe0, see
 * utils/rxe-vm) and talk over one RC queue pair set up with librdmacm.
 * The client pushes N bytes of a deterministic pseudo random pattern into
 * a buffer of the server with one-sided RDMA WRITEs, then tells the server
 * it is done; the server checks every single byte and reports back.
 *
 * Protocol steps:
 *
 *  1. Server: create an rdma_cm event channel and id, bind to ADDR:PORT,
 *     listen, wait for a CONNECT_REQUEST.
 *  2. Client: create its id, resolve the address (from its --bind address
 *     to the server) and the route; this picks the RDMA device.
 *  3. Both, on the connection's id: allocate a PD, allocate and register
 *     the data buffer (server: zeroed, LOCAL_WRITE|REMOTE_WRITE; client:
 *     filled with the pattern), register two small message slots, create a
 *     completion channel, a CQ and an RC QP, then read back the QP caps
 *     actually granted. Each side posts the single receive it will need
 *     (server: DONE, client: VERDICT) before the connection exists, so no
 *     SEND can ever hit an empty receive queue.
 *  4. Server: accept, handing address, length and rkey of its buffer to
 *     the client in the accept private data (smokeBufDesc: fixed layout,
 *     big endian, magic + version).
 *  5. Client: on ESTABLISHED decode the descriptor, split its buffer into K
 *     pieces and build K IBV_WR_RDMA_WRITE work requests. They are posted
 *     in chains of at most L WRs, L being the smallest of the QP's granted
 *     max_send_wr, --max-chain and what the CQ can absorb; inside a chain
 *     the WRs are linked through `next`, only the last one is
 *     IBV_SEND_SIGNALED, and the whole chain goes out with one
 *     ibv_post_send(). Before posting the next chain the client waits for
 *     the completion of the previous one, which also frees the send queue
 *     slots of its unsignaled WRs.
 *  6. Client: SEND a DONE message (smokeMsg: total bytes, WR count, FNV-1a
 *     checksum, pattern seed).
 *  7. Server: on receiving DONE regenerate the pattern from the seed and
 *     compare every byte of its buffer (bytes past the written length must
 *     still be zero), then SEND back a VERDICT message.
 *  8. Client: receive the VERDICT, disconnect; both sides wait for the
 *     DISCONNECTED event and tear everything down in reverse order. A side
 *     waiting on its CQ also watches the rdma_cm channel, so a peer that
 *     hangs up early ends the wait at once with a clear error.
 *
 * Completions are waited for through the completion channel (arm with
 * ibv_req_notify_cq, sleep in poll() on the channel fd, ibv_get_cq_event,
 * ack one event per event received), never by busy spinning. Every wait,
 * rdma_cm or CQ, has a timeout (--timeout, default 20 s).
 *
 * --corrupt-at OFF makes the client flip one source byte after computing
 * its checksum: the server must then name that offset and both sides exit
 * with 3, which shows the verification is not vacuous.
 *
 * Exit status: 0 only when the server verified every byte (and, on the
 * client, when the server's verdict said so); 1 on any runtime error
 * (timeouts, completion errors, rejected connection...); 2 when there is
 * no RDMA device at all; 3 on a data mismatch; 64 on bad usage.
 *
 * How this fits the project: cluster slot migration over RDMA moves keys
 * from the source node into memory the target node registered and
 * advertised, in large batches of one-sided writes followed by a small
 * two-sided "batch done" message that the target acknowledges. This file
 * is that transport reduced to its bones: the buffer descriptor in the
 * accept private data is the handshake, chain splitting against the QP's
 * real send queue depth is how batches are pushed, and DONE / VERDICT is
 * the commit / ack of one batch. It has no dependency on Redis so that it
 * can be built and run alone on any RDMA setup (tests/rdma/smoke.sh).
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define SMOKE_MAGIC 0x52534d4bU         /* "RSMK" */
#define SMOKE_VERSION 1
#define SMOKE_DEFAULT_PORT 7471
#define SMOKE_DEFAULT_BYTES (4ULL * 1024 * 1024)
#define SMOKE_MAX_BYTES (1ULL << 32)
#define SMOKE_DEFAULT_WRS 256
#define SMOKE_MIN_WRS 64
#define SMOKE_MAX_WRS (1U << 20)
#define SMOKE_DEFAULT_SEED 0x5eedf00dcafebabeULL
#define SMOKE_DEFAULT_TIMEOUT_MS 20000
#define SMOKE_TEARDOWN_TIMEOUT_MS 5000

/* Message types carried in smokeMsg.type. */
#define SMOKE_MSG_DONE 1
#define SMOKE_MSG_VERDICT 2

/* Verdict codes carried in smokeMsg.status. */
#define SMOKE_VERDICT_OK 0
#define SMOKE_VERDICT_MISMATCH 1
#define SMOKE_VERDICT_BADMSG 2
#define SMOKE_VERDICT_CHECKSUM 3

/* Exit codes. */
#define SMOKE_EXIT_OK 0
#define SMOKE_EXIT_ERR 1
#define SMOKE_EXIT_NODEV 2
#define SMOKE_EXIT_MISMATCH 3
#define SMOKE_EXIT_USAGE 64

/* wr_id values of the two message WRs; data WRs use their index. */
#define SMOKE_WRID_MSG_SEND (UINT64_MAX - 1)
#define SMOKE_WRID_MSG_RECV (UINT64_MAX - 2)

/* Accept private data: where the client may write. All fields big endian.
 * IB CM can deliver more private data than was sent (it pads), so the
 * receiver only looks at the first sizeof(smokeBufDesc) bytes. */
typedef struct smokeBufDesc {
    uint32_t magic;         /* SMOKE_MAGIC */
    uint16_t version;       /* SMOKE_VERSION */
    uint16_t reserved;      /* zero */
    uint64_t addr;          /* remote virtual address of the buffer */
    uint64_t length;        /* buffer length in bytes */
    uint32_t rkey;          /* rkey of the buffer's MR */
    uint32_t reserved2;     /* zero */
} smokeBufDesc;
_Static_assert(sizeof(smokeBufDesc) == 32, "smokeBufDesc wire layout");

/* DONE (client -> server) and VERDICT (server -> client) message, sent
 * with IBV_WR_SEND. All fields big endian. */
typedef struct smokeMsg {
    uint32_t magic;         /* SMOKE_MAGIC */
    uint16_t version;       /* SMOKE_VERSION */
    uint16_t type;          /* SMOKE_MSG_DONE or SMOKE_MSG_VERDICT */
    uint64_t totalBytes;    /* DONE: bytes written; VERDICT: bytes checked */
    uint32_t numWrs;        /* RDMA WRITE WRs used by the client */
    uint32_t status;        /* VERDICT: SMOKE_VERDICT_*; DONE: zero */
    uint64_t checksum;      /* FNV-1a 64 of the written bytes */
    uint64_t seed;          /* pattern seed */
    uint64_t badOffset;     /* VERDICT: first mismatching offset */
} smokeMsg;
_Static_assert(sizeof(smokeMsg) == 48, "smokeMsg wire layout");

/* Host byte order view of a smokeMsg. */
typedef struct smokeMsgInfo {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint64_t totalBytes;
    uint32_t numWrs;
    uint32_t status;
    uint64_t checksum;
    uint64_t seed;
    uint64_t badOffset;
} smokeMsgInfo;

typedef struct smokeConfig {
    int isServer;
    const char *bindAddr;
    const char *connectAddr;
    struct sockaddr_in bindSa;
    struct sockaddr_in connectSa;
    int port;
    uint64_t bytes;
    uint32_t wrs;
    uint32_t maxChain;      /* 0: no forced limit */
    uint64_t seed;
    uint64_t corruptAt;     /* test of the verifier; UINT64_MAX: off */
    int timeoutMs;
} smokeConfig;

/* Everything one side of the connection owns. All pointers start NULL and
 * teardown checks each one, so it can run from any half-built state. */
typedef struct smokeConn {
    struct rdma_event_channel *ec;
    struct rdma_cm_id *listenId;    /* server: the listening id */
    struct rdma_cm_id *id;          /* client id, or server's accepted id */
    struct ibv_device_attr devAttr;
    struct ibv_port_attr portAttr;
    struct ibv_pd *pd;
    unsigned char *data;            /* client: WRITE source; server: target */
    uint64_t dataLen;
    struct ibv_mr *dataMr;
    smokeMsg *msgs;                 /* [0] send slot, [1] receive slot */
    struct ibv_mr *msgMr;
    struct ibv_comp_channel *compChan;
    struct ibv_cq *cq;
    struct ibv_qp_cap cap;          /* caps the QP actually got */
    int established;                /* saw ESTABLISHED: must disconnect */
    int peerGone;                   /* saw DISCONNECTED */
    uint64_t cqEvents;              /* CQ events received (and acked) */
    int timeoutMs;
} smokeConn;

static const char *smokeRole = "main";

/* ============================ Logging ==================================== */

static void smokeLog(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("rdma-smoke[%s]: ", smokeRole);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static void smokeErr(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    va_start(ap, fmt);
    fprintf(stderr, "rdma-smoke[%s]: ERROR: ", smokeRole);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* ========================= Pattern and checksum ========================== */

/* xorshift64* generator. The seed is first scrambled with splitmix64 so that
 * nearby seeds give unrelated streams and a zero seed still works. */
typedef struct patternGen {
    uint64_t s;
} patternGen;

static void patternInit(patternGen *g, uint64_t seed) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    g->s = z ? z : 0x2545f4914f6cdd1dULL;
}

static uint64_t patternNext(patternGen *g) {
    uint64_t x = g->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    g->s = x;
    return x * 0x2545f4914f6cdd1dULL;
}

/* Fill buf with the pattern of 'seed'. Byte i of the stream is byte i%8 of
 * the (i/8)-th generator output, least significant first, so the stream is
 * the same on any host byte order. */
static void patternFill(unsigned char *buf, uint64_t len, uint64_t seed) {
    patternGen g;
    patternInit(&g, seed);
    for (uint64_t off = 0; off < len; off += 8) {
        uint64_t w = patternNext(&g);
        for (unsigned j = 0; j < 8 && off + j < len; j++)
            buf[off + j] = (unsigned char)(w >> (8 * j));
    }
}

static uint64_t checksumFnv1a(const unsigned char *p, uint64_t len) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (uint64_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

typedef struct verifyResult {
    uint64_t badBytes;      /* how many bytes differ */
    uint64_t firstBad;      /* offset of the first one */
    unsigned expected, got; /* values at firstBad */
} verifyResult;

/* Check every byte of buf[0..len): the first 'written' bytes must be the
 * pattern of 'seed', the rest must still be zero. */
static void verifyBuffer(const unsigned char *buf, uint64_t len,
                         uint64_t written, uint64_t seed, verifyResult *r) {
    patternGen g;
    memset(r, 0, sizeof(*r));
    patternInit(&g, seed);
    for (uint64_t off = 0; off < len; off += 8) {
        uint64_t w = patternNext(&g);
        for (unsigned j = 0; j < 8 && off + j < len; j++) {
            uint64_t i = off + j;
            unsigned char want = i < written ? (unsigned char)(w >> (8 * j)) : 0;
            if (buf[i] != want) {
                if (r->badBytes == 0) {
                    r->firstBad = i;
                    r->expected = want;
                    r->got = buf[i];
                }
                r->badBytes++;
            }
        }
    }
}

/* ============================ Wire encoding ============================== */

static void encodeMsg(smokeMsg *w, const smokeMsgInfo *m) {
    w->magic = htobe32(SMOKE_MAGIC);
    w->version = htobe16(SMOKE_VERSION);
    w->type = htobe16(m->type);
    w->totalBytes = htobe64(m->totalBytes);
    w->numWrs = htobe32(m->numWrs);
    w->status = htobe32(m->status);
    w->checksum = htobe64(m->checksum);
    w->seed = htobe64(m->seed);
    w->badOffset = htobe64(m->badOffset);
}

/* Decode a message and check magic, version and type. Returns 0 if it is a
 * well formed message of type 'wantType', -1 (after logging why) if not. */
static int decodeMsg(const smokeMsg *w, uint16_t wantType, smokeMsgInfo *m) {
    m->magic = be32toh(w->magic);
    m->version = be16toh(w->version);
    m->type = be16toh(w->type);
    m->totalBytes = be64toh(w->totalBytes);
    m->numWrs = be32toh(w->numWrs);
    m->status = be32toh(w->status);
    m->checksum = be64toh(w->checksum);
    m->seed = be64toh(w->seed);
    m->badOffset = be64toh(w->badOffset);
    if (m->magic != SMOKE_MAGIC || m->version != SMOKE_VERSION ||
        m->type != wantType) {
        smokeErr("bad message: magic 0x%08" PRIx32 " version %u type %u "
                 "(want 0x%08x, %u, %u)", m->magic, m->version, m->type,
                 SMOKE_MAGIC, SMOKE_VERSION, wantType);
        return -1;
    }
    return 0;
}

/* ============================== Helpers ================================== */

static int64_t nowMs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int setNonBlocking(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        smokeErr("fcntl(O_NONBLOCK): %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Sleep in poll() until one of the fds is readable or the deadline passes.
 * Returns >0 if something is readable (see revents), 0 on timeout, -1 on
 * error. */
static int pollUntil(struct pollfd *pfds, int nfds, int64_t deadline) {
    for (;;) {
        int64_t left = deadline - nowMs();
        if (left <= 0) return 0;
        int n = poll(pfds, (nfds_t)nfds, (int)left);
        if (n >= 0) return n;
        if (errno != EINTR) {
            smokeErr("poll: %s", strerror(errno));
            return -1;
        }
    }
}

static const char *fmtAddr(const struct sockaddr *sa, char *buf, size_t len) {
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        snprintf(buf, len, "%s:%u", ip, ntohs(in->sin_port));
    } else {
        snprintf(buf, len, "?");
    }
    return buf;
}

/* Fail loudly, before touching rdma_cm, when the machine has no RDMA device
 * at all: otherwise the failure would surface later as an obscure bind or
 * resolve error. Returns the number of devices found. */
static int checkRdmaDevices(void) {
    int num = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (list == NULL || num <= 0) {
        int saved = errno;
        if (list) ibv_free_device_list(list);
        fflush(stdout);
        fprintf(stderr, "rdma-smoke: no RDMA device found\n");
        fprintf(stderr, "rdma-smoke: (ibv_get_device_list: %s; run it "
                "where an RDMA device exists, e.g. under utils/rxe-vm/rxe-vm)\n",
                saved ? strerror(saved) : "empty list");
        return 0;
    }
    char names[256] = "";
    size_t used = 0;
    for (int i = 0; i < num && used < sizeof(names); i++) {
        int n = snprintf(names + used, sizeof(names) - used, "%s%s",
                         i ? " " : "", ibv_get_device_name(list[i]));
        if (n < 0) break;
        used += (size_t)n;
    }
    smokeLog("%d RDMA device(s) present: %s", num, names);
    ibv_free_device_list(list);
    return num;
}

/* ========================= rdma_cm event waits =========================== */

/* A server serves one connection: any further CONNECT_REQUEST is rejected,
 * its event acked and its new id destroyed. */
static void rejectExtraRequest(struct rdma_cm_event *ev) {
    struct rdma_cm_id *extra = ev->id;
    smokeLog("rejecting an extra connection request");
    rdma_reject(extra, NULL, 0);
    rdma_ack_cm_event(ev);
    rdma_destroy_id(extra);
}

/* Wait up to the connection's timeout for the next rdma_cm event and
 * require it to be 'want'. On success the event is returned in *out if out
 * is not NULL (the caller must ack it), otherwise it is acked here. Any
 * other event is an error, except stray CONNECT_REQUESTs, which a server
 * busy with its one connection rejects and forgets. */
static int waitCmEvent(smokeConn *c, enum rdma_cm_event_type want,
                       int timeoutMs, struct rdma_cm_event **out) {
    int64_t deadline = nowMs() + timeoutMs;
    for (;;) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(c->ec, &ev) == 0) {
            if (ev->event == want) {
                if (want == RDMA_CM_EVENT_DISCONNECTED) c->peerGone = 1;
                if (out) *out = ev;
                else rdma_ack_cm_event(ev);
                return 0;
            }
            if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
                rejectExtraRequest(ev);
                continue;
            }
            if (ev->event == RDMA_CM_EVENT_DISCONNECTED) c->peerGone = 1;
            smokeErr("waiting for %s: got %s (status %d%s%s)%s",
                     rdma_event_str(want), rdma_event_str(ev->event),
                     ev->status, ev->status < 0 ? ": " : "",
                     ev->status < 0 ? strerror(-ev->status) : "",
                     ev->event == RDMA_CM_EVENT_REJECTED ?
                         ": the peer refused the connection (is a server "
                         "listening on that address and port?)" : "");
            rdma_ack_cm_event(ev);
            return -1;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            smokeErr("rdma_get_cm_event: %s", strerror(errno));
            return -1;
        }
        struct pollfd pfd = {.fd = c->ec->fd, .events = POLLIN};
        int r = pollUntil(&pfd, 1, deadline);
        if (r < 0) return -1;
        if (r == 0) {
            smokeErr("timed out after %d ms waiting for %s", timeoutMs,
                     rdma_event_str(want));
            return -1;
        }
    }
}

/* =========================== Verbs resources ============================= */

/* Build PD, data buffer + MR, message slots + MR, completion channel, CQ
 * and QP on the device c->id resolved to, then read back the QP caps.
 * On failure it returns -1 leaving whatever was built in 'c'; the caller
 * undoes it with teardownVerbs(). */
static int setupVerbs(smokeConn *c, uint64_t dataLen, int dataAccess,
                      uint32_t sendWr, uint32_t recvWr) {
    struct ibv_context *ctx = c->id->verbs;
    if (ctx == NULL) {
        smokeErr("the rdma_cm id is not bound to any RDMA device");
        return -1;
    }
    smokeLog("device %s, port %u", ibv_get_device_name(ctx->device),
             c->id->port_num);
    if (ibv_query_device(ctx, &c->devAttr)) {
        smokeErr("ibv_query_device: %s", strerror(errno));
        return -1;
    }
    if (ibv_query_port(ctx, c->id->port_num, &c->portAttr)) {
        smokeErr("ibv_query_port: %s", strerror(errno));
        return -1;
    }
    smokeLog("device limits: max_qp_wr %d, max_sge %d, max_cqe %d, "
             "max_mr_size %" PRIu64 ", port max_msg_sz %" PRIu32
             ", active_mtu %d", c->devAttr.max_qp_wr, c->devAttr.max_sge,
             c->devAttr.max_cqe, (uint64_t)c->devAttr.max_mr_size,
             c->portAttr.max_msg_sz, 128 << c->portAttr.active_mtu);
    if (dataLen > c->devAttr.max_mr_size) {
        smokeErr("%" PRIu64 " bytes exceed the device's max_mr_size %" PRIu64,
                 dataLen, (uint64_t)c->devAttr.max_mr_size);
        return -1;
    }
    if (c->devAttr.max_sge < 1 || c->devAttr.max_qp_wr < 1 ||
        c->devAttr.max_cqe < 2) {
        smokeErr("device limits too small for one SGE per WR");
        return -1;
    }

    c->pd = ibv_alloc_pd(ctx);
    if (c->pd == NULL) {
        smokeErr("ibv_alloc_pd: %s", strerror(errno));
        return -1;
    }

    void *p = NULL;
    long page = sysconf(_SC_PAGESIZE);
    int err = posix_memalign(&p, page > 0 ? (size_t)page : 4096, dataLen);
    if (err) {
        smokeErr("cannot allocate %" PRIu64 " bytes: %s", dataLen,
                 strerror(err));
        return -1;
    }
    c->data = p;
    c->dataLen = dataLen;
    memset(c->data, 0, dataLen);
    c->dataMr = ibv_reg_mr(c->pd, c->data, dataLen, dataAccess);
    if (c->dataMr == NULL) {
        smokeErr("ibv_reg_mr(%" PRIu64 " bytes): %s%s", dataLen,
                 strerror(errno),
                 errno == ENOMEM ? " (check ulimit -l)" : "");
        return -1;
    }

    c->msgs = calloc(2, sizeof(smokeMsg));
    if (c->msgs == NULL) {
        smokeErr("out of memory");
        return -1;
    }
    c->msgMr = ibv_reg_mr(c->pd, c->msgs, 2 * sizeof(smokeMsg),
                          IBV_ACCESS_LOCAL_WRITE);
    if (c->msgMr == NULL) {
        smokeErr("ibv_reg_mr(message slots): %s", strerror(errno));
        return -1;
    }

    c->compChan = ibv_create_comp_channel(ctx);
    if (c->compChan == NULL) {
        smokeErr("ibv_create_comp_channel: %s", strerror(errno));
        return -1;
    }
    if (setNonBlocking(c->compChan->fd)) return -1;

    /* The CQ must hold a completion for every WR that can be outstanding:
     * normally one per chain, but a QP going to error flushes every posted
     * WR, signaled or not. */
    if (sendWr > (uint32_t)c->devAttr.max_qp_wr)
        sendWr = (uint32_t)c->devAttr.max_qp_wr;
    if (recvWr > (uint32_t)c->devAttr.max_qp_wr)
        recvWr = (uint32_t)c->devAttr.max_qp_wr;
    uint64_t cqe = (uint64_t)sendWr + recvWr;
    if (cqe > (uint64_t)c->devAttr.max_cqe) {
        cqe = (uint64_t)c->devAttr.max_cqe;
        if (sendWr > cqe - recvWr) sendWr = (uint32_t)(cqe - recvWr);
    }
    c->cq = ibv_create_cq(ctx, (int)cqe, NULL, c->compChan, 0);
    if (c->cq == NULL) {
        smokeErr("ibv_create_cq(%" PRIu64 "): %s", cqe, strerror(errno));
        return -1;
    }

    struct ibv_qp_init_attr init;
    memset(&init, 0, sizeof(init));
    init.send_cq = c->cq;
    init.recv_cq = c->cq;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;
    init.cap.max_send_wr = sendWr;
    init.cap.max_recv_wr = recvWr;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    if (rdma_create_qp(c->id, c->pd, &init)) {
        smokeErr("rdma_create_qp(send_wr %" PRIu32 ", recv_wr %" PRIu32
                 "): %s", sendWr, recvWr, strerror(errno));
        return -1;
    }

    /* What counts is what the QP got, not what we asked for. */
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr got;
    if (ibv_query_qp(c->id->qp, &attr, IBV_QP_CAP, &got)) {
        smokeErr("ibv_query_qp: %s", strerror(errno));
        return -1;
    }
    c->cap = attr.cap;
    smokeLog("QP %" PRIu32 " caps: max_send_wr %" PRIu32 " (asked %" PRIu32
             "), max_recv_wr %" PRIu32 " (asked %" PRIu32 "), max_send_sge %"
             PRIu32 ", max_recv_sge %" PRIu32 ", max_inline_data %" PRIu32
             "; CQ %d entries", c->id->qp->qp_num, c->cap.max_send_wr, sendWr,
             c->cap.max_recv_wr, recvWr, c->cap.max_send_sge,
             c->cap.max_recv_sge, c->cap.max_inline_data, c->cq->cqe);
    if (c->cap.max_send_wr < 1 || c->cap.max_recv_wr < 1 ||
        c->cap.max_send_sge < 1 || c->cap.max_recv_sge < 1) {
        smokeErr("the QP got no room for one WR with one SGE");
        return -1;
    }
    return 0;
}

/* Undo setupVerbs() in reverse order, skipping whatever was never built. */
static void teardownVerbs(smokeConn *c) {
    if (c->id && c->id->qp) rdma_destroy_qp(c->id);
    if (c->cq) {
        ibv_destroy_cq(c->cq);
        c->cq = NULL;
    }
    if (c->compChan) {
        ibv_destroy_comp_channel(c->compChan);
        c->compChan = NULL;
    }
    if (c->msgMr) {
        ibv_dereg_mr(c->msgMr);
        c->msgMr = NULL;
    }
    free(c->msgs);
    c->msgs = NULL;
    if (c->dataMr) {
        ibv_dereg_mr(c->dataMr);
        c->dataMr = NULL;
    }
    free(c->data);
    c->data = NULL;
    if (c->pd) {
        ibv_dealloc_pd(c->pd);
        c->pd = NULL;
    }
}

/* Called when the rdma_cm channel becomes readable while we wait for a
 * completion: the peer hanging up must end the wait at once instead of
 * letting it run into its timeout (librdmacm, not the kernel, moves a QP
 * to the error state, so no flush completion would wake us). Returns 0 if
 * the wait can go on, 1 if the peer disconnected, -1 on anything else. */
static int cmEventDuringWait(smokeConn *c, const char *what) {
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(c->ec, &ev)) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        smokeErr("rdma_get_cm_event: %s", strerror(errno));
        return -1;
    }
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        rejectExtraRequest(ev);
        return 0;
    }
    enum rdma_cm_event_type type = ev->event;
    rdma_ack_cm_event(ev);
    if (type == RDMA_CM_EVENT_DISCONNECTED) {
        c->peerGone = 1;
        return 1;
    }
    smokeErr("unexpected %s while waiting for %s", rdma_event_str(type), what);
    return -1;
}

/* Wait for the next work completion, sleeping on the completion channel.
 * Poll first; if the CQ is empty, arm it and poll again (a completion that
 * landed between the empty poll and the arming would raise no event), and
 * only then sleep in poll() on the channel fd, together with the rdma_cm
 * fd so that a disconnect is noticed. Every CQ event is acked as soon as
 * it is received. Returns 0 with *wc filled, -1 on error/timeout/peer
 * gone. */
static int waitCompletion(smokeConn *c, struct ibv_wc *wc, const char *what) {
    int64_t deadline = nowMs() + c->timeoutMs;
    for (;;) {
        int n = ibv_poll_cq(c->cq, 1, wc);
        if (n == 0) {
            if (ibv_req_notify_cq(c->cq, 0)) {
                smokeErr("ibv_req_notify_cq: %s", strerror(errno));
                return -1;
            }
            n = ibv_poll_cq(c->cq, 1, wc);
        }
        if (n < 0) {
            smokeErr("ibv_poll_cq failed while waiting for %s", what);
            return -1;
        }
        if (n == 1) return 0;

        struct pollfd pfds[2] = {
            {.fd = c->compChan->fd, .events = POLLIN},
            {.fd = c->ec->fd, .events = POLLIN},
        };
        int r = pollUntil(pfds, 2, deadline);
        if (r < 0) return -1;
        if (r == 0) {
            smokeErr("timed out after %d ms waiting for the completion of %s",
                     c->timeoutMs, what);
            return -1;
        }
        if (pfds[0].revents) {
            struct ibv_cq *evCq;
            void *evCtx;
            if (ibv_get_cq_event(c->compChan, &evCq, &evCtx) == 0) {
                ibv_ack_cq_events(evCq, 1);
                c->cqEvents++;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                smokeErr("ibv_get_cq_event: %s", strerror(errno));
                return -1;
            }
            continue; /* Drain the CQ before looking at rdma_cm events. */
        }
        if (pfds[1].revents) {
            int gone = cmEventDuringWait(c, what);
            if (gone < 0) return -1;
            if (gone) {
                /* What completed before the hang up still counts. */
                if (ibv_poll_cq(c->cq, 1, wc) == 1) return 0;
                smokeErr("the peer disconnected while waiting for the "
                         "completion of %s", what);
                return -1;
            }
        }
    }
}

/* Turn a failed completion into a clear message. A flush error means the
 * QP went to the error state underneath us (peer gone, teardown), which is
 * reported as such rather than as a transfer error. */
static int checkCompletion(const struct ibv_wc *wc, const char *what) {
    if (wc->status == IBV_WC_SUCCESS) return 0;
    if (wc->status == IBV_WC_WR_FLUSH_ERR) {
        smokeErr("%s flushed (IBV_WC_WR_FLUSH_ERR): the QP was torn down, "
                 "peer gone or connection lost", what);
    } else {
        smokeErr("%s completed with error: %s (status %d, vendor_err 0x%x, "
                 "wr_id %" PRIu64 ")", what, ibv_wc_status_str(wc->status),
                 wc->status, wc->vendor_err, (uint64_t)wc->wr_id);
    }
    return -1;
}

/* Post the single receive each side needs, into message slot 1. */
static int postMsgRecv(smokeConn *c) {
    struct ibv_sge sge = {
        .addr = (uintptr_t)&c->msgs[1],
        .length = sizeof(smokeMsg),
        .lkey = c->msgMr->lkey,
    };
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = SMOKE_WRID_MSG_RECV;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    int err = ibv_post_recv(c->id->qp, &wr, &bad);
    if (err) {
        smokeErr("ibv_post_recv: %s", strerror(err));
        return -1;
    }
    return 0;
}

/* SEND message slot 0 (signaled). */
static int postMsgSend(smokeConn *c) {
    struct ibv_sge sge = {
        .addr = (uintptr_t)&c->msgs[0],
        .length = sizeof(smokeMsg),
        .lkey = c->msgMr->lkey,
    };
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = SMOKE_WRID_MSG_SEND;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    int err = ibv_post_send(c->id->qp, &wr, &bad);
    if (err) {
        smokeErr("ibv_post_send(SEND): %s", strerror(err));
        return -1;
    }
    return 0;
}

/* Send one message (DONE or VERDICT) from the send slot and wait for its
 * completion. Returns 0, or -1 with the error logged ('what' names the
 * message in errors). */
static int sendMsg(smokeConn *c, const smokeMsgInfo *m, const char *what) {
    struct ibv_wc wc;

    encodeMsg(&c->msgs[0], m);
    if (postMsgSend(c)) return -1;
    if (waitCompletion(c, &wc, what) || checkCompletion(&wc, what)) return -1;
    if (wc.wr_id != SMOKE_WRID_MSG_SEND) {
        smokeErr("unexpected completion wr_id %" PRIu64, (uint64_t)wc.wr_id);
        return -1;
    }
    return 0;
}

/* Wait for the completion of the message receive and check it carries one
 * whole smokeMsg. */
static int waitMsgRecv(smokeConn *c, const char *what) {
    struct ibv_wc wc;
    if (waitCompletion(c, &wc, what)) return -1;
    if (checkCompletion(&wc, what)) return -1;
    if (wc.wr_id != SMOKE_WRID_MSG_RECV || wc.opcode != IBV_WC_RECV) {
        smokeErr("unexpected completion (wr_id %" PRIu64 ", opcode %d) while "
                 "waiting for %s", (uint64_t)wc.wr_id, wc.opcode, what);
        return -1;
    }
    if (wc.byte_len != sizeof(smokeMsg)) {
        smokeErr("%s: got %" PRIu32 " bytes, want %zu", what, wc.byte_len,
                 sizeof(smokeMsg));
        return -1;
    }
    return 0;
}

/* Disconnect and wait for DISCONNECTED, bounded. If the peer hung up
 * first, rdma_disconnect() only answers it (and moves our QP to error), so
 * there is nothing more to wait for. */
static void disconnectConn(smokeConn *c) {
    if (!c->established || c->id == NULL) return;
    if (c->peerGone) {
        rdma_disconnect(c->id);
        return;
    }
    if (rdma_disconnect(c->id)) {
        smokeErr("rdma_disconnect: %s", strerror(errno));
        return;
    }
    int t = c->timeoutMs < SMOKE_TEARDOWN_TIMEOUT_MS ?
            c->timeoutMs : SMOKE_TEARDOWN_TIMEOUT_MS;
    if (waitCmEvent(c, RDMA_CM_EVENT_DISCONNECTED, t, NULL) == 0)
        smokeLog("disconnected");
}

/* ================================ Server ================================= */

/* Zero 'c', then create its non-blocking rdma_cm event channel and one
 * RC (RDMA_PS_TCP) id on it, stored in '*id' (the server's listening id or
 * the client's id). Returns 0, or -1 with an error logged and nothing left
 * to clean up. */
static int openCmId(smokeConn *c, struct rdma_cm_id **id, int timeoutMs) {
    memset(c, 0, sizeof(*c));
    c->timeoutMs = timeoutMs;
    c->ec = rdma_create_event_channel();
    if (c->ec == NULL) {
        smokeErr("rdma_create_event_channel: %s", strerror(errno));
        return -1;
    }
    if (setNonBlocking(c->ec->fd)) goto destroy_event_channel;
    if (rdma_create_id(c->ec, id, NULL, RDMA_PS_TCP)) {
        smokeErr("rdma_create_id: %s", strerror(errno));
        *id = NULL;
        goto destroy_event_channel;
    }
    return 0;

destroy_event_channel:
    rdma_destroy_event_channel(c->ec);
    c->ec = NULL;
    return -1;
}

static int runServer(const smokeConfig *cfg) {
    smokeConn c;
    struct rdma_cm_event *ev = NULL;
    struct rdma_conn_param param;
    smokeBufDesc desc;
    smokeMsgInfo done, verdict;
    verifyResult vr;
    char abuf[64];
    int rc = SMOKE_EXIT_ERR;
    int acceptCalled = 0;

    /* Step 1: listen. */
    if (openCmId(&c, &c.listenId, cfg->timeoutMs)) return SMOKE_EXIT_ERR;
    if (rdma_bind_addr(c.listenId, (struct sockaddr *)&cfg->bindSa)) {
        smokeErr("rdma_bind_addr(%s): %s", cfg->bindAddr, strerror(errno));
        goto destroy_listen_id;
    }
    if (rdma_listen(c.listenId, 4)) {
        smokeErr("rdma_listen: %s", strerror(errno));
        goto destroy_listen_id;
    }
    smokeLog("listening on %s (device %s), waiting up to %d ms for a client",
             fmtAddr(rdma_get_local_addr(c.listenId), abuf, sizeof(abuf)),
             c.listenId->verbs ?
                 ibv_get_device_name(c.listenId->verbs->device) :
                 "not known until connect",
             cfg->timeoutMs);

    if (waitCmEvent(&c, RDMA_CM_EVENT_CONNECT_REQUEST, cfg->timeoutMs, &ev))
        goto destroy_listen_id;
    c.id = ev->id;
    rdma_ack_cm_event(ev);
    smokeLog("connection request from %s",
             fmtAddr(rdma_get_peer_addr(c.id), abuf, sizeof(abuf)));

    /* Step 3: verbs resources and a zeroed, remotely writable buffer. */
    if (setupVerbs(&c, cfg->bytes,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 1, 1))
        goto disconnect_or_reject;
    if (postMsgRecv(&c)) goto disconnect_or_reject;

    /* Step 4: accept, advertising the buffer. */
    memset(&desc, 0, sizeof(desc));
    desc.magic = htobe32(SMOKE_MAGIC);
    desc.version = htobe16(SMOKE_VERSION);
    desc.addr = htobe64((uint64_t)(uintptr_t)c.data);
    desc.length = htobe64(c.dataLen);
    desc.rkey = htobe32(c.dataMr->rkey);
    memset(&param, 0, sizeof(param));
    param.private_data = &desc;
    param.private_data_len = sizeof(desc);
    param.responder_resources = 0;  /* no RDMA READ / atomics */
    param.initiator_depth = 0;
    param.rnr_retry_count = 7;
    acceptCalled = 1;
    if (rdma_accept(c.id, &param)) {
        smokeErr("rdma_accept: %s", strerror(errno));
        goto disconnect_or_reject;
    }
    if (waitCmEvent(&c, RDMA_CM_EVENT_ESTABLISHED, cfg->timeoutMs, NULL))
        goto disconnect_or_reject;
    c.established = 1;
    smokeLog("connection established; advertised %" PRIu64 " bytes at 0x%"
             PRIx64 " rkey 0x%" PRIx32, c.dataLen,
             (uint64_t)(uintptr_t)c.data, c.dataMr->rkey);

    /* Step 7: wait for DONE, check every byte, answer. */
    if (waitMsgRecv(&c, "the DONE message")) goto disconnect_or_reject;
    memset(&verdict, 0, sizeof(verdict));
    verdict.type = SMOKE_MSG_VERDICT;
    if (decodeMsg(&c.msgs[1], SMOKE_MSG_DONE, &done)) {
        verdict.status = SMOKE_VERDICT_BADMSG;
    } else if (done.totalBytes > c.dataLen || done.totalBytes == 0) {
        smokeErr("DONE claims %" PRIu64 " bytes written, buffer has %" PRIu64,
                 done.totalBytes, c.dataLen);
        verdict.status = SMOKE_VERDICT_BADMSG;
    } else {
        smokeLog("DONE: %" PRIu64 " bytes in %" PRIu32 " WRs, checksum "
                 "0x%016" PRIx64 ", seed 0x%" PRIx64, done.totalBytes,
                 done.numWrs, done.checksum, done.seed);
        verifyBuffer(c.data, c.dataLen, done.totalBytes, done.seed, &vr);
        uint64_t sum = checksumFnv1a(c.data, done.totalBytes);
        verdict.totalBytes = c.dataLen;
        verdict.numWrs = done.numWrs;
        verdict.checksum = sum;
        verdict.seed = done.seed;
        if (vr.badBytes) {
            verdict.status = SMOKE_VERDICT_MISMATCH;
            verdict.badOffset = vr.firstBad;
            smokeErr("verification FAILED: first mismatch at offset %" PRIu64
                     " (expected 0x%02x, got 0x%02x), %" PRIu64 " of %" PRIu64
                     " bytes differ", vr.firstBad, vr.expected, vr.got,
                     vr.badBytes, c.dataLen);
        } else if (sum != done.checksum) {
            verdict.status = SMOKE_VERDICT_CHECKSUM;
            smokeErr("verification FAILED: bytes match the pattern but the "
                     "checksum 0x%016" PRIx64 " differs from the client's",
                     sum);
        } else {
            verdict.status = SMOKE_VERDICT_OK;
            smokeLog("verified %" PRIu64 " bytes: OK (%" PRIu64 " written "
                     "by the peer in %" PRIu32 " WRs, checksum 0x%016" PRIx64
                     "%s)", c.dataLen, done.totalBytes, done.numWrs, sum,
                     done.totalBytes < c.dataLen ? ", rest still zero" : "");
        }
    }
    if (sendMsg(&c, &verdict, "the VERDICT send")) goto disconnect_or_reject;
    smokeLog("sent verdict %s", verdict.status == SMOKE_VERDICT_OK ? "OK" :
                                "FAILED");

    /* Step 8: the client hangs up once it has the verdict. */
    if (!c.peerGone &&
        waitCmEvent(&c, RDMA_CM_EVENT_DISCONNECTED, cfg->timeoutMs, NULL))
        goto disconnect_or_reject;
    smokeLog("client disconnected");
    if (verdict.status == SMOKE_VERDICT_OK) rc = SMOKE_EXIT_OK;
    else if (verdict.status == SMOKE_VERDICT_BADMSG) rc = SMOKE_EXIT_ERR;
    else rc = SMOKE_EXIT_MISMATCH;

disconnect_or_reject:
    if (c.established) disconnectConn(&c);
    else if (c.id && !acceptCalled) rdma_reject(c.id, NULL, 0);
    teardownVerbs(&c);
    if (c.id) rdma_destroy_id(c.id);
destroy_listen_id:
    rdma_destroy_id(c.listenId);
    rdma_destroy_event_channel(c.ec);
    return rc;
}

/* ================================ Client ================================= */

/* Post the K data WRs in chains of at most 'limit', each chain linked
 * through `next`, only its last WR signaled, one ibv_post_send() per chain,
 * and wait for each chain's completion before posting the next one.
 * Returns the number of chains, or -1 on error. */
static int postWriteChains(smokeConn *c, struct ibv_send_wr *wrs,
                           uint32_t count, uint32_t limit) {
    int chains = 0;
    for (uint32_t start = 0; start < count; chains++) {
        uint32_t len = count - start < limit ? count - start : limit;
        uint32_t last = start + len - 1;
        char what[96];
        for (uint32_t i = start; i <= last; i++) {
            wrs[i].next = i < last ? &wrs[i + 1] : NULL;
            wrs[i].send_flags = i < last ? 0 : IBV_SEND_SIGNALED;
        }
        struct ibv_send_wr *bad = NULL;
        int err = ibv_post_send(c->id->qp, &wrs[start], &bad);
        if (err) {
            smokeErr("ibv_post_send(chain %d: WRs %" PRIu32 "..%" PRIu32
                     "): %s; first WR not posted: %" PRId64, chains, start,
                     last, strerror(err), bad ? (int64_t)bad->wr_id : -1);
            return -1;
        }
        snprintf(what, sizeof(what), "RDMA WRITE chain %d (WRs %" PRIu32
                 "..%" PRIu32 ")", chains, start, last);
        struct ibv_wc wc;
        if (waitCompletion(c, &wc, what)) return -1;
        if (checkCompletion(&wc, what)) return -1;
        if (wc.wr_id != last || wc.opcode != IBV_WC_RDMA_WRITE) {
            smokeErr("unexpected completion wr_id %" PRIu64 " opcode %d for %s",
                     (uint64_t)wc.wr_id, wc.opcode, what);
            return -1;
        }
        start += len;
    }
    return chains;
}

static int runClient(const smokeConfig *cfg) {
    smokeConn c;
    struct rdma_cm_event *ev = NULL;
    struct rdma_conn_param param;
    smokeBufDesc desc;
    smokeMsgInfo done, verdict;
    struct ibv_send_wr *wrs = NULL;
    struct ibv_sge *sges = NULL;
    uint64_t remoteAddr, remoteLen, sum, piece, extra, maxPiece;
    uint32_t rkey, limit;
    char abuf[64], sizes[48];
    int rc = SMOKE_EXIT_ERR;
    int chains;

    /* Step 2: resolve address and route, which picks the device. */
    if (openCmId(&c, &c.id, cfg->timeoutMs)) return SMOKE_EXIT_ERR;
    if (rdma_resolve_addr(c.id, (struct sockaddr *)&cfg->bindSa,
                          (struct sockaddr *)&cfg->connectSa,
                          cfg->timeoutMs)) {
        smokeErr("rdma_resolve_addr(%s -> %s): %s", cfg->bindAddr,
                 cfg->connectAddr, strerror(errno));
        goto destroy_id;
    }
    if (waitCmEvent(&c, RDMA_CM_EVENT_ADDR_RESOLVED, cfg->timeoutMs, NULL))
        goto destroy_id;
    if (rdma_resolve_route(c.id, cfg->timeoutMs)) {
        smokeErr("rdma_resolve_route: %s", strerror(errno));
        goto destroy_id;
    }
    if (waitCmEvent(&c, RDMA_CM_EVENT_ROUTE_RESOLVED, cfg->timeoutMs, NULL))
        goto destroy_id;
    smokeLog("route resolved: %s -> %s",
             fmtAddr(rdma_get_local_addr(c.id), abuf, sizeof(abuf)),
             cfg->connectAddr);

    /* Step 3: verbs resources, the pattern, the WR array. */
    if (setupVerbs(&c, cfg->bytes, IBV_ACCESS_LOCAL_WRITE, cfg->wrs, 1))
        goto teardown_verbs;
    patternFill(c.data, c.dataLen, cfg->seed);
    sum = checksumFnv1a(c.data, c.dataLen);
    if (cfg->corruptAt < c.dataLen) {
        /* After the checksum, so that only the byte comparison catches it. */
        c.data[cfg->corruptAt] ^= 0x5a;
        smokeLog("deliberately corrupting the byte at offset %" PRIu64
                 " (--corrupt-at: the server must report it)", cfg->corruptAt);
    }

    /* K pieces: the first N % K are one byte longer than the others. */
    piece = c.dataLen / cfg->wrs;
    extra = c.dataLen % cfg->wrs;
    maxPiece = piece + (extra ? 1 : 0);
    if (maxPiece > c.portAttr.max_msg_sz || maxPiece > UINT32_MAX) {
        smokeErr("%" PRIu64 "-byte WRs exceed the port's max_msg_sz %" PRIu32
                 "; use more WRs", maxPiece, c.portAttr.max_msg_sz);
        goto teardown_verbs;
    }
    if (extra)
        snprintf(sizes, sizeof(sizes), "%" PRIu64 "-%" PRIu64, piece, maxPiece);
    else
        snprintf(sizes, sizeof(sizes), "%" PRIu64, piece);
    limit = c.cap.max_send_wr;
    if (cfg->maxChain && cfg->maxChain < limit) limit = cfg->maxChain;
    if ((uint32_t)c.cq->cqe > c.cap.max_recv_wr &&
        (uint32_t)c.cq->cqe - c.cap.max_recv_wr < limit)
        limit = (uint32_t)c.cq->cqe - c.cap.max_recv_wr;
    smokeLog("chain limit %" PRIu32 " WRs (QP max_send_wr %" PRIu32
             ", --max-chain %" PRIu32 "%s, CQ %d); %" PRIu32 " WRs of %s "
             "bytes", limit, c.cap.max_send_wr, cfg->maxChain,
             cfg->maxChain ? "" : " = none", c.cq->cqe, cfg->wrs, sizes);
    wrs = calloc(cfg->wrs, sizeof(*wrs));
    sges = calloc(cfg->wrs, sizeof(*sges));
    if (wrs == NULL || sges == NULL) {
        smokeErr("out of memory for %" PRIu32 " WRs", cfg->wrs);
        goto teardown_verbs;
    }
    if (postMsgRecv(&c)) goto teardown_verbs;

    memset(&param, 0, sizeof(param));
    param.responder_resources = 0;
    param.initiator_depth = 0;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    if (rdma_connect(c.id, &param)) {
        smokeErr("rdma_connect: %s", strerror(errno));
        goto teardown_verbs;
    }
    if (waitCmEvent(&c, RDMA_CM_EVENT_ESTABLISHED, cfg->timeoutMs, &ev))
        goto disconnect;
    c.established = 1;

    /* Step 5: decode the server's buffer descriptor. */
    if (ev->param.conn.private_data == NULL ||
        ev->param.conn.private_data_len < sizeof(desc)) {
        smokeErr("accept carried %u bytes of private data, want %zu",
                 ev->param.conn.private_data_len, sizeof(desc));
        rdma_ack_cm_event(ev);
        goto disconnect;
    }
    memcpy(&desc, ev->param.conn.private_data, sizeof(desc));
    rdma_ack_cm_event(ev);
    if (be32toh(desc.magic) != SMOKE_MAGIC ||
        be16toh(desc.version) != SMOKE_VERSION) {
        smokeErr("bad buffer descriptor: magic 0x%08" PRIx32 " version %u",
                 be32toh(desc.magic), be16toh(desc.version));
        goto disconnect;
    }
    remoteAddr = be64toh(desc.addr);
    remoteLen = be64toh(desc.length);
    rkey = be32toh(desc.rkey);
    smokeLog("connected to %s; server buffer: %" PRIu64 " bytes at 0x%"
             PRIx64 " rkey 0x%" PRIx32,
             fmtAddr(rdma_get_peer_addr(c.id), abuf, sizeof(abuf)),
             remoteLen, remoteAddr, rkey);
    if (remoteLen < c.dataLen) {
        smokeErr("server buffer (%" PRIu64 " bytes) is smaller than ours (%"
                 PRIu64 ")", remoteLen, c.dataLen);
        goto disconnect;
    }

    for (uint32_t i = 0; i < cfg->wrs; i++) {
        uint64_t off = piece * i + (i < extra ? i : extra);
        uint64_t len = piece + (i < extra ? 1 : 0);
        sges[i].addr = (uintptr_t)(c.data + off);
        sges[i].length = (uint32_t)len;
        sges[i].lkey = c.dataMr->lkey;
        wrs[i].wr_id = i;
        wrs[i].opcode = IBV_WR_RDMA_WRITE;
        wrs[i].sg_list = &sges[i];
        wrs[i].num_sge = 1;
        wrs[i].wr.rdma.remote_addr = remoteAddr + off;
        wrs[i].wr.rdma.rkey = rkey;
    }
    int64_t t0 = nowMs();
    chains = postWriteChains(&c, wrs, cfg->wrs, limit);
    if (chains < 0) goto disconnect;
    int64_t ms = nowMs() - t0;
    smokeLog("posted %" PRIu32 " RDMA WRITE WRs in %d chain(s) (only last of "
             "each chain signaled): %" PRIu64 " bytes in %" PRId64 " ms, %"
             PRIu64 " CQ event(s)", cfg->wrs, chains, c.dataLen, ms,
             c.cqEvents);

    /* Step 6: DONE. */
    memset(&done, 0, sizeof(done));
    done.type = SMOKE_MSG_DONE;
    done.totalBytes = c.dataLen;
    done.numWrs = cfg->wrs;
    done.checksum = sum;
    done.seed = cfg->seed;
    if (sendMsg(&c, &done, "the DONE send")) goto disconnect;
    smokeLog("sent DONE (%" PRIu64 " bytes, %" PRIu32 " WRs, checksum 0x%016"
             PRIx64 ", seed 0x%" PRIx64 ")", done.totalBytes, done.numWrs,
             sum, done.seed);

    /* Step 8: the verdict. */
    if (waitMsgRecv(&c, "the VERDICT message")) goto disconnect;
    if (decodeMsg(&c.msgs[1], SMOKE_MSG_VERDICT, &verdict)) goto disconnect;
    if (verdict.status == SMOKE_VERDICT_OK && verdict.checksum == sum &&
        verdict.totalBytes >= c.dataLen) {
        smokeLog("server verdict: verified %" PRIu64 " bytes: OK",
                 verdict.totalBytes);
        rc = SMOKE_EXIT_OK;
    } else if (verdict.status == SMOKE_VERDICT_MISMATCH) {
        smokeErr("server verdict: MISMATCH, first bad byte at offset %" PRIu64,
                 verdict.badOffset);
        rc = SMOKE_EXIT_MISMATCH;
    } else {
        smokeErr("server verdict: FAILED (status %" PRIu32 ", checked %" PRIu64
                 " bytes, checksum 0x%016" PRIx64 ")", verdict.status,
                 verdict.totalBytes, verdict.checksum);
        rc = verdict.status == SMOKE_VERDICT_CHECKSUM ?
             SMOKE_EXIT_MISMATCH : SMOKE_EXIT_ERR;
    }

disconnect:
    disconnectConn(&c);
teardown_verbs:
    free(wrs);
    free(sges);
    teardownVerbs(&c);
destroy_id:
    rdma_destroy_id(c.id);
    rdma_destroy_event_channel(c.ec);
    return rc;
}

/* ============================ Command line =============================== */

static void usage(void) {
    fprintf(stderr,
"usage: rdma-smoke server --bind ADDR [--port P] [--bytes N] [--timeout S]\n"
"       rdma-smoke client --bind ADDR --connect ADDR [--port P] [--bytes N]\n"
"                         [--wrs K] [--max-chain M] [--seed X] [--timeout S]\n"
"                         [--corrupt-at OFF]\n"
"\n"
"  --bind ADDR      local IPv4 address on the RDMA device\n"
"  --connect ADDR   server's IPv4 address (client)\n"
"  --port P         rdma_cm port (default %d)\n"
"  --bytes N        buffer size, k/m/g suffixes allowed (default 4m)\n"
"  --wrs K          RDMA WRITE work requests (default %d, at least %d)\n"
"  --max-chain M    post at most M WRs per ibv_post_send (default: QP cap)\n"
"  --seed X         pattern seed (default 0x%llx)\n"
"  --timeout S      timeout of every wait, seconds (default %d)\n"
"  --corrupt-at OFF flip the source byte at OFF after checksumming it, to\n"
"                   check that the server catches it (exit 3 expected)\n",
            SMOKE_DEFAULT_PORT, SMOKE_DEFAULT_WRS, SMOKE_MIN_WRS,
            (unsigned long long)SMOKE_DEFAULT_SEED,
            SMOKE_DEFAULT_TIMEOUT_MS / 1000);
}

/* Parse an unsigned number (any base strtoull accepts) with an optional
 * k/m/g binary suffix when 'sizes' is set. */
static int parseNumber(const char *s, int sizes, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-' || *s == '\0') return -1;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s) return -1;
    unsigned shift = 0;
    if (sizes && *end) {
        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: return -1;
        }
        end++;
    }
    if (*end) return -1;
    if (shift && v > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int parseIpv4(const char *s, int port, struct sockaddr_in *sa) {
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, s, &sa->sin_addr) == 1 ? 0 : -1;
}

static int parseArgs(int argc, char **argv, smokeConfig *cfg) {
    memset(cfg, 0, sizeof(*cfg));
    cfg->port = SMOKE_DEFAULT_PORT;
    cfg->bytes = SMOKE_DEFAULT_BYTES;
    cfg->wrs = SMOKE_DEFAULT_WRS;
    cfg->seed = SMOKE_DEFAULT_SEED;
    cfg->corruptAt = UINT64_MAX;
    cfg->timeoutMs = SMOKE_DEFAULT_TIMEOUT_MS;

    if (argc < 2) {
        usage();
        return -1;
    }
    if (!strcmp(argv[1], "server")) {
        cfg->isServer = 1;
    } else if (!strcmp(argv[1], "client")) {
        cfg->isServer = 0;
    } else {
        if (strcmp(argv[1], "-h") && strcmp(argv[1], "--help"))
            fprintf(stderr, "rdma-smoke: unknown mode '%s'\n", argv[1]);
        usage();
        return -1;
    }
    smokeRole = cfg->isServer ? "server" : "client";

    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        uint64_t v;
        if (i + 1 >= argc) {
            fprintf(stderr, "rdma-smoke: %s needs a value\n", opt);
            usage();
            return -1;
        }
        const char *val = argv[++i];
        if (!strcmp(opt, "--bind")) {
            cfg->bindAddr = val;
        } else if (!strcmp(opt, "--connect") && !cfg->isServer) {
            cfg->connectAddr = val;
        } else if (!strcmp(opt, "--port")) {
            if (parseNumber(val, 0, &v) || v == 0 || v > 65535) goto badval;
            cfg->port = (int)v;
        } else if (!strcmp(opt, "--bytes")) {
            if (parseNumber(val, 1, &v) || v == 0 || v > SMOKE_MAX_BYTES)
                goto badval;
            cfg->bytes = v;
        } else if (!strcmp(opt, "--wrs") && !cfg->isServer) {
            if (parseNumber(val, 0, &v) || v < SMOKE_MIN_WRS ||
                v > SMOKE_MAX_WRS) {
                fprintf(stderr, "rdma-smoke: --wrs must be %d..%u\n",
                        SMOKE_MIN_WRS, SMOKE_MAX_WRS);
                return -1;
            }
            cfg->wrs = (uint32_t)v;
        } else if (!strcmp(opt, "--max-chain") && !cfg->isServer) {
            if (parseNumber(val, 0, &v) || v == 0 || v > UINT32_MAX)
                goto badval;
            cfg->maxChain = (uint32_t)v;
        } else if (!strcmp(opt, "--seed") && !cfg->isServer) {
            if (parseNumber(val, 0, &v)) goto badval;
            cfg->seed = v;
        } else if (!strcmp(opt, "--corrupt-at") && !cfg->isServer) {
            if (parseNumber(val, 1, &v)) goto badval;
            cfg->corruptAt = v;
        } else if (!strcmp(opt, "--timeout")) {
            if (parseNumber(val, 0, &v) || v == 0 || v > 3600) goto badval;
            cfg->timeoutMs = (int)v * 1000;
        } else {
            fprintf(stderr, "rdma-smoke: unknown %s option %s\n",
                    smokeRole, opt);
            usage();
            return -1;
        }
        continue;
badval:
        fprintf(stderr, "rdma-smoke: bad value for %s: '%s'\n", opt, val);
        return -1;
    }

    if (cfg->bindAddr == NULL || (!cfg->isServer && !cfg->connectAddr)) {
        fprintf(stderr, "rdma-smoke: %s needs --bind%s\n", smokeRole,
                cfg->isServer ? "" : " and --connect");
        usage();
        return -1;
    }
    if (parseIpv4(cfg->bindAddr, cfg->isServer ? cfg->port : 0,
                  &cfg->bindSa)) {
        fprintf(stderr, "rdma-smoke: --bind wants an IPv4 address, got '%s'\n",
                cfg->bindAddr);
        return -1;
    }
    if (!cfg->isServer &&
        parseIpv4(cfg->connectAddr, cfg->port, &cfg->connectSa)) {
        fprintf(stderr, "rdma-smoke: --connect wants an IPv4 address, "
                "got '%s'\n", cfg->connectAddr);
        return -1;
    }
    if (!cfg->isServer && cfg->bytes < cfg->wrs) {
        fprintf(stderr, "rdma-smoke: --bytes (%" PRIu64 ") must be at least "
                "--wrs (%" PRIu32 ")\n", cfg->bytes, cfg->wrs);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    smokeConfig cfg;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (parseArgs(argc, argv, &cfg)) return SMOKE_EXIT_USAGE;
    if (checkRdmaDevices() == 0) return SMOKE_EXIT_NODEV;
    int rc = cfg.isServer ? runServer(&cfg) : runClient(&cfg);
    if (rc == SMOKE_EXIT_OK) smokeLog("PASS");
    else smokeErr("FAIL (exit %d)", rc);
    return rc;
}
