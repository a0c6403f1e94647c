/* The donor of a slot migration (docs/DESIGN.md, "The protocol", "The
 * handover" and "Writes during a migration"; the steps are numbered as in
 * migration.c's top comment).
 *
 * Here: the donor thread (migDonorThread, started by RDMAMIGRATESLOTS in
 * migration.c), which talks to the recipient (hiredis, blocking, with the
 * migration's deadline: INITRDMASERVER, RDMAREGISTER, RDMADONE,
 * RDMAREPLAY, RDMAHANDOVER, RDMARESOLVE) and drives the transfer (paced
 * by migration-max-bandwidth: migPace); and the jobs it posts to the
 * main thread (migRunOnMain, run in slices by migDonorTick): the prepare (manifests built
 * while writes flow, then the freeze), recording the writes of the slots
 * once their bytes have left (migrationPropagated, a server.c hook), the
 * handover's ownership change, the delete of the donor's copies, and the
 * rollback. migDonorTick, the session timer's callback (main thread),
 * runs those jobs, relaxes the slots sent (migDonorRelaxSent) and ends
 * the session when the thread has returned (migDonorFinish).
 *
 * Nothing here calls the recipient's code (migrecipient.c): what both
 * roles use is in migsession.c.
 *
 * Size: about 1,550 lines, the largest migration file, because the
 * thread and the main-thread jobs it posts share the donor's state step by
 * step. If it grows, the recorded writes (the "Recorded writes" section,
 * about 240 lines, a server.c hook plus the replay) are the part to move
 * out first.
 *
 * Why one file of 1,600 lines: it is the donor's side of the protocol in
 * the order it runs (prepare, transfer and pacing, recorded writes and
 * replay, handover and resolve, delete, rollback), and each step reads the
 * session's donor part (`s->d`) that the steps before it filled in. What
 * the recipient does is in migrecipient.c, what both do in migsession.c.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "server.h"
#include "cluster.h"
#include "bio.h"
#include "latency.h"
#include "hiredis.h"
#include "slotalloc.h"
#include "slotcompact.h"
#include "slotfreeze.h"
#include "slotblocks.h"
#include "xfer.h"
#include "clustersetslots.h"
#include "migration.h"
#include "migprotocol.h"
#include "migsession.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

/* A migration-test-delay-* hidden config (migsession.h), in ms: the main
 * thread may change it at any time, the donor thread reads it. */
static long long migTestDelayMs(int *cfg) {
    return __atomic_load_n(cfg, __ATOMIC_RELAXED);
}

static redisReply *migCall(migSession *s, redisContext *rc, int argc, sds *argv,
                           const char *what);
static int migDonorCopyKey(redisDb *db, sds key);
static int migDonorKeyCopied(sds key);
static void migDonorFreeCopied(migSession *s, int all);

/* ============================ Main thread jobs ============================ */

