/* The recipient of a slot migration: its import session (docs/DESIGN.md,
 * "The protocol", "The handover" and "Integrity"; the steps are numbered
 * as in migration.c's top comment).
 *
 * Here: the commands a donor sends (INITRDMASERVER opens the session,
 * RDMAREGISTER, RDMADONE, RDMAREPLAY feed it, RDMAHANDOVER ends it with
 * the slots this node's, RDMARESOLVE tells a donor what became of it),
 * all on the main thread; the session's state machine (MIG_R_*,
 * migRecipientTo); the recipient thread (migRecipientThread: accepts the
 * donor's data connection, registers the blocks, waits for the transfer)
 * and its patcher (migRecipientPatcher: checks, adopts and patches each
 * slot as its blocks become whole); and the main thread's part, from the
 * timer (migRecipientTick): the deferred replies, linking the keys in
 * slices, and the rollback of a failed import.
 *
 * Nothing here calls the donor's code (migdonor.c): what both roles use
 * is in migsession.c.
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

/* ============================= The state machine ========================== */

/* The only way a recipient session changes state: the transitions not
 * drawn above are bugs. */
static void migRecipientTo(migSession *s, int to) {
    static const unsigned allowed[] = {
        [MIG_R_LISTENING] = 1u << MIG_R_RECEIVING | 1u << MIG_R_ROLLING_BACK,
        [MIG_R_RECEIVING] = 1u << MIG_R_ADOPTING | 1u << MIG_R_ROLLING_BACK,
        [MIG_R_ADOPTING] = 1u << MIG_R_READY | 1u << MIG_R_ROLLING_BACK,
        [MIG_R_READY] = 1u << MIG_R_OWNED | 1u << MIG_R_ROLLING_BACK,
        [MIG_R_OWNED] = 0,
        [MIG_R_ROLLING_BACK] = 0,
    };
    serverAssert(s->role == MIG_ROLE_RECIPIENT && (allowed[s->r.rstate] & (1u << to)));
    s->r.rstate = to;
}

/* ============================ Recipient: thread =========================== */

static int migWaitFor(migSession *s, int *flag) {
    pthread_mutex_lock(&s->lock);
    while (!*flag && !migAborting(s)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&s->cond, &s->lock, &ts);
    }
    int ok = *flag;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* Recipient thread: adopt, check and patch one slot whose blocks are all
 * here. 0, or -1 with err set. */
static int migRecipientPatchSlot(migSession *s, migSlot *ms, char *err) {
    sds perr = NULL;

    /* Every byte shipped, as sent, before anything of the slot is used. */
    for (size_t b = 0; b < ms->nblocks; b++) {
        uint64_t sum;
        if (blkImageSum(ms->blocks[b].local, ms->blocks[b].size, &sum) == -1) {
            snprintf(err, XFER_ERR_LEN, "slot %d: block %zu was rejected (bad allocator "
                        "metadata)", ms->slot, b);
            return -1;
        }
        if (sum != ms->blocks[b].sum) {
            snprintf(err, XFER_ERR_LEN, "slot %d: block %zu: checksum mismatch (XXH3 "
                     "%016llx sent, %016llx received): its bytes changed on the way; "
                     "nothing of the slot was adopted", ms->slot, b,
                     (unsigned long long)ms->blocks[b].sum, (unsigned long long)sum);
            return -1;
        }
    }
    /* For RDMASLOTADOPT: the images as sent, before adoption and the
     * patch rewrite them (blkBlockImageTake says why these). A unit of
     * several slots needs its MEMBERS understood (s->r.keep_images says
     * which), else its slots go as RESTOREs. */
    if (s->r.keep_images == 2 || (s->r.keep_images && ms->next_member == -1)) {
        ms->images = zcalloc(sizeof(blkBlockImage) * (ms->nblocks ? ms->nblocks : 1));
        ms->nimages = ms->nblocks;
        for (size_t b = 0; b < ms->nblocks; b++) {
            if (blkBlockImageTake(&ms->blocks[b], &ms->images[b], MIG_IMAGE_HEADROOM,
                                  MIG_IMAGE_TAILROOM) == -1) {
                snprintf(err, XFER_ERR_LEN, "slot %d: block %zu was rejected (bad "
                         "allocator metadata)", ms->slot, b);
                return -1;
            }
        }
    }
    for (size_t b = 0; b < ms->nblocks; b++) {
        if (blkAdoptBlock(ms->slot, ms->blocks[b].local) == -1) {
            snprintf(err, XFER_ERR_LEN, "slot %d: block %zu was rejected (bad allocator "
                        "metadata)", ms->slot, b);
            return -1;
        }
        ms->adopted = (int)b + 1;
    }
    /* The slot, then its unit's members (their manifests and keys are in
     * these blocks): each is checked and patched against the same map,
     * recording what its keys own in the lead's bitmaps (no allocation
     * may belong to two keys of the unit), and the sweep frees what none
     * of them owns. A sweep per slot would free the others' keys. */
    for (int i = (int)(ms - s->slots); i != -1; i = s->slots[i].next_member) {
        migSlot *m = &s->slots[i];
        m->has_keys = 1;
        if (blkPatchSlot(m->slot, ms->blocks, ms->nblocks, m->manifest_addr,
                         m->nkeys, m == ms ? NULL : &ms->keys, &m->keys, &perr) == C_ERR) {
            snprintf(err, XFER_ERR_LEN, "slot %d: %s", m->slot, perr);
            sdsfree(perr);
            return -1;
        }
        s->keys += m->keys.nkeys;
        s->keys_zero_copy += m->keys.keys_zero_copy;
        s->keys_serialized += m->keys.keys_serialized;
    }
    blkSweepGarbage(&ms->keys, ms->blocks, ms->nblocks);
    return 0;
}

/* migration-test-corrupt (migsession.h): parse "" | "header <nth>" |
 * "manifest <nth>" | "random <nth> <seed> <count>" (any case). */
int migParseTestCorrupt(const char *spec, struct migCorrupt *out, const char **err) {
    struct migCorrupt c = {MIG_CORRUPT_NONE, 0, 0, 0};
    int argc = 0, ok = 0;
    sds *argv = sdssplitargs(spec, &argc);

    if (argv == NULL) {
        *err = "migration-test-corrupt: unbalanced quotes";
        return -1;
    }
    if (argc == 0) {
        ok = 1;
    } else if (!strcasecmp(argv[0], "header") && argc == 2) {
        c.what = MIG_CORRUPT_HEADER;
    } else if (!strcasecmp(argv[0], "manifest") && argc == 2) {
        c.what = MIG_CORRUPT_MANIFEST;
    } else if (!strcasecmp(argv[0], "random") && argc == 4) {
        c.what = MIG_CORRUPT_RANDOM;
    } else {
        *err = "syntax: migration-test-corrupt \"header|manifest <nth>\" | "
               "\"random <nth> <seed> <count>\" | \"\" (off)";
        goto done;
    }
    if (argc == 0) goto done;
    if (!string2ll(argv[1], sdslen(argv[1]), &c.nth) || c.nth < 0 || c.nth >= CLUSTER_SLOTS) {
        *err = "<nth> is a slot's rank in the import, 0 to 16383";
        goto done;
    }
    if (c.what == MIG_CORRUPT_RANDOM &&
        (!string2ll(argv[2], sdslen(argv[2]), &c.seed) ||
         !string2ll(argv[3], sdslen(argv[3]), &c.count) || c.count < 1 || c.count > 1000000)) {
        *err = "<seed> is an integer, <count> 1 to 1000000";
        goto done;
    }
    ok = 1;
done:
    sdsfreesplitres(argv, argc);
    if (ok && out) *out = c;
    return ok ? 0 : -1;
}

