/* slotalloc-fuzz.c -- libFuzzer target: slotAllocAdoptBlock(), the
 * recipient's check of a block a donor shipped (header, page table,
 * allocation bitmap), and the arena it rebuilds from what it accepted; and
 * slotAllocImageUsedRanges(), which reads the same tables of a received
 * image, before adoption, to checksum what was shipped.
 *
 * One input is one or two blocks as they arrive: detached blocks reserved
 * for a slot (zero, as a migration reserves them), into which the input's
 * patches are written, as a donor (or a corrupted transfer) would have
 * written them:
 *
 *   byte 0     flags: bit 0 a second block
 *   byte 1     block 0's size in 64 KB units - 1 (low 4 bits: 64 KB..1 MB)
 *   byte 2     the same for block 1
 *   byte 3     seed of what is done with an accepted block
 *   then       patches: u8 block (modulo the blocks), u24 offset (modulo
 *              the block's size), u16 length, the bytes (little endian;
 *              fuzzApplyPatches)
 *
 * A block the allocator accepts must then behave: this file includes
 * src/slotalloc.c itself (built with REDIS_TEST) to use the allocator's
 * own consistency check, saTestVerifyArena(), which compares an arena's
 * runtime state (lists, counters) with its blocks' content. The oracle,
 * besides ASan and UBSan:
 *   - an image's used ranges lie in the block, in order, disjoint, and
 *     there are some exactly when adoption accepts the image;
 *   - after each adoption, accepted or not, the allocator is consistent;
 *   - the live allocations of an accepted block lie in its data pages,
 *     in address order, do not overlap, and each one's usable size,
 *     live size, slot and block agree; they add up to the slot's stats;
 *   - writing every byte of every such allocation leaves the allocator
 *     consistent (no allocation covers the header or its tables);
 *   - freeing some of them and allocating new ones in the slot gives
 *     allocations that overlap no live one, and a consistent allocator;
 *   - a rejected block is still detached and can be released.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef REDIS_TEST
#define REDIS_TEST
#endif
#include "../../src/slotalloc.c"
#include "fuzz-util.h"

#define FUZZ_SLOT 777
#define FUZZ_MAX_ALLOCS (2 * (SLOTALLOC_UNIT_SIZE * 16 / SLOTALLOC_GRANULE) + 64)

#define FUZZ_MAX_RANGES 4096
static void *fz_allocs[FUZZ_MAX_ALLOCS];
static slotAllocRangeInfo fz_ranges[FUZZ_MAX_RANGES];

static void fzFail(const char *what, const void *p) {
    fprintf(stderr, "slotalloc-fuzz: %s (%p)\n", what, p);
    fflush(stdout);
    abort();
}

static void fzPanic(const char *msg) {
    fzFail(msg, NULL);
}

static uint64_t fzRand(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* The live allocations of every active block of the slot, checked: in
 * the block's data pages, in address order, disjoint, sizes agreeing,
 * adding up to the slot's stats. Returns how many, in fz_allocs. */
static size_t fzCheckAllocs(void) {
    slotAllocBlockInfo bi[8];
    slotAllocSlotStat st;
    size_t nb = slotAllocSlotBlocks(FUZZ_SLOT, bi, 8), total = 0, used = 0;

    if (nb > 8) fzFail("more blocks than the test made", NULL);
    for (size_t b = 0; b < nb; b++) {
        char *base = bi[b].addr, *end = base + bi[b].size;
        const saBlockHeader *h = (const saBlockHeader *)base;
        char *data = base + (bi[b].huge ? SA_PAGE_SIZE : (size_t)h->hdr_pages << SA_PAGE_SHIFT);
        size_t n = slotAllocBlockAllocs(base, fz_allocs + total, FUZZ_MAX_ALLOCS - total);
        char *prev_end = data;

        if (n > FUZZ_MAX_ALLOCS - total) fzFail("too many allocations", base);
        if (n != bi[b].live_allocs) fzFail("block lists another number of allocations", base);
        for (size_t i = total; i < total + n; i++) {
            char *p = fz_allocs[i];
            size_t u = slotAllocUsableSize(p);
            if (u == 0 || slotAllocLiveSize(FUZZ_SLOT, p) != u) fzFail("bad usable size", p);
            if (slotAllocArenaOf(p) != FUZZ_SLOT || slotAllocBlockOf(p) != base)
                fzFail("allocation in another slot or block", p);
            if (p < prev_end || u > (size_t)(end - p))
                fzFail("allocation overlaps the header, another one, or the block's end", p);
            prev_end = p + u;
            used += u;
        }
        total += n;
    }
    if (slotAllocSlotStats(FUZZ_SLOT, &st) || st.live_allocs != total || st.used_bytes != used)
        fzFail("slot stats do not add up", NULL);
    return total;
}

/* saTestVerifyAll() for the one arena this test uses (the whole walk of
 * 16384 slots, instrumented, would cost most of the run): its runtime
 * state matches its blocks, and the process-wide counters match it. */
/* Used ranges of an image (slotAllocImageUsedRanges): in the block, in
 * order, disjoint, the first one the header's. */