/* Donor thread: run fn on the main thread in slices and wait for it. */
static int migRunOnMain(migSession *s, migMainFn *fn) {
    int r;
    pthread_mutex_lock(&s->lock);
    s->d.job = fn;
    s->d.job_done = 0;
    s->stage = s->cursor = s->d.delete_stage = 0;
    while (!s->d.job_done) pthread_cond_wait(&s->cond, &s->lock);
    r = s->d.job_result;
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* Returns 1 if a slice ran (more may follow at once). */
static int migRunJobSlice(migSession *s) {
    migMainFn *fn;
    pthread_mutex_lock(&s->lock);
    fn = s->d.job_done ? NULL : s->d.job;
    pthread_mutex_unlock(&s->lock);
    if (fn == NULL) return 0;
    int r = fn(s);
    if (r == MIG_SLICE_MORE) return 1;
    if (r == MIG_SLICE_WAIT) return 0;
    pthread_mutex_lock(&s->lock);
    s->d.job = NULL;
    s->d.job_result = r;
    s->d.job_done = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return 1;
}

/* ============================== Donor: main =============================== */

static void migSlotFreeManifest(migSlot *ms) {
    if (!ms->has_manifest) return;
    blkFreeManifest(&ms->manifest);
    ms->has_manifest = 0;
}

static void migDonorFreeManifests(migSession *s) {
    for (int i = 0; i < s->nmig; i++) migSlotFreeManifest(&s->slots[i]);
}

static int migAnyPending(migSession *s) {
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
        if (migSlotIsSet(s->bitmap, slot) && slotCompactSlotPending(slot)) return 1;
    return 0;
}

/* ============================= Recorded writes ============================ */

/* The keys recorded writes named: sds copies, freed with the set. */
static dictType migDirtyKeysDictType = {
    .hashFunction = dictSdsHash,
    .keyCompare = dictSdsKeyCompare,
    .keyDestructor = dictSdsDestructor,
};

static void migCaptureAppend(migSession *s, sds arg) {
    if (s->d.cap_nargs == s->d.cap_size) {
        s->d.cap_size = s->d.cap_size ? s->d.cap_size * 2 : 1024;
        s->d.cap_args = zrealloc(s->d.cap_args, sizeof(sds) * s->d.cap_size);
    }
    s->d.cap_args[s->d.cap_nargs++] = arg;
    s->d.cap_bytes += sdslen(arg) + sizeof(sds) + 8;
}

/* The s->slots entry of a slot (binary search; NULL: the slot had no key
 * at the prepare). */
static migSlot *migSlotFind(migSession *s, int slot) {
    int lo = 0, hi = s->nmig - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (s->slots[mid].slot == slot) return &s->slots[mid];
        if (s->slots[mid].slot < slot) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

/* Recording cannot go on (a write no replay can reproduce): the migration
 * fails before its handover, the donor keeps what it has. */
static void migCaptureFail(migSession *s, const char *what, const char *cmd) {
    migFail(s, "writes during the migration: '%s' %s", cmd, what);
    migCaptureFree(s);
}

/* server.c hooks. While a donor records (between the end of its transfer
 * and its replay), every command the server propagates counts, even with
 * no replica and no AOF (shouldPropagate), and propagateNow() hands it
 * here: commands with keys in the migrating slots are recorded, in the
 * replication stream's deterministic form (an expiry is a DEL, INCRBYFLOAT
 * a SET, a script its effects), and their keys join the dirty set. */
int migrationCapturing(void) {
    return mig != NULL && mig->d.capturing;
}

void migrationPropagated(int dbid, robj **argv, int argc, int target) {
    migSession *s = mig;
    getKeysResult result = GETKEYS_RESULT_INIT;
    struct redisCommand *cmd;
    int numkeys, mine = 0, others = 0;

    if (s == NULL || !s->d.capturing || !(target & PROPAGATE_REPL) || argc < 1) return;
    cmd = lookupCommand(argv, argc);
    if (cmd && (cmd->proc == multiCommand || cmd->proc == execCommand ||
                cmd->proc == selectCommand || cmd->proc == pingCommand)) return;
    if (cmd == NULL) {
        migCaptureFail(s, "is no command of this server", sdsEncodedObject(argv[0]) ? argv[0]->ptr : "?");
        return;
    }
    numkeys = getKeysFromCommand(cmd, argv, argc, &result);
    for (int j = 0; j < numkeys; j++) {
        robj *k = getDecodedObject(argv[result.keys[j].pos]);
        if (migSlotIsSet(s->bitmap, keyHashSlot(k->ptr, (int)sdslen(k->ptr)))) mine++;
        else others++;
        decrRefCount(k);
    }
    if (numkeys == 0 || others) {
        getKeysFreeResult(&result);
        /* Keyless writes wait for the handover (slotfreeze.c); one that
         * got through (a script's FLUSHALL...) may have touched the slots. */
        if ((numkeys == 0 && (cmd->flags & CMD_WRITE)) || (others && mine))
            migCaptureFail(s, numkeys ? "named keys of migrating and other slots"
                                      : "may have touched any slot", cmd->fullname);
        return;
    }
    UNUSED(dbid);
    migCaptureAppend(s, sdsfromlonglong(argc));
    for (int j = 0; j < argc; j++) {
        robj *a = getDecodedObject(argv[j]);
        migCaptureAppend(s, sdsdup(a->ptr));
        decrRefCount(a);
    }
    s->d.cap_cmds++;
    for (int j = 0; j < numkeys; j++) {
        robj *k = getDecodedObject(argv[result.keys[j].pos]);
        migSlot *ms = migSlotFind(s, keyHashSlot(k->ptr, (int)sdslen(k->ptr)));
        if (ms) ms->dirty++;
        if (dictFind(s->d.dirty_keys, k->ptr) == NULL)
            dictAdd(s->d.dirty_keys, sdsdup(k->ptr), NULL);
        decrRefCount(k);
    }
    getKeysFreeResult(&result);
    if (s->d.cap_bytes > MIG_CAPTURE_MAX_BYTES && !s->d.cap_full) {
        /* Bounded memory: the keys freeze again until the handover (and
         * what is recorded so far is replayed). */
        serverLog(LL_WARNING, "Slot migration: %lld writes (%zu bytes) recorded "
            "since the transfer: the slots' writes wait until the handover",
            s->d.cap_cmds, s->d.cap_bytes);
        slotFreeze(s->bitmap, migRemainingMs(s) + 5000, migrationSlotWanted);
        s->d.cap_full = 1;
        s->pause_first_ms = 0;      /* migWritePauseMean: write_pause_ms. */
    }
}

/* Relax the freeze of these slots (a bitmap, main thread), counting how
 * long each was held; once none is left frozen, the freeze as a whole. */
static void migDonorRelax(migSession *s, const unsigned char *bitmap, int n) {
    long long held = mstime() - s->d.freeze_start_ms, lasted;

    lasted = n ? slotFreezeRelaxSlots(bitmap) : 0;
    s->pause_slot_ms += (long long)n * held;
    s->d.nslots_relaxed += n;
    if (lasted) {
        s->write_pause_ms += lasted;
        s->pause_first_ms = lasted;
    }
}

/* End of the prepare (main thread, the slots frozen, the manifests built):
 * with migration-write-replay, start recording what writes to the slots
 * propagate, and let the writes to the slots that hold no key (nothing of
 * them is sent) run again at once, unless their arena is shared with
 * slots that move (a unit's, slot groups): those wait for the end of the
 * transfer (migDonorCaptureSlice), so that nothing allocates in blocks
 * being sent. (Today a new key is born in the heap and the pinned slots'
 * keys are not relocated, so such a write would not touch the blocks;
 * this keeps it so if keys are ever placed in their slot's arena as they
 * are created.) The others take writes again one by one as their bytes
 * leave (migDonorRelaxSent). */
static void migDonorCaptureBegin(migSession *s) {
    unsigned char empty[CLUSTER_SLOTS / 8];
    int n = 0;

    if (!server.migration_write_replay) return;
    s->d.dirty_keys = dictCreate(&migDirtyKeysDictType);
    s->d.capturing = 1;
    /* Writes to the keys not sent yet copy them rather than wait. */
    slotFreezeSetCopier(migDonorCopyKey, migDonorKeyCopied);
    memset(empty, 0, sizeof(empty));
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        if (migSlotIsSet(s->bitmap, slot) && migSlotFind(s, slot) == NULL &&
            slotAllocArenaSlots(slotAllocSlotArena(slot), NULL) <= 1) {
            empty[slot >> 3] |= 1 << (slot & 7);
            n++;
        }
    }
    migDonorRelax(s, empty, n);
}

/* Transfer (main thread, from the timer): the slots whose bytes have all
 * left (the donor thread's s->d.sent_order; a TCP send returned, or the RDMA
 * WRITEs completed) take writes again, recorded like the rest, so a slot
 * sent first does not wait for the last one. Not once recording stopped
 * (too much recorded, a write no replay can reproduce, a failure). */
static void migDonorRelaxSent(migSession *s) {
    unsigned char bitmap[CLUSTER_SLOTS / 8];
    int sent;

    sent = __atomic_load_n(&s->d.slots_sent, __ATOMIC_ACQUIRE);
    if (sent <= s->d.slots_relaxed || !s->d.capturing || s->d.cap_full || s->error) return;
    memset(bitmap, 0, sizeof(bitmap));
    for (int i = s->d.slots_relaxed; i < sent; i++) {
        int slot = s->slots[s->d.sent_order[i]].slot;
        bitmap[slot >> 3] |= 1 << (slot & 7);
    }
    migDonorRelax(s, bitmap, sent - s->d.slots_relaxed);
    s->d.slots_relaxed = sent;
    migDonorFreeCopied(s, 0);
}

/* ================== Keys copied out of the transfer ===================== */

/* A key a write took out of the transfer (migDonorCopyKey): its old name
 * and value, left where the transfer found them until their bytes have
 * been sent. */
typedef struct migCopiedKey {
    sds name;
    robj *val;                      /* NULL: shared, in no block. */
    int slot;
} migCopiedKey;

/* migCopySize for a hash table (a set's, field_vals 0, or a hash's). */
static size_t migCopySizeDict(dict *d, size_t max, int field_vals) {
    size_t n = sizeof(robj) + sizeof(dict) + dictSlots(d) * sizeof(dictEntry *);
    dictIterator *di;
    dictEntry *de;

    if (dictSize(d) > max / sizeof(dictEntry)) return SIZE_MAX;
    di = dictGetIterator(d);        /* Not safe: it writes nothing. */
    while (n <= max && (de = dictNext(di)) != NULL) {
        n += sizeof(dictEntry) + sdslen(dictGetKey(de)) + 3;
        if (field_vals) n += sdslen(dictGetVal(de)) + 3;
    }
    dictReleaseIterator(di);
    return n;
}

/* About what a copy of value o allocates (at least its payload), for the
 * migration-write-copy-max-size test: past max, any value above it, and
 * SIZE_MAX for what is never copied (a module's value). Element counts
 * are looked at first and walks stop past max, so a big value costs no
 * walk. Reads only: the bytes are being sent. */
static size_t migCopySize(robj *o, size_t max) {
    size_t n = sizeof(robj);

    switch (o->type) {
    case OBJ_STRING:
        return n + (sdsEncodedObject(o) ? sdslen(o->ptr) : 0);
    case OBJ_LIST: {
        quicklist *ql = o->ptr;
        if (ql->len > max / sizeof(quicklistNode)) return SIZE_MAX;
        n += sizeof(quicklist);
        for (quicklistNode *node = ql->head; node && n <= max; node = node->next)
            n += sizeof(quicklistNode) + node->sz;
        return n;
    }
    case OBJ_SET:
        if (o->encoding == OBJ_ENCODING_INTSET) return n + intsetBlobLen(o->ptr);
        return migCopySizeDict(o->ptr, max, 0);
    case OBJ_HASH:
        if (o->encoding == OBJ_ENCODING_LISTPACK) return n + lpBytes(o->ptr);
        return migCopySizeDict(o->ptr, max, 1);
    case OBJ_ZSET: {
        if (o->encoding == OBJ_ENCODING_LISTPACK) return n + lpBytes(o->ptr);
        zskiplist *zsl = ((zset *)o->ptr)->zsl;
        /* A node, and a dict entry, per element. */
        if (zsl->length > max / (sizeof(zskiplistNode) + sizeof(dictEntry))) return SIZE_MAX;
        for (zskiplistNode *x = zsl->header->level[0].forward; x && n <= max; x = x->level[0].forward)
            n += sizeof(zskiplistNode) + sizeof(dictEntry) + sdslen(x->ele) + 3;
        return n;
    }
    case OBJ_STREAM: {
        stream *st = o->ptr;
        raxIterator ri;
        if (raxSize(st->rax) > max / 64) return SIZE_MAX;
        n += sizeof(stream);
        raxStart(&ri, st->rax);
        raxSeek(&ri, "^", NULL, 0);
        while (n <= max && raxNext(&ri)) n += 64 + lpBytes(ri.data);
        raxStop(&ri);
        if (st->cgroups && n <= max) {
            raxStart(&ri, st->cgroups);
            raxSeek(&ri, "^", NULL, 0);
            while (n <= max && raxNext(&ri)) {
                streamCG *cg = ri.data;
                n += sizeof(*cg) + 64 + raxSize(cg->pel) * (sizeof(streamNACK) + 64) +
                     raxSize(cg->consumers) * (sizeof(streamConsumer) + 64);
            }
            raxStop(&ri);
        }
        return n;
    }
    default:
        return SIZE_MAX;
    }
}

/* A copy of value o in new memory, as COPY makes it (refcount 1, same
 * encoding); reads o only. */
static robj *migCopyValue(robj *o) {
    robj *c;

    switch (o->type) {
    case OBJ_STRING: c = dupStringObject(o); break;
    case OBJ_LIST: c = listTypeDup(o); break;
    case OBJ_SET: c = setTypeDup(o); break;
    case OBJ_ZSET: c = zsetDup(o); break;
    case OBJ_HASH: c = hashTypeDup(o); break;
    case OBJ_STREAM: c = streamDup(o); break;
    default: serverPanic("migCopyValue: type %d", o->type);
    }
    c->lru = o->lru;
    return c;
}

/* slotfreeze.c's copier (slotFreezeSetCopier), main thread: a write is
 * about to change key, of a slot whose bytes have not all been sent. A
 * write held until they are can wait the time a whole slot group takes to
 * send (tens of ms under a load), and its client's later commands with it.
 * Instead the key gets new memory: copies of its name and value (in the
 * heap: its slot is pinned, nothing is placed in its blocks) take the old
 * ones' place in the keyspace and the expires, and the old ones stay in
 * the blocks, untouched, until their bytes have left (migDonorFreeCopied).
 * The write then runs on the copy, and is recorded and replayed on the
 * recipient, whose copy from the blocks is the key as it was at the
 * freeze: the same as for a write after the slot was sent. The key joins
 * the dirty set, so the delete frees it allocation by allocation and the
 * freeze no longer holds it (migDonorKeyCopied).
 *
 * Returns 1 if the write may run: the key was copied, or does not exist
 * (a key born now is born in the heap). 0 if it waits, as before this:
 * not recording, migration-write-copy-max-size 0 or below the value's
 * size (migCopySize), a module's value, a client blocked on the key
 * (serving it may write another key: BLMOVE's destination), or a module
 * loaded (its keyspace notifications may write keys no command names). */
static int migDonorCopyKey(redisDb *db, sds key) {
    migSession *s = mig;
    long long max = server.migration_write_copy_max_size;
    size_t size = 0;

    if (s == NULL || s->role != MIG_ROLE_DONOR || !s->d.capturing || s->d.cap_full ||
        s->error || max <= 0 || moduleCount() != 0) return 0;
    if (dictFind(s->d.dirty_keys, key)) return 1;
    if (dictSize(db->blocking_keys)) {
        robj k;
        initStaticStringObject(k, key);
        if (dictFind(db->blocking_keys, &k)) return 0;
    }
    dictEntry *de = dictFind(db->dict, key);
    if (de) {
        robj *old = dictGetVal(de), *val = old;
        sds oldname = dictGetKey(de), name;
        dictEntry *ede;

        if (old->refcount != OBJ_SHARED_REFCOUNT &&
            (size = migCopySize(old, (size_t)max)) > (size_t)max) return 0;
        name = sdsdup(oldname);
        if (old->refcount != OBJ_SHARED_REFCOUNT) val = migCopyValue(old);
        /* The expires entry shares the keyspace's name. */
        if ((ede = dictFind(db->expires, oldname)) != NULL) dictSetKey(db->expires, ede, name);
        dictSetKey(db->dict, de, name);
        dictSetVal(db->dict, de, val);
        if (s->d.ncopied == s->d.copied_cap) {
            s->d.copied_cap = s->d.copied_cap ? s->d.copied_cap * 2 : 64;
            s->d.copied = zrealloc(s->d.copied, sizeof(migCopiedKey) * s->d.copied_cap);
        }
        s->d.copied[s->d.ncopied++] = (migCopiedKey){
            oldname, val == old ? NULL : old, (int)keyHashSlot(key, (int)sdslen(key))};
        s->keys_copied++;
        s->bytes_copied += (long long)(size + sdslen(name));
    }
    dictAdd(s->d.dirty_keys, sdsdup(key), NULL);
    return 1;
}

/* slotfreeze.c: whether migDonorCopyKey took this key out of the
 * transfer (then the freeze leaves it alone). */
static int migDonorKeyCopied(sds key) {
    migSession *s = mig;
    return s && s->role == MIG_ROLE_DONOR && s->d.capturing && s->d.dirty_keys &&
           dictFind(s->d.dirty_keys, key) != NULL;
}

/* Free the copied keys' old names and values whose bytes have left (their
 * slot is no longer frozen), or all of them (all: the transfer is over, or
 * stopped). Always before the delete, which releases blocks wholesale.
 * Main thread. */
static void migDonorFreeCopied(migSession *s, int all) {
    size_t kept = 0;

    for (size_t i = 0; i < s->d.ncopied; i++) {
        migCopiedKey *c = &s->d.copied[i];
        if (!all && slotFreezeIsFrozen(c->slot)) {
            s->d.copied[kept++] = *c;
            continue;
        }
        sdsfree(c->name);
        if (c->val) decrRefCount(c->val);
    }
    s->d.ncopied = kept;
}

/* 4b, after the transfer (main thread): the slots not relaxed yet take
 * writes again, recorded. */
static int migDonorCaptureSlice(migSession *s) {
    migDonorFreeCopied(s, 1);
    if (!s->d.capturing || s->d.cap_full || s->error) return 0;
    migDonorRelax(s, s->bitmap, s->nslots - s->d.nslots_relaxed);
    return 0;
}

/* Once the slots thawed: what the freeze held, and the longest wait. */
static void migHeldStats(migSession *s) {
    slotFreezeHeldStats(&s->held_cmds, &s->held_max_ms);
}

/* 6a, once the recipient linked every key (main thread): freeze the slots
 * again and stop recording; what was recorded is the donor thread's now. */
static int migDonorReplayBeginSlice(migSession *s) {
    if (s->d.capturing) {
        slotFreeze(s->bitmap, migRemainingMs(s) + 5000, migrationSlotWanted);
        s->d.capturing = 0;
    }
    return s->error ? -1 : 0;
}

/* 6 (main thread): the slots stay frozen for s->d.keep_frozen_ms more at
 * least, whatever the migration's deadline: while the handover's outcome
 * is unknown, a write acknowledged here could be lost (the freeze's own
 * deadline would otherwise thaw them, slotFreezeCron). */
static int migDonorKeepFrozenSlice(migSession *s) {
    slotFreeze(s->bitmap, s->d.keep_frozen_ms, migrationSlotWanted);
    return 0;
}

/* 6a (donor thread): the recorded commands, in order, in RDMAREPLAY calls
 * of whole commands; each call's reply is the number it applied. */
static int migDonorReplay(migSession *s, redisContext *rc) {
    size_t j = 0;

    while (j < s->d.cap_nargs) {
        size_t first = j, bytes = 0;
        long long cmds = 0;
        while (j < s->d.cap_nargs && (cmds == 0 || (bytes < MIG_REPLAY_BATCH_BYTES &&
                                                  j - first < MIG_REPLAY_BATCH_ARGS))) {
            long long n = strtoll(s->d.cap_args[j], NULL, 10);
            for (long long k = 0; k <= n; k++) bytes += sdslen(s->d.cap_args[j + k]);
            j += n + 1;
            cmds++;
        }
        sds *argv = zmalloc(sizeof(sds) * (j - first + 2));
        argv[0] = sdsnew("RDMAREPLAY");
        argv[1] = sdsnew(s->sid);
        memcpy(argv + 2, s->d.cap_args + first, sizeof(sds) * (j - first));
        redisReply *r = migCall(s, rc, (int)(j - first + 2), argv, "RDMAREPLAY");
        sdsfree(argv[0]);
        sdsfree(argv[1]);
        zfree(argv);
        if (r == NULL) return -1;
        if (r->type != REDIS_REPLY_INTEGER || r->integer != cmds) {
            migFail(s, "RDMAREPLAY: the recipient applied %lld of %lld commands",
                    r->type == REDIS_REPLY_INTEGER ? r->integer : -1, cmds);
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
        s->writes_replayed += cmds;
    }
    return 0;
}

/* Delete: whether a key was named by a recorded write (then its memory may
 * lie outside the slot's blocks, and it is freed, not just unlinked). */
static int migKeyIsDirty(migSession *s, sds key) {
    return s->d.dirty_keys && dictSize(s->d.dirty_keys) && dictFind(s->d.dirty_keys, key) != NULL;
}

/* One step of the manifest of slot ms (begun if need be). Returns 1 if
 * there is more to do, 0 once it is built, -1 on failure (migFail). */
static int migDonorManifestStep(migSession *s, migSlot *ms) {
    sds err = NULL;
    int r;

    if (!ms->has_manifest) {
        if (blkManifestBegin(ms->slot, &ms->manifest, &err) == C_ERR) {
            migFail(s, "slot %d: %s", ms->slot, err);
            sdsfree(err);
            return -1;
        }
        ms->has_manifest = 1;
        ms->built = 0;
    }
    r = blkManifestStep(&ms->manifest, MIG_SLICE_US / 2, &err);
    if (r == -1) {
        ms->has_manifest = 0;
        migFail(s, "slot %d: %s", ms->slot, err);
        sdsfree(err);
        return -1;
    }
    if (r == 1) return 1;
    ms->nkeys = ms->manifest.nkeys;
    ms->built = 1;
    return 0;
}

/* Prepare, after the freeze: list the slots holding keys again (a watched
 * slot may have gained its first key, or lost its last), keeping the
 * manifests of those that did not change since theirs was built; the
 * others are built again, frozen. With migration-test-delay-watch (the
 * prepare waited, writes flowing), each manifest kept is compared with a
 * fresh one first (a change the watch missed would make it stale: logged,
 * counted, replaced). */
static int migDonorKeepManifests(migSession *s) {
    migSlot *old = s->slots;
    int nold = s->nmig, j = 0;

    s->slots = zcalloc(sizeof(migSlot) * (s->nslots ? s->nslots : 1));
    s->nmig = 0;
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        if (!migSlotIsSet(s->bitmap, slot)) continue;
        while (j < nold && old[j].slot < slot) migSlotFreeManifest(&old[j++]);
        int changed = slotWatchTakeChanged(slot);
        size_t nkeys = countKeysInSlot(slot);
        if (nkeys == 0) continue;
        migSlot *ms = &s->slots[s->nmig++];
        if (j == nold || old[j].slot != slot) {
            ms->slot = slot;                /* Its first keys came meanwhile. */
            continue;
        }
        *ms = old[j++];
        if (!ms->built || changed || ms->nkeys != nkeys) {
            if (ms->built) s->manifests_rebuilt++;
            migSlotFreeManifest(ms);
            ms->built = 0;
            continue;
        }
        if (migTestDelayMs(&server.migration_test_delay_watch) == 0) continue;
        blkManifest fresh;
        sds err = NULL;
        if (blkBuildManifest(slot, &fresh, &err) == C_ERR) {
            migFail(s, "slot %d: %s", slot, err);
            sdsfree(err);
            while (j < nold) migSlotFreeManifest(&old[j++]);
            zfree(old);
            return -1;
        }
        if (!blkManifestSame(&ms->manifest, &fresh)) {
            serverLog(LL_WARNING, "Slot migration: the manifest of slot %d went "
                "stale with no change of the slot seen (replaced)", slot);
            s->manifests_stale++;
            blkFreeManifest(&ms->manifest);
            ms->manifest = fresh;
        } else {
            blkFreeManifest(&fresh);
        }
    }
    while (j < nold) migSlotFreeManifest(&old[j++]);
    zfree(old);
    slotUnwatch();
    return 0;
}

/* The slots a donor does not serve, holding no key and importing none:
 * no write reaches them here, so an arena they share only with moving
 * slots moves whole (slotCompactWholeArenas). That is a group the
 * cluster's own layout splits: 3 masters own 0-5460, 5461-10922 and
 * 10923-16383, and a donor giving all of its part of such a group no
 * longer relocates its keys into an arena of their own first. Should one
 * of them be assigned here and written meanwhile: before the units form,
 * the migration fails at migDonorFormUnits (try again); after, the pinned
 * arena takes none of its keys (slotCompactSetPinned), and the delete
 * lets the blocks go once a walk finds none there (slotCompactRetireUnit). */
static void migDonorIdleSlots(migSession *s, unsigned char *idle) {
    memset(idle, 0, CLUSTER_SLOTS / 8);
    for (int t = 0; t < CLUSTER_SLOTS; t++)
        if (!migSlotIsSet(s->bitmap, t) && server.cluster->slots[t] != server.cluster->myself &&
            server.cluster->importing_slots_from[t] == NULL && countKeysInSlot(t) == 0)
            idle[t >> 3] |= 1 << (t & 7);
}

/* Prepare, once the slots are frozen and their manifests built: the
 * slots that share an arena form a unit, led by its first slot in
 * s->slots (slot order), which ships the arena's blocks for all of them
 * (migSlot.lead). Stage 0 isolated the slots of every arena that does not
 * move whole, and the pins keep the map still since; an arena shared with
 * a slot that stays (the map changed before the pins: CONFIG SET) fails
 * the migration rather than ship another slot's keys. 0, or -1. */
static int migDonorFormUnits(migSession *s) {
    unsigned char whole[CLUSTER_SLOTS / 8], idle[CLUSTER_SLOTS / 8];
    int *last = zmalloc(sizeof(int) * CLUSTER_SLOTS);   /* By arena id. */

    for (int a = 0; a < CLUSTER_SLOTS; a++) last[a] = -1;
    migDonorIdleSlots(s, idle);
    slotCompactWholeArenas(s->bitmap, idle, whole);
    for (int i = 0; i < s->nmig; i++) {
        migSlot *ms = &s->slots[i];
        int arena = slotAllocSlotArena(ms->slot);
        ms->next_member = -1;
        if (arena < 0 || last[arena] == -1) {
            ms->lead = i;
        } else {
            ms->lead = s->slots[last[arena]].lead;
            s->slots[last[arena]].next_member = i;
        }
        if (arena >= 0) last[arena] = i;
        if (ms->lead != i && !migSlotIsSet(whole, ms->slot)) {
            migFail(s, "slot %d shares arena %d with slots that do not move (slot "
                    "groups changed during the prepare): try again", ms->slot, arena);
            zfree(last);
            return -1;
        }
    }
    zfree(last);
    return 0;
}

/* Prepare (phase 3), in slices. Writes to the slots flow for most of it:
 * the manifests are built while the slots are only watched (slotWatch),
 * then the slots freeze and only the manifests of the slots written
 * meanwhile are built again, so that a write waits for that short frozen
 * part and for its own slot's bytes, not for every slot's manifest. The
 * stages:
 *   0 give each slot that shares its arena with slots that stay one of
 *     its own (slotCompactIsolate), ask for the slots to relocate;
 *   1 relocate the slots' keys into their blocks (what background
 *     compaction still has to visit, for a bounded time);
 *   2 pin the slots (compaction leaves them alone from now on: the
 *     manifest moves a straggler itself), watch them, and build the
 *     manifest of each slot holding keys, one slot at a time; a slot
 *     written between two steps of its manifest starts again, once;
 *   3 freeze (migration-test-delay-watch waits before);
 *   4 wait for pending lazy frees (they write allocator metadata in the
 *     blocks); keep the manifests of the slots not written since theirs
 *     was built (migDonorKeepManifests);
 *   5 build the others, frozen;
 *   6 form the units of slots that share an arena (migDonorFormUnits),
 *     list the blocks.
 * Returns 1 if there is more to do, MIG_SLICE_WAIT to wait for the next
 * timer event, 0 when done, -1 on failure. */
#define MIG_PREPARE_UNFROZEN_MS 2000    /* Then go on even if not done. */
static int migDonorPrepareStep(migSession *s) {
    unsigned char whole[CLUSTER_SLOTS / 8], idle[CLUSTER_SLOTS / 8];

    switch (s->stage) {
    case 0:
        /* Slots (or their big keys) background compaction still has to
         * visit go first. Keys already visited are in their blocks, and
         * written ones are queued (slotCompactKeyModified). With
         * slot-affinity no nothing is in blocks and nothing relocates in
         * the background: ask for every slot with keys, and relocate it
         * here, in slices (big values from a cursor). */
        migDonorIdleSlots(s, idle);
        slotCompactWholeArenas(s->bitmap, idle, whole);
        for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
            if (!migSlotIsSet(s->bitmap, slot)) continue;
            /* A slot sharing its arena with slots that stay gets one of its
             * own: the blocks shipped must hold the moving slots' keys only.
             * An arena all of whose slots move goes whole (stage 6). */
            const char *why;
            int isolated = migSlotIsSet(whole, slot) ? 0 : slotCompactIsolate(slot, &why);
            if (isolated == -1) {
                migFail(s, "slot %d %s", slot, why);
                return -1;
            }
            s->isolated_slots += isolated;
            if ((isolated || !slotCompactEnabled()) && countKeysInSlot(slot))
                slotCompactRequest(slot);
        }
        slotCompactTallyStart(s->bitmap);
        s->stage = 1;
        break;
    case 1:
        if (migAnyPending(s) && mstime() - s->phase_start_ms < MIG_PREPARE_UNFROZEN_MS) {
            slotCompactStep(MIG_SLICE_US / 2);
            break;
        }
        for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
            if (migSlotIsSet(s->bitmap, slot)) slotCompactPin(slot);
        slotWatch(s->bitmap);
        s->slots = zcalloc(sizeof(migSlot) * (s->nslots ? s->nslots : 1));
        s->nmig = 0;
        for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
            if (!migSlotIsSet(s->bitmap, slot) || countKeysInSlot(slot) == 0) continue;
            s->slots[s->nmig++].slot = slot;
        }
        s->stage = 2;
        s->cursor = 0;
        break;
    case 2: {
        if (s->cursor == s->nmig) {
            long long watch_ms = migTestDelayMs(&server.migration_test_delay_watch);
            s->stage = 3;
            s->d.stage_start_ms = mstime();
            if (watch_ms > 0)
                serverLog(LL_NOTICE, "Slot migration: migration-test-delay-watch: "
                    "the manifests of %d slots built, writes flowing; waiting %lld "
                    "ms before the freeze", s->nmig, watch_ms);
            break;
        }
        migSlot *ms = &s->slots[s->cursor];
        /* Written since its manifest began (or before: then it does not
         * matter). Between two steps, the key to resume from may be gone. */
        if (slotWatchTakeChanged(ms->slot) && ms->has_manifest) {
            migSlotFreeManifest(ms);
            if (ms->restarted) {        /* Busy: its turn comes frozen. */
                s->cursor++;
                break;
            }
            ms->restarted = 1;
        }
        int r = migDonorManifestStep(s, ms);
        if (r == -1) return -1;
        if (r == 0) s->cursor++;
        break;
    }
    case 3:
        if (mstime() - s->d.stage_start_ms <
            migTestDelayMs(&server.migration_test_delay_watch))
            return MIG_SLICE_WAIT;
        slotFreeze(s->bitmap, migRemainingMs(s) + 5000, migrationSlotWanted);
        s->d.freeze_start_ms = mstime();
        s->stage = 4;
        break;
    case 4:
        if (!slotCompactLazyfreeIdle()) return MIG_SLICE_WAIT;
        if (migDonorKeepManifests(s) == -1) return -1;
        s->stage = 5;
        s->cursor = 0;
        break;
    case 5: {
        if (s->cursor == s->nmig) {
            s->stage = 6;
            break;
        }
        migSlot *ms = &s->slots[s->cursor];
        int r = ms->built ? 0 : migDonorManifestStep(s, ms);
        if (r == -1) return -1;
        if (r == 0) s->cursor++;
        break;
    }
    case 6:
        if (migDonorFormUnits(s) == -1) return -1;
        for (int i = 0; i < s->nmig; i++) {
            migSlot *ms = &s->slots[i];
            s->keys += ms->nkeys;
            s->keys_zero_copy += ms->manifest.keys_zero_copy;
            s->keys_serialized += ms->manifest.keys_serialized;
            s->bytes_serialized += (long long)ms->manifest.payload_bytes;
            if (ms->lead != i) {                /* In its lead's blocks. */
                ms->blocks = NULL;
                ms->nblocks = 0;
                continue;
            }
            size_t n = slotAllocSlotBlocks(ms->slot, NULL, 0);
            slotAllocBlockInfo *bi = zmalloc(sizeof(*bi) * (n ? n : 1));
            n = slotAllocSlotBlocks(ms->slot, bi, n);
            ms->blocks = zmalloc(sizeof(blkMap) * (n ? n : 1));
            ms->nblocks = 0;
            for (size_t b = 0; b < n; b++) {
                /* An empty block holds nothing to ship; it may even be
                 * released meanwhile (the slot's cached empty block). */
                if (bi[b].live_allocs == 0) continue;
                blkMap *bm = &ms->blocks[ms->nblocks++];
                bm->donor = (uintptr_t)bi[b].addr;
                bm->size = bi[b].size;
                bm->local = bi[b].addr;
            }
            zfree(bi);
        }
        s->prepare_frozen_ms = mstime() - s->d.freeze_start_ms;
        slotCompactTallyTotals(&s->relocated_keys, &s->relocated_bytes,
                               &s->relocated_ns);
        migDonorCaptureBegin(s);
        return 0;
    }
    return 1;
}