/* migration-test-corrupt: damage the received blocks of one slot. */
static void migTestCorruptSlot(const struct migCorrupt *corrupt, migSlot *ms) {
    unsigned char *first = (unsigned char *)ms->blocks[0].local;

    if (corrupt->what == MIG_CORRUPT_HEADER) {
        memset(first, 0xff, 64);
    } else if (corrupt->what == MIG_CORRUPT_MANIFEST) {
        for (size_t b = 0; b < ms->nblocks; b++) {
            blkMap *m = &ms->blocks[b];
            if (ms->manifest_addr >= m->donor && ms->manifest_addr - m->donor < m->size) {
                size_t off = (size_t)(ms->manifest_addr - m->donor);
                memset((char *)m->local + off, 0xee, m->size - off < 16 ? m->size - off : 16);
            }
        }
    } else if (corrupt->what == MIG_CORRUPT_RANDOM) {
        uint64_t x = (uint64_t)corrupt->seed * 0x9e3779b97f4a7c15ULL + 1;
        for (long long i = 0; i < corrupt->count; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            blkMap *m = &ms->blocks[x % ms->nblocks];
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            ((unsigned char *)m->local)[x % m->expect] ^= (unsigned char)(1 + (x >> 32) % 255);
        }
    }
    /* HEADER and MANIFEST play a lying donor, whose checksums match what
     * it sent: the damage is for the structural checks to find. RANDOM
     * plays damage on the way, for the checksums. */
    if (corrupt->what != MIG_CORRUPT_RANDOM)
        for (size_t b = 0; b < ms->nblocks; b++)
            blkImageSum(ms->blocks[b].local, ms->blocks[b].size, &ms->blocks[b].sum);
    serverLog(LL_WARNING, "Slot migration: migration-test-corrupt damaged "
              "slot %d's blocks before patching them", ms->slot);
}

/* The recipient's second thread: patches the slots the receiving thread
 * queues as their blocks become whole, so that on a host with a CPU to
 * spare (two machines, or two CPUs) the patch of the first slots overlaps
 * the transfer of the next ones instead of following all of it, and reads
 * blocks the copy has just brought into the cache. The blocks it patches
 * are never written again (the transport refuses any byte past a block's
 * count), and the key linking still waits for RDMADONE and the transfer's
 * final check. It inherits the receiving thread's priority (both are
 * raised together by migPriorityWatch). */
static void *migRecipientPatcher(void *arg) {
    migSession *s = arg;
    char err[XFER_ERR_LEN] = "";
    int next = 0;

    migThreadInit("mig_patcher");
#ifdef __linux__
    atomicSet(s->tid2, (int)syscall(SYS_gettid));
#ifdef SCHED_IDLE
    /* Raised by the watch between our start and the line above? */
    int idle;
    atomicGet(s->prio_idle, idle);
    if (server.migration_thread_priority == MIG_PRIO_AUTO && !idle &&
        sched_getscheduler(0) == SCHED_IDLE) {
        struct sched_param sp = {0};
        pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
    }
#endif
#endif
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (next == s->r.patch_queued && !s->r.patch_closed && !s->r.patch_stop)
            pthread_cond_wait(&s->cond, &s->lock);
        int stop = s->r.patch_stop || next == s->r.patch_queued;
        int i = stop ? -1 : s->r.patch_queue[next++];
        pthread_mutex_unlock(&s->lock);
        if (stop) break;
        if (migAborting(s)) snprintf(err, sizeof(err), "cancelled");
        if (s->r.corrupt.what != MIG_CORRUPT_NONE && next - 1 == s->r.corrupt.nth)
            migTestCorruptSlot(&s->r.corrupt, &s->slots[i]);
        if (err[0] || migRecipientPatchSlot(s, &s->slots[i], err) == -1) {
            pthread_mutex_lock(&s->lock);
            s->r.patch_failed = 1;
            memcpy(s->r.patch_err, err, sizeof(err));
            pthread_mutex_unlock(&s->lock);
            break;
        }
    }
    return NULL;
}

/* Receiving thread: hand slot i to the patcher. 0, or -1 with err set if
 * the patcher has failed. */
static int migRecipientQueuePatch(migSession *s, int i, char *err) {
    int failed;

    pthread_mutex_lock(&s->lock);
    failed = s->r.patch_failed;
    if (failed) memcpy(err, s->r.patch_err, XFER_ERR_LEN);
    else s->r.patch_queue[s->r.patch_queued++] = i;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return failed ? -1 : 0;
}

/* Receiving thread: no more slots come (stop: the import failed, drop the
 * rest); wait for the patcher to end. 0, or -1 with err set if it failed. */
static int migRecipientEndPatcher(migSession *s, int stop, char *err) {
    if (!s->r.patcher_started) return 0;
    pthread_mutex_lock(&s->lock);
    s->r.patch_closed = 1;
    if (stop) s->r.patch_stop = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->r.patcher, NULL);
    s->r.patcher_started = 0;
    if (s->r.patch_failed && err) memcpy(err, s->r.patch_err, XFER_ERR_LEN);
    return s->r.patch_failed ? -1 : 0;
}

/* How many CPUs this thread may run on (1 if that cannot be told). */
static int migCpusAllowed(void) {
#ifdef __linux__
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
#endif
    return 1;
}

/* xferWatchBlocks() callback (TCP): a block is whole; when it was the last
 * of its slot, the slot goes to the patcher (if it overlaps). */
static int migRecipientBlockDone(void *ctx, uint32_t block, char *err) {
    migSession *s = ctx;
    int i = s->r.reg_slot[block];

    if (--s->slots[i].blocks_left || !s->r.patch_overlap) return 0;
    return migRecipientQueuePatch(s, i, err);
}

static void *migRecipientThread(void *arg) {
    migSession *s = arg;
    char err[XFER_ERR_LEN] = "";
    xferConn *conn = NULL;

    migThreadInit("mig_recipient");
    migApplyThreadPriority(s);
    /* The patcher inherits this thread's priority. */
    if (pthread_create(&s->r.patcher, NULL, migRecipientPatcher, s) != 0) {
        migFail(s, "cannot start the patch thread: %s", strerror(errno));
        goto out;
    }
    s->r.patcher_started = 1;
    /* Accept the donor, in short waits so that a cancel is seen. Strangers
     * on the port are dropped by the listener and cost only themselves
     * (xfer.h, "Strangers"); the donor's connection gets the rest
     * of the migration's time as its I/O timeout, like the donor's side. */
    while (conn == NULL) {
        if (migAborting(s)) { migFailAborted(s); goto out; }
        conn = xferAccept(s->r.listener, 250, migRemainingMsInt(s), err);
        if (conn == NULL && !strstr(err, "timed out") && !strstr(err, "timeout")) {
            migFail(s, "%s", err);
            goto out;
        }
    }
    /* One donor per import: later connections are refused at once
     * rather than wait in the backlog for the transfer's end. */
    pthread_mutex_lock(&s->lock);
    s->r.conn = conn;
    s->data_fd = xferTcpFd(conn);
    xferListener *l = s->r.listener;
    s->r.listener = NULL;
    pthread_mutex_unlock(&s->lock);
    atomicSet(s->r.peers_refused, (long long)xferListenerRefused(l));
    xferCloseListener(l);

    /* RDMAREGISTER: register the reserved blocks. */
    if (!migWaitFor(s, &s->r.reg_requested)) { migFailAborted(s); goto out; }
    /* No blocks (every slot is empty): nothing to register or receive. */
    int r = s->r.reg_n == 0 ? 0 :
        xferRegisterRecvBlocks(conn, s->r.reg_addrs, s->r.reg_lens, s->r.reg_n, s->r.reg_desc, err);
    if (r == -1) migFail(s, "%s", err);
    pthread_mutex_lock(&s->lock);
    s->r.reg_done = r == -1 ? -1 : 1;
    pthread_mutex_unlock(&s->lock);
    if (r == -1) goto out;

    /* The donor writes; its summary must match what we registered. Slots
     * are patched as their blocks become whole (TCP), the others after:
     * all of them after when this process may run on one CPU only, where
     * the patch could only take the CPU time the receiving thread and the
     * donor need (a slot takes writes again once its bytes have left). */
    for (int i = 0; i < s->nmig; i++) s->slots[i].blocks_left = s->slots[i].nblocks;
    s->r.patch_overlap = migCpusAllowed() > 1;
    if (s->r.reg_n && xferWatchBlocks(conn, s->r.reg_expect, migRecipientBlockDone, s, err) == -1) {
        migFail(s, "%s", err);
        goto out;
    }
    if (s->r.reg_n && xferWaitTransfer(conn, migRemainingMsInt(s), err) == -1) {
        if (migAborting(s)) migFailAborted(s);
        else migFail(s, "%s", err);
        goto out;
    }
    for (uint32_t i = 0; i < s->r.reg_n; i++) {
        if (xferRecvBlockBytes(conn, i) != s->r.reg_expect[i]) {
            migFail(s, "block %u: %llu bytes received of %llu", i,
                (unsigned long long)xferRecvBlockBytes(conn, i),
                (unsigned long long)s->r.reg_expect[i]);
            goto out;
        }
    }
    xferGetStats(conn, &s->tstats);
    s->bytes = (long long)s->tstats.payload_bytes;
    /* The blocks hold what we checked: nobody may write them any more
     * (RDMA: deregister them now, not after the patch). */
    pthread_mutex_lock(&s->lock);
    s->data_fd = -1;
    s->r.conn = NULL;
    pthread_mutex_unlock(&s->lock);
    xferClose(conn);
    conn = NULL;

    /* The slots not queued during the transfer (all of them over RDMA,
     * or on one CPU) go to the patcher now; wait for it. */
    for (int i = 0; i < s->nmig; i++) {
        /* A member is patched with its lead. */
        if (s->slots[i].lead != i) continue;
        if (s->slots[i].blocks_left == 0 && s->r.patch_overlap) continue;
        s->slots[i].blocks_left = 0;
        if (migRecipientQueuePatch(s, i, err) == -1) break;
    }
    if (migRecipientEndPatcher(s, 0, err) == -1) {
        if (migAborting(s)) migFailAborted(s);
        else migFail(s, "%s", err);
        goto out;
    }

    /* RDMADONE: whether replicas and AOF want RESTOREs is known now.
     * Those that take RDMASLOTADOPT get the slots' images instead (a slot
     * whose images were not kept goes as RESTOREs). */
    if (!migWaitFor(s, &s->r.done_requested)) { migFailAborted(s); goto out; }
    for (int i = 0; i < s->nmig; i++) {
        migSlot *ms = &s->slots[i];
        if (migAborting(s)) { migFailAborted(s); goto out; }
        /* A unit's member goes with its lead (migRecipientBeforeLink). */
        if (ms->lead != i && s->slots[ms->lead].images) continue;
        if (ms->images && (s->r.adopt == 2 || (s->r.adopt && ms->next_member == -1)))
            continue;
        blkBlockImagesFree(ms->images, ms->nimages);
        ms->images = NULL;
        ms->nimages = 0;
        if (s->r.propagate) blkSerializeAdopted(&ms->keys);
    }
    pthread_mutex_lock(&s->lock);
    s->r.patched = 1;
    pthread_mutex_unlock(&s->lock);

out:
    migRecipientEndPatcher(s, 1, NULL);
    atomicSet(s->thread_done, 1);
    return NULL;
}

