/* The slot migration's session: what the donor and the recipient both use
 * (docs/DESIGN.md, "Threads" and "The protocol"; the protocol is drawn in
 * migration.c's top comment, the files in migsession.h's).
 *
 * Here: the running session (mig) and the last one's record (migLast);
 * a session's start, failure (the first cause wins), phases and end; its
 * figures, as the summary reply, STATUS and INFO show them; the 1 ms
 * timer (migTimerProc) that runs the main thread's share of the work
 * through the role's callback (migDonorTick: the jobs the donor thread
 * posts, in slices of MIG_SLICE_US; migRecipientTick) and watches the
 * threads' priority (migPriorityWatch); deleting keys outside a command, shared by
 * the donor's delete, the recipient's rollback and the stale copies of
 * slots given away; migration-thread-priority; and the nodes.conf
 * variables that let a restarted node tell which slots it gave away or
 * was importing (docs/DESIGN.md, "Replicas, AOF and failures" and "The
 * handover").
 *
 * Threads: everything runs on the main thread, except what a migration
 * thread calls: migFail, migAborting, migRemainingMs*, migSetPhase,
 * and migApplyThreadPriority (each thread, on itself). This file calls
 * neither role: they call it, and give it their timer work as a callback.
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

/* cluster.c, not in cluster.h. */
int clusterSaveConfig(int do_fsync);

/* Names, in STATUS, INFO and the log (migsession.h). */
const char *migPhaseName[] = {
    "idle", "check", "prepare", "transfer", "patch", "link", "handover",
    "delete", "rollback", "done", "failed"
};
const char *migRStateName[] = {
    "listening", "receiving", "adopting", "ready", "owned", "rolling-back"
};
const char *migRoleName[] = {"none", "donor", "recipient"};
const char *migLastName[] = {"none", "ok", "failed", "cancelled"};

migSession *mig = NULL;      /* The running migration, if any. */
static long long migTimerId = -1;

/* What STATUS and INFO show of the last migration (migsession.h). */
struct migLast migLast;

static int migTimerProc(struct aeEventLoop *el, long long id, void *data);

/* ================================ Helpers ================================= */

long long migRemainingMs(migSession *s) {
    long long left = s->deadline_ms - mstime();
    return left > 0 ? left : 0;
}

/* The same, as the int timeout the transport calls take. */
int migRemainingMsInt(migSession *s) {
    long long left = migRemainingMs(s);
    return left > INT_MAX ? INT_MAX : (int)left;
}

int migAborting(migSession *s) {
    int cancel;
    atomicGet(s->cancel, cancel);
    if (cancel) return 1;
    if (mstime() >= s->deadline_ms) {
        s->timed_out = 1;
        return 1;
    }
    return 0;
}

/* Set the error of the session once (the first cause wins). */
void migFail(migSession *s, const char *fmt, ...) {
    va_list ap;
    pthread_mutex_lock(&s->lock);
    if (s->error == NULL) {
        va_start(ap, fmt);
        s->error = sdscatvprintf(sdsempty(), fmt, ap);
        va_end(ap);
        s->error_phase = s->phase;
    }
    pthread_mutex_unlock(&s->lock);
}

/* The cause of an abort, when nothing more precise was recorded. */
void migFailAborted(migSession *s) {
    int cancel;
    atomicGet(s->cancel, cancel);
    if (cancel) {
        migFail(s, "cancelled (RDMAMIGRATESLOTS CANCEL)");
    } else if (s->timed_out || mstime() >= s->deadline_ms) {
        char held[96] = "";
        if (s->throttled_ms)
            snprintf(held, sizeof(held), " (migration-max-bandwidth held the "
                     "transfer back for %lld ms of it)", s->throttled_ms);
        migFail(s, "timed out after %lld ms%s", mstime() - s->start_ms, held);
    }
}

void migSetPhase(migSession *s, int phase) {
    long long now = mstime();
    if (s->phase != MIG_PHASE_IDLE && s->phase < MIG_PHASE_COUNT)
        s->phase_ms[s->phase] += now - s->phase_start_ms;
    s->phase_start_ms = now;
    s->phase = phase;
}

/* A session id as INITRDMASERVER makes them: XFER_TOKEN_LEN lowercase hex
 * digits. */
int migValidSid(const char *sid) {
    size_t n = strlen(sid);
    if (n != XFER_TOKEN_LEN) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((sid[i] >= '0' && sid[i] <= '9') || (sid[i] >= 'a' && sid[i] <= 'f'))) return 0;
    return 1;
}

int migSlotIsSet(const unsigned char *bitmap, int slot) {
    return (bitmap[slot >> 3] >> (slot & 7)) & 1;
}

/* The slots of a bitmap as range arguments ("0-5460", "7"), appended to an
 * argv under construction. */
void migAppendRanges(const unsigned char *bitmap, sds **argv, int *argc) {
    for (int s = 0; s < CLUSTER_SLOTS; s++) {
        if (!migSlotIsSet(bitmap, s)) continue;
        int e = s;
        while (e + 1 < CLUSTER_SLOTS && migSlotIsSet(bitmap, e + 1)) e++;
        *argv = zrealloc(*argv, sizeof(sds) * (*argc + 1));
        (*argv)[(*argc)++] = e == s ? sdsfromlonglong(s) : sdscatprintf(sdsempty(), "%d-%d", s, e);
        s = e;
    }
}

void migFreeArgv(sds *argv, int argc) {
    for (int j = 0; j < argc; j++) sdsfree(argv[j]);
    zfree(argv);
}

/* TRANSPORT <rdma|tcp|auto> or TIMEOUT <ms> at c->argv[*j], the options
 * RDMAMIGRATESLOTS and INITRDMASERVER share. Returns 1 if it was one of
 * them with its value (*j then points at the value), 0 if argv[*j] is
 * something else or lacks its value, -1 after replying an error. */
int migParseCommonOption(client *c, int *j, xferKind *kind, long long *timeout) {
    char *a = c->argv[*j]->ptr;
    robj *v;

    if (*j + 1 >= c->argc) return 0;
    v = c->argv[*j + 1];
    if (!strcasecmp(a, "transport")) {
        if (xferParseKind(v->ptr, kind) == -1) {
            addReplyErrorFormat(c, "Invalid TRANSPORT '%s': use rdma, tcp or auto",
                                (char *)v->ptr);
            return -1;
        }
    } else if (!strcasecmp(a, "timeout")) {
        if (getLongLongFromObject(v, timeout) != C_OK ||
            *timeout <= 0 || *timeout > MIG_MAX_TIMEOUT_MS) {
            addReplyErrorFormat(c, "Invalid TIMEOUT '%s': milliseconds, 1 to %lld",
                                (char *)v->ptr, MIG_MAX_TIMEOUT_MS);
            return -1;
        }
    } else {
        return 0;
    }
    (*j)++;
    return 1;
}

/* Cluster mode, master, and slot affinity: what every command needs. */
int migCheckNode(client *c) {
    if (!server.cluster_enabled) {
        addReplyError(c, "This instance has cluster support disabled: slot "
                         "migration needs cluster mode");
        return C_ERR;
    }
    if (nodeIsSlave(server.cluster->myself)) {
        addReplyError(c, "Slot migration needs a master: this node is a replica");
        return C_ERR;
    }
    return C_OK;
}

void migStartTimer(void) {
    if (migTimerId != -1) return;
    migTimerId = aeCreateTimeEvent(server.el, 1, migTimerProc, NULL, NULL);
    if (migTimerId == AE_ERR) migTimerId = -1;
}

migSession *migNewSession(int role, migTickFn *tick) {
    migSession *s = zcalloc(sizeof(*s));
    s->role = role;
    s->tick = tick;
    s->phase = MIG_PHASE_CHECK;
    s->start_ms = s->phase_start_ms = mstime();
    s->rc_fd = s->data_fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    return s;
}

/* Interrupt the blocking I/O of the session's thread (cancel, deadline):
 * TCP sockets are shut down; an RDMA wait ends at its own timeout. */
