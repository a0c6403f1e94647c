/* migtransport-fuzz.c -- libFuzzer target: the recipient end of the TCP
 * block transport (src/xfertcp.c, behind src/xfer.c) fed whatever
 * its peers may send.
 *
 * One input is one listener and the peers that connect to it: a few bytes
 * configure the recipient (how many blocks it registers and their sizes,
 * whether it watches them with xferWatchBlocks and which "block done"
 * callback fails, how the peers' bytes are cut into reads), and the rest
 * is what each peer sends, in the order they connect (up to 20, more than
 * the listener keeps in their handshake: strangers, port scanners, a donor
 * with a wrong token, the donor), written as ops so
 * that a small input can carry a long payload:
 *
 *   byte 0     flags: bit 0 watch the blocks; bit 1 the first peer goes
 *              silent after its last byte instead of closing; bits 2-3
 *              faults (fakeio.h: 0 whole reads, 1 short ones, 2 also
 *              EAGAIN and EINTR); bit 4 every send fails (EPIPE); bit 5
 *              big blocks (block 0 up to 1 MB, read straight into by long
 *              payloads, the others up to 64 KB; without it blocks have at
 *              most 4 KB, which keeps runs fast)
 *   byte 1     seed of the read cutting
 *   byte 2     blocks - 1 (low 3 bits: 1..8 blocks)
 *   byte 3     which call of the done callback fails (0: none)
 *   per block  u16 length - 1 (modulo 4096 unless big; times 16 for a
 *              big block 0), u16 bytes the block is to receive (scaled
 *              the same way, modulo length + 1), little endian
 *   then ops   bit 7 set: the op starts the next peer's bytes (bit 6: that
 *              peer goes silent at its end); bits 0-1:
 *              0: raw bytes (u16 count, the bytes)
 *              1: a run (u16 count, u8 value)
 *              2: a record header (u8 type, u8 block, u24 offset, u24
 *                 length; xferEncodeRecord)
 *              3: a HELLO with the right token (u8 status)
 *
 * The input goes through the real code, from xferAccept() (the handshakes
 * of all the peers, on a listener made by xferListen() whose socket is then
 * swapped for a fake one) to xferRegisterRecvBlocks(), xferWatchBlocks() and
 * xferWaitTransfer() with the peer it accepted, then xferClose(), on fake
 * sockets and a fake clock (fakeio.h says why). Besides the sanitizers,
 * an oracle written from the protocol's description (xfer.h, the
 * top of xfertcp.c), not from the code, predicts what must happen and
 * the run aborts when anything differs:
 *   - whether a donor is accepted: one is if and only if some peer sent a
 *     whole HELLO with the right token (and WELCOME can be sent), and the
 *     one accepted did (with more peers than the listener keeps pending,
 *     the one with the token may be dropped as the oldest, as designed:
 *     then only the latter holds); every other peer that connected is
 *     counted as refused (xferListenerRefused), and none is left pending;
 *   - what each peer is answered: nothing, or WELCOME BAD_TOKEN (or the
 *     start of it) to one that presented another token; for the donor
 *     WELCOME OK, then VERDICT OK, or BAD_SUMMARY
 *     for a lying donor, or nothing when its stream breaks off or is not
 *     ours;
 *   - every byte of every block: exactly the payloads of the donor's
 *     records that were accepted, in order, nothing else (guard zones
 *     around each block catch writes just outside; ASan the rest);
 *   - the done callbacks, block by block, and that a block reported done
 *     is never written again;
 *   - after a success, the per-block byte counts (xferRecvBlockBytes).
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "xferimpl.h"
#include "fakeio.h"
#include "fuzz-util.h"

#include <inttypes.h>
#include <sanitizer/asan_interface.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_TOKEN "5f0e7a3c9b1d2e4f6a8c0b2d4e6f8a1c"
#define FUZZ_MAX_BLOCKS 8
#define FUZZ_GUARD 64
#define FUZZ_MAX_STREAM (1280u << 10)
/* Largest block: block 0 can be 16 times bigger (flags bit 5). */
#define fzBlockCap(i) ((i) == 0 ? 16 * 65536 : 65536)

