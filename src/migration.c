/* Slot migration as memory blocks: the design, and what operators and
 * upstream see of it: RDMAMIGRATESLOTS (start, STATUS, CANCEL), INFO
 * migration, DEBUG MIGRATION-*, and the hooks of blocked.c
 * (docs/DESIGN.md, "The protocol").
 *
 * A donor moves a set of hash slots to a recipient as the slots' memory
 * blocks (slotalloc.c), copied by the block transport (xfer.c: one
 * chain of RDMA WRITEs, or writev over TCP) into blocks of the recipient,
 * which checks and adopts them (slotblocks.c). Both nodes keep serving
 * clients throughout. The pieces the migration files put together:
 *
 *   donor                                       recipient
 *   -----                                       ---------
 *   RDMAMIGRATESLOTS host port slots...   (the caller waits, blocked)
 *   1 check (main thread, in the command)
 *   donor thread:
 *   2 INITRDMASERVER 0 slots TRANSPORT t   ---> import session for the slots
 *     VERSION v                                 (refused unless v is ours:
 *                                               migprotocol.h), its id,
 *                                               listener + token; the
 *                                               recipient thread accepts
 *     xferConnect(token)                    ---> one data connection
 *   3 prepare (main thread slices): relocate stragglers, pin the
 *     slots, build each slot's manifest in its blocks while writes
 *     flow (the slots watched), freeze the slots (writes wait), build
 *     again the manifests of slots written meanwhile, list the blocks
 *   4 RDMAREGISTER slot nkeys manifest     ---> reserve + register blocks,
 *     blocks (each with its XXH3 checksum)      reply addresses/rkeys
 *     xferWriteBlocks (chunks), xferFinish   ---> xferWaitTransfer, verdict
 *     (paced by migration-max-bandwidth: migPace)
 *     after each chunk, relax the freeze of the slots it completed:
 *     their writes flow again, and what they propagate is recorded
 *     (migrationPropagated)
 *   5 RDMADONE slots                       ---> nodes.conf: importing slots;
 *                                               recipient thread checks
 *                                               the checksums, adopts,
 *                                               checks, patches (and, with
 *                                               replicas or AOF, keeps the
 *                                               blocks' images for one
 *                                               RDMASLOTADOPT per slot, or
 *                                               serializes RESTORE payloads
 *                                               for replicas without capa
 *                                               rdma-slot-adopt); the main
 *                                               thread links keys in slices;
 *                                               then the deferred reply
 *     freeze again; RDMAREPLAY argc args... ---> the recorded writes, applied
 *                                               in order (and propagated)
 *   6 RDMAHANDOVER session                 ---> READY -> OWNED: owner,
 *                                               epoch bump, nodes.conf
 *     (no reply: RDMARESOLVE session, until an answer, slots still frozen)
 *     CLUSTER SETSLOTS NODE here (main thread), thaw: held writes now get
 *     MOVED
 *   7 delete the keys in slices (DELs to replicas and AOF), free the
 *     manifests; emptied blocks go back to the OS
 *   reply to the caller with the summary
 *
 * Threads. Only the main thread touches the keyspace and cluster state.
 * The donor thread talks to the recipient (hiredis, blocking, with the
 * migration's deadline) and drives the transport; when it needs the main
 * thread (prepare, handover, delete, rollback) it posts a job and waits: a
 * 1 ms timer event runs the job in slices of MIG_SLICE_US. The recipient
 * thread accepts the data connection, registers blocks, waits for the
 * transfer and patches; the main thread's timer answers the blocked
 * RDMAREGISTER/RDMADONE callers and links keys in slices.
 *
 * No MIGRATING or IMPORTING state. A MIGRATING slot makes the donor answer
 * -ASK for keys it does not have, and a new key written that way would
 * live only on the recipient, where a rollback would lose it. The donor
 * keeps owning and serving the slots with no redirection until the
 * handover. The recipient does not mark them IMPORTING either: its import
 * session (in memory only) knows them, its adopted copies are invisible to
 * clients (MOVED, even with ASKING, for a slot it neither owns nor
 * imports) until it owns them, and a recipient that crashes comes back
 * with no trace of the import (an IMPORTING mark would be saved in
 * nodes.conf). CLUSTER SETSLOTS NODE bumps its epoch for the slots of the
 * import as for IMPORTING ones (migrationImportsSlot).
 *
 * Writes. From the freeze (prepare) to the end of the transfer, commands
 * writing to the slots wait (slotfreeze.c; clients never get an error),
 * expiry and eviction leave them alone, and background compaction does not
 * touch them (slotCompactPin), so the bytes under transfer do not change.
 * The recipient pins the slots it imports too, from INITRDMASERVER to the
 * session's end: nothing moves or drains in blocks being received,
 * patched, or kept for a rollback to free.
 * Reads of frozen slots leave the keys' access time (LRU/LFU) alone
 * (slotFreezeKeepsBytes, patch 0032), and reads that would change more, of
 * compressed lists, wait (slotfreeze.c): the bytes shipped are those the
 * donor checksummed. Once a slot's bytes have left,
 * its freeze is relaxed (migration-write-replay yes, the default), while
 * the others are still sent, a slot some command waits for first: writes,
 * expiry and eviction of the slot's keys run here again, and every command
 * they propagate (the replication stream's form: deterministic) is
 * recorded. When the recipient has linked every key, the slots freeze
 * again, the recipient applies the recorded commands in order
 * (RDMAREPLAY), and the handover follows: writes wait only for the
 * transfer and for the replay, not for the recipient's checks and links.
 * The keys those writes touched are deleted one by one afterwards (their
 * memory is no longer only in the blocks). With the option off, or past
 * MIG_CAPTURE_MAX_BYTES of recorded commands, the slots stay frozen to the
 * handover. The pause is reported (write_pause_ms, both parts).
 *
 * Failures. Anything that fails before the handover (the recipient dies or
 * refuses, a connection drops, the deadline passes, bad data, CANCEL)
 * rolls back: the donor thaws and keeps everything, and ends the
 * recipient's session by name (RDMARESOLVE); the recipient drops every
 * adopted key (with DELs to its replicas and AOF) and every block of the
 * migration. The recipient also rolls back by itself when the donor's
 * connection closes or its deadline passes before it owns the slots. Once
 * the recipient owns the slots the migration completes on the donor
 * whatever happens.
 *
 * The handover (docs/DESIGN.md, "The handover"). At every instant each key
 * of a moving slot is held by a node that owns the slot or will own it
 * without any further decision: the recipient's session is a state machine
 * (MIG_R_*, migRecipientTo) whose slots become its own only in state READY
 * (every key linked, the writes replayed), through RDMAHANDOVER naming the
 * session on the donor's connection; a session that rolls back can never
 * get there, so no donor hands its slots to a recipient that dropped the
 * keys. The donor deletes its copies only once the recipient said OK to
 * that, or RDMARESOLVE said "owned", or the cluster bus shows the
 * recipient's claim (a newer config epoch). When RDMAHANDOVER's reply is
 * lost the donor does not guess: the slots stay frozen (no write to them
 * is acknowledged) while it asks RDMARESOLVE, which also fences the
 * session (a handover still in flight is then refused), until it knows.
 * Cancels and cleanups name the session; a donor the recipient refused
 * has none, and touches nothing. The recipient's adopted keys reach its
 * AOF, RDB and replicas before the slots are its own: nodes.conf lists the
 * import's slots first (migImporting), and a recipient killed before its
 * handover deletes their keys when it starts again.
 *
 * One migration per node at a time, in either role.
 *
 * Files (migsession.h, their private header, has the map): this file
 * starts a donor; migdonor.c is the donor (steps 2 to 7 on its side, its
 * thread, recorded writes); migrecipient.c the recipient (its commands,
 * threads, linking, rollback); migsession.c what both use (the session,
 * the timer and main-thread jobs, key deletion, thread priority, the
 * nodes.conf variables). Calls go down only: this file -> the roles ->
 * the session.
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

/* ================================ Commands ================================ */

