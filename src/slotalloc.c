/* Slot-affine block allocator.
 *
 * Every key of a Redis Cluster hash slot is meant to keep all its
 * allocations inside memory blocks owned by that slot, so that migrating a
 * slot means shipping a few large contiguous regions (RDMA WRITEs) instead
 * of serializing keys one by one, and the recipient adopts the regions in
 * place. This file is the allocator core: it knows slots (0..16383), blocks
 * and allocations, nothing about Redis objects, and depends on libc and
 * pthreads only.
 *
 * DESIGN
 * ------
 *
 * Address space. slotAllocInit() reserves one virtual range, PROT_NONE and
 * MAP_NORESERVE, so it costs nothing until used. The range is cut in units
 * of 64 KiB; a block is a run of whole units. Creating a block mprotect()s
 * its units read/write (the kernel hands out zeroed pages on first touch);
 * releasing it drops the pages with MADV_DONTNEED and puts PROT_NONE back,
 * so the memory really goes back to the OS while the addresses stay ours.
 *
 * Pointer lookup. The unit table holds, for every unit, the id of the block
 * covering it (0: none). It is a NORESERVE mapping as well: only the parts
 * describing used units ever become resident. A block id indexes a table of
 * process-local descriptors (saBlock). "Is p ours, in which slot" is a range
 * check plus one load; the usable size adds one load from the block's page
 * table. Chunks carry no header.
 *
 * Free virtual space. Runs of free units ("extents") are kept in segregated
 * lists, one per exact length up to 64 units (every normal block size up to
 * 4 MiB), then one per power of two. Each free extent has its length
 * written at its first and last unit (boundary tags in a side array, also
 * NORESERVE), so a released block merges with its free neighbours in O(1).
 * Allocation is first fit from the smallest list that can hold the request,
 * carving from the front and putting the tail back. Released ranges are
 * therefore reused, and the range does not fragment into slivers.
 *
 * Block sizes. A slot's first block has min_block bytes (64 KiB), each
 * further one twice the previous, up to max_block (4 MiB): 16384 nearly
 * empty slots cost 64 KiB each, big slots are a few large regions. An
 * arena that more than 64 slots share starts larger (saArenaMinBlock). An
 * allocation above max_block/4 gets a dedicated "huge" block: one header
 * page then the payload, rounded up to the unit.
 *
 * Inside a normal block. The block is cut in 4 KiB pages. Its first pages
 * hold the header: a fixed struct (saBlockHeader), a page table with one
 * 4-byte entry per page and an allocation bitmap with 512 bits per page.
 * The other pages are grouped in:
 *   - slabs: 1..5 pages cut in equal chunks of one of 39 size classes
 *     (jemalloc's small classes as Redis builds it): 8 to 64 bytes in
 *     steps of 8, then four classes per power of two up to 14336 (at most
 *     25% internal waste above 64 bytes; a slab is sized so
 *     that at most 1/8 of it is left over at its end). Chunk i of a slab is
 *     bit i of the bitmap words of the slab's pages.
 *   - runs: the whole pages of one allocation from 14 KiB to max_block/4.
 *   - free spans of pages.
 * The page table says, for every page: header, free, page j of a slab of
 * class c, first page of a run of n pages, or page j of a run. So the usable
 * size of a pointer is found in O(1), and everything needed to understand
 * the block lives in the block, in host byte order (blocks only travel
 * between hosts of one architecture; the magic number catches a byte order
 * mismatch). A block copied byte for byte into another process is
 * self-describing: slotAllocAdoptBlock() validates the header, the page
 * table and the bitmap, then rebuilds the process-local state from them.
 *
 * Free lists. Each slot has an arena with, per size class, a list of the
 * slabs that have free chunks (allocating takes the first one and the first
 * zero bit of its bitmap: at most four words to scan for a one-page slab),
 * and per span length a list of free page spans (exact up to 32 pages, then
 * per power of two, first fit), both spanning all blocks of the slot. These
 * lists, the per-page records linking them and the counters are
 * process-local (libc heap, never zmalloc, to avoid recursion), never
 * written into blocks: a shipped block carries no foreign pointers. A slab
 * whose last chunk is freed gives its pages back to the spans, unless it is
 * the only slab of its class with free chunks (one add/delete of a key must
 * not create and destroy a slab every time). Free spans coalesce with
 * their neighbours through boundary tags in the page table.
 *
 * Empty blocks. When the last allocation of a block is freed, a huge block
 * is released at once. A normal block becomes the slot's cached empty block
 * if the slot has none (if it has one, the smaller of the two is kept and
 * the other released): a slot growing and shrinking around a block boundary
 * does not commit and release memory on every key. So at most one empty
 * block per slot stays committed; slotAllocTrim() releases them all (after
 * a flush, or when memory is tight) and stats report them.
 *
 * Slot groups. An arena is a set of blocks with its free lists; its id is
 * one of 0..16383 and each slot has one (sa.arena_of): slot s starts in
 * arena s. slotAllocMapSlot() points a slot at another arena, so that
 * several slots can share one: their partly used slab pages and the
 * unused tail of the newest block are paid once per group instead of once
 * per slot, which is what makes blocks cost little for small slots
 * (docs/DESIGN.md, "Placement and migration"). Every block records its
 * arena's id (header field 'slot', kept under that name for the layout),
 * frees go to the block's arena, and a realloc stays in it; only new
 * allocations follow the map. So a slot mapped elsewhere keeps its old
 * allocations where they were until the placement layer moves them, and
 * everything the API does "for a slot" (list, reserve, adopt into,
 * release its blocks) it does for the slot's arena, that is for the
 * whole group: the caller makes sure that is what it means. With the
 * identity map (the default) an arena is its slot's.
 *
 * Locking. Each slot arena has a mutex, taken by every operation on the
 * slot, including allocations (main thread only in Redis) and frees (any
 * thread: lazyfree frees objects on a BIO thread). A global mutex protects
 * the extent lists, the descriptor table and writes to the unit table; it
 * is taken to create or release a block or an arena and to read stats,
 * briefly, and when an arena mutex is needed too that one is taken first.
 * Lookups (Owns, ArenaOf, BlockOf, UsableSize) take no
 * lock: unit table entries are published with release stores after the
 * descriptor is filled, and what a lookup reads about a live allocation
 * (descriptor, its page table entry) does not change while it is live.
 * Global counters are relaxed atomics, updated under the arena mutexes.
 *
 * Draining. slotAllocDrainBlock() takes a block's free slabs and spans off
 * its arena's lists (the page table still describes them), so nothing new
 * is allocated in it; slot compaction moves its live allocations out, and
 * a draining block that empties is released at once instead of cached.
 *
 * Migration. The donor lists a slot's blocks (slotAllocSlotBlocks) and
 * ships them. The recipient creates "detached" blocks of the same sizes
 * (slotAllocReserveBlocks): committed, zero, part of no arena. Once the
 * bytes are in, slotAllocAdoptBlock() validates each one and makes it part
 * of the slot's arena, with its free space available for allocation. A
 * rejected block stays detached; slotAllocReleaseBlock() drops it, and
 * slotAllocReleaseSlot() drops every block of a slot at once (donor side
 * after the handover, or recipient side after an abort).
 *
 * Limits, for now: free pages inside a live block stay committed (only
 * whole blocks go back to the OS; sparse blocks are for compaction to
 * empty); allocation does not prefer fuller blocks; blocks are exchanged
 * between hosts of the same byte order only.
 *
 * Why one file of 3,000 lines: about 1,900 are the allocator, whose parts
 * (extents, blocks, slabs and spans, arenas, adoption) share one lock
 * order and one in-block layout and are best read together; the other
 * 1,170 are its self-tests (REDIS_TEST: `redis-server test slotalloc`,
 * tests/c/slotalloc-test-main.c, the fuzzer), which check internal state
 * (descriptors, free lists, bitmaps) that no header exposes.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

/* mmap flags (MAP_ANONYMOUS, MAP_NORESERVE) and madvise() are not in strict
 * C11, which Redis compiles with. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "slotalloc.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ============================ Constants =================================== */

#define SA_PAGE_SHIFT 12
#define SA_PAGE_SIZE ((size_t)1 << SA_PAGE_SHIFT)
#define SA_UNIT_SHIFT 16
#define SA_UNIT_SIZE ((size_t)1 << SA_UNIT_SHIFT)
#define SA_MIN_CLASS SLOTALLOC_GRANULE  /* Smallest chunk, bitmap granule. */
#define SA_BITS_PER_PAGE (SA_PAGE_SIZE / SA_MIN_CLASS)
#define SA_WORDS_PER_PAGE (SA_BITS_PER_PAGE / 64)
#define SA_NUM_CLASSES 39
#define SA_SMALL_MAX 14336              /* Largest size class. */
#define SA_SLAB_MAX_PAGES 8             /* Search limit when sizing slabs. */
#define SA_MAX_BLOCK_PAGES (SLOTALLOC_MAX_BLOCK >> SA_PAGE_SHIFT)
#define SA_SPAN_EXACT 32                /* Span lists: exact lengths 1..32, */
#define SA_SPAN_BINS (SA_SPAN_EXACT + 10) /* then one per power of two. */
#define SA_EXT_EXACT 64                 /* Extent lists: exact 1..64 units, */
#define SA_EXT_BINS (SA_EXT_EXACT + 26) /* then one per power of two. */
#define SA_DESC_SHIFT 10                /* Descriptors come in chunks of 1024. */
#define SA_DESC_CHUNK ((uint32_t)1 << SA_DESC_SHIFT)
#define SA_NONE UINT32_MAX

#define SA_BLOCK_MAGIC 0x314b4c42544f4c53ULL /* "SLOTBLK1" in LE memory. */
#define SA_BLOCK_VERSION 2             /* 2: jemalloc's classes, 512 bits per page. */
#define SA_HDR_HUGE 1                   /* saBlockHeader.flags */

static_assert(SA_UNIT_SIZE == SLOTALLOC_UNIT_SIZE, "one unit size");
static_assert(SA_UNIT_SIZE % SA_PAGE_SIZE == 0, "units are whole pages");
static_assert(SA_BITS_PER_PAGE % 64 == 0, "a page owns whole bitmap words");
static_assert(SA_MAX_BLOCK_PAGES <= UINT16_MAX,
              "page table entries hold any page count of a normal block");
static_assert(SA_NUM_CLASSES <= UINT8_MAX, "class ids fit a byte");
static_assert(SA_SMALL_MAX < SLOTALLOC_UNIT_SIZE / 4,
              "with the smallest max_block, runs still exist above classes");
static_assert((SA_MAX_BLOCK_PAGES >> (SA_SPAN_BINS - SA_SPAN_EXACT + 5)) == 0,
              "a span as large as a block has a list");
static_assert(SA_EXT_BINS - SA_EXT_EXACT + 6 >= 32,
              "any extent of up to 2^32 units has a list");

/* ======================= In-block layout (shipped) ======================== */

/* The header at the start of every block. Fixed layout, host byte order;
 * bump SA_BLOCK_VERSION on any change. */
typedef struct saBlockHeader {
    uint64_t magic;         /* SA_BLOCK_MAGIC */
    uint32_t version;       /* SA_BLOCK_VERSION */
    uint32_t flags;         /* SA_HDR_HUGE or 0 */
    uint64_t block_size;    /* Bytes, multiple of the unit. */
    uint64_t origin;        /* Address of the block in the process that
                             * last owned it (rewritten at adoption). */
    uint32_t page_size;     /* SA_PAGE_SIZE */
    uint32_t npages;        /* block_size / page_size */
    uint32_t hdr_pages;     /* Pages taken by this header and its tables. */
    uint32_t pagetab_off;   /* Offset of the page table (0 if huge). */
    uint32_t bitmap_off;    /* Offset of the bitmap (0 if huge). */
    uint32_t class_sig;     /* Fingerprint of the size class table. */
    uint32_t slot;          /* Owning arena's id (a slot number). */
    uint32_t reserved;      /* Zero. */
} saBlockHeader;

static_assert(sizeof(saBlockHeader) == 64, "header is one cache line");
static_assert(offsetof(saBlockHeader, block_size) == 16, "fixed layout");
static_assert(offsetof(saBlockHeader, page_size) == 32, "fixed layout");
static_assert(offsetof(saBlockHeader, class_sig) == 52, "fixed layout");
static_assert(offsetof(saBlockHeader, reserved) == 60, "fixed layout");

/* Page table entry kinds. A zeroed table is all free pages. */
#define SA_PG_FREE 0        /* arg: span length on a span's first and last
                             * page, 0 elsewhere. */
#define SA_PG_HEADER 1
#define SA_PG_SLAB 2        /* cls: class; arg: index of the page in its slab */
#define SA_PG_RUN 3         /* First page of a run; arg: pages in the run. */
#define SA_PG_RUN_CONT 4    /* arg: index of the page in its run. */

typedef struct saPageEntry {
    uint8_t kind;
    uint8_t cls;            /* 0 unless kind is SA_PG_SLAB. */
    uint16_t arg;
} saPageEntry;

static_assert(sizeof(saPageEntry) == 4, "fixed layout");

/* ======================= Process-local state ============================== */

/* Runtime record of a page that heads a slab or a free span: links it in
 * its arena list. Records of other pages are unused. */
typedef struct saPageInfo {
    struct saPageInfo *prev, *next;
    struct saBlock *block;
    uint32_t page;          /* Index of this page in its block. */
    uint16_t nfree;         /* Slab: free chunks. */
    uint16_t hint;          /* Slab: no free chunk below this bitmap word. */
} saPageInfo;

#define SA_BLOCK_UNUSED 0   /* Descriptor on the free list. */
#define SA_BLOCK_ACTIVE 1   /* Part of a slot arena. */
#define SA_BLOCK_DETACHED 2 /* Reserved for a migration, not adopted. */
#define SA_BLOCK_RETIRED 3  /* Given up, its pages not yet returned
                             * (slotAllocRetireSlot, slotAllocPurgeRetired). */

typedef struct saBlock {
    char *base;             /* First byte (the header). */
    size_t size;
    saPageEntry *pt;        /* In-block page table (NULL if huge/detached). */
    uint64_t *bitmap;       /* In-block bitmap (NULL if huge/detached). */
    saPageInfo *pinfo;      /* One record per page (NULL if huge). */
    struct saBlock *prev, *next; /* Arena list, or descriptor free list. */
    size_t used_bytes, live;
    uint32_t id, npages, hdr_pages;
    uint32_t free_pages;    /* Pages in free spans. */
    int arena;              /* Id of the arena owning it. */
    uint8_t state, huge;
    uint8_t draining;       /* Being emptied: its free space is not on the
                             * arena's lists, so nothing new lands in it. */
} saBlock;

typedef struct saArena {
    pthread_mutex_t lock;
    int id;                 /* Its index in sa.arenas (see "Slot groups"). */
    saBlock *blocks;        /* Active blocks, newest first. */
    saBlock *detached;
    saBlock *empty;         /* Cached empty block, or NULL. */
    size_t nblocks, nnormal, nhuge, block_bytes, used_bytes, live;
    size_t ndetached, detached_bytes;
    int mixed;              /* A slot was mapped away while the arena held
                             * allocations: they may be that slot's, so
                             * the arena is not only its slots' until it
                             * empties, or until each such slot came back:
                             * those slots are left[0..nleft) ("Slot
                             * groups"). */
    uint16_t *left;
    int nleft, cap_left;
    saPageInfo *partial[SA_NUM_CLASSES]; /* Slabs with free chunks. */
    saPageInfo *spans[SA_SPAN_BINS];     /* Free page spans. */
} saArena;

/* Boundary tag of a unit: len is set on the first and last unit of a free
 * extent, 0 on every other unit; prev/next link the extent's first unit in
 * its list. */
typedef struct saExtTag {
    uint32_t len, prev, next;
} saExtTag;

static struct {
    int initialized;
    char *map;              /* What mmap returned, and its length. */
    size_t map_bytes;
    char *base;             /* Unit aligned start of the range. */
    size_t range_bytes;
    uint32_t nunits;
    size_t min_block, max_block, large_max;
    _Atomic uint32_t *unit_block;   /* Unit -> block id. */
    saExtTag *ext;
    uint32_t ext_bin[SA_EXT_BINS];
    size_t ext_free_units;
    saBlock **desc;         /* Descriptor chunks, allocated on demand. */
    uint32_t desc_nchunks, desc_next;
    saBlock *desc_free;
    saBlock *retired;       /* Retired blocks, linked by next. */
    pthread_mutex_t lock;   /* The global lock (see DESIGN). */
    _Atomic(saArena *) arenas[SLOTALLOC_NUM_SLOTS];
    /* Slot -> id of its arena, and how many slots each id has (written
     * under sa.lock by slotAllocMapSlot; read without it). */
    _Atomic uint16_t arena_of[SLOTALLOC_NUM_SLOTS];
    uint16_t members[SLOTALLOC_NUM_SLOTS];
    _Atomic size_t blocks, huge_blocks, detached_blocks, cached_empty;
    _Atomic size_t block_bytes, used_bytes, live, meta_bytes, retired_bytes;
} sa;

static void (*sa_panic_handler)(const char *msg);

/* Size class tables, filled by saClassesInit(), constant afterwards. */
static uint32_t sa_class_size[SA_NUM_CLASSES];
static uint8_t sa_class_pages[SA_NUM_CLASSES];
static uint16_t sa_class_chunks[SA_NUM_CLASSES];
static uint32_t sa_class_recip[SA_NUM_CLASSES]; /* ceil(2^32 / size) */
static uint32_t sa_class_sig;

#define saStatAdd(f, n) atomic_fetch_add_explicit(&sa.f, (n), memory_order_relaxed)
#define saStatSub(f, n) atomic_fetch_sub_explicit(&sa.f, (n), memory_order_relaxed)
#define saStatGet(f) atomic_load_explicit(&sa.f, memory_order_relaxed)

static void saPanic(const char *fmt, ...)
    __attribute__((noreturn, format(printf, 1, 2)));