/* Outcomes the oracle predicts. */
enum {
    FZ_NOCONN,      /* xferAccept accepted no donor */
    FZ_OK,          /* transfer accepted, VERDICT OK */
    FZ_LIE,         /* refused, VERDICT BAD_SUMMARY */
    FZ_SHORT,       /* the stream ends (or goes silent) too early */
    FZ_GARBAGE,     /* not a migration record */
    FZ_CBFAIL,      /* the done callback said stop */
};
static const char *fzOutcomeName[] = {"no connection", "ok", "lie", "short",
                                      "garbage", "callback failed"};

typedef struct fzCase {
    int watch, faults, epipe, cbfail;
    uint64_t seed;
    uint32_t nblocks;
    uint64_t len[FUZZ_MAX_BLOCKS], expect[FUZZ_MAX_BLOCKS];
    unsigned char *stream;      /* every peer's bytes, one after the other */
    size_t streamlen;
    int npeers;
    size_t start[FAKEIO_MAX_PEERS], end[FAKEIO_MAX_PEERS];
    int silent[FAKEIO_MAX_PEERS];
} fzCase;

static void fzEmit(fzCase *fc, const void *p, size_t n) {
    if (n > FUZZ_MAX_STREAM - fc->streamlen) n = FUZZ_MAX_STREAM - fc->streamlen;
    memcpy(fc->stream + fc->streamlen, p, n);
    fc->streamlen += n;
}

/* Input bytes -> the recipient's setup and the peers' streams. */
static void fzParse(const uint8_t *data, size_t size, fzCase *fc) {
    size_t pos = 0;
    uint64_t flags = fuzzTake(data, size, &pos, 1);

    fc->watch = flags & 1;
    fc->silent[0] = (flags >> 1) & 1;
    fc->faults = (flags >> 2) & 3;
    if (fc->faults > FAKEIO_RETRY) fc->faults = FAKEIO_RETRY;
    fc->epipe = (flags >> 4) & 1;
    fc->seed = fuzzTake(data, size, &pos, 1);
    fc->nblocks = 1 + (fuzzTake(data, size, &pos, 1) & 7);
    fc->cbfail = (int)fuzzTake(data, size, &pos, 1);
    for (uint32_t i = 0; i < fc->nblocks; i++) {
        uint64_t scale = i == 0 && (flags & 32) ? 16 : 1, len = fuzzTake(data, size, &pos, 2);
        fc->len[i] = (1 + (flags & 32 ? len : len % 4096)) * scale;
        fc->expect[i] = (fuzzTake(data, size, &pos, 2) * scale) % (fc->len[i] + 1);
    }
    fc->streamlen = 0;
    fc->npeers = 1;
    fc->start[0] = 0;
    while (pos < size && fc->streamlen < FUZZ_MAX_STREAM) {
        uint64_t opbyte = fuzzTake(data, size, &pos, 1), op = opbyte & 3;
        if ((opbyte & 128) && fc->npeers < FAKEIO_MAX_PEERS) {
            fc->end[fc->npeers - 1] = fc->streamlen;
            fc->start[fc->npeers] = fc->streamlen;
            fc->silent[fc->npeers] = (opbyte >> 6) & 1;
            fc->npeers++;
        }
        if (op == 0) {
            size_t n = (size_t)fuzzTake(data, size, &pos, 2), avail = pos < size ? size - pos : 0;
            if (n > avail) n = avail;
            fzEmit(fc, data + pos, n);
            pos += n;
        } else if (op == 1) {
            size_t n = (size_t)fuzzTake(data, size, &pos, 2);
            int v = (int)fuzzTake(data, size, &pos, 1);
            if (n > FUZZ_MAX_STREAM - fc->streamlen) n = FUZZ_MAX_STREAM - fc->streamlen;
            memset(fc->stream + fc->streamlen, v, n);
            fc->streamlen += n;
        } else if (op == 2) {
            xferWireRecord w;
            uint16_t type = (uint16_t)fuzzTake(data, size, &pos, 1);
            uint32_t block = (uint32_t)fuzzTake(data, size, &pos, 1);
            uint64_t off = fuzzTake(data, size, &pos, 3), len = fuzzTake(data, size, &pos, 3);
            xferEncodeRecord(&w, type, block, 0, off, len, 0);
            fzEmit(fc, &w, sizeof(w));
        } else {
            xferWireHello w;
            xferEncodeHello(&w, XFER_MSG_HELLO, (uint32_t)fuzzTake(data, size, &pos, 1),
                            (const uint8_t *)FUZZ_TOKEN);
            fzEmit(fc, &w, sizeof(w));
        }
    }
    fc->end[fc->npeers - 1] = fc->streamlen;
}

