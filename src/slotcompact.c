/* Slot affinity: the slot allocator (slotalloc.c) wired into Redis.
 *
 * In cluster mode with `slot-affinity yes`, the memory of the keys of a hash
 * slot is meant to live in blocks owned by that slot, so that the slot can
 * later be shipped as a few contiguous regions (docs/DESIGN.md, "Slot blocks"). This
 * file is the glue between the allocator core, which knows nothing of Redis,
 * and the server:
 *
 * Routing. At startup (initServer, after clusterInit) slotCompactInit()
 * reserves the allocator's virtual range and hands zmalloc the range and a
 * table of the allocator's functions (zmalloc_set_foreign, our zmalloc
 * patch). From then on zfree, zrealloc, zmalloc_size and their variants
 * route any pointer inside the range to the slot allocator and account
 * used_memory in its usable sizes, so every existing free/realloc/size path
 * of Redis (DEL, lazyfree on a BIO thread, APPEND growing an sds, MEMORY
 * USAGE, FLUSHALL ASYNC, fork children dismissing pages...) works unchanged
 * on memory that lives in slot blocks. A realloc stays in the pointer's
 * slot. New keys are born in jemalloc, but for small strings (below).
 *
 * Placed writes. A few writes to a key already in its blocks keep it there
 * (slotCompactReplaceSds, slotCompactPlaceBegin/End, called from our
 * t_hash/t_set/t_zset/t_list patches, slotCompactOverwriteString from
 * setKey): a hash-table field's new value is written over the old one or
 * allocated in the slot; a new entry of a hash table, set or sorted set
 * and a list push's or pop's nodes are allocated in the slot through the
 * thread's zmalloc placement arena; a string SET over a string is written
 * over the old one or allocated in the slot. Such a write does not queue
 * its key (below), so an update load (YCSB's) costs the cycle nothing.
 * A new string key of SET, GETSET or MSET is born in its blocks
 * (slotCompactNewString, slotCompactDupKeyName): relocated later, its heap
 * chunks would leave the pages among the keyspace's dictEntries holed.
 *
 * Relocation ("slot compaction"). Keys get into their slot's blocks by
 * being moved on the main thread. We do not write a second traversal of
 * Redis objects: active defrag (defrag.c) already knows how to move each
 * allocation of a key of any type and encoding and fix every pointer to it
 * (defragKey: key name, robj, sds, listpacks, intsets, quicklist nodes,
 * dicts with their tables and entries, skiplist nodes, stream rax trees,
 * consumer groups, module values that support defrag), and asks one
 * function, activeDefragAlloc(), where each copy goes. Our defrag patch
 * lets that target be plugged (activeDefragAllocTarget); while we compact
 * slot S it points at slotCompactMove(), which copies an allocation into
 * S's arena (unless it already is there) and frees the old one. Defrag's
 * rules come with it: objects with refcount != 1 (shared integers, shared
 * objects) are never moved. The key name is shared with the expires dict;
 * defragKey fixes that entry's key pointer, and our patch keeps the
 * expires dictEntry itself in the general heap, like the keyspace's
 * dictEntries: they are nodes of the keyspace, which a migration's
 * recipient rebuilds. Big values (more elements than
 * active-defrag-max-scan-fields) are handed to us by defragLater() and
 * continued from a cursor with defragLaterItem(), so no step is unbounded.
 *
 * Counting. CLUSTER SLOTBLOCKS runs the same traversal with a target that
 * moves nothing and counts each allocation, so "bytes" is exactly what
 * compaction would relocate.
 *
 * Background. signalModifiedKey() and stopLoading() mark slots dirty; a
 * timer event relocates their keys in slices of about 250 us, within
 * slot-affinity-cpu percent of the main thread (see "Background
 * compaction" below). A migration asks for its slots first with
 * slotCompactRequest() and drives slotCompactStep() itself.
 *
 * slot-affinity no. Keys stay in the general heap and nothing relocates
 * in the background, but a migration still ships blocks: the allocator
 * starts on a node's first migration (slotCompactStart), the
 * donor's prepare relocates the slots it asked for (slotCompactRequest),
 * and what a migration leaves in blocks (an import's adopted keys, a
 * rolled-back donor's relocated ones) is moved back to the heap by the
 * same background cycle with another target, slotCompactEvacuate
 * (slotCompactEvacuateCron; docs/DESIGN.md, "Placement and migration").
 *
 * Slot groups. With slot-affinity-group-slots G > 1 (and slot-affinity
 * yes), the G aligned slots of a group share one arena of the allocator
 * (slotalloc.c, "Slot groups"), so a small slot does not pay a block's
 * slack alone; "in place" means in the slot's arena, whichever slots share
 * it. A migration moves blocks whole, so before it lists or reserves a
 * slot's blocks the slot gets an arena of its own (slotCompactIsolate)
 * and its keys are relocated there by the prepare, like keys in the heap;
 * when the migration is over the slot goes back to its group's arena and
 * the background cycle relocates its keys there (slotCompactRegroup).
 * docs/DESIGN.md, "Placement and migration".
 *
 * Ownership. In cluster mode a value cannot change slot (RENAME, COPY,
 * SMOVE... need both keys in one slot; MIGRATE/RESTORE build new objects),
 * so what lies in slot S's blocks belongs to keys of slot S, or to shared
 * objects never moved. Releasing a slot's blocks wholesale after a
 * migration relies on that; anything that breaks it must relocate first.
 *
 * DEBUG SLOTCOMPACT compacts synchronously; DEBUG SLOTCOMPACT CHECK runs
 * the traversal to verify the blocks (no stale or foreign pointer, no
 * unreached allocation). slotCompactCron() gives emptied blocks back to
 * the OS.
 *
 * Why one file of 1,800 lines: relocation, the background cycle, evacuation,
 * pinning, placed writes, the sparse and resident sweeps and INFO all read
 * and write one state (`sc`: dirty and pinned slots, the walk in progress,
 * the big key being continued, the counters). Split, they would share it
 * through a header that every part could write; here it stays static.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "server.h"
#include "bio.h"
#include "cluster.h"
#include "slotalloc.h"
#include "slotcompact.h"

/* Defrag's hook (defrag.c, compiled with HAVE_DEFRAG). */
#ifdef HAVE_DEFRAG
extern void *(*activeDefragAllocTarget)(void *ptr);
#endif

/* Sparse blocks: a normal block whose live allocations fill less than
 * SLOTCOMPACT_SPARSE_RATIO of it, in a slot whose other blocks have room
 * for them twice over, is drained (slotAllocDrainBlock) and its slot
 * revisited: relocation moves whatever lies in a draining block, and the
 * allocator releases the block when it empties. The sweep looks at
 * SLOTCOMPACT_SPARSE_SCAN slots per cron call. */
#define SLOTCOMPACT_SPARSE_RATIO 0.25
#define SLOTCOMPACT_SPARSE_SCAN 512
#define SLOTCOMPACT_MAX_DRAINING 64

/* The keys a replica's drop unlinked from one arena without freeing them
 * (slotCompactHoldKey): key sds and value robj, alternating. */
typedef struct slotCompactHeld {
    int arena;
    mstime_t last;                  /* When the last key joined. */
    int member, keys;               /* slotCompactHeldRun's pass: a slot
                                     * mapping to it (-1: none), whether one
                                     * holds keys. */
    size_t n, cap;                  /* Pointers, two per key. */
    void **ptrs;
} slotCompactHeld;

/* A big key queued by defrag's traversal for the background cycle. */
typedef struct slotCompactLaterItem {
    int slot;
    int evacuate;                   /* Queued by an evacuation walk. */
    sds key;
} slotCompactLaterItem;

static struct {
    int initialized;                /* Range reserved, zmalloc routes. */
    int target_slot;                /* Slot being compacted or counted, or -1. */
    int later_inline;               /* Big keys: finish now (1) or queue (0). */
    size_t moved_bytes;             /* Usable bytes moved by the current walk. */
    void **frees;                   /* Old heap copies to free (slotCompactFreeLater). */
    size_t nfrees;
    long long saved_hits;           /* Defrag's counters, restored after us. */
    long long saved_scanned;
    /* CLUSTER SLOTBLOCKS counting walk. */
    size_t count_bytes, count_in_blocks;
    size_t count_allocs_in;         /* Allocations counted in count_in_blocks. */
    int count_all_in;
    int count_arena;                /* slotCompactIsIn's arena. */
    /* Background cycle. */
    unsigned char dirty[CLUSTER_SLOTS / 8]; /* Slots with keys to visit. */
    unsigned char urgent[CLUSTER_SLOTS / 8]; /* Asked for by a migration. */
    int dirty_slots;
    int next_slot;                  /* Round robin start. */
    int cur_slot;                   /* Slot being walked, or -1. */
    sds cur_key;                    /* Key to resume the walk at, or NULL. */
    dict *dirty_keys;               /* Written keys to visit (sds, owned). */
    list *later;                    /* slotCompactLaterItem queue. */
    sds later_key;                  /* Big key in progress, or NULL. */
    int later_slot;
    int later_evacuate;
    unsigned long later_cursor;
    long long timer_id;             /* Background timer event, or -1. */
    unsigned char pinned[CLUSTER_SLOTS / 8]; /* Slots nothing may move. */
    int16_t pinned_arena[CLUSTER_SLOTS];   /* A pinned slot's arena, */
    uint16_t arena_pins[CLUSTER_SLOTS];    /* and each arena's pinned slots. */
    unsigned char pin_skipped[CLUSTER_SLOTS / 8]; /* Unpinned slots whose keys
                                     * stayed out of their pinned arena, to
                                     * visit once it is unpinned. */
    int npin_skipped;
    int force_pinned;               /* slotCompactKeyNow: into a pinned arena. */
    unsigned char requested[CLUSTER_SLOTS / 8]; /* Asked for by a migration
                                     * (slotCompactRequest), until unpinned:
                                     * never evacuated meanwhile. */
    /* Sparse-block compaction. */
    int sparse_cursor;              /* Next slot the sweep looks at. */
    int ndraining;
    struct { int slot; void *block; } draining[SLOTCOMPACT_MAX_DRAINING];
    long long sparse_drained;       /* Blocks emptied and released. */
    long long sparse_kept;          /* Drained, but something stayed. */
    /* Placed writes (slotCompactReplaceSds): the value object the current
     * command wrote, and whether every allocation it added went to the
     * slot's blocks. Consumed by the command's signalModifiedKey(). */
    robj *place_obj;
    int place_ok;
    unsigned long place_misses;     /* zmalloc_place_misses at the scope's start. */
    long long placed_writes;        /* Writes that stayed in their blocks. */
    long long born_keys;            /* New keys born in their blocks. */
    /* Stats. */
    long long relocated_keys;       /* Keys with at least one allocation moved. */
    long long relocated_big_keys;   /* Big values finished in steps. */
    long long relocated_bytes;      /* Usable bytes copied into blocks. */
    long long relocation_ns;        /* Main thread time relocating keys. */
    /* The same for the keys of a set of slots only (slotCompactTallyStart):
     * a migration's prepare reports these as its own, while the background
     * cycle and the sparse-block sweep may relocate other slots' keys
     * between its slices. */
    unsigned char tally_slots[CLUSTER_SLOTS / 8];
    long long tally_keys, tally_bytes, tally_ns;
    /* slot-affinity no: what went back from blocks to the heap. */
    int evacuating;                 /* The current walk's target is the heap. */
    int evac_cursor;                /* Next slot the sweep looks at. */
    size_t evac_live[CLUSTER_SLOTS]; /* Live allocations when last marked. */
    size_t evac_left_live[CLUSTER_SLOTS]; /* The same, of arena id slot when
                                           * its leftovers were marked. */
    long long evacuated_keys;
    long long evacuated_bytes;
    long long compaction_usec;      /* Main thread time spent compacting. */
    /* What blocks cost in RAM (slotCompactResidentCron). */
    int res_cursor;                 /* Next slot the sweep looks at. */
    size_t res_sum, res_used;       /* The sweep in progress. */
    size_t resident_bytes;          /* The last full sweep's figures. */
    size_t slack_bytes;
    mstime_t last_trim;             /* Last release of cached empty blocks. */
    redisAtomic int purge_queued;   /* A slotCompactPurgeJob is queued. */
    /* Keys unlinked without a free until their arena goes wholesale
     * (slotCompactHoldKey; "Held keys" below). */
    struct slotCompactHeld *held;
    int nheld;
    long long held_released_keys;   /* Let go of with their arena's blocks. */
    long long held_freed_keys;      /* Freed one by one after all. */
} sc = { .target_slot = -1, .cur_slot = -1, .later_slot = -1, .timer_id = -1 };

static void slotCompactMarkAllDirty(void);
static void slotCompactHeldForget(int arena);
static void slotCompactHeldRun(int may_free);
static size_t slotCompactDropArena(int slot, int retire);
static void slotCompactReset(void);
static int slotCompactUnmix(const slotAllocSlotStat *st, size_t allocs_in, size_t bytes_in);
static int slotCompactUnmixByWalk(int slot);
static int slotCompactSlotInArena(int slot);

static int slotCompactIsRequested(int slot) {
    return (sc.requested[slot >> 3] >> (slot & 7)) & 1;
}

/* Written keys waiting for the background cycle: a set of owned sds. */
static dictType slotCompactKeySetType = {
    dictSdsHash, NULL, NULL, dictSdsKeyCompare, dictSdsDestructor, NULL, NULL
};
#ifdef HAVE_DEFRAG
static void slotCompactClearDirty(int slot);
static void slotCompactMarkDirty(int slot, int urgent);
static int slotCompactArenaPinned(int arena);
static void slotCompactSetPinned(int slot, int on);
static void slotCompactSkipPinned(int slot);
static void slotCompactRevisitSkipped(void);
#endif

/* The slot allocator as zmalloc's foreign allocator. */
static const zmallocForeign slotCompactForeign = {
    .allocate = slotAllocArenaMalloc,
    .reallocate = slotAllocRealloc,
    .release = slotAllocFree,
    .usable_size = slotAllocUsableSize,
};

/* Called by the allocator on misuse (double free, foreign pointer...). */
static void slotCompactPanic(const char *msg) {
    serverPanic("slot allocator: %s", msg);
}

/* ============================ Setup ======================================= */

/* Both block sizes are checked one by one by the config table; this is
 * the check between them. */
static int slotCompactBlockSizesValid(void) {
    return server.slot_affinity_min_block <= server.slot_affinity_max_block;
}

/* ============================ Slot groups ================================= */

/* The arena a slot's keys live in at rest: with slot-affinity yes and
 * slot-affinity-group-slots G > 1, its group's (the G aligned slots share
 * the arena whose id is the group's first slot), else its own. With
 * slot-affinity no keys rest in the heap, and a slot keeps whatever arena
 * a migration gave it, for the evacuation to find its blocks. */
static int slotCompactGroupArena(int slot) {
    int g = server.slot_affinity_group_slots;

    return server.slot_affinity && g > 1 ? slot & ~(g - 1) : slot;
}