static void saPanic(const char *fmt, ...) {
    char msg[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (sa_panic_handler) sa_panic_handler(msg);
    fprintf(stderr, "slotalloc: %s\n", msg);
    fflush(stderr);
    abort();
}

void slotAllocSetPanicHandler(void (*handler)(const char *msg)) {
    sa_panic_handler = handler;
}

static inline int saLog2(uint64_t x) {
    return 63 - __builtin_clzll(x);
}

/* ============================ Size classes ================================ */

/* Class sizes: 8..64 in steps of 8, then for every power of two 2^k from 64
 * on, 2^k + j * 2^(k-2) for j = 1..4, up to 14336: jemalloc's small classes
 * as Redis builds it (--with-lg-quantum=3, 4 KiB pages), one for one. So an
 * allocation has the same usable size here and in the general heap:
 * used_memory does not grow when keys move into blocks, and a key copied
 * back from a block to the heap (slotCompactCopy knows only the usable
 * size) lands in the class it came from. With 16, 32, 48 ... as the classes
 * below 128, YCSB's records (ten 6-byte field names, 8 bytes each in
 * jemalloc) took 6 % more used_memory in blocks, and kept it after going
 * back to the heap. Each slab gets the fewest pages that leave at most 1/8
 * of it unused. The signature lets adoption refuse a block cut with another
 * class table. */
static void saClassesInit(void) {
    uint32_t sig = 2166136261u;

    for (int c = 0; c < SA_NUM_CLASSES; c++) {
        uint32_t size, pages;
        if (c < 8) {
            size = SA_MIN_CLASS * (c + 1);
        } else {
            int k = 6 + (c - 8) / 4, j = (c - 8) % 4;
            size = (1u << k) + (j + 1) * (1u << (k - 2));
        }
        for (pages = 1; pages < SA_SLAB_MAX_PAGES; pages++) {
            size_t bytes = pages * SA_PAGE_SIZE;
            if (bytes >= size && (bytes % size) * 8 <= bytes) break;
        }
        sa_class_size[c] = size;
        sa_class_pages[c] = pages;
        sa_class_chunks[c] = pages * SA_PAGE_SIZE / size;
        sa_class_recip[c] = (uint32_t)(((1ULL << 32) + size - 1) / size);
        sig = (sig ^ size) * 16777619u;
        sig = (sig ^ pages) * 16777619u;
    }
    sa_class_sig = sig;
}

/* The chunk of class c at byte soff of its slab: soff / size without a
 * division (a frees' and a migration's pointer checks do it for every
 * allocation). Exact for soff and size below 2^16 (the error of the
 * reciprocal stays under 1/size); slabs are at most SA_SLAB_MAX_PAGES
 * pages. Returns -1 if soff is not the start of a chunk or is past the
 * slab's chunks. */
static inline long saChunkIndex(int c, size_t soff) {
    if (soff >= (size_t)sa_class_chunks[c] * sa_class_size[c]) return -1;
    uint32_t idx = (uint32_t)(((uint64_t)soff * sa_class_recip[c]) >> 32);
    return idx * sa_class_size[c] == soff ? (long)idx : -1;
}

/* Smallest class holding 'size' bytes (size <= SA_SMALL_MAX). */
static inline int saClassOf(size_t size) {
    if (size <= 64) return size ? (int)((size + 7) >> 3) - 1 : 0;
    size_t s = size - 1;
    int k = saLog2(s);
    return 8 + (k - 6) * 4 + (int)((s >> (k - 2)) & 3);
}

/* ===================== Virtual range: extents ============================= */

/* All extent functions run with the global lock held. */

static int saExtBin(uint32_t len) {
    if (len <= SA_EXT_EXACT) return len - 1;
    return SA_EXT_EXACT + saLog2(len) - 6;
}

static void saExtLink(uint32_t u, uint32_t len) {
    int bin = saExtBin(len);

    sa.ext[u].len = len;
    sa.ext[u + len - 1].len = len;
    sa.ext[u].prev = SA_NONE;
    sa.ext[u].next = sa.ext_bin[bin];
    if (sa.ext_bin[bin] != SA_NONE) sa.ext[sa.ext_bin[bin]].prev = u;
    sa.ext_bin[bin] = u;
    sa.ext_free_units += len;
}

static void saExtUnlink(uint32_t u) {
    uint32_t len = sa.ext[u].len;
    saExtTag *t = &sa.ext[u];

    if (t->prev != SA_NONE) sa.ext[t->prev].next = t->next;
    else sa.ext_bin[saExtBin(len)] = t->next;
    if (t->next != SA_NONE) sa.ext[t->next].prev = t->prev;
    sa.ext[u].len = 0;
    sa.ext[u + len - 1].len = 0;
    sa.ext_free_units -= len;
}

/* First fit of n units. Returns the first unit, or SA_NONE if no free
 * extent is large enough. */
static uint32_t saExtAlloc(uint32_t n) {
    for (int bin = saExtBin(n); bin < SA_EXT_BINS; bin++) {
        for (uint32_t u = sa.ext_bin[bin]; u != SA_NONE; u = sa.ext[u].next) {
            uint32_t len = sa.ext[u].len;
            if (len < n) continue;
            saExtUnlink(u);
            if (len > n) saExtLink(u + n, len - n);
            return u;
        }
    }
    return SA_NONE;
}

/* Give back [u, u+n), merging with free neighbours: a set tag on unit u-1
 * can only be the last unit of a free extent, on unit u+n the first one. */
static void saExtFree(uint32_t u, uint32_t n) {
    if (u > 0 && sa.ext[u - 1].len) {
        uint32_t l = sa.ext[u - 1].len;
        saExtUnlink(u - l);
        u -= l;
        n += l;
    }
    if (u + n < sa.nunits && sa.ext[u + n].len) {
        uint32_t r = sa.ext[u + n].len;
        saExtUnlink(u + n);
        n += r;
    }
    saExtLink(u, n);
}

/* ========================= Block descriptors ============================== */

static inline saBlock *saDesc(uint32_t id) {
    return &sa.desc[id >> SA_DESC_SHIFT][id & (SA_DESC_CHUNK - 1)];
}

/* Global lock held. Ids start at 1; there are never more live blocks than
 * units, which bounds the chunk array sized at init. */
static saBlock *saDescAlloc(void) {
    saBlock *b = sa.desc_free;

    if (b) {
        sa.desc_free = b->next;
        return b;
    }
    uint32_t id = sa.desc_next, chunk = id >> SA_DESC_SHIFT;
    if (chunk >= sa.desc_nchunks) return NULL;
    if (!sa.desc[chunk]) {
        sa.desc[chunk] = calloc(SA_DESC_CHUNK, sizeof(saBlock));
        if (!sa.desc[chunk]) return NULL;
        saStatAdd(meta_bytes, SA_DESC_CHUNK * sizeof(saBlock));
    }
    sa.desc_next++;
    b = saDesc(id);
    b->id = id;
    return b;
}

/* Lock free: which block, if any, covers p. */
static inline saBlock *saLookup(const void *p) {
    uintptr_t off = (uintptr_t)p - (uintptr_t)sa.base;

    if ((uintptr_t)p < (uintptr_t)sa.base || off >= sa.range_bytes) return NULL;
    uint32_t id = atomic_load_explicit(&sa.unit_block[off >> SA_UNIT_SHIFT],
                                       memory_order_acquire);
    return id ? saDesc(id) : NULL;
}

/* Header geometry of a normal block of npages pages. */
static void saLayout(uint32_t npages, uint32_t *pt_off, uint32_t *bm_off,
                     uint32_t *hdr_pages) {
    size_t end;

    *pt_off = sizeof(saBlockHeader);
    *bm_off = (*pt_off + npages * sizeof(saPageEntry) + 63) & ~(size_t)63;
    end = *bm_off + (size_t)npages * SA_WORDS_PER_PAGE * sizeof(uint64_t);
    *hdr_pages = (end + SA_PAGE_SIZE - 1) >> SA_PAGE_SHIFT;
}

static uint32_t saDataPages(size_t size) {
    uint32_t pt_off, bm_off, hdr_pages, npages = size >> SA_PAGE_SHIFT;

    saLayout(npages, &pt_off, &bm_off, &hdr_pages);
    return npages - hdr_pages;
}

/* Create a block of 'size' bytes (a multiple of the unit) for 'slot' in the
 * given state: take units from the range, commit them read/write and
 * publish the block in the unit table. Its memory is zero. The caller holds
 * the slot's arena lock and links the block. Returns NULL when the range or
 * the OS has no room; never aborts. */
static saBlock *saBlockCreate(size_t size, int arena, int state) {
    uint32_t n = size >> SA_UNIT_SHIFT, u;
    saBlock *b = NULL;
    char *base;

    pthread_mutex_lock(&sa.lock);
    if ((u = saExtAlloc(n)) == SA_NONE) goto out;
    base = sa.base + ((size_t)u << SA_UNIT_SHIFT);
    if (mprotect(base, size, PROT_READ | PROT_WRITE) == -1) goto out_free_units;
    if ((b = saDescAlloc()) == NULL) goto out_protect;

    uint32_t id = b->id;
    memset(b, 0, sizeof(*b));
    b->id = id;
    b->base = base;
    b->size = size;
    b->npages = size >> SA_PAGE_SHIFT;
    b->arena = arena;
    b->state = state;
    for (uint32_t i = 0; i < n; i++)
        atomic_store_explicit(&sa.unit_block[u + i], id, memory_order_release);
    saStatAdd(blocks, 1);
    saStatAdd(block_bytes, size);
    if (state == SA_BLOCK_DETACHED) saStatAdd(detached_blocks, 1);
    goto out;

out_protect:
    mprotect(base, size, PROT_NONE);
out_free_units:
    saExtFree(u, n);
out:
    pthread_mutex_unlock(&sa.lock);
    return b;
}

/* The parts of giving a block up. A block is forgotten (no pointer lookup
 * finds it, it is no block any more in the figures) when it leaves its
 * arena; its pages go back to the OS (saBlockDropPages); then its units
 * and descriptor go back to the free lists (saBlockFreeUnits). Done at
 * once by saBlockDestroy(); a retired block is forgotten at once and the
 * rest is left to slotAllocPurgeRetired(), for another thread: returning
 * hundreds of MB of pages is a lot of kernel time. sa.lock is held for
 * Forget and FreeUnits. */
static void saBlockForget(saBlock *b) {
    uint32_t u = (b->base - sa.base) >> SA_UNIT_SHIFT, n = b->size >> SA_UNIT_SHIFT;

    for (uint32_t i = 0; i < n; i++)
        atomic_store_explicit(&sa.unit_block[u + i], 0, memory_order_release);
    saStatSub(blocks, 1);
    saStatSub(block_bytes, b->size);
    if (b->huge) saStatSub(huge_blocks, 1);
    if (b->state == SA_BLOCK_DETACHED) saStatSub(detached_blocks, 1);
}

/* Return the pages of len bytes of blocks at base to the OS and make the
 * range inaccessible again (in this order: once the pages are gone, the
 * mprotect() has no TLB entries to flush). */
static void saDropRange(char *base, size_t len) {
    if (madvise(base, len, MADV_DONTNEED) == -1 ||
        mprotect(base, len, PROT_NONE) == -1)
        saPanic("cannot release blocks at %p (%zu bytes): %s", (void *)base,
                len, strerror(errno));
}

static void saBlockDropPages(saBlock *b) {
    saDropRange(b->base, b->size);
}

static int saBlockBaseCmp(const void *x, const void *y) {
    const saBlock *a = *(saBlock *const *)x, *b = *(saBlock *const *)y;
    return a->base < b->base ? -1 : a->base > b->base;
}

static void saBlockFreeUnits(saBlock *b) {
    saExtFree((b->base - sa.base) >> SA_UNIT_SHIFT, b->size >> SA_UNIT_SHIFT);
    b->state = SA_BLOCK_UNUSED;
    b->next = sa.desc_free;
    sa.desc_free = b;
}

static void saBlockFreeMeta(saBlock *b) {
    if (b->pinfo) {
        free(b->pinfo);
        b->pinfo = NULL;
        saStatSub(meta_bytes, (size_t)b->npages * sizeof(saPageInfo));
    }
}

/* Give a block's memory back to the OS and its units and descriptor back
 * to the free lists. The block must already be unlinked from its arena. */
static void saBlockDestroy(saBlock *b) {
    saBlockFreeMeta(b);
    pthread_mutex_lock(&sa.lock);
    saBlockDropPages(b);
    saBlockForget(b);
    saBlockFreeUnits(b);
    pthread_mutex_unlock(&sa.lock);
}

/* saBlockDestroy() but for the pages and the units, which wait for
 * slotAllocPurgeRetired(): until then nothing else can use its addresses. */
static void saBlockRetire(saBlock *b) {
    saBlockFreeMeta(b);
    pthread_mutex_lock(&sa.lock);
    saBlockForget(b);
    b->state = SA_BLOCK_RETIRED;
    b->next = sa.retired;
    sa.retired = b;
    saStatAdd(retired_bytes, b->size);
    pthread_mutex_unlock(&sa.lock);
}

/* saBlockRetire() or saBlockDestroy(). */
static void saBlockGiveUp(saBlock *b, int retire) {
    if (retire) saBlockRetire(b);
    else saBlockDestroy(b);
}

/* Write a fresh header into block b and point the descriptor at its
 * tables. */
static void saHeaderInit(saBlock *b, int huge) {
    saBlockHeader *h = (saBlockHeader *)b->base;
    uint32_t pt_off = 0, bm_off = 0, hdr_pages = 1;

    if (!huge) saLayout(b->npages, &pt_off, &bm_off, &hdr_pages);
    memset(b->base, 0, (size_t)hdr_pages << SA_PAGE_SHIFT);
    h->magic = SA_BLOCK_MAGIC;
    h->version = SA_BLOCK_VERSION;
    h->flags = huge ? SA_HDR_HUGE : 0;
    h->block_size = b->size;
    h->origin = (uintptr_t)b->base;
    h->page_size = SA_PAGE_SIZE;
    h->npages = b->npages;
    h->hdr_pages = hdr_pages;
    h->pagetab_off = pt_off;
    h->bitmap_off = bm_off;
    h->class_sig = sa_class_sig;
    h->slot = b->arena;
    b->huge = huge;
    b->hdr_pages = hdr_pages;
    if (!huge) {
        b->pt = (saPageEntry *)(b->base + pt_off);
        b->bitmap = (uint64_t *)(b->base + bm_off);
        for (uint32_t i = 0; i < hdr_pages; i++)
            b->pt[i] = (saPageEntry){SA_PG_HEADER, 0, 0};
    }
}

/* ============================ Slot arenas ================================= */

/* The arena with id 'id', created on demand if 'create'. NULL if it does
 * not exist (or cannot be allocated). */
static saArena *saArenaGet(int id, int create) {
    saArena *a = atomic_load_explicit(&sa.arenas[id], memory_order_acquire);

    if (a || !create) return a;
    pthread_mutex_lock(&sa.lock);
    a = atomic_load_explicit(&sa.arenas[id], memory_order_relaxed);
    if (!a && (a = calloc(1, sizeof(*a))) != NULL) {
        pthread_mutex_init(&a->lock, NULL);
        a->id = id;
        saStatAdd(meta_bytes, sizeof(*a));
        atomic_store_explicit(&sa.arenas[id], a, memory_order_release);
    }
    pthread_mutex_unlock(&sa.lock);
    return a;
}

/* Id of the arena that slot's new allocations go to (slot in range). */
static inline int saSlotArena(int slot) {
    return atomic_load_explicit(&sa.arena_of[slot], memory_order_relaxed);
}

/* The arena of 'slot' (see saArenaGet). */
static saArena *saSlotArenaGet(int slot, int create) {
    return saArenaGet(saSlotArena(slot), create);
}

static void saListPush(saPageInfo **head, saPageInfo *s) {
    s->prev = NULL;
    s->next = *head;
    if (*head) (*head)->prev = s;
    *head = s;
}

static void saListUnlink(saPageInfo **head, saPageInfo *s) {
    if (s->prev) s->prev->next = s->next;
    else *head = s->next;
    if (s->next) s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

static void saBlockLink(saBlock **head, saBlock *b) {
    b->prev = NULL;
    b->next = *head;
    if (*head) (*head)->prev = b;
    *head = b;
}

static void saBlockUnlink(saBlock **head, saBlock *b) {
    if (b->prev) b->prev->next = b->next;
    else *head = b->next;
    if (b->next) b->next->prev = b->prev;
    b->prev = b->next = NULL;
}

static int saSpanBin(uint32_t len) {
    if (len <= SA_SPAN_EXACT) return len - 1;
    return SA_SPAN_EXACT + saLog2(len) - 5;
}

/* Make pages [h, h+len) of b a free span: tags on its ends, list entry. */
static void saSpanInsert(saArena *a, saBlock *b, uint32_t h, uint32_t len) {
    saPageInfo *s = &b->pinfo[h];

    b->pt[h] = (saPageEntry){SA_PG_FREE, 0, (uint16_t)len};
    b->pt[h + len - 1] = (saPageEntry){SA_PG_FREE, 0, (uint16_t)len};
    s->block = b;
    s->page = h;
    if (!b->draining) saListPush(&a->spans[saSpanBin(len)], s);
}

static void saSpanRemove(saArena *a, saBlock *b, uint32_t h) {
    if (!b->draining) saListUnlink(&a->spans[saSpanBin(b->pt[h].arg)], &b->pinfo[h]);
}

/* Pages [h, h+n) of b become free, merged with free neighbours. */
static void saPagesFree(saArena *a, saBlock *b, uint32_t h, uint32_t n) {
    uint32_t start = h, len = n;

    for (uint32_t i = 0; i < n; i++) b->pt[h + i] = (saPageEntry){SA_PG_FREE, 0, 0};
    if (h > b->hdr_pages && b->pt[h - 1].kind == SA_PG_FREE) {
        uint32_t l = b->pt[h - 1].arg;
        start = h - l;
        saSpanRemove(a, b, start);
        len += l;
    }
    if (h + n < b->npages && b->pt[h + n].kind == SA_PG_FREE) {
        uint32_t r = b->pt[h + n].arg;
        saSpanRemove(a, b, h + n);
        len += r;
    }
    saSpanInsert(a, b, start, len);
    b->free_pages += n;
}

static void saArenaLinkBlock(saArena *a, saBlock *b) {
    saBlockLink(&a->blocks, b);
    a->nblocks++;
    a->block_bytes += b->size;
    if (b->huge) {
        a->nhuge++;
        saStatAdd(huge_blocks, 1);
    } else {
        a->nnormal++;
    }
}

static void saSetEmpty(saArena *a, saBlock *b) {
    if (a->empty && !b) saStatSub(cached_empty, 1);
    if (!a->empty && b) saStatAdd(cached_empty, 1);
    a->empty = b;
}

/* Unlink an active block from its arena (its spans and slabs included),
 * drop its counters and release it to the OS (retire: leave that to
 * slotAllocPurgeRetired). Its allocations, if any, become invalid. */
static void saArenaDropBlock(saArena *a, saBlock *b, int retire) {
    if (!b->huge) {
        uint32_t i = b->hdr_pages;
        while (i < b->npages) {
            saPageEntry e = b->pt[i];
            if (e.kind == SA_PG_FREE) {
                saSpanRemove(a, b, i);
                i += e.arg;
            } else if (e.kind == SA_PG_SLAB) {
                if (b->pinfo[i].nfree && !b->draining)
                    saListUnlink(&a->partial[e.cls], &b->pinfo[i]);
                i += sa_class_pages[e.cls];
            } else {
                i += e.arg;
            }
        }
        a->nnormal--;
    } else {
        a->nhuge--;
    }
    if (a->empty == b) saSetEmpty(a, NULL);
    saBlockUnlink(&a->blocks, b);
    a->nblocks--;
    a->block_bytes -= b->size;
    a->used_bytes -= b->used_bytes;
    a->live -= b->live;
    if (a->live == 0) a->mixed = a->nleft = 0;
    saStatSub(used_bytes, b->used_bytes);
    saStatSub(live, b->live);
    saBlockGiveUp(b, retire);
}

static void saArenaReleaseBlock(saArena *a, saBlock *b) {
    saArenaDropBlock(a, b, 0);
}

/* A block just lost its last allocation: apply the empty block policy
 * described at the top of the file. */
static void saBlockEmptied(saArena *a, saBlock *b) {
    if (b->huge || b->draining) {
        saArenaReleaseBlock(a, b);
    } else if (!a->empty) {
        saSetEmpty(a, b);
    } else if (b->size < a->empty->size) {
        saBlock *old = a->empty;
        a->empty = b;       /* Same count of cached blocks. */
        saArenaReleaseBlock(a, old);
    } else {
        saArenaReleaseBlock(a, b);
    }
}

static void saBlockUse(saArena *a, saBlock *b, size_t bytes) {
    if (a->empty == b) saSetEmpty(a, NULL);
    b->live++;
    b->used_bytes += bytes;
    a->live++;
    a->used_bytes += bytes;
    saStatAdd(live, 1);
    saStatAdd(used_bytes, bytes);
}

static void saBlockUnuse(saArena *a, saBlock *b, size_t bytes) {
    b->live--;
    b->used_bytes -= bytes;
    a->live--;
    a->used_bytes -= bytes;
    if (a->live == 0) a->mixed = a->nleft = 0;
    saStatSub(live, 1);
    saStatSub(used_bytes, bytes);
    if (b->live == 0) saBlockEmptied(a, b);
}

/* The first block size of arena a: min_block, doubled for every factor of
 * two by which more than 64 slots share the arena (slot groups: 256 slots,
 * 4 min_blocks), up to max_block. Each block costs its header pages and
 * leaves a partly used slab page per size class, whatever its size (pages
 * never touched are not resident); an arena that G slots fill would pay
 * that for every doubling from min_block up to its size: with 200,000
 * strings of 32 B in groups of 256, three blocks of 64, 128 and 256 KiB
 * per arena left 22 KiB of slack each, one of 256 KiB 14 KiB. */
static size_t saArenaMinBlock(saArena *a) {
    size_t size = sa.min_block;

    for (uint32_t m = sa.members[a->id]; m > 64 && size < sa.max_block; m >>= 1) size <<= 1;
    return size;
}

/* Create the slot's next normal block, large enough for 'need' data pages:
 * saArenaMinBlock() doubled once per normal block the slot has, up to max_block
 * (smaller if the range has no room for that, but never too small for
 * 'need'). Its data pages form one free span. NULL if no block fits. */
static saBlock *saArenaNewBlock(saArena *a, uint32_t need) {
    size_t size = saArenaMinBlock(a), smallest;
    saPageInfo *pinfo;
    saBlock *b;

    while (saDataPages(size) < need && size < sa.max_block) size <<= 1;
    if (saDataPages(size) < need) return NULL;
    smallest = size;
    for (size_t i = 0; i < a->nnormal && size < sa.max_block; i++) size <<= 1;
    /* When the range is nearly full, a smaller block is better than none. */
    while ((b = saBlockCreate(size, a->id, SA_BLOCK_ACTIVE)) == NULL) {
        if (size == smallest) return NULL;
        size >>= 1;
    }
    if ((pinfo = calloc(size >> SA_PAGE_SHIFT, sizeof(*pinfo))) == NULL) {
        saBlockDestroy(b);
        return NULL;
    }
    b->pinfo = pinfo;
    saStatAdd(meta_bytes, (size_t)b->npages * sizeof(saPageInfo));
    saHeaderInit(b, 0);
    saArenaLinkBlock(a, b);
    b->free_pages = b->npages - b->hdr_pages;
    saSpanInsert(a, b, b->hdr_pages, b->free_pages);
    return b;
}

/* Find n contiguous free pages in the slot (creating a block if needed) and
 * take them out of the free spans. The caller fills their page table
 * entries. Returns 0, or -1 when no block can be created. */
static int saArenaAllocPages(saArena *a, uint32_t n, saBlock **bp, uint32_t *hp) {
    saPageInfo *s = NULL;

    for (int tries = 0; tries < 2 && !s; tries++) {
        for (int bin = saSpanBin(n); bin < SA_SPAN_BINS && !s; bin++) {
            for (s = a->spans[bin]; s; s = s->next)
                if (s->block->pt[s->page].arg >= n) break;
        }
        if (!s && (tries || saArenaNewBlock(a, n) == NULL)) return -1;
    }
    saBlock *b = s->block;
    uint32_t h = s->page, len = b->pt[h].arg;
    saSpanRemove(a, b, h);
    if (len > n) saSpanInsert(a, b, h + n, len - n);
    b->free_pages -= n;
    *bp = b;
    *hp = h;
    return 0;
}

static void *saAllocSmall(saArena *a, int c) {
    saPageInfo *s = a->partial[c];
    saBlock *b;
    uint32_t h;

    if (!s) {
        uint32_t np = sa_class_pages[c];
        if (saArenaAllocPages(a, np, &b, &h) == -1) return NULL;
        for (uint32_t j = 0; j < np; j++)
            b->pt[h + j] = (saPageEntry){SA_PG_SLAB, (uint8_t)c, (uint16_t)j};
        s = &b->pinfo[h];
        s->block = b;
        s->page = h;
        s->nfree = sa_class_chunks[c];
        s->hint = 0;
        saListPush(&a->partial[c], s);
    }
    b = s->block;
    uint64_t *bm = b->bitmap + (size_t)s->page * SA_WORDS_PER_PAGE;
    uint32_t w = s->hint;
    while (bm[w] == ~0ULL) w++;
    uint32_t bit = __builtin_ctzll(~bm[w]);
    bm[w] |= 1ULL << bit;
    s->hint = w;
    if (--s->nfree == 0) saListUnlink(&a->partial[c], s);
    saBlockUse(a, b, sa_class_size[c]);
    return b->base + ((size_t)s->page << SA_PAGE_SHIFT) +
           (size_t)(w * 64 + bit) * sa_class_size[c];
}

static void *saAllocRun(saArena *a, uint32_t n) {
    saBlock *b;
    uint32_t h;

    if (saArenaAllocPages(a, n, &b, &h) == -1) return NULL;
    b->pt[h] = (saPageEntry){SA_PG_RUN, 0, (uint16_t)n};
    for (uint32_t j = 1; j < n; j++)
        b->pt[h + j] = (saPageEntry){SA_PG_RUN_CONT, 0, (uint16_t)j};
    saBlockUse(a, b, (size_t)n << SA_PAGE_SHIFT);
    return b->base + ((size_t)h << SA_PAGE_SHIFT);
}

static void *saAllocHuge(saArena *a, size_t size) {
    saBlock *b;

    if (size > sa.range_bytes) return NULL;
    size = (size + SA_PAGE_SIZE + SA_UNIT_SIZE - 1) & ~(SA_UNIT_SIZE - 1);
    if ((b = saBlockCreate(size, a->id, SA_BLOCK_ACTIVE)) == NULL) return NULL;
    saHeaderInit(b, 1);
    saArenaLinkBlock(a, b);
    saBlockUse(a, b, size - SA_PAGE_SIZE);
    return b->base + SA_PAGE_SIZE;
}

/* The usable size an allocation of 'size' bytes gets. */
static size_t saFitSize(size_t size) {
    if (size <= SA_SMALL_MAX) return sa_class_size[saClassOf(size)];
    if (size <= sa.large_max)
        return (size + SA_PAGE_SIZE - 1) & ~(SA_PAGE_SIZE - 1);
    return ((size + SA_PAGE_SIZE + SA_UNIT_SIZE - 1) & ~(SA_UNIT_SIZE - 1)) -
           SA_PAGE_SIZE;
}

static void *saArenaAlloc(saArena *a, size_t size) {
    if (size <= SA_SMALL_MAX) return saAllocSmall(a, saClassOf(size));
    if (size <= sa.large_max)
        return saAllocRun(a, (size + SA_PAGE_SIZE - 1) >> SA_PAGE_SHIFT);
    return saAllocHuge(a, size);
}

/* Free p, an allocation in active block b of arena a (lock held). Anything
 * but the start of a live allocation is a caller bug: panic. */
static void saArenaFree(saArena *a, saBlock *b, char *p) {
    size_t off = p - b->base, bytes;

    if (b->huge) {
        if (off != SA_PAGE_SIZE) saPanic("free of %p: not a block start", (void *)p);
        saBlockUnuse(a, b, b->size - SA_PAGE_SIZE);
        return;
    }
    uint32_t pg = off >> SA_PAGE_SHIFT;
    saPageEntry e = b->pt[pg];
    if (pg < b->hdr_pages) saPanic("free of %p: inside a block header", (void *)p);
    if (e.kind == SA_PG_SLAB) {
        uint32_t h = pg - e.arg, c = e.cls;
        long idx = saChunkIndex(c, off - ((size_t)h << SA_PAGE_SHIFT));
        if (idx < 0) saPanic("free of %p: not a chunk start", (void *)p);
        uint64_t *word = b->bitmap + (size_t)h * SA_WORDS_PER_PAGE + idx / 64;
        uint64_t mask = 1ULL << (idx % 64);
        if (!(*word & mask)) saPanic("double free of %p", (void *)p);
        *word &= ~mask;
        saPageInfo *s = &b->pinfo[h];
        if (s->hint > idx / 64) s->hint = idx / 64;
        if (s->nfree++ == 0 && !b->draining) saListPush(&a->partial[c], s);
        /* An empty slab goes back to the spans unless it is the only one
         * of its class with free chunks. */
        if (s->nfree == sa_class_chunks[c] && b->draining) {
            saPagesFree(a, b, h, sa_class_pages[c]);
        } else if (s->nfree == sa_class_chunks[c] && (a->partial[c] != s || s->next)) {
            saListUnlink(&a->partial[c], s);
            saPagesFree(a, b, h, sa_class_pages[c]);
        }
        bytes = sa_class_size[c];
    } else if (e.kind == SA_PG_RUN && (off & (SA_PAGE_SIZE - 1)) == 0) {
        saPagesFree(a, b, pg, e.arg);
        bytes = (size_t)e.arg << SA_PAGE_SHIFT;
    } else {
        saPanic("free of %p: not an allocation (double free?)", (void *)p);
    }
    saBlockUnuse(a, b, bytes);
}

/* ============================== Public API ================================ */

/* Reserve the range and set up the tables. Main thread, once, before any
 * other call. Returns -1 with errno EBUSY if already initialized, EINVAL
 * on bad sizes, ENOMEM if the range cannot be mapped. */
int slotAllocInit(size_t reserve, size_t min_block, size_t max_block) {
    long ps = sysconf(_SC_PAGESIZE);

    if (sa.initialized) {
        errno = EBUSY;
        return -1;
    }
    if (!min_block) min_block = SLOTALLOC_DEFAULT_MIN_BLOCK;
    if (!max_block) max_block = SLOTALLOC_DEFAULT_MAX_BLOCK;
    reserve &= ~(SA_UNIT_SIZE - 1);
    if ((min_block & (min_block - 1)) || (max_block & (max_block - 1)) ||
        min_block < SA_UNIT_SIZE || max_block < min_block ||
        max_block > SLOTALLOC_MAX_BLOCK || reserve < min_block ||
        (reserve >> SA_UNIT_SHIFT) >= SA_NONE - SA_DESC_CHUNK ||
        ps <= 0 || SA_UNIT_SIZE % (size_t)ps) {
        errno = EINVAL;
        return -1;
    }
    saClassesInit();
    sa.min_block = min_block;
    sa.max_block = max_block;
    sa.large_max = max_block / 4;
    sa.nunits = reserve >> SA_UNIT_SHIFT;
    sa.range_bytes = reserve;
    sa.map_bytes = reserve + SA_UNIT_SIZE;
    sa.map = mmap(NULL, sa.map_bytes, PROT_NONE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (sa.map == MAP_FAILED) goto err;
    sa.base = (char *)(((uintptr_t)sa.map + SA_UNIT_SIZE - 1) & ~(SA_UNIT_SIZE - 1));
    sa.unit_block = mmap(NULL, (size_t)sa.nunits * sizeof(uint32_t),
                         PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (sa.unit_block == MAP_FAILED) goto err_range;
    sa.ext = mmap(NULL, (size_t)sa.nunits * sizeof(saExtTag), PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (sa.ext == MAP_FAILED) goto err_units;
    sa.desc_nchunks = (sa.nunits + 1) / SA_DESC_CHUNK + 1;
    if ((sa.desc = calloc(sa.desc_nchunks, sizeof(saBlock *))) == NULL) goto err_ext;
    sa.desc_next = 1;
    pthread_mutex_init(&sa.lock, NULL);
    for (int i = 0; i < SA_EXT_BINS; i++) sa.ext_bin[i] = SA_NONE;
    saExtLink(0, sa.nunits);
    for (int slot = 0; slot < SLOTALLOC_NUM_SLOTS; slot++) {
        atomic_store_explicit(&sa.arena_of[slot], (uint16_t)slot, memory_order_relaxed);
        sa.members[slot] = 1;
    }
    sa.initialized = 1;
    return 0;

err_ext:
    munmap(sa.ext, (size_t)sa.nunits * sizeof(saExtTag));
err_units:
    munmap((void *)sa.unit_block, (size_t)sa.nunits * sizeof(uint32_t));
err_range:
    munmap(sa.map, sa.map_bytes);
err:
    memset(&sa, 0, sizeof(sa));
    errno = ENOMEM;
    return -1;
}

/* Unmap everything. Every pointer handed out becomes invalid. No other
 * call may run concurrently. Used by tests. */
void slotAllocShutdown(void) {
    if (!sa.initialized) return;
    for (uint32_t id = 1; id < sa.desc_next; id++) {
        saBlock *b = saDesc(id);
        if (b->state != SA_BLOCK_UNUSED) free(b->pinfo);
    }
    for (uint32_t i = 0; i < sa.desc_nchunks; i++) free(sa.desc[i]);
    free(sa.desc);
    for (int slot = 0; slot < SLOTALLOC_NUM_SLOTS; slot++) {
        saArena *a = atomic_load(&sa.arenas[slot]);
        if (!a) continue;
        pthread_mutex_destroy(&a->lock);
        free(a->left);
        free(a);
    }
    munmap(sa.ext, (size_t)sa.nunits * sizeof(saExtTag));
    munmap((void *)sa.unit_block, (size_t)sa.nunits * sizeof(uint32_t));
    munmap(sa.map, sa.map_bytes);
    pthread_mutex_destroy(&sa.lock);
    memset(&sa, 0, sizeof(sa));
}

void *slotAllocMalloc(int slot, size_t size) {
    if (!sa.initialized || slot < 0 || slot >= SLOTALLOC_NUM_SLOTS) return NULL;
    return slotAllocArenaMalloc(saSlotArena(slot), size);
}

/* Allocate from arena 'id' itself, whichever slots map to it: zmalloc's
 * placement arena (slotcompact.c) keeps a write in the arena the key's
 * blocks are in. */
void *slotAllocArenaMalloc(int id, size_t size) {
    saArena *a;
    void *p;

    if (!sa.initialized || id < 0 || id >= SLOTALLOC_NUM_SLOTS) return NULL;
    if ((a = saArenaGet(id, 1)) == NULL) return NULL;
    pthread_mutex_lock(&a->lock);
    p = saArenaAlloc(a, size);
    pthread_mutex_unlock(&a->lock);
    return p;
}

/* Zeroes the whole usable size (callers may use the slack). */
void *slotAllocCalloc(int slot, size_t size) {
    void *p = slotAllocMalloc(slot, size);

    if (p) memset(p, 0, slotAllocUsableSize(p));
    return p;
}

/* Any thread (lazyfree frees on a BIO thread). p is NULL or the start of a
 * live allocation; anything else (double free, interior or foreign
 * pointer, pointer into a detached block) panics. */
void slotAllocFree(void *p) {
    saBlock *b;
    saArena *a;

    if (p == NULL) return;
    if ((b = saLookup(p)) == NULL) saPanic("free of %p: not a slot block pointer", p);
    a = saArenaGet(b->arena, 0);
    pthread_mutex_lock(&a->lock);
    if (b->state != SA_BLOCK_ACTIVE) saPanic("free of %p: block not active", p);
    saArenaFree(a, b, p);
    pthread_mutex_unlock(&a->lock);
}

/* Lock free, O(1), any thread. p must be the start of a live allocation
 * (the answer for other pointers is meaningless, but never a crash); 0 for
 * pointers that are not in an active block. */
size_t slotAllocUsableSize(const void *p) {
    saBlock *b = saLookup(p);

    if (!b || b->state != SA_BLOCK_ACTIVE) return 0;
    size_t off = (const char *)p - b->base;
    if (b->huge) return off >= SA_PAGE_SIZE ? b->size - SA_PAGE_SIZE : 0;
    saPageEntry e = b->pt[off >> SA_PAGE_SHIFT];
    if (e.kind == SA_PG_SLAB) return sa_class_size[e.cls];
    if (e.kind == SA_PG_RUN) return (size_t)e.arg << SA_PAGE_SHIFT;
    return 0;
}

/* Stays in p's arena (not necessarily its slot's arena now: see "Slot
 * groups"). Returns p itself when a fresh allocation of 'size'
 * would get the same usable size as p has; otherwise allocates, copies and
 * frees p (so shrinking to a smaller class gives memory back). NULL p
 * returns NULL: the caller knows which slot a new allocation belongs to,
 * this function does not. */
void *slotAllocRealloc(void *p, size_t size) {
    size_t old;
    saBlock *b;
    void *np;

    if (p == NULL) return NULL;
    if (size == 0) {
        slotAllocFree(p);
        return NULL;
    }
    if ((b = saLookup(p)) == NULL) saPanic("realloc of %p: not a slot block pointer", p);
    if (size > sa.range_bytes) return NULL;
    old = slotAllocUsableSize(p);
    if (saFitSize(size) == old) return p;
    saArena *a = saArenaGet(b->arena, 0);
    pthread_mutex_lock(&a->lock);
    np = saArenaAlloc(a, size);
    pthread_mutex_unlock(&a->lock);
    if (np == NULL) return NULL;
    memcpy(np, p, old < size ? old : size);
    slotAllocFree(p);
    return np;
}

/* Lock free, O(1), any thread: a range check and one unit table load.
 * Pointers into detached blocks count as ours (so that a stray free of one
 * panics here instead of reaching another allocator). */
int slotAllocOwns(const void *p) {
    return saLookup(p) != NULL;
}

void *slotAllocRange(size_t *bytes) {
    if (bytes) *bytes = sa.initialized ? sa.range_bytes : 0;
    return sa.initialized ? sa.base : NULL;
}

int slotAllocArenaOf(const void *p) {
    saBlock *b = saLookup(p);
    return b ? b->arena : -1;
}

int slotAllocSlotArena(int slot) {
    if (!sa.initialized || slot < 0 || slot >= SLOTALLOC_NUM_SLOTS) return -1;
    return saSlotArena(slot);
}

/* How many slots map to arena 'id' (0: none; its blocks, if any, hold
 * what slots mapped elsewhere since have not moved out yet); with *mixed
 * (if not NULL) whether it may hold such leftovers while slots map to it. */
int slotAllocArenaSlots(int id, int *mixed) {
    saArena *a;

    if (mixed) *mixed = 0;
    if (!sa.initialized || id < 0 || id >= SLOTALLOC_NUM_SLOTS) return 0;
    if (mixed && (a = saArenaGet(id, 0)) != NULL) {
        pthread_mutex_lock(&a->lock);
        *mixed = a->mixed;
        pthread_mutex_unlock(&a->lock);
    }
    return sa.members[id];
}

/* Whether an arena holds nothing: no live allocation, no detached block
 * (its cached empty block, if any, may serve a new group). Lock held. */
static int saArenaIsEmpty(saArena *a) {
    return !a || (a->live == 0 && !a->detached);
}

/* An arena's slots mapped away while it held allocations (saArena.left),
 * arena lock held. An arena that cannot record one more stays mixed until
 * it empties (left NULL, mixed set). */
static void saArenaLeftAdd(saArena *a, int slot) {
    a->mixed = 1;
    for (int i = 0; i < a->nleft; i++)
        if (a->left[i] == slot) return;
    if (a->nleft == a->cap_left) {
        int cap = a->cap_left ? a->cap_left * 2 : 4;
        uint16_t *l = realloc(a->left, sizeof(uint16_t) * cap);
        if (l == NULL) {
            a->nleft = -1;          /* Forgotten: mixed until empty. */
            return;
        }
        saStatAdd(meta_bytes, sizeof(uint16_t) * (cap - a->cap_left));
        a->left = l;
        a->cap_left = cap;
    }
    if (a->nleft >= 0) a->left[a->nleft++] = (uint16_t)slot;
}

static void saArenaLeftRemove(saArena *a, int slot) {
    for (int i = 0; i < a->nleft; i++) {
        if (a->left[i] != slot) continue;
        a->left[i] = a->left[--a->nleft];
        if (a->nleft == 0) a->mixed = 0;
        return;
    }
}

/* The background cycle relocates (or, with slot-affinity no, evacuates)
 * the keys of a slot by walking the slot's keys; a slot mapped away from
 * an arena is no longer found through that arena, so its leftovers there
 * are found through this list. */
int slotAllocArenaLeft(int id, uint16_t *out, int max) {
    saArena *a;
    int n;

    if (!sa.initialized || id < 0 || id >= SLOTALLOC_NUM_SLOTS) return 0;
    if ((a = saArenaGet(id, 0)) == NULL) return 0;
    pthread_mutex_lock(&a->lock);
    n = a->mixed ? a->nleft : 0;
    for (int i = 0; i < n && i < max; i++) out[i] = a->left[i];
    pthread_mutex_unlock(&a->lock);
    return n;
}

/* The placement layer walked every key of the arena's only slot and found
 * every live allocation of the arena among them (slotCompactUnmix): no
 * slot that left it has anything in it any more, though neither did it
 * empty nor did they come back. */
void slotAllocArenaUnmix(int id) {
    saArena *a;

    if (!sa.initialized || id < 0 || id >= SLOTALLOC_NUM_SLOTS) return;
    if ((a = saArenaGet(id, 0)) == NULL) return;
    pthread_mutex_lock(&a->lock);
    a->mixed = 0;
    a->nleft = 0;
    pthread_mutex_unlock(&a->lock);
}

int slotAllocArenaEmpty(int id) {
    saArena *a;
    int empty;

    if (!sa.initialized || id < 0 || id >= SLOTALLOC_NUM_SLOTS) return 0;
    if ((a = saArenaGet(id, 0)) == NULL) return 1;
    pthread_mutex_lock(&a->lock);
    empty = saArenaIsEmpty(a);
    pthread_mutex_unlock(&a->lock);
    return empty;
}

/* Map 'slot' to arena 'id': its allocations from now on come from that
 * arena. What the slot already allocated stays where it is (the placement
 * layer moves it: "Slot groups"), and Realloc keeps an allocation in its
 * arena. Main thread only, like allocation: nothing else changes the map,
 * and an arena no slot maps to gets no new block except through Realloc of
 * one of its allocations (so an empty one stays empty). */
int slotAllocMapSlot(int slot, int id) {
    if (!sa.initialized || slot < 0 || slot >= SLOTALLOC_NUM_SLOTS ||
        id < 0 || id >= SLOTALLOC_NUM_SLOTS) {
        errno = EINVAL;
        return -1;
    }
    int old = saSlotArena(slot);
    saArena *a = old != id ? saArenaGet(old, 0) : NULL;
    if (a) {
        /* Arena lock before the global one (see Locking). */
        pthread_mutex_lock(&a->lock);
        if (a->live || a->ndetached) saArenaLeftAdd(a, slot);
        pthread_mutex_unlock(&a->lock);
    }
    /* Back home: what it left in its arena is its arena's again. */
    if (old != id && (a = saArenaGet(id, 0)) != NULL) {
        pthread_mutex_lock(&a->lock);
        saArenaLeftRemove(a, slot);
        pthread_mutex_unlock(&a->lock);
    }
    pthread_mutex_lock(&sa.lock);
    if (old != id) {
        sa.members[old]--;
        sa.members[id]++;
        atomic_store_explicit(&sa.arena_of[slot], (uint16_t)id, memory_order_relaxed);
    }
    pthread_mutex_unlock(&sa.lock);
    return 0;
}

/* An arena id no slot maps to and whose arena holds nothing, first one
 * from 'from' (wrapping around), or -1 if every id is taken: a group split
 * by a migration takes one for the slots that leave it. There is always
 * one while some arena has two slots or more (16384 ids, 16384 slots).
 * Main thread only (see slotAllocMapSlot). */
int slotAllocUnusedArena(int from) {
    if (!sa.initialized) return -1;
    if (from < 0 || from >= SLOTALLOC_NUM_SLOTS) from = 0;
    for (int i = 0; i < SLOTALLOC_NUM_SLOTS; i++) {
        int id = (from + i) % SLOTALLOC_NUM_SLOTS;
        if (sa.members[id]) continue;
        saArena *a = saArenaGet(id, 0);
        if (a) pthread_mutex_lock(&a->lock);
        int empty = saArenaIsEmpty(a);
        if (a) pthread_mutex_unlock(&a->lock);
        if (empty) return id;
    }
    return -1;
}

void *slotAllocBlockOf(const void *p) {
    saBlock *b = saLookup(p);
    return b ? b->base : NULL;
}

/* Fill out[] with up to max active blocks of arena 'id' (newest first) and
 * return how many it has. Detached blocks are not listed. */
size_t slotAllocArenaBlocks(int id, slotAllocBlockInfo *out, size_t max) {
    saArena *a;
    size_t n = 0;

    if (!sa.initialized || id < 0 || id >= SLOTALLOC_NUM_SLOTS || !(a = saArenaGet(id, 0)))
        return 0;
    pthread_mutex_lock(&a->lock);
    for (saBlock *b = a->blocks; b; b = b->next, n++) {
        if (n >= max) continue;
        out[n].addr = b->base;
        out[n].size = b->size;
        out[n].used_bytes = b->used_bytes;
        out[n].live_allocs = b->live;
        out[n].huge = b->huge;
    }
    pthread_mutex_unlock(&a->lock);
    return n;
}

/* The same for the arena of 'slot': its group's blocks. */
size_t slotAllocSlotBlocks(int slot, slotAllocBlockInfo *out, size_t max) {
    if (!sa.initialized || slot < 0 || slot >= SLOTALLOC_NUM_SLOTS) return 0;
    return slotAllocArenaBlocks(saSlotArena(slot), out, max);
}

/* Recipient side: create nblocks detached blocks of the given sizes
 * (multiples of SLOTALLOC_UNIT_SIZE) for 'slot' and store their addresses
 * in addrs[]. The blocks are zero, writable, and take no allocations until
 * adopted. All or nothing: on error (-1, errno EINVAL or ENOMEM) no block
 * is left behind. */
int slotAllocReserveBlocks(int slot, size_t nblocks, const size_t *sizes, void **addrs) {
    saArena *a;
    size_t i;

    if (!sa.initialized || slot < 0 || slot >= SLOTALLOC_NUM_SLOTS) goto einval;
    for (i = 0; i < nblocks; i++)
        if (!sizes[i] || sizes[i] % SA_UNIT_SIZE || sizes[i] > sa.range_bytes) goto einval;
    if ((a = saSlotArenaGet(slot, 1)) == NULL) {
        errno = ENOMEM;
        return -1;
    }
    pthread_mutex_lock(&a->lock);
    for (i = 0; i < nblocks; i++) {
        saBlock *b = saBlockCreate(sizes[i], a->id, SA_BLOCK_DETACHED);
        if (!b) break;
        saBlockLink(&a->detached, b);
        a->ndetached++;
        a->detached_bytes += b->size;
        addrs[i] = b->base;
    }
    if (i < nblocks) {
        while (i--) {
            saBlock *b = saLookup(addrs[i]);
            saBlockUnlink(&a->detached, b);
            a->ndetached--;
            a->detached_bytes -= b->size;
            saBlockDestroy(b);
        }
        pthread_mutex_unlock(&a->lock);
        errno = ENOMEM;
        return -1;
    }
    pthread_mutex_unlock(&a->lock);
    return 0;

einval:
    errno = EINVAL;
    return -1;
}

/* Result of checking a block image. */
typedef struct saImageInfo {
    int huge;
    uint32_t hdr_pages;
    size_t live, used;
    uint32_t free_pages, free_runs;  /* Free pages; maximal runs of them. */
    uint32_t nonfull_slabs;          /* Slabs with free chunks. */
} saImageInfo;

static int saWordsZero(const uint64_t *w, size_t n) {
    while (n--) if (*w++) return 0;
    return 1;
}

/* Check that the 'size' bytes at 'base' are a well formed block: header
 * fields, every page table entry, and the bitmap (no bit outside a slab's
 * chunks). Reads only, never trusts a value before checking its range, so
 * any content is safe. Returns 0 and fills *in, or -1. */
static int saImageCheck(const char *base, size_t size, saImageInfo *in) {
    saBlockHeader h;
    uint32_t pt_off, bm_off, hdr_pages;

    memcpy(&h, base, sizeof(h));
    memset(in, 0, sizeof(*in));
    if (h.magic != SA_BLOCK_MAGIC || h.version != SA_BLOCK_VERSION ||
        h.page_size != SA_PAGE_SIZE || h.class_sig != sa_class_sig ||
        h.block_size != size || h.npages != (size >> SA_PAGE_SHIFT) ||
        h.slot >= SLOTALLOC_NUM_SLOTS || h.reserved != 0) return -1;
    if (h.flags == SA_HDR_HUGE) {
        if (h.hdr_pages != 1 || h.pagetab_off || h.bitmap_off || h.npages < 2) return -1;
        in->huge = 1;
        in->hdr_pages = 1;
        in->live = 1;
        in->used = size - SA_PAGE_SIZE;
        return 0;
    }
    if (h.flags != 0 || h.npages > SA_MAX_BLOCK_PAGES) return -1;
    saLayout(h.npages, &pt_off, &bm_off, &hdr_pages);
    if (h.pagetab_off != pt_off || h.bitmap_off != bm_off ||
        h.hdr_pages != hdr_pages || hdr_pages >= h.npages) return -1;

    const saPageEntry *pt = (const saPageEntry *)(base + pt_off);
    const uint64_t *bm = (const uint64_t *)(base + bm_off);
    uint32_t i, j, n = h.npages;
    for (i = 0; i < hdr_pages; i++) {
        if (pt[i].kind != SA_PG_HEADER || pt[i].cls || pt[i].arg) return -1;
    }
    if (!saWordsZero(bm, (size_t)hdr_pages * SA_WORDS_PER_PAGE)) return -1;
    in->hdr_pages = hdr_pages;
    while (i < n) {
        saPageEntry e = pt[i];
        const uint64_t *w = bm + (size_t)i * SA_WORDS_PER_PAGE;
        if (e.kind == SA_PG_FREE) {
            if (e.cls || !saWordsZero(w, SA_WORDS_PER_PAGE)) return -1;
            if (i == hdr_pages || pt[i - 1].kind != SA_PG_FREE) in->free_runs++;
            in->free_pages++;
            i++;
        } else if (e.kind == SA_PG_SLAB) {
            if (e.arg || e.cls >= SA_NUM_CLASSES) return -1;
            uint32_t c = e.cls, np = sa_class_pages[c], nch = sa_class_chunks[c];
            size_t cnt = 0;
            if (np > n - i) return -1;
            for (j = 1; j < np; j++) {
                if (pt[i + j].kind != SA_PG_SLAB || pt[i + j].cls != c ||
                    pt[i + j].arg != j) return -1;
            }
            for (j = 0; j < np * SA_WORDS_PER_PAGE; j++) {
                uint64_t valid = ~0ULL;
                if (j * 64 + 64 > nch) valid = nch > j * 64 ? (1ULL << (nch - j * 64)) - 1 : 0;
                if (w[j] & ~valid) return -1;
                cnt += __builtin_popcountll(w[j]);
            }
            if (cnt < nch) in->nonfull_slabs++;
            in->live += cnt;
            in->used += cnt * sa_class_size[c];
            i += np;
        } else if (e.kind == SA_PG_RUN) {
            uint32_t np = e.arg;
            if (e.cls || np == 0 || np > n - i) return -1;
            for (j = 1; j < np; j++) {
                if (pt[i + j].kind != SA_PG_RUN_CONT || pt[i + j].cls ||
                    pt[i + j].arg != j) return -1;
            }
            if (!saWordsZero(w, (size_t)np * SA_WORDS_PER_PAGE)) return -1;
            in->live++;
            in->used += (size_t)np << SA_PAGE_SHIFT;
            i += np;
        } else {
            return -1;      /* Header page, orphan run page, or garbage. */
        }
    }
    return 0;
}

/* Rebuild the runtime state of a normal block whose image passed
 * saImageCheck(): empty slabs become free pages, maximal free runs become
 * spans (with fresh tags), slabs with free chunks join the partial lists. */
static void saBlockRebuild(saArena *a, saBlock *b) {
    uint32_t i, j, n = b->npages;

    for (i = b->hdr_pages; i < n; ) {
        saPageEntry e = b->pt[i];
        if (e.kind == SA_PG_SLAB) {
            uint32_t np = sa_class_pages[e.cls];
            if (saWordsZero(b->bitmap + (size_t)i * SA_WORDS_PER_PAGE,
                            (size_t)np * SA_WORDS_PER_PAGE)) {
                for (j = 0; j < np; j++) b->pt[i + j] = (saPageEntry){SA_PG_FREE, 0, 0};
            }
            i += np;
        } else {
            i += e.kind == SA_PG_RUN ? e.arg : 1;
        }
    }
    b->free_pages = 0;
    for (i = b->hdr_pages; i < n; ) {
        saPageEntry e = b->pt[i];
        if (e.kind == SA_PG_FREE) {
            for (j = i; j < n && b->pt[j].kind == SA_PG_FREE; j++)
                b->pt[j] = (saPageEntry){SA_PG_FREE, 0, 0};
            saSpanInsert(a, b, i, j - i);
            b->free_pages += j - i;
            i = j;
        } else if (e.kind == SA_PG_SLAB) {
            saPageInfo *s = &b->pinfo[i];
            uint32_t np = sa_class_pages[e.cls], cnt = 0;
            for (j = 0; j < np * SA_WORDS_PER_PAGE; j++)
                cnt += __builtin_popcountll(b->bitmap[(size_t)i * SA_WORDS_PER_PAGE + j]);
            s->block = b;
            s->page = i;
            s->nfree = sa_class_chunks[e.cls] - cnt;
            s->hint = 0;
            if (s->nfree) saListPush(&a->partial[e.cls], s);
            i += np;
        } else {
            i += e.arg;
        }
    }
}

/* Recipient side: validate the block at addr, a detached block reserved for
 * 'slot', and make it part of the slot's arena: its live allocations keep
 * their offsets and usable sizes, its free space becomes allocatable. The
 * caller guarantees nobody writes the block meanwhile (the NIC is done).
 * Returns -1 (errno EINVAL, block still detached) if addr is not such a
 * block or its content is not a well formed block; ENOMEM if bookkeeping
 * cannot be allocated. Never crashes on bad content. */
int slotAllocAdoptBlock(int slot, void *addr) {
    saBlock *b = saLookup(addr);
    saPageInfo *pinfo = NULL;
    saImageInfo in;
    saArena *a;

    if (slot < 0 || slot >= SLOTALLOC_NUM_SLOTS || !b || b->base != addr ||
        b->arena != saSlotArena(slot) || !(a = saArenaGet(b->arena, 0))) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&a->lock);
    if (b->state != SA_BLOCK_DETACHED || saImageCheck(b->base, b->size, &in) == -1) {
        pthread_mutex_unlock(&a->lock);
        errno = EINVAL;
        return -1;
    }
    if (!in.huge && (pinfo = calloc(b->npages, sizeof(*pinfo))) == NULL) {
        pthread_mutex_unlock(&a->lock);
        errno = ENOMEM;
        return -1;
    }
    saBlockUnlink(&a->detached, b);
    a->ndetached--;
    a->detached_bytes -= b->size;
    saStatSub(detached_blocks, 1);

    saBlockHeader *h = (saBlockHeader *)b->base;
    h->slot = (uint32_t)a->id;
    h->origin = (uintptr_t)b->base;
    b->huge = in.huge;
    b->hdr_pages = in.hdr_pages;
    if (!in.huge) {
        b->pinfo = pinfo;
        saStatAdd(meta_bytes, (size_t)b->npages * sizeof(saPageInfo));
        b->pt = (saPageEntry *)(b->base + h->pagetab_off);
        b->bitmap = (uint64_t *)(b->base + h->bitmap_off);
        saBlockRebuild(a, b);
    }
    b->state = SA_BLOCK_ACTIVE;
    saArenaLinkBlock(a, b);
    b->live = in.live;
    b->used_bytes = in.used;
    a->live += in.live;
    a->used_bytes += in.used;
    saStatAdd(live, in.live);
    saStatAdd(used_bytes, in.used);
    if (b->live == 0 && !a->empty) saSetEmpty(a, b);
    pthread_mutex_unlock(&a->lock);
    return 0;
}

/* Drop one detached block (a reservation whose migration failed or whose
 * content was rejected). Anything else is a caller bug: panic. */
void slotAllocReleaseBlock(void *addr) {
    saBlock *b = saLookup(addr);
    saArena *a;

    if (!b || b->base != addr) saPanic("release of %p: not a block", addr);
    a = saArenaGet(b->arena, 0);
    pthread_mutex_lock(&a->lock);
    if (b->state != SA_BLOCK_DETACHED) saPanic("release of %p: not detached", addr);
    saBlockUnlink(&a->detached, b);
    a->ndetached--;
    a->detached_bytes -= b->size;
    saBlockDestroy(b);
    pthread_mutex_unlock(&a->lock);
}

/* Drop every block of the slot, active and detached, returning the memory
 * to the OS (retire: leaving that to slotAllocPurgeRetired). */
static size_t saReleaseSlot(int slot, int retire) {
    saArena *a;
    size_t used;

    if (slot < 0 || slot >= SLOTALLOC_NUM_SLOTS || !(a = saSlotArenaGet(slot, 0))) return 0;
    pthread_mutex_lock(&a->lock);
    used = a->used_bytes;
    while (a->blocks) saArenaDropBlock(a, a->blocks, retire);
    while (a->detached) {
        saBlock *b = a->detached;
        saBlockUnlink(&a->detached, b);
        saBlockGiveUp(b, retire);
    }
    a->ndetached = a->detached_bytes = 0;
    pthread_mutex_unlock(&a->lock);
    return used;
}

/* Drop every block of the slot, active and detached, returning the memory
 * to the OS. Every pointer into the slot becomes invalid: the caller makes
 * sure no thread still frees or reads any (e.g. no pending lazyfree job
 * holds objects of this slot). */
size_t slotAllocReleaseSlot(int slot) {
    return saReleaseSlot(slot, 0);
}

/* slotAllocReleaseSlot(), except that the blocks' pages stay committed
 * (counted in slotAllocStats.retired_bytes) and their addresses unused
 * until slotAllocPurgeRetired() returns them: the slot is empty at once,
 * the kernel's work can be done on another thread. */
size_t slotAllocRetireSlot(int slot) {
    return saReleaseSlot(slot, 1);
}

/* Return the pages of every retired block to the OS, and their addresses
 * to the free range. Any thread; the kernel calls run without the global
 * lock (nothing else uses a retired block's addresses). Returns the bytes
 * returned. */
size_t slotAllocPurgeRetired(void) {
    saBlock *list, *b;
    size_t bytes = 0;

    if (!sa.initialized) return 0;
    pthread_mutex_lock(&sa.lock);
    list = sa.retired;
    sa.retired = NULL;
    pthread_mutex_unlock(&sa.lock);
    if (list == NULL) return 0;
    /* In address order, neighbours together: one madvise() and one
     * mprotect() per run of adjacent blocks, not per block, so far fewer
     * system calls, mapping splits and TLB shootdowns. If the array cannot
     * be had, block by block. */
    size_t n = 0;
    for (b = list; b; b = b->next) n++;
    saBlock **v = malloc(sizeof(*v) * n);
    if (v) {
        size_t i = 0;
        for (b = list; b; b = b->next) v[i++] = b;
        qsort(v, n, sizeof(*v), saBlockBaseCmp);
        for (i = 0; i < n;) {
            size_t j = i + 1, len = v[i]->size;
            while (j < n && v[i]->base + len == v[j]->base) len += v[j++]->size;
            saDropRange(v[i]->base, len);
            bytes += len;
            i = j;
        }
        free(v);
    } else {
        for (b = list; b; b = b->next) {
            saBlockDropPages(b);
            bytes += b->size;
        }
    }
    pthread_mutex_lock(&sa.lock);
    while ((b = list) != NULL) {
        list = b->next;
        saBlockFreeUnits(b);
    }
    pthread_mutex_unlock(&sa.lock);
    saStatSub(retired_bytes, bytes);
    return bytes;
}

/* Release every slot's cached empty block. Returns the bytes released. */
size_t slotAllocTrim(void) {
    size_t bytes = 0;

    for (int id = 0; id < SLOTALLOC_NUM_SLOTS && sa.initialized; id++) {
        saArena *a = saArenaGet(id, 0);
        if (!a) continue;
        pthread_mutex_lock(&a->lock);
        if (a->empty) {
            bytes += a->empty->size;
            saArenaReleaseBlock(a, a->empty);
        }
        pthread_mutex_unlock(&a->lock);
    }
    return bytes;
}

/* The number of live allocations of an active block (0 for anything
 * else): what slotAllocBlockAllocs() would list, without the walk. */
size_t slotAllocBlockLive(void *block_addr) {
    saBlock *b = saLookup(block_addr);
    saArena *a;
    size_t live = 0;

    if (!b || b->base != block_addr || !(a = saArenaGet(b->arena, 0))) return 0;
    pthread_mutex_lock(&a->lock);
    if (b->state == SA_BLOCK_ACTIVE) live = b->live;
    pthread_mutex_unlock(&a->lock);
    return live;
}

/* Compaction hint: 1 if block_addr is an active normal block whose live
 * allocations use less than 'threshold' (0..1) of its data pages, 0
 * otherwise (huge, detached, or not a block). */
int slotAllocBlockIsSparse(void *block_addr, double threshold) {
    saBlock *b = saLookup(block_addr);
    saArena *a;
    int sparse;

    if (!b || b->base != block_addr) return 0;
    a = saArenaGet(b->arena, 0);
    pthread_mutex_lock(&a->lock);
    sparse = b->state == SA_BLOCK_ACTIVE && !b->huge &&
             (double)b->used_bytes <
                 threshold * (double)((size_t)(b->npages - b->hdr_pages) << SA_PAGE_SHIFT);
    pthread_mutex_unlock(&a->lock);
    return sparse;
}

/* For a migration's recipient, which must not trust what it received:
 * the usable size of p if p is the start of a live allocation in an
 * active block of the slot, 0 otherwise (any other address, a free chunk,
 * the inside of an allocation). Lock free, like UsableSize: the caller
 * (the thread adopting the slot) is the only one allocating or freeing in
 * it. */
size_t slotAllocLiveSize(int slot, const void *p) {
    if (slot < 0 || slot >= SLOTALLOC_NUM_SLOTS || !sa.initialized) return 0;
    return slotAllocArenaLiveSize(saSlotArena(slot), p);
}

/* The same for an allocation of arena 'id'. */
size_t slotAllocArenaLiveSize(int id, const void *p) {
    saBlock *b = saLookup(p);

    if (!b || b->state != SA_BLOCK_ACTIVE || b->arena != id) return 0;
    size_t off = (const char *)p - b->base;
    if (b->huge) return off == SA_PAGE_SIZE ? b->size - SA_PAGE_SIZE : 0;
    uint32_t pg = off >> SA_PAGE_SHIFT;
    saPageEntry e = b->pt[pg];
    if (pg < b->hdr_pages) return 0;
    if (e.kind == SA_PG_SLAB) {
        uint32_t h = pg - e.arg;
        long idx = saChunkIndex(e.cls, off - ((size_t)h << SA_PAGE_SHIFT));
        if (idx < 0) return 0;
        uint64_t w = b->bitmap[(size_t)h * SA_WORDS_PER_PAGE + idx / 64];
        return (w >> (idx % 64)) & 1 ? sa_class_size[e.cls] : 0;
    }
    if (e.kind == SA_PG_RUN && (off & (SA_PAGE_SIZE - 1)) == 0)
        return (size_t)e.arg << SA_PAGE_SHIFT;
    return 0;
}

/* The live allocations of an active block, in address order: fills out[]
 * with up to max of them and returns how many there are. */
size_t slotAllocBlockAllocs(void *block_addr, void **out, size_t max) {
    saBlock *b = saLookup(block_addr);
    size_t n = 0;

    if (!b || b->base != block_addr || b->state != SA_BLOCK_ACTIVE) return 0;
    if (b->huge) {
        if (max) out[0] = b->base + SA_PAGE_SIZE;
        return 1;
    }
    for (uint32_t i = b->hdr_pages; i < b->npages;) {
        saPageEntry e = b->pt[i];
        if (e.kind == SA_PG_SLAB) {
            uint32_t c = e.cls;
            const uint64_t *bm = b->bitmap + (size_t)i * SA_WORDS_PER_PAGE;
            for (uint32_t k = 0; k < sa_class_chunks[c]; k++) {
                if (!((bm[k / 64] >> (k % 64)) & 1)) continue;
                if (n < max) out[n] = b->base + ((size_t)i << SA_PAGE_SHIFT) + (size_t)k * sa_class_size[c];
                n++;
            }
            i += sa_class_pages[c];
        } else if (e.kind == SA_PG_RUN) {
            if (n < max) out[n] = b->base + ((size_t)i << SA_PAGE_SHIFT);
            n++;
            i += e.arg;
        } else if (e.kind == SA_PG_FREE && e.arg) {
            i += e.arg;
        } else {
            i++;
        }
    }
    return n;
}

/* Used ranges closer than this are shipped as one (slotAllocBlockUsedRanges):
 * the end of a full slab, past its last chunk, is up to 1/8 of it, and
 * each separate range costs the transfer a record of its own. Measured
 * with utils/bench/migrate-pair (one pair of the 1 M record rebalance):
 * merging nothing sent 16 % fewer bytes than whole pages did but took 8 %
 * longer over loopback TCP; merging gaps of up to 1 KiB sends 15 % fewer
 * bytes in the same time as whole pages. */
#define SA_RANGE_MERGE_GAP 1024

/* The bytes of slab page i (class c) that hold live chunks: from the
 * slab's start to the end of its last live chunk (0: none live). Chunks
 * are taken lowest first, so a slab's free chunks are mostly at its end,
 * with the leftover bytes past its last chunk. */
static size_t saSlabUsedBytes(saBlock *b, uint32_t i, uint32_t c) {
    const uint64_t *bm = b->bitmap + (size_t)i * SA_WORDS_PER_PAGE;
    uint32_t nchunks = sa_class_chunks[c];

    for (uint32_t w = (nchunks + 63) / 64; w-- > 0;) {
        uint64_t word = bm[w];
        if (w == nchunks / 64 && nchunks % 64) word &= (1ULL << (nchunks % 64)) - 1;
        if (word == 0) continue;
        uint32_t last = w * 64 + 63 - (uint32_t)__builtin_clzll(word);
        return (size_t)(last + 1) * sa_class_size[c];
    }
    return 0;
}

/* The parts of an active block that hold anything: its header (to the end
 * of its bitmap), every run, and every slab up to the end of its last live
 * chunk (a slab with none is left out), as byte ranges, adjacent ones
 * merged, in order. Free spans, the free tails of slabs and the header's
 * unused end are left out: a migration ships only
 * these ranges, and in the copy what was not sent keeps the zeros of a
 * fresh block (never even touched, so never faulted in): the header's
 * page table and bitmap describe it, and a free chunk's bytes mean
 * nothing. Ranges less than SA_RANGE_MERGE_GAP apart are merged (the free
 * bytes between them are sent too). A huge block is one range. Returns how
 * many ranges there are (fills out[] up to max). The slot must not change
 * meanwhile. */
static size_t saUsedRanges(saBlock *b, slotAllocRangeInfo *out, size_t max);

size_t slotAllocBlockUsedRanges(void *block_addr, slotAllocRangeInfo *out, size_t max) {
    saBlock *b = saLookup(block_addr);

    if (!b || b->base != block_addr || b->state != SA_BLOCK_ACTIVE) return 0;
    return saUsedRanges(b, out, max);
}

/* The same ranges for a block image that is none of this process's blocks
 * yet: a migration's received copy, before it is adopted, whose checksum
 * covers the ranges the donor shipped (slotblocks.c). They are read from the
 * image's own header, page table and bitmap, checked first (saImageCheck):
 * returns 0 if the 'size' bytes at base are not a well formed block. Reads
 * only. */
size_t slotAllocImageUsedRanges(void *base, size_t size, slotAllocRangeInfo *out, size_t max) {
    saImageInfo in;
    saBlock b;

    if (size < SA_PAGE_SIZE || saImageCheck(base, size, &in) == -1) return 0;
    memset(&b, 0, sizeof(b));
    b.base = base;
    b.size = size;
    b.npages = (uint32_t)(size >> SA_PAGE_SHIFT);
    b.hdr_pages = in.hdr_pages;
    b.huge = (uint8_t)in.huge;
    if (!in.huge) {
        const saBlockHeader *h = base;
        b.pt = (saPageEntry *)(b.base + h->pagetab_off);
        b.bitmap = (uint64_t *)(b.base + h->bitmap_off);
    }
    return saUsedRanges(&b, out, max);
}

static size_t saUsedRanges(saBlock *b, slotAllocRangeInfo *out, size_t max) {
    size_t n = 0;
    size_t run_start = 0, run_end;          /* Bytes [start, end) in use. */

    if (b->huge) {
        if (max) {
            out[0].offset = 0;
            out[0].len = b->size;
        }
        return 1;
    }
    /* The header up to the end of its bitmap: the rest of its last page is
     * never written. */
    uint32_t pt_off, bm_off, hdr_pages;
    saLayout(b->npages, &pt_off, &bm_off, &hdr_pages);
    run_end = (size_t)bm_off + (size_t)b->npages * SA_WORDS_PER_PAGE * sizeof(uint64_t);
    for (uint32_t i = b->hdr_pages, len; i < b->npages; i += len) {
        saPageEntry e = b->pt[i];
        size_t used = 0;
        if (e.kind == SA_PG_SLAB) {
            len = sa_class_pages[e.cls];
            used = saSlabUsedBytes(b, i, e.cls);
        } else {
            len = e.arg ? e.arg : 1;
            if (e.kind == SA_PG_RUN) used = (size_t)len << SA_PAGE_SHIFT;
        }
        if (!used) continue;
        size_t start = (size_t)i << SA_PAGE_SHIFT;
        if (start - run_end > SA_RANGE_MERGE_GAP) {
            if (n < max) {
                out[n].offset = run_start;
                out[n].len = run_end - run_start;
            }
            n++;
            run_start = start;
        }
        run_end = start + used;
    }
    if (n < max) {
        out[n].offset = run_start;
        out[n].len = run_end - run_start;
    }
    n++;
    return n;
}

/* Take the free slabs and spans of block b off (on = 0: back on) its
 * arena's lists. Lock held. */
static void saBlockSetDraining(saArena *a, saBlock *b, int on) {
    uint32_t i = b->hdr_pages;

    if (b->draining == on) return;
    if (on) b->draining = 0;    /* Unlink while the records are linked. */
    while (i < b->npages) {
        saPageEntry e = b->pt[i];
        saPageInfo *s = &b->pinfo[i];
        if (e.kind == SA_PG_FREE) {
            if (on) saListUnlink(&a->spans[saSpanBin(e.arg)], s);
            else saListPush(&a->spans[saSpanBin(e.arg)], s);
            i += e.arg;
        } else if (e.kind == SA_PG_SLAB) {
            if (s->nfree) {
                if (on) saListUnlink(&a->partial[e.cls], s);
                else saListPush(&a->partial[e.cls], s);
            }
            i += sa_class_pages[e.cls];
        } else {
            i += e.arg;
        }
    }
    b->draining = (uint8_t)on;
}

/* Sparse-block compaction. Draining an active normal block stops new
 * allocations from landing in it; moving its live allocations elsewhere
 * in the slot (slotcompact.c does, since slotAllocIsDraining() tells it
 * which pointers to move) then empties it, and an emptied draining block
 * is released at once. on = 0 makes it an ordinary block again. Returns 0,
 * or -1 (EINVAL) if block_addr is not the start of an active normal block. */
int slotAllocDrainBlock(void *block_addr, int on) {
    saBlock *b = saLookup(block_addr);
    saArena *a;
    int ret = -1;

    if (!b || b->base != block_addr) {
        errno = EINVAL;
        return -1;
    }
    a = saArenaGet(b->arena, 0);
    pthread_mutex_lock(&a->lock);
    if (b->state == SA_BLOCK_ACTIVE && !b->huge && b->base == block_addr) {
        if (on && a->empty == b) saSetEmpty(a, NULL);
        saBlockSetDraining(a, b, on != 0);
        /* No free will ever empty a block that is empty already (the
         * slot's cached one, which the sparse sweep finds emptiest): apply
         * the empty block policy now, or it stays committed for good.
         * Draining, it goes; undrained, it may become the cached one. */
        if (b->live == 0) saBlockEmptied(a, b);
        ret = 0;
    } else {
        errno = EINVAL;
    }
    pthread_mutex_unlock(&a->lock);
    return ret;
}

/* Whether p lies in a draining block. Lock free, like ArenaOf. */
int slotAllocIsDraining(const void *p) {
    saBlock *b = saLookup(p);
    return b && b->draining;
}

/* Counters are read without stopping other threads: each is exact, but
 * they may come from slightly different moments. */
void slotAllocGetStats(slotAllocStats *st) {
    memset(st, 0, sizeof(*st));
    if (!sa.initialized) return;
    st->blocks = saStatGet(blocks);
    st->huge_blocks = saStatGet(huge_blocks);
    st->detached_blocks = saStatGet(detached_blocks);
    st->cached_empty_blocks = saStatGet(cached_empty);
    st->reserved_bytes = saStatGet(block_bytes);
    st->used_bytes = saStatGet(used_bytes);
    st->free_bytes = st->reserved_bytes > st->used_bytes ?
                     st->reserved_bytes - st->used_bytes : 0;
    st->live_allocs = saStatGet(live);
    st->metadata_bytes = saStatGet(meta_bytes);
    st->retired_bytes = saStatGet(retired_bytes);
    st->range_bytes = sa.range_bytes;
    pthread_mutex_lock(&sa.lock);
    st->range_free_bytes = sa.ext_free_units << SA_UNIT_SHIFT;
    pthread_mutex_unlock(&sa.lock);
}

/* Resident bytes of [base, base+size), as mincore() sees them, in chunks so
 * that the vector stays on the stack. 0 if the kernel refuses. */
static size_t saResidentBytes(const char *base, size_t size) {
    unsigned char vec[1024];
    size_t ps = SA_PAGE_SIZE, resident = 0;

    for (size_t off = 0; off < size; off += sizeof(vec) * ps) {
        size_t len = size - off < sizeof(vec) * ps ? size - off : sizeof(vec) * ps;
        if (mincore((void *)(base + off), len, vec) != 0) return resident;
        for (size_t i = 0; i < (len + ps - 1) / ps; i++) resident += (vec[i] & 1) * ps;
    }
    return resident;
}

/* What an arena's blocks cost in RAM: the resident bytes of every block it
 * holds (active ones, its cached empty block among them, and detached
 * ones an import is filling), and the usable bytes of its live
 * allocations, read under the same lock so that resident - used is the
 * arena's slack. One mincore() call per block (and per 4 MiB): callers
 * sweep a few arenas at a time. */
int slotAllocArenaResident(int id, size_t *resident, size_t *used) {
    saArena *a;

    *resident = *used = 0;
    if (id < 0 || id >= SLOTALLOC_NUM_SLOTS) {
        errno = EINVAL;
        return -1;
    }
    if (!sa.initialized || (a = saArenaGet(id, 0)) == NULL) return 0;
    pthread_mutex_lock(&a->lock);
    for (saBlock *b = a->blocks; b; b = b->next) *resident += saResidentBytes(b->base, b->size);
    for (saBlock *b = a->detached; b; b = b->next) *resident += saResidentBytes(b->base, b->size);
    *used = a->used_bytes;
    pthread_mutex_unlock(&a->lock);
    return 0;
}

/* The same for the arena of 'slot' (its group's). */
int slotAllocSlotResident(int slot, size_t *resident, size_t *used) {
    *resident = *used = 0;
    if (slot < 0 || slot >= SLOTALLOC_NUM_SLOTS) {
        errno = EINVAL;
        return -1;
    }
    if (!sa.initialized) return 0;
    return slotAllocArenaResident(saSlotArena(slot), resident, used);
}

int slotAllocSlotStats(int slot, slotAllocSlotStat *st) {
    if (slot < 0 || slot >= SLOTALLOC_NUM_SLOTS) {
        memset(st, 0, sizeof(*st));
        errno = EINVAL;
        return -1;
    }
    return slotAllocArenaStats(sa.initialized ? saSlotArena(slot) : 0, st);
}

int slotAllocArenaStats(int id, slotAllocSlotStat *st) {
    saArena *a;

    memset(st, 0, sizeof(*st));
    if (id < 0 || id >= SLOTALLOC_NUM_SLOTS) {
        errno = EINVAL;
        return -1;
    }
    if (!sa.initialized) return 0;
    st->arena = id;
    st->arena_slots = sa.members[id];
    if ((a = saArenaGet(id, 0)) == NULL) return 0;
    pthread_mutex_lock(&a->lock);
    st->blocks = a->nblocks;
    st->huge_blocks = a->nhuge;
    st->block_bytes = a->block_bytes;
    st->used_bytes = a->used_bytes;
    st->live_allocs = a->live;
    st->detached_blocks = a->ndetached;
    st->detached_bytes = a->detached_bytes;
    st->has_cached_empty = a->empty != NULL;
    st->arena_mixed = a->mixed;
    pthread_mutex_unlock(&a->lock);
    return 0;
}

/* ================================ Tests =================================== */

#ifdef REDIS_TEST
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#define SA_CHECK(cond) do { \
    if (!(cond)) { \
        printf("    check failed: %s (slotalloc.c:%d)\n", #cond, __LINE__); \
        return 1; \
    } \
} while (0)

static uint64_t sa_test_seed = 0x9e3779b97f4a7c15ULL;

static uint64_t saTestRand(void) {
    sa_test_seed ^= sa_test_seed >> 12;
    sa_test_seed ^= sa_test_seed << 25;
    sa_test_seed ^= sa_test_seed >> 27;
    return sa_test_seed * 2685821657736338717ULL;
}

/* Every byte of [p, p+n) equals v. */
static int saTestFilled(const void *p, size_t n, int v) {
    const unsigned char *c = p;
    return n == 0 || (c[0] == (unsigned char)v && memcmp(c, c + 1, n - 1) == 0);
}

/* Resident pages of [addr, addr+len), as mincore() sees them. */
static size_t saTestResident(void *addr, size_t len) {
    size_t ps = sysconf(_SC_PAGESIZE), n = len / ps, r = 0;
    unsigned char *vec = malloc(n);

    if (mincore(addr, len, vec) == 0)
        for (size_t i = 0; i < n; i++) r += vec[i] & 1;
    free(vec);
    return r;
}

/* Cross-check one arena's runtime state against the content of its blocks
 * (lock held): counters, partial lists, span lists. */
static int saTestVerifyArena(saArena *a, size_t *live, size_t *used, size_t *blocks) {
    size_t nonfull = 0, runs = 0, nb = 0, bytes = 0, l = 0, u = 0, n = 0;
    saImageInfo in;

    for (saBlock *b = a->blocks; b; b = b->next) {
        if (b->state != SA_BLOCK_ACTIVE || saImageCheck(b->base, b->size, &in) == -1 ||
            ((saBlockHeader *)b->base)->slot != (uint32_t)a->id ||
            in.live != b->live || in.used != b->used_bytes || in.huge != b->huge ||
            (!b->huge && in.free_pages != b->free_pages)) return 0;
        /* A draining block's free slabs and spans are on no list. */
        if (!b->draining) {
            nonfull += in.nonfull_slabs;
            runs += in.free_runs;
        }
        nb++, bytes += b->size, l += b->live, u += b->used_bytes;
    }
    if (nb != a->nblocks || bytes != a->block_bytes || l != a->live || u != a->used_bytes)
        return 0;
    for (int c = 0; c < SA_NUM_CLASSES; c++) {
        for (saPageInfo *s = a->partial[c]; s; s = s->next, n++) {
            saPageEntry e = s->block->pt[s->page];
            uint32_t cnt = 0;
            for (uint32_t j = 0; j < sa_class_pages[c] * SA_WORDS_PER_PAGE; j++)
                cnt += __builtin_popcountll(s->block->bitmap[(size_t)s->page * SA_WORDS_PER_PAGE + j]);
            if (e.kind != SA_PG_SLAB || e.arg || e.cls != c || !s->nfree || s->block->draining ||
                s->nfree != sa_class_chunks[c] - cnt) return 0;
        }
    }
    if (n != nonfull) return 0;
    n = 0;
    for (int bin = 0; bin < SA_SPAN_BINS; bin++) {
        for (saPageInfo *s = a->spans[bin]; s; s = s->next, n++) {
            saPageEntry e = s->block->pt[s->page];
            if (e.kind != SA_PG_FREE || saSpanBin(e.arg) != bin || s->block->draining ||
                s->block->pt[s->page + e.arg - 1].arg != e.arg) return 0;
        }
    }
    if (n != runs) return 0;
    *live += l, *used += u, *blocks += nb + a->ndetached;
    return 1;
}

static int saTestVerifyAll(void) {
    size_t live = 0, used = 0, blocks = 0;

    for (int slot = 0; slot < SLOTALLOC_NUM_SLOTS; slot++) {
        saArena *a = saArenaGet(slot, 0);
        if (!a) continue;
        pthread_mutex_lock(&a->lock);
        int ok = saTestVerifyArena(a, &live, &used, &blocks);
        pthread_mutex_unlock(&a->lock);
        if (!ok) {
            printf("    slot %d: runtime state does not match its blocks\n", slot);
            return 0;
        }
    }
    return live == saStatGet(live) && used == saStatGet(used_bytes) &&
           blocks == saStatGet(blocks);
}

static int saTestClasses(void) {
    uint32_t maxpages = 0;

    /* jemalloc 5.2.1's small classes with --with-lg-quantum=3 (deps/Makefile
     * of Redis), by je_nallocx() for every size up to 14336. */
    static const uint32_t je_classes[SA_NUM_CLASSES] = {
        8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256,
        320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048,
        2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336};

    SA_CHECK(slotAllocInit(64 << 20, 0, 0) == 0);
    for (int c = 0; c < SA_NUM_CLASSES; c++) SA_CHECK(sa_class_size[c] == je_classes[c]);
    SA_CHECK(sa_class_size[SA_NUM_CLASSES - 1] == SA_SMALL_MAX);
    for (size_t size = 1; size <= SA_SMALL_MAX; size++) {
        int c = saClassOf(size);
        SA_CHECK(sa_class_size[c] >= size && (c == 0 || sa_class_size[c - 1] < size));
        SA_CHECK(size <= 64 || (sa_class_size[c] - size) * 4 <= sa_class_size[c]);
    }
    for (int c = 0; c < SA_NUM_CLASSES; c++) {
        size_t bytes = sa_class_pages[c] * SA_PAGE_SIZE;
        SA_CHECK(sa_class_size[c] % SA_MIN_CLASS == 0);
        SA_CHECK((bytes % sa_class_size[c]) * 8 <= bytes);
        /* saChunkIndex: every offset of the slab, and past it. */
        for (size_t off = 0; off < bytes + 2 * SA_PAGE_SIZE; off++) {
            size_t sz = sa_class_size[c];
            long want = off % sz == 0 && off / sz < sa_class_chunks[c] ? (long)(off / sz) : -1;
            SA_CHECK(saChunkIndex(c, off) == want);
        }
        SA_CHECK(sa_class_chunks[c] <= sa_class_pages[c] * SA_BITS_PER_PAGE);
        if (sa_class_pages[c] > maxpages) maxpages = sa_class_pages[c];
    }
    SA_CHECK(maxpages <= saDataPages(SA_UNIT_SIZE));
    return 0;
}

static int saTestBasic(void) {
    size_t sizes[2 * SA_NUM_CLASSES + 10], n = 0;
    void *ptrs[sizeof(sizes) / sizeof(sizes[0])];
    slotAllocStats st;

    SA_CHECK(slotAllocInit(256 << 20, 0, 0) == 0);
    for (int c = 0; c < SA_NUM_CLASSES; c++) {
        sizes[n++] = sa_class_size[c];
        sizes[n++] = sa_class_size[c] - 1 - c;
    }
    size_t big[] = {0, SA_SMALL_MAX + 1, 16384, 20000, 100000, 1 << 20,
                    (1 << 20) + 1, 5 << 20, (9 << 20) + 123};
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) sizes[n++] = big[i];
    for (size_t i = 0; i < n; i++) {
        void *p = ptrs[i] = slotAllocMalloc(42, sizes[i]);
        size_t usable = slotAllocUsableSize(p);
        SA_CHECK(p && usable >= sizes[i] && usable == saFitSize(sizes[i]));
        SA_CHECK(((uintptr_t)p & (SA_MIN_CLASS - 1)) == 0);
        SA_CHECK(sizes[i] <= SA_SMALL_MAX || ((uintptr_t)p & (SA_PAGE_SIZE - 1)) == 0);
        SA_CHECK(slotAllocOwns(p) && slotAllocArenaOf(p) == 42);
        SA_CHECK(slotAllocBlockOf(p) && (char *)slotAllocBlockOf(p) < (char *)p);
        memset(p, (int)i + 1, usable);
    }
    slotAllocGetStats(&st);
    SA_CHECK(st.live_allocs == n && st.huge_blocks == 3 && saTestVerifyAll());
    for (size_t i = n; i--; ) {
        SA_CHECK(saTestFilled(ptrs[i], slotAllocUsableSize(ptrs[i]), (int)i + 1));
        slotAllocFree(ptrs[i]);
    }
    slotAllocFree(NULL);
    slotAllocGetStats(&st);
    SA_CHECK(st.used_bytes == 0 && st.live_allocs == 0 && st.huge_blocks == 0);
    SA_CHECK(st.blocks == 1 && st.cached_empty_blocks == 1);
    return 0;
}

/* Chunks of a slab are reused lowest first; an emptied slab goes back to
 * the spans unless it is the only one of its class with free chunks. */
static int saTestSlabs(void) {
    static char *p[300];
    saBlock *b;
    uint32_t free_before;

    SA_CHECK(slotAllocInit(64 << 20, 0, 0) == 0);
    char *keep = slotAllocMalloc(6, 32);    /* Keeps the block non-empty. */
    for (int i = 0; i < 300; i++) SA_CHECK((p[i] = slotAllocMalloc(6, 16)) != NULL);
    SA_CHECK(((uintptr_t)p[0] & (SA_PAGE_SIZE - 1)) == 0 && p[255] - p[0] == 255 * 16);
    b = saLookup(p[0]);
    SA_CHECK(b == saLookup(p[299]));
    free_before = b->free_pages;
    slotAllocFree(p[200]);
    slotAllocFree(p[3]);
    SA_CHECK(slotAllocMalloc(6, 16) == p[3] && slotAllocMalloc(6, 16) == p[200]);
    for (int i = 0; i < 256; i++) slotAllocFree(p[i]);
    SA_CHECK(b->free_pages == free_before + 1);
    for (int i = 256; i < 300; i++) slotAllocFree(p[i]);
    SA_CHECK(b->free_pages == free_before + 1 && slotAllocMalloc(6, 16) == p[256]);
    slotAllocFree(p[256]);
    slotAllocFree(keep);
    return 0;
}

static int sa_test_static;

static int saTestOwnership(void) {
    int local;
    char *m = calloc(1, 100);
    void *p, *q;

    size_t len = 1;

    SA_CHECK(slotAllocOwns(m) == 0);        /* Not initialized yet. */
    SA_CHECK(slotAllocRange(&len) == NULL && len == 0);
    SA_CHECK(slotAllocInit(256 << 20, 0, 0) == 0);
    p = slotAllocMalloc(7, 100);
    q = slotAllocMalloc(9, 100);
    /* Every pointer of ours is in the published range (zmalloc's check). */
    char *start = slotAllocRange(&len);
    SA_CHECK(start == sa.base && len == 256 << 20);
    SA_CHECK((uintptr_t)p - (uintptr_t)start < len &&
             (uintptr_t)q - (uintptr_t)start < len &&
             (uintptr_t)m - (uintptr_t)start >= len &&
             (uintptr_t)&local - (uintptr_t)start >= len);
    SA_CHECK(!slotAllocOwns(&local) && !slotAllocOwns(m) && !slotAllocOwns(NULL) &&
             !slotAllocOwns(&sa_test_static));
    SA_CHECK(slotAllocArenaOf(&local) == -1 && slotAllocArenaOf(m) == -1 &&
             slotAllocArenaOf(NULL) == -1 && slotAllocBlockOf(m) == NULL &&
             slotAllocUsableSize(m) == 0 && slotAllocUsableSize(NULL) == 0);
    SA_CHECK(!slotAllocOwns(sa.base - 1) && !slotAllocOwns(sa.base + sa.range_bytes) &&
             !slotAllocOwns(sa.base + sa.range_bytes - 1));
    SA_CHECK(slotAllocArenaOf(p) == 7 && slotAllocArenaOf(q) == 9);
    SA_CHECK(slotAllocBlockOf(p) != slotAllocBlockOf(q));
    SA_CHECK(slotAllocArenaOf((char *)p + 50) == 7);
    free(m);
    slotAllocFree(p);
    SA_CHECK(slotAllocOwns(p));             /* Cached empty block. */
    SA_CHECK(slotAllocTrim() == SLOTALLOC_DEFAULT_MIN_BLOCK);
    SA_CHECK(!slotAllocOwns(p) && slotAllocArenaOf(p) == -1 && slotAllocOwns(q));
    slotAllocFree(q);
    return 0;
}

static int saTestCalloc(void) {
    size_t sizes[] = {300, 5000, 40000, 3 << 20};

    SA_CHECK(slotAllocInit(256 << 20, 0, 0) == 0);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        void *p = slotAllocMalloc(1, sizes[i]);
        memset(p, 0xab, slotAllocUsableSize(p));
        slotAllocFree(p);
        p = slotAllocCalloc(1, sizes[i]);
        SA_CHECK(p && saTestFilled(p, slotAllocUsableSize(p), 0));
        slotAllocFree(p);
    }
    return 0;
}

static int saTestExhaustion(void) {
    static void *ptrs[2000];
    size_t n = 0, n2 = 0, sz = 512 << 10;
    slotAllocStats st;
    void *p, *addr;

    SA_CHECK(slotAllocInit(1 << 20, 64 << 10, 256 << 10) == 0);
    while (n < 2000 && (p = slotAllocMalloc(n % 4, 1000)) != NULL) ptrs[n++] = p;
    SA_CHECK(n > 500 && n < 2000);
    /* The slot that failed has no free page left, and no unit is free. */
    SA_CHECK(slotAllocMalloc(n % 4, 600 << 10) == NULL && slotAllocMalloc(n % 4, 20000) == NULL);
    SA_CHECK(slotAllocReserveBlocks(5, 1, &sz, &addr) == -1);
    for (size_t i = 0; i < n; i += 2) slotAllocFree(ptrs[i]);
    for (size_t i = 0; i < n; i += 2) SA_CHECK((ptrs[i] = slotAllocMalloc(i % 4, 1000)));
    for (size_t i = 0; i < n; i++) slotAllocFree(ptrs[i]);
    slotAllocTrim();
    slotAllocGetStats(&st);
    SA_CHECK(st.blocks == 0 && st.used_bytes == 0 && st.range_free_bytes == st.range_bytes);
    SA_CHECK((p = slotAllocMalloc(3, 900 << 10)) != NULL);
    slotAllocFree(p);
    while (n2 < 2000 && (p = slotAllocMalloc(n2 % 4, 1000)) != NULL) ptrs[n2++] = p;
    SA_CHECK(n2 == n && saTestVerifyAll());
    for (size_t i = 0; i < n2; i++) slotAllocFree(ptrs[i]);
    return 0;
}

typedef struct saTestAlloc {
    char *p;
    size_t size, usable;
    int slot, v;
    void *block;            /* Block it was in (adoption tests). */
} saTestAlloc;

static int saTestFragmentation(void) {
    const size_t max_live = 4000, ops = 60000;
    saTestAlloc *live = malloc(max_live * sizeof(*live));
    size_t n = 0, used = 0;
    slotAllocStats st;

    SA_CHECK(slotAllocInit((size_t)1 << 30, 0, 0) == 0);
    for (size_t op = 0; op < ops; op++) {
        uint64_t r = saTestRand();
        if (n < max_live && (n == 0 || r % 100 < 55)) {
            saTestAlloc *a = &live[n];
            uint64_t kind = (r >> 8) % 1000, x = r >> 20;
            a->size = kind < 700 ? 1 + x % 256 : kind < 955 ? 257 + x % 14080 :
                      kind < 998 ? SA_SMALL_MAX + 1 + x % 50000 : (1 << 20) + x % (3 << 20);
            a->slot = (int)(x % 8) * 1000;
            a->v = (int)(op % 251) + 1;
            SA_CHECK((a->p = slotAllocMalloc(a->slot, a->size)) != NULL);
            a->usable = slotAllocUsableSize(a->p);
            SA_CHECK(a->usable == saFitSize(a->size));
            memset(a->p, a->v, a->size);
            used += a->usable;
            n++;
        } else {
            saTestAlloc *a = &live[r % n];
            SA_CHECK(saTestFilled(a->p, a->size, a->v) && slotAllocArenaOf(a->p) == a->slot);
            SA_CHECK(slotAllocUsableSize(a->p) == a->usable);
            slotAllocFree(a->p);
            used -= a->usable;
            *a = live[--n];
        }
        slotAllocGetStats(&st);
        SA_CHECK(st.used_bytes == used && st.live_allocs == n &&
                 st.free_bytes == st.reserved_bytes - used);
        if (op % 5000 == 0) SA_CHECK(saTestVerifyAll());
    }
    SA_CHECK(saTestVerifyAll());
    while (n) {
        saTestAlloc *a = &live[--n];
        SA_CHECK(saTestFilled(a->p, a->size, a->v));
        slotAllocFree(a->p);
    }
    free(live);
    slotAllocGetStats(&st);
    SA_CHECK(st.used_bytes == 0 && st.blocks <= 8 && st.blocks == st.cached_empty_blocks);
    slotAllocTrim();
    slotAllocGetStats(&st);
    SA_CHECK(st.blocks == 0 && st.reserved_bytes == 0 && st.range_free_bytes == st.range_bytes);
    return 0;
}

static int saTestBlockReuse(void) {
    static void *ptrs[4096];
    slotAllocBlockInfo bi[4];
    slotAllocSlotStat ss;
    size_t n = 0;
    char *p;

    SA_CHECK(slotAllocInit(256 << 20, 0, 0) == 0);
    do {
        SA_CHECK(n < 4096 && (ptrs[n] = slotAllocMalloc(1, 3000)) != NULL);
        memset(ptrs[n++], 0x5a, 3000);
        slotAllocSlotStats(1, &ss);
    } while (ss.blocks < 3);
    SA_CHECK(slotAllocSlotBlocks(1, bi, 4) == 3);
    for (int i = 0; i < 3; i++) SA_CHECK(saTestResident(bi[i].addr, bi[i].size) > 0);
    for (size_t i = 0; i < n; i++) slotAllocFree(ptrs[i]);
    slotAllocSlotStats(1, &ss);
    SA_CHECK(ss.blocks == 1 && ss.has_cached_empty && ss.block_bytes == SLOTALLOC_DEFAULT_MIN_BLOCK);
    for (int i = 0; i < 3; i++) {
        if (bi[i].size == SLOTALLOC_DEFAULT_MIN_BLOCK) continue;
        SA_CHECK(saTestResident(bi[i].addr, bi[i].size) == 0 && !slotAllocOwns(bi[i].addr));
    }
    /* A new block of another slot lands in a released range. */
    SA_CHECK((p = slotAllocMalloc(2, 100)) != NULL);
    int reused = 0;
    for (int i = 0; i < 3; i++) {
        reused |= bi[i].size != SLOTALLOC_DEFAULT_MIN_BLOCK && p >= (char *)bi[i].addr &&
                  p < (char *)bi[i].addr + bi[i].size;
    }
    SA_CHECK(reused);
    SA_CHECK(slotAllocTrim() == SLOTALLOC_DEFAULT_MIN_BLOCK);
    for (int i = 0; i < 3; i++) {
        if (bi[i].size == SLOTALLOC_DEFAULT_MIN_BLOCK)
            SA_CHECK(saTestResident(bi[i].addr, bi[i].size) == 0 && !slotAllocOwns(bi[i].addr));
    }
    slotAllocFree(p);
    return 0;
}

/* Sparse-block compaction: a draining block takes no new allocation,
 * moving its allocations out releases it, and undraining restores it. */
static int saTestDrain(void) {
    static void *ptrs[4096];
    slotAllocBlockInfo bi[8];
    slotAllocSlotStat ss;
    size_t n = 0, nb;
    char *first, *p;

    SA_CHECK(slotAllocInit(256 << 20, 0, 0) == 0);
    do {
        SA_CHECK(n < 4096 && (ptrs[n] = slotAllocMalloc(3, 40 + n % 200)) != NULL);
        memset(ptrs[n], (int)(n & 0xff), 40 + n % 200);
        n++;
        slotAllocSlotStats(3, &ss);
    } while (ss.blocks < 3);
    nb = slotAllocSlotBlocks(3, bi, 8);
    SA_CHECK(nb == 3);
    /* The first block: keep one allocation in four, free the others. */
    first = slotAllocBlockOf(ptrs[0]);
    for (size_t i = 0; i < n; i++) {
        if (slotAllocBlockOf(ptrs[i]) == first && i % 4) {
            slotAllocFree(ptrs[i]);
            ptrs[i] = NULL;
        }
    }
    SA_CHECK(slotAllocBlockIsSparse(first, 0.5));
    SA_CHECK(slotAllocDrainBlock(first, 1) == 0);
    SA_CHECK(slotAllocDrainBlock((char *)first + 4096, 1) == -1);
    SA_CHECK(saTestVerifyAll());
    /* New allocations, of every small class, avoid it. */
    for (int i = 0; i < 200; i++) {
        SA_CHECK((p = slotAllocMalloc(3, 16 + i * 7)) != NULL);
        SA_CHECK(slotAllocBlockOf(p) != first && !slotAllocIsDraining(p));
        slotAllocFree(p);
    }
    /* Move what is left in it, as slot compaction does: copy, free. */
    for (size_t i = 0; i < n; i++) {
        if (!ptrs[i] || !slotAllocIsDraining(ptrs[i])) continue;
        size_t sz = 40 + i % 200;
        SA_CHECK((p = slotAllocMalloc(3, sz)) != NULL && !slotAllocIsDraining(p));
        memcpy(p, ptrs[i], sz);
        slotAllocFree(ptrs[i]);
        ptrs[i] = p;
    }
    /* The emptied draining block is gone at once (not cached). */
    SA_CHECK(!slotAllocOwns(first));
    slotAllocSlotStats(3, &ss);
    SA_CHECK(ss.blocks == 2 && !ss.has_cached_empty);
    SA_CHECK(saTestVerifyAll());
    for (size_t i = 0; i < n; i++)
        if (ptrs[i]) SA_CHECK(saTestFilled(ptrs[i], 40 + i % 200, (int)(i & 0xff)));
    /* Undraining gives a block its free space back. */
    nb = slotAllocSlotBlocks(3, bi, 8);
    SA_CHECK(slotAllocDrainBlock(bi[0].addr, 1) == 0);
    SA_CHECK(saTestVerifyAll());
    SA_CHECK(slotAllocDrainBlock(bi[0].addr, 0) == 0 && !slotAllocIsDraining(bi[0].addr));
    SA_CHECK(saTestVerifyAll());
    for (size_t i = 0; i < n; i++) slotAllocFree(ptrs[i]);
    /* Every block emptied: one stays, cached. Draining it releases it
     * (nothing would ever be freed in it again), and so does undraining
     * an empty block that another cached one outlives. */
    slotAllocSlotStats(3, &ss);
    SA_CHECK(ss.blocks == 1 && ss.has_cached_empty && ss.live_allocs == 0);
    nb = slotAllocSlotBlocks(3, bi, 8);
    SA_CHECK(nb == 1 && slotAllocDrainBlock(bi[0].addr, 1) == 0);
    slotAllocSlotStats(3, &ss);
    SA_CHECK(ss.blocks == 0 && !ss.has_cached_empty);
    SA_CHECK(saTestVerifyAll());
    return 0;
}

/* What a recipient checks pointers with: LiveSize and BlockAllocs. */
static int saTestLiveAllocs(void) {
    static void *ptrs[600], *got[700];
    slotAllocBlockInfo bi[8];
    size_t nb, total = 0, sz;

    SA_CHECK(slotAllocInit(256 << 20, 0, 0) == 0);
    for (int i = 0; i < 600; i++) {
        sz = i % 50 == 0 ? 20000 : 16 + (size_t)(i * 37) % 3000;
        SA_CHECK((ptrs[i] = slotAllocMalloc(4, sz)) != NULL);
    }
    for (int i = 0; i < 600; i += 3) { slotAllocFree(ptrs[i]); ptrs[i] = NULL; }
    SA_CHECK((got[0] = slotAllocMalloc(5, 100)) != NULL);
    SA_CHECK(slotAllocLiveSize(4, got[0]) == 0 && slotAllocLiveSize(5, got[0]) >= 100);
    slotAllocFree(got[0]);
    for (int i = 0; i < 600; i++) {
        if (!ptrs[i]) continue;
        size_t u = slotAllocUsableSize(ptrs[i]);
        SA_CHECK(slotAllocLiveSize(4, ptrs[i]) == u);
        SA_CHECK(slotAllocLiveSize(4, (char *)ptrs[i] + 8) == 0);
    }
    SA_CHECK(slotAllocLiveSize(4, &total) == 0);
    nb = slotAllocSlotBlocks(4, bi, 8);
    SA_CHECK(nb >= 1 && nb <= 8);
    SA_CHECK(slotAllocLiveSize(4, bi[0].addr) == 0);  /* a header */
    for (size_t b = 0; b < nb; b++) {
        size_t n = slotAllocBlockAllocs(bi[b].addr, got, 700);
        SA_CHECK(n == bi[b].live_allocs && n <= 700);
        SA_CHECK(slotAllocBlockLive(bi[b].addr) == n);
        SA_CHECK(slotAllocBlockLive((char *)bi[b].addr + 4096) == 0);
        for (size_t k = 0; k < n; k++) {
            int found = 0;
            SA_CHECK(slotAllocLiveSize(4, got[k]) > 0);
            for (int i = 0; i < 600 && !found; i++) found = ptrs[i] == got[k];
            SA_CHECK(found);
            if (k) SA_CHECK((char *)got[k] > (char *)got[k - 1]);
        }
        total += n;
    }
    SA_CHECK(total == 400);
    for (int i = 0; i < 600; i++) slotAllocFree(ptrs[i]);
    SA_CHECK(slotAllocBlockLive(bi[0].addr) == 0 && slotAllocBlockLive(&total) == 0);
    return 0;
}

static int saTestReleaseSlot(void) {
    static void *ptrs[2000], *other[100];
    slotAllocBlockInfo bi[64];
    slotAllocStats before, after;
    slotAllocSlotStat ss, ss4;
    size_t nb, sz = 256 << 10;
    void *addr;

    SA_CHECK(slotAllocInit(256 << 20, 0, 0) == 0);
    for (int i = 0; i < 100; i++) memset(other[i] = slotAllocMalloc(4, 200), 0x44, 200);
    for (int i = 0; i < 2000; i++) {
        size_t size = i == 7 || i == 1500 ? 5 << 20 : i % 10 == 0 ? 30000 : 1 + i % 3000;
        SA_CHECK((ptrs[i] = slotAllocMalloc(3, size)) != NULL);
        memset(ptrs[i], 0x33, size);
    }
    SA_CHECK(slotAllocReserveBlocks(3, 1, &sz, &addr) == 0);
    nb = slotAllocSlotBlocks(3, bi, 64);
    SA_CHECK(nb > 3 && nb <= 64);
    slotAllocGetStats(&before);
    slotAllocSlotStats(3, &ss);
    slotAllocSlotStats(4, &ss4);
    slotAllocReleaseSlot(3);
    slotAllocGetStats(&after);
    SA_CHECK(after.reserved_bytes == before.reserved_bytes - ss.block_bytes - sz);
    SA_CHECK(after.used_bytes == ss4.used_bytes && after.live_allocs == 100);
    SA_CHECK(after.blocks == before.blocks - nb - 1 && after.detached_blocks == 0);
    slotAllocSlotStats(3, &ss);
    SA_CHECK(ss.blocks == 0 && ss.used_bytes == 0 && ss.live_allocs == 0 && !ss.detached_blocks);
    SA_CHECK(slotAllocSlotBlocks(3, bi, 0) == 0 && !slotAllocOwns(ptrs[0]) && !slotAllocOwns(addr));
    for (size_t i = 0; i < nb; i++) SA_CHECK(saTestResident(bi[i].addr, bi[i].size) == 0);
    for (int i = 0; i < 100; i++) {
        SA_CHECK(saTestFilled(other[i], 200, 0x44));
        slotAllocFree(other[i]);
    }
    SA_CHECK(saTestVerifyAll() && (addr = slotAllocMalloc(3, 100)) != NULL);
    slotAllocFree(addr);
    return 0;
}

/* Retire + purge: the slot is empty at once, the pages and addresses stay
 * taken until the purge, from another thread. */
static void *saTestPurgeThread(void *arg) {
    *(size_t *)arg = slotAllocPurgeRetired();
    return NULL;
}

static int saTestRetireSlot(void) {
    static void *ptrs[500], *others[5];
    slotAllocBlockInfo bi[64];
    slotAllocStats before, mid, after;
    slotAllocSlotStat ss;
    size_t nb, sz = 128 << 10, purged = 0, resident = 0;
    void *addr, *p;
    pthread_t t;

    SA_CHECK(slotAllocInit(256 << 20, 0, 0) == 0);
    /* Slot 6 grows alongside, so some of slot 5's blocks have a live
     * neighbour and others are adjacent (the purge gives up runs of
     * adjacent blocks at once; the neighbours must not suffer). */
    for (int i = 0; i < 500; i++) {
        size_t size = i == 3 ? 3 << 20 : 1 + (i * 37) % 5000;
        SA_CHECK((ptrs[i] = slotAllocMalloc(5, size)) != NULL);
        memset(ptrs[i], 0x55, size);
        if (i % 100 == 0) {
            SA_CHECK((others[i / 100] = slotAllocMalloc(6, 60000)) != NULL);
            memset(others[i / 100], 0x77, 60000);
        }
    }
    SA_CHECK(slotAllocReserveBlocks(5, 1, &sz, &addr) == 0);
    memset(addr, 0x66, sz);
    nb = slotAllocSlotBlocks(5, bi, 64);
    SA_CHECK(nb > 1 && nb <= 64);
    slotAllocGetStats(&before);
    slotAllocSlotStats(5, &ss);
    SA_CHECK(before.retired_bytes == 0);
    SA_CHECK(slotAllocRetireSlot(5) == ss.used_bytes);
    slotAllocGetStats(&mid);
    /* Gone from the slot and the figures, still committed. */
    SA_CHECK(mid.retired_bytes == ss.block_bytes + sz);
    SA_CHECK(mid.reserved_bytes == before.reserved_bytes - ss.block_bytes - sz);
    SA_CHECK(mid.blocks == before.blocks - nb - 1 && mid.detached_blocks == 0);
    SA_CHECK(mid.range_free_bytes == before.range_free_bytes);
    SA_CHECK(!slotAllocOwns(ptrs[0]) && !slotAllocOwns(addr) && slotAllocSlotBlocks(5, bi + nb, 0) == 0);
    for (size_t i = 0; i < nb; i++) resident += saTestResident(bi[i].addr, bi[i].size);
    SA_CHECK(resident > 0);
    /* New allocations of the slot do not land in retired addresses. */
    SA_CHECK((p = slotAllocMalloc(5, 100)) != NULL);
    for (size_t i = 0; i < nb; i++)
        SA_CHECK((uintptr_t)p < (uintptr_t)bi[i].addr || (uintptr_t)p >= (uintptr_t)bi[i].addr + bi[i].size);
    SA_CHECK(saTestVerifyAll());
    /* Purged from another thread; a second purge finds nothing. */
    SA_CHECK(pthread_create(&t, NULL, saTestPurgeThread, &purged) == 0);
    pthread_join(t, NULL);
    SA_CHECK(purged == mid.retired_bytes && slotAllocPurgeRetired() == 0);
    slotAllocGetStats(&after);
    SA_CHECK(after.retired_bytes == 0);
    SA_CHECK(after.range_free_bytes == mid.range_free_bytes + purged - (after.reserved_bytes - mid.reserved_bytes));
    for (size_t i = 0; i < nb; i++) SA_CHECK(saTestResident(bi[i].addr, bi[i].size) == 0);
    for (int i = 0; i < 5; i++) {
        SA_CHECK(saTestFilled(others[i], 60000, 0x77));
        slotAllocFree(others[i]);
    }
    slotAllocFree(p);
    SA_CHECK(saTestVerifyAll() && slotAllocPurgeRetired() == 0);
    return 0;
}

static int saTestRealloc(void) {
    size_t sizes[] = {1, 10, 100, 3000, 20000, 16000, 2 << 20, 5 << 20, 50, 7, 14000};
    size_t old = 0;
    void *p = NULL, *q;

    SA_CHECK(slotAllocInit(256 << 20, 0, 0) == 0);
    SA_CHECK(slotAllocRealloc(NULL, 10) == NULL);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        q = i ? slotAllocRealloc(p, sizes[i]) : slotAllocMalloc(11, sizes[i]);
        SA_CHECK(q && slotAllocArenaOf(q) == 11 && slotAllocUsableSize(q) >= sizes[i]);
        SA_CHECK(saTestFilled(q, old < sizes[i] ? old : sizes[i], (int)i));
        memset(q, (int)i + 1, sizes[i]);
        p = q;
        old = sizes[i];
    }
    SA_CHECK(slotAllocRealloc(p, 0) == NULL);
    p = slotAllocMalloc(11, 100);
    SA_CHECK(slotAllocRealloc(p, 110) == p && slotAllocRealloc(p, 97) == p);
    q = slotAllocMalloc(11, 2 << 20);
    SA_CHECK(slotAllocRealloc(q, slotAllocUsableSize(q)) == q);
    SA_CHECK(slotAllocRealloc(q, (size_t)1 << 62) == NULL && slotAllocOwns(q));
    slotAllocFree(p);
    slotAllocFree(q);
    return 0;
}

static int saTestStats(void) {
    static void *ptrs[3000];
    size_t sum = 0, slot_used = 0, slot_bytes = 0, n = 0;
    slotAllocBlockInfo bi[64];
    slotAllocStats st;
    slotAllocSlotStat ss;

    SA_CHECK(slotAllocInit(512 << 20, 0, 0) == 0);
    for (int i = 0; i < 3000; i++) {
        uint64_t r = saTestRand();
        size_t size = r % 100 == 0 ? 20000 + r % 100000 : r % 1000 == 1 ? 3 << 20 : 1 + r % 2000;
        SA_CHECK((ptrs[i] = slotAllocMalloc(i % 10, size)) != NULL);
        sum += slotAllocUsableSize(ptrs[i]);
    }
    slotAllocGetStats(&st);
    SA_CHECK(st.used_bytes == sum && st.free_bytes == st.reserved_bytes - sum);
    SA_CHECK(st.live_allocs == 3000 && st.metadata_bytes > 0);
    for (int slot = 0; slot < 10; slot++) {
        size_t nb = slotAllocSlotBlocks(slot, bi, 64), u = 0, l = 0, bytes = 0;
        SA_CHECK(slotAllocSlotStats(slot, &ss) == 0 && nb == ss.blocks && nb <= 64);
        for (size_t i = 0; i < nb; i++) u += bi[i].used_bytes, l += bi[i].live_allocs, bytes += bi[i].size;
        SA_CHECK(u == ss.used_bytes && l == ss.live_allocs && bytes == ss.block_bytes);
        slot_used += ss.used_bytes, slot_bytes += ss.block_bytes, n += nb;
    }
    SA_CHECK(slot_used == sum && slot_bytes == st.reserved_bytes && n == st.blocks);
    SA_CHECK(slotAllocSlotStats(-1, &ss) == -1 && slotAllocSlotStats(SLOTALLOC_NUM_SLOTS, &ss) == -1);
    for (int i = 0; i < 3000; i++) slotAllocFree(ptrs[i]);

    /* Sparse blocks: fill slot 20's first block with 64 byte chunks, then
     * free 19 of every 20. */
    n = 0;
    do {
        SA_CHECK((ptrs[n++] = slotAllocMalloc(20, 64)) != NULL);
    } while (slotAllocSlotBlocks(20, bi, 64) < 2);
    void *first = slotAllocBlockOf(ptrs[0]);
    SA_CHECK(!slotAllocBlockIsSparse(first, 0.5) && !slotAllocBlockIsSparse(ptrs[0], 0.5));
    for (size_t i = 0; i < n; i++) if (i % 20) slotAllocFree(ptrs[i]);
    SA_CHECK(slotAllocBlockIsSparse(first, 0.25) && !slotAllocBlockIsSparse(first, 0.01));
    for (size_t i = 0; i < n; i += 20) slotAllocFree(ptrs[i]);
    return 0;
}

static void saTestDieHandler(const char *msg) {
    (void)msg;
    _exit(42);
}

/* Run one misuse case in a child: it must end in the panic handler. */
static int saTestDies(int what) {
    pid_t pid;
    int status;

    fflush(stdout);
    if ((pid = fork()) == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 2);
        slotAllocSetPanicHandler(saTestDieHandler);
        char *p = slotAllocMalloc(1, 64), *r = slotAllocMalloc(1, 40000);
        char *h = slotAllocMalloc(1, 5 << 20);
        static char m[16];          /* Not ours (and not leaked). */
        switch (what) {
        case 0: slotAllocFree(p); slotAllocFree(p); break;
        case 1: slotAllocFree(p + 16); break;
        case 2: slotAllocFree(r + SA_PAGE_SIZE); break;
        case 3: slotAllocFree(slotAllocBlockOf(p)); break;
        case 4: slotAllocFree(h + 8); break;
        case 5: slotAllocFree(m); break;
        case 6: slotAllocReleaseBlock(slotAllocBlockOf(p)); break;
        case 7: slotAllocFree(r); slotAllocFree(r); break;
        }
        _exit(0);
    }
    if (pid == -1 || waitpid(pid, &status, 0) != pid) return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 42;
}

