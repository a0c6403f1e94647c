/* What a slot migration puts in the blocks, and how the recipient adopts it.
 *
 * A migration ships a slot as the slot's blocks (slotalloc.c), copied byte
 * for byte into blocks of the recipient that have the same sizes but other
 * addresses (docs/DESIGN.md, "Slot blocks", "Integrity"). This file holds the two ends of
 * that copy that know about Redis objects:
 *
 * Donor, main thread: blkBuildManifest(). After slot compaction put every
 * allocation of the slot's keys into its blocks, one record per key says
 * where its key sds and its value are, and its TTL, as donor addresses.
 * Values whose memory is flat or simply linked travel as they are
 * (BLK_PATH_ZERO_COPY: strings of every encoding, listpacks, intsets,
 * quicklists). Hashes and sets encoded as hash tables travel as they are
 * too (BLK_PATH_DICT): robj, dict, table, entries and strings; only the
 * buckets are refilled on the recipient, whose hash seed differs (a table
 * being rehashed is finished first). The others (skiplists, streams,
 * module values) travel as a DUMP payload that the donor writes into the
 * slot's blocks too (BLK_PATH_DUMP); small shared integers, which live
 * outside the blocks, travel as their value (BLK_PATH_INT). The manifest
 * is itself one allocation in the blocks.
 *
 * Recipient: blkPatchSlot() trusts nothing it reads. Every donor address
 * must fall inside a received block (blkTr) and be the start of a live
 * allocation of the slot (slotAllocLiveSize, from the adopted blocks' own
 * validated bitmaps); every sds header, robj, listpack (deep check, no
 * duplicate fields), intset, quicklist node and LZF payload is checked
 * against the allocation's usable size before anything is used; every key
 * must hash to the slot and appear once; no allocation may belong to two
 * keys (an ownership bitmap per block, which also stops cycles); DUMP
 * payloads go through verifyDumpPayload() and rdbLoadObject()
 * like RESTORE. Pointers are rewritten in place (donor address -> local
 * address) and the keys are returned, not yet linked: on any error the
 * caller drops the slot's blocks wholesale and nothing of the slot is
 * visible. blkLinkAdopted() then links keys on the main thread, a bounded
 * number per call, without copying them (the keyspace's dictEntry is the
 * only new allocation). blkSweepGarbage() frees every allocation of the
 * received blocks that no adopted key owns.
 *
 * Blocks travel between hosts of the same architecture and byte order,
 * running the same Redis build (the slot allocator's header checks the
 * page size and size classes).
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "server.h"
#include "cluster.h"
#include "slotalloc.h"
#include "slotcompact.h"
#include "slotblocks.h"
#include "intset.h"
#include "lzf.h"

#include <math.h>
/* Debian's libxxhash (rdmamig.mk links it). On x86-64 its _dispatch entry
 * points pick the widest vector unit of the CPU at run time (AVX2: 8-9
 * GB/s here, against 6 for the SSE2 code a portable build inlines). */
#define XXH_STATIC_LINKING_ONLY     /* XXH3_state_t on the stack. */
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#define blkXXH3Update XXH3_64bits_update_dispatch
#else
#define blkXXH3Update XXH3_64bits_update
#endif

int lpPairsValidateIntegrityAndDups(unsigned char *lp, size_t size, int deep);
unsigned int countKeysInSlot(unsigned int hashslot);
void createDumpPayload(rio *payload, robj *o, robj *key, int dbid);
unsigned int delKeysInSlot(unsigned int hashslot);

/* Keys seen in one adoption: sds in the received blocks, not owned. */
static dictType blkSeenDictType = {
    dictSdsHash, NULL, NULL, dictSdsKeyCompare, NULL, NULL, NULL
};

#define BLK_MANIFEST_MAGIC 0x524d4d46u  /* "RMMF" */
#define BLK_MANIFEST_VERSION 2

/* One allocation in the blocks: fixed layout, host byte order. */
typedef struct blkManifestHeader {
    uint32_t magic;
    uint16_t version;
    uint16_t slot;
    uint64_t nkeys;
} blkManifestHeader;

typedef struct blkKeyRec {
    uint64_t key;       /* Donor address of the key's sds (its buf). */
    uint64_t val;       /* ZERO_COPY: robj address; DUMP: payload address;
                         * INT: the integer. */
    uint64_t len;       /* DUMP: payload length. */
    int64_t expire;     /* Unix ms, -1: none. */
    uint32_t path;
    uint32_t reserved;
} blkKeyRec;

/* ============================ Donor ======================================= */

/* Whether every allocation of o lies in the slot's blocks, with nothing in
 * it the recipient could not take as is. */
static int blkZeroCopyable(robj *o, int slot) {
    if (o->refcount != 1) return 0;
    if (o->type == OBJ_LIST) {
        quicklist *ql = o->ptr;
        int arena = slotAllocSlotArena(slot);
        if (arena < 0 || o->encoding != OBJ_ENCODING_QUICKLIST || slotAllocArenaOf(o) != arena ||
            slotAllocArenaOf(ql) != arena || ql->bookmark_count) return 0;
        for (quicklistNode *n = ql->head; n; n = n->next)
            if (slotAllocArenaOf(n) != arena || slotAllocArenaOf(n->entry) != arena) return 0;
        return 1;
    }
    return slotCompactValueInSlot(o, slot);
}

/* Whether a value's encoding can travel as it is (if it lies in the
 * blocks). */
static int blkFlatEncoding(robj *o) {
    switch (o->type) {
    case OBJ_STRING: return 1;
    case OBJ_LIST: return o->encoding == OBJ_ENCODING_QUICKLIST;
    case OBJ_SET: return o->encoding == OBJ_ENCODING_INTSET;
    case OBJ_HASH:
    case OBJ_ZSET: return o->encoding == OBJ_ENCODING_LISTPACK;
    default: return 0;
    }
}

/* Whether a value is a hash table (hash or set) that can travel as it is
 * (BLK_PATH_DICT) if it lies in the blocks. */
static int blkHashTable(robj *o) {
    return o->refcount == 1 && o->encoding == OBJ_ENCODING_HT &&
           (o->type == OBJ_HASH || o->type == OBJ_SET) && dictSize((dict *)o->ptr) != 0;
}

/* BLK_PATH_DICT: whether the robj, the dict, its table, every entry and
 * every string of a hash table lie in the slot's blocks. The recipient
 * takes them all as they are and only refills the buckets (tables and their
 * hash seeds are per process), so a table being rehashed is first finished
 * here: its two tables would be one more thing to check there, and a read
 * of the frozen key must not move entries under the transfer. */
static int blkDictInSlot(robj *o, int slot) {
    dict *d = o->ptr;
    int arena = slotAllocSlotArena(slot);

    if (arena < 0 || !blkHashTable(o) || slotAllocArenaOf(o) != arena ||
        slotAllocArenaOf(d) != arena)
        return 0;
    if (dictIsRehashing(d)) {
        if (d->pauserehash) return 0;
        while (dictRehash(d, 1000));
    }
    if (slotAllocArenaOf(d->ht_table[0]) != arena) return 0;
    /* The entries are independent cache misses: start them all at once. */
    for (unsigned long b = 0; b < DICTHT_SIZE(d->ht_size_exp[0]); b++)
        if (d->ht_table[0][b]) __builtin_prefetch(d->ht_table[0][b]);
    for (unsigned long b = 0; b < DICTHT_SIZE(d->ht_size_exp[0]); b++) {
        for (dictEntry *de = d->ht_table[0][b]; de; de = de->next) {
            /* An sds points inside its own allocation, which lies in one
             * block: the string itself need not be read (its header was a
             * cache miss per field and value). */
            if (slotAllocArenaOf(de) != arena ||
                slotAllocArenaOf(dictGetKey(de)) != arena ||
                (o->type == OBJ_HASH && slotAllocArenaOf(dictGetVal(de)) != arena))
                return 0;
        }
    }
    return 1;
}

/* Whether o can travel as it is: *zero_copy for a flat value, *table for a
 * hash table, when they lie in the slot's blocks. Returns 0 if o could
 * travel so but does not lie in the blocks (slot compaction can fix it), 1
 * otherwise. */