/* ============================= Recipient: main ============================ */

/* Free every live allocation left in a block of the migration (after the
 * slot's keys were deleted), which releases the emptied block. A block
 * that is no longer there (or no longer the slot's: its addresses may
 * serve another block now) is left alone: freeing what lies there would
 * free another key's memory. */
static void migFreeBlockAllocs(int slot, void *block) {
    if (slotAllocBlockOf(block) != block ||
        slotAllocArenaOf(block) != slotAllocSlotArena(slot)) {
        serverLog(LL_WARNING, "Slot migration: block %p of slot %d was "
                  "released during the import: skipped", block, slot);
        return;
    }
    blkFreeBlockAllocs(block, NULL);
}

/* Drop everything of a failed import (main thread, the thread is over), in
 * slices of MIG_SLICE_US like the donor's delete: a big import must not
 * stall the node for the time of freeing it. Returns MIG_SLICE_MORE (or
 * MIG_SLICE_WAIT) while there is more to do, 0 when done. Stages
 * (s->r.rb_stage):
 *  0. decide which slots go in bulk (the caller has joined the thread);
 *  1. delete the keys linked so far, slot by slot (s->cursor), with DELs
 *     to replicas and AOF since their RESTOREs went there. A bulk slot
 *     (every key of it adopted, every value in its blocks, every block
 *     adopted) has its keys unlinked without a free per allocation; other
 *     slots' keys are deleted synchronously (their blocks' leftovers are
 *     freed in stage 3, so nothing may free them later).
 *  2. wait for the lazyfree thread to pass a barrier job: an expire or
 *     eviction of an adopted key may have queued its value.
 *  3. per slot (s->stage): the keys patched but not linked, then the
 *     blocks: a bulk slot's are released at once, the others' adopted
 *     blocks are freed allocation by allocation, the rest released;
 *  4. wait for the lazyfree thread to return the released blocks' pages
 *     to the OS (slotAllocPurgeRetired).
 * A slot this node owns now keeps what it has (it can only have been
 * handed over after every key was linked). */
static int migRecipientRollbackSlice(migSession *s) {
    redisDb *db = &server.db[0];
    monotime start;
    mstime_t lat;
    int n = 0, more = 1;

    if (migClientsPaused()) return MIG_SLICE_WAIT;
    elapsedStart(&start);
    latencyStartMonitor(lat);
    if (s->r.rb_stage == 0) {
        for (int i = 0; i < s->nmig; i++) {
            migSlot *ms = &s->slots[i];
            /* Replayed writes may have put memory of any key outside
             * the blocks: then every key is freed one by one. */
            ms->bulk = ms->has_keys && ms->keys.keys_in_heap == 0 &&
                       ms->adopted == (int)ms->nblocks &&
                       countKeysInSlot(ms->slot) <= ms->keys.linked &&
                       s->writes_replayed == 0;
        }
        s->r.rb_stage = 1;
        s->stage = s->cursor = 0;
    }
    if (s->r.rb_stage == 1) {
        int prev_core = migPropagateBegin();
        while (s->cursor < CLUSTER_SLOTS) {
            int slot = s->cursor;
            migSlot *ms;
            dictEntry *de;

            if (!migSlotIsSet(s->bitmap, slot) || server.cluster->slots[slot] == server.cluster->myself) {
                s->cursor++;
                continue;
            }
            /* A slot a lying donor sent out of order is not found, so
             * deleted key by key, which is always right. */
            ms = migSlotEntry(s, slot);
            if ((de = (*db->slots_to_keys).by_slot[slot].head) == NULL) {
                if (ms) ms->unlinked = 2;
                s->cursor++;
                if ((++n & 31) == 0 && elapsedUs(start) >= MIG_SLICE_US) break;
                continue;
            }
            if (ms) ms->unlinked = 1;
            migDeleteKey(db, slot, de, ms && ms->bulk ? MIG_DEL_IN_BLOCKS : MIG_DEL_SYNC, NULL, 1);
            s->r.rb_dropped++;
            if ((++n & 31) == 0 && elapsedUs(start) >= MIG_SLICE_US) break;
        }
        migPropagateEnd(prev_core);
        if (s->cursor == CLUSTER_SLOTS) s->r.rb_stage = 2;
    }
    if (s->r.rb_stage == 2 && migLazyfreeBarrierPassed(s, 0)) {
        s->r.rb_stage = 3;
        s->stage = 0;
    }
    if (s->r.rb_stage == 3) {
        while (s->stage < s->nmig && elapsedUs(start) < MIG_SLICE_US) {
            migSlot *ms = &s->slots[s->stage++];
            if (server.cluster->slots[ms->slot] == server.cluster->myself) continue;
            /* Before the blocks go: it looks at whether values lie in them
             * (the blocks of a unit's lead hold its members' keys too). */
            for (int m = ms->lead == ms - s->slots ? (int)(ms - s->slots) : -1;
                 m != -1; m = s->slots[m].next_member) {
                if (!s->slots[m].has_keys) continue;
                blkAdoptedFree(&s->slots[m].keys);
                s->slots[m].has_keys = 0;
            }
            if (ms->has_keys) {
                blkAdoptedFree(&ms->keys);
                ms->has_keys = 0;
            }
            if (ms->bulk && migUnitUnlinked(s, ms)) {
                migReleaseBulkSlot(s, ms->slot);
                for (size_t b = 0; b < ms->nblocks; b++) ms->blocks[b].local = NULL;
                continue;
            }
            for (size_t b = 0; b < ms->nblocks; b++) {
                if (ms->blocks[b].local == NULL) continue;
                if ((int)b < ms->adopted) migFreeBlockAllocs(ms->slot, ms->blocks[b].local);
                else slotAllocReleaseBlock(ms->blocks[b].local);
                ms->blocks[b].local = NULL;
            }
            migReleaseIfEmpty(ms->slot);
        }
        if (s->stage == s->nmig) s->r.rb_stage = 4;
    }
    /* The released blocks' pages go back to the OS on the lazyfree thread. */
    if (s->r.rb_stage == 4 && migLazyfreeBarrierPassed(s, 1)) {
        if (s->r.rb_dropped) serverLog(LL_WARNING, "Slot migration: dropped %lld "
                                     "keys of a failed import", s->r.rb_dropped);
        more = 0;
    }
    latencyEndMonitor(lat);
    latencyAddSampleIfNeeded("migration-rollback-slice", lat);
    if (more && (s->r.rb_stage == 2 || s->r.rb_stage == 4)) return MIG_SLICE_WAIT;
    return more;
}