/* Map every slot that no migration holds to its group's arena (the
 * allocator starts, or slot-affinity is turned on); the background cycle
 * then relocates keys that are elsewhere (slotCompactMarkAllDirty). */
static void slotCompactMapGroups(void) {
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
        if (!slotCompactIsPinned(slot) && !slotCompactIsRequested(slot))
            slotAllocMapSlot(slot, slotCompactGroupArena(slot));
}

/* See slotcompact.h. The slot takes an unused arena id, its own first
 * (free unless it leads its group). Its keys stay where they are until
 * relocated: the donor's prepare asks for the slot (slotCompactRequest);
 * an importing slot has none. Every id is in use only when every slot has
 * its own (groups of 1, or slot-affinity no with nothing grouped): then
 * the slot is alone in its arena, and that arena holds keys of slots that
 * left it, which the background cycle moves out (slotCompactEvacuateCron
 * with slot-affinity no). */
int slotCompactIsolate(int slot, const char **why) {
    slotAllocSlotStat st;
    int id;

    if (!sc.initialized) return 0;
    slotAllocSlotStats(slot, &st);
    if (st.arena_slots <= 1 && !st.arena_mixed) return 0;
    if ((id = slotAllocUnusedArena(slot)) == -1) {
        /* The background cycle relocates the leftovers but cannot tell
         * when an arena's last one left (it stays mixed until it empties):
         * the slot may well be alone in it by now. */
        if (st.arena_slots <= 1 && slotCompactUnmixByWalk(slot)) return 0;
        *why = st.arena_slots <= 1 ?
            "is alone in an arena that still holds keys of slots that left it "
            "(after a change of slot-affinity-group-slots or slot-affinity; the "
            "background cycle moves them out) and every arena id is in use: try "
            "again once CLUSTER SLOTBLOCKS for the slot shows arena_mixed 0" :
            "shares its group's arena and no arena id is free for it";
        return -1;
    }
    slotAllocMapSlot(slot, id);
    return 1;
}

/* See slotcompact.h. Nothing to do with slot-affinity no (the evacuation
 * takes the slot's keys to the heap from the arena they are in) or for a
 * slot already in its group's arena. */
void slotCompactRegroup(int slot) {
    int id = slotCompactGroupArena(slot);

    if (!sc.initialized || !server.slot_affinity || slotAllocSlotArena(slot) == id ||
        slotCompactIsPinned(slot)) return;
    slotAllocMapSlot(slot, id);
#ifdef HAVE_DEFRAG
    if (countKeysInSlot(slot)) slotCompactMarkDirty(slot, 0);
#endif
}

/* See slotcompact.h. One pass over the slots: how many of the migration's
 * slots (and idle ones) map to each arena, against how many slots map to
 * it at all. */
int slotCompactWholeArenas(const unsigned char *bitmap, const unsigned char *idle,
                           unsigned char *whole) {
    uint16_t *moving;
    int n = 0;

    memset(whole, 0, CLUSTER_SLOTS / 8);
    if (!sc.initialized) return 0;
    moving = zcalloc(sizeof(uint16_t) * CLUSTER_SLOTS);
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
        if (((bitmap[slot >> 3] >> (slot & 7)) & 1) ||
            (idle && ((idle[slot >> 3] >> (slot & 7)) & 1)))
            moving[slotAllocSlotArena(slot)]++;
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        int arena, mixed;
        if (!((bitmap[slot >> 3] >> (slot & 7)) & 1)) continue;
        arena = slotAllocSlotArena(slot);
        if (slotAllocArenaSlots(arena, &mixed) != moving[arena] || mixed) continue;
        whole[slot >> 3] |= 1 << (slot & 7);
        n++;
    }
    zfree(moving);
    return n;
}

/* Whether arena id holds nothing and no slot but some of the n given
 * maps to it: then they may take it for themselves. */
static int slotCompactArenaFreeFor(int id, const int *slots, int n) {
    int mine = 0;

    for (int i = 0; i < n; i++) mine += slotAllocSlotArena(slots[i]) == id;
    return slotAllocArenaSlots(id, NULL) == mine && slotAllocArenaEmpty(id);
}

/* See slotcompact.h. The arena: the first slot's group's, when nothing
 * else maps to it or lies in it (an import of a whole group into a node of
 * the same group size: the slots are already where they rest, nothing
 * moves after the import); else the first slot's own arena, on the same
 * terms (with the identity map, slot-affinity no or groups of 1, every id
 * has its slot: no other is free); else any unused one. Unpin maps the
 * slots back to their groups, and the background cycle relocates their
 * keys there. */
int slotCompactUnite(const int *slots, int n) {
    int want, id;

    if (!sc.initialized || n < 1) return -1;
    want = slotCompactGroupArena(slots[0]);
    if (slotCompactArenaFreeFor(want, slots, n))
        id = want;
    else if (slotCompactArenaFreeFor(slotAllocSlotArena(slots[0]), slots, n))
        id = slotAllocSlotArena(slots[0]);
    else if ((id = slotAllocUnusedArena(slots[0])) == -1)
        return -1;
    for (int i = 0; i < n; i++) slotAllocMapSlot(slots[i], id);
    return id;
}

/* Reserve the slot allocator's range and route zmalloc to it (main
 * thread). Returns C_ERR, logged, if the range cannot be reserved. */
static int slotCompactReserve(void) {
    size_t len;
    void *start;

    slotAllocSetPanicHandler(slotCompactPanic);
    if (slotAllocInit(server.slot_affinity_reserve,
                      server.slot_affinity_min_block,
                      server.slot_affinity_max_block) == -1)
    {
        serverLog(LL_WARNING, "slot-affinity: cannot reserve %zu bytes of "
            "address space for slot blocks (%s): keys stay in the general heap",
            server.slot_affinity_reserve, strerror(errno));
        return C_ERR;
    }
    start = slotAllocRange(&len);
    slotCompactMapGroups();
    zmalloc_set_foreign(start, len, &slotCompactForeign);
    sc.later = listCreate();
    sc.dirty_keys = dictCreate(&slotCompactKeySetType);
    sc.initialized = 1;
    serverLog(LL_NOTICE, "slot-affinity: %zu bytes of address space reserved "
        "for slot blocks (blocks of %zu to %zu bytes)", len,
        server.slot_affinity_min_block, server.slot_affinity_max_block);
    return C_OK;
}

/* Start the allocator at startup (initServer, cluster mode) or when
 * CONFIG SET turns slot-affinity on. Returns C_OK if the allocator is
 * (already) running, C_ERR when it is not: not in cluster mode,
 * slot-affinity no, or the range could not be reserved (Redis then keeps
 * every key in the general heap). At startup, min-block larger than
 * max-block is a configuration error: the server exits, as for any
 * invalid option. */
int slotCompactInit(void) {
    if (sc.initialized) return C_OK;
    if (!server.cluster_enabled) return C_ERR;
    /* Checked with slot-affinity no too: a migration starts the allocator. */
    if (!slotCompactBlockSizesValid()) {
        serverLog(LL_WARNING, "slot-affinity-min-block (%zu) must not be "
            "larger than slot-affinity-max-block (%zu)",
            server.slot_affinity_min_block, server.slot_affinity_max_block);
        exit(1);
    }
    if (!server.slot_affinity) return C_ERR;
    return slotCompactReserve();
}

/* Start the allocator at runtime, for CONFIG SET slot-affinity yes or for
 * a node's first migration, whatever slot-affinity says: with `no`, keys
 * live in the general heap, the donor relocates the moving slots into
 * blocks at its prepare (slotCompactRequest) and the recipient adopts
 * blocks. Only address space is reserved: nothing is committed until a
 * block is made, and nothing is relocated in the background while
 * slot-affinity is no. Returns C_OK if the allocator is (already) running,
 * C_ERR with *err set if it cannot run. */
int slotCompactStart(const char **err) {
    if (sc.initialized) return C_OK;
    if (!server.cluster_enabled) {
        *err = "slot blocks need cluster mode";
        return C_ERR;
    }
    if (!slotCompactBlockSizesValid()) {
        *err = "slot-affinity-min-block is larger than slot-affinity-max-block";
        return C_ERR;
    }
    if (slotCompactReserve() == C_ERR) {
        *err = "cannot reserve the slot allocator's address space "
               "(slot-affinity-reserve; see the log)";
        return C_ERR;
    }
    return C_OK;
}

/* CONFIG SET slot-affinity: turning it on in cluster mode starts the
 * allocator if it was not running and relocates every slot. Turning it off
 * drops the pending relocation; keys already in blocks keep working and
 * the background cycle moves them back to the heap (slotCompactEvacuateCron). */
int slotCompactApplyAffinity(const char **err) {
    if (!server.cluster_enabled) return 1;
    if (!server.slot_affinity) {
        /* Pending background work is dropped now; only a migration's
         * requests (slotCompactRequest) are served from here on. */
        if (sc.initialized) slotCompactReset();
        return 1;
    }
    if (slotCompactStart(err) == C_ERR) return 0;
    slotCompactMapGroups();
    /* Keys written while it was off are in the general heap. */
    slotCompactMarkAllDirty();
    return 1;
}

/* slot-affinity-min-block / max-block: powers of two (the config table
 * bounds them to 64kb..64mb). */
int slotCompactIsValidBlockSize(long long val, const char **err) {
    if (val <= 0 || (val & (val - 1))) {
        *err = "must be a power of two";
        return 0;
    }
    return 1;
}

/* slot-affinity-group-slots: a power of two (the config table bounds it to
 * 1..16384), so that groups are aligned and a rebalance's contiguous
 * ranges split few of them. */
int slotCompactIsValidGroupSlots(long long val, const char **err) {
    if (val <= 0 || (val & (val - 1))) {
        *err = "must be a power of two";
        return 0;
    }
    return 1;
}

/* CONFIG SET slot-affinity-group-slots: every slot no migration holds goes
 * to its new group's arena at once, and the background cycle relocates
 * the keys within slot-affinity-cpu (a migration's slots follow when it
 * ends). Nothing to do with slot-affinity no or before the allocator
 * starts: both map the slots when they start. */
int slotCompactApplyGroups(const char **err) {
    UNUSED(err);
    if (!slotCompactEnabled()) return 1;
    slotCompactMapGroups();
    slotCompactMarkAllDirty();
    return 1;
}

int slotCompactEnabled(void) {
    return sc.initialized && server.slot_affinity && server.cluster_enabled;
}

int slotCompactRunning(void) {
    return sc.initialized && server.cluster_enabled;
}

void slotCompactTallyStart(const unsigned char *slots) {
    memcpy(sc.tally_slots, slots, sizeof(sc.tally_slots));
    sc.tally_keys = sc.tally_bytes = sc.tally_ns = 0;
}

void slotCompactTallyTotals(long long *keys, long long *bytes, long long *ns) {
    *keys = sc.tally_keys;
    *bytes = sc.tally_bytes;
    *ns = sc.tally_ns;
}

/* ============================ Housekeeping ================================ */

#ifdef HAVE_DEFRAG
static void slotCompactMarkDirty(int slot, int urgent);
int slotCompactSlotPending(int slot);

/* The slots whose keys may lie in slot's arena: those of its group that
 * share it (slotcompact.c's top, "Slot groups"), as [*first, *end) to
 * filter by arena. */
static void slotCompactGroupRange(int slot, int *first, int *end) {
    int g = server.slot_affinity_group_slots;

    *first = g > 1 ? slot & ~(g - 1) : slot;
    *end = g > 1 ? *first + g : slot + 1;
}

/* Whether slot is the first of its group's slots in its arena: sweeps
 * that look at an arena through its slots look at it once. */
static int slotCompactArenaLead(int slot) {
    int first, end, arena = slotAllocSlotArena(slot);

    slotCompactGroupRange(slot, &first, &end);
    for (int t = first; t < slot; t++)
        if (slotAllocSlotArena(t) == arena) return 0;
    return 1;
}

/* Mark dirty (or ask whether any is still pending) the slots sharing
 * slot's arena: a drained block of a group holds its slots' keys. */
static void slotCompactMarkArenaDirty(int slot) {
    int first, end, arena = slotAllocSlotArena(slot);

    slotCompactGroupRange(slot, &first, &end);
    for (int t = first; t < end; t++)
        if (t == slot || slotAllocSlotArena(t) == arena) slotCompactMarkDirty(t, 0);
}

static int slotCompactArenaPending(int slot) {
    int first, end, arena = slotAllocSlotArena(slot);

    slotCompactGroupRange(slot, &first, &end);
    for (int t = first; t < end; t++)
        if ((t == slot || slotAllocSlotArena(t) == arena) && slotCompactSlotPending(t))
            return 1;
    return 0;
}

/* Pick the sparsest block of a slot worth draining, or NULL. */
static void *slotCompactSparseBlock(int slot) {
    slotAllocBlockInfo bi[64];
    size_t n = slotAllocSlotBlocks(slot, bi, 64), free_other = 0, i;
    void *best = NULL;
    double best_fill = SLOTCOMPACT_SPARSE_RATIO;

    if (n < 2 || n > 64) return NULL;
    for (i = 0; i < n; i++)
        if (!bi[i].huge) free_other += bi[i].size - bi[i].used_bytes;
    for (i = 0; i < n; i++) {
        double fill = (double)bi[i].used_bytes / (double)bi[i].size;
        if (bi[i].huge || fill >= best_fill) continue;
        if (free_other - (bi[i].size - bi[i].used_bytes) < 2 * bi[i].used_bytes) continue;
        best = bi[i].addr;
        best_fill = fill;
    }
    return best;
}

/* serverCron: finish drains whose slot was revisited, and look at the next
 * SLOTCOMPACT_SPARSE_SCAN slots for sparse blocks. */
static void slotCompactSparseCron(void) {
    for (int j = 0; j < sc.ndraining; j++) {
        if (slotCompactArenaPending(sc.draining[j].slot)) continue;
        /* Emptied blocks were released by the allocator; one that is
         * still draining kept something compaction could not move. */
        if (slotAllocIsDraining(sc.draining[j].block)) {
            slotAllocDrainBlock(sc.draining[j].block, 0);
            sc.sparse_kept++;
        } else {
            sc.sparse_drained++;
        }
        sc.draining[j--] = sc.draining[--sc.ndraining];
    }
    if (!slotCompactEnabled() || server.slot_affinity_cpu == 0) return;
    for (int n = 0; n < SLOTCOMPACT_SPARSE_SCAN; n++) {
        int slot = sc.sparse_cursor;
        void *block;

        if (sc.ndraining == SLOTCOMPACT_MAX_DRAINING) break;
        sc.sparse_cursor = (sc.sparse_cursor + 1) % CLUSTER_SLOTS;
        if (!slotCompactArenaLead(slot) || slotCompactArenaPending(slot) ||
            slotCompactArenaPinned(slotAllocSlotArena(slot))) continue;
        if ((block = slotCompactSparseBlock(slot)) == NULL) continue;
        if (slotAllocDrainBlock(block, 1) == -1) continue;
        sc.draining[sc.ndraining].slot = slot;
        sc.draining[sc.ndraining].block = block;
        sc.ndraining++;
        slotCompactMarkArenaDirty(slot);
    }
}