void migInterrupt(migSession *s) {
    pthread_mutex_lock(&s->lock);
    if (s->rc_fd != -1) shutdown(s->rc_fd, SHUT_RDWR);
    if (s->data_fd != -1) shutdown(s->data_fd, SHUT_RDWR);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* The mean over the slots of how long their writes waited: the prepare's
 * freeze as each slot saw it, plus the replay's. With the slots frozen
 * together (no replay, or too much recorded) it is write_pause_ms. */
static long long migWritePauseMean(migSession *s) {
    if (s->pause_first_ms == 0 || s->nslots == 0) return s->write_pause_ms;
    return s->pause_slot_ms / s->nslots + (s->write_pause_ms - s->pause_first_ms);
}

/* Record what STATUS/INFO show once the session is over, and free it. */
void migEndSession(migSession *s, int last) {
    if (s->phase != MIG_PHASE_DONE && s->phase != MIG_PHASE_FAILED)
        migSetPhase(s, last == MIG_LAST_OK ? MIG_PHASE_DONE : MIG_PHASE_FAILED);
    migLast.role = s->role;
    migLast.last = last;
    sdsfree(migLast.last_error);
    migLast.last_error = s->error ? sdsdup(s->error) : NULL;
    migSessionFigures(s, &migLast.fig);
    migLast.manifests_rebuilt = s->manifests_rebuilt;
    migLast.manifests_stale = s->manifests_stale;
    migLast.prepare_frozen_ms = s->prepare_frozen_ms;
    migLast.relocated_keys = s->relocated_keys;
    migLast.relocated_bytes = s->relocated_bytes;
    migLast.relocated_ns = s->relocated_ns;
    migLast.isolated_slots = s->isolated_slots;
    migLast.keys_copied = s->keys_copied;
    migLast.bytes_copied = s->bytes_copied;
    migLast.total_keys_copied += s->keys_copied;
    if (last == MIG_LAST_OK) {
        migLast.total_ok++;
        migLast.total_keys += s->keys;
        migLast.total_bytes += s->bytes;
        migLast.total_writes_replayed += s->writes_replayed;
    } else {
        migLast.total_failed++;
    }
    migLast.tstats.wr_posted += s->tstats.wr_posted;
    migLast.tstats.chains_posted += s->tstats.chains_posted;
    migLast.tstats.rdma_bytes_written += s->tstats.rdma_bytes_written;
    migLast.tstats.tcp_bytes_sent += s->tstats.tcp_bytes_sent;
    migLast.tstats.tcp_bytes_received += s->tstats.tcp_bytes_received;
    if (last == MIG_LAST_OK)
        serverLog(LL_NOTICE, "Slot migration (%s) of %d slots done: %lld keys, "
            "%lld bytes over %s in %lld ms (prepare %lld, %lld of it frozen "
            "with %lld manifests built again, %lld keys (%lld bytes) relocated "
            "into blocks in %lld ms, transfer %lld, "
            "patch %lld, link %lld, handover %lld, delete %lld ms; writes "
            "paused %lld ms, %lld ms on average per slot, %lld commands held "
            "up to %lld ms, %lld keys copied out of the transfer, %lld replayed)",
            migRoleName[s->role], s->nslots, s->keys, s->bytes,
            migLast.fig.transport, migLast.fig.elapsed_ms,
            s->phase_ms[MIG_PHASE_PREPARE], s->prepare_frozen_ms,
            s->manifests_rebuilt, s->relocated_keys, s->relocated_bytes,
            s->relocated_ns / 1000000, s->phase_ms[MIG_PHASE_TRANSFER],
            s->phase_ms[MIG_PHASE_PATCH], s->phase_ms[MIG_PHASE_LINK],
            s->phase_ms[MIG_PHASE_HANDOVER], s->phase_ms[MIG_PHASE_DELETE],
            s->write_pause_ms, migWritePauseMean(s), s->held_cmds, s->held_max_ms,
            s->keys_copied, s->writes_replayed);
    else
        serverLog(LL_WARNING, "Slot migration (%s) of %d slots %s in %s: %s",
            migRoleName[s->role], s->nslots,
            last == MIG_LAST_CANCELLED ? "cancelled" : "failed",
            migPhaseName[s->error_phase], s->error ? s->error : "?");

    if (s->role == MIG_ROLE_RECIPIENT) {
        if (s->r.peers_refused)
            serverLog(LL_WARNING, "Slot migration: the data listener dropped %lld "
                      "connections that were not the donor's", s->r.peers_refused);
        migLast.peers_refused += s->r.peers_refused;
        memcpy(migLast.import_sid, s->sid, sizeof(s->sid));
        migLast.import_owned = s->r.rstate == MIG_R_OWNED;
        /* The import's slots were pinned (initRdmaServerCommand):
         * now compaction may have them. With slot-affinity yes it
         * relocates the values that came as DUMP payloads or were written
         * by the replay (placed writes were refused while pinned): they
         * are in the heap. With no, the evacuation sweep takes the slots
         * back to the heap instead. */
        migUnpinAll(s);
        for (int i = 0; i < s->nmig && last == MIG_LAST_OK && slotCompactEnabled(); i++)
            if (s->slots[i].keys.keys_serialized || s->writes_replayed)
                slotCompactVisitFirst(s->slots[i].slot);
    }
    for (int i = 0; i < s->nmig; i++) {
        zfree(s->slots[i].blocks);
        blkBlockImagesFree(s->slots[i].images, s->slots[i].nimages);
        if (s->slots[i].has_keys) blkAdoptedFree(&s->slots[i].keys);
    }
    zfree(s->slots);
    zfree(s->d.sent_order);
    /* The donor frees the copied keys' old bytes once they have left, or
     * at its rollback, always before it deletes: none may be left here. */
    if (s->d.ncopied)
        serverLog(LL_WARNING, "Slot migration: BUG: %zu copied keys' old bytes "
                  "were not freed (left in place)", s->d.ncopied);
    zfree(s->d.copied);
    migCaptureFree(s);
    zfree(s->r.reg_addrs);
    zfree(s->r.reg_lens);
    zfree(s->r.reg_expect);
    zfree(s->r.reg_slot);
    zfree(s->r.patch_queue);
    zfree(s->r.reg_desc);
    sdsfree(s->d.user);
    sdsfree(s->d.pass);
    sdsfree(s->error);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    zfree(s);
    if (mig == s) mig = NULL;
}

/* A session's figures so far (its transport "none" if it has none yet). */
void migSessionFigures(migSession *s, migFigures *f) {
    snprintf(f->transport, sizeof(f->transport), "%s",
             s->transport[0] ? s->transport : "none");
    f->slots = s->nslots;
    f->keys = s->keys;
    f->bytes = s->bytes;
    f->bytes_total = s->bytes_total;
    f->keys_zero_copy = s->keys_zero_copy;
    f->keys_serialized = s->keys_serialized;
    f->bytes_serialized = s->bytes_serialized;
    memcpy(f->phase_ms, s->phase_ms, sizeof(f->phase_ms));
    f->write_pause_ms = s->write_pause_ms;
    f->write_pause_mean_ms = migWritePauseMean(s);
    f->held_cmds = s->held_cmds;
    f->held_max_ms = s->held_max_ms;
    f->writes_replayed = s->writes_replayed;
    f->throttled_ms = s->throttled_ms;
    f->elapsed_ms = mstime() - s->start_ms;
}

/* The fields of a migration's figures, shared by the summary reply (18
 * fields) and STATUS (which adds bytes_total: 19), in their order. */
void migAddReplyFigureFields(client *c, const migFigures *f, int status) {
    addReplyBulkCString(c, "transport"); addReplyBulkCString(c, f->transport);
    addReplyBulkCString(c, "slots"); addReplyLongLong(c, f->slots);
    addReplyBulkCString(c, "keys"); addReplyLongLong(c, f->keys);
    addReplyBulkCString(c, "bytes"); addReplyLongLong(c, f->bytes);
    if (status) {
        addReplyBulkCString(c, "bytes_total"); addReplyLongLong(c, f->bytes_total);
    }
    addReplyBulkCString(c, "keys_zero_copy"); addReplyLongLong(c, f->keys_zero_copy);
    addReplyBulkCString(c, "keys_serialized"); addReplyLongLong(c, f->keys_serialized);
    addReplyBulkCString(c, "bytes_serialized"); addReplyLongLong(c, f->bytes_serialized);
    addReplyBulkCString(c, "prepare_ms"); addReplyLongLong(c, f->phase_ms[MIG_PHASE_PREPARE]);
    addReplyBulkCString(c, "transfer_ms"); addReplyLongLong(c, f->phase_ms[MIG_PHASE_TRANSFER]);
    addReplyBulkCString(c, "patch_ms");
    addReplyLongLong(c, f->phase_ms[MIG_PHASE_PATCH] + f->phase_ms[MIG_PHASE_LINK]);
    addReplyBulkCString(c, "handover_ms"); addReplyLongLong(c, f->phase_ms[MIG_PHASE_HANDOVER]);
    addReplyBulkCString(c, "delete_ms"); addReplyLongLong(c, f->phase_ms[MIG_PHASE_DELETE]);
    addReplyBulkCString(c, "write_pause_ms"); addReplyLongLong(c, f->write_pause_ms);
    addReplyBulkCString(c, "write_pause_mean_ms"); addReplyLongLong(c, f->write_pause_mean_ms);
    addReplyBulkCString(c, "commands_held"); addReplyLongLong(c, f->held_cmds);
    addReplyBulkCString(c, "commands_held_max_ms"); addReplyLongLong(c, f->held_max_ms);
    addReplyBulkCString(c, "writes_replayed"); addReplyLongLong(c, f->writes_replayed);
    addReplyBulkCString(c, "throttled_ms"); addReplyLongLong(c, f->throttled_ms);
}

/* Block a client until the migration answers it (migrationReply*). */
void migBlock(client *c) {
    c->bpop.timeout = 0;
    blockClient(c, BLOCKED_MIGRATION);
}

/* ============================== Deleting keys ============================= */

/* CLIENT PAUSE (CLUSTER FAILOVER pauses writes too): the dataset must not
 * change and nothing may be propagated (propagateNow() asserts it), so the
 * slices that delete or link keys wait for its end. */
int migClientsPaused(void) {
    return checkClientPauseTimeoutAndReturnIfPaused();
}

/* Outside a command, what is propagated goes out one command at a time
 * (as in the expire cycle): wrap a batch of migDeleteKey() calls. */
int migPropagateBegin(void) {
    int prev = server.core_propagates;
    server.core_propagates = 1;
    server.propagate_no_multi = 1;
    return prev;
}

void migPropagateEnd(int prev) {
    server.core_propagates = prev;
    server.propagate_no_multi = 0;
}

/* Delete one key of a slot this node lets go of (the donor after the
 * handover, a recipient dropping a failed import), and, if propagate, tell
 * its replicas and AOF: UNLINK when the delete is lazy (for
 * MIG_DEL_IN_BLOCKS, when lazyfree-lazy-server-del says so), else DEL.
 * Without propagate the caller tells them with one RDMASLOTDROP for the
 * slot (migPropagateSlotDrop). */
void migDeleteKey(redisDb *db, int slot, dictEntry *de, int how, const uint64_t *hash,
                  int propagate) {
    sds key = dictGetKey(de);
    robj *keyobj = createStringObject(key, sdslen(key));
    int lazy = how == MIG_DEL_LAZY;

    if (how == MIG_DEL_IN_BLOCKS) {
        /* The entry is unlinked by pointer (the other keys of its bucket
         * are not compared: a cache miss each was a third of a wholesale
         * delete's main-thread time); its slot is not computed again
         * (crc16), nor its hash when the caller knows it. */
        if (dictSize(db->expires) > 0) dictDelete(db->expires, key);
        int found = dictUnlinkEntry(db->dict, de,
            hash ? *hash : dictGetHash(db->dict, key)) == DICT_OK;
        serverAssert(found);
        slotToKeyDelEntryInSlot(de, db, slot);
        de->key = NULL;
        de->v.val = NULL;
        dictFreeUnlinkedEntry(db->dict, de);
        lazy = server.lazyfree_lazy_server_del;
    } else if (lazy) {
        dbAsyncDelete(db, keyobj);
    } else {
        dbSyncDelete(db, keyobj);
    }
    /* signalModifiedKey() without its slot-compaction hook: the key is
     * gone, and the hook would hash it and look it up again. */
    touchWatchedKey(db, keyobj);
    trackingInvalidateKey(NULL, keyobj, 1);
    if (propagate) {
        propagateDeletion(db, keyobj, lazy);
        propagatePendingCommands();
    }
    decrRefCount(keyobj);
    server.dirty++;
}

/* A wholesale delete walks a slot's keys in list order, and its time went
 * to cache misses: the key's entry, its name (to hash it) and its bucket
 * (a random slot of a table of megabytes). While one key is deleted, the
 * next key's hash is computed and its bucket asked for, the name of the
 * key after it, and the entry after that: each was asked for one key
 * earlier, so none of them waits for memory. (A replica's RDMASLOTDROP
 * walks the same way, and its keys lie in RDB load order, not in the
 * slot's: there the misses are worse.) */
void migDelLookahead(dict *d, dictEntry *de, migDelAhead *la) {
    dictEntry *n1 = blkNextInSlot(de), *n2;

    la->de = n1;
    if (n1 == NULL) return;
    la->hash = dictHashKey(d, dictGetKey(n1));
    blkPrefetchBucket(d, la->hash);
    if ((n2 = blkNextInSlot(n1)) == NULL) return;
    __builtin_prefetch((char *)dictGetKey(n2) - 1);     /* Its header too. */
    if ((n2 = blkNextInSlot(n2)) != NULL) __builtin_prefetch(n2);
}

/* A lazyfree job that frees nothing: the lazyfree thread runs jobs in
 * order, so when it sets the flag, every object queued before it is freed. */
static void migLazyfreeBarrier(void *args[]) {
    atomicSet(*(redisAtomic int *)args[0], 1);
}

/* The same, after returning the pages of the blocks of the slots given up
 * (slotAllocPurgeRetired): tens of ms of kernel time for a big migration,
 * which the main thread does not spend. */
static void migLazyfreePurgeBarrier(void *args[]) {
    slotAllocPurgeRetired();
    atomicSet(*(redisAtomic int *)args[0], 1);
}

/* The s->slots entry of slot (NULL: none), for a walk over the slots in
 * increasing order: s->slots is in slot order and s->stage follows. */
migSlot *migSlotEntry(migSession *s, int slot) {
    while (s->stage < s->nmig && s->slots[s->stage].slot < slot) s->stage++;
    return s->stage < s->nmig && s->slots[s->stage].slot == slot ? &s->slots[s->stage] : NULL;
}

/* Whether the lazyfree thread has freed everything queued before the first
 * call (which queues the barrier job; purge: one that first returns the
 * retired blocks' pages to the OS). Call until it returns 1. */
int migLazyfreeBarrierPassed(migSession *s, int purge) {
    int done;

    if (s->lazyfree_barrier == NULL) {
        s->lazyfree_barrier = zcalloc(sizeof(*s->lazyfree_barrier));
        bioCreateLazyFreeJob(purge ? migLazyfreePurgeBarrier : migLazyfreeBarrier, 1,
                             s->lazyfree_barrier);
    }
    atomicGet(*s->lazyfree_barrier, done);
    if (!done) return 0;
    zfree(s->lazyfree_barrier);
    s->lazyfree_barrier = NULL;
    return 1;
}

void migUnpinAll(migSession *s) {
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
        if (migSlotIsSet(s->bitmap, slot)) slotCompactUnpin(slot);
}

/* Release the blocks of a slot this node holds no keys of, once they hold
 * no live allocation: keys deleted one by one (the donor's slots with a
 * DUMP record, a failed import's blocks) leave the slot's cached empty
 * block behind (the allocator keeps one per slot for its next writes,
 * which will not come here). */
void migReleaseIfEmpty(int slot) {
    slotAllocSlotStat st;

    slotAllocSlotStats(slot, &st);
    if (st.blocks && st.live_allocs == 0)
        slotCompactRetireSlot(slot);
}

/* Whether every slot of ms's unit (its lead and the lead's members; the
 * slot alone without slot groups) had all its keys unlinked: only then
 * may the blocks they share go wholesale. */
int migUnitUnlinked(migSession *s, migSlot *ms) {
    for (int i = ms->lead; i != -1; i = s->slots[i].next_member)
        if (s->slots[i].unlinked != 2) return 0;
    return 1;
}

/* Release the blocks of a bulk slot whose keys were all unlinked, unless
 * keys came back to it meanwhile: a node turned replica loads its master's
 * data, which background compaction may move into the slot's blocks. Then
 * the blocks stay, with the unlinked keys' memory in them (logged). The
 * blocks are its arena's: shared with the other slots of its unit (slot
 * groups), they go only once none of the slots sharing them holds a key
 * in them (the migration's, and a donor's slots of the group that another
 * node serves: migDonorIdleSlots). */
void migReleaseBulkSlot(migSession *s, int slot) {
    if (countKeysInSlot(slot) == 0) {
        slotCompactRetireUnit(slot, s->bitmap);
        return;
    }
    serverLog(LL_WARNING, "Slot migration: slot %d holds keys again (a full "
              "sync?): its blocks stay, with the memory of the keys it let "
              "go of", slot);
}

/* ================== Dropping slots on replicas and AOF ==================== */

/* The donor's delete phase tells its replicas and AOF what it deleted with
 * one RDMASLOTDROP <SYNC|ASYNC> <slot|start-end>... per slice (the slots
 * the slice went through), not a DEL per key (docs/DESIGN.md, "Replicas,
 * AOF and failures"). A slice runs within one event loop iteration, so
 * nothing else enters the stream between its first delete and the
 * command: the command sits where the slice's DELs would have been. It
 * names the slice's slots whole, a slot the slice left half deleted too:
 * the replica drops every key of it at once, ahead of its master, which
 * deletes the rest in its next slices (and sends the slot again). Nothing
 * can add a key to those slots meanwhile (the slots are another node's:
 * writes are redirected; an expiry's DEL finds nothing), and if the
 * master dies first, the promoted replica's copies were stale anyway.
 *
 * A replica must know the command: ours announce "REPLCONF capa
 * rdma-slot-drop" (SLAVE_CAPA_SLOT_DROP, patch 0036). Each slice looks at
 * the replicas attached then: if one lacks the capability, the slice
 * sends DELs, as before. A replica without it that reconnects later with
 * PSYNC would read an RDMASLOTDROP still in the backlog: it gets a full
 * resync instead (migrationPsyncAllowed). The AOF takes the command
 * whenever the replicas do: only this build loads it. */

/* Where the last RDMASLOTDROP ended in the replication stream (0: none
 * since this process started; before that, the backlog held none of it). */
static long long migSlotDropEnd = 0;

/* Whether every replica attached now announced capability capa
 * (SLAVE_CAPA_*). */
static int migReplicasHaveCapa(int capa) {
    listIter li;
    listNode *ln;

    listRewind(server.slaves, &li);
    while ((ln = listNext(&li)) != NULL) {
        client *slave = listNodeValue(ln);
        if ((slave->slave_capa & capa) != capa) return 0;
    }
    return 1;
}

/* Whether every replica attached now understands RDMASLOTDROP. */
int migSlotDropUsable(void) {
    return migReplicasHaveCapa(SLAVE_CAPA_SLOT_DROP);
}

/* Send RDMASLOTDROP for the slots of bitmap (if any) to the replicas and
 * AOF, ASYNC if lazyfree-lazy-server-del (as the DELs it replaces would
 * have been UNLINKs). Between migPropagateBegin() and migPropagateEnd(). */
void migPropagateSlotDrop(const unsigned char *bitmap) {
    sds *ranges = NULL;
    int n = 0;

    migAppendRanges(bitmap, &ranges, &n);
    if (n == 0) return;
    robj **argv = zmalloc(sizeof(robj *) * (n + 2));
    argv[0] = createStringObject("RDMASLOTDROP", 12);
    argv[1] = createStringObject(server.lazyfree_lazy_server_del ? "ASYNC" : "SYNC",
                                 server.lazyfree_lazy_server_del ? 5 : 4);
    for (int j = 0; j < n; j++) argv[j + 2] = createObject(OBJ_STRING, ranges[j]);
    zfree(ranges);      /* The sds now belong to argv's objects. */
    alsoPropagate(0, argv, n + 2, PROPAGATE_AOF | PROPAGATE_REPL);
    propagatePendingCommands();
    migSlotDropEnd = server.master_repl_offset;
    for (int j = 0; j < n + 2; j++) decrRefCount(argv[j]);
    zfree(argv);
}

/* The arenas whose keys will not all be dropped, as a bitmap of arena ids
 * (staying): those with a slot that is not one of bitmap's, holds keys,
 * and is this node's in its view of the cluster (a replica: its
 * master's). A guess for the slots still to come, from a view that may
 * lag: the first commands of a migration's delete often reach a replica
 * before the recipient's claim does. A view that still gives one of
 * bitmap's slots to this node (or its master) is such a view: then no
 * arena is kept, every key in blocks is held, and where the guess was
 * wrong (a group the migration splits) the held keys are freed on the
 * lazyfree thread a few seconds later (slotcompact.c, "Held keys"). One
 * pass over the slots. */
static void migArenasStaying(const unsigned char *bitmap, unsigned char *staying) {
    clusterNode *me = server.cluster_enabled ? server.cluster->myself : NULL;
    clusterNode *mine = me && nodeIsSlave(me) ? me->slaveof : me;

    memset(staying, mine ? 0 : 0xff, CLUSTER_SLOTS / 8);
    for (int t = 0; mine && t < CLUSTER_SLOTS; t++)
        if (migSlotIsSet(bitmap, t) && server.cluster->slots[t] == mine) return;
    for (int t = 0; mine && t < CLUSTER_SLOTS; t++) {
        int a = slotAllocSlotArena(t);
        if (a < 0 || migSlotIsSet(bitmap, t) || countKeysInSlot(t) == 0) continue;
        if (server.cluster->slots[t] == NULL || server.cluster->slots[t] == mine)
            staying[a >> 3] |= 1 << (a & 7);
    }
}

/* RDMASLOTDROP's work (the command is in migration.c): delete every key
 * of the slots of bitmap, lazy freeing values on the lazyfree thread as
 * UNLINK does, and release the emptied slots' blocks. Returns the number of
 * keys deleted.
 *
 * Wholesale, as the donor's delete (docs/DESIGN.md, "Replicas, AOF and
 * failures"): in a slot whose arena will be emptied by this command or
 * the next ones (not migArenasStaying: its other slots this command's,
 * empty or given away), the keys that lie whole in its blocks
 * (slotCompactKeyInBlocks: a walk without sizes, about a third of a free
 * one allocation at a time) are unlinked without a free and held
 * (slotCompactHoldKey), and the arena's blocks go at once when its slots
 * are all empty, with the held keys (slotCompactHeldRelease), whichever
 * command empties the last one, once the lazyfree thread is done with
 * its blocks. The others (and module values, whose free may have to run)
 * are deleted as the command says: ASYNC frees them on the lazyfree
 * thread, and the arena then goes once it is done (serverCron). */
long long migDropSlots(const unsigned char *bitmap, int lazy) {
    redisDb *db = &server.db[0];
    long long deleted = 0;
    unsigned char staying[CLUSTER_SLOTS / 8];
    int known = 0;

    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        dictEntry *de;
        if (!migSlotIsSet(bitmap, slot)) continue;
        if ((*db->slots_to_keys).by_slot[slot].head == NULL) {
            migReleaseIfEmpty(slot);
            continue;
        }
        /* An arena without blocks (slot-affinity no): nothing to hold
         * or release at once. (Every key not held, here or below, is
         * deleted as the command says: ASYNC stays lazy.) */
        slotAllocSlotStat st;
        slotAllocSlotStats(slot, &st);
        if (!known && st.blocks) {
            migArenasStaying(bitmap, staying);
            known = 1;
        }
        int bulk = st.blocks && !st.arena_mixed && st.arena >= 0 &&
                   !migSlotIsSet(staying, st.arena);
        migDelAhead ahead;
        while ((de = (*db->slots_to_keys).by_slot[slot].head) != NULL) {
            sds key = dictGetKey(de);
            robj *val = dictGetVal(de);
            int how = bulk && val->type != OBJ_MODULE && slotCompactKeyInBlocks(de, slot) ?
                      MIG_DEL_IN_BLOCKS : lazy ? MIG_DEL_LAZY : MIG_DEL_SYNC;
            /* Prefetches only: the hash is not passed on, as a delete
             * may run modules' callbacks. */
            migDelLookahead(db->dict, de, &ahead);
            migDeleteKey(db, slot, de, how, NULL, 0);
            if (how == MIG_DEL_IN_BLOCKS) {
                slotCompactHoldKey(slot, key, val);
                migLast.drop_keys_wholesale++;
            } else {
                migLast.drop_keys_freed++;
            }
            deleted++;
        }
        if (!bulk) migReleaseIfEmpty(slot);
    }
    slotCompactHeldRelease();
    return deleted;
}