static void migRecipientCloseTransport(migSession *s) {
    pthread_mutex_lock(&s->lock);
    s->data_fd = -1;
    pthread_mutex_unlock(&s->lock);
    if (s->r.conn) {
        xferGetStats(s->r.conn, &s->tstats);
        xferClose(s->r.conn);
        s->r.conn = NULL;
    }
    if (s->r.listener) {
        s->r.peers_refused = (long long)xferListenerRefused(s->r.listener);
        xferCloseListener(s->r.listener);
        s->r.listener = NULL;
    }
}

static void migRecipientReplyError(migSession *s, client **cp) {
    if (*cp == NULL) return;
    client *c = *cp;
    addReplyErrorFormat(c, "import failed in %s: %s", migPhaseName[s->error_phase],
                        s->error ? s->error : "?");
    *cp = NULL;
    unblockClient(c);
}

/* Whether what this node links must reach replicas or the AOF now: AOF
 * on, or a master with replicas or a backlog (one may PSYNC later). */
static int migRecipientMustPropagate(void) {
    return server.aof_state != AOF_OFF ||
        (server.masterhost == NULL && (server.repl_backlog || listLength(server.slaves)));
}

/* Before each batch of a slot's keys is linked (main thread): make sure
 * the replicas and AOF hear of every key linked from here on.
 *  - A replica (or the AOF) may have started after RDMADONE decided there
 *    was no one to tell: its full sync (or rewrite) snapshots the keys
 *    linked so far, and the keys linked after the fork must then follow
 *    it. From then on this session propagates (logged once).
 *  - At the slot's first key: with its images kept and every replica
 *    attached now able to take it, as one RDMASLOTADOPT (migsession.c,
 *    "Adopting slots on replicas and AOF"), and the caller then links the
 *    whole slot in this event loop iteration, so that no fork sees half of
 *    it.
 *  - Otherwise the keys go as RESTOREs as they are linked: their payloads
 *    were made by the recipient thread, unless no replica needed them then
 *    or one without the capability came after RDMADONE; then the payloads
 *    of the keys not linked yet are made here (a DUMP per key on the main
 *    thread, logged once per session). */
static void migRecipientBeforeLink(migSession *s, migSlot *ms) {
    if (ms->adopt_sent || ms->keys.linked == ms->keys.nkeys) goto done;
    if (!s->r.propagate && migRecipientMustPropagate()) {
        s->r.propagate = 1;
        serverLog(LL_NOTICE, "Slot migration: a replica or the AOF started "
                  "during the import: the keys not linked yet go to them too");
    }
    if (!s->r.propagate) goto done;
    if (ms->keys.linked == 0 && ms->images &&
        (ms->next_member == -1 ? migSlotAdoptUsable() : migUnitAdoptUsable())) {
        /* The slot and its unit's members (linked with it, below). */
        int nus = 0, prev;
        for (int i = ms->lead; i != -1; i = s->slots[i].next_member) nus++;
        blkUnitSlot *us = zmalloc(sizeof(*us) * nus);
        nus = 0;
        for (int i = ms->lead; i != -1; i = s->slots[i].next_member, nus++) {
            us[nus].slot = s->slots[i].slot;
            us[nus].nkeys = s->slots[i].nkeys;
            us[nus].manifest = s->slots[i].manifest_addr;
            s->slots[i].adopt_sent = 1;
        }
        prev = migPropagateBegin();
        migPropagateSlotAdopt(us, nus, ms->images, ms->nimages);
        migPropagateEnd(prev);
        zfree(us);
    } else {
        /* As RESTOREs, serialized now if the thread did not: the slot, or
         * with a unit's lead the whole unit (its members have no images
         * of their own, and the thread left them to the lead's). */
        int self = (int)(ms - s->slots);
        for (int i = self; i != -1; i = ms->lead == self ? s->slots[i].next_member : -1) {
            migSlot *m = &s->slots[i];
            if (m->keys.payloads != NULL || m->keys.linked == m->keys.nkeys) continue;
            if (!s->r.late_payloads) {
                serverLog(LL_NOTICE, "Slot migration: replicas or the AOF that "
                          "the import did not prepare for (one attached during it, "
                          "or does not take RDMASLOTADOPT): slot %d's keys and "
                          "those of later slots like it go as RESTOREs, serialized "
                          "by the main thread", m->slot);
                s->r.late_payloads = 1;
            }
            blkSerializeAdopted(&m->keys);
        }
    }
done:
    blkBlockImagesFree(ms->images, ms->nimages);
    ms->images = NULL;
    ms->nimages = 0;
}

/* One call of the timer for a recipient session. Returns 1 if it linked
 * keys (more may follow at once). */
int migRecipientTick(migSession *s) {
    int done;
    atomicGet(s->thread_done, done);

    /* Failure: wait for the thread, then drop everything. (A session
     * handed over has ended in RDMAHANDOVER.) */
    if (s->r.rstate != MIG_R_ROLLING_BACK) {
        int donor_gone = lookupClientByID(s->r.donor_client_id) == NULL;
        int failed = s->error != NULL || (done && !s->r.patched);
        if (donor_gone && !failed)
            migFail(s, "the donor's connection closed before the handover");
        if (migAborting(s) || donor_gone || failed) {
            migFailAborted(s);
            migRecipientTo(s, MIG_R_ROLLING_BACK);
            migSetPhase(s, MIG_PHASE_ROLLBACK);
            atomicSet(s->cancel, 1);
            migInterrupt(s);
        }
    }
    if (s->r.rstate == MIG_R_ROLLING_BACK) {
        if (!done) return 0;
        if (s->r.rb_stage == 0) {
            /* A FLUSHALL ASYNC may still be freeing adopted keys: the
             * blocks' leftovers are freed after it. */
            if (!slotCompactLazyfreeIdle()) return 0;
            if (s->thread_started) pthread_join(s->thread, NULL);
            s->thread_started = 0;
            migRecipientCloseTransport(s);
        }
        int r = migRecipientRollbackSlice(s);
        if (r) return r == MIG_SLICE_MORE;
        migRecipientReplyError(s, &s->r.reg_client);
        migRecipientReplyError(s, &s->r.done_client);
        migForgetImporting(s->bitmap);
        migEndSession(s, s->cancelled ? MIG_LAST_CANCELLED : MIG_LAST_FAILED);
        return 0;
    }

    /* RDMAREGISTER done by the thread: answer it. */
    if (s->r.reg_client && s->r.reg_done == 1) {
        client *c = s->r.reg_client;
        addReplyArrayLen(c, s->r.reg_n);
        for (uint32_t i = 0; i < s->r.reg_n; i++) {
            char addr[32];
            snprintf(addr, sizeof(addr), "%llu", (unsigned long long)s->r.reg_desc[i].addr);
            addReplyArrayLen(c, 4);
            addReplyLongLong(c, s->r.reg_desc[i].id);
            addReplyBulkCString(c, addr);
            addReplyLongLong(c, s->r.reg_desc[i].rkey);
            addReplyLongLong(c, (long long)s->r.reg_desc[i].len);
        }
        s->r.reg_client = NULL;
        unblockClient(c);
        migSetPhase(s, MIG_PHASE_TRANSFER);
    }

    /* Patched: link in slices, then answer RDMADONE. */
    if (s->r.patched && s->r.rstate == MIG_R_ADOPTING && !migClientsPaused()) {
        if (s->phase != MIG_PHASE_LINK) {
            if (s->thread_started) pthread_join(s->thread, NULL);
            s->thread_started = 0;
            migRecipientCloseTransport(s);
            migSetPhase(s, MIG_PHASE_LINK);
            /* The keyspace grows by s->keys at once: size its table for
             * them now rather than doubling it (and rehashing every key
             * already there) several times while the slices link. */
            dict *kd = server.db[0].dict;
            dictExpand(kd, dictSize(kd) + (unsigned long)s->keys);
        }
        monotime start;
        mstime_t lat;
        elapsedStart(&start);
        latencyStartMonitor(lat);
        while (s->r.link_cursor < s->nmig && elapsedUs(start) < MIG_SLICE_US) {
            migSlot *ms = &s->slots[s->r.link_cursor];
            /* Test hook: migration-test-delay-link ms between two slots. */
            if (s->r.link_resume_ms > mstime()) break;
            migRecipientBeforeLink(s, ms);
            /* A slot sent as RDMASLOTADOPT is linked whole, now, and so are
             * the members of its unit, which the command carried too. */
            size_t batch = ms->adopt_sent ? SIZE_MAX : MIG_LINK_BATCH;
            if (ms->adopt_sent && ms->lead == s->r.link_cursor)
                for (int i = ms->next_member; i != -1; i = s->slots[i].next_member)
                    blkLinkAdopted(&s->slots[i].keys, SIZE_MAX);
            if (blkLinkAdopted(&ms->keys, batch) == 0) {
                s->r.link_cursor++;
                if (server.migration_test_delay_link)
                    s->r.link_resume_ms = mstime() + server.migration_test_delay_link;
            }
        }
        latencyEndMonitor(lat);
        latencyAddSampleIfNeeded("migration-link-slice", lat);
        /* More to link: at once, unless the test hook holds it (then look
         * again in 1 ms rather than spin). */
        if (s->r.link_cursor < s->nmig) return s->r.link_resume_ms <= mstime();
        migRecipientTo(s, MIG_R_READY);
        if (s->r.done_client) {
            client *c = s->r.done_client;
            addReplyMapLen(c, 5);
            addReplyBulkCString(c, "keys"); addReplyLongLong(c, s->keys);
            addReplyBulkCString(c, "keys_zero_copy"); addReplyLongLong(c, s->keys_zero_copy);
            addReplyBulkCString(c, "keys_serialized"); addReplyLongLong(c, s->keys_serialized);
            addReplyBulkCString(c, "patch_ms"); addReplyLongLong(c, s->phase_ms[MIG_PHASE_PATCH]);
            addReplyBulkCString(c, "link_ms"); addReplyLongLong(c, mstime() - s->phase_start_ms);
            s->r.done_client = NULL;
            unblockClient(c);
        }
        migSetPhase(s, MIG_PHASE_HANDOVER);
    }
    return 0;
}