static int saTestMisuse(void) {
    SA_CHECK(slotAllocInit(256 << 20, 0, 0) == 0);
    for (int what = 0; what < 8; what++) {
        if (!saTestDies(what)) {
            printf("    misuse case %d not detected\n", what);
            return 1;
        }
    }
    return 0;
}

/* Cross-thread frees: the main thread allocates in slot 5 and hands most
 * allocations to a thread that checks and frees them, like lazyfree. */
typedef struct saTestQueue {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    saTestAlloc items[1024];
    size_t head, count, freed, errors;
    int done;
} saTestQueue;

static void *saTestFreer(void *arg) {
    saTestQueue *q = arg;
    saTestAlloc batch[1024];

    for (;;) {
        size_t n = 0;
        pthread_mutex_lock(&q->lock);
        while (!q->count && !q->done) pthread_cond_wait(&q->cond, &q->lock);
        while (q->count) {
            batch[n++] = q->items[q->head];
            q->head = (q->head + 1) % 1024;
            q->count--;
        }
        int done = q->done;
        pthread_cond_broadcast(&q->cond);
        pthread_mutex_unlock(&q->lock);
        for (size_t i = 0; i < n; i++) {
            saTestAlloc *a = &batch[i];
            if (!saTestFilled(a->p, a->size, a->v) || slotAllocArenaOf(a->p) != 5 ||
                slotAllocUsableSize(a->p) != a->usable) q->errors++;
            slotAllocFree(a->p);
        }
        pthread_mutex_lock(&q->lock);
        q->freed += n;
        pthread_mutex_unlock(&q->lock);
        if (done && n == 0) return NULL;
    }
}