/* Whether the evacuation may walk a slot now: it holds keys, and no
 * migration or pending relocation has it. */
static int slotCompactEvacuable(int slot) {
    return !slotCompactSlotPending(slot) && !slotCompactIsPinned(slot) &&
           !slotCompactIsRequested(slot) && countKeysInSlot(slot);
}

/* Mark for the evacuation the slots that left an arena while it held their
 * keys (slotAllocArenaLeft): a change of slot-affinity-group-slots with
 * slot-affinity yes maps them to arenas of their own, and turning it off
 * before their relocation ended left their keys where no walk by slot's
 * arena finds them. An arena that lost the list may hold any slot's. */
static void slotCompactMarkLeftDirty(int arena) {
    static uint16_t left[CLUSTER_SLOTS];
    int n = slotAllocArenaLeft(arena, left, CLUSTER_SLOTS);

    if (n == -1) {
        for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
            if (slotCompactEvacuable(slot)) slotCompactMarkDirty(slot, 0);
        return;
    }
    for (int i = 0; i < n; i++)
        if (slotCompactEvacuable(left[i])) slotCompactMarkDirty(left[i], 0);
}

/* serverCron with slot-affinity no: look at the next SLOTCOMPACT_SPARSE_SCAN
 * slots for keys a migration left in blocks (an import adopted them, or a
 * donor's prepare relocated them and the migration failed) and mark each
 * such slot for the background cycle, which moves its keys back to the
 * general heap (slotCompactEvacuate) within slot-affinity-cpu; emptied
 * blocks are then released. The arena of the same id is looked at too, for
 * keys of slots that left it (slotCompactMarkLeftDirty): an arena no slot
 * maps to is found that way. Slots a migration pinned or asked for are
 * left alone. So with `no` a node holds blocks only while it migrates. */
static void slotCompactEvacuateCron(void) {
    if (server.slot_affinity || server.slot_affinity_cpu == 0) return;
    for (int n = 0; n < SLOTCOMPACT_SPARSE_SCAN; n++) {
        int slot = sc.evac_cursor, arena = slotAllocSlotArena(slot);
        slotAllocSlotStat st;

        sc.evac_cursor = (sc.evac_cursor + 1) % CLUSTER_SLOTS;
        /* Marked before with as many allocations: what is left is not
         * reachable from a key (being freed lazily, or a detached block's),
         * and walking again would not move it. */
        if (slotAllocArenaStats(slot, &st) == 0 && !st.arena_mixed) {
            sc.evac_left_live[slot] = 0;
        } else if (st.live_allocs != sc.evac_left_live[slot]) {
            sc.evac_left_live[slot] = st.live_allocs;
            slotCompactMarkLeftDirty(slot);
        }
        /* Then the slot's own arena: the same one unless it was mapped
         * elsewhere (a group, an isolation). */
        if (arena != slot && slotAllocArenaStats(arena, &st) != 0) continue;
        if (st.live_allocs == 0) {
            sc.evac_live[slot] = 0;
            continue;
        }
        if (st.live_allocs == sc.evac_live[slot] || !slotCompactEvacuable(slot)) continue;
        sc.evac_live[slot] = st.live_allocs;
        slotCompactMarkDirty(slot, 0);
    }
}
#else
static void slotCompactSparseCron(void) {}
static void slotCompactEvacuateCron(void) {}
#endif

/* serverCron: what blocks cost in RAM, for INFO. Looks at the resident
 * pages of the next SLOTCOMPACT_RESIDENT_SCAN arenas' blocks (mincore, one
 * call per block: slotAllocArenaResident; arenas, not slots, so that a
 * group's blocks count once), so a full pass over the arenas
 * takes CLUSTER_SLOTS / SLOTCOMPACT_RESIDENT_SCAN cron calls (1.6 s at hz
 * 10), and publishes the totals at the end of each pass. The slack
 * (resident bytes holding no live allocation: block headers, partly filled
 * slab pages, touched free pages) is not added to used_memory, like
 * jemalloc's own: freeing a key in a block raises the slack by what it
 * frees until the block empties, so maxmemory paying for slack would
 * evict many keys for little memory (tried: eviction then could not bring
 * used_memory under maxmemory). With slot-affinity no, blocks exist only
 * during a migration and until the evacuation after it, so the slack is
 * bounded by the moving slots' blocks and goes back to 0 (docs/DESIGN.md,
 * "Placement and migration"). */
#define SLOTCOMPACT_RESIDENT_SCAN 1024
static void slotCompactResidentCron(void) {
    for (int n = 0; n < SLOTCOMPACT_RESIDENT_SCAN; n++) {
        size_t resident, used;

        if (slotAllocArenaResident(sc.res_cursor, &resident, &used) == 0) {
            sc.res_sum += resident;
            sc.res_used += used;
        }
        if (++sc.res_cursor < CLUSTER_SLOTS) continue;
        sc.res_cursor = 0;
        sc.resident_bytes = sc.res_sum;
        sc.slack_bytes = sc.res_sum > sc.res_used ? sc.res_sum - sc.res_used : 0;
        sc.res_sum = sc.res_used = 0;
        break;
    }
}

/* Lazyfree job: return the retired blocks' pages to the OS. */
static void slotCompactPurgeJob(void *args[]) {
    UNUSED(args);
    slotAllocPurgeRetired();
    atomicSet(sc.purge_queued, 0);
}

/* See slotcompact.h. The purge job touches only retired blocks, which
 * nothing points into: it does not count. Read in this order (the job
 * clears its flag before bio counts it done), a race can only say "busy". */
int slotCompactLazyfreeIdle(void) {
    int queued;

    atomicGet(sc.purge_queued, queued);
    return bioPendingJobsOfType(BIO_LAZY_FREE) <= (unsigned long long)queued;
}

/* serverCron: blocks retired by whoever retired them (a replica's or an AOF
 * load's RDMASLOTDROP, a slot emptied key by key, a failed import) have
 * their pages returned to the OS on the lazyfree thread: a retired block's
 * pages stay committed until slotAllocPurgeRetired() runs. A donor's
 * delete purges at its own end (migLazyfreePurgeBarrier); whichever runs
 * first finds the list, the other nothing. One job queued at a time. */
static void slotCompactPurgeCron(void) {
    slotAllocStats st;
    int queued;

    atomicGet(sc.purge_queued, queued);
    if (queued) return;
    slotAllocGetStats(&st);
    if (st.retired_bytes == 0) return;
    atomicSet(sc.purge_queued, 1);
    bioCreateLazyFreeJob(slotCompactPurgeJob, 0);
}

/* serverCron, main thread. The allocator keeps the last emptied block of
 * each slot committed so that a slot growing and shrinking around a block
 * boundary does not map and unmap on every key; after a flush that would
 * pin up to one block per slot. At most once a second, release them all. */
#define SLOTCOMPACT_TRIM_PERIOD_MS 1000
void slotCompactCron(void) {
    slotAllocStats st;

    if (!sc.initialized) return;
    slotCompactSparseCron();
    slotCompactEvacuateCron();
    slotCompactResidentCron();
    slotCompactPurgeCron();
    if (sc.nheld) slotCompactHeldRun(1);
    if (server.mstime - sc.last_trim < SLOTCOMPACT_TRIM_PERIOD_MS) return;
    sc.last_trim = server.mstime;
    slotAllocGetStats(&st);
    if (st.cached_empty_blocks) slotAllocTrim();
}

/* ============================ Held keys =================================== */

/* A replica drops a moved group of slots with one RDMASLOTDROP per delete
 * slice of its master (migDropSlots), so a group's slots come over several
 * commands, and the group's arena can go wholesale only once all of them
 * are empty. Meanwhile the keys already dropped that lie whole in their
 * blocks are unlinked without a free and held here, per arena: two
 * pointers a key (docs/DESIGN.md, "Replicas, AOF and failures").
 *
 * Released with the arena (slotCompactHeldRelease, after each drop and
 * from serverCron): once no slot mapping to it holds a key and the
 * lazyfree thread has nothing queued that may free into its blocks, the
 * arena's blocks are retired and the held keys forgotten. Whatever else
 * drops the arena's blocks forgets them too (slotCompactDropSlot).
 *
 * Freed one by one after all, on the lazyfree thread, when the arena
 * cannot go: a slot of it holds keys again (a full sync loaded them, the
 * drop's guess that the group would go whole was wrong), it holds other
 * slots' leftovers (mixed), no slot maps to it any more, or no key joined
 * for SLOTCOMPACT_HELD_MS (a master's delete paused). So nothing is held
 * for long, whatever happens between two commands: a promotion, a full
 * sync, an import. The keys are nobody's: unlinked, their values'
 * refcount 1 (slotCompactKeyInBlocks), so any thread may free them any
 * time before their blocks go; and the blocks go only when the lazyfree
 * thread is idle. */
#define SLOTCOMPACT_HELD_MS 5000

/* Hold key (unlinked from the keyspace, everything it owns in slot's
 * blocks: slotCompactKeyInBlocks) until slot's arena goes wholesale. */
void slotCompactHoldKey(int slot, sds key, robj *val) {
    int arena = slotAllocSlotArena(slot);
    slotCompactHeld *h = NULL;

    serverAssert(arena >= 0);
    for (int j = 0; j < sc.nheld && !h; j++)
        if (sc.held[j].arena == arena) h = &sc.held[j];
    if (h == NULL) {
        sc.held = zrealloc(sc.held, sizeof(*sc.held) * (sc.nheld + 1));
        h = &sc.held[sc.nheld++];
        memset(h, 0, sizeof(*h));
        h->arena = arena;
    }
    if (h->n + 2 > h->cap) {
        h->cap = h->cap ? h->cap * 2 : 1024;
        h->ptrs = zrealloc(h->ptrs, sizeof(void *) * h->cap);
    }
    h->ptrs[h->n++] = key;
    h->ptrs[h->n++] = val;
    h->last = server.mstime;
}

/* Keys held now (INFO slotalloc_held_keys). */
size_t slotCompactHeldKeys(void) {
    size_t n = 0;

    for (int j = 0; j < sc.nheld; j++) n += sc.held[j].n / 2;
    return n;
}

static void slotCompactHeldRemove(int j) {
    zfree(sc.held[j].ptrs);
    sc.held[j] = sc.held[--sc.nheld];
    if (sc.nheld == 0) {
        zfree(sc.held);
        sc.held = NULL;
    }
}

/* The blocks of arena went (or are going) wholesale: its held keys with
 * them. */
static void slotCompactHeldForget(int arena) {
    for (int j = 0; j < sc.nheld; j++) {
        if (sc.held[j].arena != arena) continue;
        sc.held_released_keys += sc.held[j].n / 2;
        slotCompactHeldRemove(j);
        return;
    }
}

/* Lazyfree job: free held keys one by one (args: the pointers, their
 * count). */
static void slotCompactHeldFreeJob(void *args[]) {
    void **ptrs = args[0];
    size_t n = (size_t)args[1];

    for (size_t i = 0; i < n; i += 2) {
        sdsfree(ptrs[i]);
        decrRefCount(ptrs[i + 1]);
    }
    zfree(ptrs);
}

/* See "Held keys" above. Each held arena: retired with its keys if it can
 * go; else, if may_free and no key joined it for SLOTCOMPACT_HELD_MS, its
 * keys handed to the lazyfree thread. One pass over the slots for all. */
static void slotCompactHeldRun(int may_free) {
    static int16_t idx[CLUSTER_SLOTS];      /* Arena -> sc.held index + 1. */
    int idle = -1;

    for (int j = 0; j < sc.nheld; j++) {
        sc.held[j].member = -1;
        sc.held[j].keys = 0;
        idx[sc.held[j].arena] = j + 1;
    }
    for (int t = 0; t < CLUSTER_SLOTS; t++) {
        int a = slotAllocSlotArena(t);
        if (a < 0 || idx[a] == 0) continue;
        slotCompactHeld *h = &sc.held[idx[a] - 1];
        if (h->member == -1) h->member = t;
        if (countKeysInSlot(t)) h->keys = 1;
    }
    for (int j = 0; j < sc.nheld; j++) idx[sc.held[j].arena] = 0;
    for (int j = 0; j < sc.nheld; j++) {
        slotCompactHeld *h = &sc.held[j];
        int mixed;

        slotAllocArenaSlots(h->arena, &mixed);
        if (h->member != -1 && !h->keys && !mixed) {
            if (idle == -1) idle = slotCompactLazyfreeIdle();
            if (!idle) continue;                    /* Next cron. */
            slotCompactDropArena(h->member, 1);     /* Forgets h. */
            j--;
            continue;
        }
        if (!may_free || server.mstime - h->last < SLOTCOMPACT_HELD_MS) continue;
        serverLog(LL_NOTICE, "slot-affinity: arena %d cannot go wholesale (%s): "
                  "its %zu keys held since a drop are freed one by one", h->arena,
                  h->member == -1 ? "no slot maps to it" :
                  mixed ? "it holds other slots' leftovers" : "a slot of it holds keys",
                  h->n / 2);
        sc.held_freed_keys += h->n / 2;
        bioCreateLazyFreeJob(slotCompactHeldFreeJob, 2, h->ptrs, (void *)h->n);
        h->ptrs = NULL;
        slotCompactHeldRemove(j--);
    }
}

/* After a drop: release every held arena that can go now. */
void slotCompactHeldRelease(void) {
    slotCompactHeldRun(0);
}

/* ============================ INFO ======================================== */

/* The "# Slotalloc" section. slotalloc_group_slots is the group size keys
 * are placed by (1 with slot-affinity no), which redis-cli's rebalance
 * reads to keep a donor's parts of groups whole (cliPickSlots).
 * slotalloc_reserved_bytes is memory committed
 * as blocks; slotalloc_range_bytes the virtual range (slot-affinity-reserve);
 * slotalloc_used_bytes the usable sizes of live allocations in blocks (part
 * of used_memory); slotalloc_resident_bytes the blocks' pages in RAM and
 * slotalloc_slack_bytes the part of them holding no live allocation (not
 * in used_memory), both as of the last sweep (slotCompactResidentCron). */