/* ================================ Commands ================================ */

/* INITRDMASERVER <port> <slot|start-end>... [TRANSPORT rdma|tcp|auto]
 *                [TIMEOUT ms] */
void initRdmaServerCommand(client *c) {
    long long port, timeout = MIG_DEFAULT_TIMEOUT_MS, version = 0;
    const char *vstr = "";
    xferKind kind;
    char err[XFER_ERR_LEN] = "", tok[XFER_TOKEN_LEN + 1], ip[NET_IP_STR_LEN];
    unsigned char bitmap[CLUSTER_SLOTS / 8];
    int nslots, last = 2;

    if (migCheckNode(c) == C_ERR) return;
    kind = (xferKind)server.migration_transport;
    if (getLongLongFromObject(c->argv[1], &port) != C_OK || port < 0 || port > 65535) {
        addReplyErrorFormat(c, "Invalid port '%s' (0-65535; 0: rdma-migration-port)",
                            (char *)c->argv[1]->ptr);
        return;
    }
    while (last < c->argc && strcasecmp(c->argv[last]->ptr, "transport") &&
           strcasecmp(c->argv[last]->ptr, "timeout") &&
           strcasecmp(c->argv[last]->ptr, "version")) last++;
    for (int j = last; j < c->argc; j++) {
        int r = migParseCommonOption(c, &j, &kind, &timeout);
        if (r == -1) return;
        if (r == 0 && !strcasecmp(c->argv[j]->ptr, "version") && j + 1 < c->argc) {
            vstr = c->argv[++j]->ptr;
            if (getLongLongFromObject(c->argv[j], &version) != C_OK || version < 1) version = -1;
            continue;
        }
        if (r == 0) {
            addReplyErrorFormat(c, "Invalid or incomplete option '%s'",
                                (char *)c->argv[j]->ptr);
            return;
        }
    }
    if (clusterParseSlotRanges(c, 2, last, bitmap, &nslots) == C_ERR) return;
    /* Both builds must lay out blocks, manifests and messages alike. */
    if (version != MIG_PROTOCOL_VERSION) {
        if (version == 0)
            addReplyErrorFormat(c, "INITRDMASERVER without VERSION: the donor speaks "
                "slot migration protocol version 1, this node %d; upgrade the donor, "
                "or move the slots with MIGRATE (redis-cli --cluster-transport auto "
                "or legacy)", MIG_PROTOCOL_VERSION);
        else
            addReplyErrorFormat(c, "the donor speaks slot migration protocol version "
                "%.20s, this node %d; run the same build on both, or move the slots "
                "with MIGRATE (redis-cli --cluster-transport auto or legacy)",
                vstr, MIG_PROTOCOL_VERSION);
        return;
    }
    /* The slots come from one other master (the donor), and nothing of
     * them is here. */
    clusterNode *donor = NULL;
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        if (!migSlotIsSet(bitmap, slot)) continue;
        clusterNode *owner = server.cluster->slots[slot];
        if (owner == server.cluster->myself) {
            addReplyErrorFormat(c, "I'm already the owner of hash slot %d", slot);
            return;
        }
        if (owner == NULL || (donor && owner != donor)) {
            addReplyErrorFormat(c, "Hash slot %d is %s: the slots of one import "
                "come from one master", slot, owner ? "owned by another master" : "unassigned");
            return;
        }
        donor = owner;
        if (server.cluster->importing_slots_from[slot] || server.cluster->migrating_slots_to[slot]) {
            addReplyErrorFormat(c, "Hash slot %d is IMPORTING or MIGRATING here "
                "(redis-cli --cluster fix)", slot);
            return;
        }
        if (countKeysInSlot(slot)) {
            addReplyErrorFormat(c, "Hash slot %d already holds %u keys here",
                                slot, countKeysInSlot(slot));
            return;
        }
    }
    if (mig != NULL) {
        addReplyErrorFormat(c, "a migration is already running here (%s, phase %s)",
                            migRoleName[mig->role], migPhaseName[mig->phase]);
        return;
    }
    const char *aerr = NULL;
    if (slotCompactStart(&aerr) == C_ERR) {
        addReplyErrorFormat(c, "this node can't adopt slot blocks: %s", aerr);
        return;
    }
    if (c->conn == NULL || connSockName(c->conn, ip, sizeof(ip), NULL) == -1) {
        addReplyError(c, "INITRDMASERVER must come over a TCP connection");
        return;
    }
    if (port == 0) port = server.rdma_migration_port;
    char sid[XFER_TOKEN_LEN + 1];
    if (xferGenerateToken(tok, err) == -1 || xferGenerateToken(sid, err) == -1) {
        addReplyErrorFormat(c, "%s", err);
        return;
    }
    /* The blocks it adopts must hold the import's keys only: a slot
     * sharing its group's arena gets one of its own until the import
     * ends (slotCompactUnpin maps it back). */
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        const char *why;
        if (migSlotIsSet(bitmap, slot) && slotCompactIsolate(slot, &why) == -1) {
            for (int j = 0; j < slot; j++)
                if (migSlotIsSet(bitmap, j)) slotCompactRegroup(j);
            addReplyErrorFormat(c, "slot %d %s", slot, why);
            return;
        }
    }
    const char *bind = kind != XFER_KIND_TCP && server.rdma_bind[0] ? server.rdma_bind : ip;
    xferListener *l = xferListen(kind, bind, (int)port, tok, err);
    if (l == NULL && kind == XFER_KIND_AUTO && bind != ip) l = xferListen(kind, ip, (int)port, tok, err);
    if (l == NULL) {
        for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
            if (migSlotIsSet(bitmap, slot)) slotCompactRegroup(slot);
        addReplyErrorFormat(c, "cannot open the data listener: %s", err);
        return;
    }
    migSession *s = migNewSession(MIG_ROLE_RECIPIENT, migRecipientTick);
    memcpy(s->bitmap, bitmap, sizeof(bitmap));
    s->nslots = nslots;
    memcpy(s->sid, sid, sizeof(sid));
    s->r.rstate = MIG_R_LISTENING;
    /* The test hook (refused while a migration runs, so it cannot change
     * under this import): valid, CONFIG SET checked it. */
    const char *cerr = NULL;
    if (migParseTestCorrupt(server.migration_test_corrupt ? server.migration_test_corrupt : "",
                            &s->r.corrupt, &cerr) == -1)
        s->r.corrupt.what = MIG_CORRUPT_NONE;
    /* Until the import ends, slot compaction leaves its slots alone: a
     * sparse adopted block drained and released would leave a stale
     * block pointer to the rollback (which frees what lies in adopted
     * blocks), and nothing may move in blocks the patcher and the
     * transport are writing. */
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
        if (migSlotIsSet(s->bitmap, slot)) slotCompactPin(slot);
    s->r.listener = l;
    s->kind = xferListenerKind(l);
    snprintf(s->transport, sizeof(s->transport), "%s", xferKindName(s->kind));
    s->deadline_ms = s->start_ms + timeout;
    s->r.donor_client_id = c->id;
    s->phase = MIG_PHASE_TRANSFER;
    mig = s;
    if (pthread_create(&s->thread, NULL, migRecipientThread, s) != 0) {
        mig = NULL;
        xferCloseListener(l);
        s->r.listener = NULL;
        addReplyErrorFormat(c, "cannot start the migration thread: %s", strerror(errno));
        migFail(s, "cannot start the migration thread");
        migEndSession(s, MIG_LAST_FAILED);
        return;
    }
    s->thread_started = 1;
    if (xferListenerNote(l)[0])
        serverLog(LL_NOTICE, "Slot migration: %s", xferListenerNote(l));
    addReplyMapLen(c, 6);
    addReplyBulkCString(c, "transport"); addReplyBulkCString(c, xferKindName(s->kind));
    addReplyBulkCString(c, "host"); addReplyBulkCString(c, bind);
    addReplyBulkCString(c, "port"); addReplyLongLong(c, xferListenerPort(l));
    addReplyBulkCString(c, "token"); addReplyBulkCString(c, tok);
    addReplyBulkCString(c, "session"); addReplyBulkCString(c, s->sid);
    addReplyBulkCString(c, "version"); addReplyLongLong(c, MIG_PROTOCOL_VERSION);
    migStartTimer();
}