static int blkTravelsAsIs(robj *o, int slot, int *zero_copy, int *table) {
    *zero_copy = *table = 0;
    if (o->refcount == 1 && blkFlatEncoding(o))
        return *zero_copy = blkZeroCopyable(o, slot);
    if (blkHashTable(o)) return *table = blkDictInSlot(o, slot);
    return 1;
}

/* Write the DUMP payload of a value into the slot's blocks. */
static void *blkDumpIntoSlot(int slot, robj *key, robj *o, size_t *len) {
    rio payload;
    void *p;

    createDumpPayload(&payload, o, key, 0);
    *len = sdslen(payload.io.buffer.ptr);
    p = ztrymalloc_foreign(slotAllocSlotArena(slot), *len, NULL);
    if (p) memcpy(p, payload.io.buffer.ptr, *len);
    sdsfree(payload.io.buffer.ptr);
    return p;
}

/* Build the manifest of a slot whose keys are in its blocks (compact the
 * slot first), in steps: blkManifestBegin() allocates it, each
 * blkManifestStep() writes records until its time budget is used (1: more
 * to do, 0: done, -1: error, the manifest freed). Main thread; nothing may
 * write the slot's keys, add or remove one, until the blocks are copied
 * and blkFreeManifest() is called. The position is kept as the next key's
 * name (dictEntries may be moved by active defrag between steps; names in
 * slot blocks are not). */
int blkManifestBegin(int slot, blkManifest *m, sds *err) {
    dictEntry *de = (*server.db[0].slots_to_keys).by_slot[slot].head;
    size_t n = (*server.db[0].slots_to_keys).by_slot[slot].count;
    size_t bytes = sizeof(blkManifestHeader) + n * sizeof(blkKeyRec);
    blkManifestHeader *h;

    memset(m, 0, sizeof(*m));
    m->slot = slot;
    if ((h = ztrymalloc_foreign(slotAllocSlotArena(slot), bytes, NULL)) == NULL) {
        *err = sdscatprintf(sdsempty(), "no room in the slot allocator for the "
            "manifest of slot %d (%zu bytes)", slot, bytes);
        return C_ERR;
    }
    h->magic = BLK_MANIFEST_MAGIC;
    h->version = BLK_MANIFEST_VERSION;
    h->slot = (uint16_t)slot;
    h->nkeys = n;
    m->addr = h;
    m->capacity = n;
    m->next = de ? dictGetKey(de) : NULL;
    return C_OK;
}

int blkManifestStep(blkManifest *m, uint64_t budget_us, sds *err) {
    blkManifestHeader *h = m->addr;
    blkKeyRec *rec = (blkKeyRec *)(h + 1);
    int slot = m->slot;
    size_t i = m->nkeys, first = m->nkeys;
    dictEntry *de = NULL;
    monotime start;

    elapsedStart(&start);
    if (m->next && (de = dictFind(server.db[0].dict, m->next)) == NULL) {
        *err = sdscatprintf(sdsempty(), "slot %d changed while its manifest "
            "was being built", slot);
        goto fail;
    }
    for (; de; de = blkNextInSlot(de), i++) {
        sds key = dictGetKey(de);
        robj *o = dictGetVal(de);
        blkKeyRec *r = &rec[i];
        robj keyobj;

        /* The next key's entry was prefetched one key ago: prefetch its
         * value (and its dict, for a hash table, one key later), and the
         * entry after it. */
        dictEntry *n1 = blkNextInSlot(de);
        if (n1) {
            robj *o1 = dictGetVal(n1);
            __builtin_prefetch(o1);
            dictEntry *n2 = blkNextInSlot(n1);
            if (n2) __builtin_prefetch(n2);
        }
        if (o->encoding == OBJ_ENCODING_HT) __builtin_prefetch(o->ptr);

        if (i >= m->capacity) {
            *err = sdscatprintf(sdsempty(), "slot %d gained keys while its "
                "manifest was being built", slot);
            goto fail;
        }
        if (i > first && (i & 15) == 0 && elapsedUs(start) >= budget_us) break;
        /* A straggler background compaction has not visited: move it now
         * (once), so its key is in the blocks and a flat value or a hash
         * table travels without serialization. */
        int zero_copy, table;
        if (slotAllocArenaOf(sdsAllocPtr(key)) != slotAllocSlotArena(slot) ||
            blkTravelsAsIs(o, slot, &zero_copy, &table) == 0) {
            slotCompactKeyNow(de);
            key = dictGetKey(de);
            o = dictGetVal(de);
            blkTravelsAsIs(o, slot, &zero_copy, &table);
        }
        memset(r, 0, sizeof(*r));
        r->key = (uintptr_t)key;
        initStaticStringObject(keyobj, key);
        r->expire = getExpire(&server.db[0], &keyobj);
        if (slotAllocArenaOf(sdsAllocPtr(key)) != slotAllocSlotArena(slot)) {
            *err = sdscatprintf(sdsempty(), "key '%s' of slot %d is not in the "
                "slot's blocks (compact the slot first)", key, slot);
            goto fail;
        }
        if (o->refcount == OBJ_SHARED_REFCOUNT && o->type == OBJ_STRING &&
            o->encoding == OBJ_ENCODING_INT) {
            r->path = BLK_PATH_INT;
            r->val = (uint64_t)(long)o->ptr;
            m->keys_zero_copy++;
        } else if (zero_copy) {
            r->path = BLK_PATH_ZERO_COPY;
            r->val = (uintptr_t)o;
            m->keys_zero_copy++;
        } else if (table) {
            r->path = BLK_PATH_DICT;
            r->val = (uintptr_t)o;
            r->len = dictSize((dict *)o->ptr);
            m->keys_zero_copy++;
            m->keys_rebuilt++;
        } else {
            size_t len;
            void *p;

            if ((p = blkDumpIntoSlot(slot, &keyobj, o, &len)) == NULL) {
                *err = sdscatprintf(sdsempty(), "no room in the slot allocator "
                    "for the payload of key '%s' of slot %d", key, slot);
                goto fail;
            }
            r->path = BLK_PATH_DUMP;
            r->val = (uintptr_t)p;
            r->len = len;
            m->keys_serialized++;
            m->payload_bytes += len;
        }
        m->nkeys = i + 1;
    }
    m->next = de ? dictGetKey(de) : NULL;
    if (de) return 1;
    if (m->nkeys != m->capacity) {
        *err = sdscatprintf(sdsempty(), "slot %d lost keys while its manifest "
            "was being built", slot);
        goto fail;
    }
    return 0;
fail:
    blkFreeManifest(m);
    m->nkeys = 0;
    return -1;
}

/* The whole manifest at once (DEBUG SLOTREPLANT). */
int blkBuildManifest(int slot, blkManifest *m, sds *err) {
    if (blkManifestBegin(slot, m, err) == C_ERR) return C_ERR;
    return blkManifestStep(m, UINT64_MAX, err) == 0 ? C_OK : C_ERR;
}

/* Whether two manifests of a slot say the same: the same keys in the same
 * order, at the same addresses, with the same values, paths and TTLs (DUMP
 * payloads compared byte for byte: they are copies). A check for tests:
 * a manifest built while writes flowed, and kept, must be the one a
 * fresh build gives. */
int blkManifestSame(blkManifest *a, blkManifest *b) {
    blkManifestHeader *ha = a->addr, *hb = b->addr;

    if (a->nkeys != b->nkeys || ha->nkeys != hb->nkeys) return 0;
    blkKeyRec *ra = (blkKeyRec *)(ha + 1), *rb = (blkKeyRec *)(hb + 1);
    for (size_t i = 0; i < a->nkeys; i++) {
        if (ra[i].key != rb[i].key || ra[i].path != rb[i].path ||
            ra[i].len != rb[i].len || ra[i].expire != rb[i].expire) return 0;
        if (ra[i].path != BLK_PATH_DUMP) {
            if (ra[i].val != rb[i].val) return 0;
        } else if (memcmp((void *)(uintptr_t)ra[i].val, (void *)(uintptr_t)rb[i].val,
                          ra[i].len) != 0) {
            return 0;
        }
    }
    return 1;
}

/* Free the manifest and the payloads it points to (donor side, after the
 * copy or on abort). */
void blkFreeManifest(blkManifest *m) {
    blkManifestHeader *h = m->addr;

    if (!h) return;
    blkKeyRec *rec = (blkKeyRec *)(h + 1);
    for (size_t i = 0; i < m->nkeys; i++)
        if (rec[i].path == BLK_PATH_DUMP) zfree((void *)(uintptr_t)rec[i].val);
    zfree(h);
    m->addr = NULL;
}