static void migStatusCommand(client *c) {
    migSession *s = mig;
    migFigures f;

    if (s) {
        /* The phase under way counts up to now; a donor's bytes are those
         * sent so far. */
        migSessionFigures(s, &f);
        if (!s->transport[0])
            snprintf(f.transport, sizeof(f.transport), "%s", xferKindName(s->kind));
        if (s->phase < MIG_PHASE_COUNT) f.phase_ms[s->phase] += mstime() - s->phase_start_ms;
        if (s->role == MIG_ROLE_DONOR) f.bytes = s->bytes_sent;
    } else {
        f = migLast.fig;
        if (!f.transport[0]) snprintf(f.transport, sizeof(f.transport), "none");
    }
    addReplyMapLen(c, 28);
    addReplyBulkCString(c, "role"); addReplyBulkCString(c, migRoleName[s ? s->role : MIG_ROLE_NONE]);
    addReplyBulkCString(c, "state"); addReplyBulkCString(c, s ? "running" : "idle");
    addReplyBulkCString(c, "session"); addReplyBulkCString(c, s ? s->sid : "");
    /* The recipient's state machine; a donor's is its phase. */
    addReplyBulkCString(c, "import_state");
    addReplyBulkCString(c, s && s->role == MIG_ROLE_RECIPIENT ? migRStateName[s->r.rstate] : "");
    int resolving = 0;
    if (s) atomicGet(s->d.resolving, resolving);
    addReplyBulkCString(c, "resolving"); addReplyLongLong(c, resolving);
    addReplyBulkCString(c, "phase");
    addReplyBulkCString(c, s ? migPhaseName[s->phase] : "idle");
    migAddReplyFigureFields(c, &f, 1);
    addReplyBulkCString(c, "elapsed_ms"); addReplyLongLong(c, f.elapsed_ms);
    addReplyBulkCString(c, "last_status"); addReplyBulkCString(c, migLastName[migLast.last]);
    addReplyBulkCString(c, "last_error");
    addReplyBulkCString(c, migLast.last_error ? migLast.last_error : "");
}