static int migDonorPrepareSlice(migSession *s) {
    monotime start;
    mstime_t lat;
    int r = 1;

    if (migAborting(s)) {
        migFailAborted(s);
        return -1;
    }
    elapsedStart(&start);
    latencyStartMonitor(lat);
    while (r == 1 && elapsedUs(start) < MIG_SLICE_US) r = migDonorPrepareStep(s);
    latencyEndMonitor(lat);
    latencyAddSampleIfNeeded("migration-prepare-slice", lat);
    return r;
}

/* Handover (phase 6), here: the recipient owns the slots now. */
static int migDonorHandoverSlice(migSession *s) {
    clusterNode *n = clusterLookupNode(s->d.target, CLUSTER_NAMELEN);
    if (n == NULL) {
        /* The recipient was forgotten meanwhile: it owns the slots all the
         * same (it said so); the cluster bus will tell us. */
        serverLog(LL_WARNING, "Slot migration: recipient %.40s is no longer "
            "known here; its claim will arrive through the cluster bus", s->d.target);
    } else {
        clusterSetSlotsApply(CLUSTER_SETSLOTS_NODE, n, s->bitmap);
    }
    /* Saved in nodes.conf with the new owner (same write, fsynced). */
    migGiveSlots(s->bitmap);
    s->d.handed_over = 1;
    s->write_pause_ms += slotThaw();
    migHeldStats(s);
    migCaptureFreeArgs(s);
    return 0;
}