/* ============================ Recipient =================================== */

/* A received block by its local address (blkKeep's lookup). */
typedef struct blkLocalIdx {
    char *local;
    size_t size;
    size_t block;               /* Index in the map. */
} blkLocalIdx;

typedef struct blkPatchCtx {
    int slot;
    blkMap *map;           /* Sorted by donor address. */
    size_t nmap;
    struct blkLocalIdx *bylocal;/* The blocks by local address. */
    blkAdopted *out;
    uint64_t **owned;           /* out's ownership bitmaps, or its unit's. */
    blkMap *last;               /* blkBlockOf's last find. */
    sds *err;
    const char *why;            /* What the last failed check was. */
} blkPatchCtx;

#define blkBad(ctx, msg) do { (ctx)->why = (msg); return NULL; } while (0)

#define blkFail(ctx, ...) do { \
    *(ctx)->err = sdscatprintf(sdsempty(), __VA_ARGS__); \
    return 0; \
} while (0)

uint64_t blkSumRanges(const void *block, const slotAllocRangeInfo *r, size_t n) {
    XXH3_state_t st;

    XXH3_INITSTATE(&st);
    XXH3_64bits_reset(&st);
    for (size_t i = 0; i < n; i++)
        blkXXH3Update(&st, (const char *)block + r[i].offset, r[i].len);
    return XXH3_64bits_digest(&st);
}

int blkImageSum(void *block, size_t size, uint64_t *sum) {
    slotAllocRangeInfo stack[64], *r = stack;
    size_t n = slotAllocImageUsedRanges(block, size, r, 64);

    if (n == 0) return -1;
    if (n > 64) {
        r = zmalloc(sizeof(*r) * n);
        slotAllocImageUsedRanges(block, size, r, n);
    }
    *sum = blkSumRanges(block, r, n);
    if (r != stack) zfree(r);
    return 0;
}

/* Adopt one received block into the slot's arena (slotAllocAdoptBlock) and
 * account its live allocations in used_memory: zmalloc never handed them
 * out here, but their frees go through zfree. Nothing else may allocate or
 * free in the slot meanwhile (the slot is being imported: no keys). */
int blkAdoptBlock(int slot, void *addr) {
    slotAllocSlotStat before, after;

    slotAllocSlotStats(slot, &before);
    if (slotAllocAdoptBlock(slot, addr) == -1) return -1;
    slotAllocSlotStats(slot, &after);
    if (after.used_bytes > before.used_bytes)
        zmalloc_foreign_adopted(after.used_bytes - before.used_bytes);
    return 0;
}

/* The received block holding a donor address, or NULL (the map is sorted
 * by donor address); blkTr: the local address, or NULL. A key's
 * allocations are mostly in one block, so the last block found is tried
 * first. */
static blkMap *blkBlockOf(blkPatchCtx *ctx, uint64_t addr) {
    size_t lo = 0, hi = ctx->nmap;
    blkMap *b = ctx->last;

    if (b && addr >= b->donor && addr - b->donor < b->size) return b;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        b = &ctx->map[mid];
        if (addr < b->donor) hi = mid;
        else if (addr - b->donor >= b->size) lo = mid + 1;
        else return ctx->last = b;
    }
    return NULL;
}

static char *blkTr(blkPatchCtx *ctx, uint64_t addr) {
    blkMap *b = blkBlockOf(ctx, addr);
    return b ? b->local + (addr - b->donor) : NULL;
}

/* The size of a block's ownership bitmap (blkAdopted.owned): one bit per
 * allocator granule. */
static size_t blkOwnedBytes(size_t block_size) {
    return (block_size / SLOTALLOC_GRANULE + 63) / 64 * sizeof(uint64_t);
}

/* Record an allocation (a local address inside a received block) as owned
 * by an adopted key. Returns 0 if some key owns it already: one free would
 * corrupt the other, and a walk that comes back to it is going round in a
 * cycle. */
static int blkKeep(blkPatchCtx *ctx, void *p) {
    size_t lo = 0, hi = ctx->nmap, b = SIZE_MAX;
    char *c = p, *local = NULL;
    blkMap *m = ctx->last;

    /* p was mostly just translated in the last block found. */
    if (m && c >= m->local && (size_t)(c - m->local) < m->size) {
        b = (size_t)(m - ctx->map);
        local = m->local;
    }
    while (b == SIZE_MAX && lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < ctx->bylocal[mid].local) hi = mid;
        else if ((size_t)(c - ctx->bylocal[mid].local) >= ctx->bylocal[mid].size) lo = mid + 1;
        else b = ctx->bylocal[mid].block, local = ctx->bylocal[mid].local;
    }
    if (b == SIZE_MAX) serverPanic("blkKeep: %p is in no received block", p);

    size_t g = (size_t)(c - local) / SLOTALLOC_GRANULE;
    uint64_t bit = 1ULL << (g & 63);
    if (ctx->owned[b][g >> 6] & bit) {
        ctx->out->owned_twice = 1;
        return 0;
    }
    ctx->owned[b][g >> 6] |= bit;
    return 1;
}

/* A live allocation of the slot at donor address addr, at least min bytes:
 * its local address and usable size, or NULL. */
static char *blkAlloc(blkPatchCtx *ctx, uint64_t addr, size_t min, size_t *usable) {
    char *p = blkTr(ctx, addr);
    size_t u;

    if (!p || (u = slotAllocLiveSize(ctx->slot, p)) < min || u == 0) return NULL;
    if (usable) *usable = u;
    return p;
}

static size_t blkSdsHdrSize(int type) {
    switch (type) {
    case SDS_TYPE_5: return sizeof(struct sdshdr5);
    case SDS_TYPE_8: return sizeof(struct sdshdr8);
    case SDS_TYPE_16: return sizeof(struct sdshdr16);
    case SDS_TYPE_32: return sizeof(struct sdshdr32);
    case SDS_TYPE_64: return sizeof(struct sdshdr64);
    }
    return 0;
}

/* A whole allocation holding one sds, at donor address addr (the sds
 * pointer, past its header). Returns the local sds or NULL. The flags byte
 * before the pointer names the header type; the header must lie in the
 * same block and start a live allocation of the slot. */
static sds blkSds(blkPatchCtx *ctx, uint64_t addr) {
    blkMap *b = blkBlockOf(ctx, addr);
    size_t off, hdr, usable, len, alloc;
    int type;
    sds s;

    if (!b || (off = addr - b->donor) == 0) return NULL;
    s = b->local + off;
    type = ((unsigned char)s[-1]) & SDS_TYPE_MASK;
    if ((hdr = blkSdsHdrSize(type)) == 0 || hdr > off ||
        (usable = slotAllocLiveSize(ctx->slot, s - hdr)) == 0) return NULL;
    len = sdslen(s);
    alloc = type == SDS_TYPE_5 ? len : sdsalloc(s);
    if (len > alloc || hdr + alloc + 1 > usable || s[len] != '\0') return NULL;
    blkKeep(ctx, s - hdr);
    return s;
}

/* A quicklist: its struct, every node, every node's listpack or LZF data.
 * Rewrites the links to local addresses. */