static void migCancelCommand(client *c) {
    migSession *s = mig;
    if (s == NULL) {
        addReplyError(c, "no migration is running");
        return;
    }
    if ((s->role == MIG_ROLE_DONOR && s->d.handed_over) ||
        (s->role == MIG_ROLE_RECIPIENT && s->r.rstate == MIG_R_OWNED)) {
        addReplyError(c, "the migration is past its handover: it can no longer "
                         "be cancelled (the recipient owns the slots)");
        return;
    }
    int resolving;
    atomicGet(s->d.resolving, resolving);
    if (resolving) {
        addReplyError(c, "the handover's reply was lost: the outcome is being "
                         "asked of the recipient and cannot be cancelled (see "
                         "RDMAMIGRATESLOTS STATUS)");
        return;
    }
    pthread_mutex_lock(&s->lock);
    int begun = s->d.handover_begun;
    if (!begun) atomicSet(s->cancel, 1);
    pthread_mutex_unlock(&s->lock);
    if (begun) {
        addReplyError(c, "the handover has begun (RDMAHANDOVER sent to the "
                         "recipient): the migration can no longer be cancelled");
        return;
    }
    s->cancelled = 1;
    migInterrupt(s);
    serverLog(LL_WARNING, "Slot migration (%s): CANCEL asked", migRoleName[s->role]);
    addReply(c, shared.ok);
}

/* RDMAMIGRATESLOTS <host> <port> <slot|start-end>... [TRANSPORT rdma|tcp|auto]
 *                  [AUTH pw | AUTH2 user pw] [TIMEOUT ms]
 * RDMAMIGRATESLOTS STATUS | CANCEL */