static void fzCheckRanges(size_t n, size_t size, const void *block) {
    size_t end = 0;
    if (n > FUZZ_MAX_RANGES) fzFail("too many used ranges", block);
    for (size_t i = 0; i < n; i++) {
        if (fz_ranges[i].len == 0 || fz_ranges[i].offset < end || (i == 0 && fz_ranges[i].offset) ||
            fz_ranges[i].len > size - fz_ranges[i].offset)
            fzFail("used ranges out of the block, out of order or overlapping", block);
        end = fz_ranges[i].offset + fz_ranges[i].len;
    }
}

static void fzVerify(const char *when) {
    size_t live = 0, used = 0, blocks = 0;
    saArena *a = saArenaGet(FUZZ_SLOT, 0);
    int ok = 1;

    if (a) {
        pthread_mutex_lock(&a->lock);
        ok = saTestVerifyArena(a, &live, &used, &blocks);
        pthread_mutex_unlock(&a->lock);
    }
    if (!ok || live != saStatGet(live) || used != saStatGet(used_bytes) ||
        blocks != saStatGet(blocks)) fzFail(when, NULL);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    slotAllocSetPanicHandler(fzPanic);
    if (slotAllocInit((size_t)256 << 20, 0, 0) == -1) fzFail("slotAllocInit", NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t pos = 0, sizes[2];
    void *addrs[2];
    uint64_t flags = fuzzTake(data, size, &pos, 1);
    size_t nblocks = 1 + (flags & 1);

    sizes[0] = (1 + (fuzzTake(data, size, &pos, 1) & 15)) * SLOTALLOC_UNIT_SIZE;
    sizes[1] = (1 + (fuzzTake(data, size, &pos, 1) & 15)) * SLOTALLOC_UNIT_SIZE;
    uint64_t rng = fuzzTake(data, size, &pos, 1) * 0x9e3779b97f4a7c15ULL + 1;
    if (slotAllocReserveBlocks(FUZZ_SLOT, nblocks, sizes, addrs) == -1)
        fzFail("cannot reserve blocks", NULL);
    fuzzApplyPatches(data, size, pos, addrs, sizes, nblocks);

    int adopted[2];
    for (size_t b = 0; b < nblocks; b++) {
        /* What a migration checksums before adopting (the ranges read
         * from the image itself): in the block, in order, disjoint; none
         * exactly when adoption refuses the image. */
        size_t nr = slotAllocImageUsedRanges(addrs[b], sizes[b], fz_ranges, FUZZ_MAX_RANGES);
        fzCheckRanges(nr, sizes[b], addrs[b]);
        adopted[b] = slotAllocAdoptBlock(FUZZ_SLOT, addrs[b]) == 0;
        if (adopted[b] != (nr != 0))
            fzFail(adopted[b] ? "an image without used ranges was adopted"
                              : "an image with used ranges was refused", addrs[b]);
        fzVerify("inconsistent after an adoption");
        /* Adopting it again, or into another slot, is always refused. */
        if (slotAllocAdoptBlock(adopted[b] ? FUZZ_SLOT : FUZZ_SLOT + 1, addrs[b]) != -1)
            fzFail("a block was adopted twice", addrs[b]);
    }
    slotAllocSlotStat st;
    slotAllocSlotStats(FUZZ_SLOT, &st);
    if (st.detached_blocks != nblocks - (size_t)adopted[0] - (nblocks > 1 ? (size_t)adopted[1] : 0))
        fzFail("a rejected block is not detached", NULL);

    /* Use what was accepted: write every live byte, free some, allocate. */
    size_t n = fzCheckAllocs();
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "slotalloc-fuzz: %zu block(s) of %zu, %zu KB: adopted %d %d, "
                "%zu live allocations\n", nblocks, sizes[0] >> 10, sizes[1] >> 10,
                adopted[0], nblocks > 1 ? adopted[1] : -1, n);
    for (size_t i = 0; i < n; i++) memset(fz_allocs[i], 0x5c, slotAllocUsableSize(fz_allocs[i]));
    fzVerify("inconsistent after writing the live allocations");
    for (size_t i = 0; i < n; i++)
        if (fzRand(&rng) & 1) slotAllocFree(fz_allocs[i]);
    for (int k = (int)(fzRand(&rng) % 16); k > 0; k--) {
        uint64_t r = fzRand(&rng);
        size_t want = r & 1 ? 1 + (r >> 8) % 256 : 1 + (r >> 8) % (256 << 10);
        void *p = slotAllocMalloc(FUZZ_SLOT, want);
        if (p && slotAllocUsableSize(p) < want) fzFail("allocation too small", p);
    }
    fzCheckAllocs();
    fzVerify("inconsistent after frees and new allocations");

    for (size_t b = 0; b < nblocks; b++)
        if (!adopted[b]) slotAllocReleaseBlock(addrs[b]);
    slotAllocReleaseSlot(FUZZ_SLOT);
    slotAllocSlotStats(FUZZ_SLOT, &st);
    if (st.blocks || st.detached_blocks || st.live_allocs) fzFail("slot not empty after release", NULL);
    fzVerify("inconsistent after releasing the slot");
    return 0;
}