/* A replica applied an RDMASLOTDROP of its master's stream ending at
 * reploff: remember it for its own replicas' PSYNC after a promotion. */
void migSlotDropApplied(long long reploff) {
    if (reploff > migSlotDropEnd) migSlotDropEnd = reploff;
}

/* ================== Adopting slots on replicas and AOF ==================== */

/* The recipient's counterpart (docs/DESIGN.md, "Replicas, AOF and
 * failures"): each imported slot reaches its replicas and AOF as one
 * RDMASLOTADOPT <slot> <nkeys> <manifest> <nblocks> followed, per block,
 * by <donor-address> <size> <checksum> <ranges> <bytes>: the blocks as
 * the donor sent them (blkBlockImage), on which the replica runs the
 * recipient's checked adopt path (blkAdoptImages), rather than a RESTORE
 * per key (a DUMP per key on the recipient, a RESTORE per key on the
 * replica). The recipient sends it when the slot's link begins and then
 * links the slot's keys in one go, within that event loop iteration
 * (migrecipient.c): the command sits where the slot's RESTOREs would have
 * been, before the replayed writes, and no fork for a replica's full
 * resync, no expiry or eviction (whose DELs must follow the key's
 * arrival) can see the slot half linked. A rollback deletes the linked
 * keys with DELs as before: a slot is linked whole or not at all.
 *
 * The slots of a unit (slot groups: slots that share an arena and moved
 * whole, their keys in the blocks of the unit's lead) go as one command:
 * the lead's, with MEMBERS and each member's slot, key count and manifest
 * after the blocks; the replica adopts and links them all at once.
 *
 * Negotiated like RDMASLOTDROP: "REPLCONF capa rdma-slot-adopt"
 * (SLAVE_CAPA_SLOT_ADOPT, patch 0037), and "capa rdma-unit-adopt" for
 * MEMBERS (SLAVE_CAPA_UNIT_ADOPT, patch 0039: without it a unit of several
 * slots goes as RESTOREs). The recipient keeps the images
 * only if every replica attached at RDMAREGISTER has it, makes no RESTORE
 * payloads only if every replica at RDMADONE has it, and sends the
 * command for a slot only if every replica attached when the slot's link
 * begins has it; otherwise that slot goes as RESTOREs (serialized on the
 * main thread if a replica without it came in between: rare, and
 * logged). A replica without it that PSYNCs over one in the backlog gets
 * a full resync (migrationPsyncAllowed). The AOF takes it whenever the
 * replicas do, and replays it through the same path at load. */

