/* migtransport-seeds.c -- writes the seed corpus of migtransport-fuzz:
 *
 *   migtransport-seeds DIR
 *
 * Each seed is a real donor's byte stream: the library's own donor end
 * (xferRegisterSendBlocks, xferWriteBlocks, xferFinish; the HELLO as
 * xferTcpConnect encodes it) writes to the fake socket of fakeio.h, whose
 * captured bytes become the input, in migtransport-fuzz.c's format
 * (recipient setup, then the stream as raw ops, long runs of one byte as
 * run ops so that a 200 KB payload takes a few bytes). Some seeds give the
 * recipient a setup the donor does not expect (a smaller block, a shorter
 * expected count, a wrong token, a stream cut short), or strangers that
 * connect before the donor: the lying-peer and stranger cases of
 * migtransport-test, as starting points for the fuzzer.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "xferimpl.h"
#include "fakeio.h"
#define FUZZ_SEED_MAKER
#include "fuzz-util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_TOKEN "5f0e7a3c9b1d2e4f6a8c0b2d4e6f8a1c"

/* One seed: the recipient's setup, and the segments the donor writes. */
typedef struct seedSeg {
    uint32_t block;
    uint32_t off, len;
    int fill;               /* payload: one byte value (>= 0), or -1 random */
} seedSeg;

typedef struct seedSpec {
    const char *name;
    int flags, rngseed, cbfail;
    uint32_t nblocks;
    uint32_t len[8];        /* the donor's idea of the block lengths */
    uint32_t rlen[8];       /* the recipient's, if different (0: same) */
    int32_t expect[8];      /* -1: what the donor sends */
    seedSeg segs[16];
    int nsegs;
    int wrong_token;
    size_t cut;             /* keep only this many stream bytes (0: all) */
    int strangers;          /* peers that connect before the donor: an HTTP
                             * request, half a HELLO then silence, a HELLO
                             * with a wrong token */
    int silent_strangers;   /* and as many more that send half a HELLO and
                             * then nothing (the listener's pending list) */
} seedSpec;

/* A peer's stream as ops: runs of 16+ equal bytes as run ops, the rest
 * raw; 'first' (0, or 128 | 64 if silent) is or-ed into the first op, which
 * starts a new peer. */
static void putStream(const unsigned char *s, size_t n, int first) {
    size_t i = 0, raw = 0;
    while (i <= n) {
        size_t run = 1;
        while (i < n && i + run < n && s[i + run] == s[i] && run < 65535) run++;
        if (i == n || run >= 16) {
            while (raw < i) {
                size_t k = i - raw > 65535 ? 65535 : i - raw;
                seedPutLe((uint64_t)first, 1);
                first = 0;
                seedPutLe(k, 2);
                seedPut(s + raw, k);
                raw += k;
            }
            if (i == n) break;
            seedPutLe(1 | (uint64_t)first, 1);
            first = 0;
            seedPutLe(run, 2);
            seedPutLe(s[i], 1);
            i += run;
            raw = i;
        } else {
            i++;
        }
    }
}