static quicklist *blkQuicklist(blkPatchCtx *ctx, uint64_t addr) {
    size_t usable, count = 0, len = 0;
    quicklist *ql = (quicklist *)blkAlloc(ctx, addr, sizeof(quicklist), &usable);
    quicklistNode *prev = NULL;
    uint64_t next;

    if (!ql) blkBad(ctx, "quicklist: not an allocation of the slot");
    /* fill: what quicklistSetFill() can produce. */
    if (ql->bookmark_count || ql->len == 0 || ql->count == 0 || ql->fill < -5)
        blkBad(ctx, "quicklist: bad header");
    blkKeep(ctx, ql);
    next = (uintptr_t)ql->head;
    while (next) {
        quicklistNode *n = (quicklistNode *)blkAlloc(ctx, next, sizeof(quicklistNode), NULL);
        size_t eusable;
        unsigned char *entry;

        /* The donor's back links are not trusted: the list is relinked
         * from the forward ones, at most ql->len nodes (no cycle). */
        if (!n) blkBad(ctx, "quicklist: node is not an allocation of the slot");
        if (++len > ql->len) blkBad(ctx, "quicklist: more nodes than its length");
        blkKeep(ctx, n);
        entry = (unsigned char *)blkAlloc(ctx, (uintptr_t)n->entry, 1, &eusable);
        if (!entry) blkBad(ctx, "quicklist: node data is not an allocation of the slot");
        if (n->count == 0 || n->sz == 0) blkBad(ctx, "quicklist: empty node");
        if (n->container != QUICKLIST_NODE_CONTAINER_PACKED &&
            n->container != QUICKLIST_NODE_CONTAINER_PLAIN) blkBad(ctx, "quicklist: bad container");
        if (n->encoding == QUICKLIST_NODE_ENCODING_LZF) {
            quicklistLZF *lzf = (quicklistLZF *)entry;
            /* LZF expands at most ~90 times (a 3-byte back reference
             * covers 264 bytes): a larger claimed size is a lie, and must
             * not make us allocate it. */
            if (eusable < sizeof(*lzf) || lzf->sz == 0 || lzf->sz > eusable - sizeof(*lzf) ||
                n->sz > lzf->sz * 100 + 1024) blkBad(ctx, "quicklist: bad LZF header");
            unsigned char *buf = ztrymalloc(n->sz);
            if (!buf) blkBad(ctx, "quicklist: no memory to check a compressed node");
            int ok = lzf_decompress(lzf->compressed, lzf->sz, buf, n->sz) == n->sz;
            if (ok && n->container == QUICKLIST_NODE_CONTAINER_PACKED)
                ok = lpValidateIntegrity(buf, n->sz, 1, NULL, NULL) && lpLength(buf) == n->count;
            if (ok && n->container == QUICKLIST_NODE_CONTAINER_PLAIN) ok = n->count == 1;
            zfree(buf);
            if (!ok) blkBad(ctx, "quicklist: compressed node does not check");
        } else if (n->encoding == QUICKLIST_NODE_ENCODING_RAW) {
            if (n->sz > eusable) blkBad(ctx, "quicklist: node size past its allocation");
            if (n->container == QUICKLIST_NODE_CONTAINER_PACKED &&
                (!lpValidateIntegrity(entry, n->sz, 1, NULL, NULL) || lpLength(entry) != n->count))
                blkBad(ctx, "quicklist: node listpack does not check");
            if (n->container == QUICKLIST_NODE_CONTAINER_PLAIN && n->count != 1)
                blkBad(ctx, "quicklist: plain node count");
        } else {
            blkBad(ctx, "quicklist: bad node encoding");
        }
        blkKeep(ctx, entry);
        count += n->count;
        next = (uintptr_t)n->next;
        n->entry = entry;
        n->prev = prev;
        n->next = NULL;
        if (prev) prev->next = n;
        else ql->head = n;
        prev = n;
    }
    if (len != ql->len || count != ql->count) blkBad(ctx, "quicklist: counts do not add up");
    ql->tail = prev;
    return ql;
}

/* A zero-copy value: the robj at donor address addr and everything it
 * owns. Returns the local robj or NULL. */
static robj *blkObject(blkPatchCtx *ctx, uint64_t addr) {
    size_t usable, u;
    robj *o = (robj *)blkAlloc(ctx, addr, sizeof(robj), &usable);
    unsigned char *p;

    if (!o) blkBad(ctx, "robj is not an allocation of the slot");
    if (o->refcount != 1) blkBad(ctx, "robj refcount is not 1");
    switch (o->type) {
    case OBJ_STRING:
        if (o->encoding == OBJ_ENCODING_INT) break;
        if (o->encoding == OBJ_ENCODING_EMBSTR) {
            /* robj, sdshdr8 and the bytes in one allocation. */
            struct sdshdr8 *sh = (struct sdshdr8 *)(o + 1);
            char *buf = (char *)(sh + 1);
            if (blkTr(ctx, (uintptr_t)o->ptr) != buf || sh->flags != SDS_TYPE_8 ||
                sh->len > sh->alloc ||
                sizeof(robj) + sizeof(*sh) + (size_t)sh->alloc + 1 > usable ||
                buf[sh->len] != '\0') blkBad(ctx, "bad embedded string");
            o->ptr = buf;
            break;
        }
        if (o->encoding != OBJ_ENCODING_RAW) blkBad(ctx, "bad string encoding");
        if ((o->ptr = blkSds(ctx, (uintptr_t)o->ptr)) == NULL) blkBad(ctx, "bad string sds");
        break;
    case OBJ_LIST:
        if (o->encoding != OBJ_ENCODING_QUICKLIST) blkBad(ctx, "bad list encoding");
        if ((o->ptr = blkQuicklist(ctx, (uintptr_t)o->ptr)) == NULL) return NULL;
        break;
    case OBJ_SET:
        p = (unsigned char *)blkAlloc(ctx, (uintptr_t)o->ptr, 8, &u);
        /* intsetValidateIntegrity() wants the exact size, which the header
         * gives (it checks the encoding and the length against it). */
        if (o->encoding != OBJ_ENCODING_INTSET || !p || intsetBlobLen((intset *)p) > u ||
            !intsetValidateIntegrity(p, intsetBlobLen((intset *)p), 1) ||
            intsetLen((intset *)p) == 0)
            blkBad(ctx, "intset does not check");
        blkKeep(ctx, p);
        o->ptr = p;
        break;
    case OBJ_HASH:
    case OBJ_ZSET:
        p = (unsigned char *)blkAlloc(ctx, (uintptr_t)o->ptr, 7, &u);
        if (o->encoding != OBJ_ENCODING_LISTPACK || !p || lpBytes(p) > u ||
            !lpPairsValidateIntegrityAndDups(p, lpBytes(p), 1) || lpLength(p) == 0)
            blkBad(ctx, "listpack does not check");
        if (o->type == OBJ_ZSET) {
            /* Scores must parse: zzlGetScore() trusts them. */
            unsigned char *e = lpSeek(p, 1);
            while (e) {
                unsigned char *v;
                int64_t vlen;
                unsigned char buf[LP_INTBUF_SIZE];
                double d;
                v = lpGet(e, &vlen, buf);
                if (v != buf && (!string2d((char *)v, vlen, &d) || isnan(d)))
                    blkBad(ctx, "bad score");
                e = lpNext(p, e);
                if (e) e = lpNext(p, e);
            }
        }
        blkKeep(ctx, p);
        o->ptr = p;
        break;
    default:
        blkBad(ctx, "type not sent zero-copy");
    }
    blkKeep(ctx, o);
    return o;
}

/* BLK_PATH_DICT: the hash table whose robj is at donor address addr, with
 * count elements. Everything is taken as it is (robj, dict, table, entries,
 * strings), each checked; the buckets are refilled with this process's
 * hash seed, and a field seen twice is refused. Returns the local robj or
 * NULL with ctx->why set. */
