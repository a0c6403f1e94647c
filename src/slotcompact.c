/* Slot affinity: the slot allocator (slotalloc.c) wired into Redis.
 *
 * In cluster mode with `slot-affinity yes`, the memory of the keys of a hash
 * slot is meant to live in blocks owned by that slot, so that the slot can
 * later be shipped as a few contiguous regions (DESIGN.md section 3). This
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
 * slot. Nothing allocates in blocks by itself: new keys are born in
 * jemalloc.
 *
 * Relocation ("slot compaction"). Keys get into their slot's blocks by
 * being moved on the main thread. We do not write a second traversal of
 * Redis objects: active defrag (defrag.c) already knows how to move each
 * allocation of a key and fix every pointer to it, and asks one function,
 * activeDefragAlloc(), where each copy goes. Our defrag patch lets that
 * target be plugged (activeDefragAllocTarget); while we compact slot S it
 * points at slotCompactMove(), which copies an allocation into S's arena
 * (unless it already is there) and frees the old one. We then call
 * defrag's own helpers on the key: activeDefragSds() for the key name and
 * activeDefragStringOb() for the value (robj, and its raw sds or embedded
 * string; it skips objects with refcount != 1, so shared objects and
 * shared integers stay where they are). The key name is shared with the
 * expires dict; like defragKey() we find that entry by pointer and hash
 * and fix its key, but we leave the expires dictEntry itself in jemalloc
 * (defragKey moves it; here it would put dict nodes into the slot's
 * blocks). dictEntries of the main dict stay in jemalloc too: the
 * recipient of a migration rebuilds them. For now only string keys are
 * relocated; a key of any other type is left exactly where it is and
 * counted as skipped.
 *
 * Ownership. In cluster mode a value cannot change slot (RENAME, COPY,
 * SMOVE... need both keys in one slot; MIGRATE/RESTORE build new objects),
 * so what lies in slot S's blocks belongs to keys of slot S, or to shared
 * objects never moved. Releasing a slot's blocks wholesale after a
 * migration relies on that; anything that breaks it must relocate first.
 *
 * Compaction here runs synchronously for DEBUG SLOTCOMPACT; the background
 * cycle within a CPU budget comes later. slotCompactCron() gives emptied
 * blocks back to the OS.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "server.h"
#include "cluster.h"
#include "slotalloc.h"
#include "slotcompact.h"

/* Defrag's helpers (defrag.c, compiled with HAVE_DEFRAG). */
#ifdef HAVE_DEFRAG
sds activeDefragSds(sds sdsptr);
extern void *(*activeDefragAllocTarget)(void *ptr);
#endif

static struct {
    int initialized;                /* Range reserved, zmalloc routes. */
    int target_slot;                /* Slot being compacted, or -1. */
    size_t moved_bytes;             /* Usable bytes moved by the current key. */
    long long relocated_keys;       /* Keys with at least one allocation moved. */
    long long relocated_bytes;      /* Usable bytes copied into blocks. */
    long long skipped_keys;         /* Keys of types not relocated yet. */
    long long compaction_usec;      /* Main thread time spent compacting. */
    mstime_t last_trim;             /* Last release of cached empty blocks. */
} sc = { .target_slot = -1 };