/* The import session a donor's message names (c->argv[1], as
 * INITRDMASERVER replied it), on the connection that opened it: every
 * message after INITRDMASERVER names its session, so one meant for an
 * import that ended (or for another donor's) can never act on the running
 * one. NULL, with an error the donor can report, otherwise. */
static migSession *migRecipientSession(client *c) {
    const char *sid = c->argv[1]->ptr;

    if (migCheckNode(c) == C_ERR) return NULL;
    if (mig == NULL || mig->role != MIG_ROLE_RECIPIENT || strcmp(mig->sid, sid)) {
        addReplyErrorFormat(c, "no import session '%.40s' is running here (it "
            "ended or never began; INITRDMASERVER opens one): the slots stay "
            "with the donor", sid);
        return NULL;
    }
    if (mig->r.donor_client_id != c->id) {
        addReplyErrorFormat(c, "%s must come on the connection that sent "
            "INITRDMASERVER", (char *)c->argv[0]->ptr);
        return NULL;
    }
    return mig;
}

/* As migRecipientSession, for the messages that feed a running import
 * (RDMAREGISTER, RDMADONE, RDMAREPLAY): refused once it is failing. */
static migSession *migRecipientOf(client *c) {
    migSession *s = migRecipientSession(c);
    if (s == NULL) return NULL;
    if (s->r.rstate == MIG_R_ROLLING_BACK || s->error) {
        addReplyErrorFormat(c, "the import is failing: %s", s->error ? s->error : "rollback");
        return NULL;
    }
    return s;
}

/* The index of slot among the n entries of a RDMAREGISTER parsed so far,
 * or -1. */
static int migRegisterFind(migSlot *slots, int n, int slot) {
    for (int i = n - 1; i >= 0; i--)
        if (slots[i].slot == slot) return i;
    return -1;
}

/* Map the slots of each unit of a RDMAREGISTER to one arena
 * (slotCompactUnite). 0, or -1 with the error replied. */
static int migRegisterUnite(client *c, migSlot *slots, int n) {
    int *unit = zmalloc(sizeof(int) * (n ? n : 1));

    for (int i = 0; i < n; i++) {
        int k = 0;
        if (slots[i].lead != i || slots[i].next_member == -1) continue;
        for (int m = i; m != -1; m = slots[m].next_member) unit[k++] = slots[m].slot;
        if (slotCompactUnite(unit, k) == -1) {
            addReplyErrorFormat(c, "RDMAREGISTER: no arena id is free for the %d "
                                "slots led by slot %d", k, slots[i].slot);
            zfree(unit);
            return -1;
        }
    }
    zfree(unit);
    return 0;
}

/* RDMAREGISTER <session> <slot> <nkeys> <manifest-addr> <nblocks>
 *              [<donor-addr> <size> <bytes> <checksum>]... [<slot> ...]
 * (nblocks 0: then <lead-slot>, see migSlot.lead) */