static robj *blkDictValue(blkPatchCtx *ctx, uint64_t addr, uint64_t count) {
    size_t usable;
    robj *o = (robj *)blkAlloc(ctx, addr, sizeof(robj), NULL);
    dictEntry **table, *list = NULL;
    unsigned long size, n = 0;
    dict *d;

    if (!o) blkBad(ctx, "robj is not an allocation of the slot");
    if (o->refcount != 1 || o->encoding != OBJ_ENCODING_HT ||
        (o->type != OBJ_HASH && o->type != OBJ_SET))
        blkBad(ctx, "bad hash table robj");
    if (!blkKeep(ctx, o)) blkBad(ctx, "robj owned twice");
    if ((d = (dict *)blkAlloc(ctx, (uintptr_t)o->ptr, sizeof(dict), NULL)) == NULL)
        blkBad(ctx, "dict is not an allocation of the slot");
    if (!blkKeep(ctx, d)) blkBad(ctx, "dict owned twice");
    o->ptr = d;
    /* The donor finishes any rehash before it ships a table. */
    if (d->rehashidx != -1 || d->ht_table[1] != NULL || d->ht_used[1] != 0 ||
        d->ht_size_exp[0] < 0 || d->ht_size_exp[0] > 40 || d->ht_used[0] != count ||
        count == 0) blkBad(ctx, "bad dict header");
    size = DICTHT_SIZE(d->ht_size_exp[0]);
    table = (dictEntry **)blkAlloc(ctx, (uintptr_t)d->ht_table[0], sizeof(dictEntry *), &usable);
    if (!table || usable / sizeof(dictEntry *) < size)
        blkBad(ctx, "dict table is not an allocation of the slot");
    if (!blkKeep(ctx, table)) blkBad(ctx, "dict table owned twice");
    /* Every entry of every chain, at most count of them, none twice (no
     * cycle), collected on a list through their next pointers. The entries
     * and then their strings are independent cache misses: the heads are
     * prefetched first, and each entry's strings while the chains are
     * walked, to be checked in a second pass. */
    for (unsigned long b = 0; b < size; b++) {
        char *p = table[b] ? blkTr(ctx, (uintptr_t)table[b]) : NULL;
        if (p) __builtin_prefetch(p);
    }
    for (unsigned long b = 0; b < size; b++) {
        uint64_t next = (uintptr_t)table[b];
        while (next) {
            dictEntry *de = (dictEntry *)blkAlloc(ctx, next, sizeof(dictEntry), NULL);
            char *p;

            if (!de) blkBad(ctx, "dict entry is not an allocation of the slot");
            if (++n > count) blkBad(ctx, "more entries than the dict holds");
            if (!blkKeep(ctx, de)) blkBad(ctx, "dict entry owned twice");
            next = (uintptr_t)de->next;
            if ((p = blkTr(ctx, (uintptr_t)de->key)) != NULL) __builtin_prefetch(p - 1);
            if (o->type == OBJ_HASH && (p = blkTr(ctx, (uintptr_t)de->v.val)) != NULL)
                __builtin_prefetch(p - 1);
            de->next = list;
            list = de;
        }
    }
    if (n != count) blkBad(ctx, "fewer entries than the dict holds");
    for (dictEntry *de = list; de; de = de->next) {
        sds f, v = NULL;

        if ((f = blkSds(ctx, (uintptr_t)de->key)) == NULL)
            blkBad(ctx, "bad field string");
        if (o->type == OBJ_HASH && (v = blkSds(ctx, (uintptr_t)de->v.val)) == NULL)
            blkBad(ctx, "bad value string");
        if (o->type == OBJ_SET && de->v.val != NULL) blkBad(ctx, "set entry with a value");
        de->key = f;
        de->v.val = v;
    }
    /* Refill the buckets (this process's seed). */
    d->type = o->type == OBJ_HASH ? &hashDictType : &setDictType;
    d->ht_table[0] = table;
    d->ht_size_exp[1] = -1;
    d->pauserehash = 0;
    memset(table, 0, size * sizeof(dictEntry *));
    while (list) {
        dictEntry *de = list, *e;
        unsigned long idx = dictHashKey(d, de->key) & DICTHT_SIZE_MASK(d->ht_size_exp[0]);

        list = de->next;
        for (e = table[idx]; e; e = e->next)
            if (dictCompareKeys(d, e->key, de->key)) break;
        if (e) {
            /* The table is half built: leave the robj out of reach. */
            blkBad(ctx, "a field appears twice");
        }
        de->next = table[idx];
        table[idx] = de;
    }
    return o;
}

static int blkMapCmp(const void *a, const void *b) {
    const blkMap *x = a, *y = b;
    return x->donor < y->donor ? -1 : x->donor > y->donor;
}

static int blkLocalCmp(const void *a, const void *b) {
    const blkLocalIdx *x = a, *y = b;
    return x->local < y->local ? -1 : x->local > y->local;
}

/* Check and rebuild every key of a received slot (see the top of the
 * file). The blocks in map are adopted into the slot already. On success
 * *out holds the keys, not linked yet; on error *err says what was wrong
 * and *out must be freed with blkAdoptedFree() (its zero-copy memory goes
 * with the slot's blocks, which the caller releases). With unit (slot
 * groups: the adoption of the unit's lead, patched before with the same
 * map), what this slot's keys own is recorded in the unit's bitmaps, so
 * that an allocation two slots' keys claim is found like one two keys of
 * a slot claim, and the unit's one sweep (blkSweepGarbage on unit) keeps
 * what any of them owns. Touches no shared state of the server (not the
 * keyspace: whether a key exists here already is settled when it is
 * linked), so a background thread may run it while the main thread serves
 * clients. */
int blkPatchSlot(int slot, blkMap *map, size_t nmap, uint64_t manifest,
                 size_t nkeys, const blkAdopted *unit, blkAdopted *out, sds *err) {
    blkPatchCtx ctx = {.slot = slot, .map = map, .nmap = nmap, .out = out,
                       .err = err, .why = "?"};
    blkManifestHeader *h;
    blkKeyRec *rec;
    size_t usable;
    dict *seen;

    memset(out, 0, sizeof(*out));
    out->slot = slot;
    *err = NULL;
    qsort(map, nmap, sizeof(*map), blkMapCmp);
    for (size_t i = 1; i < nmap; i++) {
        if (map[i].donor - map[i - 1].donor < map[i - 1].size) {
            *err = sdsnew("donor blocks overlap");
            return C_ERR;
        }
    }
    /* Ownership bitmaps, one bit per allocator granule of each block (a
     * unit's slots share the lead's). */
    if (unit) {
        serverAssert(unit->nowned == nmap);
        ctx.owned = unit->owned;
    } else {
        out->owned = zcalloc(sizeof(uint64_t *) * (nmap ? nmap : 1));
        out->nowned = nmap;
        for (size_t i = 0; i < nmap; i++)
            out->owned[i] = zcalloc(blkOwnedBytes(map[i].size));
        ctx.owned = out->owned;
    }
    ctx.bylocal = zmalloc(sizeof(blkLocalIdx) * (nmap ? nmap : 1));
    for (size_t i = 0; i < nmap; i++) {
        ctx.bylocal[i].local = map[i].local;
        ctx.bylocal[i].size = map[i].size;
        ctx.bylocal[i].block = i;
    }
    qsort(ctx.bylocal, nmap, sizeof(blkLocalIdx), blkLocalCmp);
    h = (blkManifestHeader *)blkAlloc(&ctx, manifest, sizeof(*h), &usable);
    if (!h || h->magic != BLK_MANIFEST_MAGIC || h->version != BLK_MANIFEST_VERSION ||
        h->slot != slot || h->nkeys != nkeys ||
        nkeys > (usable - sizeof(*h)) / sizeof(blkKeyRec)) {
        *err = sdscatprintf(sdsempty(), "bad manifest for slot %d", slot);
        zfree(ctx.bylocal);
        return C_ERR;
    }
    rec = (blkKeyRec *)(h + 1);
    out->keys = zcalloc(sizeof(blkAdoptedKey) * (nkeys ? nkeys : 1));
    seen = dictCreate(&blkSeenDictType);
    dictExpand(seen, nkeys);    /* Sized once: no rehash while it fills. */
    for (size_t i = 0; i < nkeys; i++) {
        blkKeyRec r = rec[i];   /* Nothing else writes the blocks meanwhile. */
        blkAdoptedKey *k = &out->keys[i];
        /* The next key's name and value, which no load here depends on. */
        if (i + 1 < nkeys) {
            char *p;
            if ((p = blkTr(&ctx, rec[i + 1].key)) != NULL) __builtin_prefetch(p - 1);
            if (rec[i + 1].path != BLK_PATH_INT && (p = blkTr(&ctx, rec[i + 1].val)) != NULL)
                __builtin_prefetch(p);
        }
        sds key = blkSds(&ctx, r.key);

        if (!key) {
            *err = sdscatprintf(sdsempty(), "record %zu: bad key pointer", i);
            break;
        }
        if ((int)keyHashSlot(key, (int)sdslen(key)) != slot) {
            *err = sdscatprintf(sdsempty(), "record %zu: key hashes to slot %u, not %d",
                i, keyHashSlot(key, (int)sdslen(key)), slot);
            break;
        }
        if (dictAdd(seen, key, NULL) != DICT_OK) {
            *err = sdscatprintf(sdsempty(), "record %zu: key appears twice", i);
            break;
        }
        if (r.expire < -1) {
            *err = sdscatprintf(sdsempty(), "record %zu: bad TTL %lld", i, (long long)r.expire);
            break;
        }
        k->key = key;
        k->expire = r.expire;
        k->hash = dictSdsHash(key);
        if (r.path == BLK_PATH_ZERO_COPY) {
            if ((k->val = blkObject(&ctx, r.val)) == NULL) {
                *err = sdscatprintf(sdsempty(), "record %zu (key '%s'): bad value: %s",
                    i, key, ctx.why);
                break;
            }
            out->keys_zero_copy++;
        } else if (r.path == BLK_PATH_DICT) {
            if ((k->val = blkDictValue(&ctx, r.val, r.len)) == NULL) {
                *err = sdscatprintf(sdsempty(), "record %zu (key '%s'): bad hash "
                    "table: %s", i, key, ctx.why);
                break;
            }
            out->keys_zero_copy++;
            out->keys_rebuilt++;
        } else if (r.path == BLK_PATH_INT) {
            k->val = createStringObjectFromLongLongForValue((long long)r.val);
            out->keys_zero_copy++;
        } else if (r.path == BLK_PATH_DUMP) {
            unsigned char *p = (unsigned char *)blkAlloc(&ctx, r.val, 1, &usable);
            rio payload;
            int type;
            sds buf;

            if (!p || r.len > usable || verifyDumpPayload(p, r.len, NULL) == C_ERR) {
                *err = sdscatprintf(sdsempty(), "record %zu: bad payload", i);
                break;
            }
            buf = sdsnewlen(p, r.len);
            rioInitWithBuffer(&payload, buf);
            /* A payload with a valid checksum can still be crafted: always
             * check it deeply, whatever sanitize-dump-payload says, and
             * report errors as RESTORE does (our rdb.c patch; this may run
             * on the migration's thread). */
            rdbLoadUntrusted = 1;
            type = rdbLoadObjectType(&payload);
            if (type != -1) k->val = rdbLoadObject(type, &payload, key, 0, NULL);
            rdbLoadUntrusted = 0;
            if (type == -1 || k->val == NULL) {
                sdsfree(buf);
                *err = sdscatprintf(sdsempty(), "record %zu: payload does not load", i);
                break;
            }
            sdsfree(buf);
            out->keys_serialized++;
        } else {
            *err = sdscatprintf(sdsempty(), "record %zu: unknown path %u", i, r.path);
            break;
        }
        if (!slotAllocOwns(k->val) && k->val->refcount != OBJ_SHARED_REFCOUNT)
            out->keys_in_heap++;
        out->nkeys = i + 1;
    }
    dictRelease(seen);
    zfree(ctx.bylocal);
    if (*err) return C_ERR;
    /* No allocation may belong to two keys (one free would corrupt the
     * other). */
    if (out->owned_twice) {
        *err = sdsnew("an allocation is owned by two keys");
        return C_ERR;
    }
    return C_OK;
}

