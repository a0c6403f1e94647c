/* slotalloc.h -- slot-affine block allocator: public interface.
 *
 * Memory for the keys of one Redis Cluster hash slot lives in blocks owned
 * by that slot, so a slot can be shipped to another node as a handful of
 * large contiguous regions and adopted there in place. See the comment at
 * the top of slotalloc.c for the design, and docs/DESIGN.md, "Slot blocks".
 *
 * This layer depends on libc and pthreads only. Functions returning int
 * return 0 on success and -1 on error with errno set (C_OK / C_ERR), unless
 * documented otherwise.
 *
 * Threads: every function may be called from any thread. Allocation is
 * meant to happen on the main thread; frees (and usable-size queries) also
 * come from background threads (lazyfree). Misuse that would corrupt the
 * heap (double free, freeing a pointer that is not the start of a live
 * allocation) is detected and reported through the panic handler.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __SLOTALLOC_H
#define __SLOTALLOC_H

#include <stddef.h>
#include <stdint.h>

#define SLOTALLOC_NUM_SLOTS 16384
/* Granularity of the reserved range: every block is a multiple of it. */
#define SLOTALLOC_UNIT_SIZE (64*1024)
#define SLOTALLOC_DEFAULT_MIN_BLOCK (64*1024)
#define SLOTALLOC_DEFAULT_MAX_BLOCK (4*1024*1024)
/* Largest normal (non huge) block: bounds the page table entry fields. */
#define SLOTALLOC_MAX_BLOCK (64*1024*1024)
/* The smallest size class: every allocation starts at a multiple of it, so
 * a bitmap with one bit per granule tells allocations apart. */
#define SLOTALLOC_GRANULE 8

/* One block of a slot, as listed by slotAllocSlotBlocks(). */
typedef struct slotAllocBlockInfo {
    void *addr;             /* First byte of the block (its header). */
    size_t size;            /* Block size in bytes, a multiple of the unit. */
    size_t used_bytes;      /* Sum of the usable sizes of live allocations. */
    size_t live_allocs;     /* Number of live allocations. */
    int huge;               /* 1: a dedicated block holding one allocation. */
} slotAllocBlockInfo;

/* Process-wide figures (slotAllocGetStats). */
typedef struct slotAllocStats {
    size_t blocks;          /* Committed blocks, detached ones included. */
    size_t huge_blocks;
    size_t detached_blocks; /* Reserved for a migration, not adopted yet. */
    size_t cached_empty_blocks; /* Empty blocks kept (one per slot at most). */
    size_t reserved_bytes;  /* Bytes of all committed blocks. */
    size_t used_bytes;      /* Usable sizes of all live allocations. */
    size_t free_bytes;      /* reserved_bytes - used_bytes. */
    size_t live_allocs;
    size_t range_bytes;     /* Size of the reserved virtual range. */
    size_t range_free_bytes;/* Part of the range not covered by blocks. */
    size_t metadata_bytes;  /* Process-local bookkeeping (libc heap). */
    size_t retired_bytes;   /* Blocks given up whose pages are still to be
                             * returned (slotAllocPurgeRetired). */
} slotAllocStats;

/* Figures of one slot (slotAllocSlotStats). Detached blocks are counted
 * apart and are not part of blocks/block_bytes. */
typedef struct slotAllocSlotStat {
    size_t blocks;
    size_t huge_blocks;
    size_t block_bytes;
    size_t used_bytes;
    size_t live_allocs;
    size_t detached_blocks;
    size_t detached_bytes;
    int has_cached_empty;
    int arena;              /* Id of the slot's arena ("Slot groups"). */
    int arena_slots;        /* How many slots share that arena (1 or more). */
    int arena_mixed;        /* It may hold allocations of slots mapped away
                             * since (not yet relocated out of it). */
} slotAllocSlotStat;

/* Setup. reserve_bytes of virtual space are reserved (rounded down to the
 * unit); 0 for min_block/max_block means the defaults. Block sizes must be
 * powers of two between SLOTALLOC_UNIT_SIZE and SLOTALLOC_MAX_BLOCK. */
int slotAllocInit(size_t reserve_bytes, size_t min_block, size_t max_block);
void slotAllocShutdown(void);
/* Called with a message when misuse or corruption is detected. It must not
 * return (if it does, the process aborts). NULL restores the default, which
 * prints to stderr and aborts. */
void slotAllocSetPanicHandler(void (*handler)(const char *msg));

/* Allocation. Malloc/Calloc return NULL when the range or the OS has no
 * room: they never abort. Realloc keeps p in its slot; Realloc(p, 0) frees
 * p and returns NULL; on failure it returns NULL and p is untouched. */
void *slotAllocMalloc(int slot, size_t size);
void *slotAllocCalloc(int slot, size_t size);
void *slotAllocRealloc(void *p, size_t size);
void slotAllocFree(void *p);
size_t slotAllocUsableSize(const void *p);

/* Lookups, O(1), lock free. A pointer is ours when it lies in a block
 * (active or detached) of the reserved range. */
int slotAllocOwns(const void *p);
/* The reserved range: returns its start and stores its length in *bytes (0
 * and NULL before slotAllocInit). Every pointer the allocator hands out lies
 * in [start, start + *bytes), and nothing else does: callers that route
 * pointers by address (zmalloc) check that range first. */
void *slotAllocRange(size_t *bytes);
/* Id of the arena of the block holding p (-1: not ours). */
int slotAllocArenaOf(const void *p);
void *slotAllocBlockOf(const void *p);