static int saTestThreads(void) {
    const size_t ops = 250000;
    static saTestQueue q;
    saTestAlloc mine[64];
    size_t nmine = 0, sent = 0;
    slotAllocSlotStat ss;
    pthread_t tid;

    SA_CHECK(slotAllocInit(256 << 20, 0, 0) == 0);
    memset(&q, 0, sizeof(q));
    pthread_mutex_init(&q.lock, NULL);
    pthread_cond_init(&q.cond, NULL);
    SA_CHECK(pthread_create(&tid, NULL, saTestFreer, &q) == 0);
    for (size_t i = 0; i < ops; i++) {
        uint64_t r = saTestRand();
        saTestAlloc a = {NULL, r % 200 ? 1 + r % 600 : 20000, 0, 5, (int)(i % 251) + 1, NULL};
        SA_CHECK((a.p = slotAllocMalloc(5, a.size)) != NULL);
        a.usable = slotAllocUsableSize(a.p);
        memset(a.p, a.v, a.size);
        if (i % 4 == 0) {       /* Some stay on the main thread for a while. */
            if (nmine == 64) {
                SA_CHECK(saTestFilled(mine[0].p, mine[0].size, mine[0].v));
                slotAllocFree(mine[0].p);
                mine[0] = mine[--nmine];
            }
            mine[nmine++] = a;
            continue;
        }
        pthread_mutex_lock(&q.lock);
        while (q.count == 1024) pthread_cond_wait(&q.cond, &q.lock);
        q.items[(q.head + q.count++) % 1024] = a;
        if (q.count == 1) pthread_cond_broadcast(&q.cond);
        pthread_mutex_unlock(&q.lock);
        sent++;
    }
    pthread_mutex_lock(&q.lock);
    q.done = 1;
    pthread_cond_broadcast(&q.cond);
    pthread_mutex_unlock(&q.lock);
    pthread_join(tid, NULL);
    while (nmine) slotAllocFree(mine[--nmine].p);
    pthread_mutex_destroy(&q.lock);
    pthread_cond_destroy(&q.cond);
    slotAllocSlotStats(5, &ss);
    SA_CHECK(q.errors == 0 && q.freed == sent);
    SA_CHECK(ss.used_bytes == 0 && ss.live_allocs == 0 && saTestVerifyAll());
    return 0;
}