/* Delete (phase 7), in slices: the donor's copies of the keys, with an
 * RDMASLOTDROP to its replicas and AOF for the slots gone through (DELs if
 * a replica does not understand it; migsession.c, "Dropping slots on
 * replicas and AOF"), and each slot's manifest once its keys are gone.
 * One RDMASLOTDROP per slice, naming the slots it went through: a
 * replica applies a command in one go, and a slice's keys cost it a few
 * ms (it holds what it unlinked of a group until the group's last slot
 * goes, and then releases the group's blocks wholesale: migDropSlots).
 * Slots whose every key lies in their blocks (no DUMP record) are unlinked
 * without freeing (MIG_DEL_IN_BLOCKS); once the lazyfree thread has
 * freed everything queued before that ended (a barrier job: an expire or
 * eviction after the thaw may have queued an object of those slots), their
 * blocks are released wholesale. The other slots' keys are deleted one by
 * one, and their emptied blocks return to the OS as whole blocks.
 * Stages: 0 unlink or delete keys, 1 wait for the barrier, 2 release
 * (retire) the blocks, 3 wait for the lazyfree thread to return their
 * pages to the OS.
 * A donor that gave away its last slot turns into a replica of the
 * recipient (as with SETSLOT), whose full sync replaces the whole dataset:
 * then it deletes nothing more (deleting would hit the keys the sync
 * brings), but still releases the slots it had unlinked. */