/* Serialize every adopted key not linked yet as a DUMP payload
 * (a->payloads), for the RESTORE commands that tell this node's replicas
 * and AOF about the keys (blkLinkAdopted). Reads only the adopted objects,
 * which nothing else sees until they are linked: meant for the migration's
 * background thread (the main thread calls it when replicas came late). */
void blkSerializeAdopted(blkAdopted *a) {
    a->payloads = zcalloc(sizeof(sds) * (a->nkeys ? a->nkeys : 1));
    /* Keys linked already are in the keyspace: whoever needs them got them
     * another way (a replica that attached mid-link, in its full sync). */
    for (size_t i = a->linked; i < a->nkeys; i++) {
        robj keyobj;
        rio payload;

        initStaticStringObject(keyobj, a->keys[i].key);
        createDumpPayload(&payload, a->keys[i].val, &keyobj, 0);
        a->payloads[i] = payload.io.buffer.ptr;
    }
}

/* Link up to max adopted keys into the keyspace (main thread). The key sds
 * is the one in the blocks: only the dictEntry is new. A key that exists
 * here already (only a client using ASKING can have written it to a slot
 * that is being imported) is replaced: the donor owns the slot, its copy
 * wins. With payloads (blkSerializeAdopted), each key is propagated to the
 * replicas and the AOF as RESTORE key <abs-ms|0> payload ABSTTL REPLACE.
 * Returns how many were linked by this call. */
size_t blkLinkAdopted(blkAdopted *a, size_t max) {
    redisDb *db = &server.db[0];
    size_t n = 0;
    int prev_core = server.core_propagates;

    /* The keys' hashes were computed with the keyspace's hash function. */
    int hashed = server.cluster_enabled && db->dict->type->hashFunction == dictSdsHash;

    server.core_propagates = 1;
    server.propagate_no_multi = 1;
    while (a->linked < a->nkeys && n < max) {
        size_t i = a->linked++;
        blkAdoptedKey *k = &a->keys[i];
        dictEntry *de;
        robj keyobj;

        /* The next key's bucket and value (signalKeyAsReady reads its
         * type) are asked for while this one is linked. */
        if (hashed && i + 1 < a->nkeys) {
            blkPrefetchBucket(db->dict, a->keys[i + 1].hash);
            __builtin_prefetch(a->keys[i + 1].val);
        }
        initStaticStringObject(keyobj, k->key);
        /* The main thread neither hashes the key (its hash was computed
         * off it, blkPatchSlot) nor computes its slot (blkPatchSlot checked
         * that it is a->slot): it reads the key only to compare it with the
         * keys of its bucket, if any. */
        de = hashed ? dictAddRawHashed(db->dict, k->key, k->hash, NULL) :
                      dictAddRaw(db->dict, k->key, NULL);
        if (de == NULL) {
            serverLog(LL_WARNING, "Slot migration: key '%s' existed here "
                "already (written with ASKING?): replaced by the donor's copy",
                k->key);
            dbSyncDelete(db, &keyobj);
            de = dictAddRaw(db->dict, k->key, NULL);
        }
        serverAssert(de != NULL);
        dictSetVal(db->dict, de, k->val);
        if (server.cluster_enabled) slotToKeyAddEntryInSlot(de, db, a->slot);
        if (k->expire != -1) setExpire(NULL, db, &keyobj, k->expire);
        signalKeyAsReady(db, &keyobj, k->val->type);
        if (a->payloads && a->payloads[i]) {
            robj *argv[6];
            argv[0] = createStringObject("RESTORE", 7);
            argv[1] = createStringObject(k->key, sdslen(k->key));
            argv[2] = createStringObjectFromLongLong(k->expire == -1 ? 0 : k->expire);
            argv[3] = createObject(OBJ_STRING, a->payloads[i]);
            argv[4] = createStringObject("ABSTTL", 6);
            argv[5] = createStringObject("REPLACE", 7);
            a->payloads[i] = NULL;
            alsoPropagate(db->id, argv, 6, PROPAGATE_AOF | PROPAGATE_REPL);
            for (int j = 0; j < 6; j++) decrRefCount(argv[j]);
            propagatePendingCommands();
        }
        server.dirty++;
        k->key = NULL;
        k->val = NULL;
        n++;
    }
    server.core_propagates = prev_core;
    server.propagate_no_multi = 0;
    return n;
}

/* Free every live allocation of a block but those whose first granule is
 * set in keep (a bitmap over the block's granules, as blkAdopted.owned;
 * NULL: free them all). Freeing the last one releases the block. The one
 * loop for the patch's sweep (what no adopted key owns), a failed
 * adoption's discard and a failed import's rollback (migrecipient.c):
 * every allocation is listed before the first is freed, as a free may
 * release the block under the listing. Returns how many were freed. */
size_t blkFreeBlockAllocs(void *block, const uint64_t *keep) {
    size_t cap = 1024, n, freed = 0;
    void **allocs = zmalloc(cap * sizeof(void *));

    while ((n = slotAllocBlockAllocs(block, allocs, cap)) > cap) {
        cap = n;
        allocs = zrealloc(allocs, cap * sizeof(void *));
    }
    for (size_t i = 0; i < n; i++) {
        if (keep) {
            size_t g = (size_t)((char *)allocs[i] - (char *)block) / SLOTALLOC_GRANULE;
            if ((keep[g >> 6] >> (g & 63)) & 1) continue;
        }
        zfree(allocs[i]);
        freed++;
    }
    zfree(allocs);
    return freed;
}

/* Free every live allocation of the received blocks that no adopted key
 * owns: the manifest, the payloads, and whatever else the donor's blocks
 * held. Returns how many were freed. A block whose every live allocation
 * is owned (as many as its ownership bitmap has bits) is not walked: most
 * blocks hold keys only (the manifest and payloads fill the last ones),
 * and the walk and its list were about a tenth of the patcher's time.
 * Owned allocations are live ones, so equal counts mean no garbage. */
