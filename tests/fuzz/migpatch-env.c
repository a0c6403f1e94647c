/* migpatch-env.c -- just enough of a Redis server, in one process and
 * without its event loop, for the migpatch fuzz target and its seed maker
 * to run the recipient's adoption path (src/slotblocks.c) as a cluster node
 * does: the config defaults, shared objects, the module registry (a DUMP
 * payload may name a module type), db 0 with its slot-to-keys index, and
 * the slot allocator routed through zmalloc (slotCompactInit).
 *
 * Both link the objects of a second build of the patched tree,
 * build/fuzz/redis (clang, ASan, UBSan, libc malloc, fuzzer coverage), with
 * server.o's main() renamed so that libFuzzer's (or the seed maker's) is
 * the program's (tests/fuzz/fuzz.mk).
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "server.h"
#include "cluster.h"
#include "slotalloc.h"
#include "slotcompact.h"
#include "migpatch-env.h"
#include "monotonic.h"

/* Defined in server.c and module.c, not declared in server.h. */
void moduleInitModulesSystem(void);
void createSharedObjects(void);
void initServerConfig(void);
extern dictType keylistDictType;

/* The parts of initServer() that adopting and linking keys touch. */
void fuzzServerInit(void) {
    uint8_t seed[16] = "migpatch-fuzzing";

    monotonicInit();                        /* elapsedStart() and the like */
    initServerConfig();
    server.cluster_enabled = 1;
    server.verbosity = LL_WARNING + 1;      /* Quiet: rejected payloads log. */
    server.hz = server.config_hz;
    server.pid = getpid();
    server.main_thread_id = pthread_self();
    dictSetHashFunctionSeed(seed);
    moduleInitModulesSystem();
    createSharedObjects();
    server.db = zcalloc(sizeof(redisDb) * server.dbnum);
    for (int j = 0; j < server.dbnum; j++) {
        server.db[j].dict = dictCreate(&dbDictType);
        server.db[j].expires = dictCreate(&dbExpiresDictType);
        server.db[j].blocking_keys = dictCreate(&keylistDictType);
        server.db[j].ready_keys = dictCreate(&objectKeyPointerValueDictType);
        server.db[j].watched_keys = dictCreate(&keylistDictType);
        server.db[j].id = j;
        server.db[j].defrag_later = listCreate();
    }
    /* Tables big enough for any slot an input holds, so that they do not
     * grow run after run (migpatch-fuzz compares used_memory). */
    dictExpand(server.db[0].dict, 4096);
    dictExpand(server.db[0].expires, 4096);
    slotToKeyInit(server.db);
    server.slot_affinity = 1;
    if (slotCompactInit() == C_ERR) {
        fprintf(stderr, "migpatch: cannot start the slot allocator\n");
        exit(1);
    }
}

/* Drop every key of a slot, each one freed on its own (dbSyncDelete): any
 * allocation of the blocks an adopted key frees must be a live one of the
 * slot, which the slot allocator checks (it panics otherwise). */
size_t fuzzDeleteSlotKeys(int slot) {
    redisDb *db = &server.db[0];
    size_t n = 0;
    dictEntry *de;

    while ((de = (*db->slots_to_keys).by_slot[slot].head) != NULL) {
        robj *key = createStringObject(dictGetKey(de), sdslen(dictGetKey(de)));
        dbSyncDelete(db, key);
        decrRefCount(key);
        n++;
    }
    return n;
}