void rdmaMigrateSlotsCommand(client *c) {
    if (c->argc == 2 && !strcasecmp(c->argv[1]->ptr, "status")) {
        migStatusCommand(c);
        return;
    }
    if (c->argc == 2 && !strcasecmp(c->argv[1]->ptr, "cancel")) {
        migCancelCommand(c);
        return;
    }
    if (!strcasecmp(c->argv[1]->ptr, "status") || !strcasecmp(c->argv[1]->ptr, "cancel")) {
        addReplyErrorFormat(c, "RDMAMIGRATESLOTS %s takes no arguments",
                            (char *)c->argv[1]->ptr);
        return;
    }
    if (c->argc < 4) {
        addReplyError(c, "syntax: RDMAMIGRATESLOTS <host> <port> <slot|start-end>... "
            "[TRANSPORT rdma|tcp|auto] [AUTH pw | AUTH2 user pw] [TIMEOUT ms], "
            "or RDMAMIGRATESLOTS STATUS|CANCEL");
        return;
    }
    if (migCheckNode(c) == C_ERR) return;

    /* Options come after the slots: find where the slots end. */
    int last = 3;
    while (last < c->argc) {
        char *a = c->argv[last]->ptr;
        if (!strcasecmp(a, "transport") || !strcasecmp(a, "auth") ||
            !strcasecmp(a, "auth2") || !strcasecmp(a, "timeout")) break;
        last++;
    }
    xferKind kind = (xferKind)server.migration_transport;
    long long timeout = MIG_DEFAULT_TIMEOUT_MS, port;
    robj *user = NULL, *pass = NULL;
    for (int j = last; j < c->argc; j++) {
        char *a = c->argv[j]->ptr;
        int more = c->argc - j - 1, r = migParseCommonOption(c, &j, &kind, &timeout);
        if (r == -1) return;
        if (r == 1) continue;
        if (!strcasecmp(a, "auth") && more >= 1) {
            pass = c->argv[++j];
            user = NULL;
        } else if (!strcasecmp(a, "auth2") && more >= 2) {
            user = c->argv[++j];
            pass = c->argv[++j];
        } else {
            addReplyErrorFormat(c, "Invalid or incomplete option '%s' (TRANSPORT "
                "needs rdma|tcp|auto, AUTH a password, AUTH2 a user and a password, "
                "TIMEOUT milliseconds)", a);
            return;
        }
    }
    if (getLongLongFromObject(c->argv[2], &port) != C_OK || port <= 0 || port > 65535) {
        addReplyErrorFormat(c, "Invalid port '%s'", (char *)c->argv[2]->ptr);
        return;
    }
    unsigned char bitmap[CLUSTER_SLOTS / 8];
    int nslots;
    if (clusterParseSlotRanges(c, 3, last, bitmap, &nslots) == C_ERR) return;

    /* 1. Check: the target, the slots, no other migration. */
    clusterNode *target = NULL;
    dictIterator *di = dictGetSafeIterator(server.cluster->nodes);
    dictEntry *de;
    while ((de = dictNext(di)) != NULL) {
        clusterNode *n = dictGetVal(de);
        if (n->port == port && !strcmp(n->ip, c->argv[1]->ptr) &&
            !(n->flags & (CLUSTER_NODE_HANDSHAKE | CLUSTER_NODE_NOADDR))) {
            target = n;
            break;
        }
    }
    dictReleaseIterator(di);
    if (target == NULL) {
        addReplyErrorFormat(c, "%s:%lld is not a node of this cluster (give the "
            "ip and port it announces, as in CLUSTER NODES)",
            (char *)c->argv[1]->ptr, port);
        return;
    }
    if (target == server.cluster->myself) {
        addReplyError(c, "I can't migrate hash slots to myself");
        return;
    }
    if (!nodeIsMaster(target)) {
        addReplyErrorFormat(c, "%s:%lld is not a master", (char *)c->argv[1]->ptr, port);
        return;
    }
    if (target->flags & (CLUSTER_NODE_FAIL | CLUSTER_NODE_PFAIL)) {
        addReplyErrorFormat(c, "%s:%lld is failing", (char *)c->argv[1]->ptr, port);
        return;
    }
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        if (!migSlotIsSet(bitmap, slot)) continue;
        if (server.cluster->slots[slot] != server.cluster->myself) {
            addReplyErrorFormat(c, "I'm not the owner of hash slot %d", slot);
            return;
        }
        if (server.cluster->migrating_slots_to[slot] || server.cluster->importing_slots_from[slot]) {
            addReplyErrorFormat(c, "Hash slot %d is already MIGRATING or IMPORTING "
                "(finish or fix that first: redis-cli --cluster fix)", slot);
            return;
        }
    }
    if (mig != NULL) {
        addReplyErrorFormat(c, "a migration is already running here (%s, phase %s): "
            "see RDMAMIGRATESLOTS STATUS", migRoleName[mig->role], migPhaseName[mig->phase]);
        return;
    }
    if (kind == XFER_KIND_RDMA && !xferRdmaCompiled()) {
        addReplyError(c, "TRANSPORT rdma: this server was built without RDMA "
                         "(BUILD_RDMA=no); use tcp or auto");
        return;
    }
    if (c->flags & CLIENT_MULTI) {
        addReplyError(c, "RDMAMIGRATESLOTS can't run inside MULTI");
        return;
    }

    /* With slot-affinity no the keys are in the general heap: the prepare
     * relocates them (migdonor.c), which needs the allocator. */
    const char *aerr = NULL;
    if (slotCompactStart(&aerr) == C_ERR) {
        addReplyErrorFormat(c, "no slot blocks on this node: %s; move the "
            "slots with MIGRATE (redis-cli --cluster-transport legacy)", aerr);
        return;
    }
    migSession *s = migNewSession(MIG_ROLE_DONOR, migDonorTick);
    memcpy(s->bitmap, bitmap, sizeof(bitmap));
    s->nslots = nslots;
    s->kind = kind;
    s->deadline_ms = s->start_ms + timeout;
    snprintf(s->d.host, sizeof(s->d.host), "%s", target->ip);
    s->d.port = (int)port;
    memcpy(s->d.target, target->name, CLUSTER_NAMELEN);
    if (pass) s->d.pass = sdsdup(pass->ptr);
    if (user) s->d.user = sdsdup(user->ptr);
    s->d.caller = c;
    mig = s;
    if (pthread_create(&s->thread, NULL, migDonorThread, s) != 0) {
        mig = NULL;
        s->d.caller = NULL;
        migFail(s, "cannot start the migration thread: %s", strerror(errno));
        addReplyErrorFormat(c, "migration failed in check: %s", s->error);
        migEndSession(s, MIG_LAST_FAILED);
        return;
    }
    s->thread_started = 1;
    serverLog(LL_NOTICE, "Slot migration of %d slots to %.40s (%s:%d) started, "
        "transport %s, timeout %lld ms", nslots, s->d.target, s->d.host, s->d.port,
        xferKindName(kind), timeout);
    migBlock(c);
    migStartTimer();
}