void rdmaRegisterCommand(client *c) {
    migSession *s = migRecipientOf(c);
    if (s == NULL) return;
    if (s->r.reg_requested) {
        addReplyError(c, "RDMAREGISTER was already sent for this import");
        return;
    }
    /* Parse and check everything before reserving anything. */
    int j = 2, n = 0;
    unsigned long long total = 0;
    unsigned char seen[CLUSTER_SLOTS / 8];
    memset(seen, 0, sizeof(seen));
    migSlot *slots = zcalloc(sizeof(migSlot) * ((c->argc - 2) / 4 + 1));
    while (j < c->argc) {
        long long slot, nkeys, nblocks;
        unsigned long long maddr;
        if (c->argc - j < 4 ||
            getLongLongFromObject(c->argv[j], &slot) != C_OK || slot < 0 || slot >= CLUSTER_SLOTS ||
            getLongLongFromObject(c->argv[j + 1], &nkeys) != C_OK || nkeys < 0 ||
            !string2ull(c->argv[j + 2]->ptr, &maddr) ||
            getLongLongFromObject(c->argv[j + 3], &nblocks) != C_OK || nblocks < 0 ||
            (nblocks == 0 && c->argc - j < 5) || nblocks > (c->argc - j - 4) / 4) {
            addReplyErrorFormat(c, "RDMAREGISTER: bad slot entry at argument %d "
                "(<slot> <nkeys> <manifest-addr> <nblocks> then <addr> <size> "
                "<bytes> <checksum> per block, or 0 then <lead-slot>)", j);
            goto err;
        }
        if (migSlotIsSet(seen, (int)slot)) {
            addReplyErrorFormat(c, "RDMAREGISTER: slot %lld is given twice", slot);
            goto err;
        }
        if (!migSlotIsSet(s->bitmap, (int)slot)) {
            addReplyErrorFormat(c, "RDMAREGISTER: slot %lld is not part of this "
                                "import (INITRDMASERVER)", slot);
            goto err;
        }
        if (countKeysInSlot((unsigned int)slot)) {
            addReplyErrorFormat(c, "RDMAREGISTER: slot %lld already holds %u keys here",
                                slot, countKeysInSlot((unsigned int)slot));
            goto err;
        }
        seen[slot >> 3] |= 1 << (slot & 7);
        migSlot *ms = &slots[n++];
        ms->slot = (int)slot;
        ms->nkeys = (size_t)nkeys;
        ms->manifest_addr = maddr;
        ms->nblocks = (size_t)nblocks;
        ms->blocks = zcalloc(sizeof(blkMap) * (nblocks ? nblocks : 1));
        ms->lead = n - 1;
        ms->next_member = -1;
        j += 4;
        if (nblocks == 0) {
            /* A member of a unit (slot groups): its keys are in the blocks
             * of its lead, an earlier entry with blocks; it joins the end
             * of the lead's members. */
            long long lead;
            int li;
            if (getLongLongFromObject(c->argv[j], &lead) != C_OK || lead < 0 ||
                lead >= CLUSTER_SLOTS || (li = migRegisterFind(slots, n - 1, (int)lead)) == -1 ||
                slots[li].nblocks == 0) {
                addReplyErrorFormat(c, "RDMAREGISTER: slot %lld has no block and its "
                    "lead '%s' is no earlier slot with blocks", slot, (char *)c->argv[j]->ptr);
                goto err;
            }
            ms->lead = li;
            while (slots[li].next_member != -1) li = slots[li].next_member;
            slots[li].next_member = n - 1;
            j++;
            continue;
        }
        for (long long b = 0; b < nblocks; b++, j += 4) {
            unsigned long long a, sz, bytes, sum;
            if (!string2ull(c->argv[j]->ptr, &a) || !string2ull(c->argv[j + 1]->ptr, &sz) ||
                !string2ull(c->argv[j + 2]->ptr, &bytes) ||
                !string2ull(c->argv[j + 3]->ptr, &sum) ||
                sz == 0 || sz % SLOTALLOC_UNIT_SIZE || sz > (1ULL << 40) ||
                a % SLOTALLOC_UNIT_SIZE || bytes == 0 || bytes > sz) {
                addReplyErrorFormat(c, "RDMAREGISTER: slot %lld block %lld: bad address, "
                    "size (multiples of %d), byte count or checksum", slot, b,
                    SLOTALLOC_UNIT_SIZE);
                goto err;
            }
            ms->blocks[b].donor = a;
            ms->blocks[b].size = sz;
            ms->blocks[b].expect = bytes;
            ms->blocks[b].sum = sum;
            total += sz;
        }
    }
    if (server.maxmemory && zmalloc_used_memory() + total > server.maxmemory) {
        addReplyErrorFormat(c, "-OOM RDMAREGISTER: %llu bytes of blocks would take "
            "used memory past maxmemory", total);
        goto err;
    }
    /* The slots of each unit share one arena, the one the lead's blocks
     * are reserved in (the members' keys are checked against it). */
    if (migRegisterUnite(c, slots, n) == -1) goto err;
    /* Reserve every slot's blocks, all or nothing. */
    for (int i = 0; i < n; i++) {
        migSlot *ms = &slots[i];
        if (ms->nblocks == 0) continue;         /* A member: its lead's. */
        size_t *sizes = zmalloc(sizeof(size_t) * ms->nblocks);
        void **addrs = zmalloc(sizeof(void *) * ms->nblocks);
        for (size_t b = 0; b < ms->nblocks; b++) sizes[b] = ms->blocks[b].size;
        int r = slotAllocReserveBlocks(ms->slot, ms->nblocks, sizes, addrs);
        if (r == 0)
            for (size_t b = 0; b < ms->nblocks; b++) ms->blocks[b].local = addrs[b];
        zfree(sizes);
        zfree(addrs);
        if (r == -1) {
            for (int k = 0; k < i; k++)
                for (size_t b = 0; b < slots[k].nblocks; b++)
                    slotAllocReleaseBlock(slots[k].blocks[b].local);
            addReplyErrorFormat(c, "-OOM RDMAREGISTER: cannot reserve %zu blocks for "
                "slot %d: %s", ms->nblocks, ms->slot, strerror(errno));
            n = 0;
            for (int k = 0; k < i + 1; k++) zfree(slots[k].blocks);
            zfree(slots);
            return;
        }
    }
    s->slots = slots;
    s->nmig = n;
    uint32_t nb = 0;
    for (int i = 0; i < n; i++) nb += (uint32_t)slots[i].nblocks;
    s->r.reg_n = nb;
    s->r.reg_addrs = zmalloc(sizeof(void *) * (nb ? nb : 1));
    s->r.reg_lens = zmalloc(sizeof(uint64_t) * (nb ? nb : 1));
    s->r.reg_expect = zmalloc(sizeof(uint64_t) * (nb ? nb : 1));
    s->r.reg_slot = zmalloc(sizeof(int) * (nb ? nb : 1));
    s->r.patch_queue = zmalloc(sizeof(int) * (n ? n : 1));
    s->r.reg_desc = zcalloc(sizeof(xferBlockDesc) * (nb ? nb : 1));
    nb = 0;
    for (int i = 0; i < n; i++) {
        for (size_t b = 0; b < slots[i].nblocks; b++, nb++) {
            s->r.reg_addrs[nb] = slots[i].blocks[b].local;
            s->r.reg_lens[nb] = slots[i].blocks[b].size;
            s->r.reg_expect[nb] = slots[i].blocks[b].expect;
            s->r.reg_slot[nb] = i;
        }
    }
    s->bytes_total = (long long)total;
    s->r.keep_images = !migRecipientMustPropagate() ? 0 : migUnitAdoptUsable() ? 2 :
                       migSlotAdoptUsable() ? 1 : 0;
    s->r.reg_client = c;
    migRecipientTo(s, MIG_R_RECEIVING);
    pthread_mutex_lock(&s->lock);
    s->r.reg_requested = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    migBlock(c);
    return;
err:
    for (int i = 0; i < n; i++) zfree(slots[i].blocks);
    zfree(slots);
}

/* RDMADONE <session> <slot|start-end>...: the transfer is over; adopt. The reply is
 * deferred until every key is linked (it plays PATCHANDADDDONE). */
void rdmaDoneCommand(client *c) {
    migSession *s = migRecipientOf(c);
    unsigned char bitmap[CLUSTER_SLOTS / 8];
    int nslots;

    if (s == NULL) return;
    if (clusterParseSlotRanges(c, 2, c->argc, bitmap, &nslots) == C_ERR) return;
    if (!s->r.reg_requested || s->r.reg_done != 1) {
        addReplyError(c, "RDMADONE before RDMAREGISTER completed");
        return;
    }
    if (s->r.done_requested) {
        addReplyError(c, "RDMADONE was already sent for this import");
        return;
    }
    /* The slots given are the import's. */
    if (memcmp(bitmap, s->bitmap, sizeof(bitmap))) {
        addReplyError(c, "RDMADONE: the slots given are not those of this "
                         "import (INITRDMASERVER)");
        return;
    }
    s->r.propagate = migRecipientMustPropagate();
    s->r.adopt = !s->r.propagate ? 0 : migUnitAdoptUsable() ? 2 : migSlotAdoptUsable() ? 1 : 0;
    /* From here on the adopted keys may reach this node's AOF, an RDB
     * or a replica before the slots are ours: nodes.conf says so first. */
    if (migRememberImporting(s->bitmap) == -1) {
        migFail(s, "cannot save nodes.conf (the import's slots must be in it "
                "before its keys are linked): %s", strerror(errno));
        addReplyErrorFormat(c, "%s; the import rolls back", s->error);
        return;
    }
    s->r.done_client = c;
    migRecipientTo(s, MIG_R_ADOPTING);
    migSetPhase(s, MIG_PHASE_PATCH);
    pthread_mutex_lock(&s->lock);
    s->r.done_requested = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    migBlock(c);
}

/* Before RDMAHANDOVER makes the slots this node's: the adopted keys and
 * the replayed writes, propagated as the keys were linked, are written to
 * the AOF and, unless appendfsync is no, on disk, so that the new owner's
 * AOF holds its keys when nodes.conf (fsynced next, in beforeSleep, before
 * the reply leaves) says it owns them. */
static void migRecipientSyncAof(void) {
    if (server.aof_state != AOF_ON) return;
    flushAppendOnlyFile(1);
    if (server.aof_fsync != AOF_FSYNC_NO && server.aof_fd != -1 &&
        redis_fsync(server.aof_fd) == -1)
        serverLog(LL_WARNING, "Slot migration: fsync of the AOF before the "
                  "handover: %s", strerror(errno));
}

/* RDMAHANDOVER <session>: the donor hands the import's slots over. The
 * only way an import's slots become this node's (READY -> OWNED): the
 * session named must be the running one, on the donor's connection, with
 * every key linked and the recorded writes replayed, and not failing. The
 * slots are taken as CLUSTER SETSLOTS NODE <myself> would (epoch bump,
 * broadcast, nodes.conf fsynced before this reply leaves) and the session
 * ends. Any error reply means the slots stayed with the donor. */