static int migDonorDeleteSlice(migSession *s) {
    redisDb *db = &server.db[0];
    monotime start;
    mstime_t lat;
    int n = 0, prev_core, more = 1;
    migDelAhead ahead = {NULL, 0};

    if (migClientsPaused()) return MIG_SLICE_WAIT;
    /* The copied keys' old bytes were freed once sent (migDonorCaptureSlice):
     * the blocks this releases wholesale hold none of them. */
    serverAssert(s->d.ncopied == 0);
    elapsedStart(&start);
    latencyStartMonitor(lat);
    if (s->d.delete_stage == 0 && server.masterhost) {
        serverLog(LL_NOTICE, "Slot migration: this node is a replica now; "
                  "its full sync replaces the keys left to delete");
        s->d.delete_stage = 1;
    }
    if (s->d.delete_stage == 0) {
        /* RDMASLOTDROP or DELs: decided per slice, a replica may attach
         * between two. */
        int drop = migSlotDropUsable();
        unsigned char dropped[CLUSTER_SLOTS / 8];

        memset(dropped, 0, sizeof(dropped));
        /* s->cursor walks the slots, s->stage the s->slots entries (in
         * slot order; slots without an entry had no keys). */
        prev_core = migPropagateBegin();
        while (s->cursor < CLUSTER_SLOTS) {
            int slot = s->cursor;
            migSlot *ms;
            dictEntry *de;

            if (!migSlotIsSet(s->bitmap, slot)) {
                s->cursor++;
                continue;
            }
            if (drop) dropped[slot >> 3] |= 1 << (slot & 7);
            ms = migSlotEntry(s, slot);
            if (ms && !ms->unlinked) {
                ms->unlinked = 1;
                /* Keys written since the transfer (dirty) are freed one by
                 * one; every other key is one of the manifest's. */
                ms->bulk = ms->has_manifest && ms->manifest.keys_serialized == 0 &&
                           (ms->manifest.nkeys == countKeysInSlot(slot) || ms->dirty);
            }
            if ((de = (*db->slots_to_keys).by_slot[slot].head) == NULL) {
                if (ms) ms->unlinked = 2;
                if (ms && ms->bulk) ms->has_manifest = 0;   /* In the blocks. */
                else if (ms) migSlotFreeManifest(ms);
                s->cursor++;
                if ((++n & 31) == 0 && elapsedUs(start) >= MIG_SLICE_US) break;
                continue;
            }
            int how = ms && ms->bulk && !(ms->dirty && migKeyIsDirty(s, dictGetKey(de))) ?
                      MIG_DEL_IN_BLOCKS :
                      server.lazyfree_lazy_server_del ? MIG_DEL_LAZY : MIG_DEL_SYNC;
            uint64_t hash = ahead.hash;
            int known = ahead.de == de;
            /* Only an unlink runs no other code (a delete may reach modules'
             * callbacks), so only then is the next key's entry still ours. */
            if (how == MIG_DEL_IN_BLOCKS) migDelLookahead(db->dict, de, &ahead);
            else ahead.de = NULL;
            migDeleteKey(db, slot, de, how, known ? &hash : NULL, !drop);
            if ((++n & 31) == 0 && elapsedUs(start) >= MIG_SLICE_US) break;
        }
        /* A slot left half deleted is named whole: the replica drops it
         * at once, the next slices name it again. (Nothing is sent for a
         * slice that went through no slot.) */
        if (drop) migPropagateSlotDrop(dropped);
        migPropagateEnd(prev_core);
        if (s->cursor == CLUSTER_SLOTS) s->d.delete_stage = 1;
    }
    if (s->d.delete_stage == 1 && migLazyfreeBarrierPassed(s, 0)) {
        s->d.delete_stage = 2;
        s->stage = 0;
    }
    if (s->d.delete_stage == 2) {
        while (s->stage < s->nmig && elapsedUs(start) < MIG_SLICE_US) {
            migSlot *ms = &s->slots[s->stage++];
            if (!ms->bulk) {
                if (ms->unlinked == 2) migReleaseIfEmpty(ms->slot);
                continue;
            }
            /* A slot left half unlinked (this node became a replica) keeps
             * its blocks, and so do the other slots of its unit: the full
             * sync may free its other keys on the lazyfree thread at any
             * time. */
            if (migUnitUnlinked(s, ms)) migReleaseBulkSlot(s, ms->slot);
            else serverLog(LL_WARNING, "Slot migration: slot %d was left half "
                           "deleted (this node became a replica); its blocks "
                           "stay", ms->slot);
        }
        if (s->stage == s->nmig) s->d.delete_stage = 3;
    }
    /* The blocks' pages go back to the OS on the lazyfree thread; the
     * delete (and the reply) ends when they have. */
    if (s->d.delete_stage == 3 && migLazyfreeBarrierPassed(s, 1)) {
        migDonorFreeManifests(s);   /* Those a replica left. */
        migUnpinAll(s);
        more = 0;
    }
    latencyEndMonitor(lat);
    latencyAddSampleIfNeeded("migration-delete-slice", lat);
    if (more && (s->d.delete_stage == 1 || s->d.delete_stage == 3)) return MIG_SLICE_WAIT;
    return more;
}

/* Whether this node's view says the recipient owns every slot (its claim
 * came through the cluster bus). */
static int migDonorOwnerSlice(migSession *s) {
    clusterNode *n = clusterLookupNode(s->d.target, CLUSTER_NAMELEN);
    if (n == NULL) return -1;
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
        if (migSlotIsSet(s->bitmap, slot) && server.cluster->slots[slot] != n) return -1;
    return 0;
}

/* Rollback before the handover: thaw, let go of the manifests. */
static int migDonorRollbackSlice(migSession *s) {
    migDonorFreeCopied(s, 1);
    slotUnwatch();
    s->write_pause_ms += slotThaw();
    migHeldStats(s);
    migCaptureFree(s);
    migDonorFreeManifests(s);
    migUnpinAll(s);
    return 0;
}

/* ============================= Donor: thread ============================== */

/* Donor thread: sleep ms (migration-test-delay-*), waking up early on an
 * abort (cancel, deadline). */
static void migSleep(migSession *s, long long ms) {
    while (ms > 0 && !migAborting(s)) {
        usleep(10000);
        ms -= 10;
    }
}

/* The test point at the start of a phase: migration-test-delay-<phase>. */
static void migTestDelay(migSession *s, int *cfg) {
    migSleep(s, migTestDelayMs(cfg));
}

/* migration-max-bandwidth. Over TCP, the bytes a donor sends cost the
 * kernel time on both hosts, time the main threads there would spend on
 * clients (BENCHMARKS.md: on a CPU shared with a server, loopback TCP I/O
 * costs its clients far more than the same CPU time spent computing). An
 * operator who prefers a longer migration with less of that cost per
 * second sets a limit: the donor thread then waits, before each chunk,
 * until the bytes sent so far have taken the time the limit gives them.
 * The average counts from the moment the limit took its current value:
 * the thread reads it before every chunk, so that CONFIG SET applies to
 * a running migration (and 0 lets it go at full speed at once).
 *
 * A write that waits for a slot not sent yet (the freeze holds it, and
 * with it every later command of its client: a cluster client that
 * multiplexes one connection per node stalls all its traffic to the
 * node) overrides the limit: no wait while a slot is wanted, and the
 * slot goes next, in a chunk of its own (migNextWantedSlot, and the
 * urgent chunks of migDonorTransfer). Its bytes still count, so the
 * slots nobody waits for wait longer afterwards. Under a write-heavy
 * load, the transfer then goes at about full speed, which is what costs
 * those clients least. */
typedef struct migPacer {
    long long limit;                /* Bytes/s the average counts at. */
    long long start_us;             /* Since when... */
    long long bytes;                /* ...and the bytes sent since then. */
    long long waited_us;            /* All the waits (s->throttled_ms). */
} migPacer;

/* The limit now (a config the main thread may change at any time). */
static long long migBandwidthLimit(void) {
    return __atomic_load_n(&server.migration_max_bandwidth, __ATOMIC_RELAXED);
}

/* How many bytes to send between two looks at the limit: about 10 ms
 * worth of it, so that a limited transfer goes in small even bursts
 * rather than 4 MB ones; at least 64 KB (fewer, longer system calls). */
static uint64_t migChunkBytes(long long limit) {
    if (limit <= 0) return (uint64_t)MIG_WRITE_CHUNK;
    uint64_t c = (uint64_t)limit / 100;
    if (c < 64 * 1024) c = 64 * 1024;
    return c > (uint64_t)MIG_WRITE_CHUNK ? (uint64_t)MIG_WRITE_CHUNK : c;
}

/* 1 if a command waits to write to a slot of the transfer (s->d.wanted; the
 * bits stay for migNextWantedSlot to take). */
static int migAnyWanted(migSession *s) {
    for (int w = 0; w < CLUSTER_SLOTS / 64; w++)
        if (__atomic_load_n(&s->d.wanted[w], __ATOMIC_RELAXED)) return 1;
    return 0;
}

/* Before building a chunk: wait as long as the limit asks, unless 'urgent'
 * (the chunk goes on with a slot a command waits for) or until a command
 * waits for a slot, in steps of at most 10 ms to see a cancel or the
 * deadline. The caller then adds the chunk's bytes to p->bytes. */
static void migPace(migSession *s, migPacer *p, int urgent) {
    long long limit = migBandwidthLimit();
    if (limit != p->limit) {
        p->limit = limit;
        p->start_us = ustime();
        p->bytes = 0;
    }
    if (limit <= 0 || urgent) return;
    long long due = p->start_us + (long long)((double)p->bytes * 1e6 / (double)limit);
    long long now = ustime();
    /* migrationSlotWanted wakes us (s->cond) when a command starts to
     * wait; under s->lock, so that the wake-up cannot come between the
     * look at s->d.wanted and the wait. */
    pthread_mutex_lock(&s->lock);
    while (now < due && !migAborting(s) && !migAnyWanted(s) &&
           migBandwidthLimit() == limit) {
        long long step = due - now > 10000 ? 10000 : due - now;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)step * 1000;
        while (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&s->cond, &s->lock, &ts);
        long long later = ustime();
        p->waited_us += later - now;
        now = later;
    }
    pthread_mutex_unlock(&s->lock);
    s->throttled_ms = p->waited_us / 1000;
}

static void migDonorRecipientReason(migSession *s, redisContext *rc, char *why, size_t len);

/* One command to the recipient on the thread's connection. Returns the
 * reply (free it) or NULL with the session's error set. */