/* ============================ Hooks and INFO ============================== */

void migrationClientUnblocked(client *c) {
    migSession *s = mig;
    if (s == NULL) return;
    if (s->d.caller == c) s->d.caller = NULL;
    if (s->r.reg_client == c) s->r.reg_client = NULL;
    if (s->r.done_client == c) s->r.done_client = NULL;
}

/* The checks both commands of a migration's replication stream make
 * (RDMASLOTDROP, RDMASLOTADOPT): only a master's stream and the AOF may send
 * them, in cluster mode, to database 0. Replies the error and returns 0
 * otherwise; 'role' says who sends the command, 'instead' what a client
 * should use. */
static int migStreamCommandAllowed(client *c, const char *name, const char *role,
                                   const char *instead) {
    if (!mustObeyClient(c)) {
        addReplyErrorFormat(c, "%s is internal: a slot migration's %s sends it "
                            "to its replicas and AOF; %s", name, role, instead);
        return 0;
    }
    if (!server.cluster_enabled) {
        addReplyErrorFormat(c, "%s needs cluster mode (this node has cluster "
                            "support disabled)", name);
        return 0;
    }
    if (c->db->id != 0) {
        addReplyErrorFormat(c, "%s: slots live in database 0 (cluster mode)", name);
        return 0;
    }
    return 1;
}

/* RDMASLOTDROP <SYNC|ASYNC> <slot|start-end>...: delete every key of the
 * slots, ASYNC freeing values on the lazyfree thread as UNLINK does. Only
 * a master (to its replicas) and the AOF send it: a client could drop
 * a slot the node serves, or a master's replicas would miss keys it has,
 * so clients are refused. The arguments are checked before anything is
 * deleted. No ownership check: a replica's view of the slots may lag its
 * master's, and at AOF load the slots' owners are those of the end of the
 * file, not of this point of it. */
void rdmaSlotDropCommand(client *c) {
    unsigned char bitmap[CLUSTER_SLOTS / 8];
    long long deleted;
    int count, lazy;

    if (!migStreamCommandAllowed(c, "RDMASLOTDROP", "donor", "to delete keys, use DEL or UNLINK"))
        return;
    if (!strcasecmp(c->argv[1]->ptr, "sync")) {
        lazy = 0;
    } else if (!strcasecmp(c->argv[1]->ptr, "async")) {
        lazy = 1;
    } else {
        addReplyErrorFormat(c, "RDMASLOTDROP: invalid mode '%.64s': use SYNC or ASYNC",
                            (char *)c->argv[1]->ptr);
        return;
    }
    if (clusterParseSlotRanges(c, 2, c->argc, bitmap, &count) == C_ERR) return;
    deleted = migDropSlots(bitmap, lazy);
    /* A replica's own AOF takes the command (call() propagates what
     * changed the dataset: migDeleteKey() counts it); its replicas get it
     * in the master's stream. Remember where it ends, for their PSYNC
     * after a promotion. */
    if (c->flags & CLIENT_MASTER) migSlotDropApplied(c->read_reploff);
    addReplyLongLong(c, deleted);
}

/* A replica that could not run its master's RDMASLOTADOPT (no room in its
 * slot allocator's range, no arena id free, a stream damaged on the way)
 * would go on replicating without the slot's keys, and a failover would
 * lose them. So it drops the link without keeping the master for a
 * partial resync (as after a protocol error from it: freeClient() caches
 * no such master), and its full sync brings every key. */