/* Donor side fixture for the adoption tests: slot 100 gets allocations of
 * every class and a few runs, and every third one is freed. Returns in *x
 * the block with the most live allocations among those holding both live
 * and freed runs, and the allocations (freed ones with p = NULL) in out[]. */
static int saTestDonor(saTestAlloc *out, size_t n, slotAllocBlockInfo *x) {
    slotAllocBlockInfo bi[64];
    size_t nb;

    for (size_t i = 0; i < n; i++) {
        saTestAlloc *a = &out[i];
        a->size = i % 50 == 25 ? 20000 + i * 40 : sa_class_size[i % SA_NUM_CLASSES] - i % 3;
        a->v = (int)(i % 251) + 1;
        if ((a->p = slotAllocMalloc(100, a->size)) == NULL) return 0;
        memset(a->p, a->v, a->size);
    }
    for (size_t i = 0; i < n; i++) out[i].block = slotAllocBlockOf(out[i].p);
    for (size_t i = 0; i < n; i += 3) {
        slotAllocFree(out[i].p);
        out[i].p = NULL;
    }
    nb = slotAllocSlotBlocks(100, bi, 64);
    memset(x, 0, sizeof(*x));
    for (size_t i = 0; i < nb && i < 64; i++) {
        size_t runs = 0, freed_runs = 0;
        for (size_t j = 0; j < n; j++) {
            if (out[j].block != bi[i].addr || out[j].size <= SA_SMALL_MAX) continue;
            if (out[j].p) runs++;
            else freed_runs++;
        }
        if (!bi[i].huge && runs && freed_runs && bi[i].live_allocs > x->live_allocs) *x = bi[i];
    }
    return x->live_allocs > 0;
}