void rdmaHandoverCommand(client *c) {
    migSession *s = migRecipientSession(c);

    if (s == NULL) return;
    if (s->r.rstate != MIG_R_READY || s->error || migAborting(s)) {
        addReplyErrorFormat(c, "import session %s is %s%s%s: the slots stay "
            "with the donor", s->sid, migRStateName[s->r.rstate],
            s->error ? ", failing: " : (migAborting(s) ? ", past its deadline" : ""),
            s->error ? s->error : "");
        return;
    }
    migRecipientSyncAof();
    migRecipientTo(s, MIG_R_OWNED);
    migSetPhase(s, MIG_PHASE_HANDOVER);
    /* One nodes.conf write: the new owner, the import's slots forgotten,
     * the session remembered. */
    memcpy(migImportSid, s->sid, sizeof(migImportSid));
    migForgetImporting(s->bitmap);
    clusterSetSlotsApply(CLUSTER_SETSLOTS_NODE, server.cluster->myself, s->bitmap);
    serverLog(LL_NOTICE, "Slot migration: import session %s handed over: %d "
              "slots are this node's", s->sid, s->nslots);
    addReply(c, shared.ok);
    migEndSession(s, MIG_LAST_OK);
}

/* RDMARESOLVE <session> <slot|start-end>...: what became of an import, for
 * a donor that sent RDMAHANDOVER and got no reply (or that gives up, and
 * must be sure its slots stay its own). Replies "owned" (the slots are this
 * node's, by that session's handover) or "not-owned" (they are not, and
 * never will be by that session). A running session named here is ended:
 * it rolls back and its handover, still in flight on the donor's old
 * connection, would be refused; so the answer cannot change afterwards.
 * Asked about a session it no longer knows (restarted, or another import
 * since), this node answers from nodes.conf: the last session handed over,
 * then whether it owns the slots. */
void rdmaResolveCommand(client *c) {
    migSession *s = mig;
    const char *sid = c->argv[1]->ptr;
    unsigned char bitmap[CLUSTER_SLOTS / 8];
    int nslots, mine = 0;

    if (migCheckNode(c) == C_ERR) return;
    if (!migValidSid(sid)) {
        addReplyErrorFormat(c, "Invalid session id '%.40s': %d hex digits, as "
                            "INITRDMASERVER replied", sid, XFER_TOKEN_LEN);
        return;
    }
    if (clusterParseSlotRanges(c, 2, c->argc, bitmap, &nslots) == C_ERR) return;
    if (s && s->role == MIG_ROLE_RECIPIENT && !strcmp(s->sid, sid)) {
        if (s->r.rstate != MIG_R_ROLLING_BACK) {
            migFail(s, "the donor gave the migration up (RDMARESOLVE)");
            atomicSet(s->cancel, 1);
            migInterrupt(s);
        }
        addReplyBulkCString(c, "not-owned");
        return;
    }
    if (!strcmp(migLast.import_sid, sid)) {
        addReplyBulkCString(c, migLast.import_owned ? "owned" : "not-owned");
        return;
    }
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
        if (migSlotIsSet(bitmap, slot) && server.cluster->slots[slot] == server.cluster->myself)
            mine++;
    /* The session's handover and its id are saved in one nodes.conf write:
     * an id not saved is a handover that never happened (the slots may
     * have moved on since one that did). */
    if (!strcmp(migImportSid, sid)) {
        addReplyBulkCString(c, "owned");
    } else if (mine == 0) {
        addReplyBulkCString(c, "not-owned");
    } else {
        /* Owned, but by no handover of that session: not for this node to
         * tell; the cluster's view (config epochs) will. */
        serverLog(LL_WARNING, "Slot migration: RDMARESOLVE %s: no record of "
                  "that import, yet this node owns %d of its %d slots", sid, mine, nslots);
        addReplyErrorFormat(c, "no record of import session %s here, yet this "
                            "node owns %d of its %d slots: resolve it from the "
                            "cluster's view (redis-cli --cluster check)", sid, mine, nslots);
    }
}

/* RDMAREPLAY <session> <argc> <arg>... [<argc> <arg>...]: the writes the donor's
 * clients made to the slots since the transfer, in the form the donor
 * propagated them, applied here in order once every key is linked and
 * before the handover. Everything is checked before anything is applied
 * (each command exists, is a write, has the right arity and only keys of
 * the import's slots); a command that then fails fails the import, whose
 * rollback drops what the replay did too. The commands go to this node's
 * replicas and AOF after the RESTOREs of the linked keys. Replies the
 * number of commands applied. */
void rdmaReplayCommand(client *c) {
    migSession *s = migRecipientOf(c);
    struct redisCommand **cmds;
    int *argcs, ncmds = 0, j;

    if (s == NULL) return;
    cmds = zmalloc(sizeof(*cmds) * c->argc);
    argcs = zmalloc(sizeof(*argcs) * c->argc);
    for (j = 2; j < c->argc; ) {
        long long n;
        struct redisCommand *cmd;
        getKeysResult result = GETKEYS_RESULT_INIT;
        int numkeys, bad = 0;

        if (getLongLongFromObject(c->argv[j], &n) != C_OK || n < 1 || n > c->argc - j - 1) {
            addReplyErrorFormat(c, "RDMAREPLAY: command %d: '%s' is not an argument "
                "count between 1 and the %d arguments left", ncmds + 1,
                (char *)c->argv[j]->ptr, c->argc - j - 1);
            goto err;
        }
        cmd = lookupCommand(c->argv + j + 1, (int)n);
        if (cmd == NULL || !(cmd->flags & CMD_WRITE) || (cmd->flags & CMD_MODULE)) {
            addReplyErrorFormat(c, "RDMAREPLAY: command %d: '%s' is not a write "
                "command of this server", ncmds + 1, (char *)c->argv[j + 1]->ptr);
            goto err;
        }
        if ((cmd->arity > 0 && cmd->arity != n) || n < -cmd->arity) {
            addReplyErrorFormat(c, "RDMAREPLAY: command %d: wrong number of "
                "arguments for '%s'", ncmds + 1, cmd->fullname);
            goto err;
        }
        numkeys = getKeysFromCommand(cmd, c->argv + j + 1, (int)n, &result);
        for (int k = 0; k < numkeys && !bad; k++) {
            robj *key = c->argv[j + 1 + result.keys[k].pos];
            if (!sdsEncodedObject(key) ||
                !migSlotIsSet(s->bitmap, keyHashSlot(key->ptr, (int)sdslen(key->ptr)))) bad = 1;
        }
        getKeysFreeResult(&result);
        if (numkeys == 0 || bad) {
            addReplyErrorFormat(c, "RDMAREPLAY: command %d ('%s') %s", ncmds + 1,
                cmd->fullname, numkeys ? "names a key of a slot this import does "
                "not hold" : "names no key");
            goto err;
        }
        cmds[ncmds] = cmd;
        argcs[ncmds++] = (int)n;
        j += 1 + (int)n;
    }
    if (ncmds == 0) {
        addReplyError(c, "RDMAREPLAY needs at least one command");
        goto err;
    }
    if (s->r.rstate != MIG_R_READY) {
        addReplyError(c, "RDMAREPLAY before RDMADONE completed");
        goto err;
    }

    client *fc = createClient(NULL);
    fc->flags |= CLIENT_DENY_BLOCKING;
    int i = 0;
    for (j = 2; j < c->argc; i++) {
        int n = argcs[i];
        long long errors = server.stat_total_error_replies;
        fc->argv = zmalloc(sizeof(robj *) * n);
        fc->argv_len = fc->argc = n;
        for (int k = 0; k < n; k++) {
            fc->argv[k] = c->argv[j + 1 + k];
            incrRefCount(fc->argv[k]);
        }
        fc->cmd = fc->lastcmd = fc->realcmd = cmds[i];
        call(fc, CMD_CALL_FULL);
        freeClientArgv(fc);
        if (server.stat_total_error_replies != errors) {
            migFail(s, "RDMAREPLAY: command %d ('%s') failed here", i + 1, cmds[i]->fullname);
            addReplyErrorFormat(c, "RDMAREPLAY: %s; the import rolls back", s->error);
            freeClient(fc);
            s->writes_replayed += i + 1;
            goto err;
        }
        s->writes_replayed++;
        j += 1 + n;
    }
    freeClient(fc);
    /* Not RDMAREPLAY itself: the commands it ran are propagated. */
    preventCommandPropagation(c);
    addReplyLongLong(c, ncmds);
    zfree(cmds);
    zfree(argcs);
    return;

err:
    preventCommandPropagation(c);
    zfree(cmds);
    zfree(argcs);
}