static redisReply *migCall(migSession *s, redisContext *rc, int argc, sds *argv,
                           const char *what) {
    size_t *lens = zmalloc(sizeof(size_t) * argc);
    long long left = migRemainingMs(s);
    struct timeval tv = {left / 1000, (left % 1000) * 1000};
    redisReply *r;

    for (int j = 0; j < argc; j++) lens[j] = sdslen(argv[j]);
    if (left <= 0) {
        zfree(lens);
        migFailAborted(s);
        return NULL;
    }
    redisSetTimeout(rc, tv);
    r = redisCommandArgv(rc, argc, (const char **)argv, lens);
    zfree(lens);
    if (r == NULL) {
        if (migAborting(s)) migFailAborted(s);
        else migFail(s, "%s: connection to the recipient %s:%d lost: %s",
                     what, s->d.host, s->d.port, rc->errstr);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        /* The recipient's import has ended: say why it did. */
        char why[XFER_ERR_LEN + 32] = "";
        if (strstr(r->str, "no import session") && !migAborting(s))
            migDonorRecipientReason(s, rc, why, sizeof(why));
        migFail(s, "%s refused by the recipient %s:%d: %s%s", what, s->d.host,
                s->d.port, r->str, why);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* A field of a map reply (RESP2 flat array or RESP3 map). */
static redisReply *migReplyField(redisReply *r, const char *name) {
    if (r->type != REDIS_REPLY_ARRAY && r->type != REDIS_REPLY_MAP) return NULL;
    for (size_t j = 0; j + 1 < r->elements; j += 2)
        if (r->element[j]->type == REDIS_REPLY_STRING &&
            !strcasecmp(r->element[j]->str, name)) return r->element[j + 1];
    return NULL;
}

/* Donor thread, after the data connection broke: the recipient may have
 * dropped it on purpose, having found bad data while the rest was still
 * arriving, and then its reason is the useful part of the error. It is in
 * the recipient's STATUS once its import has ended (quickly: nothing was
 * linked yet), so ask for it on the control connection for up to a
 * second. Fills why with " (the recipient: <reason>)", to append to an
 * error, or "" when the recipient tells nothing. */
static void migDonorRecipientReason(migSession *s, redisContext *rc, char *why, size_t len) {
    struct timeval tv = {0, 300000};

    why[0] = '\0';
    if (rc == NULL || rc->err) return;
    redisSetTimeout(rc, tv);
    for (int i = 0; i < 20 && !migAborting(s); i++) {
        redisReply *r = redisCommand(rc, "RDMAMIGRATESLOTS STATUS");
        if (r == NULL) return;
        redisReply *state = migReplyField(r, "state");
        redisReply *last = migReplyField(r, "last_status");
        redisReply *error = migReplyField(r, "last_error");
        int ended = state && state->type == REDIS_REPLY_STRING && !strcmp(state->str, "idle");
        if (ended && last && last->type == REDIS_REPLY_STRING && !strcmp(last->str, "failed") &&
            error && error->type == REDIS_REPLY_STRING && error->len)
            snprintf(why, len, " (the recipient: %s)", error->str);
        int stop = ended || r->type == REDIS_REPLY_ERROR;
        freeReplyObject(r);
        if (stop) return;
        usleep(50000);
    }
}

/* Donor thread: the transfer failed with err; fail the migration with it,
 * and with what the recipient says about it. */
static void migDonorTransferFailed(migSession *s, redisContext *rc, const char *err) {
    char why[XFER_ERR_LEN + 32];

    if (migAborting(s)) {
        migFailAborted(s);
        return;
    }
    migDonorRecipientReason(s, rc, why, sizeof(why));
    migFail(s, "%s%s", err, why);
}

/* A connection to the recipient, authenticated, within ms; NULL with why
 * in err (XFER_ERR_LEN bytes; may be NULL). Leaves the session's error
 * alone: the donor thread also uses it after the deadline, to resolve a
 * handover or to end the recipient's session. */
static redisContext *migConnectTo(migSession *s, long long ms, char *err) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    redisContext *rc = redisConnectWithTimeout(s->d.host, s->d.port, tv);

    if (rc == NULL || rc->err) {
        if (err) snprintf(err, XFER_ERR_LEN, "cannot connect to the recipient %s:%d: %s",
                          s->d.host, s->d.port, rc ? rc->errstr : "out of memory");
        if (rc) redisFree(rc);
        return NULL;
    }
    redisSetTimeout(rc, tv);
    if (s->d.pass) {
        redisReply *r = s->d.user ? redisCommand(rc, "AUTH %s %s", s->d.user, s->d.pass)
                                : redisCommand(rc, "AUTH %s", s->d.pass);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            if (err) snprintf(err, XFER_ERR_LEN, "AUTH refused by the recipient %s:%d: %s",
                              s->d.host, s->d.port, r ? r->str : rc->errstr);
            if (r) freeReplyObject(r);
            redisFree(rc);
            return NULL;
        }
        freeReplyObject(r);
    }
    return rc;
}

static redisContext *migDonorConnectRecipient(migSession *s) {
    char err[XFER_ERR_LEN];
    long long left = migRemainingMs(s);
    redisContext *rc = left > 0 ? migConnectTo(s, left, err) : NULL;

    if (left <= 0) migFailAborted(s);
    else if (rc == NULL) migFail(s, "%s", err);
    return rc;
}

/* RDMARESOLVE <session> <slots> on rc (its timeout set by the caller). */
static redisReply *migResolveCall(migSession *s, redisContext *rc) {
    sds *argv = zmalloc(sizeof(sds) * 2);
    int argc = 0;
    argv[argc++] = sdsnew("RDMARESOLVE");
    argv[argc++] = sdsnew(s->sid);
    migAppendRanges(s->bitmap, &argv, &argc);
    size_t *lens = zmalloc(sizeof(size_t) * argc);
    for (int j = 0; j < argc; j++) lens[j] = sdslen(argv[j]);
    redisReply *r = redisCommandArgv(rc, argc, (const char **)argv, lens);
    zfree(lens);
    migFreeArgv(argv, argc);
    return r;
}

/* Donor thread, phase 6: RDMAHANDOVER. Returns 1 if the recipient took the
 * slots (it replied OK), 0 if it did not (it refused, or the migration was
 * aborted before asking: s->error set), -1 if nobody can tell (the reply
 * was lost: connection broken, or no reply within the time left). */
static int migDonorHandover(migSession *s, redisContext *rc) {
    /* At least a few seconds: a reply that comes late is still an answer,
     * and an answer spares asking again. */
    long long wait = migRemainingMs(s) > 5000 ? migRemainingMs(s) : 5000;
    struct timeval tv = {wait / 1000, (wait % 1000) * 1000};
    redisReply *r;

    /* From here a CANCEL is refused: one accepted now could not stop a
     * handover already under way, and its +OK would be untrue. Decided
     * under the lock CANCEL takes: either it came first, or it is
     * refused. */
    pthread_mutex_lock(&s->lock);
    int cancel;
    atomicGet(s->cancel, cancel);
    if (!cancel) s->d.handover_begun = 1;
    pthread_mutex_unlock(&s->lock);
    if (cancel || migAborting(s)) {
        migFailAborted(s);
        return 0;
    }
    /* No thaw until the answer, however late it comes. */
    s->d.keep_frozen_ms = wait + 5000;
    migRunOnMain(s, migDonorKeepFrozenSlice);
    /* RDMAHANDOVER counts only on the connection that opened the session:
     * if that one is gone already, no handover can have happened (only
     * the last round trip is left in doubt). */
    redisSetTimeout(rc, tv);
    r = redisCommand(rc, "PING");
    if (r == NULL) {
        migFail(s, "the connection to the recipient %s:%d broke before the "
                "handover: %s", s->d.host, s->d.port, rc->errstr);
        return 0;
    }
    freeReplyObject(r);
    r = redisCommand(rc, "RDMAHANDOVER %s", s->sid);
    if (r == NULL) {
        serverLog(LL_WARNING, "Slot migration: no reply to RDMAHANDOVER from %s:%d "
                  "(%s): asking the recipient what happened", s->d.host, s->d.port, rc->errstr);
        return -1;
    }
    int ok = r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK");
    if (!ok) migFail(s, "RDMAHANDOVER refused by the recipient %s:%d: %s", s->d.host,
                     s->d.port, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return ok;
}

/* Donor thread: RDMAHANDOVER went out and no reply came back. The
 * recipient may have taken the slots or not, and a guess either way loses
 * keys: thawed here while the recipient owns them, the writes acknowledged
 * here are lost; deleted here while it does not, every key is. So the
 * slots stay frozen (writes wait; none is acknowledged) and the donor asks
 * until it knows: the cluster's view (the recipient broadcasts its claim
 * with a new config epoch at once), and the recipient itself, on fresh
 * connections, with RDMARESOLVE, which also fences the session (a
 * handover still in flight would then be refused, so "not-owned" is
 * final). It asks for as long as it takes, the recipient may be
 * restarting: it answers from nodes.conf then. Returns 1 if the
 * recipient owns the slots, 0 (why in err) if it never will. */
static int migDonorResolve(migSession *s, char *err) {
    long long start = mstime(), logged = start;
    int owned = -1;

    atomicSet(s->d.resolving, 1);
    s->d.keep_frozen_ms = 10000;
    while (owned == -1) {
        migRunOnMain(s, migDonorKeepFrozenSlice);
        if (migRunOnMain(s, migDonorOwnerSlice) == 0) {
            owned = 1;
            break;
        }
        redisContext *rc = migConnectTo(s, 1000, NULL);
        redisReply *r = rc ? migResolveCall(s, rc) : NULL;
        if (r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "owned")) owned = 1;
        else if (r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "not-owned")) owned = 0;
        else if (r && r->type == REDIS_REPLY_ERROR && mstime() - logged >= 10000)
            serverLog(LL_WARNING, "Slot migration: RDMARESOLVE: %s", r->str);
        if (r) freeReplyObject(r);
        if (rc) redisFree(rc);
        if (owned != -1) break;
        if (mstime() - logged >= 10000) {
            logged = mstime();
            serverLog(LL_WARNING, "Slot migration: the outcome of the handover of "
                      "session %s is still unknown after %lld ms: the slots stay "
                      "frozen here until %s:%d answers or the cluster shows its claim",
                      s->sid, logged - start, s->d.host, s->d.port);
        }
        usleep(200000);
    }
    atomicSet(s->d.resolving, 0);
    serverLog(LL_WARNING, "Slot migration: the handover of session %s %s (resolved "
              "in %lld ms)", s->sid, owned ? "happened: the recipient owns the slots"
              : "did not happen: the slots stay here", mstime() - start);
    if (!owned) snprintf(err, XFER_ERR_LEN, "the handover's reply was lost, and the "
                         "recipient says it does not own the slots (RDMARESOLVE)");
    else {
        /* Whatever the lost reply left in the error, the handover happened. */
        pthread_mutex_lock(&s->lock);
        sdsfree(s->error);
        s->error = NULL;
        pthread_mutex_unlock(&s->lock);
    }
    return owned;
}

static void migSetFd(migSession *s, int *field, int fd) {
    pthread_mutex_lock(&s->lock);
    *field = fd;
    pthread_mutex_unlock(&s->lock);
}

/* Transfer (donor thread): the index in s->slots of a slot not sent yet
 * that a command waits to write to (the main thread sets s->d.wanted when it
 * postpones one, migrationSlotWanted), or -1. Each bit is taken once. */
static int migNextWantedSlot(migSession *s, const char *sent_done) {
    for (int w = 0; w < CLUSTER_SLOTS / 64; w++) {
        uint64_t bits = __atomic_load_n(&s->d.wanted[w], __ATOMIC_RELAXED);
        while (bits) {
            int slot = w * 64 + __builtin_ctzll(bits);
            bits &= bits - 1;
            __atomic_fetch_and(&s->d.wanted[w], ~(1ULL << (slot & 63)), __ATOMIC_RELAXED);
            migSlot *ms = migSlotFind(s, slot);
            if (ms && !sent_done[ms - s->slots]) return (int)(ms - s->slots);
        }
    }
    return -1;
}