static int makeSeed(const char *dir, const seedSpec *sp) {
    char err[XFER_ERR_LEN] = "";
    const void *addrs[8];
    uint64_t lens[8], sent[8] = {0};
    xferBlockDesc desc[8];
    xferSegment segs[16];
    unsigned char *mem[8];
    xferWireRecord verdict;
    uint64_t x = 0x1234567 + (uint64_t)sp->nsegs;

    /* The donor's send buffers hold the payloads; its descriptors are the
     * recipient's blocks as the donor was told them. */
    for (uint32_t i = 0; i < sp->nblocks; i++) {
        mem[i] = malloc(sp->len[i]);
        for (uint32_t k = 0; k < sp->len[i]; k++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            mem[i][k] = (unsigned char)(x >> 56);
        }
        addrs[i] = mem[i];
        lens[i] = sp->len[i];
        desc[i] = (xferBlockDesc){.id = i, .len = sp->len[i]};
    }
    for (int k = 0; k < sp->nsegs; k++) {
        const seedSeg *s = &sp->segs[k];
        if (s->fill >= 0) memset(mem[s->block] + s->off, s->fill, s->len);
        segs[k] = (xferSegment){mem[s->block] + s->off, s->len, &desc[s->block], s->off};
        sent[s->block] += s->len;
    }

    /* The donor end on the fake socket: its peer answers DONE with OK. */
    xferEncodeRecord(&verdict, XFER_MSG_VERDICT, 0, XFER_STATUS_OK, 0, 0, 0);
    fakeIoReset(FAKEIO_WHOLE, 0);
    fakeio.peer[0].outlen = 0;
    fakeIoAddPeer((const unsigned char *)&verdict, sizeof(verdict), 0);
    fakeio.naccepted = 1;       /* connected: its descriptor is FAKEIO_CONN_FD */
    xferWireHello hello;
    uint8_t tok[XFER_TOKEN_LEN];
    memcpy(tok, FUZZ_TOKEN, XFER_TOKEN_LEN);
    if (sp->wrong_token) tok[7] ^= 1;
    xferEncodeHello(&hello, XFER_MSG_HELLO, 0, tok);
    xferConn *c = xferNewConn(&xferTcpOps, 1, 1000);
    c->fd = FAKEIO_CONN_FD;
    if (xferRegisterSendBlocks(c, addrs, lens, sp->nblocks, err) ||
        (sp->nsegs && xferWriteBlocks(c, segs, (size_t)sp->nsegs, err)) ||
        xferFinish(c, err)) {
        fprintf(stderr, "migtransport-seeds: %s: %s\n", sp->name, err);
        return -1;
    }
    xferClose(c);

    /* The input: setup, then HELLO + what the donor wrote. */
    seed_len = 0;
    seedPutLe((uint64_t)sp->flags, 1);
    seedPutLe((uint64_t)sp->rngseed, 1);
    seedPutLe(sp->nblocks - 1, 1);
    seedPutLe((uint64_t)sp->cbfail, 1);
    int big = sp->flags & 32;
    for (uint32_t i = 0; i < sp->nblocks; i++) {
        uint32_t scale = big && i == 0 ? 16 : 1;
        uint32_t rl = sp->rlen[i] ? sp->rlen[i] : sp->len[i];
        uint64_t ex = sp->expect[i] >= 0 ? (uint64_t)sp->expect[i] : sent[i];
        if (rl % scale || ex % scale || rl / scale - 1 > (big ? 65535u : 4095u)) {
            fprintf(stderr, "migtransport-seeds: %s: block %u does not fit the format\n",
                    sp->name, i);
            return -1;
        }
        seedPutLe(rl / scale - 1, 2);
        seedPutLe(ex / scale, 2);
    }
    size_t slen = sizeof(hello) + fakeio.peer[0].outlen;
    unsigned char *stream = malloc(slen);
    memcpy(stream, &hello, sizeof(hello));
    memcpy(stream + sizeof(hello), fakeio.peer[0].out, fakeio.peer[0].outlen);
    if (sp->cut && sp->cut < slen) slen = sp->cut;
    if (sp->strangers) {
        static const char http[] = "GET / HTTP/1.0\r\n\r\n";
        xferWireHello other;
        uint8_t wrong[XFER_TOKEN_LEN];
        memset(wrong, 'x', sizeof(wrong));
        xferEncodeHello(&other, XFER_MSG_HELLO, 0, wrong);
        putStream((const unsigned char *)http, sizeof(http) - 1, 0);
        putStream(stream, 20, 128 | 64);
        putStream((const unsigned char *)&other, sizeof(other), 128);
        for (int i = 0; i < sp->silent_strangers; i++) putStream(stream, 20, 128 | 64);
        putStream(stream, slen, 128);
    } else {
        putStream(stream, slen, 0);
    }
    free(stream);
    for (uint32_t i = 0; i < sp->nblocks; i++) free(mem[i]);

    if (seedSave(dir, sp->name)) return -1;
    printf("migtransport-seeds: %s/%s (%zu bytes)\n", dir, sp->name, seed_len);
    return 0;
}