/* Where the last RDMASLOTADOPT (with MEMBERS) ended in the replication
 * stream. */
static long long migSlotAdoptEnd = 0, migUnitAdoptEnd = 0;

/* Whether every replica attached now understands RDMASLOTADOPT, and its
 * MEMBERS (a unit of slots sharing one arena: slot groups, capa
 * rdma-unit-adopt, patch 0039). */
int migSlotAdoptUsable(void) {
    return migReplicasHaveCapa(SLAVE_CAPA_SLOT_ADOPT);
}

int migUnitAdoptUsable(void) {
    return migReplicasHaveCapa(SLAVE_CAPA_SLOT_ADOPT | SLAVE_CAPA_UNIT_ADOPT);
}

/* One bulk string of a command fed to the replication stream as
 * replicationFeedSlaves() feeds it. */
static void migFeedReplBulk(const char *p, size_t len) {
    char aux[LONG_STR_SIZE + 3];
    int n;

    aux[0] = '$';
    n = ll2string(aux + 1, sizeof(aux) - 1, (long long)len);
    aux[n + 1] = '\r';
    aux[n + 2] = '\n';
    feedReplicationBuffer(aux, n + 3);
    feedReplicationBuffer((char *)p, len);
    feedReplicationBuffer(aux + n + 1, 2);
}