/* slotfreeze.c: a command waits to write to this frozen slot. While a
 * donor prepares or sends its slots, that slot goes next, alone in its
 * chunk, and at once (even under migration-max-bandwidth). */
void migrationSlotWanted(int slot) {
    migSession *s = mig;
    if (s == NULL || s->role != MIG_ROLE_DONOR ||
        (s->phase != MIG_PHASE_PREPARE && s->phase != MIG_PHASE_TRANSFER)) return;
    uint64_t bit = 1ULL << (slot & 63);
    if (__atomic_fetch_or(&s->d.wanted[slot >> 6], bit, __ATOMIC_RELAXED) & bit) return;
    /* A thread waiting for migration-max-bandwidth (migPace) stops now. */
    pthread_mutex_lock(&s->lock);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* Phase 4: RDMAREGISTER, then every block in one chain of writes. */
static int migDonorTransfer(migSession *s, redisContext *rc, xferConn *conn) {
    sds *argv = NULL;
    int argc = 0, ok = 0;
    size_t nb = 0, k = 0;
    redisReply *r = NULL;
    xferBlockDesc *desc = NULL;
    const void **addrs = NULL;
    uint64_t *lens = NULL;
    xferSegment *segs = NULL, *batch = NULL;
    char *sent_done = NULL;

    s->d.sent_order = zmalloc(sizeof(int) * (s->nmig ? s->nmig : 1));

    /* What each block holds (slotAllocBlockUsedRanges): only that is
     * sent. The slots are frozen and pinned, their page tables still. */
    size_t nseg = 0, nb_all = 0;
    for (int i = 0; i < s->nmig; i++) nb_all += s->slots[i].nblocks;
    uint64_t *used = zcalloc(sizeof(uint64_t) * (nb_all ? nb_all : 1));
    uint64_t *sums = zcalloc(sizeof(uint64_t) * (nb_all ? nb_all : 1));
    size_t *first = zcalloc(sizeof(size_t) * (nb_all + 1));
    size_t *slot_end = zcalloc(sizeof(size_t) * (s->nmig + 1)); /* segs */
    slotAllocRangeInfo *ranges = NULL;
    for (int i = 0, k = 0; i < s->nmig; slot_end[i++] = nseg) {
        for (size_t b = 0; b < s->slots[i].nblocks; b++, k++) {
            void *addr = s->slots[i].blocks[b].local;
            size_t n = slotAllocBlockUsedRanges(addr, NULL, 0);
            ranges = zrealloc(ranges, sizeof(*ranges) * (nseg + n + 1));
            n = slotAllocBlockUsedRanges(addr, ranges + nseg, n);
            first[k] = nseg;
            for (size_t j = 0; j < n; j++) used[k] += ranges[nseg + j].len;
            sums[k] = blkSumRanges(addr, ranges + nseg, n);
            nseg += n;
            s->bytes_total += (long long)used[k];
        }
    }
    first[nb_all] = nseg;

    /* A limit that cannot send it all before the deadline would only
     * time out at the end: say so now, while nothing has been sent. */
    long long limit = migBandwidthLimit();
    if (limit > 0 && s->bytes_total > 0) {
        long long need = (long long)((double)s->bytes_total * 1000.0 / (double)limit);
        if (need > migRemainingMs(s)) {
            migFail(s, "migration-max-bandwidth %lld bytes/s needs %lld ms to send "
                    "the %lld bytes of these slots, more than the %lld ms the "
                    "TIMEOUT leaves: raise the limit (0: none) or the TIMEOUT",
                    limit, need, s->bytes_total, migRemainingMs(s));
            goto done;
        }
    }

    argv = zmalloc(sizeof(sds) * 2);
    argv[argc++] = sdsnew("RDMAREGISTER");
    argv[argc++] = sdsnew(s->sid);
    for (int i = 0; i < s->nmig; i++) {
        migSlot *ms = &s->slots[i];
        argv = zrealloc(argv, sizeof(sds) * (argc + 5 + 4 * ms->nblocks));
        argv[argc++] = sdsfromlonglong(ms->slot);
        argv[argc++] = sdsfromlonglong((long long)ms->nkeys);
        argv[argc++] = sdscatprintf(sdsempty(), "%llu",
                                    (unsigned long long)(uintptr_t)ms->manifest.addr);
        argv[argc++] = sdsfromlonglong((long long)ms->nblocks);
        if (ms->lead != i) {                    /* A member: its lead. */
            argv[argc++] = sdsfromlonglong(s->slots[ms->lead].slot);
            continue;
        }
        for (size_t b = 0; b < ms->nblocks; b++) {
            argv[argc++] = sdscatprintf(sdsempty(), "%llu", (unsigned long long)ms->blocks[b].donor);
            argv[argc++] = sdscatprintf(sdsempty(), "%llu", (unsigned long long)ms->blocks[b].size);
            argv[argc++] = sdscatprintf(sdsempty(), "%llu", (unsigned long long)used[nb + b]);
            argv[argc++] = sdscatprintf(sdsempty(), "%llu", (unsigned long long)sums[nb + b]);
        }
        nb += ms->nblocks;
    }
    r = migCall(s, rc, argc, argv, "RDMAREGISTER");
    migFreeArgv(argv, argc);
    if (r == NULL) goto done;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != nb) {
        migFail(s, "RDMAREGISTER: the recipient described %zu blocks, not %zu",
                r->type == REDIS_REPLY_ARRAY ? r->elements : 0, nb);
        goto done;
    }
    desc = zmalloc(sizeof(*desc) * (nb ? nb : 1));
    addrs = zmalloc(sizeof(void *) * (nb ? nb : 1));
    lens = zmalloc(sizeof(uint64_t) * (nb ? nb : 1));
    segs = zmalloc(sizeof(*segs) * (nseg ? nseg : 1));
    char err[XFER_ERR_LEN] = "";

    for (size_t j = 0; j < nb; j++) {
        redisReply *e = r->element[j];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 4 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_INTEGER ||
            e->element[3]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_STRING) {
            migFail(s, "RDMAREGISTER: block %zu is badly described", j);
            goto done;
        }
        desc[j].id = (uint32_t)e->element[0]->integer;
        desc[j].addr = strtoull(e->element[1]->str, NULL, 10);
        desc[j].rkey = (uint32_t)e->element[2]->integer;
        desc[j].len = (uint64_t)e->element[3]->integer;
    }
    for (int i = 0; i < s->nmig; i++) {
        migSlot *ms = &s->slots[i];
        for (size_t b = 0; b < ms->nblocks; b++, k++) {
            addrs[k] = ms->blocks[b].local;
            lens[k] = ms->blocks[b].size;
            if (desc[k].len != lens[k] || desc[k].id != k) {
                migFail(s, "RDMAREGISTER: block %zu is %llu bytes there, %llu here",
                        k, (unsigned long long)desc[k].len, (unsigned long long)lens[k]);
                goto done;
            }
            for (size_t j = first[k]; j < first[k + 1]; j++) {
                segs[j].local = (char *)ms->blocks[b].local + ranges[j].offset;
                segs[j].len = ranges[j].len;
                segs[j].remote = &desc[k];
                segs[j].remoteOffset = ranges[j].offset;
            }
        }
    }
    if (nb == 0) {                  /* Only empty slots: nothing to send. */
        ok = 1;
        goto done;
    }
    if (xferRegisterSendBlocks(conn, addrs, lens, (uint32_t)nb, err) == -1) {
        migFail(s, "%s", err);
        goto done;
    }
    long long write_ms = migTestDelayMs(&server.migration_test_delay_write);
    if (write_ms > 0) {
        serverLog(LL_NOTICE, "Slot migration: migration-test-delay-write: %zu "
            "blocks registered on both ends, waiting %lld ms before writing",
            nb, write_ms);
        migSleep(s, write_ms);
    }
    /* Slot by slot, in chunks of about MIG_WRITE_CHUNK bytes (with
     * migration-max-bandwidth, 10 ms of it, paced by migPace). A slot
     * some command waits to write to goes next (migNextWantedSlot), in a
     * chunk of such slots only and with no wait for the limit, else the
     * next in slot order; after each chunk, the slots it completed take
     * writes again (migDonorRelaxSent), so a waiting write waits about for
     * its own slot's bytes. The test point migration-test-delay-chunk
     * sleeps after a chunk that completed a slot; it never changes how
     * the chunks are cut. */
    batch = zmalloc(sizeof(*batch) * (nseg ? nseg : 1));
    sent_done = zcalloc(s->nmig ? s->nmig : 1);
    int sent = 0, cur = -1, in_order = 0;
    size_t pos = 0;                 /* The next segment of slot cur. */
    migPacer pacer = {0, 0, 0, 0};
    int cur_wanted = 0;             /* A command waits for slot cur. */
    while (sent < s->nmig) {
        size_t n = 0;
        /* A chunk that starts with a slot a command waits for holds only
         * such slots: the sooner it is sent, the sooner they take writes
         * again. */
        int urgent = cur >= 0 && cur_wanted;
        migPace(s, &pacer, urgent);
        uint64_t chunk = 0, chunk_max = migChunkBytes(migBandwidthLimit());
        int completed = sent;
        while (completed < s->nmig && chunk < chunk_max) {
            if (cur < 0) {
                cur = migNextWantedSlot(s, sent_done);
                cur_wanted = cur >= 0;
                if (cur_wanted && chunk == 0) urgent = 1;
                if (cur < 0 && urgent) break;
                if (cur < 0) {
                    while (sent_done[in_order]) in_order++;
                    cur = in_order;
                }
                /* A member's bytes are its lead's (which is not sent yet:
                 * its members are done with it). */
                cur = s->slots[cur].lead;
                pos = cur ? slot_end[cur - 1] : 0;
            }
            while (pos < slot_end[cur] &&
                   (chunk == 0 || chunk + segs[pos].len <= chunk_max)) {
                batch[n++] = segs[pos];
                chunk += segs[pos++].len;
            }
            if (pos < slot_end[cur]) break;             /* The chunk is full. */
            for (int m = cur; m != -1; m = s->slots[m].next_member) {
                sent_done[m] = 1;
                s->d.sent_order[completed++] = m;
            }
            cur = -1;
        }
        pacer.bytes += (long long)chunk;
        if (migAborting(s)) {
            migFailAborted(s);
            goto done;
        }
        if (n && xferWriteBlocks(conn, batch, n, err) == -1) {
            migDonorTransferFailed(s, rc, err);
            goto done;
        }
        s->bytes_sent += chunk;
        int newly = completed - sent;
        sent = completed;
        __atomic_store_n(&s->d.slots_sent, sent, __ATOMIC_RELEASE);
        long long hold_ms = migTestDelayMs(&server.migration_test_delay_chunk);
        if (hold_ms > 0 && newly > 0) {
            serverLog(LL_NOTICE, "Slot migration: migration-test-delay-chunk: "
                "%d of %d slots sent (%d in this chunk), waiting %lld ms",
                sent, s->nmig, newly, hold_ms);
            migSleep(s, hold_ms);
        }
    }
    if (xferFinish(conn, err) == -1) {
        migDonorTransferFailed(s, rc, err);
        goto done;
    }
    s->bytes = s->bytes_sent;
    ok = 1;
