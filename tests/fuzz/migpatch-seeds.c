/* migpatch-seeds.c -- writes the seed corpus of migpatch-fuzz:
 *
 *   migpatch-seeds DIR
 *
 * Each seed is a real slot as a donor ships it: keys created in the slot's
 * blocks (zmalloc's placement arena, as slot compaction would have put
 * them there), the manifest built by blkBuildManifest(), and the blocks'
 * used ranges (slotAllocBlockUsedRanges, what a migration sends) written
 * as the input's patches, with the blocks' donor addresses, the manifest's
 * address and its key count (format: migpatch-env.h). One seed per family
 * of values, so that each stays a few KB: strings of every encoding and a
 * shared integer, with TTLs; a quicklist with compressed nodes; listpacks
 * and an intset; hash tables (BLK_PATH_DICT); a skiplist and a stream
 * (BLK_PATH_DUMP); a slot of two blocks.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "server.h"
#include "cluster.h"
#include "slotalloc.h"
#include "slotcompact.h"
#include "slotblocks.h"
#include "migpatch-env.h"
#define FUZZ_SEED_MAKER
#include "fuzz-util.h"

/* A key "{tag}name" of the slot the tag hashes to, holding val (taken). */
static void addKey(const char *tag, const char *name, robj *val, long long ttl_ms) {
    sds k = sdscatprintf(sdsempty(), "{%s}%s", tag, name);
    robj *key = createStringObject(k, sdslen(k));
    dbAdd(&server.db[0], key, val);
    if (ttl_ms > 0) setExpire(NULL, &server.db[0], key, mstime() + ttl_ms);
    decrRefCount(key);
    sdsfree(k);
}

static sds fmt(const char *f, int i) {
    return sdscatprintf(sdsempty(), f, i);
}

/* Values of one family, created in the slot's blocks. */
static void makeValues(const char *tag, int family) {
    robj *o;
    switch (family) {
    case 0:     /* strings: int, embstr, raw; a shared integer; TTLs */
        addKey(tag, "int", createStringObjectFromLongLong(123456789012LL), 0);
        addKey(tag, "shared", createStringObjectFromLongLongForValue(42), 0);
        addKey(tag, "embstr", createStringObject("short value", 11), 60000);
        o = createStringObject("a raw string value longer than forty-four bytes, "
                               "so not embedded", 65);
        addKey(tag, "raw", o, 3600000);
        break;
    case 1:     /* a quicklist: small listpack nodes, the middle ones LZF */
        o = createQuicklistObject();
        quicklistSetOptions(o->ptr, 8, 1);
        for (int i = 0; i < 40; i++) {
            sds e = fmt("element number %d of a compressible list...............", i);
            robj *eo = createObject(OBJ_STRING, e);
            listTypePush(o, eo, LIST_TAIL);
            decrRefCount(eo);
        }
        addKey(tag, "list", o, 0);
        break;
    case 2:     /* listpacks (hash, zset) and an intset */
        o = createHashObject();
        for (int i = 0; i < 6; i++) {
            sds f = fmt("field%d", i), v = fmt("value %d", i * 7);
            hashTypeSet(o, f, v, HASH_SET_TAKE_FIELD | HASH_SET_TAKE_VALUE);
        }
        addKey(tag, "hash", o, 0);
        o = createZsetListpackObject();
        for (int i = 0; i < 5; i++) {
            sds m = fmt("member%d", i);
            int flags = 0;
            zsetAdd(o, i * 1.5, m, ZADD_IN_NONE, &flags, NULL);
            sdsfree(m);
        }
        addKey(tag, "zset", o, 0);
        o = createIntsetObject();
        for (int i = 0; i < 8; i++) {
            sds m = fmt("%d", i * 1000 - 3000);
            setTypeAdd(o, m);
            sdsfree(m);
        }
        addKey(tag, "intset", o, 120000);
        break;
    case 3:     /* hash tables: a hash and a set (BLK_PATH_DICT) */
        o = createHashObject();
        hashTypeConvert(o, OBJ_ENCODING_HT);
        for (int i = 0; i < 10; i++) {
            sds f = fmt("hfield%d", i), v = fmt("hvalue%d", i);
            hashTypeSet(o, f, v, HASH_SET_TAKE_FIELD | HASH_SET_TAKE_VALUE);
        }
        addKey(tag, "hashtable", o, 0);
        o = createSetObject();
        for (int i = 0; i < 10; i++) {
            sds m = fmt("setmember%d", i);
            setTypeAdd(o, m);
            sdsfree(m);
        }
        addKey(tag, "settable", o, 0);
        break;
    case 4:     /* DUMP payloads: a skiplist zset and a stream */
        o = createZsetObject();
        for (int i = 0; i < 5; i++) {
            sds m = fmt("skipmember%d", i);
            int flags = 0;
            zsetAdd(o, -i * 2.25, m, ZADD_IN_NONE, &flags, NULL);
            sdsfree(m);
        }
        addKey(tag, "skiplist", o, 0);
        o = createStreamObject();
        for (int i = 0; i < 4; i++) {
            robj *argv[2] = {createStringObject("f", 1), createObject(OBJ_STRING, sdsfromlonglong(i))};
            streamID id;
            streamAppendItem(o->ptr, argv, 1, &id, NULL, 0);
            decrRefCount(argv[0]);
            decrRefCount(argv[1]);
        }
        addKey(tag, "stream", o, 0);
        break;
    case 5:     /* two blocks: a 70 KB string (of zeros: a small seed) does
                 * not fit the first one */
        addKey(tag, "small", createStringObject("in the first block", 18), 0);
        o = createObject(OBJ_STRING, sdsnewlen(NULL, 70000));
        addKey(tag, "big", o, 0);
        break;
    }
}