sds slotCompactGenInfo(sds info) {
    slotAllocStats st;

    memset(&st, 0, sizeof(st));
    if (sc.initialized) slotAllocGetStats(&st);
    return sdscatprintf(info,
        "# Slotalloc\r\n"
        "slotalloc_enabled:%d\r\n"
        "slotalloc_group_slots:%d\r\n"
        "slotalloc_blocks:%zu\r\n"
        "slotalloc_huge_blocks:%zu\r\n"
        "slotalloc_cached_empty_blocks:%zu\r\n"
        "slotalloc_reserved_bytes:%zu\r\n"
        "slotalloc_used_bytes:%zu\r\n"
        "slotalloc_resident_bytes:%zu\r\n"
        "slotalloc_slack_bytes:%zu\r\n"
        "slotalloc_free_bytes:%zu\r\n"
        "slotalloc_live_allocs:%zu\r\n"
        "slotalloc_range_bytes:%zu\r\n"
        "slotalloc_metadata_bytes:%zu\r\n"
        "slotalloc_relocated_keys:%lld\r\n"
        "slotalloc_relocated_big_keys:%lld\r\n"
        "slotalloc_relocated_bytes:%lld\r\n"
        "slotalloc_evacuated_keys:%lld\r\n"
        "slotalloc_evacuated_bytes:%lld\r\n"
        "slotalloc_compaction_usec:%lld\r\n"
        "slotalloc_placed_writes:%lld\r\n"
        "slotalloc_born_keys:%lld\r\n"
        "slotalloc_pending_slots:%d\r\n"
        "slotalloc_pending_keys:%lu\r\n"
        "slotalloc_pending_big_keys:%lu\r\n"
        "slotalloc_draining_blocks:%d\r\n"
        "slotalloc_sparse_blocks_released:%lld\r\n"
        "slotalloc_retired_bytes:%zu\r\n"
        "slotalloc_held_keys:%zu\r\n"
        "slotalloc_held_released_keys:%lld\r\n"
        "slotalloc_held_freed_keys:%lld\r\n",
        slotCompactEnabled(),
        slotCompactEnabled() ? server.slot_affinity_group_slots : 1,
        st.blocks, st.huge_blocks, st.cached_empty_blocks,
        st.reserved_bytes, st.used_bytes, sc.resident_bytes, sc.slack_bytes,
        st.free_bytes, st.live_allocs,
        st.range_bytes, st.metadata_bytes, sc.relocated_keys,
        sc.relocated_big_keys, sc.relocated_bytes, sc.evacuated_keys,
        sc.evacuated_bytes, sc.compaction_usec,
        sc.placed_writes, sc.born_keys, sc.dirty_slots, sc.dirty_keys ? dictSize(sc.dirty_keys) : 0,
        (sc.later ? listLength(sc.later) : 0) + (sc.later_key != NULL),
        sc.ndraining, sc.sparse_drained, st.retired_bytes, slotCompactHeldKeys(),
        sc.held_released_keys, sc.held_freed_keys);
}

/* ============================ Relocation ================================== */

#define slotCompactNextInSlot(de) \
    (((clusterDictEntryMetadata *)dictMetadata(de))->next)
#define slotCompactFirstInSlot(slot) \
    ((*server.db[0].slots_to_keys).by_slot[(slot)].head)

/* Whether a value and its flat payload lie in the slot's blocks: the robj,
 * and for strings the sds (embstr and int live in the robj), for sets the
 * intset, for hashes and zsets the listpack. 0 for every other encoding
 * (lists, hash tables, skiplists, streams have nodes to check one by one).
 * Used by the write hook below and by a migration's manifest (slotblocks.c)
 * to tell a value that can travel as it is. */
int slotCompactValueInSlot(robj *o, int slot) {
    int arena = slotAllocSlotArena(slot);

    if (arena < 0 || slotAllocArenaOf(o) != arena) return 0;
    switch (o->type) {
    case OBJ_STRING:
        return o->encoding != OBJ_ENCODING_RAW ||
               slotAllocArenaOf(sdsAllocPtr(o->ptr)) == arena;
    case OBJ_SET:
        return o->encoding == OBJ_ENCODING_INTSET && slotAllocArenaOf(o->ptr) == arena;
    case OBJ_HASH:
    case OBJ_ZSET:
        return o->encoding == OBJ_ENCODING_LISTPACK && slotAllocArenaOf(o->ptr) == arena;
    default:
        return 0;
    }
}

/* Whether nothing but what the caller let go of lies in arena: no slot of
 * the unit holds a key, and no other slot mapping to it (a donor's slot of
 * the group another node served, idle in slotCompactWholeArenas) holds one
 * in the arena. Such a slot holds keys only if an operator assigned it
 * here during the migration; the pinned arena took none of them
 * (slotCompactSetPinned), which the walk of their keys confirms. */
static int slotCompactArenaOnlyUnit(int arena, const unsigned char *unit) {
    for (int t = 0; t < CLUSTER_SLOTS; t++) {
        if (slotAllocSlotArena(t) != arena || countKeysInSlot(t) == 0) continue;
        if (((unit[t >> 3] >> (t & 7)) & 1) || slotCompactSlotInArena(t)) return 0;
    }
    return 1;
}

/* Drop the blocks of slot's arena, whatever they hold (the caller checked):
 * used_memory, the sparse sweep's drains and the held keys forget them. */
static size_t slotCompactDropArena(int slot, int retire) {
    int arena = slotAllocSlotArena(slot);
    size_t used = retire ? slotAllocRetireSlot(slot) : slotAllocReleaseSlot(slot);

    zmalloc_foreign_released(used);
    slotCompactHeldForget(arena);
    for (int j = 0; j < sc.ndraining; j++)
        if (slotAllocSlotArena(sc.draining[j].slot) == arena)
            sc.draining[j--] = sc.draining[--sc.ndraining];
    return used;
}

static size_t slotCompactDropSlot(int slot, int retire, const unsigned char *unit) {
    slotAllocSlotStat st;

    /* Wholesale is for a slot with an arena of its own (a migration's
     * slots are isolated), or for the slots of a unit that moved whole
     * (every slot sharing the arena, all emptied): otherwise the arena
     * also holds other slots' keys. Never the case by design; if it were,
     * the blocks stay. */
    slotAllocSlotStats(slot, &st);
    if (st.live_allocs && (st.arena_mixed || (st.arena_slots > 1 &&
        (unit == NULL || !slotCompactArenaOnlyUnit(st.arena, unit))))) {
        serverLog(LL_WARNING, "slot-affinity: slot %d's arena %d holds other "
                  "slots' keys too: its blocks stay", slot, st.arena);
        return 0;
    }
    return slotCompactDropArena(slot, retire);
}

/* Drop every block of a slot at once (slotAllocReleaseSlot), for a slot a
 * migration gave away after unlinking its keys without freeing them one by
 * one: used_memory forgets the live allocations the blocks held, and a
 * drain in progress in them is forgotten too. The caller guarantees that
 * nothing still points into the blocks, on any thread (no pending lazy
 * free of the slot's objects). Returns the bytes released. */
size_t slotCompactReleaseSlot(int slot) {
    return slotCompactDropSlot(slot, 0, NULL);
}

/* slotCompactReleaseSlot(), but the blocks' pages go back to the OS only
 * when slotAllocPurgeRetired() runs (on another thread: for a slot of
 * hundreds of MB that is tens of ms of kernel time). The slot is empty at
 * once. */
size_t slotCompactRetireSlot(int slot) {
    return slotCompactDropSlot(slot, 1, NULL);
}

/* slotCompactRetireSlot() for a slot whose arena a migration moved whole
 * with the other slots of unit (slotCompactWholeArenas): allowed once no
 * slot sharing the arena holds a key in it (slotCompactArenaOnlyUnit). */
size_t slotCompactRetireUnit(int slot, const unsigned char *unit) {
    return slotCompactDropSlot(slot, 1, unit);
}

#ifdef HAVE_DEFRAG
/* Defrag's traversal (defrag.c): defragKey() visits every allocation a key
 * owns and asks activeDefragAlloc() where each goes; defragLaterItem()
 * continues a big key's contents from a cursor. */
long defragKey(redisDb *db, dictEntry *de);
int defragLaterItem(dictEntry *de, unsigned long *cursor, long long endtime, int dbid);
extern void (*activeDefragLaterTarget)(redisDb *db, dictEntry *kde);

/* The old heap copies of relocated allocations are freed by the lazyfree
 * thread, in batches, not here. Relocation is a migration's prepare with
 * slot-affinity no, on the main thread while writes wait for it, and a
 * third of its time went to jemalloc's free (the old copies lie scattered
 * over the heap: each free misses the cache on its slab's metadata), work
 * another core can do. Nothing refers to an old copy once it is relocated
 * (defrag's contract), so it may be freed at any later time; until then
 * used_memory still counts it, as it should. Frees of block memory
 * (evacuation) stay here: they feed the slot allocator's release of
 * emptied blocks. Flushed at the end of every walk (slotCompactEnd). */
#define SLOTCOMPACT_FREE_BATCH 4096

static void slotCompactFreeBatch(void *args[]) {
    void **ptrs = args[0];
    size_t n = (size_t)args[1];

    for (size_t i = 0; i < n; i++) zfree(ptrs[i]);
    zfree(ptrs);
}

static void slotCompactFlushFrees(void) {
    if (sc.nfrees == 0) return;
    bioCreateLazyFreeJob(slotCompactFreeBatch, 2, sc.frees, (void *)sc.nfrees);
    sc.frees = NULL;
    sc.nfrees = 0;
}

static void slotCompactFreeLater(void *ptr) {
    if (sc.frees == NULL) sc.frees = zmalloc(sizeof(void *) * SLOTCOMPACT_FREE_BATCH);
    sc.frees[sc.nfrees++] = ptr;
    if (sc.nfrees == SLOTCOMPACT_FREE_BATCH) slotCompactFlushFrees();
}

/* Copy an allocation to its new home, slot's blocks or, for slot -1, the
 * general heap, and free the old one. The copy gets the old allocation's
 * usable size (the size asked for is not known): from a block chunk to the
 * heap, objects under 128 bytes can land one jemalloc class higher. NULL,
 * nothing changed, when there is no room. */
static void *slotCompactCopy(void *ptr, int slot) {
    size_t size = zmalloc_size(ptr), usable;
    void *newptr = slot >= 0 ? ztrymalloc_foreign(slotAllocSlotArena(slot), size, &usable)
                             : ztrymalloc_usable(size, &usable);

    if (newptr == NULL) return NULL;
    memcpy(newptr, ptr, size);
    if (slot >= 0 && !slotAllocOwns(ptr)) slotCompactFreeLater(ptr);
    else zfree(ptr);
    sc.moved_bytes += usable;
    return newptr;
}

/* activeDefragAlloc() target while slot sc.target_slot is compacted: same
 * contract (NULL: not moved; otherwise the new copy, the old one freed).
 * Allocations already in the slot's blocks stay; when the slot's arena has
 * no room the allocation stays too, and so it does when a migration pinned
 * the arena through another slot of it (a donor's idle slot of a group
 * moving whole, written meanwhile: see slotCompactSetPinned). */
static void *slotCompactMove(void *ptr) {
    int arena = slotAllocSlotArena(sc.target_slot);

    if (arena >= 0 && slotAllocArenaOf(ptr) == arena && !slotAllocIsDraining(ptr))
        return NULL;
    if (slotCompactArenaPinned(arena) && !sc.force_pinned) {
        slotCompactSkipPinned(sc.target_slot);
        return NULL;
    }
    return slotCompactCopy(ptr, sc.target_slot);
}

/* activeDefragAlloc() target with slot-affinity no: an allocation a
 * migration left in slot blocks (the recipient's adopted keys, a donor's
 * relocated keys after a rollback) goes back to the general heap, so that
 * the node holds no block for good. */
static void *slotCompactEvacuate(void *ptr) {
    if (slotAllocArenaOf(ptr) < 0) return NULL;
    return slotCompactCopy(ptr, -1);
}

/* Where the background cycle puts the keys of a slot: into its blocks,
 * unless slot-affinity is no and no migration asked for the slot, then
 * out of them. */
static int slotCompactEvacuates(int slot) {
    return !server.slot_affinity && !slotCompactIsRequested(slot);
}

/* activeDefragAlloc() target of CLUSTER SLOTBLOCKS: the same traversal, but
 * nothing moves; each allocation is counted, and whether it lies in the
 * slot's blocks. */
static void *slotCompactCount(void *ptr) {
    size_t n = zmalloc_size(ptr);
    int arena = slotAllocSlotArena(sc.target_slot);

    sc.count_bytes += n;
    if (arena >= 0 && slotAllocArenaOf(ptr) == arena) {
        sc.count_in_blocks += n;
        sc.count_allocs_in++;
    } else {
        sc.count_all_in = 0;
    }
    return NULL;
}

/* The same walk's target for a yes/no answer (slotCompactKeyInBlocks):
 * no sizes, which were a third of a replica's RDMASLOTDROP time. */
static void *slotCompactIsIn(void *ptr) {
    if (slotAllocArenaOf(ptr) != sc.count_arena) sc.count_all_in = 0;
    return NULL;
}

/* defragLater() target. The synchronous walks (DEBUG SLOTCOMPACT, CLUSTER
 * SLOTBLOCKS) finish a big key's contents on the spot; the background
 * cycle queues the key and steps through it later within its budget. */
static void slotCompactLater(redisDb *db, dictEntry *kde) {
    if (sc.later_inline) {
        unsigned long cursor = 0;
        do {
            defragLaterItem(kde, &cursor, LLONG_MAX, db->id);
        } while (cursor);
        return;
    }
    slotCompactLaterItem *item = zmalloc(sizeof(*item));
    item->slot = sc.target_slot;
    item->evacuate = sc.evacuating;
    item->key = sdsdup(dictGetKey(kde));
    listAddNodeTail(sc.later, item);
}

/* Plug our targets into defrag for the span of one walk. Defrag's own
 * counters (INFO stats active_defrag_*) are left as they were: this is not
 * active defrag's work. */
static void slotCompactBegin(int slot, void *(*target)(void *), int inline_later) {
    sc.target_slot = slot;
    sc.evacuating = target == slotCompactEvacuate;
    sc.later_inline = inline_later;
    sc.saved_hits = server.stat_active_defrag_hits;
    sc.saved_scanned = server.stat_active_defrag_scanned;
    activeDefragAllocTarget = target;
    activeDefragLaterTarget = slotCompactLater;
}

static void slotCompactEnd(void) {
    slotCompactFlushFrees();
    activeDefragAllocTarget = NULL;
    activeDefragLaterTarget = NULL;
    sc.evacuating = 0;
    server.stat_active_defrag_hits = sc.saved_hits;
    server.stat_active_defrag_scanned = sc.saved_scanned;
    sc.target_slot = -1;
}

/* A small hash or set whose table is being rehashed (a dict grows by
 * doubling and then moves its entries a bucket per later operation, so a
 * hash of 10 fields written once and then only read stays half rehashed
 * for good): finish the rehash before its entries move. The move then
 * carries one table, not two, and a migration of the slot, which must
 * finish it before it ships the table (blkDictInSlot), finds nothing left
 * to do in its prepare phase, while writes to the slot wait. Big dicts
 * (more than SLOTCOMPACT_REHASH_MAX entries) are left to their incremental
 * rehash: this runs within a bounded slice of the main thread. */
