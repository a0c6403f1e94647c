/* fuzz-util.h -- what the fuzz targets and their seed makers share: how an
 * input's little endian fields are read, how "patches" (block, offset,
 * bytes) are written into blocks, and, on the seed makers' side, how such
 * inputs are put together and saved.
 *
 * Header-only (static inline): each harness and seed maker is one program
 * built from its own source, and fuzz.mk stays a list of sources.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __FUZZ_UTIL_H
#define __FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------ Harnesses -------------------------------- */

/* The next 'bytes' bytes of the input at *pos as a little endian number;
 * zeros past its end (a short input still is a whole one). */
static inline uint64_t fuzzTake(const uint8_t *p, size_t n, size_t *pos, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++, (*pos)++)
        if (*pos < n) v |= (uint64_t)p[*pos] << (8 * i);
    return v;
}

/* The rest of the input as patches: u8 block (modulo nblocks), u24 offset
 * (modulo the block's size), u16 length, then the bytes (as many as the
 * input and the block have), each copied into its block. */
static inline void fuzzApplyPatches(const uint8_t *data, size_t size, size_t pos,
                                    void *const *addrs, const size_t *sizes, size_t nblocks) {
    while (pos < size) {
        size_t b = fuzzTake(data, size, &pos, 1) % nblocks;
        size_t off = fuzzTake(data, size, &pos, 3) % sizes[b];
        size_t len = fuzzTake(data, size, &pos, 2), avail = pos < size ? size - pos : 0;
        if (len > avail) len = avail;
        if (len > sizes[b] - off) len = sizes[b] - off;
        memcpy((char *)addrs[b] + off, data + pos, len);
        pos += len;
    }
}

/* ----------------------------- Seed makers ------------------------------- */

#ifdef FUZZ_SEED_MAKER
/* The seed being written. */
static unsigned char seed_buf[1 << 20];
static size_t seed_len;

static inline void seedPut(const void *p, size_t n) {
    if (seed_len + n > sizeof(seed_buf)) {
        fprintf(stderr, "seeds: a seed grew past %zu bytes\n", sizeof(seed_buf));
        exit(1);
    }
    memcpy(seed_buf + seed_len, p, n);
    seed_len += n;
}

static inline void seedPutLe(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) {
        unsigned char b = (unsigned char)(v >> (8 * i));
        seedPut(&b, 1);
    }
}

/* The non-zero bytes of [base+off, base+off+len) as patches of block b
 * (fuzzApplyPatches' format; zero gaps shorter than 16 bytes stay inside a
 * patch): blocks are reserved zeroed, so only what is not zero is sent. */
static inline void seedPutPatches(int b, const unsigned char *base, size_t off, size_t len) {
    size_t i = off, end = off + len;
    while (i < end) {
        while (i < end && base[i] == 0) i++;
        if (i == end) break;
        size_t s = i, z = 0;
        while (i < end && z < 16 && i - s < 65535) {
            z = base[i] ? 0 : z + 1;
            i++;
        }
        size_t e = i - z;
        seedPutLe((uint64_t)b, 1);
        seedPutLe(s, 3);
        seedPutLe(e - s, 2);
        seedPut(base + s, e - s);
    }
}

/* Save the seed as dir/name. 0, or -1 (said on stderr). */
static inline int seedSave(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(seed_buf, 1, seed_len, f) != seed_len || fclose(f)) {
        perror(path);
        return -1;
    }
    return 0;
}
#endif

#endif