/* Send RDMASLOTADOPT for one imported slot to the replicas and AOF.
 * Between migPropagateBegin() and migPropagateEnd(). The images' bytes go
 * to the replication buffer without a copy: each image was taken with
 * room for a replication buffer block's header before its bytes
 * (MIG_IMAGE_HEADROOM), and the block joins the buffer as it is
 * (feedReplicationBufferBlock), its room after them taking what follows;
 * the image gives it away (its alloc is NULL after it). Copying them
 * there, into fresh pages the kernel had to zero, was most of the main
 * thread's time of a recipient with replicas. The replicas receive the
 * protocol replicationFeedSlaves() would send for the command. The AOF
 * takes the command as arguments (copies, as before). */
void migPropagateSlotAdopt(const blkUnitSlot *us, int nus, blkBlockImage *imgs, size_t n) {
    int argc = 5 + 5 * (int)n + (nus > 1 ? 2 + 3 * (nus - 1) : 0);
    int slot = us[0].slot;
    size_t nkeys = us[0].nkeys;
    uint64_t manifest = us[0].manifest;
    char head[4][LONG_STR_SIZE];
    size_t hlen[4];
    /* MEMBERS <n> then slot, nkeys, manifest per member. */
    int ntail = nus > 1 ? 2 + 3 * (nus - 1) : 0;
    sds *tail = zmalloc(sizeof(sds) * (ntail ? ntail : 1));
    if (ntail) {
        tail[0] = sdsnew("MEMBERS");
        tail[1] = sdsfromlonglong(nus - 1);
        for (int i = 1; i < nus; i++) {
            tail[2 + 3 * (i - 1)] = sdsfromlonglong(us[i].slot);
            tail[3 + 3 * (i - 1)] = sdscatprintf(sdsempty(), "%zu", us[i].nkeys);
            tail[4 + 3 * (i - 1)] = sdscatprintf(sdsempty(), "%llu",
                                                 (unsigned long long)us[i].manifest);
        }
    }

    hlen[0] = ll2string(head[0], sizeof(head[0]), slot);
    hlen[1] = ull2string(head[1], sizeof(head[1]), (unsigned long long)nkeys);
    hlen[2] = ull2string(head[2], sizeof(head[2]), (unsigned long long)manifest);
    hlen[3] = ull2string(head[3], sizeof(head[3]), (unsigned long long)n);

    /* Anything pending goes first, as alsoPropagate() would order it. */
    propagatePendingCommands();
    if (server.aof_state != AOF_OFF) {
        robj **argv = zmalloc(sizeof(robj *) * argc);
        int j = 0;

        argv[j++] = createStringObject("RDMASLOTADOPT", 13);
        for (int k = 0; k < 4; k++) argv[j++] = createStringObject(head[k], hlen[k]);
        for (size_t b = 0; b < n; b++) {
            argv[j++] = createObject(OBJ_STRING, sdscatprintf(sdsempty(), "%llu",
                                     (unsigned long long)imgs[b].donor));
            argv[j++] = createObject(OBJ_STRING, sdscatprintf(sdsempty(), "%llu",
                                     (unsigned long long)imgs[b].size));
            argv[j++] = createObject(OBJ_STRING, sdscatprintf(sdsempty(), "%llu",
                                     (unsigned long long)imgs[b].sum));
            argv[j++] = createStringObject(imgs[b].ranges, sdslen(imgs[b].ranges));
            argv[j++] = createStringObject(imgs[b].bytes, imgs[b].len);
        }
        for (int k = 0; k < ntail; k++) argv[j++] = createStringObject(tail[k], sdslen(tail[k]));
        alsoPropagate(0, argv, argc, PROPAGATE_AOF);
        propagatePendingCommands();
        for (j = 0; j < argc; j++) decrRefCount(argv[j]);
        zfree(argv);
    }
    /* The replicas and the backlog (the checks of propagateNow() and
     * replicationFeedSlaves(), which also SELECTs db 0). */
    if (server.replication_allowed && !server.loading &&
        replicationFeedSlavesBegin(server.slaves, 0)) {
        char aux[LONG_STR_SIZE + 3];
        int len;

        aux[0] = '*';
        len = ll2string(aux + 1, sizeof(aux) - 1, argc);
        aux[len + 1] = '\r';
        aux[len + 2] = '\n';
        feedReplicationBuffer(aux, len + 3);
        migFeedReplBulk("RDMASLOTADOPT", 13);
        for (int k = 0; k < 4; k++) migFeedReplBulk(head[k], hlen[k]);
        for (size_t b = 0; b < n; b++) {
            char num[LONG_STR_SIZE];
            migFeedReplBulk(num, ull2string(num, sizeof(num), (unsigned long long)imgs[b].donor));
            migFeedReplBulk(num, ull2string(num, sizeof(num), (unsigned long long)imgs[b].size));
            migFeedReplBulk(num, ull2string(num, sizeof(num), (unsigned long long)imgs[b].sum));
            migFeedReplBulk(imgs[b].ranges, sdslen(imgs[b].ranges));

            /* The bytes: "$<len>\r\n", the block itself, "\r\n". */
            aux[0] = '$';
            len = ll2string(aux + 1, sizeof(aux) - 1, (long long)imgs[b].len);
            aux[len + 1] = '\r';
            aux[len + 2] = '\n';
            feedReplicationBuffer(aux, len + 3);
            serverAssert(imgs[b].alloc != NULL &&
                         imgs[b].bytes == (char *)imgs[b].alloc + MIG_IMAGE_HEADROOM);
            replBufBlock *rb = imgs[b].alloc;
            rb->used = imgs[b].len;
            rb->size = imgs[b].len + imgs[b].room;
            imgs[b].alloc = NULL;
            imgs[b].bytes = NULL;
            feedReplicationBufferBlock(rb);
            feedReplicationBuffer(aux + len + 1, 2);
        }
        for (int k = 0; k < ntail; k++) migFeedReplBulk(tail[k], sdslen(tail[k]));
    }
    migSlotAdoptEnd = server.master_repl_offset;
    if (ntail) migUnitAdoptEnd = server.master_repl_offset;
    for (int k = 0; k < ntail; k++) sdsfree(tail[k]);
    zfree(tail);
}