static int saTestAdopt(void) {
    static saTestAlloc allocs[600];
    slotAllocBlockInfo x;
    slotAllocSlotStat ss;
    void *y, *q;

    SA_CHECK(slotAllocInit(256 << 20, 64 << 10, 256 << 10) == 0);
    SA_CHECK(saTestDonor(allocs, 600, &x));
    SA_CHECK(slotAllocReserveBlocks(200, 1, &x.size, &y) == 0);
    SA_CHECK(slotAllocOwns(y) && slotAllocArenaOf(y) == 200 && slotAllocUsableSize(y) == 0);
    slotAllocSlotStats(200, &ss);
    SA_CHECK(ss.detached_blocks == 1 && ss.blocks == 0);
    SA_CHECK(slotAllocAdoptBlock(200, y) == -1);            /* Still zero. */
    memcpy(y, x.addr, x.size);
    SA_CHECK(slotAllocAdoptBlock(201, y) == -1 && slotAllocAdoptBlock(200, x.addr) == -1);
    SA_CHECK(slotAllocAdoptBlock(200, (char *)y + 4096) == -1);
    SA_CHECK(slotAllocAdoptBlock(200, y) == 0);
    SA_CHECK(slotAllocAdoptBlock(200, y) == -1);            /* Not detached any more. */
    slotAllocSlotStats(200, &ss);
    SA_CHECK(ss.blocks == 1 && ss.detached_blocks == 0 && ss.used_bytes == x.used_bytes &&
             ss.live_allocs == x.live_allocs && saTestVerifyAll());
    size_t moved = 0;
    for (size_t i = 0; i < 600; i++) {
        saTestAlloc *a = &allocs[i];
        if (!a->p || slotAllocBlockOf(a->p) != x.addr) continue;
        q = (char *)y + (a->p - (char *)x.addr);
        SA_CHECK(slotAllocOwns(q) && slotAllocArenaOf(q) == 200 && slotAllocBlockOf(q) == y);
        SA_CHECK(slotAllocUsableSize(q) == slotAllocUsableSize(a->p));
        SA_CHECK(saTestFilled(q, a->size, a->v));
        moved++;
    }
    SA_CHECK(moved == x.live_allocs);
    /* What was freed in x is free in y, and taken from y first (runs
     * before chunks, so that chunks do not split the spans runs need). */
    static void *fresh[600];
    size_t nfresh = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < 600; i += 3) {
            saTestAlloc *a = &allocs[i];
            if (a->block != x.addr || (a->size > SA_SMALL_MAX) != (pass == 0)) continue;
            SA_CHECK((fresh[nfresh] = slotAllocMalloc(200, a->size)) != NULL);
            SA_CHECK(slotAllocBlockOf(fresh[nfresh++]) == y);
        }
    }
    slotAllocSlotStats(200, &ss);
    SA_CHECK(nfresh > 0 && ss.blocks == 1 && saTestVerifyAll());
    for (size_t i = 0; i < nfresh; i++) slotAllocFree(fresh[i]);
    for (size_t i = 0; i < 600; i++) {
        if (!allocs[i].p || slotAllocBlockOf(allocs[i].p) != x.addr) continue;
        slotAllocFree((char *)y + (allocs[i].p - (char *)x.addr));
    }
    slotAllocSlotStats(200, &ss);
    SA_CHECK(ss.used_bytes == 0 && ss.live_allocs == 0 && saTestVerifyAll());

    /* A huge block moves the same way. */
    char *h = slotAllocMalloc(100, 200000);
    size_t hsize = SA_PAGE_SIZE + slotAllocUsableSize(h);
    memset(h, 0x77, 200000);
    SA_CHECK(slotAllocReserveBlocks(200, 1, &hsize, &y) == 0);
    memcpy(y, slotAllocBlockOf(h), hsize);
    SA_CHECK(slotAllocAdoptBlock(200, y) == 0);
    q = (char *)y + SA_PAGE_SIZE;
    SA_CHECK(slotAllocUsableSize(q) == slotAllocUsableSize(h) && saTestFilled(q, 200000, 0x77));
    slotAllocFree(q);
    SA_CHECK(!slotAllocOwns(y) && saTestVerifyAll());
    slotAllocFree(h);
    return 0;
}