done:
    xferGetStats(conn, &s->tstats);
    if (r) freeReplyObject(r);
    zfree(desc);
    zfree(addrs);
    zfree(lens);
    zfree(segs);
    zfree(used);
    zfree(sums);
    zfree(first);
    zfree(slot_end);
    zfree(ranges);
    zfree(batch);
    zfree(sent_done);
    return ok ? 0 : -1;
}

void *migDonorThread(void *arg) {
    migSession *s = arg;
    redisContext *rc = NULL;
    xferConn *conn = NULL;
    redisReply *r;
    sds *argv = NULL;
    int argc = 0, ok = 0;
    char err[XFER_ERR_LEN] = "";

    migThreadInit("mig_donor");
    migApplyThreadPriority(s);

    /* 2. The recipient opens an import session and its data listener. */
    if ((rc = migDonorConnectRecipient(s)) == NULL) goto fail;
    migSetFd(s, &s->rc_fd, rc->fd);
    char tmo[32];
    snprintf(tmo, sizeof(tmo), "%lld", migRemainingMs(s) + 1000);
    argv = zmalloc(sizeof(sds) * 2);
    argv[argc++] = sdsnew("INITRDMASERVER");
    argv[argc++] = sdsnew("0");
    migAppendRanges(s->bitmap, &argv, &argc);
    argv = zrealloc(argv, sizeof(sds) * (argc + 6));
    argv[argc++] = sdsnew("TRANSPORT");
    argv[argc++] = sdsnew(xferKindName(s->kind));
    argv[argc++] = sdsnew("TIMEOUT");
    argv[argc++] = sdsnew(tmo);
    argv[argc++] = sdsnew("VERSION");
    argv[argc++] = sdsfromlonglong(MIG_PROTOCOL_VERSION);
    r = migCall(s, rc, argc, argv, "INITRDMASERVER");
    migFreeArgv(argv, argc);
    argv = NULL;
    argc = 0;
    if (r == NULL) goto fail;
    redisReply *ft = migReplyField(r, "transport"), *fh = migReplyField(r, "host"),
               *fp = migReplyField(r, "port"), *fk = migReplyField(r, "token"),
               *fs = migReplyField(r, "session");
    xferKind kind;
    if (!ft || !fh || !fp || !fk || !fs || ft->type != REDIS_REPLY_STRING ||
        fh->type != REDIS_REPLY_STRING || fp->type != REDIS_REPLY_INTEGER ||
        fk->type != REDIS_REPLY_STRING || xferParseKind(ft->str, &kind) == -1 ||
        kind == XFER_KIND_AUTO || fs->type != REDIS_REPLY_STRING || !migValidSid(fs->str)) {
        migFail(s, "INITRDMASERVER: unexpected reply from the recipient");
        freeReplyObject(r);
        goto fail;
    }
    pthread_mutex_lock(&s->lock);   /* (STATUS reads it.) */
    memcpy(s->sid, fs->str, XFER_TOKEN_LEN + 1);
    pthread_mutex_unlock(&s->lock);
    snprintf(s->transport, sizeof(s->transport), "%s", xferKindName(kind));
    conn = xferConnect(kind, fh->str, (int)fp->integer, fk->str,
                       kind == XFER_KIND_RDMA && server.rdma_bind[0] ? server.rdma_bind : NULL,
                       migRemainingMsInt(s), err);
    freeReplyObject(r);
    if (conn == NULL) {
        migFail(s, "%s", err);
        goto fail;
    }
    migSetFd(s, &s->data_fd, xferTcpFd(conn));

    /* 3. Prepare. */
    migSetPhase(s, MIG_PHASE_PREPARE);
    migTestDelay(s, &server.migration_test_delay_prepare);
    if (migRunOnMain(s, migDonorPrepareSlice) == -1) goto fail;

    /* 4. Transfer. */
    migSetPhase(s, MIG_PHASE_TRANSFER);
    migTestDelay(s, &server.migration_test_delay_transfer);
    if (migAborting(s)) { migFailAborted(s); goto fail; }
    if (migDonorTransfer(s, rc, conn) == -1) goto fail;
    migSetFd(s, &s->data_fd, -1);
    xferClose(conn);
    conn = NULL;
    /* The bytes have left: writes to the slots run again, recorded. */
    migRunOnMain(s, migDonorCaptureSlice);

    /* 5. The recipient adopts everything (deferred reply of RDMADONE). */
    migSetPhase(s, MIG_PHASE_PATCH);
    migTestDelay(s, &server.migration_test_delay_patch);
    if (migAborting(s)) { migFailAborted(s); goto fail; }
    argc = 0;
    argv = zmalloc(sizeof(sds) * 2);
    argv[argc++] = sdsnew("RDMADONE");
    argv[argc++] = sdsnew(s->sid);
    migAppendRanges(s->bitmap, &argv, &argc);
    r = migCall(s, rc, argc, argv, "RDMADONE");
    migFreeArgv(argv, argc);
    if (r == NULL) goto fail;
    redisReply *fkeys = migReplyField(r, "keys");
    if (!fkeys || fkeys->type != REDIS_REPLY_INTEGER || fkeys->integer != s->keys) {
        migFail(s, "RDMADONE: the recipient adopted %lld keys, %lld were sent",
                fkeys && fkeys->type == REDIS_REPLY_INTEGER ? fkeys->integer : -1, s->keys);
        freeReplyObject(r);
        goto fail;
    }
    freeReplyObject(r);

    /* 6. Handover: the recorded writes replayed there (the slots frozen
     * again), then the recipient owns the slots, then here. */
    migSetPhase(s, MIG_PHASE_HANDOVER);
    if (migRunOnMain(s, migDonorReplayBeginSlice) == -1) goto fail;
    if (migDonorReplay(s, rc) == -1) goto fail;
    migTestDelay(s, &server.migration_test_delay_handover);
    if (migAborting(s)) { migFailAborted(s); goto fail; }
    int owned = migDonorHandover(s, rc);
    if (owned == 0) goto fail;
    if (owned == -1 && !migDonorResolve(s, err)) {
        migFail(s, "%s", err);
        goto fail;
    }
    long long handed_ms = migTestDelayMs(&server.migration_test_delay_handed);
    if (handed_ms > 0) {
        serverLog(LL_NOTICE, "Slot migration: migration-test-delay-handed: the "
                  "recipient owns the slots; waiting %lld ms before applying it "
                  "here", handed_ms);
        migSleep(s, handed_ms);
    }
    migRunOnMain(s, migDonorHandoverSlice);

    /* 7. Delete here. */
    migSetPhase(s, MIG_PHASE_DELETE);
    migTestDelay(s, &server.migration_test_delay_delete);
    migRunOnMain(s, migDonorDeleteSlice);
    ok = 1;

fail:
    if (!ok) {
        migSetPhase(s, MIG_PHASE_ROLLBACK);
        migSetFd(s, &s->data_fd, -1);
        if (conn) xferClose(conn);
        conn = NULL;
        migRunOnMain(s, migDonorRollbackSlice);
        /* Tell the recipient, naming our session (a donor it refused has
         * none, and touches nothing), on a fresh connection if ours broke:
         * it drops what it adopted. If it is gone, its own deadline or the
         * closed connection does the same. */
        if (rc && rc->err) {
            migSetFd(s, &s->rc_fd, -1);
            redisFree(rc);
            rc = NULL;
        }
        if (s->sid[0] && rc == NULL) rc = migConnectTo(s, 2000, NULL);
        if (s->sid[0] && rc) {
            struct timeval tv = {2, 0};
            redisSetTimeout(rc, tv);
            r = migResolveCall(s, rc);
            if (r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "owned"))
                serverLog(LL_WARNING, "Slot migration: BUG: the recipient says it owns "
                          "the slots of session %s, which failed here before its "
                          "handover", s->sid);
            if (r) freeReplyObject(r);
        }
    }
    migSetFd(s, &s->rc_fd, -1);
    if (rc) redisFree(rc);
    if (conn) xferClose(conn);
    atomicSet(s->thread_done, 1);
    return NULL;
}

/* The donor thread has returned: answer the caller, end the session. */
static void migDonorFinish(migSession *s) {
    int ok = s->error == NULL;
    int cancel;

    pthread_join(s->thread, NULL);
    atomicGet(s->cancel, cancel);
    if (s->d.handed_over && !ok) ok = 1;      /* Cannot fail after handover. */
    migSetPhase(s, ok ? MIG_PHASE_DONE : MIG_PHASE_FAILED);
    if (s->d.caller) {
        client *c = s->d.caller;
        if (ok) {
            migFigures f;
            migSessionFigures(s, &f);
            addReplyMapLen(c, 18);
            migAddReplyFigureFields(c, &f, 0);
        } else {
            addReplyErrorFormat(c, "migration failed in %s: %s; both nodes are "
                "back to STABLE, the slots and their keys are still here",
                migPhaseName[s->error_phase], s->error);
        }
        s->d.caller = NULL;
        unblockClient(c);
    }
    migEndSession(s, ok ? MIG_LAST_OK : (cancel ? MIG_LAST_CANCELLED : MIG_LAST_FAILED));
}

/* The session's timer work on the donor (its migTickFn), main thread. */
int migDonorTick(migSession *s) {
    int busy, done;

    /* A recipient that stopped reading leaves the donor thread in a
     * write that waits for the connection's I/O timeout, set at
     * connect: at the deadline, end it here, so that the slots not
     * sent yet do not stay frozen past the TIMEOUT. */
    if (s->phase == MIG_PHASE_TRANSFER && mstime() >= s->deadline_ms) {
        pthread_mutex_lock(&s->lock);
        if (s->data_fd != -1) shutdown(s->data_fd, SHUT_RDWR);
        pthread_mutex_unlock(&s->lock);
    }
    migDonorRelaxSent(s);
    busy = migRunJobSlice(s);
    atomicGet(s->thread_done, done);
    if (done) migDonorFinish(s);
    return busy;
}
