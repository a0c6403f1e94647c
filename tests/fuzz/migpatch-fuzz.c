/* migpatch-fuzz.c -- libFuzzer target: what a recipient does with a slot's
 * blocks once they are in (src/slotblocks.c): blkAdoptBlock() of each one,
 * then blkPatchSlot(), which reads the manifest and every key, value,
 * listpack, intset, quicklist node, LZF payload, hash table and DUMP
 * payload it points to, trusting nothing, and rewrites donor addresses.
 *
 * (blkImageSum, the checksum of what an image says was shipped, is
 * run on every block first, as the migration does.)
 *
 * One input is a slot's blocks as they arrive, and what the donor said of
 * them (RDMAREGISTER): the blocks' donor addresses and sizes, the
 * manifest's address and its number of keys (format: migpatch-env.h). The
 * blocks are reserved, detached, for the slot as a migration does, and the
 * input's patches written into them; the seeds (migpatch-seeds.c) are the
 * blocks of real slots holding every type and encoding.
 *
 * Besides ASan and UBSan, a slot the recipient accepts must be usable
 * exactly as DEBUG SLOTREPLANT and the migration use it:
 *   - every adopted value serializes (blkSerializeAdopted, which walks
 *     every element) into a DUMP payload that RESTORE's own checks accept
 *     (verifyDumpPayload, then rdbLoadObject with deep sanitization) as a
 *     value of the same type: blkPatchSlot accepted nothing RESTORE would
 *     refuse;
 *   - the keys link into the keyspace (blkLinkAdopted), what no key owns
 *     is swept (blkSweepGarbage), and then deleting each key one by one
 *     frees every allocation left in the blocks: none is freed twice or
 *     is not a live allocation (the slot allocator panics: a crash), and
 *     none is left over (no allocation owned by no one, or by two keys);
 *   - used_memory is back where it was once the slot is released.
 * A refused slot is released wholesale, as the migration does.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "server.h"
#include "cluster.h"
#include "slotalloc.h"
#include "slotcompact.h"
#include "slotblocks.h"
#include "migpatch-env.h"
#include "fuzz-util.h"

static void fzFail(const char *what, size_t key, const char *detail) {
    fprintf(stderr, "migpatch-fuzz: %s (key %zu) %s\n", what, key, detail ? detail : "");
    abort();
}

/* A DUMP payload may claim a string of any length (its CRC is no
 * obstacle: the fuzzer, like a lying donor, computes it), and RESTORE's
 * loader, rdbGenericLoadStringObject(), then tries to allocate that much
 * before it finds the payload too short (ztrymalloc: NULL when there is no
 * room, which it handles). So ASan returns NULL, as a full heap would,
 * rather than abort for sizes above 1 GB (mapping them costs seconds under
 * ASan), and run.sh raises libFuzzer's malloc limit for this target
 * (migpatch.options). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1:max_allocation_size_mb=1024";
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzzServerInit();
    return 0;
}

/* The DUMP payload of an adopted value must load as RESTORE loads it. */
static void fzCheckPayload(blkAdoptedKey *k, sds payload, size_t i) {
    rio rdb;
    int type, error = 0;
    robj *o;

    if (verifyDumpPayload((unsigned char *)payload, sdslen(payload), NULL) == C_ERR)
        fzFail("an adopted value serializes to a DUMP payload that does not verify", i, k->key);
    rioInitWithBuffer(&rdb, payload);
    rdbLoadUntrusted = 1;
    type = rdbLoadObjectType(&rdb);
    o = type == -1 ? NULL : rdbLoadObject(type, &rdb, k->key, 0, &error);
    rdbLoadUntrusted = 0;
    if (o == NULL) fzFail("an adopted value does not load back (RESTORE would refuse it)", i, k->key);
    if (o->type != k->val->type) fzFail("an adopted value loads back as another type", i, k->key);
    decrRefCount(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t pos = 0, sizes[MIGPATCH_MAX_BLOCKS], used_before = zmalloc_used_memory();
    /* The keyspace's tables grow with the keys linked and stay grown:
     * used_memory is compared only when they did not. */
    unsigned long slots_before = dictSlots(server.db[0].dict) + dictSlots(server.db[0].expires);
    void *addrs[MIGPATCH_MAX_BLOCKS];
    blkMap map[MIGPATCH_MAX_BLOCKS];
    int slot = (int)(fuzzTake(data, size, &pos, 2) % CLUSTER_SLOTS);
    size_t nb = 1 + (fuzzTake(data, size, &pos, 1) & 3);
    size_t nkeys = fuzzTake(data, size, &pos, 4);
    uint64_t manifest = fuzzTake(data, size, &pos, 8);
    slotAllocSlotStat st;
    blkAdopted a;
    sds err = NULL;

    for (size_t b = 0; b < nb; b++) {
        map[b].donor = fuzzTake(data, size, &pos, 8);
        map[b].size = sizes[b] = (1 + (fuzzTake(data, size, &pos, 1) & 15)) * SLOTALLOC_UNIT_SIZE;
        map[b].expect = 0;
        map[b].sum = 0;
    }
    /* As INITRDMASERVER does: the slot gets an arena of its own for the
     * import (in groups, by default, it shares its group's), and its
     * group's again once the import ended (below). */
    const char *why;
    if (slotCompactIsolate(slot, &why) == -1) fzFail(why, 0, NULL);
    if (slotAllocReserveBlocks(slot, nb, sizes, addrs) == -1) fzFail("cannot reserve blocks", 0, NULL);
    for (size_t b = 0; b < nb; b++) map[b].local = addrs[b];
    fuzzApplyPatches(data, size, pos, addrs, sizes, nb);

    /* As the migration does: the checksum of what the image says was
     * shipped (its used ranges, read from its own tables), then adoption,
     * which must refuse exactly the images that have no checksum. */
    for (size_t b = 0; b < nb; b++) {
        int summed = blkImageSum(addrs[b], sizes[b], &map[b].sum) == 0;
        int adopted = blkAdoptBlock(slot, addrs[b]) == 0;
        if (summed != adopted)
            fzFail(adopted ? "an image without a checksum was adopted"
                           : "an image with a checksum was refused", b, NULL);
        if (!adopted) goto release;
    }
    if (blkPatchSlot(slot, map, nb, manifest, nkeys, NULL, &a, &err) == C_ERR) {
        if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "migpatch-fuzz: refused: %s\n", err);
        blkAdoptedFree(&a);
        sdsfree(err);
        goto release;
    }
    if (a.nkeys != nkeys) fzFail("blkPatchSlot returned another number of keys", a.nkeys, NULL);
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "migpatch-fuzz: slot %d: %zu keys adopted (%zu zero-copy, %zu "
                "rebuilt, %zu serialized)\n", slot, a.nkeys, a.keys_zero_copy,
                a.keys_rebuilt, a.keys_serialized);

    blkSerializeAdopted(&a);
    for (size_t i = 0; i < a.nkeys; i++) {
        fzCheckPayload(&a.keys[i], a.payloads[i], i);
        sdsfree(a.payloads[i]);
    }
    zfree(a.payloads);
    a.payloads = NULL;
    if (blkLinkAdopted(&a, SIZE_MAX) != nkeys) fzFail("not every key was linked", 0, NULL);
    blkSweepGarbage(&a, map, nb);
    if (fuzzDeleteSlotKeys(slot) != nkeys) fzFail("the slot holds another number of keys", 0, NULL);
    slotAllocSlotStats(slot, &st);
    if (st.live_allocs) fzFail("allocations left in the blocks once every key was freed", st.live_allocs, NULL);
    blkAdoptedFree(&a);

release:
    slotCompactReleaseSlot(slot);
    slotAllocSlotStats(slot, &st);
    if (st.blocks || st.detached_blocks) fzFail("blocks left after the release", 0, NULL);
    slotCompactRegroup(slot);
    if (zmalloc_used_memory() != used_before &&
        dictSlots(server.db[0].dict) + dictSlots(server.db[0].expires) == slots_before)
    {
        char d[64];
        snprintf(d, sizeof(d), "(%zu bytes before, %zu after)", used_before, zmalloc_used_memory());
        fzFail("used_memory is not back", 0, d);
    }
    return 0;
}