/* A copy of only the used ranges of a block (what a migration ships) into
 * a fresh, zero block adopts with every allocation intact. */
static int saTestUsedRanges(void) {
    static saTestAlloc allocs[600];
    slotAllocBlockInfo x;
    slotAllocRangeInfo r[256];
    size_t n, total = 0;
    void *y;

    SA_CHECK(slotAllocInit(256 << 20, 64 << 10, 256 << 10) == 0);
    SA_CHECK(saTestDonor(allocs, 600, &x));
    n = slotAllocBlockUsedRanges(x.addr, r, 256);
    SA_CHECK(n > 0 && n <= 256 && r[0].offset == 0);
    for (size_t i = 0; i < n; i++) {
        SA_CHECK(r[i].len > 0 && r[i].offset % SA_PAGE_SIZE == 0);  /* Header, slab or run. */
        SA_CHECK(r[i].offset + r[i].len <= x.size);
        if (i) SA_CHECK(r[i].offset > r[i - 1].offset + r[i - 1].len);  /* Merged. */
        total += r[i].len;
    }
    SA_CHECK(total < x.size);       /* The freed runs left free pages out. */
    /* Some slab's free tail is left out too: a range ends inside a page. */
    int ragged = 0;
    for (size_t i = 0; i < n; i++) ragged |= (r[i].offset + r[i].len) % SA_PAGE_SIZE != 0;
    SA_CHECK(ragged);
    for (size_t i = 0; i < 600; i++) {
        saTestAlloc *a = &allocs[i];
        if (!a->p || slotAllocBlockOf(a->p) != x.addr) continue;
        size_t off = (size_t)(a->p - (char *)x.addr), in = 0;
        for (size_t j = 0; j < n; j++)
            if (off >= r[j].offset && off + a->size <= r[j].offset + r[j].len) in = 1;
        SA_CHECK(in);
    }
    SA_CHECK(slotAllocBlockUsedRanges((char *)x.addr + SA_PAGE_SIZE, r, 256) == 0);
    SA_CHECK(slotAllocReserveBlocks(200, 1, &x.size, &y) == 0);
    for (size_t i = 0; i < n; i++)
        memcpy((char *)y + r[i].offset, (char *)x.addr + r[i].offset, r[i].len);
    SA_CHECK(slotAllocAdoptBlock(200, y) == 0);
    for (size_t i = 0; i < 600; i++) {
        saTestAlloc *a = &allocs[i];
        if (!a->p || slotAllocBlockOf(a->p) != x.addr) continue;
        void *q = (char *)y + (a->p - (char *)x.addr);
        SA_CHECK(slotAllocUsableSize(q) == slotAllocUsableSize(a->p));
        SA_CHECK(saTestFilled(q, a->size, a->v));
        slotAllocFree(q);
    }
    SA_CHECK(saTestVerifyAll());
    for (size_t i = 0; i < 600; i++) if (allocs[i].p) slotAllocFree(allocs[i].p);
    return 0;
}

/* The used ranges of slabs stop at their last live chunk, and a slab with
 * none is left out: what a migration ships of a block that is mostly free
 * chunks. */