size_t blkSweepGarbage(blkAdopted *a, blkMap *map, size_t nmap) {
    size_t freed = 0;

    for (size_t b = 0; b < nmap; b++) {
        if ((size_t)redisPopcount(a->owned[b], (long)blkOwnedBytes(map[b].size)) ==
            slotAllocBlockLive(map[b].local))
            continue;
        freed += blkFreeBlockAllocs(map[b].local, a->owned[b]);
    }
    return freed;
}

/* Free what is left of an adoption: keys not linked (only their DUMP-path
 * values, which live outside the blocks; zero-copy memory goes with the
 * blocks), and the bookkeeping. */
void blkAdoptedFree(blkAdopted *a) {
    for (size_t i = a->linked; i < a->nkeys; i++) {
        robj *o = a->keys[i].val;
        if (o && !slotAllocOwns(o)) decrRefCount(o);
    }
    if (a->payloads)
        for (size_t i = 0; i < a->nkeys; i++) sdsfree(a->payloads[i]);
    zfree(a->payloads);
    zfree(a->keys);
    for (size_t i = 0; i < a->nowned; i++) zfree(a->owned[i]);
    zfree(a->owned);
    memset(a, 0, sizeof(*a));
}

/* ================= Block images for replicas and AOF ====================== */

/* Copy what the donor shipped of a received block (its used ranges, as
 * its own metadata lists them) before the block is adopted and patched:
 * the recipient's replicas and AOF are sent these bytes (RDMASLOTADOPT),
 * and run on them the checks and the patch the recipient ran. Why the
 * pre-patch image rather than the blocks after the patch: the patch
 * rewrites them in place and its sweep frees the manifest and the DUMP
 * payloads, so the patched blocks no longer describe their keys; after
 * the link, writes may change them too. The donor's image, with the
 * donor's addresses, is what the adopt path checks already. Runs on the
 * recipient's patcher thread (reads only the block). 0, or -1 if the
 * block is not a well formed image. */
int blkBlockImageTake(const blkMap *m, blkBlockImage *img, size_t headroom,
                      size_t tailroom) {
    slotAllocRangeInfo stack[64], *r = stack;
    size_t n = slotAllocImageUsedRanges(m->local, m->size, r, 64), total = 0;

    memset(img, 0, sizeof(*img));
    if (n == 0) return -1;
    if (n > 64) {
        r = zmalloc(sizeof(*r) * n);
        slotAllocImageUsedRanges(m->local, m->size, r, n);
    }
    for (size_t i = 0; i < n; i++) total += r[i].len;
    img->donor = m->donor;
    img->size = m->size;
    img->sum = m->sum;
    img->ranges = sdsnewlen(SDS_NOINIT, n * 2 * sizeof(uint64_t));
    size_t usable;
    img->alloc = zmalloc_usable(headroom + total + tailroom, &usable);
    img->bytes = (char *)img->alloc + headroom;
    img->len = total;
    img->room = usable - headroom - total;
    uint64_t *pairs = (uint64_t *)img->ranges;
    char *dst = img->bytes;
    for (size_t i = 0; i < n; i++) {
        pairs[2 * i] = r[i].offset;
        pairs[2 * i + 1] = r[i].len;
        memcpy(dst, m->local + r[i].offset, r[i].len);
        dst += r[i].len;
    }
    if (r != stack) zfree(r);
    return 0;
}

void blkBlockImagesFree(blkBlockImage *imgs, size_t n) {
    if (imgs == NULL) return;
    for (size_t i = 0; i < n; i++) {
        sdsfree(imgs[i].ranges);
        zfree(imgs[i].alloc);
    }
    zfree(imgs);
}

/* Let go of the blocks of a failed blkAdoptImages(): an adopted block's
 * live allocations are freed one by one (which releases it once empty:
 * no key of it was linked), a block still detached is released. */
static void blkDiscardBlocks(blkMap *map, size_t n, size_t adopted) {
    for (size_t b = 0; b < n; b++) {
        if (b < adopted) blkFreeBlockAllocs(map[b].local, NULL);
        else slotAllocReleaseBlock(map[b].local);
    }
}

/* Check one image's description before anything is reserved for it. */
static int blkImageValid(const blkBlockImage *img, sds *err, size_t b) {
    size_t nr = sdslen(img->ranges) / (2 * sizeof(uint64_t)), total = 0, end = 0;
    uint64_t pair[2];

    if (img->size == 0 || img->size % SLOTALLOC_UNIT_SIZE || img->size > (1ULL << 40) ||
        img->donor % SLOTALLOC_UNIT_SIZE || img->donor + img->size < img->donor) {
        *err = sdscatprintf(sdsempty(), "block %zu: bad address or size (multiples "
                            "of %d)", b, SLOTALLOC_UNIT_SIZE);
        return 0;
    }
    if (nr == 0 || sdslen(img->ranges) % (2 * sizeof(uint64_t))) {
        *err = sdscatprintf(sdsempty(), "block %zu: bad list of ranges", b);
        return 0;
    }
    for (size_t i = 0; i < nr; i++) {
        memcpy(pair, img->ranges + i * sizeof(pair), sizeof(pair));
        if (pair[0] < end || pair[1] == 0 || pair[1] > img->size ||
            pair[0] > img->size - pair[1]) {
            *err = sdscatprintf(sdsempty(), "block %zu: range %zu out of order or "
                                "outside the block", b, i);
            return 0;
        }
        end = pair[0] + pair[1];
        total += pair[1];
    }
    if (total != img->len) {
        *err = sdscatprintf(sdsempty(), "block %zu: %zu bytes for ranges of %zu",
                            b, img->len, total);
        return 0;
    }
    return 1;
}

/* RDMASLOTADOPT's work (a replica of the recipient, or the recipient's
 * AOF at load): the second half of the migration's data path, as DEBUG
 * SLOTREPLANT runs it, on the images the recipient received: fresh
 * detached blocks filled with the images, their checksums checked (the
 * stream or the AOF may have been damaged), adopted, every record and
 * pointer checked and patched (blkPatchSlot: a lying stream gets an error,
 * never a crash), the keys linked (a key of the slot already here is
 * replaced, as on the recipient), the garbage swept. With slot-affinity
 * yes, values that came as DUMP payloads are relocated into the blocks
 * later; with no, the evacuation takes the slot back to the heap as on
 * the recipient. Main thread. */