/* Slot groups (slotalloc.c, "Slot groups"). Every slot has an arena, the
 * blocks its new allocations come from; arenas have ids 0..16383 and slot
 * s starts in arena s. Several slots may share an arena, so that the slack
 * of partly used pages is paid once per group instead of once per slot.
 * Functions below taking a slot act on the slot's arena, that is on every
 * slot sharing it: SlotBlocks lists the group's blocks, ReleaseSlot drops
 * them all. SlotArena gives a slot's arena id (-1: bad slot), MapSlot
 * changes it (main thread; what the slot allocated before stays in the old
 * arena), UnusedArena finds an id no slot maps to and that holds nothing
 * (-1: none), searching from 'from'. */
int slotAllocSlotArena(int slot);
int slotAllocArenaSlots(int id, int *mixed);
void *slotAllocArenaMalloc(int id, size_t size);
int slotAllocMapSlot(int slot, int id);
int slotAllocUnusedArena(int from);
/* Whether arena 'id' holds nothing: no live allocation, no detached block. */
int slotAllocArenaEmpty(int id);
/* The slots mapped away from arena 'id' while it held allocations, and not
 * back since (their leftovers may still lie in it), up to max into out.
 * Returns how many there are (more than max: call again with room), 0 if
 * the arena is not mixed, -1 if it could not keep the list (it stays mixed
 * until it empties: any slot's keys may be in it). */
int slotAllocArenaLeft(int id, uint16_t *out, int max);
/* Arena 'id' holds its slots' allocations only (the caller checked every
 * one): no longer mixed. */
void slotAllocArenaUnmix(int id);

/* Migration.
 *
 * SlotBlocks: fills out[] with up to max of the slot's active blocks and
 * returns how many it has (detached ones are not listed).
 *
 * ReserveBlocks (recipient): creates nblocks "detached" blocks of the given
 * sizes (multiples of SLOTALLOC_UNIT_SIZE) for the slot: zero, writable,
 * not used for allocation. All or nothing.
 *
 * AdoptBlock (recipient): addr is a detached block of this slot into which
 * a donor block was copied byte for byte. Validates the header, page table
 * and bitmap it finds there (never trusting a value: bad content gives -1
 * and leaves the block detached), then makes it part of the slot's arena:
 * live allocations keep their offsets and usable sizes, free space becomes
 * allocatable. The header's slot and origin address are rewritten to the
 * recipient's, so read the donor's origin first if pointers need patching.
 * Nothing may write the block during the call.
 *
 * ReleaseBlock drops one detached block (a failed migration). ReleaseSlot
 * drops every block of the slot, active and detached, at once: all its
 * pointers become invalid, so no other thread may still free them. It
 * returns the usable bytes of the live allocations of the active blocks
 * (what a caller counting them as allocated must uncount). */
size_t slotAllocSlotBlocks(int slot, slotAllocBlockInfo *out, size_t max);
size_t slotAllocArenaBlocks(int id, slotAllocBlockInfo *out, size_t max);
int slotAllocReserveBlocks(int slot, size_t nblocks, const size_t *sizes, void **addrs);
int slotAllocAdoptBlock(int slot, void *addr);
/* After adoption (recipient): LiveSize is the usable size of p if it is
 * the start of a live allocation of the slot, else 0; BlockAllocs lists a
 * block's live allocations (up to max; returns the count); BlockLive
 * counts them. */
size_t slotAllocLiveSize(int slot, const void *p);
size_t slotAllocArenaLiveSize(int id, const void *p);
size_t slotAllocBlockAllocs(void *block_addr, void **out, size_t max);
size_t slotAllocBlockLive(void *block_addr);
/* What of a block holds anything (header, slabs, runs): the byte ranges a
 * migration ships (see slotalloc.c); of an active block, or of a received
 * image not adopted yet (0: not a well formed block). */
typedef struct slotAllocRangeInfo {
    size_t offset, len;
} slotAllocRangeInfo;
size_t slotAllocBlockUsedRanges(void *block_addr, slotAllocRangeInfo *out, size_t max);
size_t slotAllocImageUsedRanges(void *base, size_t size, slotAllocRangeInfo *out, size_t max);
void slotAllocReleaseBlock(void *addr);
size_t slotAllocReleaseSlot(int slot);
size_t slotAllocRetireSlot(int slot);
size_t slotAllocPurgeRetired(void);

/* Housekeeping and stats.
 *
 * Trim releases every slot's cached empty block (at most one per slot is
 * kept to avoid thrashing) and returns the bytes given back to the OS.
 * BlockIsSparse is a compaction hint: 1 if the active normal block at
 * block_addr uses less than threshold (0..1) of its data pages. Stats are
 * lock free snapshots of exact counters. */
size_t slotAllocTrim(void);
int slotAllocBlockIsSparse(void *block_addr, double threshold);
/* Sparse-block compaction: a draining block gets no new allocations and is
 * released as soon as its last one is freed (or moved). IsDraining is an
 * O(1) lock-free lookup like ArenaOf. */
int slotAllocDrainBlock(void *block_addr, int on);
int slotAllocIsDraining(const void *p);
void slotAllocGetStats(slotAllocStats *st);
int slotAllocSlotStats(int slot, slotAllocSlotStat *st);
int slotAllocArenaStats(int id, slotAllocSlotStat *st);
int slotAllocSlotResident(int slot, size_t *resident, size_t *used);
int slotAllocArenaResident(int id, size_t *resident, size_t *used);

#ifdef REDIS_TEST
int slotAllocTest(int argc, char **argv, int flags);
#endif

#endif