static int saTestUsedRangesTrim(void) {
    slotAllocBlockInfo x;
    slotAllocRangeInfo r[16];
    char *a[3], *b[2];
    size_t n, hdr;

    SA_CHECK(slotAllocInit(256 << 20, 64 << 10, 256 << 10) == 0);
    for (int i = 0; i < 3; i++) SA_CHECK((a[i] = slotAllocMalloc(300, 48)) != NULL);
    for (int i = 0; i < 2; i++) SA_CHECK((b[i] = slotAllocMalloc(300, 1500)) != NULL);
    SA_CHECK(slotAllocSlotBlocks(300, &x, 1) == 1);
    hdr = (size_t)saLookup(x.addr)->hdr_pages << SA_PAGE_SHIFT;
    size_t a0 = (size_t)(a[0] - (char *)x.addr), b0 = (size_t)(b[0] - (char *)x.addr);
    SA_CHECK(a0 == hdr && a[1] == a[0] + 48 && a[2] == a[1] + 48);
    SA_CHECK(b0 % SA_PAGE_SIZE == 0 && b0 > a0 && b[1] == b[0] + 1536);
    /* The header to the end of its bitmap (a 64 KiB block's fits in its
     * first page, with room to spare); the 48 byte slab to the end of its
     * third chunk; the 1536 byte slab to the end of its second. */
    uint32_t pt_off, bm_off, hdr_pages;
    saLayout((uint32_t)(x.size >> SA_PAGE_SHIFT), &pt_off, &bm_off, &hdr_pages);
    size_t hdr_end = bm_off + (x.size >> SA_PAGE_SHIFT) * SA_WORDS_PER_PAGE * sizeof(uint64_t);
    SA_CHECK(hdr_pages == 1 && hdr_end < hdr);
    n = slotAllocBlockUsedRanges(x.addr, r, 16);
    SA_CHECK(n == 3 && r[0].offset == 0 && r[0].len == hdr_end);
    SA_CHECK(r[1].offset == a0 && r[1].len == 3 * 48);
    SA_CHECK(r[2].offset == b0 && r[2].len == 2 * 1536);
    /* A free chunk in the middle is still shipped, a free last one not. */
    slotAllocFree(a[1]);
    n = slotAllocBlockUsedRanges(x.addr, r, 16);
    SA_CHECK(n == 3 && r[1].len == 3 * 48);
    slotAllocFree(a[2]);
    n = slotAllocBlockUsedRanges(x.addr, r, 16);
    SA_CHECK(n == 3 && r[1].len == 48);
    /* The slab empty (kept: the only one of its class): left out. */
    slotAllocFree(a[0]);
    n = slotAllocBlockUsedRanges(x.addr, r, 16);
    SA_CHECK(n == 2 && r[0].offset == 0 && r[0].len == hdr_end);
    SA_CHECK(r[1].offset == b0 && r[1].len == 2 * 1536);
    slotAllocFree(b[1]);
    slotAllocFree(b[0]);
    /* Two full slabs of 112 byte chunks (36 a page, 64 bytes left over at
     * the end of each) are one range: gaps up to SA_RANGE_MERGE_GAP are
     * sent rather than cut into records. */
    char *c[72];
    for (int i = 0; i < 72; i++) SA_CHECK((c[i] = slotAllocMalloc(301, 112)) != NULL);
    SA_CHECK(slotAllocSlotBlocks(301, &x, 1) == 1);
    size_t c0 = (size_t)(c[0] - (char *)x.addr), c36 = (size_t)(c[36] - (char *)x.addr);
    SA_CHECK(c36 == c0 + SA_PAGE_SIZE && c[35] == c[0] + 35 * 112);
    n = slotAllocBlockUsedRanges(x.addr, r, 16);
    SA_CHECK(n == 2 && r[1].offset == c0 && r[1].len == SA_PAGE_SIZE + 36 * 112);
    for (int i = 0; i < 72; i++) slotAllocFree(c[i]);
    SA_CHECK(saTestVerifyAll());
    return 0;
}

/* A small donor block with known content for the corruption tests: one
 * slab of 48 byte chunks (85 chunks, not a multiple of 64), one two-page
 * slab of 1536 byte chunks, a run, and free pages. */
static int saTestSmallDonor(slotAllocBlockInfo *x, uint32_t pages[4]) {
    void *r;

    for (int i = 0; i < 20; i++) memset(slotAllocMalloc(100, 48), 1, 48);
    for (int i = 0; i < 3; i++) memset(slotAllocMalloc(100, 1500), 2, 1500);
    memset(slotAllocMalloc(100, 20000), 3, 20000);
    r = slotAllocMalloc(100, 30000);
    slotAllocFree(r);
    if (slotAllocSlotBlocks(100, x, 1) != 1) return 0;
    /* Pages: 48 byte slab, 1536 byte slab, run, first free page. */
    saBlock *b = saLookup(x->addr);
    pages[0] = pages[1] = pages[2] = pages[3] = 0;
    for (uint32_t i = b->hdr_pages; i < b->npages; i++) {
        saPageEntry e = b->pt[i];
        if (e.kind == SA_PG_SLAB && e.cls == saClassOf(48) && !e.arg) pages[0] = i;
        if (e.kind == SA_PG_SLAB && e.cls == saClassOf(1500) && !e.arg) pages[1] = i;
        if (e.kind == SA_PG_RUN) pages[2] = i;
        if (e.kind == SA_PG_FREE && !pages[3]) pages[3] = i;
    }
    return pages[0] && pages[1] && pages[2] && pages[3] && sa_class_pages[saClassOf(1500)] == 2;
}

static int saTestAdoptRejects(void) {
    slotAllocBlockInfo x;
    slotAllocSlotStat ss;
    uint32_t pg[4];
    void *y;

    SA_CHECK(slotAllocInit(64 << 20, 256 << 10, 256 << 10) == 0);
    SA_CHECK(saTestSmallDonor(&x, pg));
    for (int k = 0; k <= 22; k++) {
        SA_CHECK(slotAllocReserveBlocks(200, 1, &x.size, &y) == 0);
        memcpy(y, x.addr, x.size);
        saBlockHeader *h = y;
        saPageEntry *pt = (saPageEntry *)((char *)y + h->pagetab_off);
        uint64_t *bm = (uint64_t *)((char *)y + h->bitmap_off);
        switch (k) {
        case 0: h->magic ^= 1; break;
        case 1: h->version = SA_BLOCK_VERSION + 1; break;
        case 2: h->block_size *= 2; break;
        case 3: h->npages++; break;
        case 4: h->class_sig ^= 0x100; break;
        case 5: h->flags = 2; break;
        case 6: h->flags = SA_HDR_HUGE; break;
        case 7: h->reserved = 1; break;
        case 8: h->slot = SLOTALLOC_NUM_SLOTS; break;
        case 9: h->pagetab_off += 4; break;
        case 10: h->hdr_pages++; break;
        case 11: h->page_size = 8192; break;
        case 12: pt[0].kind = SA_PG_FREE; break;
        case 13: pt[pg[0]].kind = 9; break;
        case 14: pt[pg[0]].cls = 200; break;
        case 15: pt[pg[0]].arg = 1; break;
        case 16: pt[pg[1] + 1].arg = 0; break;
        case 17: pt[pg[2]].arg = 60000; break;
        case 18: pt[pg[2] + 1].kind = SA_PG_SLAB; break;
        case 19: pt[pg[3]].kind = SA_PG_RUN_CONT; break;
        case 20: bm[pg[0] * SA_WORDS_PER_PAGE + 1] |= 1ULL << 30; break; /* Chunk 94 of 85. */
        case 21: bm[pg[3] * SA_WORDS_PER_PAGE] |= 1; break;              /* Free page. */
        case 22: bm[pg[2] * SA_WORDS_PER_PAGE + 3] |= 4; break;          /* Run page. */
        }
        if (slotAllocAdoptBlock(200, y) != -1) {
            printf("    corruption case %d was adopted\n", k);
            return 1;
        }
        slotAllocSlotStats(200, &ss);
        SA_CHECK(ss.detached_blocks == 1 && ss.blocks == 0);
        slotAllocReleaseBlock(y);
    }
    /* The same block, intact, is adopted. */
    SA_CHECK(slotAllocReserveBlocks(200, 1, &x.size, &y) == 0);
    memcpy(y, x.addr, x.size);
    SA_CHECK(slotAllocAdoptBlock(200, y) == 0 && saTestVerifyAll());
    return 0;
}

/* Random byte flips in the header, page table and bitmap: adoption either
 * refuses, or accepts a block that is consistent. Never crashes. */
/* Slot groups: slots mapped to one arena share its blocks and slabs; what
 * a slot allocated before it was mapped elsewhere stays (frees and reallocs
 * go to the block's arena); reserve/adopt/list/release act on the group;
 * UnusedArena finds an id for a split. */
static int saTestGroups(void) {
    slotAllocSlotStat ss;
    slotAllocBlockInfo bi[16], x;
    static saTestAlloc allocs[300];
    void *p[64], *old, *q, *y;

    SA_CHECK(slotAllocSlotArena(0) == -1 && slotAllocMapSlot(1, 0) == -1);
    SA_CHECK(slotAllocInit(256 << 20, 64 << 10, 256 << 10) == 0);
    SA_CHECK(slotAllocSlotArena(77) == 77 && slotAllocSlotArena(-1) == -1 &&
             slotAllocSlotArena(SLOTALLOC_NUM_SLOTS) == -1);
    SA_CHECK(slotAllocMapSlot(-1, 0) == -1 && slotAllocMapSlot(0, SLOTALLOC_NUM_SLOTS) == -1);
    /* Every id has its slot: none is free until two slots share one. */
    SA_CHECK(slotAllocUnusedArena(0) == -1);
    old = slotAllocMalloc(65, 24);
    memset(old, 0x65, 24);
    for (int s = 64; s < 128; s++) SA_CHECK(slotAllocMapSlot(s, 64) == 0);
    slotAllocSlotStats(100, &ss);
    SA_CHECK(ss.arena == 64 && ss.arena_slots == 64 && ss.blocks == 0 && !ss.arena_mixed);
    int mixed;
    SA_CHECK(slotAllocArenaSlots(65, &mixed) == 0 && mixed == 1);  /* Holds 'old'. */
    SA_CHECK(slotAllocArenaSlots(66, &mixed) == 0 && mixed == 0);
    /* Mixed until every slot that left while it held allocations is back. */
    SA_CHECK(slotAllocMapSlot(65, 65) == 0 && slotAllocArenaSlots(65, &mixed) == 1 && !mixed);
    SA_CHECK(slotAllocMapSlot(66, 65) == 0 && slotAllocMapSlot(66, 64) == 0 &&
             slotAllocArenaSlots(65, &mixed) == 1 && mixed);
    SA_CHECK(slotAllocMapSlot(66, 65) == 0 && slotAllocArenaSlots(65, &mixed) == 2 && !mixed);
    SA_CHECK(slotAllocMapSlot(65, 64) == 0 && slotAllocMapSlot(66, 64) == 0 &&
             slotAllocArenaSlots(65, &mixed) == 0 && mixed);
    /* The slots that left it, for the background cycle to find. */
    uint16_t left[4];
    SA_CHECK(slotAllocArenaLeft(65, left, 4) == 2 &&
             ((left[0] == 65 && left[1] == 66) || (left[0] == 66 && left[1] == 65)));
    SA_CHECK(slotAllocArenaLeft(65, left, 1) == 2 && slotAllocArenaLeft(66, left, 4) == 0);
    slotAllocArenaStats(65, &ss);
    SA_CHECK(ss.arena == 65 && ss.arena_slots == 0 && ss.live_allocs == 1 && ss.arena_mixed);
    /* 64 slots' small keys share one slab of one block. */
    for (int s = 64; s < 128; s++) {
        SA_CHECK((p[s - 64] = slotAllocMalloc(s, 24)) != NULL);
        memset(p[s - 64], s, 24);
        SA_CHECK(slotAllocArenaOf(p[s - 64]) == 64 && slotAllocLiveSize(s, p[s - 64]) == 24);
    }
    SA_CHECK(slotAllocBlockOf(p[0]) == slotAllocBlockOf(p[63]));
    SA_CHECK(slotAllocSlotBlocks(127, bi, 16) == 1 && slotAllocArenaBlocks(64, bi, 16) == 1 &&
             bi[0].live_allocs == 64 && slotAllocSlotBlocks(200, bi, 16) == 0);
    /* Slot 65's allocation from before stays in arena 65: lookups, frees
     * and reallocs follow its block, not the map. */
    SA_CHECK(slotAllocArenaOf(old) == 65 && slotAllocLiveSize(65, old) == 0);
    SA_CHECK((q = slotAllocRealloc(old, 100)) != NULL && slotAllocArenaOf(q) == 65 &&
             saTestFilled(q, 24, 0x65));
    slotAllocSlotStats(65, &ss);
    SA_CHECK(ss.arena == 64 && ss.live_allocs == 64);
    /* Ids 65..127 have no slot; 65 still holds q. */
    SA_CHECK(slotAllocUnusedArena(0) == 66 && slotAllocUnusedArena(65) == 66 &&
             slotAllocUnusedArena(127) == 127 && slotAllocUnusedArena(128) == 66);
    slotAllocFree(q);
    SA_CHECK(slotAllocUnusedArena(0) == 65 && slotAllocArenaSlots(65, &mixed) == 0 && !mixed);
    /* Split: slots 96..127 leave for id 96; their keys stay until moved. */
    for (int s = 96; s < 128; s++) SA_CHECK(slotAllocMapSlot(s, 96) == 0);
    SA_CHECK((q = slotAllocMalloc(100, 24)) != NULL && slotAllocArenaOf(q) == 96);
    SA_CHECK(slotAllocArenaOf(p[40]) == 64 && slotAllocLiveSize(104, p[40]) == 0 &&
             slotAllocLiveSize(70, p[6]) == 24);
    slotAllocSlotStats(100, &ss);
    SA_CHECK(ss.arena == 96 && ss.arena_slots == 32 && ss.live_allocs == 1);
    slotAllocSlotStats(64, &ss);
    SA_CHECK(ss.arena_slots == 32 && ss.live_allocs == 64);
    for (int i = 0; i < 64; i++) {
        SA_CHECK(saTestFilled(p[i], 24, 64 + i));
        slotAllocFree(p[i]);
    }
    slotAllocFree(q);
    slotAllocTrim();
    /* Reserve and adopt for a slot go to its group's arena; adopting into
     * a slot of another arena is refused. */
    SA_CHECK(slotAllocMapSlot(100, 100) == 0);     /* (The donor's slot.) */
    SA_CHECK(saTestDonor(allocs, 300, &x) && slotAllocArenaOf(x.addr) == 100);
    SA_CHECK(slotAllocMapSlot(100, 96) == 0);
    SA_CHECK(slotAllocReserveBlocks(110, 1, &x.size, &y) == 0 && slotAllocArenaOf(y) == 96);
    memcpy(y, x.addr, x.size);
    SA_CHECK(slotAllocAdoptBlock(64, y) == -1 && slotAllocAdoptBlock(120, y) == 0);
    SA_CHECK(((saBlockHeader *)y)->slot == 96 && slotAllocSlotBlocks(97, bi, 16) == 1);
    slotAllocSlotStats(97, &ss);
    SA_CHECK(ss.live_allocs == x.live_allocs && saTestVerifyAll());
    /* Release for a slot drops the group's blocks, not the other arenas'. */
    SA_CHECK((q = slotAllocMalloc(64, 300)) != NULL);
    SA_CHECK(slotAllocReleaseSlot(127) > 0 && !slotAllocOwns(y) && slotAllocOwns(q));
    slotAllocFree(q);
    for (size_t i = 0; i < 300; i++)
        if (allocs[i].p) slotAllocFree(allocs[i].p);
    /* Back to the identity map. */
    for (int s = 64; s < 128; s++) SA_CHECK(slotAllocMapSlot(s, s) == 0);
    SA_CHECK(slotAllocUnusedArena(0) == -1);
    SA_CHECK((q = slotAllocMalloc(100, 8)) != NULL && slotAllocArenaOf(q) == 100);
    slotAllocFree(q);
    return 0;
}

static int saTestAdoptFuzz(void) {
    slotAllocBlockInfo x;
    size_t accepted = 0, rejected = 0;
    uint32_t pg[4];
    void *y;

    SA_CHECK(slotAllocInit(64 << 20, 256 << 10, 256 << 10) == 0);
    SA_CHECK(saTestSmallDonor(&x, pg));
    saBlock *b = saLookup(x.addr);
    size_t span = (size_t)((saBlockHeader *)x.addr)->bitmap_off +
                  (size_t)b->npages * SA_WORDS_PER_PAGE * 8;
    for (int iter = 0; iter < 400; iter++) {
        SA_CHECK(slotAllocReserveBlocks(200, 1, &x.size, &y) == 0);
        memcpy(y, x.addr, x.size);
        int flips = 1 + (int)(saTestRand() % 3);
        for (int f = 0; f < flips; f++) {
            uint64_t r = saTestRand();
            /* Half of the flips hit the fixed header or the tables in use. */
            size_t off = r % 2 ? (r >> 8) % 64 :
                         (r >> 8) % 2 ? 64 + (r >> 16) % (b->npages * 4) :
                         (r >> 16) % span;
            ((unsigned char *)y)[off] ^= (unsigned char)(1 + (r >> 40) % 255);
        }
        if (slotAllocAdoptBlock(200, y) == 0) {
            accepted++;
            SA_CHECK(saTestVerifyAll());
            slotAllocReleaseSlot(200);
        } else {
            rejected++;
            slotAllocReleaseBlock(y);
        }
    }
    SA_CHECK(rejected > 0 && saTestVerifyAll());
    return 0;
}

static int saTestInitArgs(void) {
    size_t bad = 100000;
    void *addr;

    SA_CHECK(slotAllocMalloc(0, 10) == NULL);           /* Not initialized. */
    SA_CHECK(slotAllocInit(64 << 20, 3 << 16, 0) == -1 && errno == EINVAL);
    SA_CHECK(slotAllocInit(64 << 20, 1 << 20, 1 << 19) == -1 && errno == EINVAL);
    SA_CHECK(slotAllocInit(64 << 20, 0, 128 << 20) == -1 && errno == EINVAL);
    SA_CHECK(slotAllocInit(32 << 10, 0, 0) == -1 && errno == EINVAL);
    SA_CHECK(slotAllocInit(64 << 20, 0, 0) == 0);
    SA_CHECK(slotAllocInit(64 << 20, 0, 0) == -1 && errno == EBUSY);
    SA_CHECK(slotAllocMalloc(-1, 10) == NULL && slotAllocMalloc(SLOTALLOC_NUM_SLOTS, 10) == NULL);
    SA_CHECK(slotAllocReserveBlocks(1, 1, &bad, &addr) == -1 && errno == EINVAL);
    SA_CHECK(slotAllocReserveBlocks(-1, 0, &bad, &addr) == -1);
    SA_CHECK(slotAllocAdoptBlock(1, &bad) == -1 && !slotAllocBlockIsSparse(&bad, 1.0));
    return 0;
}

int slotAllocTest(int argc, char **argv, int flags) {
    static const struct {
        const char *name;
        int (*fn)(void);
    } tests[] = {
        {"init arguments", saTestInitArgs},
        {"size classes", saTestClasses},
        {"alloc/free/usable size across classes and huge", saTestBasic},
        {"slab chunk reuse and empty slab release", saTestSlabs},
        {"pointer ownership and slot lookup", saTestOwnership},
        {"calloc zeroes reused memory", saTestCalloc},
        {"exhaustion of a small range returns NULL and recovers", saTestExhaustion},
        {"random alloc/free mix across slots with content checks", saTestFragmentation},
        {"empty blocks go back to the OS and ranges are reused", saTestBlockReuse},
        {"draining a sparse block: avoided, then released", saTestDrain},
        {"live allocation checks and listing (recipient side)", saTestLiveAllocs},
        {"release of a whole slot", saTestReleaseSlot},
        {"retire of a whole slot, pages returned by a later purge", saTestRetireSlot},
        {"realloc across classes keeps contents", saTestRealloc},
        {"stats match live allocations, sparse blocks", saTestStats},
        {"double free and bad pointers panic", saTestMisuse},
        {"frees from another thread during allocations", saTestThreads},
        {"reserve + adopt keeps allocations, free space usable", saTestAdopt},
        {"a copy of the used ranges only adopts intact", saTestUsedRanges},
        {"used ranges stop at each slab's last live chunk, close ones merge", saTestUsedRangesTrim},
        {"adopt rejects corrupted header, page table, bitmap", saTestAdoptRejects},
        {"adopt survives random corruption", saTestAdoptFuzz},
        {"slot groups: shared arenas, remapping, split", saTestGroups},
    };
    int failed = 0;

    (void)argc;
    (void)argv;
    (void)flags;
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        int err = tests[i].fn();
        if (!err && sa.initialized && !saTestVerifyAll()) err = 1;
        slotAllocShutdown();
        printf("[%s]: slotalloc - %s\n", err ? "err" : "ok", tests[i].name);
        failed += err != 0;
    }
    printf("slotalloc: %d of %zu tests failed\n", failed, sizeof(tests) / sizeof(tests[0]));
    return failed != 0;
}
#endif