/* ------------------------------- Oracle ---------------------------------- */

static uint32_t fzBe32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint16_t fzBe16(const unsigned char *p) {
    return (uint16_t)(p[0] << 8 | p[1]);
}

static uint64_t fzBe64(const unsigned char *p) {
    return (uint64_t)fzBe32(p) << 32 | fzBe32(p + 4);
}

/* The extent digest as the wire format defines it (xfer.h: FNV-1a
 * over big endian block, offset, length), computed here independently. */
static uint64_t fzDigest(uint64_t h, uint32_t block, uint64_t off, uint64_t len) {
    unsigned char b[20];
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(block >> (24 - 8 * i));
    for (int i = 0; i < 8; i++) {
        b[4 + i] = (unsigned char)(off >> (56 - 8 * i));
        b[12 + i] = (unsigned char)(len >> (56 - 8 * i));
    }
    for (int i = 0; i < 20; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

typedef struct fzModel {
    int outcome;
    uint64_t counts[FUZZ_MAX_BLOCKS], segments;
    uint32_t done[FUZZ_MAX_BLOCKS * 2];   /* blocks reported, in order */
    int ndone;
} fzModel;

/* What a peer's first bytes are: 0 not a whole HELLO of ours (too short,
 * or another magic, version or type), 1 one with a wrong token, 2 one
 * with the right token. */
static int fzHelloKind(const unsigned char *s, size_t n) {
    if (n < 48 || fzBe32(s) != XFER_WIRE_MAGIC || fzBe16(s + 4) != XFER_WIRE_VERSION ||
        fzBe16(s + 6) != XFER_MSG_HELLO) return 0;
    return memcmp(s + 16, FUZZ_TOKEN, XFER_TOKEN_LEN) ? 1 : 2;
}

/* What a correct recipient does with the bytes the donor it accepted sent
 * after its HELLO; shadow[i] (the block's initial content) gets what block
 * i must hold. */
static void fzPredict(const fzCase *fc, const unsigned char *s, size_t n,
                      unsigned char **shadow, fzModel *m) {
    size_t pos = 48;
    uint64_t digest = 0xcbf29ce484222325ULL;

    memset(m, 0, sizeof(*m));
    for (;;) {
        if (n - pos < 40) {
            m->outcome = FZ_SHORT;
            return;
        }
        const unsigned char *h = s + pos;
        uint16_t type = fzBe16(h + 6);
        uint32_t block = fzBe32(h + 8);
        uint64_t off = fzBe64(h + 16), len = fzBe64(h + 24);
        pos += 40;
        if (fzBe32(h) != XFER_WIRE_MAGIC || fzBe16(h + 4) != XFER_WIRE_VERSION ||
            (type != XFER_MSG_DATA && type != XFER_MSG_DONE)) {
            m->outcome = FZ_GARBAGE;
            return;
        }
        if (type == XFER_MSG_DONE) {
            /* The summary must say exactly what was received. */
            uint64_t total = 0;
            int same = block <= fc->nblocks && off == m->segments &&
                       fzBe64(h + 32) == digest;
            if (block > fc->nblocks) {
                m->outcome = FZ_LIE;
                return;
            }
            if (n - pos < (size_t)block * 8) {
                m->outcome = FZ_SHORT;
                return;
            }
            for (uint32_t i = 0; i < fc->nblocks; i++) {
                uint64_t theirs = i < block ? fzBe64(s + pos + 8 * i) : 0;
                if (theirs != m->counts[i]) same = 0;
                total += m->counts[i];
            }
            m->outcome = same && total == len ? FZ_OK : FZ_LIE;
            return;
        }
        if (block >= fc->nblocks || off > fc->len[block] || len > fc->len[block] - off ||
            (fc->watch && m->counts[block] + len > fc->expect[block])) {
            m->outcome = FZ_LIE;
            return;
        }
        m->counts[block] += len;
        m->segments++;
        digest = fzDigest(digest, block, off, len);
        size_t avail = len < n - pos ? (size_t)len : n - pos;
        memcpy(shadow[block] + off, s + pos, avail);
        pos += avail;
        if (avail < len) {
            m->outcome = FZ_SHORT;
            return;
        }
        if (fc->watch && len && m->counts[block] == fc->expect[block]) {
            m->done[m->ndone++] = block;
            if (m->ndone == fc->cbfail) {
                m->outcome = FZ_CBFAIL;
                return;
            }
        }
    }
}

/* ------------------------------ The run ---------------------------------- */

static struct {
    xferListener *listener;
    unsigned char *stream;
    unsigned char *mem[FUZZ_MAX_BLOCKS], *shadow[FUZZ_MAX_BLOCKS], *snap[FUZZ_MAX_BLOCKS];
    uint32_t done[FUZZ_MAX_BLOCKS * 2];
    int ndone, cbfail;
    const fzCase *fc;
    int verbose;                /* FUZZ_VERBOSE set: say what each run did */
} fz;

#define fzBlock(i) (fz.mem[i] + FUZZ_GUARD)

static void fzFail(const fzCase *fc, const fzModel *m, int donor, int rc,
                   const char *err, const char *what) {
    fprintf(stderr, "migtransport-fuzz: %s\n  blocks %" PRIu32 " watch %d faults %d "
            "epipe %d cbfail %d, %d peers, %d connected; donor: peer %d\n"
            "  predicted: %s; got rc %d, err '%s'\n", what, fc->nblocks, fc->watch,
            fc->faults, fc->epipe, fc->cbfail, fc->npeers, fakeio.naccepted, donor,
            m ? fzOutcomeName[m->outcome] : "-", rc, err);
    for (int i = 0; i < fc->npeers; i++)
        fprintf(stderr, "  peer %d: %zu bytes (read %zu), silent %d, hello %d, %zu bytes "
                "sent to it\n", i, fc->end[i] - fc->start[i], fakeio.peer[i].inpos,
                fc->silent[i], fzHelloKind(fc->stream + fc->start[i], fc->end[i] - fc->start[i]),
                fakeio.peer[i].outlen);
    abort();
}

/* xferWatchBlocks' callback: record the block, keep a copy of it (it must
 * never change again), fail on the configured call. */
static int fzBlockDone(void *ctx, uint32_t block, char *err) {
    (void)ctx;
    if (block >= fz.fc->nblocks || fz.ndone == FUZZ_MAX_BLOCKS * 2) {
        fprintf(stderr, "migtransport-fuzz: done callback for block %" PRIu32
                " (call %d)\n", block, fz.ndone + 1);
        abort();
    }
    fz.done[fz.ndone++] = block;
    memcpy(fz.snap[block], fzBlock(block), fz.fc->len[block]);
    if (fz.ndone == fz.cbfail) {
        snprintf(err, XFER_ERR_LEN, "fuzz: the callback refuses block %" PRIu32, block);
        return -1;
    }
    return 0;
}

/* A WELCOME / VERDICT the recipient sent to a peer, at out[*pos]: its
 * status, or -1 if there is not one. */
static int fzAnswer(const fakePeer *p, size_t *pos, uint16_t type, uint32_t *status) {
    const unsigned char *o = p->out + *pos;
    size_t left = p->outlen - *pos, len = type == XFER_MSG_WELCOME ? 48 : 40;

    if (left < len || fzBe32(o) != XFER_WIRE_MAGIC || fzBe16(o + 4) != XFER_WIRE_VERSION ||
        fzBe16(o + 6) != type) return -1;
    if (type == XFER_MSG_WELCOME) {
        *status = fzBe32(o + 8);
    } else {
        *status = fzBe32(o + 12);
        uint64_t text = fzBe64(o + 24);
        if (text > 200 || text > left - len) return -1;
        len += (size_t)text;
    }
    *pos += len;
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    /* A listener made by xferListen() (its pending handshakes and all),
     * whose socket is then swapped for the fake one. */
    char err[XFER_ERR_LEN];
    fz.listener = xferListen(XFER_KIND_TCP, "127.0.0.1", 0, FUZZ_TOKEN, err);
    if (fz.listener == NULL) {
        fprintf(stderr, "migtransport-fuzz: %s\n", err);
        exit(1);
    }
    close(fz.listener->fd);
    fz.listener->fd = FAKEIO_LISTEN_FD;
    fz.stream = malloc(FUZZ_MAX_STREAM);
    fz.verbose = getenv("FUZZ_VERBOSE") != NULL;
    for (int i = 0; i < FUZZ_MAX_BLOCKS; i++) {
        fz.mem[i] = malloc(fzBlockCap(i) + 2 * FUZZ_GUARD);
        fz.shadow[i] = malloc(fzBlockCap(i));
        fz.snap[i] = malloc(fzBlockCap(i));
        ASAN_POISON_MEMORY_REGION(fz.mem[i], fzBlockCap(i) + 2 * FUZZ_GUARD);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fzCase fc = {.stream = fz.stream};
    fzModel m;
    char err[XFER_ERR_LEN] = "";
    void *addrs[FUZZ_MAX_BLOCKS];
    xferBlockDesc desc[FUZZ_MAX_BLOCKS];
    int rc = -2;

    fzParse(data, size, &fc);
    fakeIoReset(fc.faults, fc.seed);
    for (int i = 0; i < fc.npeers; i++)
        fakeIoAddPeer(fc.stream + fc.start[i], fc.end[i] - fc.start[i], fc.silent[i]);
    fakeio.epipe = fc.epipe;
    fz.fc = &fc;
    fz.ndone = 0;
    fz.cbfail = fc.cbfail;
    /* The block buffers are allocated once (fresh memory every run costs
     * more page faults than the run itself) and stay poisoned for ASan
     * but for this run's blocks and their guards. */
    for (uint32_t i = 0; i < fc.nblocks; i++) {
        ASAN_UNPOISON_MEMORY_REGION(fz.mem[i], FUZZ_GUARD * 2 + fc.len[i]);
        memset(fz.mem[i], 0xee, FUZZ_GUARD * 2 + fc.len[i]);
        memset(fzBlock(i), 0xb0 + (int)i, fc.len[i]);
        memset(fz.shadow[i], 0xb0 + (int)i, fc.len[i]);
        addrs[i] = fzBlock(i);
    }

    /* The handshakes: a donor iff some peer presented the token (and could
     * be told WELCOME); every other peer that connected is refused. */
    fz.listener->accepted = 0;
    uint64_t refused = xferListenerRefused(fz.listener);
    xferConn *c = xferAccept(fz.listener, 5000, 10000, err);
    int donor = c ? xferTcpFd(c) - FAKEIO_CONN_FD : -1, any = 0;
    for (int i = 0; i < fc.npeers; i++)
        any |= fzHelloKind(fc.stream + fc.start[i], fc.end[i] - fc.start[i]) == 2;
    if ((c != NULL) != (any && !fc.epipe) && (c != NULL || fc.npeers <= XFER_PENDING_MAX))
        fzFail(&fc, NULL, donor, rc, err, c ? "xferAccept took a peer without the token"
                                            : "xferAccept refused a donor with the token");
    if (c && (donor < 0 || donor >= fakeio.naccepted ||
              fzHelloKind(fc.stream + fc.start[donor], fc.end[donor] - fc.start[donor]) != 2))
        fzFail(&fc, NULL, donor, rc, err, "the peer accepted did not present the token");
    if (xferListenerRefused(fz.listener) - refused != (uint64_t)(fakeio.naccepted - (c != NULL)) ||
        fz.listener->npending != 0)
        fzFail(&fc, NULL, donor, rc, err, "peers neither accepted nor refused");
    /* A refused peer hears nothing, or (best effort: the send may be cut
     * short) WELCOME BAD_TOKEN if it presented another token. */
    unsigned char badtoken[48] = {0x52, 0x4d, 0x49, 0x47, 0, XFER_WIRE_VERSION, 0, XFER_MSG_WELCOME,
                                  0, 0, 0, XFER_STATUS_BAD_TOKEN};
    for (int i = 0; i < fc.npeers; i++) {
        if (i == donor || fakeio.peer[i].outlen == 0) continue;
        if (fzHelloKind(fc.stream + fc.start[i], fc.end[i] - fc.start[i]) != 1 ||
            fakeio.peer[i].outlen > sizeof(badtoken) ||
            memcmp(fakeio.peer[i].out, badtoken, fakeio.peer[i].outlen))
            fzFail(&fc, NULL, donor, rc, err, "a refused peer was sent something else "
                   "than WELCOME BAD_TOKEN");
    }

    /* The transfer, from what the donor sent after its HELLO. */
    memset(&m, 0, sizeof(m));
    m.outcome = FZ_NOCONN;
    if (c) fzPredict(&fc, fc.stream + fc.start[donor], fc.end[donor] - fc.start[donor],
                     fz.shadow, &m);
    if (c) {
        const fakePeer *p = &fakeio.peer[donor];
        size_t opos = 0;
        uint32_t status;
        if (fzAnswer(p, &opos, XFER_MSG_WELCOME, &status) || status != XFER_STATUS_OK)
            fzFail(&fc, &m, donor, rc, err, "no WELCOME OK");
        uint64_t lens[FUZZ_MAX_BLOCKS];
        for (uint32_t i = 0; i < fc.nblocks; i++) lens[i] = fc.len[i];
        if (xferRegisterRecvBlocks(c, addrs, lens, fc.nblocks, desc, err) ||
            (fc.watch && xferWatchBlocks(c, fc.expect, fzBlockDone, NULL, err)))
            fzFail(&fc, &m, donor, rc, err, "registration failed");
        rc = xferWaitTransfer(c, 10000, err);
        if ((rc == 0) != (m.outcome == FZ_OK))
            fzFail(&fc, &m, donor, rc, err, "xferWaitTransfer's result is wrong");
        if (m.outcome == FZ_OK || m.outcome == FZ_LIE) {
            if (fzAnswer(p, &opos, XFER_MSG_VERDICT, &status) ||
                status != (m.outcome == FZ_OK ? XFER_STATUS_OK : XFER_STATUS_BAD_SUMMARY))
                fzFail(&fc, &m, donor, rc, err, "wrong or missing VERDICT");
        }
        if (opos != p->outlen) fzFail(&fc, &m, donor, rc, err, "unexpected bytes sent");
        if (rc == 0) {
            for (uint32_t i = 0; i < fc.nblocks; i++)
                if (xferRecvBlockBytes(c, i) != m.counts[i])
                    fzFail(&fc, &m, donor, rc, err, "xferRecvBlockBytes differs");
        }
        xferClose(c);
    }

    if (fz.verbose)
        fprintf(stderr, "migtransport-fuzz: %d peers, donor %d: %s; rc %d%s%s; %d blocks "
                "reported done; %" PRIu64 " reads (%" PRIu64 " calls cut, %" PRIu64 " EAGAIN, %"
                PRIu64 " EINTR)\n", fc.npeers, donor, c ? fzOutcomeName[m.outcome] : "no donor",
                rc, *err ? ": " : "", err, fz.ndone, fakeio.reads, fakeio.short_calls,
                fakeio.eagains, fakeio.eintrs);
    /* The blocks: what the accepted records carried, nothing else; the
     * guards untouched; done blocks as they were when reported. */
    if (fz.ndone != m.ndone || memcmp(fz.done, m.done, sizeof(m.done[0]) * (size_t)m.ndone))
        fzFail(&fc, &m, donor, rc, err, "done callbacks differ from the prediction");
    for (uint32_t i = 0; i < fc.nblocks; i++) {
        unsigned char *g = fz.mem[i], *e = fzBlock(i) + fc.len[i];
        for (int k = 0; k < FUZZ_GUARD; k++)
            if (g[k] != 0xee || e[k] != 0xee) fzFail(&fc, &m, donor, rc, err, "guard zone written");
        if (memcmp(fzBlock(i), fz.shadow[i], fc.len[i]))
            fzFail(&fc, &m, donor, rc, err, "block content differs from the prediction");
    }
    for (int k = 0; k < fz.ndone; k++) {
        uint32_t b = fz.done[k];
        if (memcmp(fzBlock(b), fz.snap[b], fc.len[b]))
            fzFail(&fc, &m, donor, rc, err, "a block changed after it was reported done");
    }
    for (uint32_t i = 0; i < fc.nblocks; i++)
        ASAN_POISON_MEMORY_REGION(fz.mem[i], FUZZ_GUARD * 2 + fc.len[i]);
    return 0;
}
