/* slotalloc-seeds.c -- writes the seed corpus of slotalloc-fuzz:
 *
 *   slotalloc-seeds DIR
 *
 * Each seed holds real blocks: the allocator itself fills a slot (small
 * chunks of many classes, page runs, a huge allocation, some frees), and
 * the part of each block that adoption reads -- the header, page table and
 * bitmap, as slotAllocBlockUsedRanges() reports them -- becomes the seed's
 * patches, in slotalloc-fuzz.c's format. The allocations are zeroed
 * (calloc), so only the tables' non-zero bytes are written: a few KB.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "slotalloc.h"
#define FUZZ_SEED_MAKER
#include "fuzz-util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int writeSeed(const char *dir, const char *name, int slot) {
    slotAllocBlockInfo bi[2];
    size_t nb = slotAllocSlotBlocks(slot, bi, 2);

    if (nb == 0 || nb > 2) {
        fprintf(stderr, "slotalloc-seeds: %s: slot %d has %zu blocks\n", name, slot, nb);
        return -1;
    }
    seed_len = 0;
    seedPutLe(nb == 2, 1);
    for (size_t b = 0; b < 2; b++) {
        size_t units = b < nb ? bi[b].size / SLOTALLOC_UNIT_SIZE : 1;
        if (units > 16) {
            fprintf(stderr, "slotalloc-seeds: %s: block of %zu units\n", name, units);
            return -1;
        }
        seedPutLe(units - 1, 1);
    }
    seedPutLe(0x2a, 1);
    for (size_t b = 0; b < nb; b++) {
        slotAllocRangeInfo r;
        if (slotAllocBlockUsedRanges(bi[b].addr, &r, 1) == 0) return -1;
        /* The header's range (a huge block's is the whole block: its header
         * is in the first page). */
        size_t len = bi[b].huge ? 4096 : r.len;
        seedPutPatches((int)b, bi[b].addr, 0, len);
    }
    if (seedSave(dir, name)) return -1;
    printf("slotalloc-seeds: %s/%s (%zu bytes)\n", dir, name, seed_len);
    return 0;
}

int main(int argc, char **argv) {
    static void *p[4096];
    uint64_t x = 88172645463325252ULL;

    if (argc != 2) {
        fprintf(stderr, "usage: slotalloc-seeds DIR\n");
        return 64;
    }
    /* Blocks of 64 KB to 256 KB: allocations above 64 KB get huge blocks. */
    if (slotAllocInit((size_t)64 << 20, 64 << 10, 256 << 10)) return 1;

    /* Slot 1: small chunks of the classes up to 1 KB, every third freed. */
    for (int i = 0; i < 70; i++) p[i] = slotAllocCalloc(1, 16 + (size_t)(i * 37) % 1024);
    for (int i = 0; i < 70; i += 3) slotAllocFree(p[i]);
    /* Slot 2: slabs, page runs and free spans in one block, then a second
     * block. */
    for (int i = 0; i < 90; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t sz = i % 30 == 0 ? 15000 + x % 6000 : 1 + x % 1000;
        p[i] = slotAllocCalloc(2, sz);
    }
    for (int i = 1; i < 90; i += 2) slotAllocFree(p[i]);
    /* Slot 3: one huge allocation. */
    slotAllocCalloc(3, 100 << 10);
    /* Slot 4: a block whose allocations were all freed but one. */
    for (int i = 0; i < 50; i++) p[i] = slotAllocCalloc(4, 4000);
    for (int i = 1; i < 50; i++) slotAllocFree(p[i]);
    /* Slot 5: the largest classes, a chunk each. */
    for (int i = 0; i < 6; i++) slotAllocCalloc(5, 6000 + (size_t)i * 1500);

    if (writeSeed(argv[1], "small-chunks", 1) || writeSeed(argv[1], "slabs-runs-two-blocks", 2) ||
        writeSeed(argv[1], "huge-block", 3) || writeSeed(argv[1], "nearly-empty", 4) ||
        writeSeed(argv[1], "large-classes", 5)) return 1;
    slotAllocShutdown();
    return 0;
}