int main(int argc, char **argv) {
    /* flags: 1 watch, 2 silent, 4/8 faults, 16 epipe, 32 big */
    static const seedSpec specs[] = {
        {.name = "three-blocks-watched", .flags = 1, .nblocks = 3,
         .len = {100, 4096, 17}, .expect = {-1, -1, -1}, .nsegs = 5,
         .segs = {{1, 0, 2000, -1}, {0, 0, 100, -1}, {1, 2000, 2096, -1},
                  {2, 0, 9, -1}, {2, 9, 8, -1}}},
        {.name = "one-block-short-reads", .flags = 4, .rngseed = 7, .nblocks = 1,
         .len = {4096}, .expect = {-1}, .nsegs = 4,
         .segs = {{0, 0, 1000, -1}, {0, 3000, 1096, -1}, {0, 1000, 1, -1},
                  {0, 1001, 1999, 0}}},
        {.name = "eight-blocks-retries", .flags = 1 | 8, .rngseed = 3, .nblocks = 8,
         .len = {64, 128, 256, 512, 1024, 2048, 4096, 16},
         .expect = {-1, -1, -1, -1, -1, -1, -1, -1}, .nsegs = 8,
         .segs = {{7, 0, 16, -1}, {6, 0, 4096, 0x33}, {5, 100, 900, -1}, {4, 0, 1024, -1},
                  {3, 0, 512, -1}, {2, 0, 256, -1}, {1, 0, 128, -1}, {0, 0, 64, -1}}},
        {.name = "big-payload-direct", .flags = 1 | 32, .nblocks = 2,
         .len = {320 << 10, 4096}, .expect = {-1, -1}, .nsegs = 3,
         .segs = {{1, 0, 4096, 0x11}, {0, 0, 100 << 10, 0x5a}, {0, 100 << 10, 200 << 10, 0xa5}}},
        {.name = "empty-transfer", .flags = 0, .nblocks = 2, .len = {4096, 4096},
         .expect = {-1, -1}, .nsegs = 0},
        {.name = "wrong-token", .flags = 0, .nblocks = 1, .len = {256}, .expect = {-1},
         .nsegs = 1, .segs = {{0, 0, 256, -1}}, .wrong_token = 1},
        {.name = "silent-mid-record", .flags = 2 | 4, .rngseed = 9, .nblocks = 1,
         .len = {4096}, .expect = {-1}, .nsegs = 2,
         .segs = {{0, 0, 2048, -1}, {0, 2048, 2048, -1}}, .cut = 48 + 40 + 2048 + 40 + 1000},
        {.name = "lie-length", .flags = 0, .nblocks = 2, .len = {4096, 512},
         .rlen = {1000, 0}, .expect = {-1, -1}, .nsegs = 2,
         .segs = {{1, 0, 512, -1}, {0, 0, 4096, -1}}},
        {.name = "overfill-watched", .flags = 1, .cbfail = 0, .nblocks = 2,
         .len = {2048, 2048}, .expect = {1024, -1}, .nsegs = 3,
         .segs = {{0, 0, 1024, -1}, {1, 0, 2048, -1}, {0, 1024, 16, -1}}},
        {.name = "callback-fails", .flags = 1, .cbfail = 2, .nblocks = 3,
         .len = {300, 300, 300}, .expect = {-1, -1, -1}, .nsegs = 3,
         .segs = {{0, 0, 300, -1}, {1, 0, 300, -1}, {2, 0, 300, -1}}},
        {.name = "send-fails", .flags = 16, .nblocks = 1, .len = {64}, .expect = {-1},
         .nsegs = 1, .segs = {{0, 0, 64, -1}}},
        {.name = "strangers-then-donor", .flags = 1 | 8, .rngseed = 5, .nblocks = 2,
         .len = {512, 256}, .expect = {-1, -1}, .nsegs = 2,
         .segs = {{0, 0, 512, -1}, {1, 0, 256, -1}}, .strangers = 1},
        {.name = "pending-overflow", .flags = 0, .nblocks = 1, .len = {128},
         .expect = {-1}, .nsegs = 1, .segs = {{0, 0, 128, -1}}, .strangers = 1,
         .silent_strangers = 15},
    };
    if (argc != 2) {
        fprintf(stderr, "usage: migtransport-seeds DIR\n");
        return 64;
    }
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
        if (makeSeed(argv[1], &specs[i])) return 1;
    fakeIoFree();
    return 0;
}