static int writeSeed(const char *dir, const char *name, const char *tag, int family) {
    int slot = (int)keyHashSlot((char *)tag, (int)strlen(tag));
    slotAllocBlockInfo bi[MIGPATCH_MAX_BLOCKS + 1];
    blkManifest m;
    sds err = NULL;

    zmalloc_place_arena = slot;
    makeValues(tag, family);
    zmalloc_place_arena = -1;
    if (blkBuildManifest(slot, &m, &err) == C_ERR) {
        fprintf(stderr, "migpatch-seeds: %s: %s\n", name, err);
        return -1;
    }
    size_t nb = slotAllocSlotBlocks(slot, bi, MIGPATCH_MAX_BLOCKS + 1);
    if (nb == 0 || nb > MIGPATCH_MAX_BLOCKS) {
        fprintf(stderr, "migpatch-seeds: %s: %zu blocks\n", name, nb);
        return -1;
    }
    seed_len = 0;
    seedPutLe((uint64_t)slot, 2);
    seedPutLe(nb - 1, 1);
    seedPutLe(m.nkeys, 4);
    seedPutLe((uintptr_t)m.addr, 8);
    for (size_t b = 0; b < nb; b++) {
        if (bi[b].size > 16 * SLOTALLOC_UNIT_SIZE) {
            fprintf(stderr, "migpatch-seeds: %s: block of %zu bytes\n", name, bi[b].size);
            return -1;
        }
        seedPutLe((uintptr_t)bi[b].addr, 8);
        seedPutLe(bi[b].size / SLOTALLOC_UNIT_SIZE - 1, 1);
    }
    for (size_t b = 0; b < nb; b++) {
        slotAllocRangeInfo r[256];
        size_t n = slotAllocBlockUsedRanges(bi[b].addr, r, 256);
        if (n > 256) return -1;
        for (size_t i = 0; i < n; i++) seedPutPatches((int)b, bi[b].addr, r[i].offset, r[i].len);
    }
    printf("migpatch-seeds: %s/%s: slot %d, %zu keys (%zu zero-copy, %zu rebuilt, %zu "
           "serialized), %zu blocks, %zu bytes\n", dir, name, slot, m.nkeys,
           m.keys_zero_copy, m.keys_rebuilt, m.keys_serialized, nb, seed_len);
    blkFreeManifest(&m);
    fuzzDeleteSlotKeys(slot);
    slotCompactReleaseSlot(slot);

    return seedSave(dir, name);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: migpatch-seeds DIR\n");
        return 64;
    }
    fuzzServerInit();       /* Sizes the keyspace's tables: not in the blocks. */
    if (writeSeed(argv[1], "strings", "s1", 0) || writeSeed(argv[1], "quicklist", "q1", 1) ||
        writeSeed(argv[1], "listpacks-intset", "l1", 2) ||
        writeSeed(argv[1], "hash-tables", "h1", 3) || writeSeed(argv[1], "dump-payloads", "d1", 4) ||
        writeSeed(argv[1], "two-blocks", "b1", 5))
        return 1;
    return 0;
}

/* The server state this program sets up is never torn down: no leak
 * report at exit. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "detect_leaks=0";
}