/* A replica applied an RDMASLOTADOPT of its master's stream ending at
 * reploff: remember it for its own replicas' PSYNC after a promotion. */
void migSlotAdoptApplied(long long reploff, int unit) {
    if (reploff > migSlotAdoptEnd) migSlotAdoptEnd = reploff;
    if (unit && reploff > migUnitAdoptEnd) migUnitAdoptEnd = reploff;
}

/* replication.c, masterTryPartialResynchronization(): a replica that does
 * not understand RDMASLOTDROP (RDMASLOTADOPT) may continue from
 * psync_offset only if the backlog from there holds none. Else it gets a
 * full resync (logged). */
int migrationPsyncAllowed(client *c, long long psync_offset) {
    static const struct {
        int capa;
        const char *cmd, *capa_name;
        long long *end;
    } stream_cmds[] = {
        {SLAVE_CAPA_SLOT_DROP, "RDMASLOTDROP", "rdma-slot-drop", &migSlotDropEnd},
        {SLAVE_CAPA_SLOT_ADOPT, "RDMASLOTADOPT", "rdma-slot-adopt", &migSlotAdoptEnd},
        {SLAVE_CAPA_UNIT_ADOPT, "RDMASLOTADOPT MEMBERS", "rdma-unit-adopt", &migUnitAdoptEnd},
    };

    for (size_t i = 0; i < sizeof(stream_cmds) / sizeof(stream_cmds[0]); i++) {
        if (c->slave_capa & stream_cmds[i].capa || psync_offset >= *stream_cmds[i].end)
            continue;
        serverLog(LL_NOTICE, "Partial resynchronization not accepted: replica %s "
                  "does not understand %s (REPLCONF capa %s), which the backlog "
                  "from its offset %lld holds (up to %lld)",
                  replicationGetSlaveName(c), stream_cmds[i].cmd,
                  stream_cmds[i].capa_name, psync_offset, *stream_cmds[i].end);
        return 0;
    }
    return 1;
}

/* ============================= Recorded writes ============================ */

/* The recorded commands (not the dirty keys, which the delete needs). */
void migCaptureFreeArgs(migSession *s) {
    for (size_t j = 0; j < s->d.cap_nargs; j++) sdsfree(s->d.cap_args[j]);
    zfree(s->d.cap_args);
    s->d.cap_args = NULL;
    s->d.cap_nargs = s->d.cap_size = s->d.cap_bytes = 0;
}

void migCaptureFree(migSession *s) {
    migCaptureFreeArgs(s);
    if (s->d.dirty_keys) dictRelease(s->d.dirty_keys);
    s->d.dirty_keys = NULL;
    s->d.capturing = 0;
}

/* ============================ Migration threads =========================== */

/* What each migration thread does first, as bio.c's threads do: a name of
 * its own, so that top, perf and /proc tell the donor's thread, the
 * recipient's receiving thread and its patcher apart; killable, like bio's
 * and the I/O threads; and SIGALRM blocked, so that the watchdog's signal
 * (watchdog-period) lands on the main thread, whose stack it is meant to
 * log. Names fit the kernel's 15 characters. */
void migThreadInit(const char *title) {
    sigset_t sigset;

    redis_set_thread_title(title);
    makeThreadKillable();
    sigemptyset(&sigset);
    sigaddset(&sigset, SIGALRM);
    if (pthread_sigmask(SIG_BLOCK, &sigset, NULL))
        serverLog(LL_WARNING, "Slot migration: cannot mask SIGALRM in the "
                  "%s thread: %s", title, strerror(errno));
}

/* ========================= Migration thread priority ====================== */

/* Applies migration-thread-priority to the calling thread, a migration
 * thread. Both threads copy and check hundreds of MB as fast as a CPU
 * allows; on a host whose CPUs are all busy serving clients they take
 * those CPUs' time from the main threads, and clients see it as lost
 * throughput and worse latency for the seconds a migration lasts. "low"
 * and "idle" make the kernel prefer the main threads (a main thread that
 * wakes up for a request preempts an idle-class thread at once) at the
 * price of a longer migration, and so of a longer write pause on the
 * migrating slots, when the CPUs are busy; on a host with no CPU time to
 * spare at all they can starve the migration into its TIMEOUT. "auto"
 * runs the thread idle too, and the main thread raises it back to normal
 * if it starves (migPriorityWatch): that needs the right to leave the idle
 * class (CAP_SYS_NICE, root, or an RLIMIT_NICE above the server's nice
 * value), so without it auto runs the thread at normal priority. Only
 * Linux sets nice values and policies per thread; elsewhere the setting is
 * ignored (with a log line) rather than renice the whole server. Failures
 * are logged, never fatal: the migration then runs at normal priority. */
void migApplyThreadPriority(migSession *s) {
    int prio = server.migration_thread_priority;
#ifdef __linux__
    int tid = (int)syscall(SYS_gettid);
    atomicSet(s->tid, tid);
    if (prio == MIG_PRIO_NORMAL) return;
    if (prio == MIG_PRIO_AUTO) {
        /* Can we come back? Leaving SCHED_IDLE is allowed when lowering
         * the nice value by one would be; try that (and undo it). */
        errno = 0;
        int nice = getpriority(PRIO_PROCESS, (id_t)tid);
        struct rlimit rl;
        int can = getrlimit(RLIMIT_NICE, &rl) == 0 &&
                  (rl.rlim_cur == RLIM_INFINITY || (long long)rl.rlim_cur >= 20 - nice);
        if (!can && errno == 0 && setpriority(PRIO_PROCESS, (id_t)tid, nice - 1) == 0) {
            can = 1;
            setpriority(PRIO_PROCESS, (id_t)tid, nice);
        }
        if (!can) {
            serverLog(LL_NOTICE, "Slot migration: migration-thread-priority "
                      "auto runs the migration thread at normal priority: the "
                      "server may not raise a thread back from the idle class "
                      "(it needs CAP_SYS_NICE or RLIMIT_NICE >= %d)", 20 - nice);
            return;
        }
    }
#ifdef SCHED_IDLE
    if (prio == MIG_PRIO_IDLE || prio == MIG_PRIO_AUTO) {
        struct sched_param sp = {0};
        if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) == 0) {
            if (prio == MIG_PRIO_AUTO) atomicSet(s->prio_idle, 1);
            return;
        }
        /* auto falls back to normal priority, idle to the lowest nice. */
        serverLog(LL_WARNING, "Slot migration: cannot put the migration "
                  "thread in the SCHED_IDLE class (%s); %s", strerror(errno),
                  prio == MIG_PRIO_AUTO ? "it runs at normal priority" : "trying nice 19");
        if (prio == MIG_PRIO_AUTO) return;
    }