static void migReplicaAdoptFailed(client *c, const char *err) {
    serverLog(LL_WARNING, "Slot migration: this replica cannot run its master's "
              "RDMASLOTADOPT (%s): it would miss the slot's keys, so it drops the "
              "link and resyncs in full", err);
    c->flags |= CLIENT_PROTOCOL_ERROR;
    freeClientAsync(c);
}

/* RDMASLOTADOPT <slot> <nkeys> <manifest> <nblocks>
 *               [<donor-address> <size> <checksum> <ranges> <bytes>]...
 *               [MEMBERS <n> [<slot> <nkeys> <manifest>]...]:
 * adopt one slot's keys (with MEMBERS, the keys of a unit's slots: slot
 * groups, capa rdma-unit-adopt) from the blocks a migration's donor sent (images,
 * blkBlockImage), as the recipient did: what a recipient sends its
 * replicas and AOF for each imported slot instead of a RESTORE per key
 * (migsession.c, "Adopting slots on replicas and AOF"). Like RDMASLOTDROP,
 * only a master's stream and the AOF may send it: clients are refused.
 * Everything is checked (blkAdoptImages: the descriptions, the checksums,
 * then the recipient's checks of every record and pointer) before a key
 * is linked: a damaged or lying command gets an error and leaves nothing
 * behind. No ownership check, as for RDMASLOTDROP. Replies the number of
 * keys adopted. */
void rdmaSlotAdoptCommand(client *c) {
    long long slot = -1, nkeys, nblocks;
    unsigned long long manifest;
    const char *aerr = NULL;
    sds err = NULL, msg = NULL;
    blkUnitSlot *us = NULL;
    blkBlockImage *imgs = NULL;

    if (!migStreamCommandAllowed(c, "RDMASLOTADOPT", "recipient", "to add keys, use RESTORE"))
        return;
    for (int j = 1; j < c->argc; j++) {
        if (!sdsEncodedObject(c->argv[j])) {
            msg = sdscatprintf(sdsempty(), "RDMASLOTADOPT: argument %d is not a string", j);
            goto fail;
        }
    }
    if (getLongLongFromObject(c->argv[1], &slot) != C_OK || slot < 0 || slot >= CLUSTER_SLOTS ||
        getLongLongFromObject(c->argv[2], &nkeys) != C_OK || nkeys < 1 ||
        !string2ull(c->argv[3]->ptr, &manifest) ||
        getLongLongFromObject(c->argv[4], &nblocks) != C_OK || nblocks < 1 ||
        nblocks > (c->argc - 5) / 5) {
        msg = sdsnew("RDMASLOTADOPT: bad slot, key count, manifest address or "
                     "block count, or not 5 arguments per block");
        goto fail;
    }
    /* MEMBERS <n> [<slot> <nkeys> <manifest>]...: the other slots of a
     * unit (slot groups) whose keys are in these blocks too. */
    int m = 5 + 5 * (int)nblocks;
    long long nmembers = 0;
    if (c->argc != m && (c->argc < m + 2 || strcasecmp(c->argv[m]->ptr, "members") ||
        getLongLongFromObject(c->argv[m + 1], &nmembers) != C_OK || nmembers < 1 ||
        nmembers >= CLUSTER_SLOTS || c->argc != m + 2 + 3 * nmembers)) {
        msg = sdsnew("RDMASLOTADOPT: not 5 arguments per block, then nothing or "
                     "MEMBERS <n> and 3 arguments (slot, key count, manifest) per member");
        goto fail;
    }
    us = zmalloc(sizeof(*us) * (nmembers + 1));
    us[0].slot = (int)slot;
    us[0].nkeys = (size_t)nkeys;
    us[0].manifest = manifest;
    for (long long k = 1; k <= nmembers; k++) {
        robj **a = c->argv + m + 2 + 3 * (k - 1);
        long long ms, mk;
        unsigned long long mm;
        int dup = 0;
        if (getLongLongFromObject(a[0], &ms) != C_OK || ms < 0 || ms >= CLUSTER_SLOTS ||
            getLongLongFromObject(a[1], &mk) != C_OK || mk < 1 || !string2ull(a[2]->ptr, &mm)) {
            msg = sdscatprintf(sdsempty(), "RDMASLOTADOPT: member %lld: bad slot, key "
                               "count or manifest address", k);
            goto fail;
        }
        for (long long i = 0; i < k; i++) dup |= us[i].slot == (int)ms;
        if (dup) {
            msg = sdscatprintf(sdsempty(), "RDMASLOTADOPT: slot %lld is given twice", ms);
            goto fail;
        }
        us[k].slot = (int)ms;
        us[k].nkeys = (size_t)mk;
        us[k].manifest = mm;
    }
    imgs = zcalloc(sizeof(*imgs) * nblocks);
    for (long long b = 0; b < nblocks; b++) {
        robj **a = c->argv + 5 + 5 * b;
        unsigned long long donor, size, sum;
        if (!string2ull(a[0]->ptr, &donor) || !string2ull(a[1]->ptr, &size) ||
            !string2ull(a[2]->ptr, &sum)) {
            msg = sdscatprintf(sdsempty(), "RDMASLOTADOPT: block %lld: bad address, "
                               "size or checksum", b);
            goto fail;
        }
        imgs[b].donor = donor;
        imgs[b].size = size;
        imgs[b].sum = sum;
        imgs[b].ranges = a[3]->ptr;    /* Read only: the arguments' own. */
        imgs[b].bytes = a[4]->ptr;
        imgs[b].len = sdslen(a[4]->ptr);
    }
    if (slotCompactStart(&aerr) == C_ERR) {
        msg = sdscatprintf(sdsempty(), "RDMASLOTADOPT: this node can't adopt slot "
                           "blocks: %s", aerr);
        goto fail;
    }
    long long linked = blkAdoptImages(us, (int)nmembers + 1, imgs, (size_t)nblocks, &err);
    if (linked == -1) {
        msg = sdscatprintf(sdsempty(), "RDMASLOTADOPT: slot %lld: %s; nothing of it "
                           "was adopted", slot, err);
        sdsfree(err);
        goto fail;
    }
    zfree(imgs);
    zfree(us);
    /* As RDMASLOTDROP: the replica's own AOF takes the command (the links
     * counted as changes), and its position is remembered for its
     * replicas' PSYNC after a promotion. */
    if (c->flags & CLIENT_MASTER) migSlotAdoptApplied(c->read_reploff, nmembers > 0);
    addReplyLongLong(c, linked);
    return;

fail:
    /* A master's command: no error reply (it would go nowhere, and
     * propagation-error-behavior may make it a panic); the replica resyncs
     * instead. The AOF's: logged by upstream too (afterErrorReply). */
    if (c->flags & CLIENT_MASTER) migReplicaAdoptFailed(c, msg);
    else addReplyErrorFormat(c, "%s", msg);
    sdsfree(msg);
    zfree(imgs);
    zfree(us);
}