long long blkAdoptImages(const blkUnitSlot *us, int nus, const blkBlockImage *imgs,
                         size_t n, sds *err) {
    blkMap *map;
    size_t *sizes, adopted = 0;
    void **addrs;
    blkAdopted *a;
    int slot = us[0].slot, patched = 0, *slots;
    long long linked = -1;
    const char *why;

    *err = NULL;
    if (n == 0) {
        *err = sdsnew("no blocks");
        return -1;
    }
    for (size_t b = 0; b < n; b++)
        if (!blkImageValid(&imgs[b], err, b)) return -1;
    map = zcalloc(sizeof(*map) * n);
    sizes = zmalloc(sizeof(size_t) * n);
    addrs = zmalloc(sizeof(void *) * n);
    a = zcalloc(sizeof(*a) * nus);
    slots = zmalloc(sizeof(int) * nus);
    for (size_t b = 0; b < n; b++) sizes[b] = imgs[b].size;
    for (int i = 0; i < nus; i++) slots[i] = us[i].slot;
    /* The blocks go to an arena of the slot's own (slot groups), or the
     * unit's (slotCompactUnite), back to their groups' once linked
     * (slotCompactRegroup, below). */
    why = "shares its group's arena and no arena id is free for its unit";
    if ((nus == 1 ? slotCompactIsolate(slot, &why) : slotCompactUnite(slots, nus)) == -1) {
        *err = sdscatprintf(sdsempty(), "slot %d %s", slot, why);
        goto done;
    }
    if (slotAllocReserveBlocks(slot, n, sizes, addrs) == -1) {
        *err = sdscatprintf(sdsempty(), "cannot reserve %zu blocks: %s", n, strerror(errno));
        goto done;
    }
    for (size_t b = 0; b < n; b++) {
        map[b].donor = imgs[b].donor;
        map[b].size = imgs[b].size;
        map[b].local = addrs[b];
        map[b].sum = imgs[b].sum;
    }
    for (size_t b = 0; b < n; b++) {
        const char *src = imgs[b].bytes;
        size_t nr = sdslen(imgs[b].ranges) / (2 * sizeof(uint64_t));
        uint64_t pair[2], sum = 0;
        for (size_t i = 0; i < nr; i++) {
            memcpy(pair, imgs[b].ranges + i * sizeof(pair), sizeof(pair));
            memcpy((char *)addrs[b] + pair[0], src, pair[1]);
            src += pair[1];
        }
        int bad = blkImageSum(addrs[b], imgs[b].size, &sum) == -1;
        if (bad || sum != imgs[b].sum) {
            *err = sdscatprintf(sdsempty(), "block %zu: %s", b, bad ? "bad allocator "
                "metadata" : "checksum mismatch (its bytes changed on the way)");
            blkDiscardBlocks(map, n, 0);
            goto done;
        }
    }
    for (; adopted < n; adopted++) {
        if (blkAdoptBlock(slot, map[adopted].local) == -1) {
            *err = sdscatprintf(sdsempty(), "block %zu was rejected (bad allocator "
                                "metadata)", adopted);
            blkDiscardBlocks(map, n, adopted);
            goto done;
        }
    }
    /* Every slot of the unit checked against the same blocks, none
     * sharing an allocation with another, before any key is linked (as
     * the recipient's patcher does). */
    for (; patched < nus; patched++) {
        sds perr = NULL;
        int r = blkPatchSlot(us[patched].slot, map, n, us[patched].manifest,
                             us[patched].nkeys, patched ? &a[0] : NULL, &a[patched], &perr);
        if (r == C_ERR) {
            *err = nus == 1 ? perr : sdscatprintf(sdsempty(), "slot %d: %s",
                                                  us[patched].slot, perr);
            if (nus > 1) sdsfree(perr);
            patched++;          /* Its values loaded from payloads go too. */
            /* The values loaded from payloads first, then the blocks. */
            for (int i = 0; i < patched; i++) blkAdoptedFree(&a[i]);
            blkDiscardBlocks(map, n, n);
            goto done;
        }
    }
    size_t total = 0;
    for (int i = 0; i < nus; i++) total += a[i].nkeys;
    dict *kd = server.db[0].dict;
    dictExpand(kd, dictSize(kd) + (unsigned long)total);
    linked = 0;
    for (int i = 0; i < nus; i++) linked += (long long)blkLinkAdopted(&a[i], SIZE_MAX);
    blkSweepGarbage(&a[0], map, n);
    for (int i = 0; i < nus; i++) {
        if (a[i].keys_serialized && slotCompactEnabled()) slotCompactVisitFirst(us[i].slot);
        blkAdoptedFree(&a[i]);
    }
done:
    for (int i = 0; i < nus; i++) slotCompactRegroup(us[i].slot);
    zfree(map);
    zfree(sizes);
    zfree(addrs);
    zfree(a);
    zfree(slots);
    return linked;
}

/* ============================ DEBUG SLOTREPLANT =========================== */

/* DEBUG SLOTREPLANT <slot> [CORRUPT <seed> <count>]
 * The migration's data path inside one process, for tests: compact the
 * slot, build its manifest, copy its blocks into fresh detached blocks, drop
 * the slot's keys (their memory and blocks are freed), adopt the copies,
 * check and patch them, link the keys and sweep the garbage. Replies the
 * number of keys replanted, or the error; on error the slot's keys are
 * gone (a test command: the real migration keeps the donor's copy until
 * the recipient is done). Not propagated to replicas or the AOF.
 * CORRUPT overwrites <count> random bytes of the copy (a PRNG seeded with
 * <seed>), as a lying or broken donor would: the node must never crash. */
void blkReplantDebugCommand(client *c) {
    long long slot, seed = 0, corrupt = 0;
    const char *why;
    blkManifest m;
    blkAdopted a;
    sds err = NULL;
    slotAllocBlockInfo *bi;
    blkMap *map;
    size_t nb, keys;

    if (!slotCompactEnabled()) {
        addReplyError(c, "slot-affinity is disabled (needs cluster mode)");
        return;
    }
    if (getLongLongFromObject(c->argv[2], &slot) != C_OK || slot < 0 || slot >= CLUSTER_SLOTS) {
        addReplyError(c, "Invalid or out of range slot");
        return;
    }
    if (c->argc == 6 && !strcasecmp(c->argv[3]->ptr, "corrupt")) {
        if (getLongLongFromObject(c->argv[4], &seed) != C_OK ||
            getLongLongFromObject(c->argv[5], &corrupt) != C_OK || corrupt < 0) {
            addReplyError(c, "CORRUPT takes a seed and a byte count >= 0");
            return;
        }
    } else if (c->argc != 3) {
        addReplyError(c, "syntax: DEBUG SLOTREPLANT <slot> [CORRUPT <seed> <count>]");
        return;
    }
    if (countKeysInSlot((unsigned int)slot) == 0) {
        addReplyError(c, "the slot holds no keys");
        return;
    }
    /* Its blocks must hold its keys only (slot groups): an arena of its
     * own, which the relocation below fills; its group's again at the end. */
    if (slotCompactIsolate((int)slot, &why) == -1) {
        addReplyErrorFormat(c, "slot %lld %s", slot, why);
        return;
    }
    slotCompactSlotSync((int)slot);
    if (blkBuildManifest((int)slot, &m, &err) == C_ERR) {
        slotCompactRegroup((int)slot);
        addReplyErrorFormat(c, "%s", err);
        sdsfree(err);
        return;
    }
    nb = slotAllocSlotBlocks((int)slot, NULL, 0);
    bi = zmalloc(sizeof(*bi) * nb);
    map = zmalloc(sizeof(*map) * nb);
    nb = slotAllocSlotBlocks((int)slot, bi, nb);
    size_t *sizes = zmalloc(sizeof(size_t) * nb);
    void **addrs = zmalloc(sizeof(void *) * nb);
    for (size_t i = 0; i < nb; i++) sizes[i] = bi[i].size;
    if (slotAllocReserveBlocks((int)slot, nb, sizes, addrs) == -1) {
        blkFreeManifest(&m);
        addReplyError(c, "cannot reserve blocks for the copy");
        goto done;
    }
    for (size_t i = 0; i < nb; i++) {
        memcpy(addrs[i], bi[i].addr, bi[i].size);
        map[i].donor = (uintptr_t)bi[i].addr;
        map[i].size = bi[i].size;
        map[i].local = addrs[i];
    }
    if (corrupt) {
        size_t total = 0;
        uint64_t x = (uint64_t)seed * 0x9e3779b97f4a7c15ULL + 1;
        for (size_t i = 0; i < nb; i++) total += bi[i].size;
        for (long long k = 0; k < corrupt; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            size_t off = (size_t)(x % total), i = 0;
            while (off >= bi[i].size) off -= bi[i++].size;
            ((unsigned char *)addrs[i])[off] = (unsigned char)(x >> 56);
        }
    }
    uint64_t manifest = (uintptr_t)m.addr;
    keys = m.nkeys;
    /* The "donor" side lets go: its keys and then its manifest. */
    delKeysInSlot((unsigned int)slot);
    blkFreeManifest(&m);
    for (size_t i = 0; i < nb; i++) {
        if (blkAdoptBlock((int)slot, addrs[i]) == -1) {
            slotCompactReleaseSlot((int)slot);
            addReplyErrorFormat(c, "block %zu of slot %lld was rejected", i, slot);
            goto done;
        }
    }
    if (blkPatchSlot((int)slot, map, nb, manifest, keys, NULL, &a, &err) == C_ERR) {
        blkAdoptedFree(&a);
        slotCompactReleaseSlot((int)slot);
        addReplyErrorFormat(c, "slot %lld: %s", slot, err);
        sdsfree(err);
        goto done;
    }
    blkLinkAdopted(&a, SIZE_MAX);
    blkSweepGarbage(&a, map, nb);
    slotCompactVisitFirst((int)slot);  /* DUMP-path values are in the heap. */
    addReplyLongLong(c, (long long)a.nkeys);
    blkAdoptedFree(&a);
done:
    slotCompactRegroup((int)slot);
    zfree(bi);
    zfree(map);
    zfree(sizes);
    zfree(addrs);
}