/* The slot allocator as zmalloc's foreign allocator. */
static const zmallocForeign slotCompactForeign = {
    .allocate = slotAllocMalloc,
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

/* Reserve the slot allocator's range and route zmalloc to it. Main thread,
 * at startup (initServer, cluster mode) or when CONFIG SET turns
 * slot-affinity on. Returns C_OK if the allocator is (already) running,
 * C_ERR when it is not: not in cluster mode, slot-affinity no, or the
 * range could not be reserved (logged; Redis then keeps every key in the
 * general heap). At startup, min-block larger than max-block is a
 * configuration error: the server exits, as for any invalid option. */
int slotCompactInit(void) {
    size_t len;
    void *start;

    if (sc.initialized) return C_OK;
    if (!server.cluster_enabled || !server.slot_affinity) return C_ERR;
    if (!slotCompactBlockSizesValid()) {
        serverLog(LL_WARNING, "slot-affinity-min-block (%zu) must not be "
            "larger than slot-affinity-max-block (%zu)",
            server.slot_affinity_min_block, server.slot_affinity_max_block);
        exit(1);
    }
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
    zmalloc_set_foreign(start, len, &slotCompactForeign);
    sc.initialized = 1;
    serverLog(LL_NOTICE, "slot-affinity: %zu bytes of address space reserved "
        "for slot blocks (blocks of %zu to %zu bytes)", len,
        server.slot_affinity_min_block, server.slot_affinity_max_block);
    return C_OK;
}

/* CONFIG SET slot-affinity: turning it on in cluster mode starts the
 * allocator if it was not running. Turning it off stops relocation only;
 * keys already in blocks stay there and keep working. */
int slotCompactApplyAffinity(const char **err) {
    if (!server.slot_affinity || !server.cluster_enabled || sc.initialized)
        return 1;
    if (!slotCompactBlockSizesValid()) {
        *err = "slot-affinity-min-block is larger than slot-affinity-max-block";
        return 0;
    }
    if (slotCompactInit() == C_ERR) {
        *err = "cannot reserve the slot allocator's address space (see the log)";
        return 0;
    }
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

int slotCompactEnabled(void) {
    return sc.initialized && server.slot_affinity && server.cluster_enabled;
}

/* ============================ Housekeeping ================================ */

/* serverCron, main thread. The allocator keeps the last emptied block of
 * each slot committed so that a slot growing and shrinking around a block
 * boundary does not map and unmap on every key; after a flush that would
 * pin up to one block per slot. At most once a second, release them all. */
#define SLOTCOMPACT_TRIM_PERIOD_MS 1000
void slotCompactCron(void) {
    slotAllocStats st;

    if (!sc.initialized || server.mstime - sc.last_trim < SLOTCOMPACT_TRIM_PERIOD_MS)
        return;
    sc.last_trim = server.mstime;
    slotAllocGetStats(&st);
    if (st.cached_empty_blocks) slotAllocTrim();
}

/* ============================ INFO ======================================== */

/* The "# Slotalloc" section. slotalloc_reserved_bytes is memory committed
 * as blocks; slotalloc_range_bytes the virtual range (slot-affinity-reserve);
 * slotalloc_used_bytes the usable sizes of live allocations in blocks (part
 * of used_memory). */
sds slotCompactGenInfo(sds info) {
    slotAllocStats st;

    memset(&st, 0, sizeof(st));
    if (sc.initialized) slotAllocGetStats(&st);
    return sdscatprintf(info,
        "# Slotalloc\r\n"
        "slotalloc_enabled:%d\r\n"
        "slotalloc_blocks:%zu\r\n"
        "slotalloc_huge_blocks:%zu\r\n"
        "slotalloc_cached_empty_blocks:%zu\r\n"
        "slotalloc_reserved_bytes:%zu\r\n"
        "slotalloc_used_bytes:%zu\r\n"
        "slotalloc_free_bytes:%zu\r\n"
        "slotalloc_live_allocs:%zu\r\n"
        "slotalloc_range_bytes:%zu\r\n"
        "slotalloc_metadata_bytes:%zu\r\n"
        "slotalloc_relocated_keys:%lld\r\n"
        "slotalloc_relocated_bytes:%lld\r\n"
        "slotalloc_skipped_keys:%lld\r\n"
        "slotalloc_compaction_usec:%lld\r\n",
        slotCompactEnabled(), st.blocks, st.huge_blocks, st.cached_empty_blocks,
        st.reserved_bytes, st.used_bytes, st.free_bytes, st.live_allocs,
        st.range_bytes, st.metadata_bytes, sc.relocated_keys,
        sc.relocated_bytes, sc.skipped_keys, sc.compaction_usec);
}

/* ============================ Relocation ================================== */

#define slotCompactNextInSlot(de) \
    (((clusterDictEntryMetadata *)dictMetadata(de))->next)

#ifdef HAVE_DEFRAG
/* activeDefragAlloc() target while slot sc.target_slot is compacted: same
 * contract (NULL: not moved; otherwise the new copy, the old one freed).
 * Allocations already in the slot's blocks stay; when the slot's arena has
 * no room the allocation stays too. */
static void *slotCompactMove(void *ptr) {
    size_t size, usable;
    void *newptr;

    if (slotAllocSlotOf(ptr) == sc.target_slot) return NULL;
    size = zmalloc_size(ptr);
    newptr = ztrymalloc_foreign(sc.target_slot, size, &usable);
    if (newptr == NULL) return NULL;
    memcpy(newptr, ptr, size);
    zfree(ptr);
    sc.moved_bytes += usable;
    return newptr;
}

/* Move one key of the slot being compacted into its blocks. Returns 1 if
 * anything moved, 0 if nothing had to (or could), -1 if the key's type is
 * not relocated yet (left untouched). */
static int slotCompactKey(redisDb *db, dictEntry *de) {
    robj *ob = dictGetVal(de), *newob;
    sds keysds = dictGetKey(de), newsds;
    long moved = 0;

    if (ob->type != OBJ_STRING) return -1;
    if ((newsds = activeDefragSds(keysds)) != NULL) {
        de->key = newsds;
        moved++;
        /* The expires dict shares the key sds: fix its entry's key. The old
         * pointer is only compared, never read. */
        if (dictSize(db->expires)) {
            uint64_t hash = dictGetHash(db->dict, newsds);
            dictEntry **ref = dictFindEntryRefByPtrAndHash(db->expires, keysds, hash);
            if (ref) (*ref)->key = newsds;
        }
    }
    if ((newob = activeDefragStringOb(ob, &moved)) != NULL) de->v.val = newob;
    return moved != 0;
}

/* Relocate the keys of one slot. Returns the number of keys moved. */
static long long slotCompactSlot(int slot) {
    dictEntry *de = (*server.db[0].slots_to_keys).by_slot[slot].head;
    long long keys = 0;

    sc.target_slot = slot;
    activeDefragAllocTarget = slotCompactMove;
    for (; de != NULL; de = slotCompactNextInSlot(de)) {
        int ret;

        sc.moved_bytes = 0;
        ret = slotCompactKey(&server.db[0], de);
        if (ret == 1) keys++;
        else if (ret == -1) sc.skipped_keys++;
        sc.relocated_bytes += sc.moved_bytes;
    }
    activeDefragAllocTarget = NULL;
    sc.target_slot = -1;
    sc.relocated_keys += keys;
    return keys;
}
#endif

/* DEBUG SLOTCOMPACT <slot>|ALL
 * Relocates the keys of one slot (or of all) into their slot's blocks now,
 * on the main thread, and replies the number of keys moved. */
void slotCompactDebugCommand(client *c) {
    if (!server.cluster_enabled) {
        addReplyError(c, "DEBUG SLOTCOMPACT needs cluster mode");
        return;
    }
    if (!slotCompactEnabled()) {
        addReplyError(c, "slot-affinity is disabled");
        return;
    }
#ifndef HAVE_DEFRAG
    addReplyError(c, "slot compaction needs Redis's jemalloc (HAVE_DEFRAG)");
#else
    long long keys = 0, slot;
    monotime start;

    if (!strcasecmp(c->argv[2]->ptr, "all")) {
        slot = -1;
    } else if (getLongLongFromObject(c->argv[2], &slot) != C_OK ||
               slot < 0 || slot >= CLUSTER_SLOTS) {
        addReplyError(c, "Invalid or out of range slot");
        return;
    }
    elapsedStart(&start);
    if (slot >= 0) {
        keys = slotCompactSlot((int)slot);
    } else {
        for (int j = 0; j < CLUSTER_SLOTS; j++)
            if ((*server.db[0].slots_to_keys).by_slot[j].count)
                keys += slotCompactSlot(j);
    }
    sc.compaction_usec += elapsedUs(start);
    addReplyLongLong(c, keys);
#endif
}

/* ============================ CLUSTER SLOTBLOCKS ========================== */

/* Add the usable size of one allocation owned by a key to *bytes, and to
 * *in_blocks if it lies in the slot's blocks. Returns 1 if it does. */
static int slotBlocksCount(const void *ptr, int slot, size_t *bytes,
                           size_t *in_blocks) {
    size_t n = zmalloc_size(ptr);

    *bytes += n;
    if (slotAllocSlotOf(ptr) != slot) return 0;
    *in_blocks += n;
    return 1;
}

/* What one key owns: its name's sds, its robj (unless shared) and, for raw
 * strings, the value's sds (embstr values are inside the robj, integers
 * have none). For other types only the top-level allocation is counted:
 * the whole value for listpack and intset encodings, the header struct for
 * quicklists, dicts, skiplists and streams (their nodes are not walked
 * yet), nothing for module values. Returns 1 if everything counted lies in
 * the slot's blocks. */
static int slotBlocksKey(dictEntry *de, int slot, size_t *bytes, size_t *in_blocks) {
    robj *ob = dictGetVal(de);
    sds key = dictGetKey(de);
    int all = slotBlocksCount(sdsAllocPtr(key), slot, bytes, in_blocks);

    if (ob->refcount == OBJ_SHARED_REFCOUNT) return all;
    all &= slotBlocksCount(ob, slot, bytes, in_blocks);
    switch (ob->type) {
    case OBJ_STRING:
        if (ob->encoding == OBJ_ENCODING_RAW)
            all &= slotBlocksCount(sdsAllocPtr(ob->ptr), slot, bytes, in_blocks);
        break;
    case OBJ_MODULE:
        break;
    default:
        if (ob->ptr) all &= slotBlocksCount(ob->ptr, slot, bytes, in_blocks);
        break;
    }
    return all;
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
    size_t keys = 0, keys_in = 0, bytes = 0, bytes_in = 0;

    if (getLongLongFromObject(c->argv[2], &slot) != C_OK ||
        slot < 0 || slot >= CLUSTER_SLOTS)
    {
        addReplyError(c, "Invalid or out of range slot");
        return;
    }
    memset(&st, 0, sizeof(st));
    if (sc.initialized) slotAllocSlotStats((int)slot, &st);
    dictEntry *de = (*server.db[0].slots_to_keys).by_slot[slot].head;
    for (; de != NULL; de = slotCompactNextInSlot(de)) {
        keys++;
        keys_in += slotBlocksKey(de, (int)slot, &bytes, &bytes_in);
    }
    addReplyMapLen(c, 6);
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
}