#define SLOTCOMPACT_REHASH_MAX 1024
static int slotCompactRehashPending(robj *o) {
    if ((o->type != OBJ_HASH && o->type != OBJ_SET) || o->encoding != OBJ_ENCODING_HT)
        return 0;
    dict *d = o->ptr;
    return dictIsRehashing(d) && !d->pauserehash && dictSize(d) <= SLOTCOMPACT_REHASH_MAX;
}

static void slotCompactFinishRehash(robj *o) {
    if (slotCompactRehashPending(o)) while (dictRehash(o->ptr, 100));
}

/* Lookahead over a slot's key list. Relocating a key is mostly waiting for
 * memory: its dictEntry, name, object and everything the value owns are
 * scattered over the general heap, and each is read once (a YCSB hash is
 * some 34 allocations, with chains of dependent loads: entry -> object ->
 * dict -> tables -> entries -> fields). So while key i is moved, the keys
 * after it are prefetched, one level deeper per step closer: the entry of
 * key i+6, the name and object of i+5, the object's payload of i+4, a
 * dict's tables of i+3, their entries of i+2, the entries' fields and
 * values of i+1. Each level is read (not just prefetched) only once the
 * previous step brought it in, and only from live structures of keys not
 * yet visited: moving key i touches nothing key i+1.. owns (values cannot
 * be shared across keys but for shared objects, which never move, and the
 * keyspace's dictEntries stay where they are). Prefetches are hints; a
 * key deleted meanwhile cannot happen inside one walk (main thread). */
#define SLOTCOMPACT_AHEAD 6
#define SLOTCOMPACT_AHEAD_FIELDS 64     /* Larger dicts: tables only. */

typedef struct slotCompactAhead {
    dictEntry *de[SLOTCOMPACT_AHEAD];   /* de[k]: key k+1 after the current. */
} slotCompactAhead;

static inline void slotCompactPrefetchSds(sds s) {
    __builtin_prefetch(s - 1);
}

/* A small dict of a hash or set: the first line of each table. */
static inline dict *slotCompactAheadDict(robj *o) {
    if ((o->type != OBJ_HASH && o->type != OBJ_SET) || o->encoding != OBJ_ENCODING_HT)
        return NULL;
    dict *d = o->ptr;
    return dictSize(d) <= SLOTCOMPACT_AHEAD_FIELDS ? d : NULL;
}

/* Prefetch the part of the key at distance k+1 that is due at this step. */
static void slotCompactAheadLevel(dictEntry *de, int k) {
    robj *o;
    dict *d;

    switch (SLOTCOMPACT_AHEAD - 1 - k) {
    case 0:                             /* Its keyspace entry. */
        __builtin_prefetch(de);
        __builtin_prefetch((char *)de + sizeof(dictEntry) + sizeof(clusterDictEntryMetadata) - 1);
        return;
    case 1:                             /* Its name and object. */
        slotCompactPrefetchSds(dictGetKey(de));
        __builtin_prefetch(dictGetVal(de));
        return;
    case 2:                             /* The object's payload. */
        o = dictGetVal(de);
        if (o->refcount == OBJ_SHARED_REFCOUNT) return;
        if (o->type == OBJ_STRING) {
            if (o->encoding == OBJ_ENCODING_RAW) slotCompactPrefetchSds(o->ptr);
        } else if (o->type != OBJ_MODULE) {
            __builtin_prefetch(o->ptr);
        }
        return;
    case 3:                             /* A dict's tables. */
        if ((d = slotCompactAheadDict(dictGetVal(de))) == NULL) return;
        for (int t = 0; t < 2; t++) {
            if (d->ht_table[t] == NULL) continue;
            size_t bytes = DICTHT_SIZE(d->ht_size_exp[t]) * sizeof(dictEntry *);
            for (size_t off = 0; off < bytes && off < 512; off += 64)
                __builtin_prefetch((char *)d->ht_table[t] + off);
        }
        return;
    case 4:                             /* Their entries. */
    case 5:                             /* The entries' keys and values. */
        if ((d = slotCompactAheadDict(dictGetVal(de))) == NULL) return;
        for (int t = 0; t < 2; t++) {
            if (d->ht_table[t] == NULL) continue;
            unsigned long size = DICTHT_SIZE(d->ht_size_exp[t]);
            if (size > SLOTCOMPACT_AHEAD_FIELDS) continue;
            for (unsigned long b = 0; b < size; b++) {
                dictEntry *e = d->ht_table[t][b];
                if (e == NULL) continue;
                if (k == 1) {
                    __builtin_prefetch(e);
                    continue;
                }
                for (; e; e = e->next) {
                    slotCompactPrefetchSds(e->key);
                    if (((robj *)dictGetVal(de))->type == OBJ_HASH)
                        slotCompactPrefetchSds(e->v.val);
                }
            }
        }
        return;
    }
}

/* Start the lookahead at the key after cur (walks the list once). */
static void slotCompactAheadInit(slotCompactAhead *a, dictEntry *cur) {
    dictEntry *de = cur;

    for (int k = 0; k < SLOTCOMPACT_AHEAD; k++) {
        de = de ? slotCompactNextInSlot(de) : NULL;
        a->de[k] = de;
        if (de) __builtin_prefetch(de);
    }
}

/* Before the current key is moved: prefetch what is due for the keys after
 * it. Then slotCompactAheadNext() moves the window by one and returns the
 * key after the current one. */
static void slotCompactAheadStep(slotCompactAhead *a) {
    for (int k = SLOTCOMPACT_AHEAD - 1; k >= 0; k--)
        if (a->de[k]) slotCompactAheadLevel(a->de[k], k);
}

static dictEntry *slotCompactAheadNext(slotCompactAhead *a) {
    dictEntry *next = a->de[0], *last = a->de[SLOTCOMPACT_AHEAD - 1];

    memmove(&a->de[0], &a->de[1], sizeof(a->de[0]) * (SLOTCOMPACT_AHEAD - 1));
    a->de[SLOTCOMPACT_AHEAD - 1] = last ? slotCompactNextInSlot(last) : NULL;
    return next;
}

/* Move one key of the slot being compacted (key name, value object and
 * everything the value owns, of any type) into the slot's blocks. Big
 * values go through slotCompactLater(). Returns 1 if anything moved. */
/* Whether slot is one whose relocations a migration tallies
 * (slotCompactTallyStart). */
static int slotCompactIsTallied(int slot) {
    return slot >= 0 && ((sc.tally_slots[slot >> 3] >> (slot & 7)) & 1);
}

static int slotCompactKey(dictEntry *de) {
    struct timespec t0, t1;

    sc.moved_bytes = 0;
    if (slotCompactIsPinned(sc.target_slot)) return 0;
    /* Relocation is timed (a migration's prepare reports it), per key. */
    if (!sc.evacuating) clock_gettime(CLOCK_MONOTONIC, &t0);
    slotCompactFinishRehash(dictGetVal(de));
    defragKey(&server.db[0], de);
    if (sc.evacuating) {
        sc.evacuated_bytes += sc.moved_bytes;
        if (sc.moved_bytes) sc.evacuated_keys++;
    } else {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        long long ns = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
        sc.relocation_ns += ns;
        sc.relocated_bytes += sc.moved_bytes;
        if (sc.moved_bytes) sc.relocated_keys++;
        if (slotCompactIsTallied(sc.target_slot)) {
            sc.tally_ns += ns;
            sc.tally_bytes += sc.moved_bytes;
            if (sc.moved_bytes) sc.tally_keys++;
        }
    }
    return sc.moved_bytes != 0;
}

/* Relocate every key of one slot now, big ones included. Returns the number
 * of keys moved. */
static long long slotCompactSlotNow(int slot) {
    long long keys = 0;

    slotCompactAhead ahead;
    dictEntry *de = slotCompactFirstInSlot(slot);

    slotCompactBegin(slot, slotCompactMove, 1);
    if (de) slotCompactAheadInit(&ahead, de);
    while (de) {
        slotCompactAheadStep(&ahead);
        keys += slotCompactKey(de);
        de = slotCompactAheadNext(&ahead);
    }
    slotCompactEnd();
    slotCompactClearDirty(slot);
    return keys;
}

/* Relocate one key now, big values included, even in a pinned slot (and
 * into its arena, which the unit's other slots keep pinned): a migration's
 * manifest meets a key that background compaction has not visited yet
 * (main thread, writes to the slot frozen). Returns 1 if anything moved. */
int slotCompactKeyNow(dictEntry *de) {
    sds key = dictGetKey(de);
    int slot = (int)keyHashSlot(key, (int)sdslen(key));
    int pinned = slotCompactIsPinned(slot), moved;

    if (!slotCompactRunning()) return 0;
    /* Unpinned for the walk only (the slot stays requested). */
    slotCompactSetPinned(slot, 0);
    sc.force_pinned = 1;
    slotCompactBegin(slot, slotCompactMove, 1);
    moved = slotCompactKey(de);
    slotCompactEnd();
    sc.force_pinned = 0;
    slotCompactSetPinned(slot, pinned);
    return moved;
}

/* Relocate one slot now, synchronously (main thread). */
long long slotCompactSlotSync(int slot) {
    return slotCompactSlotNow(slot);
}

/* ============================ Background compaction ======================= */

/* The background cycle. Writes (signalModifiedKey) queue the written key,
 * unless it certainly is in its blocks already; loads (and more than
 * SLOTCOMPACT_MAX_DIRTY_KEYS queued writes) mark whole slots dirty. A
 * timer event visits them in slices of about SLOTCOMPACT_SLICE_US and sleeps between slices so that it uses at most
 * slot-affinity-cpu percent of the main thread. Keys already in their
 * blocks cost a pointer-range check per allocation. Big values are queued
 * by defrag's traversal and continued from a cursor (one big key at a time:
 * defrag keeps per-type resume state, a quicklist bookmark or a static
 * stream ID, for one key only). It pauses while a fork child runs (moving
 * memory then only duplicates pages) and while active defrag runs. Slots a
 * migration asked for (slotCompactRequest) go first. */
#define SLOTCOMPACT_SLICE_US 250

static inline int slotCompactIsDirty(int slot) {
    return (sc.dirty[slot >> 3] >> (slot & 7)) & 1;
}

static void slotCompactClearDirty(int slot) {
    if (!slotCompactIsDirty(slot)) return;
    sc.dirty[slot >> 3] &= ~(1 << (slot & 7));
    sc.urgent[slot >> 3] &= ~(1 << (slot & 7));
    sc.dirty_slots--;
    if (sc.cur_slot == slot) {
        sc.cur_slot = -1;
        if (sc.cur_key) { sdsfree(sc.cur_key); sc.cur_key = NULL; }
    }
}

static int slotCompactTimerProc(struct aeEventLoop *el, long long id, void *data);

static void slotCompactSchedule(void) {
    if (sc.timer_id != -1) return;
    sc.timer_id = aeCreateTimeEvent(server.el, 1, slotCompactTimerProc, NULL, NULL);
    if (sc.timer_id == AE_ERR) sc.timer_id = -1;
}

static void slotCompactMarkDirty(int slot, int urgent) {
    if (!slotCompactIsDirty(slot)) {
        sc.dirty[slot >> 3] |= 1 << (slot & 7);
        sc.dirty_slots++;
    }
    if (urgent) sc.urgent[slot >> 3] |= 1 << (slot & 7);
    slotCompactSchedule();
}

/* signalModifiedKey() hook: the key may own new memory to relocate. The
 * cycle visits just that key (a write touches one key; walking its whole
 * slot for it would cost far more), up to SLOTCOMPACT_MAX_DIRTY_KEYS keys
 * queued; past that, it marks the key's slot for a whole walk instead. */
#define SLOTCOMPACT_MAX_DIRTY_KEYS 65536

/* Whether a written key certainly still lies in its slot's blocks: a
 * deleted key, or one whose name, object and flat value (strings,
 * listpacks, intsets) are there -- a write that reallocated them kept them
 * in the slot (zrealloc stays in its slot). Lists, hash tables, skiplists
 * and streams may have grown new nodes in the heap: visit them. */
static int slotCompactKeyInPlace(robj *key, int slot, robj *placed) {
    dictEntry *de = dictFind(server.db[0].dict, key->ptr);
    robj *o;

    if (de == NULL) return 1;
    o = dictGetVal(de);
    /* Every allocation this write added went to the object's slot
     * (slotCompactReplaceSds), which is this key's, and the key's name did
     * not change: the key is where it was before the write. If it was not
     * in place then, it is queued still (or its slot is dirty). */
    if (o == placed) return 1;
    if (slotAllocArenaOf(sdsAllocPtr(dictGetKey(de))) != slotAllocSlotArena(slot)) return 0;
    if (o->refcount == OBJ_SHARED_REFCOUNT) return 1;
    return slotCompactValueInSlot(o, slot);
}

void slotCompactKeyModified(robj *key) {
    robj *placed = sc.place_ok ? sc.place_obj : NULL;
    int slot;

    sc.place_obj = NULL;
    if (!slotCompactEnabled() || !sdsEncodedObject(key)) return;
    slot = (int)keyHashSlot(key->ptr, (int)sdslen(key->ptr));
    if (slotCompactIsDirty(slot) || slotCompactKeyInPlace(key, slot, placed)) return;
    if (dictSize(sc.dirty_keys) >= SLOTCOMPACT_MAX_DIRTY_KEYS) {
        slotCompactMarkDirty(slot, 0);
        return;
    }
    if (dictFind(sc.dirty_keys, key->ptr) == NULL) {
        dictAdd(sc.dirty_keys, sdsdup(key->ptr), NULL);
        slotCompactSchedule();
    }
}

/* Remember what a write did to value object o: placed is 1 when every
 * allocation it added lies in o's slot blocks. Several writes to one object
 * in one command combine (all must be placed). A mark lasts until the next
 * signalModifiedKey() or the next command (slotCompactCommandStart): a
 * command whose placed write signalled nothing (LINSERT that found no
 * pivot, XTRIM that trimmed nothing) must not vouch for a later command's
 * unplaced write to the same object (XGROUP CREATE, XREADGROUP). */
static void slotCompactNoteWrite(robj *o, int placed) {
    if (sc.place_obj != o) {
        sc.place_obj = o;
        sc.place_ok = placed;
    } else {
        sc.place_ok &= placed;
    }
}

void slotCompactCommandStart(void) {
    sc.place_obj = NULL;
}

/* The arena of o's blocks when a write to o may keep it there: o and its
 * top-level structure (o->ptr) live in that arena's blocks and no migration
 * has pinned a slot of it. -1 otherwise. An arena, not a slot: a group's
 * slots share one (slotalloc.c, "Slot groups"). */
static int slotCompactPlaceSlot(robj *o) {
    int arena;

    if (!slotCompactEnabled() || o->refcount == OBJ_SHARED_REFCOUNT) return -1;
    arena = slotAllocArenaOf(o);
    if (arena < 0 || slotAllocArenaOf(o->ptr) != arena || slotCompactArenaPinned(arena))
        return -1;
    return arena;
}