/* CLIENT UNBLOCK of a migration's caller: it stops waiting, the migration
 * goes on. */
void migrationReplyUnblocked(client *c) {
    addReplyError(c, "-UNBLOCKED the client stopped waiting; the migration "
                     "goes on (RDMAMIGRATESLOTS STATUS)");
}

/* The "# Migration" INFO section: the migration's fields, then the write
 * fence's (slotfreeze.c). */
sds migrationGenInfo(sds info) {
    migSession *s = mig;
    xferStats t = migLast.tstats;
    long long refused = migLast.peers_refused, now = 0;
    if (s) atomicGet(s->r.peers_refused, now);
    refused += now;
    if (s) {
        t.wr_posted += s->tstats.wr_posted;
        t.chains_posted += s->tstats.chains_posted;
        t.rdma_bytes_written += s->tstats.rdma_bytes_written;
        t.tcp_bytes_sent += s->tstats.tcp_bytes_sent;
    }
    info = sdscatprintf(info,
        "# Migration\r\n"
        "migration_protocol_version:%d\r\n"
        "migration_state:%s\r\n"
        "migration_role:%s\r\n"
        "migration_phase:%s\r\n"
        "migration_slots:%d\r\n"
        "migration_keys:%lld\r\n"
        "migration_bytes:%lld\r\n"
        "migration_bytes_total:%lld\r\n"
        "migration_last_status:%s\r\n"
        "migration_last_error:%s\r\n"
        "migration_last_transport:%s\r\n"
        "migration_last_keys:%lld\r\n"
        "migration_last_bytes:%lld\r\n"
        "migration_last_ms:%lld\r\n"
        "migration_last_write_pause_ms:%lld\r\n"
        "migration_last_write_pause_mean_ms:%lld\r\n"
        "migration_last_commands_held:%lld\r\n"
        "migration_last_commands_held_max_ms:%lld\r\n"
        "migration_last_writes_replayed:%lld\r\n"
        "migration_last_throttled_ms:%lld\r\n"
        "migration_last_prepare_frozen_ms:%lld\r\n"
        "migration_last_manifests_rebuilt:%lld\r\n"
        "migration_last_manifests_stale:%lld\r\n"
        "migration_last_relocated_keys:%lld\r\n"
        "migration_last_relocated_bytes:%lld\r\n"
        "migration_last_relocate_ms:%lld\r\n"
        "migration_last_isolated_slots:%lld\r\n"
        "migration_last_keys_copied:%lld\r\n"
        "migration_last_bytes_copied:%lld\r\n"
        "migration_total_migrations:%lld\r\n"
        "migration_total_failed:%lld\r\n"
        "migration_total_keys:%lld\r\n"
        "migration_total_bytes:%lld\r\n"
        "migration_total_writes_replayed:%lld\r\n"
        "migration_total_keys_copied:%lld\r\n"
        "migration_thread_priority_raised:%lld\r\n"
        "migration_data_peers_refused:%lld\r\n"
        "migration_slot_drop_keys_wholesale:%lld\r\n"
        "migration_slot_drop_keys_freed:%lld\r\n"
        "migration_max_bandwidth:%lld\r\n"
        "migration_rdma_wr_posted:%llu\r\n"
        "migration_rdma_chains_posted:%llu\r\n"
        "migration_rdma_bytes_written:%llu\r\n"
        "migration_tcp_bytes_sent:%llu\r\n",
        MIG_PROTOCOL_VERSION,
        s ? "running" : "idle",
        migRoleName[s ? s->role : MIG_ROLE_NONE],
        migPhaseName[s ? s->phase : MIG_PHASE_IDLE],
        s ? s->nslots : 0,
        s ? s->keys : 0,
        s ? (s->role == MIG_ROLE_DONOR ? s->bytes_sent : s->bytes) : 0,
        s ? s->bytes_total : 0,
        migLastName[migLast.last],
        migLast.last_error ? migLast.last_error : "",
        migLast.fig.transport[0] ? migLast.fig.transport : "none",
        migLast.fig.keys, migLast.fig.bytes, migLast.fig.elapsed_ms, migLast.fig.write_pause_ms,
        migLast.fig.write_pause_mean_ms, migLast.fig.held_cmds, migLast.fig.held_max_ms,
        migLast.fig.writes_replayed, migLast.fig.throttled_ms, migLast.prepare_frozen_ms,
        migLast.manifests_rebuilt, migLast.manifests_stale,
        migLast.relocated_keys, migLast.relocated_bytes, migLast.relocated_ns / 1000000,
        migLast.isolated_slots, migLast.keys_copied, migLast.bytes_copied,
        migLast.total_ok, migLast.total_failed, migLast.total_keys, migLast.total_bytes,
        migLast.total_writes_replayed, migLast.total_keys_copied, migLast.prio_raised, refused,
        migLast.drop_keys_wholesale, migLast.drop_keys_freed,
        server.migration_max_bandwidth,
        (unsigned long long)t.wr_posted, (unsigned long long)t.chains_posted,
        (unsigned long long)t.rdma_bytes_written, (unsigned long long)t.tcp_bytes_sent);
    return slotFreezeGenInfo(info);
}