#endif
    if (prio == MIG_PRIO_AUTO) return;
    int nice = prio == MIG_PRIO_IDLE ? 19 : 10;
    if (setpriority(PRIO_PROCESS, (id_t)tid, nice) != 0)
        serverLog(LL_WARNING, "Slot migration: cannot set the migration "
                  "thread's nice value to %d (%s); it runs at normal "
                  "priority", nice, strerror(errno));
#else
    UNUSED(s);
    if (prio != MIG_PRIO_NORMAL && prio != MIG_PRIO_AUTO)
        serverLog(LL_NOTICE, "Slot migration: migration-thread-priority is "
                  "only applied on Linux; the migration thread runs at normal "
                  "priority");
#endif
}

/* The scheduler's account of a thread of ours: nanoseconds it ran and
 * nanoseconds it waited, ready, for a CPU (/proc/.../schedstat). */
static int migThreadSchedStat(int tid, unsigned long long *cpu_ns,
                              unsigned long long *wait_ns) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", tid);
    FILE *fp = fopen(path, "r");
    if (fp == NULL) return -1;
    int n = fscanf(fp, "%llu %llu", cpu_ns, wait_ns);
    fclose(fp);
    if (n == 2) return 0;
    errno = EINVAL;     /* Not ENOENT: the file is there, its format is not. */
    return -1;
}

/* migration-thread-priority auto, from the main thread's timer: a thread
 * in the idle class runs only on CPU time nothing else wants, which is
 * what clients want while a CPU has time to spare, and a migration that
 * never ends when it has none (other processes, a client on the same
 * host, a busy main thread). So every MIG_PRIO_WATCH_MS we look at how
 * the thread fared: if it was ready to run for more than half the window
 * and ran for less than a tenth of it, it is starving, and it goes back to
 * normal priority for the rest of this migration (logged, and counted in
 * INFO migration_thread_priority_raised). A thread that waits for its
 * peer or for the main thread is not ready to run and is left alone. If
 * the account cannot be read, the thread is raised at once: auto never
 * risks a starved migration. */
static void migPriorityWatch(migSession *s) {
#if defined(__linux__) && defined(SCHED_IDLE)
    int idle, done, tid, tid2;
    atomicGet(s->prio_idle, idle);
    if (!idle) return;
    long long now = mstime();
    if (s->watch_ms && now - s->watch_ms < MIG_PRIO_WATCH_MS) return;
    atomicGet(s->thread_done, done);
    atomicGet(s->tid, tid);
    atomicGet(s->tid2, tid2);
    if (done) return;
    unsigned long long cpu = 0, waited = 0, cpu2 = 0, waited2 = 0;
    int starving = 0, unreadable = migThreadSchedStat(tid, &cpu, &waited) != 0;
    if (unreadable && errno == ENOENT) {
        /* The thread returned between the two looks: nothing to watch. */
        atomicSet(s->prio_idle, 0);
        return;
    }
    /* The recipient's patcher (from the start of the transfer): it counts
     * from the first look that found it; a patcher that has returned
     * counts no more. */
    int have2 = tid2 && migThreadSchedStat(tid2, &cpu2, &waited2) == 0;
    if (!unreadable && s->watch_ms) {
        /* The migration starves when its threads together ran less than
         * a tenth of the window while one of them waited for a CPU more
         * than half of it. (Together: two threads of one migration share
         * the CPU time left over; each alone may get little of it while
         * the migration goes on well.) */
        unsigned long long win = (unsigned long long)(now - s->watch_ms) * 1000000ULL;
        unsigned long long ran = cpu - s->watch_cpu_ns, wait = waited - s->watch_wait_ns;
        if (have2 && s->watch_cpu2_ns) {
            unsigned long long wait2 = waited2 - s->watch_wait2_ns;
            ran += cpu2 - s->watch_cpu2_ns;
            if (wait2 > wait) wait = wait2;
        }
        starving = wait > win / 2 && ran < win / 10;
        if (starving)
            serverLog(LL_NOTICE, "Slot migration: the migration's threads ran "
                      "%llu ms and waited up to %llu ms for a CPU in the last %lld ms; "
                      "they leave the idle class for the rest of this migration "
                      "(migration-thread-priority auto)",
                      ran / 1000000ULL, wait / 1000000ULL, now - s->watch_ms);
    }
    s->watch_ms = now;
    s->watch_cpu_ns = cpu;
    s->watch_wait_ns = waited;
    s->watch_cpu2_ns = have2 ? cpu2 : 0;
    s->watch_wait2_ns = have2 ? waited2 : 0;
    if (!starving && !unreadable) return;
    if (unreadable)
        serverLog(LL_NOTICE, "Slot migration: cannot read the migration "
                  "thread's scheduling figures (%s); it leaves the idle class "
                  "(migration-thread-priority auto)", strerror(errno));
    atomicSet(s->prio_idle, 0);
    struct sched_param sp = {0};
    if (sched_setscheduler((pid_t)tid, SCHED_OTHER, &sp) == 0) {
        migLast.prio_raised++;
    } else if (errno != ESRCH) {    /* ESRCH: it has just returned. */
        serverLog(LL_WARNING, "Slot migration: cannot raise the migration "
                  "thread to normal priority (%s); it stays in the idle class",
                  strerror(errno));
    }
    /* The patcher, whether it exists yet or not: it inherits the policy
     * of the thread that starts it. */
    if (tid2) sched_setscheduler((pid_t)tid2, SCHED_OTHER, &sp);
#else
    UNUSED(s);
#endif
}

/* ================================ The timer =============================== */

static int migTimerProc(struct aeEventLoop *el, long long id, void *data) {
    UNUSED(el); UNUSED(id); UNUSED(data);
    migSession *s = mig;
    if (s == NULL) {
        migTimerId = -1;
        return AE_NOMORE;
    }
    migPriorityWatch(s);
    int busy = s->tick(s);
    if (mig == NULL) {
        migTimerId = -1;
        return AE_NOMORE;
    }
    /* While there is main thread work, the next slice comes right after
     * the clients' events of this loop iteration; else look again in 1 ms. */
    return busy ? 0 : 1;
}

/* ======================= The slots of the running session ================= */

/* clustersetslots.c: a slot of the running import. Its CLUSTER SETSLOTS
 * NODE <myself> is refused (only RDMAHANDOVER gives it to this node), and
 * RDMAHANDOVER's bumps the epoch as for an IMPORTING slot. */
int migrationImportsSlot(int slot) {
    migSession *s = mig;
    return s && s->role == MIG_ROLE_RECIPIENT && slot >= 0 && slot < CLUSTER_SLOTS &&
           migSlotIsSet(s->bitmap, slot);
}

/* The cluster bus told this node that another owns slots it still has
 * keys in (clusterUpdateSlotsConfigWith, cluster.c). Upstream deletes them
 * at once, without telling replicas or the AOF; for a migration's slots
 * past the transfer, the delete phase does it, in slices, with DELs. */
int migrationDeletesSlot(int slot) {
    migSession *s = mig;
    return s && s->role == MIG_ROLE_DONOR && migSlotIsSet(s->bitmap, slot) &&
           (s->phase == MIG_PHASE_PATCH || s->phase == MIG_PHASE_HANDOVER ||
            s->phase == MIG_PHASE_DELETE);
}

/* ================ Slots given away, remembered in nodes.conf ================ */

/* The slots this node handed over as a donor (phase 6), or that its shard
 * lost to another node's newer claim (on a replica: its master's slots;
 * clusterUpdateSlotsConfigWith), and that the shard has not owned again
 * since. A donor that dies after its handover comes back from an RDB or
 * AOF that may still hold its copies of those slots' keys (its delete
 * phase had not finished, or had not reached the disk), and its replica,
 * promoted, holds the copies its master had not deleted yet. Upstream's
 * startup check (verifyClusterConfigWithData) would mark such a slot
 * IMPORTING: the stale copies would then be served to ASKING clients and
 * could be moved back over the owner's newer keys by `redis-cli --cluster
 * fix`. So the set is saved in nodes.conf, as a "migration-given-slots"
 * variable of its vars line, in the same write (fsynced) as the new owner,
 * and at startup, or when a replica takes its master's place, the keys of
 * those slots, if another node owns them and this one does not import
 * them, are deleted (migrationDropStaleCopies). A slot leaves the set once
 * this node or its master owns it again (at the next save). */