/* Point the thread's zmalloc placement arena at the slot allocator's arena
 * 'arena' (our zmalloc patch): every allocation until
 * slotCompactPlaceStop() comes from its blocks, or from the heap as a
 * counted miss. Never nested. */
static void slotCompactPlaceStart(int arena) {
    serverAssert(zmalloc_place_arena == -1);
    sc.place_misses = zmalloc_place_misses;
    zmalloc_place_arena = arena;
}

/* Back to the heap. Returns 1, counting a placed write, if every
 * allocation since slotCompactPlaceStart() went to the slot's blocks. */
static int slotCompactPlaceStop(void) {
    zmalloc_place_arena = -1;
    if (zmalloc_place_misses != sc.place_misses) return 0;
    sc.placed_writes++;
    return 1;
}

/* A write to o went over its old bytes in its slot's blocks: nothing was
 * allocated, so the write is placed and the key stays out of the queue. */
static void slotCompactNoteInPlace(robj *o) {
    sc.placed_writes++;
    slotCompactNoteWrite(o, 1);
}

/* A write replaces the value old, held by o (the field of a hash table),
 * with value; returns the sds to store in its place. take: value is the
 * caller's to give (it is used or freed here), otherwise it is copied.
 *
 * With slot affinity, the key should stay in its slot's blocks, where the
 * background cycle would otherwise have to move the new value (walking
 * the whole key to find it; that was 15-24 % of a YCSB update load's
 * throughput). So, when o lives in a slot's blocks (slotCompactPlaceSlot):
 * the new value overwrites old in place when it fits old's allocation
 * without wasting half of it (YCSB's updates: same length; no allocation
 * at all), or else is allocated in the slot's blocks. Either way the write
 * added nothing to the heap, and signalModifiedKey's hook leaves the key
 * out of the queue. Otherwise (slot affinity off, o in the heap, a pinned
 * slot, a full arena) this is what hashTypeSet always did: free old, keep
 * or copy value, and the key is visited later. Main thread only. */
sds slotCompactReplaceSds(robj *o, sds old, sds value, int take) {
    size_t len = sdslen(value), avail;
    int slot = slotCompactPlaceSlot(o);
    sds s;

    if (slot >= 0) {
        avail = sdsalloc(old);
        if (len <= avail && avail <= 2 * len + 16) {
            old = sdscpylen(old, value, len);
            if (take) sdsfree(value);
            slotCompactNoteInPlace(o);
            return old;
        }
    }
    sdsfree(old);
    if (slot < 0) {
        slotCompactNoteWrite(o, 0);
        return take ? value : sdsdup(value);
    }
    /* The caller's string is in the heap: copy it into the slot even when
     * it is ours to take. */
    slotCompactPlaceStart(slot);
    s = sdsdup(value);
    slotCompactNoteWrite(o, slotCompactPlaceStop());
    if (take) sdsfree(value);
    return s;
}

/* Placement for the one allocation a read may make for a structure that
 * lives in a slot's blocks: a read of a compressed list (LRANGE, LINDEX,
 * DEBUG DIGEST, ...) decompresses a quicklist node into a new buffer and
 * compresses it again into another, and a read signals no key, so those
 * buffers, left in the heap, waited for the key's next queued write. With
 * this (quicklist.c) they are made in the node's slot. Does nothing inside
 * a placement scope (the write's own arena is already the slot's), off
 * slot affinity, for a node in the heap or in a pinned slot (a migration
 * is reading the blocks; such reads wait while the slot is frozen:
 * slotfreeze.c). Returns 1 if placing: pass it to slotCompactPlaceNearEnd. */
int slotCompactPlaceNear(const void *p) {
    int arena;

    if (zmalloc_place_arena != -1 || !slotCompactEnabled()) return 0;
    arena = slotAllocArenaOf(p);
    if (arena < 0 || slotCompactArenaPinned(arena)) return 0;
    zmalloc_place_arena = arena;
    return 1;
}

void slotCompactPlaceNearEnd(int placing) {
    if (placing) zmalloc_place_arena = -1;
}

/* A placement scope's code may have to allocate something that is not the
 * object's: a list pop hands its element to the caller (t_list.c's
 * listPopSaver), whose reply frees it. Suspend returns the arena (-1 when
 * none) for Resume. */
int slotCompactPlaceSuspend(void) {
    int arena = zmalloc_place_arena;

    zmalloc_place_arena = -1;
    return arena;
}

void slotCompactPlaceResume(int arena) {
    zmalloc_place_arena = arena;
}

/* SET (and every setKey() caller) over an existing string key, the
 * string counterpart of slotCompactReplaceSds: in stock Redis the new
 * value object replaces the old one, which is freed. With slot affinity
 * the old one lives in the key's slot blocks and the new one in the heap,
 * so every overwrite freed a block allocation (the slot allocator's lock)
 * and queued the key for the background cycle to move the new value in
 * (a cache-style SET load on relocated keys ran 8 % slower than with
 * slot-affinity no). Instead, when the old value is a string of the same
 * encoding that lives in its slot's blocks (slotCompactPlaceSlot: not
 * shared, not pinned by a migration), the new bytes are written over it:
 * an embedded string when they fit its allocation, a raw one through
 * slotCompactReplaceSds (in place when it fits without wasting half the
 * allocation, otherwise a new string in the slot's blocks). The old
 * object stays in the keyspace with what the new one would have carried:
 * its LRU clock (LFU keeps the old counter, as dbOverwrite() does). Other
 * cases, and integer-encoded values, return 0 and take the usual path.
 * Only strings: their old value has no reader left (replies and scripts
 * copy), and no module unlink hook or blocked client cares about it. */
int slotCompactOverwriteString(dictEntry *de, robj *val) {
    robj *old;
    size_t len;

    if (!slotCompactEnabled() || de == NULL || val->type != OBJ_STRING ||
        (val->encoding != OBJ_ENCODING_RAW && val->encoding != OBJ_ENCODING_EMBSTR))
        return 0;
    old = dictGetVal(de);
    if (old == val || old->type != OBJ_STRING || old->encoding != val->encoding ||
        old->refcount != 1 || slotCompactPlaceSlot(old) < 0)
        return 0;
    len = sdslen(val->ptr);
    if (old->encoding == OBJ_ENCODING_EMBSTR) {
        /* robj, sds header and bytes in one allocation (embstr's alloc is
         * its length, as createEmbeddedStringObject makes it). */
        size_t need = sizeof(robj) + sizeof(struct sdshdr8) + len + 1;
        size_t usable = zmalloc_size(old);
        if (need > usable || usable > 2 * need + 16) return 0;
        sds s = old->ptr;
        memcpy(s, val->ptr, len);
        s[len] = '\0';
        sdssetlen(s, len);
        sdssetalloc(s, len);
        slotCompactNoteInPlace(old);
    } else {
        old->ptr = slotCompactReplaceSds(old, old->ptr, val->ptr, 0);
    }
    if (!(server.maxmemory_policy & MAXMEMORY_FLAG_LFU)) old->lru = val->lru;
    return 1;
}

/* The arena a new key of this slot may be born in: slot affinity on, the
 * slot's arena not pinned by a migration, no placement scope open. -1
 * otherwise (the key is born in the heap and visited later). */
static int slotCompactBirthArena(int slot) {
    int arena;

    if (!slotCompactEnabled() || zmalloc_place_arena != -1 || slotCompactIsPinned(slot))
        return -1;
    arena = slotAllocSlotArena(slot);
    if (arena < 0 || slotCompactArenaPinned(arena)) return -1;
    return arena;
}

/* SET (and every setKey() caller) of a key that does not exist: keys born
 * in their blocks. The value object the command built (an argument of the
 * client, or the result of BITOP, ...) lives in the heap; stored as is,
 * the background cycle would move it into the slot's blocks a moment
 * later. For small objects that move is what cost the memory bound: the
 * heap chunks it frees lie among the keyspace's dictEntries, and with a
 * cycle lagging thousands of keys behind the writes the heap's pages stay
 * holed (docs/DESIGN.md, "Keys born in their blocks"). Instead, a string
 * (raw, embedded or an unshared integer) of at most SLOTCOMPACT_BIRTH_MAX
 * bytes is copied into its slot's arena here, with the LRU/LFU field of
 * the original; the original goes with the command's arguments, and its
 * chunk serves the next command. Returns the copy, which the caller adds
 * to the keyspace in place of val (taking no reference on val), or NULL
 * for the usual path. dbAdd() then places the key's name beside it
 * (slotCompactDupKeyName), so only the keyspace's dictEntry is in the
 * heap, as for every key in blocks. */
#define SLOTCOMPACT_BIRTH_MAX 4096

robj *slotCompactNewString(robj *key, robj *val) {
    int arena;
    robj *o;

    if (val->type != OBJ_STRING || val->refcount == OBJ_SHARED_REFCOUNT ||
        !sdsEncodedObject(key))
        return NULL;
    if (sdsEncodedObject(val) ? sdslen(val->ptr) > SLOTCOMPACT_BIRTH_MAX :
        val->encoding != OBJ_ENCODING_INT)
        return NULL;
    arena = slotCompactBirthArena((int)keyHashSlot(key->ptr, (int)sdslen(key->ptr)));
    if (arena < 0) return NULL;
    zmalloc_place_arena = arena;
    o = dupStringObject(val);
    zmalloc_place_arena = -1;
    o->lru = val->lru;
    sc.born_keys++;
    return o;
}

/* dbAdd()'s copy of a new key's name: in the blocks of the key's arena
 * when its value was born there (slotCompactNewString), in the heap
 * otherwise. */
sds slotCompactDupKeyName(sds name, robj *val) {
    int arena;
    sds s;

    if (!slotCompactEnabled() || val->refcount == OBJ_SHARED_REFCOUNT ||
        (arena = slotAllocArenaOf(val)) < 0 ||
        slotCompactBirthArena((int)keyHashSlot(name, (int)sdslen(name))) != arena)
        return sdsdup(name);
    zmalloc_place_arena = arena;
    s = sdsdup(name);
    zmalloc_place_arena = -1;
    return s;
}

/* Placement scope, around code whose every allocation belongs to value
 * object o (a new entry of a hash table, set or sorted set: dictEntry,
 * strings, skiplist node, a grown table): when o lives in a slot's blocks
 * (slotCompactPlaceSlot), zmalloc allocates from that slot's arena until
 * slotCompactPlaceEnd() (the thread's placement arena, our zmalloc patch),
 * and the write leaves the key in place unless an allocation did not fit
 * there. Returns 1 if placing: pass it to slotCompactPlaceEnd(). Never
 * nested; main thread only. Nothing else may be allocated in between:
 * whatever is, would live in the slot's blocks and leave with the slot. */
int slotCompactPlaceBegin(robj *o) {
    int slot = slotCompactPlaceSlot(o);

    if (slot < 0) {
        slotCompactNoteWrite(o, 0);
        return 0;
    }
    slotCompactPlaceStart(slot);
    return 1;
}

void slotCompactPlaceEnd(robj *o, int placing) {
    int placed;

    if (!placing) return;
    placed = slotCompactPlaceStop();
    /* A small table the write left mid-rehash is finished by the
     * relocation (slotCompactFinishRehash), so that a migration's prepare
     * does not have to: queue the key for it. */
    slotCompactNoteWrite(o, placed && !slotCompactRehashPending(o));
}

/* Visit queued written keys until the deadline. Returns 1 if time ran
 * out. */
static int slotCompactDirtyKeysStep(monotime start, uint64_t budget_us) {
    dictIterator *di;
    dictEntry *qe;
    int n = 0, timeout = 0;

    if (dictSize(sc.dirty_keys) == 0) return 0;
    di = dictGetSafeIterator(sc.dirty_keys);
    while ((qe = dictNext(di)) != NULL) {
        sds key = dictGetKey(qe);
        dictEntry *de = dictFind(server.db[0].dict, key);
        if (de) {
            slotCompactBegin((int)keyHashSlot(key, (int)sdslen(key)), slotCompactMove, 0);
            slotCompactKey(de);
            slotCompactEnd();
        }
        dictDelete(sc.dirty_keys, key);
        if ((++n & 3) == 0 && elapsedUs(start) >= budget_us) {
            timeout = 1;
            break;
        }
    }
    dictReleaseIterator(di);
    return timeout || dictSize(sc.dirty_keys) != 0;
}

/* Every slot holding keys needs a visit: after a load (stopLoading hook)
 * and when slot-affinity is turned on. */
static void slotCompactMarkAllDirty(void) {
    if (!slotCompactEnabled() || server.db == NULL || !server.db[0].slots_to_keys)
        return;
    for (int j = 0; j < CLUSTER_SLOTS; j++)
        if ((*server.db[0].slots_to_keys).by_slot[j].count) slotCompactMarkDirty(j, 0);
}

void slotCompactLoadingEnded(void) {
    slotCompactMarkAllDirty();
}

/* The entry point for a migration's prepare phase: relocate the keys of
 * this slot before the others. Then call slotCompactStep() in bounded
 * slices until slotCompactSlotPending() says the slot is done. With
 * slot-affinity no, a slot being evacuated (below) is walked again from
 * its first key, into its blocks this time. */
void slotCompactRequest(int slot) {
    if (!slotCompactRunning()) return;
    if (sc.cur_slot == slot && slotCompactEvacuates(slot)) {
        sc.cur_slot = -1;
        if (sc.cur_key) { sdsfree(sc.cur_key); sc.cur_key = NULL; }
    }
    sc.requested[slot >> 3] |= 1 << (slot & 7);
    slotCompactMarkDirty(slot, 1);
}

/* See slotcompact.h. Request's bit is for a migration to clear (Unpin):
 * left set after one, it kept the slot out of every later change of
 * groups and, with slot-affinity no, out of the evacuation. */
void slotCompactVisitFirst(int slot) {
    if (!slotCompactRunning()) return;
    slotCompactMarkDirty(slot, 1);
}

/* A pinned slot also pins its arena, which the slots of its group share
 * (slotalloc.c, "Slot groups"): a write to any of them may not allocate in,
 * or move, the blocks being read, nor may the background cycle relocate a
 * key into them (slotCompactMove). That keeps the arena holding only the
 * migration's keys when it moves whole with a donor's idle slots
 * (migDonorIdleSlots) and one of those is assigned back and written: the
 * delete may still let the blocks go (slotCompactDropSlot). The arena is
 * remembered per slot, so that unpinning releases the one pinned even if
 * the slot was mapped to another arena meanwhile. */
static void slotCompactSetPinned(int slot, int on) {
    if (on == slotCompactIsPinned(slot)) return;
    if (on) {
        int arena = slotAllocSlotArena(slot);
        sc.pinned[slot >> 3] |= 1 << (slot & 7);
        sc.pinned_arena[slot] = arena;
        if (arena >= 0) sc.arena_pins[arena]++;
    } else {
        int arena = sc.pinned_arena[slot];
        sc.pinned[slot >> 3] &= ~(1 << (slot & 7));
        if (arena >= 0 && --sc.arena_pins[arena] == 0 && sc.npin_skipped)
            slotCompactRevisitSkipped();
    }
}