/* CONFIG SET migration-test-corrupt (config.c): a valid value, and not
 * while a migration runs (each import takes the value at its start); ""
 * (off) always. */
int migrationTestCorruptValid(char *val, const char **err) {
    struct migCorrupt c;
    if (migParseTestCorrupt(val, &c, err) == -1) return 0;
    if (c.what != MIG_CORRUPT_NONE && mig) {
        *err = "a migration is running: set migration-test-corrupt before it starts";
        return 0;
    }
    return 1;
}

/* DEBUG MIGRATION-CUT: shut the running migration's TCP data connection
 * down (both directions) on this node, without telling the migration, as a
 * cut network ends it: tests watch both nodes find out and roll back. */
void migrationDebugCutCommand(client *c) {
    migSession *s = mig;
    int cut = 0;

    if (s == NULL) {
        addReplyError(c, "no migration is running on this node");
        return;
    }
    pthread_mutex_lock(&s->lock);
    if (s->data_fd != -1) cut = shutdown(s->data_fd, SHUT_RDWR) == 0;
    pthread_mutex_unlock(&s->lock);
    if (!cut) {
        addReplyErrorFormat(c, "the migration (phase %s) has no TCP data "
                            "connection to cut", migPhaseName[s->phase]);
        return;
    }
    serverLog(LL_WARNING, "Slot migration: DEBUG MIGRATION-CUT: the data "
              "connection is shut down");
    addReply(c, shared.ok);
}