static unsigned char migGiven[CLUSTER_SLOTS / 8];

void migGiveSlots(const unsigned char *bitmap) {
    for (int j = 0; j < CLUSTER_SLOTS / 8; j++) migGiven[j] |= bitmap[j];
}

/* The recipient's side of the same problem. From RDMADONE on, the keys it
 * adopts are in its keyspace, so in its AOF (as RESTOREs), in any RDB it
 * saves and in its replicas, before the slots are its own. Killed then, it
 * would come back with them, and upstream's startup check would mark their
 * slots IMPORTING: `redis-cli --cluster fix` could then give a slot to
 * these stale copies. So the import's slots are saved in nodes.conf
 * ("migration-importing-slots", fsynced) before the first key is linked,
 * and forgotten in the same write that makes them this node's, or once a
 * rollback has deleted the keys; at startup, the keys of such a slot this
 * node does not own are deleted (migrationDropStaleCopies). The session of
 * the last import handed over is saved with the new owners
 * ("migration-import-session"): a donor that lost RDMAHANDOVER's reply
 * asks RDMARESOLVE, which this node answers after a restart too. */
static unsigned char migImporting[CLUSTER_SLOTS / 8];
char migImportSid[XFER_TOKEN_LEN + 1];

int migRememberImporting(const unsigned char *bitmap) {
    for (int j = 0; j < CLUSTER_SLOTS / 8; j++) migImporting[j] |= bitmap[j];
    return clusterSaveConfig(1);
}

/* The import ended (its slots are this node's, or its keys are gone): the
 * next nodes.conf write leaves its slots out. */
void migForgetImporting(const unsigned char *bitmap) {
    for (int j = 0; j < CLUSTER_SLOTS / 8; j++) migImporting[j] &= ~bitmap[j];
    clusterDoBeforeSleep(CLUSTER_TODO_SAVE_CONFIG);
}

/* clusterUpdateSlotsConfigWith(): a slot of this node's shard (its own, or
 * its master's) now belongs to another node. */
void migrationSlotLost(int slot) {
    migGiven[slot >> 3] |= 1 << (slot & 7);
}

/* The slots of bitmap as "0-499,600" appended to s. */
static sds migCatRanges(sds s, const unsigned char *bitmap) {
    sds *ranges = NULL;
    int n = 0;

    migAppendRanges(bitmap, &ranges, &n);
    for (int j = 0; j < n; j++) {
        if (j) s = sdscatlen(s, ",", 1);
        s = sdscatsds(s, ranges[j]);
    }
    migFreeArgv(ranges, n);
    return s;
}

static int migAnySlot(const unsigned char *bitmap) {
    for (int j = 0; j < CLUSTER_SLOTS / 8; j++) if (bitmap[j]) return 1;
    return 0;
}

/* clusterSaveConfig(): append " migration-given-slots <ranges>" to the vars
 * line, for the given slots this node's shard does not own (again), and
 * the import's: " migration-importing-slots <ranges>" and
 * " migration-import-session <id>". */
sds migrationConfigVars(sds ci) {
    clusterNode *me = server.cluster->myself;
    int any = 0;

    if (migAnySlot(migImporting))
        ci = migCatRanges(sdscat(ci, " migration-importing-slots "), migImporting);
    if (migImportSid[0]) ci = sdscatprintf(ci, " migration-import-session %s", migImportSid);

    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        if (!migSlotIsSet(migGiven, slot)) continue;
        clusterNode *owner = server.cluster->slots[slot];
        /* (Not while its handover is under way: with the recipient
         * unknown here, its claim arrives later through the bus.) */
        if (owner && (owner == me || owner == me->slaveof) && !migrationDeletesSlot(slot))
            migGiven[slot >> 3] &= ~(1 << (slot & 7));
        else
            any = 1;
    }
    if (!any) return ci;
    return migCatRanges(sdscat(ci, " migration-given-slots "), migGiven);
}

/* clusterLoadConfig(): a variable of the vars line. Returns 1 if it is
 * ours. A value that does not parse is logged and ignored: the startup
 * check then treats the slots as upstream does (nothing is deleted). */
int migrationLoadConfigVar(const char *name, const char *value) {
    unsigned char bitmap[CLUSTER_SLOTS / 8] = {0};
    const char *p = value;

    if (!strcasecmp(name, "migration-import-session")) {
        if (migValidSid(value)) snprintf(migImportSid, sizeof(migImportSid), "%s", value);
        else serverLog(LL_WARNING, "Slot migration: ignoring nodes.conf variable "
                       "migration-import-session '%s': not a session id", value);
        return 1;
    }
    if (strcasecmp(name, "migration-given-slots") &&
        strcasecmp(name, "migration-importing-slots")) return 0;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0 || a >= CLUSTER_SLOTS) goto bad;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1 || b < a || b >= CLUSTER_SLOTS) goto bad;
            p = end;
        }
        for (long s = a; s <= b; s++) bitmap[s >> 3] |= 1 << (s & 7);
        if (*p == ',') p++;
        else if (*p) goto bad;
    }
    memcpy(strcasecmp(name, "migration-given-slots") ? migImporting : migGiven,
           bitmap, sizeof(bitmap));
    return 1;

bad:
    serverLog(LL_WARNING, "Slot migration: ignoring nodes.conf variable "
              "%s '%s': not a list of slots and ranges", name, value);
    return 1;
}

/* A master's keys of a slot its shard gave away, that another node owns and
 * this one does not import, are stale copies: delete them (DELs to the
 * replicas and AOF, as the delete phase would have) and release their
 * slots' blocks. Called at startup (verifyClusterConfigWithData, before
 * upstream's check) and when a replica takes over from its master
 * (clusterFailoverReplaceYourMaster), at once, as upstream deletes the
 * keys of a slot it lost. */
void migrationDropStaleCopies(void) {
    redisDb *db = &server.db[0];
    unsigned char done[CLUSTER_SLOTS / 8] = {0};
    unsigned long long dropped = 0;
    int slots = 0, prev;

    if (nodeIsSlave(server.cluster->myself)) return;
    if (migClientsPaused()) {
        serverLog(LL_WARNING, "Slot migration: clients are paused: the stale "
                  "copies of slots given away, if any, are deleted at the next start");
        return;
    }
    prev = migPropagateBegin();
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        clusterNode *owner = server.cluster->slots[slot];
        /* An import that never became this node's (see migImporting). */
        int unfinished = migSlotIsSet(migImporting, slot) && owner != server.cluster->myself &&
                         !migrationImportsSlot(slot);
        if (unfinished) migImporting[slot >> 3] &= ~(1 << (slot & 7));
        if (countKeysInSlot(slot) == 0) continue;
        if (!unfinished && (!migSlotIsSet(migGiven, slot) ||
            owner == NULL || owner == server.cluster->myself ||
            server.cluster->importing_slots_from[slot] != NULL ||
            migrationImportsSlot(slot))) continue;
        dictEntry *de;
        while ((de = (*db->slots_to_keys).by_slot[slot].head) != NULL) {
            migDeleteKey(db, slot, de, MIG_DEL_SYNC, NULL, 1);
            dropped++;
        }
        migReleaseIfEmpty(slot);
        done[slot >> 3] |= 1 << (slot & 7);
        slots++;
    }
    migPropagateEnd(prev);
    if (slots == 0) return;
    sds list = migCatRanges(sdsempty(), done);
    if (sdslen(list) > 512) {   /* A log line holds 1 KB. */
        sdsrange(list, 0, 511);
        list = sdscat(list, "...");
    }
    serverLog(LL_WARNING, "Slot migration: deleted %llu stale keys of %d slots "
              "handed over to other nodes (by this node or its former "
              "master), or of an import that never ended here: %s", dropped, slots, list);
    sdsfree(list);
    clusterDoBeforeSleep(CLUSTER_TODO_SAVE_CONFIG);
}