/* A slot whose keys stayed out of its pinned arena (slotCompactMove). */
static void slotCompactSkipPinned(int slot) {
    if ((sc.pin_skipped[slot >> 3] >> (slot & 7)) & 1) return;
    sc.pin_skipped[slot >> 3] |= 1 << (slot & 7);
    sc.npin_skipped++;
}

/* An arena was unpinned: the slots skipped while theirs was pinned are
 * visited again (rare: an operator's assignment during a migration). */
static void slotCompactRevisitSkipped(void) {
    for (int t = 0; t < CLUSTER_SLOTS && sc.npin_skipped; t++) {
        if (!((sc.pin_skipped[t >> 3] >> (t & 7)) & 1) ||
            slotCompactArenaPinned(slotAllocSlotArena(t))) continue;
        sc.pin_skipped[t >> 3] &= ~(1 << (t & 7));
        sc.npin_skipped--;
        if (countKeysInSlot(t)) slotCompactMarkDirty(t, 0);
    }
}

/* Whether a migration pinned a slot of arena 'arena' (see above). */
static int slotCompactArenaPinned(int arena) {
    return arena >= 0 && sc.arena_pins[arena] != 0;
}

/* A migration pins its slots from the moment it describes them (manifest,
 * block list) until it is over: the blocks are being read by the NIC or
 * the transfer thread, so nothing may be moved, drained or reallocated in
 * them (a quicklist bookmark, for instance, reallocates the quicklist).
 * Writes to those slots are held back by the freeze (slotfreeze.c). */
void slotCompactPin(int slot) {
    slotCompactSetPinned(slot, 1);
}

/* The migration is over: the slot is no longer pinned nor asked for, so
 * with slot-affinity no the evacuation may take its keys back to the heap. */
void slotCompactUnpin(int slot) {
    slotCompactSetPinned(slot, 0);
    sc.requested[slot >> 3] &= ~(1 << (slot & 7));
    slotCompactRegroup(slot);
}

int slotCompactIsPinned(int slot) {
    return slot >= 0 && ((sc.pinned[slot >> 3] >> (slot & 7)) & 1);
}

/* Whether the slot still has keys the cycle has not visited since it was
 * last marked: dirty, or a big key of it is queued or in progress. */
int slotCompactSlotPending(int slot) {
    listIter li;
    listNode *ln;

    if (slotCompactIsDirty(slot) || sc.later_slot == slot) return 1;
    listRewind(sc.later, &li);
    while ((ln = listNext(&li)) != NULL) {
        slotCompactLaterItem *item = listNodeValue(ln);
        if (item->slot == slot) return 1;
    }
    return 0;
}

static void slotCompactLaterFree(void *p) {
    slotCompactLaterItem *item = p;
    sdsfree(item->key);
    zfree(item);
}

/* Stop stepping through the current big key. A list keeps defrag's
 * bookmark while a scan is in progress: drop it. */
static void slotCompactLaterAbandon(void) {
    if (sc.later_key) {
        dictEntry *de = dictFind(server.db[0].dict, sc.later_key);
        robj *ob = de ? dictGetVal(de) : NULL;
        if (ob && sc.later_cursor && ob->type == OBJ_LIST &&
            ob->encoding == OBJ_ENCODING_QUICKLIST)
            quicklistBookmarkDelete(ob->ptr, "_AD");
        sdsfree(sc.later_key);
    }
    sc.later_key = NULL;
    sc.later_cursor = 0;
    sc.later_slot = -1;
}

/* Forget all pending work (slot-affinity turned off). */
static void slotCompactReset(void) {
    slotCompactLaterAbandon();
    while (listLength(sc.later)) {
        listNode *ln = listFirst(sc.later);
        slotCompactLaterFree(listNodeValue(ln));
        listDelNode(sc.later, ln);
    }
    memset(sc.dirty, 0, sizeof(sc.dirty));
    memset(sc.urgent, 0, sizeof(sc.urgent));
    dictEmpty(sc.dirty_keys, NULL);
    sc.dirty_slots = 0;
    sc.cur_slot = -1;
    if (sc.cur_key) { sdsfree(sc.cur_key); sc.cur_key = NULL; }
}

/* Continue big keys until the deadline. Returns 1 if time ran out. */
static int slotCompactLaterStep(monotime start, uint64_t budget_us) {
    while (1) {
        if (sc.later_key == NULL) {
            listNode *ln = listFirst(sc.later);
            if (ln == NULL) return 0;
            slotCompactLaterItem *item = listNodeValue(ln);
            sc.later_key = item->key;
            sc.later_slot = item->slot;
            sc.later_evacuate = item->evacuate;
            sc.later_cursor = 0;
            zfree(item);            /* The key moves to sc.later_key. */
            listDelNode(sc.later, ln);
        }
        /* The key may have been deleted or replaced since: look it up on
         * every step, as defrag does. */
        dictEntry *de = dictFind(server.db[0].dict, sc.later_key);
        if (slotCompactIsPinned(sc.later_slot)) de = NULL;  /* Drop it. */
        long long endtime = ustime() + (long long)(budget_us - elapsedUs(start));
        int timeout = 0;

        int evacuate = sc.later_evacuate && slotCompactEvacuates(sc.later_slot);
        slotCompactBegin(sc.later_slot, evacuate ? slotCompactEvacuate : slotCompactMove, 0);
        sc.moved_bytes = 0;
        do {
            if (defragLaterItem(de, &sc.later_cursor, endtime, 0)) timeout = 1;
        } while (sc.later_cursor && !timeout && elapsedUs(start) < budget_us);
        if (evacuate) sc.evacuated_bytes += sc.moved_bytes;
        else sc.relocated_bytes += sc.moved_bytes;
        slotCompactEnd();
        if (sc.later_cursor == 0) {
            if (de && !evacuate) sc.relocated_big_keys++;
            sdsfree(sc.later_key);
            sc.later_key = NULL;
            sc.later_slot = -1;
        }
        if (timeout || elapsedUs(start) >= budget_us) return 1;
    }
}

/* Pick the next dirty slot, urgent ones first, round robin otherwise. */
static int slotCompactNextSlot(void) {
    for (int pass = 0; pass < 2; pass++) {
        unsigned char *map = pass == 0 ? sc.urgent : sc.dirty;
        for (int n = 0; n < CLUSTER_SLOTS; n += 8) {
            int j = (sc.next_slot + n) % CLUSTER_SLOTS & ~7;
            if (map[j >> 3] == 0) continue;
            for (int b = 0; b < 8; b++)
                if ((map[j >> 3] >> b) & 1) return j + b;
        }
    }
    return -1;
}

/* One bounded step of the background work. Returns 1 if work remains. */
int slotCompactStep(uint64_t budget_us) {
    monotime start;
    int timeout;

    if (!slotCompactRunning()) return 0;
    elapsedStart(&start);
    timeout = slotCompactLaterStep(start, budget_us);
    if (!timeout) timeout = slotCompactDirtyKeysStep(start, budget_us);
    while (!timeout) {
        if (sc.cur_slot == -1) {
            if (sc.dirty_slots == 0) break;
            sc.cur_slot = slotCompactNextSlot();
            serverAssert(sc.cur_slot != -1);
            sc.next_slot = (sc.cur_slot + 1) % CLUSTER_SLOTS;
        }
        /* Resume at the saved key if it still exists, else from the head
         * (keys already relocated cost little). */
        dictEntry *de = NULL;
        if (sc.cur_key) {
            de = dictFind(server.db[0].dict, sc.cur_key);
            sdsfree(sc.cur_key);
            sc.cur_key = NULL;
        }
        if (de == NULL) de = slotCompactFirstInSlot(sc.cur_slot);
        slotCompactBegin(sc.cur_slot, slotCompactEvacuates(sc.cur_slot) ?
                         slotCompactEvacuate : slotCompactMove, 0);
        int n = 0;
        slotCompactAhead ahead;
        if (de) slotCompactAheadInit(&ahead, de);
        while (de) {
            slotCompactAheadStep(&ahead);
            slotCompactKey(de);
            de = slotCompactAheadNext(&ahead);
            if (de && (++n & 3) == 0 && elapsedUs(start) >= budget_us) break;
        }
        int slot = sc.target_slot;
        slotCompactEnd();
        if (de) {
            sc.cur_key = sdsdup(dictGetKey(de));
            timeout = 1;
        } else {
            slotCompactClearDirty(slot);
            /* Big keys it queued come next, before another slot. */
            timeout = slotCompactLaterStep(start, budget_us);
        }
        if (elapsedUs(start) >= budget_us) timeout = 1;
    }
    sc.compaction_usec += elapsedUs(start);
    return sc.dirty_slots || sc.later_key || listLength(sc.later) ||
           dictSize(sc.dirty_keys);
}

/* The timer event of the background cycle: one slice, then sleep long
 * enough to stay within slot-affinity-cpu. Deletes itself when idle. */
static int slotCompactTimerProc(struct aeEventLoop *el, long long id, void *data) {
    UNUSED(el); UNUSED(id); UNUSED(data);
    monotime start;
    uint64_t used;
    int more;

    if (!slotCompactRunning()) {
        slotCompactReset();
        sc.timer_id = -1;
        return AE_NOMORE;
    }
    /* slot-affinity-cpu 0: only explicit compaction (DEBUG SLOTCOMPACT, a
     * migration's prepare phase); the marks wait. */
    if (server.slot_affinity_cpu == 0 || hasActiveChildProcess() ||
        server.active_defrag_running) return 100;
    elapsedStart(&start);
    more = slotCompactStep(SLOTCOMPACT_SLICE_US);
    used = elapsedUs(start);
    if (!more) {
        sc.timer_id = -1;
        return AE_NOMORE;
    }
    long long pct = server.slot_affinity_cpu;
    long long sleep_ms = (long long)(used * (100 - pct) / pct + 999) / 1000;
    return sleep_ms < 1 ? 1 : (int)sleep_ms;
}
#else
/* Without Redis's jemalloc there is no defrag traversal: keys stay in the
 * general heap and there is nothing to do in the background. */
static void slotCompactMarkAllDirty(void) {}
static void slotCompactReset(void) {}
void slotCompactKeyModified(robj *key) { UNUSED(key); }
void slotCompactCommandStart(void) {}
sds slotCompactReplaceSds(robj *o, sds old, sds value, int take) {
    UNUSED(o);
    sdsfree(old);
    return take ? value : sdsdup(value);
}
int slotCompactPlaceBegin(robj *o) { UNUSED(o); return 0; }
void slotCompactPlaceEnd(robj *o, int placing) { UNUSED(o); UNUSED(placing); }
int slotCompactPlaceSuspend(void) { return -1; }
int slotCompactPlaceNear(const void *p) { UNUSED(p); return 0; }
void slotCompactPlaceNearEnd(int placing) { UNUSED(placing); }
void slotCompactPlaceResume(int arena) { UNUSED(arena); }
int slotCompactOverwriteString(dictEntry *de, robj *val) {
    UNUSED(de); UNUSED(val);
    return 0;
}
robj *slotCompactNewString(robj *key, robj *val) { UNUSED(key); UNUSED(val); return NULL; }
sds slotCompactDupKeyName(sds name, robj *val) { UNUSED(val); return sdsdup(name); }
void slotCompactLoadingEnded(void) {}
void slotCompactRequest(int slot) { UNUSED(slot); }
void slotCompactVisitFirst(int slot) { UNUSED(slot); }
int slotCompactSlotPending(int slot) { UNUSED(slot); return 0; }
int slotCompactStep(uint64_t budget_us) { UNUSED(budget_us); return 0; }
long long slotCompactSlotSync(int slot) { UNUSED(slot); return 0; }
int slotCompactKeyNow(dictEntry *de) { UNUSED(de); return 0; }
void slotCompactPin(int slot) { UNUSED(slot); }
void slotCompactUnpin(int slot) { UNUSED(slot); }
int slotCompactIsPinned(int slot) { UNUSED(slot); return 0; }
#endif

/* DEBUG SLOTCOMPACT CHECK's reply map (slotCompactCheckCommand says what
 * each field means). Takes ownership of the two sds, NULL for nil. */
static void slotCompactCheckReply(client *c, long long keys, long long allocs,
                                  long long live_allocs, long long misplaced,
                                  long long dead, long long unreached,
                                  sds first_unreached, sds problem) {
    addReplyMapLen(c, 8);
    addReplyBulkCString(c, "keys");
    addReplyLongLong(c, keys);
    addReplyBulkCString(c, "allocs");
    addReplyLongLong(c, allocs);
    addReplyBulkCString(c, "live_allocs");
    addReplyLongLong(c, live_allocs);
    addReplyBulkCString(c, "misplaced");
    addReplyLongLong(c, misplaced);
    addReplyBulkCString(c, "dead");
    addReplyLongLong(c, dead);
    addReplyBulkCString(c, "unreached");
    addReplyLongLong(c, unreached);
    addReplyBulkCString(c, "first_unreached");
    if (first_unreached) addReplyBulkSds(c, first_unreached);
    else addReplyNull(c);
    addReplyBulkCString(c, "problem");
    if (problem) addReplyBulkSds(c, problem);
    else addReplyNull(c);
}

#ifdef HAVE_DEFRAG
/* DEBUG SLOTCOMPACT CHECK: what the walk found. */
static struct {
    int slot;                       /* Slot of the key being walked. */
    long long allocs;               /* Its allocations in slot blocks. */
    long long misplaced;            /* ... in another slot's blocks. */
    long long dead;                 /* ... not a live allocation. */
    const void *bad;                /* The first bad one, for the reply. */
    int bad_arena;
    dict *reached;                  /* Every allocation walked, to find
                                     * live ones no key reaches. */
} chk;

/* A set of pointers (DEBUG SLOTCOMPACT CHECK). */
static uint64_t slotCompactPtrHash(const void *key) {
    return dictGenHashFunction(&key, sizeof(key));
}
static dictType slotCompactPtrSetType = {
    slotCompactPtrHash, NULL, NULL, NULL, NULL, NULL, NULL
};

/* activeDefragAlloc() target of DEBUG SLOTCOMPACT CHECK: nothing moves;
 * each allocation of the key that lies in the allocator's range must be a
 * live allocation of a block of the key's own slot's arena, or of an arena
 * no slot maps to (being emptied by relocation). A stale pointer into a
 * block (use after free) or a write placed in the wrong slot's arena is
 * found here, before a release of that block makes it a crash. */
static void *slotCompactCheckAlloc(void *ptr) {
    if (!slotAllocOwns(ptr)) return NULL;
    /* In another arena is misplaced if other slots' keys live there: an
     * arena no slot maps to holds what has yet to be relocated out of it
     * (a slot back in its group after a migration: "Slot groups"). */
    int s = slotAllocArenaOf(ptr), mixed;
    int misplaced = s != slotAllocSlotArena(chk.slot) && slotAllocArenaSlots(s, &mixed) > 0 &&
                    !mixed;
    chk.allocs++;
    dictAdd(chk.reached, ptr, NULL);
    if (!misplaced && slotAllocArenaLiveSize(s, ptr)) return NULL;
    if (!chk.misplaced && !chk.dead) { chk.bad = ptr; chk.bad_arena = s; }
    if (misplaced) chk.misplaced++;
    else chk.dead++;
    return NULL;
}

/* DEBUG SLOTCOMPACT CHECK
 * Walks every key (defrag's traversal, big keys included, nothing moved)
 * and replies a map: keys, allocs (allocations of keys in slot blocks),
 * live_allocs (the allocator's count: more than allocs means memory in
 * blocks no key reaches, e.g. a leak), misplaced, dead, and problem (the
 * first bad key, or nil). A test or an operator chasing a crash runs it
 * after a migration; it costs a full traversal of the keyspace. */
static void slotCompactCheckCommand(client *c) {
    long long keys = 0, misplaced = 0, dead = 0, allocs = 0, unreached = 0;
    sds problem = NULL, first_unreached = NULL;
    slotAllocStats st;
    dict *reached = dictCreate(&slotCompactPtrSetType);

    for (int j = 0; j < CLUSTER_SLOTS; j++) {
        for (dictEntry *de = slotCompactFirstInSlot(j); de; de = slotCompactNextInSlot(de)) {
            memset(&chk, 0, sizeof(chk));
            chk.slot = j;
            chk.reached = reached;
            slotCompactBegin(j, slotCompactCheckAlloc, 1);
            defragKey(&server.db[0], de);
            slotCompactEnd();
            /* Defrag leaves a small sorted set's dictEntries where they
             * are (not walked), but a placed ZADD puts new ones in the
             * slot's blocks: check them too. */
            robj *o = dictGetVal(de);
            if (o->type == OBJ_ZSET && o->encoding == OBJ_ENCODING_SKIPLIST) {
                dictIterator *di = dictGetIterator(((zset *)o->ptr)->dict);
                dictEntry *ze;
                while ((ze = dictNext(di)) != NULL)
                    if (!dictFind(reached, ze)) slotCompactCheckAlloc(ze);
                dictReleaseIterator(di);
            }
            keys++;
            allocs += chk.allocs;
            misplaced += chk.misplaced;
            dead += chk.dead;
            if (problem == NULL && (chk.misplaced || chk.dead)) {
                sds key = dictGetKey(de);
                problem = sdscatprintf(sdsempty(),
                    "key '%s' (slot %d, %s): %p is %s", key, j,
                    getObjectTypeName(dictGetVal(de)), chk.bad,
                    chk.misplaced ? "in another slot's blocks" : "not a live allocation");
                if (chk.misplaced) problem = sdscatprintf(problem, " (arena %d)", chk.bad_arena);
                serverLog(LL_WARNING, "DEBUG SLOTCOMPACT CHECK: %s", problem);
            }
        }
    }
    /* Live allocations of every arena's blocks that no key reached (each
     * arena once, whichever slots share it: slotalloc.c, "Slot groups"). */
    for (int j = 0; j < CLUSTER_SLOTS; j++) {
        slotAllocBlockInfo small[8], *bi = small;
        size_t cap = 8, nb = slotAllocArenaBlocks(j, bi, cap);
        if (nb > cap) {
            cap = nb;
            bi = zmalloc(sizeof(*bi) * cap);
            nb = slotAllocArenaBlocks(j, bi, cap);
        }
        if (nb > cap) nb = cap;     /* (A block added meanwhile: skipped.) */
        for (size_t b = 0; b < nb; b++) {
            size_t max = bi[b].live_allocs + 1;
            void **ptrs = zmalloc(sizeof(void *) * max);
            size_t n = slotAllocBlockAllocs(bi[b].addr, ptrs, max);
            if (n > max) n = max;   /* (Allocated meanwhile: skipped.) */
            for (size_t i = 0; i < n; i++) {
                if (dictFind(reached, ptrs[i])) continue;
                if (!unreached++) {
                    size_t sz = zmalloc_size(ptrs[i]);
                    first_unreached = sdscatprintf(sdsempty(),
                        "%p (arena %d, %zu bytes: ", ptrs[i], j, sz);
                    first_unreached = sdscatrepr(first_unreached, ptrs[i], sz < 48 ? sz : 48);
                    first_unreached = sdscat(first_unreached, ")");
                }
            }
            zfree(ptrs);
        }
        if (bi != small) zfree(bi);
    }
    dictRelease(reached);
    slotAllocGetStats(&st);
    slotCompactCheckReply(c, keys, allocs, (long long)st.live_allocs, misplaced, dead,
                          unreached, first_unreached, problem);
}
#endif

/* DEBUG SLOTCOMPACT <slot>|ALL|CHECK
 * Relocates the keys of one slot (or of all) into their slot's blocks now,
 * on the main thread, big keys included, and replies the number of keys
 * moved. The background cycle does the same in bounded slices. CHECK
 * verifies instead (slotCompactCheckCommand). */
void slotCompactDebugCommand(client *c) {
    if (!server.cluster_enabled) {
        addReplyError(c, "DEBUG SLOTCOMPACT needs cluster mode");
        return;
    }
    /* CHECK also verifies what migrations put in blocks on a node with
     * slot-affinity no (the allocator runs once a migration started it);
     * before that, no key has anything in blocks. */
    int check = !strcasecmp(c->argv[2]->ptr, "check");
    if (check && !slotCompactRunning()) {
        slotCompactCheckReply(c, (long long)dictSize(server.db[0].dict), 0, 0, 0, 0, 0,
                              NULL, NULL);
        return;
    }
    if (!check && !slotCompactEnabled()) {
        addReplyError(c, "slot-affinity is disabled");
        return;
    }
#ifndef HAVE_DEFRAG
    addReplyError(c, "slot compaction needs Redis's jemalloc (HAVE_DEFRAG)");
#else
    long long keys = 0, slot;
    monotime start;

    if (check) {
        slotCompactCheckCommand(c);
        return;
    } else if (!strcasecmp(c->argv[2]->ptr, "all")) {
        slot = -1;
    } else if (getLongLongFromObject(c->argv[2], &slot) != C_OK ||
               slot < 0 || slot >= CLUSTER_SLOTS)
    {
        addReplyError(c, "Invalid or out of range slot");
        return;
    }
    elapsedStart(&start);
    if (slot >= 0) {
        keys = slotCompactSlotNow((int)slot);
    } else {
        for (int j = 0; j < CLUSTER_SLOTS; j++)
            if ((*server.db[0].slots_to_keys).by_slot[j].count)
                keys += slotCompactSlotNow(j);
        /* Every key has just been visited: written keys still queued
         * would only send the cycle through them again. */
        dictEmpty(sc.dirty_keys, NULL);
    }
    sc.compaction_usec += elapsedUs(start);
    addReplyLongLong(c, keys);
#endif
}

/* ============================ CLUSTER SLOTBLOCKS ========================== */

#ifdef HAVE_DEFRAG
/* Walk everything key de owns with a target that moves nothing (a
 * counting one); returns whether it all lay in slot's blocks. */
static int slotCompactWalkKey(dictEntry *de, int slot, void *(*target)(void *)) {
    sc.count_all_in = 1;
    slotCompactBegin(slot, target, 1);
    defragKey(&server.db[0], de);
    slotCompactEnd();
    return sc.count_all_in;
}

/* What one key owns, counted by the walk that relocates it (defrag's
 * traversal with slotCompactCount as target): its name's sds, its robj
 * unless shared, and everything its value owns -- strings' sds, listpacks,
 * intsets, quicklist nodes and their listpacks, dicts with their tables,
 * entries, fields and values, skiplist nodes, stream rax nodes, listpacks,
 * consumer groups, consumers and pending entries, module values that
 * support defrag. Not counted: the key's dictEntry in the keyspace and its
 * expires entry (the keyspace's nodes, rebuilt by a migration's recipient).
 * Returns 1 if everything counted lies in the slot's blocks. */
static int slotBlocksKey(dictEntry *de, int slot, size_t *bytes, size_t *in_blocks,
                         size_t *allocs_in) {
    sc.count_bytes = sc.count_in_blocks = sc.count_allocs_in = 0;
    int all_in = slotCompactWalkKey(de, slot, slotCompactCount);
    *bytes += sc.count_bytes;
    *in_blocks += sc.count_in_blocks;
    *allocs_in += sc.count_allocs_in;
    return all_in;
}
#endif

/* A value object held elsewhere too (not a shared integer, which lies in
 * no block): a walk of two keys holding it would count it twice, and a
 * leftover of the same size could hide behind the extra count. */
static int slotCompactValueShared(dictEntry *de) {
    robj *o = dictGetVal(de);

    return o->refcount != 1 && o->refcount != OBJ_SHARED_REFCOUNT;
}

/* st: a slot's stats, read after a walk of its keys found allocs_in
 * allocations (bytes_in bytes) in its arena. If that arena is mixed
 * (slots mapped away from it while it held allocations: slotalloc.c,
 * "Slot groups"), the slot is its only one and every live allocation of it
 * is one the walk found, nothing of the slots that left is in it any more:
 * it is the slot's alone. The lazyfree thread only frees, and nothing else
 * allocates meanwhile (main thread), so equal counts leave no room for a
 * leftover; anything the walk cannot reach (a key being freed lazily, a
 * shared value counted twice, a detached block) keeps it mixed, to be
 * asked again. Returns 1 if it unmixed the arena. */
static int slotCompactUnmix(const slotAllocSlotStat *st, size_t allocs_in, size_t bytes_in) {
    if (!st->arena_mixed || st->arena_slots > 1 || st->detached_blocks ||
        allocs_in != st->live_allocs || bytes_in != st->used_bytes) return 0;
    slotAllocArenaUnmix(st->arena);
    return 1;
}

/* The same, walking the slot's keys for it (slotCompactIsolate, when no
 * arena id is free for the slot: the walk is the price of not refusing a
 * migration; that of CLUSTER SLOTBLOCKS, which walks them anyway). */
static int slotCompactUnmixByWalk(int slot) {
#ifdef HAVE_DEFRAG
    size_t bytes = 0, bytes_in = 0, allocs_in = 0;
    slotAllocSlotStat now;

    for (dictEntry *de = slotCompactFirstInSlot(slot); de != NULL;
         de = slotCompactNextInSlot(de)) {
        if (slotCompactValueShared(de)) return 0;
        slotBlocksKey(de, slot, &bytes, &bytes_in, &allocs_in);
    }
    slotAllocSlotStats(slot, &now);
    return slotCompactUnmix(&now, allocs_in, bytes_in);
#else
    UNUSED(slot);
    return 0;
#endif
}

/* Whether any allocation of a key of slot lies in the slot's arena (a walk
 * of its keys; slotCompactArenaOnlyUnit). 1 when it cannot tell. */
static int slotCompactSlotInArena(int slot) {
#ifdef HAVE_DEFRAG
    size_t bytes = 0, bytes_in = 0, allocs_in = 0;

    for (dictEntry *de = slotCompactFirstInSlot(slot); de != NULL && allocs_in == 0;
         de = slotCompactNextInSlot(de))
        slotBlocksKey(de, slot, &bytes, &bytes_in, &allocs_in);
    return allocs_in != 0;
#else
    UNUSED(slot);
    return 1;
#endif
}

/* See slotcompact.h. The walk of CLUSTER SLOTBLOCKS, without the sizes:
 * about a third of what freeing the key one allocation at a time costs.
 * A value object held elsewhere too (refcount above 1, not a shared
 * integer) is "not in blocks": an unlink without a free would leak that
 * reference. */
int slotCompactKeyInBlocks(dictEntry *de, int slot) {
#ifdef HAVE_DEFRAG
    if (!sc.initialized || slotCompactValueShared(de)) return 0;
    if ((sc.count_arena = slotAllocSlotArena(slot)) < 0) return 0;
    return slotCompactWalkKey(de, slot, slotCompactIsIn);
#else
    UNUSED(de);
    UNUSED(slot);
    return 0;
#endif
}

/* CLUSTER SLOTBLOCKS <slot>
 * Where the keys of one slot live: a map (flat array in RESP2) of
 *   blocks           the slot's active blocks
 *   block_bytes      their size
 *   keys             keys in the slot
 *   keys_in_blocks   keys everything of which lies in the slot's blocks
 *   bytes            usable bytes the slot's keys own (see slotBlocksKey)
 *   bytes_in_blocks  the part of 'bytes' in the slot's blocks
 * Called by clusterCommand (which checks cluster mode). */
void slotBlocksCommand(client *c) {
    long long slot;
    slotAllocSlotStat st;
    size_t keys = 0, keys_in = 0, bytes = 0, bytes_in = 0, allocs_in = 0;
    int shared = 0;

    if (getLongLongFromObject(c->argv[2], &slot) != C_OK ||
        slot < 0 || slot >= CLUSTER_SLOTS)
    {
        addReplyError(c, "Invalid or out of range slot");
        return;
    }
    dictEntry *de = slotCompactFirstInSlot(slot);
    for (; de != NULL; de = slotCompactNextInSlot(de)) {
        keys++;
#ifdef HAVE_DEFRAG
        keys_in += slotBlocksKey(de, (int)slot, &bytes, &bytes_in, &allocs_in);
#endif
        shared |= slotCompactValueShared(de);
    }
    memset(&st, 0, sizeof(st));
    st.arena = (int)slot;
    st.arena_slots = 1;
    if (sc.initialized) slotAllocSlotStats((int)slot, &st);
    /* blocks and block_bytes are those of the slot's arena, which the
     * arena_slots slots of its group share (slot-affinity-group-slots);
     * arena_mixed: it may hold leftovers of slots mapped away from it
     * (then a migration isolates its slots rather than ship it whole);
     * a slot alone in it whose keys are all it holds clears it. */
    if (sc.initialized && !shared && slotCompactUnmix(&st, allocs_in, bytes_in))
        st.arena_mixed = 0;
    addReplyMapLen(c, 9);
    addReplyBulkCString(c, "blocks");
    addReplyLongLong(c, st.blocks);
    addReplyBulkCString(c, "block_bytes");
    addReplyLongLong(c, st.block_bytes);
    addReplyBulkCString(c, "keys");
    addReplyLongLong(c, keys);
    addReplyBulkCString(c, "keys_in_blocks");
    addReplyLongLong(c, keys_in);
    addReplyBulkCString(c, "bytes");
    addReplyLongLong(c, bytes);
    addReplyBulkCString(c, "bytes_in_blocks");
    addReplyLongLong(c, bytes_in);
    addReplyBulkCString(c, "arena");
    addReplyLongLong(c, st.arena);
    addReplyBulkCString(c, "arena_slots");
    addReplyLongLong(c, st.arena_slots);
    addReplyBulkCString(c, "arena_mixed");
    addReplyLongLong(c, st.arena_mixed);
}
