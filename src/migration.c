/* Slot migration as memory blocks: RDMAMIGRATESLOTS and the recipient's
 * commands (docs/DESIGN.md, "The protocol").
 *
 * A donor moves a set of hash slots to a recipient as the slots' memory
 * blocks (slotalloc.c), copied by the block transport (migtransport.c: one
 * chain of RDMA WRITEs, or writev over TCP) into blocks of the recipient,
 * which checks and adopts them (migblocks.c). Both nodes keep serving
 * clients throughout. The pieces this file puts together:
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
 *     migConnect(token)                    ---> one data connection
 *   3 prepare (main thread slices): relocate stragglers, pin the
 *     slots, build each slot's manifest in its blocks while writes
 *     flow (the slots watched), freeze the slots (writes wait), build
 *     again the manifests of slots written meanwhile, list the blocks
 *   4 RDMAREGISTER slot nkeys manifest     ---> reserve + register blocks,
 *     blocks (each with its XXH3 checksum)      reply addresses/rkeys
 *     migWriteBlocks (chunks), migFinish   ---> migWaitTransfer, verdict
 *     (paced by migration-max-bandwidth: migPace)
 *     after each chunk, relax the freeze of the slots it completed:
 *     their writes flow again, and what they propagate is recorded
 *     (migrationPropagated)
 *   5 RDMADONE slots                       ---> nodes.conf: importing slots;
 *                                               recipient thread checks
 *                                               the checksums, adopts,
 *                                               checks, patches (and, with
 *                                               replicas or AOF, serializes
 *                                               RESTORE payloads); the main
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
#include "migblocks.h"
#include "migtransport.h"
#include "clustersetslots.h"
#include "migration.h"
#include "migprotocol.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

/* cluster.c, not in cluster.h. */
int clusterSaveConfig(int do_fsync);

#define MIG_SLICE_US 500            /* Main thread work per timer call. */
#define MIG_DEFAULT_TIMEOUT_MS 60000
#define MIG_MAX_TIMEOUT_MS (24LL * 3600 * 1000)
#define MIG_LINK_BATCH 256          /* Keys linked between clock checks. */
#define MIG_WRITE_CHUNK (4LL << 20) /* Granularity of a transfer: after
                                     * each chunk, the slots wholly sent
                                     * take writes again, and a slot a
                                     * client waits for may go next. */
#define MIG_CAPTURE_MAX_BYTES (64LL << 20) /* Recorded writes, then freeze. */
#define MIG_REPLAY_BATCH_BYTES (4LL << 20)  /* Per RDMAREPLAY call. */
#define MIG_REPLAY_BATCH_ARGS 65536

/* migration-thread-priority: how the migration threads share a CPU with
 * the main threads that serve clients (values of the config enum). */
#define MIG_PRIO_AUTO 0     /* idle, raised to normal when starved (the
                             * default; see migPriorityWatch). */
#define MIG_PRIO_NORMAL 1   /* Like the main thread. */
#define MIG_PRIO_LOW 2      /* nice +10: about a tenth of a busy CPU. */
#define MIG_PRIO_IDLE 3     /* SCHED_IDLE: only CPU time nobody else wants. */
#define MIG_PRIO_WATCH_MS 250   /* auto: the watch's window. */

/* Phases, in STATUS and INFO. */
enum {
    MIG_PHASE_IDLE, MIG_PHASE_CHECK, MIG_PHASE_PREPARE, MIG_PHASE_TRANSFER,
    MIG_PHASE_PATCH, MIG_PHASE_LINK, MIG_PHASE_HANDOVER, MIG_PHASE_DELETE,
    MIG_PHASE_ROLLBACK, MIG_PHASE_DONE, MIG_PHASE_FAILED, MIG_PHASE_COUNT
};
static const char *migPhaseName[] = {
    "idle", "check", "prepare", "transfer", "patch", "link", "handover",
    "delete", "rollback", "done", "failed"
};

/* The recipient's import session as a state machine (docs/DESIGN.md, "The
 * handover"):
 *
 *   LISTENING -RDMAREGISTER-> RECEIVING -RDMADONE-> ADOPTING -linked->
 *   READY -RDMAHANDOVER-> OWNED
 *
 * and any state before OWNED -> ROLLING_BACK (an error, the deadline,
 * CANCEL, RDMARESOLVE, the donor's connection closing). OWNED and
 * ROLLING_BACK are final. The import's slots become this node's only by
 * READY -> OWNED, in RDMAHANDOVER naming the session, on the donor's
 * connection: a session that has begun to roll back can never own them,
 * so no donor can hand its slots to a recipient that dropped their keys. */
enum {
    MIG_R_LISTENING, MIG_R_RECEIVING, MIG_R_ADOPTING, MIG_R_READY,
    MIG_R_OWNED, MIG_R_ROLLING_BACK
};
static const char *migRStateName[] = {
    "listening", "receiving", "adopting", "ready", "owned", "rolling-back"
};

enum { MIG_ROLE_NONE, MIG_ROLE_DONOR, MIG_ROLE_RECIPIENT };
static const char *migRoleName[] = {"none", "donor", "recipient"};

enum { MIG_LAST_NONE, MIG_LAST_OK, MIG_LAST_FAILED, MIG_LAST_CANCELLED };
static const char *migLastName[] = {"none", "ok", "failed", "cancelled"};

/* A main-thread job of the donor thread: one bounded slice per call;
 * returns MIG_SLICE_MORE while work remains, MIG_SLICE_WAIT while it
 * waits for something else (another thread, a client pause: the next
 * call comes 1 ms later rather than in the next event loop iteration, so
 * the main thread does not spin), 0 when done, -1 on error (s->error
 * set). */
#define MIG_SLICE_MORE 1
#define MIG_SLICE_WAIT 2
struct migSession;
typedef int migMainFn(struct migSession *s);

/* One slot of a migration. */
typedef struct migSlot {
    int slot;
    size_t nkeys;
    /* Donor: the manifest and the slot's blocks. */
    migManifest manifest;
    int has_manifest;
    int built;                      /* The manifest is whole. */
    int restarted;                  /* Begun again once while watched (the
                                     * slot was written between two of its
                                     * steps). */
    /* Both: the blocks (donor addresses; recipient: local copies too). */
    migBlockMap *blocks;
    size_t nblocks;
    uint64_t manifest_addr;         /* Recipient: from RDMAREGISTER. */
    int adopted;                    /* Recipient: blocks adopted. */
    migAdopted keys;                /* Recipient: patched keys. */
    int has_keys;
    size_t blocks_left;             /* Recipient thread: blocks of the slot
                                     * not yet whole (TCP reports them). */
    /* Donor, delete: every key lies in the slot's blocks (no DUMP record
     * in its manifest), so keys are unlinked without freeing anything and
     * the blocks go wholesale. unlinked: 1 the delete began, 2 it removed
     * every key (only then may the blocks go). */
    int bulk, unlinked;
    long long dirty;                /* Donor: recorded writes to the slot. */
    /* Recipient, rollback: bulk as above (every key of the slot is an
     * adopted one, none with a value in the heap, every block adopted). */
} migSlot;

/* The donor's part of a session (s->d; zero on a recipient). */
typedef struct migDonorState {
    client *caller;
    char host[NET_IP_STR_LEN];
    int port;
    char target[CLUSTER_NAMELEN];
    sds user, pass;
    migMainFn *job;                 /* Main thread job the thread waits on. */
    int job_result, job_done;
    int delete_stage;               /* See migDonorDeleteSlice. */
    long long stage_start_ms;
    int handed_over;
    /* Donor, from the end of the transfer to the replay: the commands that
     * writes to the slots propagated, as "<argc>" then the arguments. */
    int capturing;
    int *sent_order;                /* Donor thread: indexes of s->slots in
                                     * the order they left whole... */
    int slots_sent;                 /* ...the first slots_sent of them
                                     * (release/acquire atomic). */
    uint64_t wanted[CLUSTER_SLOTS / 64]; /* Main: slots a command waits for
                                     * (atomic bits; the thread sends
                                     * them next). */
    int slots_relaxed;              /* Main: sent_order[0..n) relaxed. */
    int nslots_relaxed;             /* Main: slots of the bitmap relaxed. */
    long long freeze_start_ms;      /* The prepare's freeze began. */
    sds *cap_args;
    size_t cap_nargs, cap_size, cap_bytes;
    long long cap_cmds;
    int cap_full;                   /* MIG_CAPTURE_MAX_BYTES reached. */
    dict *dirty_keys;               /* The keys those commands name. */
    long long keep_frozen_ms;       /* Donor: see migDonorKeepFrozenSlice. */
    int handover_begun;             /* Donor: RDMAHANDOVER may be on its way:
                                     * CANCEL is refused (under s->lock). */
    redisAtomic int resolving;      /* Donor: the handover's reply was lost;
                                     * asking the recipient (STATUS). */
} migDonorState;

/* The recipient's part of a session (s->r; zero on a donor). */
typedef struct migRecipientState {
    uint64_t donor_client_id;       /* The connection INITRDMASERVER came on. */
    migListener *listener;
    migConn *conn;
    int reg_requested, reg_done;    /* RDMAREGISTER handed to the thread. */
    void **reg_addrs;
    uint64_t *reg_lens;
    uint64_t *reg_expect;           /* Bytes the donor sends into each. */
    int *reg_slot;                  /* Index in s->slots of each. */
    /* The patcher thread (migRecipientPatcher) and its queue of s->slots
     * indexes whose blocks are whole; under s->lock. */
    pthread_t patcher;
    int patcher_started;
    int *patch_queue;
    int patch_queued;
    int patch_closed;               /* Nothing more comes... */
    int patch_stop;                 /* ...or stop now: the import failed. */
    int patch_failed;               /* The patcher failed: patch_err. */
    int patch_overlap;              /* Slots go to it during the transfer. */
    char patch_err[MIG_ERR_LEN];
    uint32_t reg_n;
    migBlockDesc *reg_desc;
    client *reg_client;
    int done_requested, patched;    /* RDMADONE handed to the thread. */
    int propagate;                  /* Serialize RESTOREs for replicas/AOF. */
    client *done_client;
    int link_cursor;
    int rstate;                     /* MIG_R_*: see migRecipientTo. */
    int rb_stage;                   /* See migRecipientRollbackSlice. */
    long long rb_dropped;
    redisAtomic long long peers_refused; /* Recipient: strangers its data
                                     * listener dropped (atomic). */
} migRecipientState;

/* One migration, in either role: what both roles use, then the donor's
 * part (d) and the recipient's (r). Both parts are always there (not a
 * union): some code reads the other role's fields on any session (a
 * client unblocked, STATUS, CANCEL, INFO), and finds them zero. */
typedef struct migSession {
    int role;
    volatile int phase;
    unsigned char bitmap[CLUSTER_SLOTS / 8];
    int nslots;
    migSlot *slots;                 /* Slots holding keys (donor), or the
                                     * registered ones (recipient). */
    int nmig;
    long long start_ms, deadline_ms, phase_start_ms;
    migKind kind;
    char transport[8];              /* What was used: "tcp", "rdma". */
    redisAtomic int cancel;         /* Stop now: CANCEL, or a failure
                                     * (atomic). */
    int cancelled;                  /* Main: CANCEL asked by a user. */
    int timed_out;
    sds error;                      /* The cause of a failure. */
    int error_phase;
    /* Figures (written by one thread, read by STATUS: plain 64 bit words). */
    long long keys, bytes, bytes_total, bytes_sent;
    long long keys_zero_copy, keys_serialized, bytes_serialized;
    long long phase_ms[MIG_PHASE_COUNT];
    long long write_pause_ms;
    long long throttled_ms;         /* Donor: waits for migration-max-bandwidth. */
    long long held_cmds, held_max_ms;   /* Donor: commands the freeze held,
                                         * the longest wait (slotfreeze.c). */
    long long manifests_rebuilt;    /* Donor: built again, frozen (the slot
                                     * was written after its manifest). */
    long long manifests_stale;      /* Donor: kept but found stale (DEBUG
                                     * MIGRATION-DELAY watch; a bug). */
    long long prepare_frozen_ms;    /* Donor: the prepare's frozen part. */
    long long pause_slot_ms;        /* Donor: sum over the slots of how long
                                     * each was frozen by the prepare's
                                     * freeze. */
    long long pause_first_ms;       /* Donor: the longest of those (the
                                     * freeze). */
    long long writes_replayed;      /* Both: commands applied by RDMAREPLAY. */
    migStats tstats;
    /* Threads. */
    pthread_t thread;
    int thread_started;
    redisAtomic int thread_done;    /* The thread has returned (atomic). */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int rc_fd, data_fd;             /* To interrupt blocking I/O on cancel. */
    int stage, cursor;              /* Progress of the current job (the
                                     * donor's, or the recipient's rollback). */
    /* migration-thread-priority auto (migPriorityWatch). */
    redisAtomic int tid;            /* The thread's kernel id (atomic). */
    redisAtomic int tid2;           /* Recipient: its patcher's (atomic). */
    redisAtomic int prio_idle;      /* It runs SCHED_IDLE and may be raised
                                     * (atomic). */
    long long watch_ms;             /* Main: the last look, and what the */
    unsigned long long watch_cpu_ns, watch_wait_ns; /* thread had then. */
    unsigned long long watch_cpu2_ns, watch_wait2_ns; /* The patcher's. */
    redisAtomic int *lazyfree_barrier; /* Delete, rollback: set by the lazyfree
                                     * thread (migLazyfreeBarrierPassed). */
    /* Both: the import session's id, made by the recipient at
     * INITRDMASERVER; every later message that could end the import
     * (RDMAHANDOVER, RDMARESOLVE) names it. "" until known. */
    char sid[MIG_TOKEN_LEN + 1];
    migDonorState d;                /* Donor. */
    migRecipientState r;            /* Recipient. */
} migSession;

static migSession *mig = NULL;      /* The running migration, if any. */
static long long migTimerId = -1;

/* One migration's figures, as the summary reply, STATUS and INFO's
 * migration_last_* fields show them (migSessionFigures). */
typedef struct migFigures {
    char transport[8];              /* "none" if it never chose one. */
    int slots;
    long long keys, bytes, bytes_total, keys_zero_copy, keys_serialized;
    long long bytes_serialized;
    long long phase_ms[MIG_PHASE_COUNT];
    long long write_pause_ms, write_pause_mean_ms, elapsed_ms, writes_replayed;
    long long held_cmds, held_max_ms;
    long long throttled_ms;
} migFigures;

/* What STATUS and INFO show of the last migration, and totals. */
static struct {
    int role, last;
    sds last_error;
    migFigures fig;                 /* Its figures ("" transport: none yet). */
    long long manifests_rebuilt, manifests_stale, prepare_frozen_ms;
    long long total_writes_replayed;
    long long total_ok, total_failed, total_keys, total_bytes;
    long long prio_raised;          /* auto: threads raised to normal. */
    migStats tstats;                /* Summed over migrations. */
    /* The last import session here, for RDMARESOLVE: its id, and whether
     * it ended with the slots this node's. */
    char import_sid[MIG_TOKEN_LEN + 1];
    int import_owned;
    long long peers_refused;        /* Summed over imports. */
} migLast;

/* DEBUG MIGRATION-DELAY: the donor thread sleeps at the start of a phase,
 * or ("write") in the transfer once both ends registered their blocks and
 * before the first WRITE (tests fork a BGSAVE there: fork + live MRs), or
 * ("chunk") after each chunk of the transfer, which then holds one slot
 * (tests watch the slots take writes again one by one); or ("watch") the
 * prepare waits between its manifests built with writes flowing and the
 * freeze, and then checks each manifest it keeps against a fresh one. */
static long long migDelayMs[MIG_PHASE_COUNT];
static long long migDelayWriteMs;
static long long migDelayChunkMs;   /* "chunk": after each slot sent. */
static long long migDelayWatchMs;   /* "watch": the prepare waits, its
                                     * manifests built, before it freezes
                                     * (writes to the slots flow); then
                                     * checks those it keeps. */

/* DEBUG MIGRATION-CORRUPT: the recipient's patcher damages the blocks of
 * the nth slot it patches before checking them, to test that bad data
 * fails the import, at whatever point of the transfer it is found, and
 * costs nothing: HEADER and MANIFEST as a lying donor would (the checksums
 * match the damage, the structural checks must find it), RANDOM as the
 * way would (the checksums must). Set on the main thread between
 * migrations, read by the patcher. */
enum { MIG_CORRUPT_NONE, MIG_CORRUPT_HEADER, MIG_CORRUPT_MANIFEST, MIG_CORRUPT_RANDOM };
static struct {
    int what;
    long long nth, seed, count;
} migCorrupt;

static int migTimerProc(struct aeEventLoop *el, long long id, void *data);
static void migCaptureFree(migSession *s);
static long long migWritePauseMean(migSession *s);
static void migSessionFigures(migSession *s, migFigures *f);
static redisReply *migCall(migSession *s, redisContext *rc, int argc, sds *argv,
                           const char *what);

/* ================================ Helpers ================================= */

static long long migRemainingMs(migSession *s) {
    long long left = s->deadline_ms - mstime();
    return left > 0 ? left : 0;
}

/* The same, as the int timeout the transport calls take. */
static int migRemainingMsInt(migSession *s) {
    long long left = migRemainingMs(s);
    return left > INT_MAX ? INT_MAX : (int)left;
}

static int migAborting(migSession *s) {
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
static void migFail(migSession *s, const char *fmt, ...) {
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
static void migFailAborted(migSession *s) {
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

static void migSetPhase(migSession *s, int phase) {
    long long now = mstime();
    if (s->phase != MIG_PHASE_IDLE && s->phase < MIG_PHASE_COUNT)
        s->phase_ms[s->phase] += now - s->phase_start_ms;
    s->phase_start_ms = now;
    s->phase = phase;
}

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

/* A session id as INITRDMASERVER makes them: MIG_TOKEN_LEN lowercase hex
 * digits. */
static int migValidSid(const char *sid) {
    size_t n = strlen(sid);
    if (n != MIG_TOKEN_LEN) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((sid[i] >= '0' && sid[i] <= '9') || (sid[i] >= 'a' && sid[i] <= 'f'))) return 0;
    return 1;
}

static int migSlotIsSet(const unsigned char *bitmap, int slot) {
    return (bitmap[slot >> 3] >> (slot & 7)) & 1;
}

/* Parses <slot|start-end>... from argv[first..last) into bitmap (the
 * parser of CLUSTER SETSLOTS); at least one is needed. Replies an error and
 * returns C_ERR on bad input. */
static int migParseSlots(client *c, int first, int last, unsigned char *bitmap, int *count) {
    if (first >= last) {
        addReplyError(c, "at least one slot or range <start>-<end> is needed");
        return C_ERR;
    }
    return clusterParseSlotRanges(c, first, last, bitmap, count);
}

/* The slots of a bitmap as range arguments ("0-5460", "7"), appended to an
 * argv under construction. */
static void migAppendRanges(const unsigned char *bitmap, sds **argv, int *argc) {
    for (int s = 0; s < CLUSTER_SLOTS; s++) {
        if (!migSlotIsSet(bitmap, s)) continue;
        int e = s;
        while (e + 1 < CLUSTER_SLOTS && migSlotIsSet(bitmap, e + 1)) e++;
        *argv = zrealloc(*argv, sizeof(sds) * (*argc + 1));
        (*argv)[(*argc)++] = e == s ? sdsfromlonglong(s) : sdscatprintf(sdsempty(), "%d-%d", s, e);
        s = e;
    }
}

static void migFreeArgv(sds *argv, int argc) {
    for (int j = 0; j < argc; j++) sdsfree(argv[j]);
    zfree(argv);
}

static void migStartTimer(void) {
    if (migTimerId != -1) return;
    migTimerId = aeCreateTimeEvent(server.el, 1, migTimerProc, NULL, NULL);
    if (migTimerId == AE_ERR) migTimerId = -1;
}

static migSession *migNewSession(int role) {
    migSession *s = zcalloc(sizeof(*s));
    s->role = role;
    s->phase = MIG_PHASE_CHECK;
    s->start_ms = s->phase_start_ms = mstime();
    s->rc_fd = s->data_fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    return s;
}

/* Interrupt the blocking I/O of the session's thread (cancel, deadline):
 * TCP sockets are shut down; an RDMA wait ends at its own timeout. */
static void migInterrupt(migSession *s) {
    pthread_mutex_lock(&s->lock);
    if (s->rc_fd != -1) shutdown(s->rc_fd, SHUT_RDWR);
    if (s->data_fd != -1) shutdown(s->data_fd, SHUT_RDWR);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* Record what STATUS/INFO show once the session is over, and free it. */
static void migUnpinAll(migSession *s);

static void migEndSession(migSession *s, int last) {
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
            "with %lld manifests built again, transfer %lld, "
            "patch %lld, link %lld, handover %lld, delete %lld ms; writes "
            "paused %lld ms, %lld ms on average per slot, %lld commands held "
            "up to %lld ms, %lld replayed)",
            migRoleName[s->role], s->nslots, s->keys, s->bytes,
            migLast.fig.transport, migLast.fig.elapsed_ms,
            s->phase_ms[MIG_PHASE_PREPARE], s->prepare_frozen_ms,
            s->manifests_rebuilt, s->phase_ms[MIG_PHASE_TRANSFER],
            s->phase_ms[MIG_PHASE_PATCH], s->phase_ms[MIG_PHASE_LINK],
            s->phase_ms[MIG_PHASE_HANDOVER], s->phase_ms[MIG_PHASE_DELETE],
            s->write_pause_ms, migWritePauseMean(s), s->held_cmds, s->held_max_ms,
            s->writes_replayed);
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
         * now compaction may have them. It relocates the values that
         * came as DUMP payloads or were written by the replay (placed
         * writes were refused while pinned): they are in the heap. */
        migUnpinAll(s);
        for (int i = 0; i < s->nmig && last == MIG_LAST_OK; i++)
            if (s->slots[i].keys.keys_serialized || s->writes_replayed)
                slotCompactRequest(s->slots[i].slot);
    }
    for (int i = 0; i < s->nmig; i++) {
        zfree(s->slots[i].blocks);
        if (s->slots[i].has_keys) migAdoptedFree(&s->slots[i].keys);
    }
    zfree(s->slots);
    zfree(s->d.sent_order);
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
static void migSessionFigures(migSession *s, migFigures *f) {
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
static void migAddReplyFigureFields(client *c, const migFigures *f, int status) {
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
static void migBlock(client *c) {
    c->bpop.timeout = 0;
    blockClient(c, BLOCKED_MIGRATION);
}

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
    migFreeManifest(&ms->manifest);
    ms->has_manifest = 0;
}

static void migDonorFreeManifests(migSession *s) {
    for (int i = 0; i < s->nmig; i++) migSlotFreeManifest(&s->slots[i]);
}

/* CLIENT PAUSE (CLUSTER FAILOVER pauses writes too): the dataset must not
 * change and nothing may be propagated (propagateNow() asserts it), so the
 * slices that delete or link keys wait for its end. */
static int migClientsPaused(void) {
    return checkClientPauseTimeoutAndReturnIfPaused();
}

/* Outside a command, what is propagated goes out one command at a time
 * (as in the expire cycle): wrap a batch of migDeleteKey() calls. */
static int migPropagateBegin(void) {
    int prev = server.core_propagates;
    server.core_propagates = 1;
    server.propagate_no_multi = 1;
    return prev;
}

static void migPropagateEnd(int prev) {
    server.core_propagates = prev;
    server.propagate_no_multi = 0;
}

/* How migDeleteKey() lets go of a key's memory. MIG_DEL_IN_BLOCKS: the
 * key's slot lies wholly in its blocks (migSlot.bulk); nothing is freed
 * but the keyspace's dictEntry (general heap), and once every key of the
 * slot is unlinked and no lazy free can still reach them, the blocks are
 * released at once (slotCompactReleaseSlot): O(keys) pointer work plus
 * O(blocks), instead of a free per allocation. */
enum { MIG_DEL_SYNC, MIG_DEL_LAZY, MIG_DEL_IN_BLOCKS };

/* dictUnlink() of an entry we hold: the bucket comes from the key's hash
 * and its chain is searched by entry pointer, so the other keys of the
 * chain are never read (comparing them was a cache miss each, a third of
 * a wholesale delete's main-thread time). hash: the key's, if known.
 * Returns 0 if the entry is not in the dict. Like dictUnlink() it does one
 * rehash step when one is due. */
static int migDictUnlinkEntry(dict *d, dictEntry *target, const uint64_t *hash) {
    uint64_t h;

    if (dictIsRehashing(d) && d->pauserehash == 0) dictRehash(d, 1);
    h = hash ? *hash : dictHashKey(d, dictGetKey(target));
    for (int table = 0; table <= 1; table++) {
        if (d->ht_table[table] == NULL) break;
        dictEntry **pp = &d->ht_table[table][h & DICTHT_SIZE_MASK(d->ht_size_exp[table])];
        for (; *pp; pp = &(*pp)->next) {
            if (*pp == target) {
                *pp = target->next;
                d->ht_used[table]--;
                return 1;
            }
        }
        if (!dictIsRehashing(d)) break;
    }
    return 0;
}

/* slotToKeyDelEntry() of the first key of a slot's list, whose slot is
 * known: the key's name is not hashed again (crc16), and the entry has no
 * previous one to update. */
static void migSlotToKeyDelHead(redisDb *db, int slot, dictEntry *de) {
    slotToKeys *stk = &(*db->slots_to_keys).by_slot[slot];
    dictEntry *next = migNextInSlot(de);

    serverAssert(stk->head == de && migPrevInSlot(de) == NULL);
    stk->head = next;
    if (next) migPrevInSlot(next) = NULL;
    migNextInSlot(de) = NULL;
    stk->count--;
}

/* A wholesale delete walks a slot's keys in list order, and its time went
 * to cache misses: the key's entry, its name (to hash it) and its bucket
 * (a random slot of a table of megabytes). While one key is deleted, the
 * next key's hash is computed and its bucket asked for, the name of the
 * key after it, and the entry after that: each was asked for one key
 * earlier, so none of them waits for memory. */
typedef struct migDelAhead {
    dictEntry *de;              /* The next key to delete... */
    uint64_t hash;              /* ...and its hash. */
} migDelAhead;

static void migDelLookahead(dict *d, dictEntry *de, migDelAhead *la) {
    dictEntry *n1 = migNextInSlot(de), *n2;

    la->de = n1;
    if (n1 == NULL) return;
    la->hash = dictHashKey(d, dictGetKey(n1));
    migPrefetchBucket(d, la->hash);
    if ((n2 = migNextInSlot(n1)) == NULL) return;
    __builtin_prefetch((char *)dictGetKey(n2) - 1);     /* Its header too. */
    if ((n2 = migNextInSlot(n2)) != NULL) __builtin_prefetch(n2);
}

/* Delete one key of a slot this node lets go of (the donor after the
 * handover, a recipient dropping a failed import), and tell its replicas
 * and AOF: UNLINK when the delete is lazy (for MIG_DEL_IN_BLOCKS, when
 * lazyfree-lazy-server-del says so), else DEL. */
static void migDeleteKey(redisDb *db, int slot, dictEntry *de, int how, const uint64_t *hash) {
    sds key = dictGetKey(de);
    robj *keyobj = createStringObject(key, sdslen(key));
    int lazy = how == MIG_DEL_LAZY;

    if (how == MIG_DEL_IN_BLOCKS) {
        if (dictSize(db->expires) > 0) dictDelete(db->expires, key);
        int found = migDictUnlinkEntry(db->dict, de, hash);
        serverAssert(found);
        migSlotToKeyDelHead(db, slot, de);
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
    propagateDeletion(db, keyobj, lazy);
    propagatePendingCommands();
    decrRefCount(keyobj);
    server.dirty++;
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
static migSlot *migSlotEntry(migSession *s, int slot) {
    while (s->stage < s->nmig && s->slots[s->stage].slot < slot) s->stage++;
    return s->stage < s->nmig && s->slots[s->stage].slot == slot ? &s->slots[s->stage] : NULL;
}

/* Whether the lazyfree thread has freed everything queued before the first
 * call (which queues the barrier job; purge: one that first returns the
 * retired blocks' pages to the OS). Call until it returns 1. */
static int migLazyfreeBarrierPassed(migSession *s, int purge) {
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

static void migUnpinAll(migSession *s) {
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
        if (migSlotIsSet(s->bitmap, slot)) slotCompactPin(slot, 0);
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

/* The recorded commands (not the dirty keys, which the delete needs). */
static void migCaptureFreeArgs(migSession *s) {
    for (size_t j = 0; j < s->d.cap_nargs; j++) sdsfree(s->d.cap_args[j]);
    zfree(s->d.cap_args);
    s->d.cap_args = NULL;
    s->d.cap_nargs = s->d.cap_size = s->d.cap_bytes = 0;
}

static void migCaptureFree(migSession *s) {
    migCaptureFreeArgs(s);
    if (s->d.dirty_keys) dictRelease(s->d.dirty_keys);
    s->d.dirty_keys = NULL;
    s->d.capturing = 0;
}

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
        slotFreeze(s->bitmap, migRemainingMs(s) + 5000);
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
 * them is sent) run again at once. The others take writes again one by
 * one as their bytes leave (migDonorRelaxSent). */
static void migDonorCaptureBegin(migSession *s) {
    unsigned char empty[CLUSTER_SLOTS / 8];
    int n = 0;

    if (!server.migration_write_replay) return;
    s->d.dirty_keys = dictCreate(&migDirtyKeysDictType);
    s->d.capturing = 1;
    memset(empty, 0, sizeof(empty));
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        if (migSlotIsSet(s->bitmap, slot) && migSlotFind(s, slot) == NULL) {
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
}

/* 4b, after the transfer (main thread): the slots not relaxed yet take
 * writes again, recorded. */
static int migDonorCaptureSlice(migSession *s) {
    if (!s->d.capturing || s->d.cap_full || s->error) return 0;
    migDonorRelax(s, s->bitmap, s->nslots - s->d.nslots_relaxed);
    return 0;
}

/* Once the slots thawed: what the freeze held, and the longest wait. */
static void migHeldStats(migSession *s) {
    slotFreezeHeldStats(&s->held_cmds, &s->held_max_ms);
}

/* The mean over the slots of how long their writes waited: the prepare's
 * freeze as each slot saw it, plus the replay's. With the slots frozen
 * together (no replay, or too much recorded) it is write_pause_ms. */
static long long migWritePauseMean(migSession *s) {
    if (s->pause_first_ms == 0 || s->nslots == 0) return s->write_pause_ms;
    return s->pause_slot_ms / s->nslots + (s->write_pause_ms - s->pause_first_ms);
}

/* 6a, once the recipient linked every key (main thread): freeze the slots
 * again and stop recording; what was recorded is the donor thread's now. */
static int migDonorReplayBeginSlice(migSession *s) {
    if (s->d.capturing) {
        slotFreeze(s->bitmap, migRemainingMs(s) + 5000);
        s->d.capturing = 0;
    }
    return s->error ? -1 : 0;
}

/* 6 (main thread): the slots stay frozen for s->d.keep_frozen_ms more at
 * least, whatever the migration's deadline: while the handover's outcome
 * is unknown, a write acknowledged here could be lost (the freeze's own
 * deadline would otherwise thaw them, slotFreezeCron). */
static int migDonorKeepFrozenSlice(migSession *s) {
    slotFreeze(s->bitmap, s->d.keep_frozen_ms);
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
        if (migManifestBegin(ms->slot, &ms->manifest, &err) == C_ERR) {
            migFail(s, "slot %d: %s", ms->slot, err);
            sdsfree(err);
            return -1;
        }
        ms->has_manifest = 1;
        ms->built = 0;
    }
    r = migManifestStep(&ms->manifest, MIG_SLICE_US / 2, &err);
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
 * others are built again, frozen. With DEBUG MIGRATION-DELAY watch, each
 * manifest kept is compared with a fresh one first (a change the watch
 * missed would make it stale: logged, counted, replaced). */
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
        if (migDelayWatchMs == 0) continue;
        migManifest fresh;
        sds err = NULL;
        if (migBuildManifest(slot, &fresh, &err) == C_ERR) {
            migFail(s, "slot %d: %s", slot, err);
            sdsfree(err);
            while (j < nold) migSlotFreeManifest(&old[j++]);
            zfree(old);
            return -1;
        }
        if (!migManifestSame(&ms->manifest, &fresh)) {
            serverLog(LL_WARNING, "Slot migration: the manifest of slot %d went "
                "stale with no change of the slot seen (replaced)", slot);
            s->manifests_stale++;
            migFreeManifest(&ms->manifest);
            ms->manifest = fresh;
        } else {
            migFreeManifest(&fresh);
        }
    }
    while (j < nold) migSlotFreeManifest(&old[j++]);
    zfree(old);
    slotUnwatch();
    return 0;
}

/* Prepare (phase 3), in slices. Writes to the slots flow for most of it:
 * the manifests are built while the slots are only watched (slotWatch),
 * then the slots freeze and only the manifests of the slots written
 * meanwhile are built again, so that a write waits for that short frozen
 * part and for its own slot's bytes, not for every slot's manifest. The
 * stages:
 *   1 relocate the slots' keys into their blocks (what background
 *     compaction still has to visit, for a bounded time);
 *   2 pin the slots (compaction leaves them alone from now on: the
 *     manifest moves a straggler itself), watch them, and build the
 *     manifest of each slot holding keys, one slot at a time; a slot
 *     written between two steps of its manifest starts again, once;
 *   3 freeze (DEBUG MIGRATION-DELAY watch waits before);
 *   4 wait for pending lazy frees (they write allocator metadata in the
 *     blocks); keep the manifests of the slots not written since theirs
 *     was built (migDonorKeepManifests);
 *   5 build the others, frozen;
 *   6 list the blocks.
 * Returns 1 if there is more to do, MIG_SLICE_WAIT to wait for the next
 * timer event, 0 when done, -1 on failure. */
#define MIG_PREPARE_UNFROZEN_MS 2000    /* Then go on even if not done. */
static int migDonorPrepareStep(migSession *s) {
    switch (s->stage) {
    case 0:
        /* Slots (or their big keys) background compaction still has to
         * visit go first. Keys already visited are in their blocks, and
         * written ones are queued (slotCompactKeyModified). */
        s->stage = 1;
        break;
    case 1:
        if (migAnyPending(s) && mstime() - s->phase_start_ms < MIG_PREPARE_UNFROZEN_MS) {
            slotCompactStep(MIG_SLICE_US / 2);
            break;
        }
        for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
            if (migSlotIsSet(s->bitmap, slot)) slotCompactPin(slot, 1);
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
            s->stage = 3;
            s->d.stage_start_ms = mstime();
            if (migDelayWatchMs > 0)
                serverLog(LL_NOTICE, "Slot migration: DEBUG MIGRATION-DELAY watch: "
                    "the manifests of %d slots built, writes flowing; waiting %lld "
                    "ms before the freeze", s->nmig, migDelayWatchMs);
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
        if (migDelayWatchMs > 0 && mstime() - s->d.stage_start_ms < migDelayWatchMs)
            return MIG_SLICE_WAIT;
        slotFreeze(s->bitmap, migRemainingMs(s) + 5000);
        s->d.freeze_start_ms = mstime();
        s->stage = 4;
        break;
    case 4:
        if (bioPendingJobsOfType(BIO_LAZY_FREE)) return MIG_SLICE_WAIT;
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
        for (int i = 0; i < s->nmig; i++) {
            migSlot *ms = &s->slots[i];
            s->keys += ms->nkeys;
            s->keys_zero_copy += ms->manifest.keys_zero_copy;
            s->keys_serialized += ms->manifest.keys_serialized;
            s->bytes_serialized += (long long)ms->manifest.payload_bytes;
            size_t n = slotAllocSlotBlocks(ms->slot, NULL, 0);
            slotAllocBlockInfo *bi = zmalloc(sizeof(*bi) * (n ? n : 1));
            n = slotAllocSlotBlocks(ms->slot, bi, n);
            ms->blocks = zmalloc(sizeof(migBlockMap) * (n ? n : 1));
            ms->nblocks = 0;
            for (size_t b = 0; b < n; b++) {
                /* An empty block holds nothing to ship; it may even be
                 * released meanwhile (the slot's cached empty block). */
                if (bi[b].live_allocs == 0) continue;
                migBlockMap *bm = &ms->blocks[ms->nblocks++];
                bm->donor = (uintptr_t)bi[b].addr;
                bm->size = bi[b].size;
                bm->local = bi[b].addr;
            }
            zfree(bi);
        }
        s->prepare_frozen_ms = mstime() - s->d.freeze_start_ms;
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
static void migGiveSlots(const unsigned char *bitmap);

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

/* Release the blocks of a slot this node holds no keys of, once they hold
 * no live allocation: keys deleted one by one (the donor's slots with a
 * DUMP record, a failed import's blocks) leave the slot's cached empty
 * block behind (the allocator keeps one per slot for its next writes,
 * which will not come here). */
static void migReleaseIfEmpty(int slot) {
    slotAllocSlotStat st;

    slotAllocSlotStats(slot, &st);
    if (st.blocks && st.live_allocs == 0)
        slotCompactRetireSlot(slot);
}

/* Release the blocks of a bulk slot whose keys were all unlinked, unless
 * keys came back to it meanwhile: a node turned replica loads its master's
 * data, which background compaction may move into the slot's blocks. Then
 * the blocks stay, with the unlinked keys' memory in them (logged). */
static void migReleaseBulkSlot(int slot) {
    if (countKeysInSlot(slot) == 0) {
        slotCompactRetireSlot(slot);
        return;
    }
    serverLog(LL_WARNING, "Slot migration: slot %d holds keys again (a full "
              "sync?): its blocks stay, with the memory of the keys it let "
              "go of", slot);
}

/* Delete (phase 7), in slices: the donor's copies of the keys, with DELs to
 * its replicas and AOF, and each slot's manifest once its keys are gone.
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
    elapsedStart(&start);
    latencyStartMonitor(lat);
    if (s->d.delete_stage == 0 && server.masterhost) {
        serverLog(LL_NOTICE, "Slot migration: this node is a replica now; "
                  "its full sync replaces the keys left to delete");
        s->d.delete_stage = 1;
    }
    if (s->d.delete_stage == 0) {
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
            migDeleteKey(db, slot, de, how, known ? &hash : NULL);
            if ((++n & 31) == 0 && elapsedUs(start) >= MIG_SLICE_US) break;
        }
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
             * its blocks: the full sync may free its other keys on the
             * lazyfree thread at any time. */
            if (ms->unlinked == 2) migReleaseBulkSlot(ms->slot);
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

static void migGiveSlots(const unsigned char *bitmap) {
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
static char migImportSid[MIG_TOKEN_LEN + 1];

static int migRememberImporting(const unsigned char *bitmap) {
    for (int j = 0; j < CLUSTER_SLOTS / 8; j++) migImporting[j] |= bitmap[j];
    return clusterSaveConfig(1);
}

/* The import ended (its slots are this node's, or its keys are gone): the
 * next nodes.conf write leaves its slots out. */
static void migForgetImporting(const unsigned char *bitmap) {
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
            migDeleteKey(db, slot, de, MIG_DEL_SYNC, NULL);
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

/* Rollback before the handover: thaw, let go of the manifests. */
static int migDonorRollbackSlice(migSession *s) {
    slotUnwatch();
    s->write_pause_ms += slotThaw();
    migHeldStats(s);
    migCaptureFree(s);
    migDonorFreeManifests(s);
    migUnpinAll(s);
    return 0;
}

/* ============================= Donor: thread ============================== */

/* Donor thread: sleep ms (DEBUG MIGRATION-DELAY), waking up early on an
 * abort (cancel, deadline). */
static void migSleep(migSession *s, long long ms) {
    while (ms > 0 && !migAborting(s)) {
        usleep(10000);
        ms -= 10;
    }
}

static void migDelay(migSession *s, int phase) {
    migSleep(s, migDelayMs[phase]);
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

static void migRecipientReason(migSession *s, redisContext *rc, char *why, size_t len);

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
        char why[MIG_ERR_LEN + 32] = "";
        if (strstr(r->str, "no import session") && !migAborting(s))
            migRecipientReason(s, rc, why, sizeof(why));
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
static void migRecipientReason(migSession *s, redisContext *rc, char *why, size_t len) {
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
    char why[MIG_ERR_LEN + 32];

    if (migAborting(s)) {
        migFailAborted(s);
        return;
    }
    migRecipientReason(s, rc, why, sizeof(why));
    migFail(s, "%s%s", err, why);
}

/* A connection to the recipient, authenticated, within ms; NULL with why
 * in err (MIG_ERR_LEN bytes; may be NULL). Leaves the session's error
 * alone: the donor thread also uses it after the deadline, to resolve a
 * handover or to end the recipient's session. */
static redisContext *migConnectTo(migSession *s, long long ms, char *err) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    redisContext *rc = redisConnectWithTimeout(s->d.host, s->d.port, tv);

    if (rc == NULL || rc->err) {
        if (err) snprintf(err, MIG_ERR_LEN, "cannot connect to the recipient %s:%d: %s",
                          s->d.host, s->d.port, rc ? rc->errstr : "out of memory");
        if (rc) redisFree(rc);
        return NULL;
    }
    redisSetTimeout(rc, tv);
    if (s->d.pass) {
        redisReply *r = s->d.user ? redisCommand(rc, "AUTH %s %s", s->d.user, s->d.pass)
                                : redisCommand(rc, "AUTH %s", s->d.pass);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            if (err) snprintf(err, MIG_ERR_LEN, "AUTH refused by the recipient %s:%d: %s",
                              s->d.host, s->d.port, r ? r->str : rc->errstr);
            if (r) freeReplyObject(r);
            redisFree(rc);
            return NULL;
        }
        freeReplyObject(r);
    }
    return rc;
}

static redisContext *migRecipientConnect(migSession *s) {
    char err[MIG_ERR_LEN];
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
    if (!owned) snprintf(err, MIG_ERR_LEN, "the handover's reply was lost, and the "
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
static int migDonorTransfer(migSession *s, redisContext *rc, migConn *conn) {
    sds *argv = NULL;
    int argc = 0, ok = 0;
    size_t nb = 0, k = 0;
    redisReply *r = NULL;
    migBlockDesc *desc = NULL;
    const void **addrs = NULL;
    uint64_t *lens = NULL;
    migSegment *segs = NULL, *batch = NULL;
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
            sums[k] = migBlockSumRanges(addr, ranges + nseg, n);
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
        argv = zrealloc(argv, sizeof(sds) * (argc + 4 + 4 * ms->nblocks));
        argv[argc++] = sdsfromlonglong(ms->slot);
        argv[argc++] = sdsfromlonglong((long long)ms->nkeys);
        argv[argc++] = sdscatprintf(sdsempty(), "%llu",
                                    (unsigned long long)(uintptr_t)ms->manifest.addr);
        argv[argc++] = sdsfromlonglong((long long)ms->nblocks);
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
    char err[MIG_ERR_LEN] = "";

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
    if (migRegisterSendBlocks(conn, addrs, lens, (uint32_t)nb, err) == -1) {
        migFail(s, "%s", err);
        goto done;
    }
    if (migDelayWriteMs > 0) {
        serverLog(LL_NOTICE, "Slot migration: DEBUG MIGRATION-DELAY write: %zu "
            "blocks registered on both ends, waiting %lld ms before writing",
            nb, migDelayWriteMs);
        migSleep(s, migDelayWriteMs);
    }
    /* Slot by slot, in chunks of about MIG_WRITE_CHUNK bytes (with DEBUG
     * MIGRATION-DELAY chunk: one slot each; with migration-max-bandwidth,
     * 10 ms of it, paced by migPace). A slot some command waits to write
     * to goes next (migNextWantedSlot), in a chunk of such slots only and
     * with no wait for the limit, else the next in slot order; after each
     * chunk, the slots it completed take writes again (migDonorRelaxSent),
     * so a waiting write waits about for its own slot's bytes. */
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
                pos = cur ? slot_end[cur - 1] : 0;
            }
            while (pos < slot_end[cur] &&
                   (chunk == 0 || chunk + segs[pos].len <= chunk_max)) {
                batch[n++] = segs[pos];
                chunk += segs[pos++].len;
            }
            if (pos < slot_end[cur]) break;             /* The chunk is full. */
            sent_done[cur] = 1;
            s->d.sent_order[completed++] = cur;
            cur = -1;
            if (migDelayChunkMs) break;
        }
        pacer.bytes += (long long)chunk;
        if (migAborting(s)) {
            migFailAborted(s);
            goto done;
        }
        if (n && migWriteBlocks(conn, batch, n, err) == -1) {
            migDonorTransferFailed(s, rc, err);
            goto done;
        }
        s->bytes_sent += chunk;
        sent = completed;
        __atomic_store_n(&s->d.slots_sent, sent, __ATOMIC_RELEASE);
        if (migDelayChunkMs > 0) {
            serverLog(LL_NOTICE, "Slot migration: DEBUG MIGRATION-DELAY chunk: "
                "%d of %d slots sent, waiting %lld ms", sent, s->nmig, migDelayChunkMs);
            migSleep(s, migDelayChunkMs);
        }
    }
    if (migFinish(conn, err) == -1) {
        migDonorTransferFailed(s, rc, err);
        goto done;
    }
    s->bytes = s->bytes_sent;
    ok = 1;
done:
    migGetStats(conn, &s->tstats);
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
static void migApplyThreadPriority(migSession *s) {
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

static void *migDonorThread(void *arg) {
    migSession *s = arg;
    redisContext *rc = NULL;
    migConn *conn = NULL;
    redisReply *r;
    sds *argv = NULL;
    int argc = 0, ok = 0;
    char err[MIG_ERR_LEN] = "";

    redis_set_thread_title("migration");
    migApplyThreadPriority(s);

    /* 2. The recipient opens an import session and its data listener. */
    if ((rc = migRecipientConnect(s)) == NULL) goto fail;
    migSetFd(s, &s->rc_fd, rc->fd);
    char tmo[32];
    snprintf(tmo, sizeof(tmo), "%lld", migRemainingMs(s) + 1000);
    argv = zmalloc(sizeof(sds) * 2);
    argv[argc++] = sdsnew("INITRDMASERVER");
    argv[argc++] = sdsnew("0");
    migAppendRanges(s->bitmap, &argv, &argc);
    argv = zrealloc(argv, sizeof(sds) * (argc + 6));
    argv[argc++] = sdsnew("TRANSPORT");
    argv[argc++] = sdsnew(migKindName(s->kind));
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
    migKind kind;
    if (!ft || !fh || !fp || !fk || !fs || ft->type != REDIS_REPLY_STRING ||
        fh->type != REDIS_REPLY_STRING || fp->type != REDIS_REPLY_INTEGER ||
        fk->type != REDIS_REPLY_STRING || migParseKind(ft->str, &kind) == -1 ||
        kind == MIG_KIND_AUTO || fs->type != REDIS_REPLY_STRING || !migValidSid(fs->str)) {
        migFail(s, "INITRDMASERVER: unexpected reply from the recipient");
        freeReplyObject(r);
        goto fail;
    }
    pthread_mutex_lock(&s->lock);   /* (STATUS reads it.) */
    memcpy(s->sid, fs->str, MIG_TOKEN_LEN + 1);
    pthread_mutex_unlock(&s->lock);
    snprintf(s->transport, sizeof(s->transport), "%s", migKindName(kind));
    conn = migConnect(kind, fh->str, (int)fp->integer, fk->str,
                      kind == MIG_KIND_RDMA && server.rdma_bind[0] ? server.rdma_bind : NULL,
                      migRemainingMsInt(s), err);
    freeReplyObject(r);
    if (conn == NULL) {
        migFail(s, "%s", err);
        goto fail;
    }
    migSetFd(s, &s->data_fd, migTcpFd(conn));

    /* 3. Prepare. */
    migSetPhase(s, MIG_PHASE_PREPARE);
    migDelay(s, MIG_PHASE_PREPARE);
    if (migRunOnMain(s, migDonorPrepareSlice) == -1) goto fail;

    /* 4. Transfer. */
    migSetPhase(s, MIG_PHASE_TRANSFER);
    migDelay(s, MIG_PHASE_TRANSFER);
    if (migAborting(s)) { migFailAborted(s); goto fail; }
    if (migDonorTransfer(s, rc, conn) == -1) goto fail;
    migSetFd(s, &s->data_fd, -1);
    migClose(conn);
    conn = NULL;
    /* The bytes have left: writes to the slots run again, recorded. */
    migRunOnMain(s, migDonorCaptureSlice);

    /* 5. The recipient adopts everything (deferred reply of RDMADONE). */
    migSetPhase(s, MIG_PHASE_PATCH);
    migDelay(s, MIG_PHASE_PATCH);
    if (migAborting(s)) { migFailAborted(s); goto fail; }
    argv = NULL;
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
    migDelay(s, MIG_PHASE_HANDOVER);
    if (migAborting(s)) { migFailAborted(s); goto fail; }
    int owned = migDonorHandover(s, rc);
    if (owned == 0) goto fail;
    if (owned == -1 && !migDonorResolve(s, err)) {
        migFail(s, "%s", err);
        goto fail;
    }
    migRunOnMain(s, migDonorHandoverSlice);

    /* 7. Delete here. */
    migSetPhase(s, MIG_PHASE_DELETE);
    migDelay(s, MIG_PHASE_DELETE);
    migRunOnMain(s, migDonorDeleteSlice);
    ok = 1;

fail:
    if (!ok) {
        migSetPhase(s, MIG_PHASE_ROLLBACK);
        migSetFd(s, &s->data_fd, -1);
        if (conn) migClose(conn);
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
    if (conn) migClose(conn);
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
        if (migBlockImageSum(ms->blocks[b].local, ms->blocks[b].size, &sum) == -1) {
            snprintf(err, MIG_ERR_LEN, "slot %d: block %zu was rejected (bad allocator "
                        "metadata)", ms->slot, b);
            return -1;
        }
        if (sum != ms->blocks[b].sum) {
            snprintf(err, MIG_ERR_LEN, "slot %d: block %zu: checksum mismatch (XXH3 "
                     "%016llx sent, %016llx received): its bytes changed on the way; "
                     "nothing of the slot was adopted", ms->slot, b,
                     (unsigned long long)ms->blocks[b].sum, (unsigned long long)sum);
            return -1;
        }
    }
    for (size_t b = 0; b < ms->nblocks; b++) {
        if (migAdoptBlock(ms->slot, ms->blocks[b].local) == -1) {
            snprintf(err, MIG_ERR_LEN, "slot %d: block %zu was rejected (bad allocator "
                        "metadata)", ms->slot, b);
            return -1;
        }
        ms->adopted = (int)b + 1;
    }
    ms->has_keys = 1;
    if (migPatchSlot(ms->slot, ms->blocks, ms->nblocks, ms->manifest_addr,
                     ms->nkeys, &ms->keys, &perr) == C_ERR) {
        snprintf(err, MIG_ERR_LEN, "slot %d: %s", ms->slot, perr);
        sdsfree(perr);
        return -1;
    }
    migSweepGarbage(&ms->keys, ms->blocks, ms->nblocks);
    s->keys += ms->keys.nkeys;
    s->keys_zero_copy += ms->keys.keys_zero_copy;
    s->keys_serialized += ms->keys.keys_serialized;
    return 0;
}

/* DEBUG MIGRATION-CORRUPT: damage the received blocks of one slot. */
static void migDebugCorruptSlot(migSlot *ms) {
    unsigned char *first = (unsigned char *)ms->blocks[0].local;

    if (migCorrupt.what == MIG_CORRUPT_HEADER) {
        memset(first, 0xff, 64);
    } else if (migCorrupt.what == MIG_CORRUPT_MANIFEST) {
        for (size_t b = 0; b < ms->nblocks; b++) {
            migBlockMap *m = &ms->blocks[b];
            if (ms->manifest_addr >= m->donor && ms->manifest_addr - m->donor < m->size) {
                size_t off = (size_t)(ms->manifest_addr - m->donor);
                memset((char *)m->local + off, 0xee, m->size - off < 16 ? m->size - off : 16);
            }
        }
    } else if (migCorrupt.what == MIG_CORRUPT_RANDOM) {
        uint64_t x = (uint64_t)migCorrupt.seed * 0x9e3779b97f4a7c15ULL + 1;
        for (long long i = 0; i < migCorrupt.count; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            migBlockMap *m = &ms->blocks[x % ms->nblocks];
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            ((unsigned char *)m->local)[x % m->expect] ^= (unsigned char)(1 + (x >> 32) % 255);
        }
    }
    /* HEADER and MANIFEST play a lying donor, whose checksums match what
     * it sent: the damage is for the structural checks to find. RANDOM
     * plays damage on the way, for the checksums. */
    if (migCorrupt.what != MIG_CORRUPT_RANDOM)
        for (size_t b = 0; b < ms->nblocks; b++)
            migBlockImageSum(ms->blocks[b].local, ms->blocks[b].size, &ms->blocks[b].sum);
    serverLog(LL_WARNING, "Slot migration: DEBUG MIGRATION-CORRUPT damaged "
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
    char err[MIG_ERR_LEN] = "";
    int next = 0;

    redis_set_thread_title("migration");
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
        if (migCorrupt.what != MIG_CORRUPT_NONE && next - 1 == migCorrupt.nth)
            migDebugCorruptSlot(&s->slots[i]);
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
    if (failed) memcpy(err, s->r.patch_err, MIG_ERR_LEN);
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
    if (s->r.patch_failed && err) memcpy(err, s->r.patch_err, MIG_ERR_LEN);
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

/* migWatchBlocks() callback (TCP): a block is whole; when it was the last
 * of its slot, the slot goes to the patcher (if it overlaps). */
static int migRecipientBlockDone(void *ctx, uint32_t block, char *err) {
    migSession *s = ctx;
    int i = s->r.reg_slot[block];

    if (--s->slots[i].blocks_left || !s->r.patch_overlap) return 0;
    return migRecipientQueuePatch(s, i, err);
}

static void *migRecipientThread(void *arg) {
    migSession *s = arg;
    char err[MIG_ERR_LEN] = "";
    migConn *conn = NULL;

    redis_set_thread_title("migration");
    migApplyThreadPriority(s);
    /* The patcher inherits this thread's priority. */
    if (pthread_create(&s->r.patcher, NULL, migRecipientPatcher, s) != 0) {
        migFail(s, "cannot start the patch thread: %s", strerror(errno));
        goto out;
    }
    s->r.patcher_started = 1;
    /* Accept the donor, in short waits so that a cancel is seen. Strangers
     * on the port are dropped by the listener and cost only themselves
     * (migtransport.h, "Strangers"); the donor's connection gets the rest
     * of the migration's time as its I/O timeout, like the donor's side. */
    while (conn == NULL) {
        if (migAborting(s)) { migFailAborted(s); goto out; }
        conn = migAccept(s->r.listener, 250, migRemainingMsInt(s), err);
        if (conn == NULL && !strstr(err, "timed out") && !strstr(err, "timeout")) {
            migFail(s, "%s", err);
            goto out;
        }
    }
    /* One donor per import: later connections are refused at once
     * rather than wait in the backlog for the transfer's end. */
    pthread_mutex_lock(&s->lock);
    s->r.conn = conn;
    s->data_fd = migTcpFd(conn);
    migListener *l = s->r.listener;
    s->r.listener = NULL;
    pthread_mutex_unlock(&s->lock);
    atomicSet(s->r.peers_refused, (long long)migListenerRefused(l));
    migCloseListener(l);

    /* RDMAREGISTER: register the reserved blocks. */
    if (!migWaitFor(s, &s->r.reg_requested)) { migFailAborted(s); goto out; }
    /* No blocks (every slot is empty): nothing to register or receive. */
    int r = s->r.reg_n == 0 ? 0 :
        migRegisterRecvBlocks(conn, s->r.reg_addrs, s->r.reg_lens, s->r.reg_n, s->r.reg_desc, err);
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
    if (s->r.reg_n && migWatchBlocks(conn, s->r.reg_expect, migRecipientBlockDone, s, err) == -1) {
        migFail(s, "%s", err);
        goto out;
    }
    if (s->r.reg_n && migWaitTransfer(conn, migRemainingMsInt(s), err) == -1) {
        if (migAborting(s)) migFailAborted(s);
        else migFail(s, "%s", err);
        goto out;
    }
    for (uint32_t i = 0; i < s->r.reg_n; i++) {
        if (migRecvBlockBytes(conn, i) != s->r.reg_expect[i]) {
            migFail(s, "block %u: %llu bytes received of %llu", i,
                (unsigned long long)migRecvBlockBytes(conn, i),
                (unsigned long long)s->r.reg_expect[i]);
            goto out;
        }
    }
    migGetStats(conn, &s->tstats);
    s->bytes = (long long)s->tstats.payload_bytes;
    /* The blocks hold what we checked: nobody may write them any more
     * (RDMA: deregister them now, not after the patch). */
    pthread_mutex_lock(&s->lock);
    s->data_fd = -1;
    s->r.conn = NULL;
    pthread_mutex_unlock(&s->lock);
    migClose(conn);
    conn = NULL;

    /* The slots not queued during the transfer (all of them over RDMA,
     * or on one CPU) go to the patcher now; wait for it. */
    for (int i = 0; i < s->nmig; i++) {
        if (s->slots[i].blocks_left == 0 && s->r.patch_overlap) continue;
        s->slots[i].blocks_left = 0;
        if (migRecipientQueuePatch(s, i, err) == -1) break;
    }
    if (migRecipientEndPatcher(s, 0, err) == -1) {
        if (migAborting(s)) migFailAborted(s);
        else migFail(s, "%s", err);
        goto out;
    }

    /* RDMADONE: whether replicas and AOF want RESTOREs is known now. */
    if (!migWaitFor(s, &s->r.done_requested)) { migFailAborted(s); goto out; }
    for (int i = 0; i < s->nmig && s->r.propagate; i++) {
        if (migAborting(s)) { migFailAborted(s); goto out; }
        migSerializeAdopted(&s->slots[i].keys);
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
    size_t cap = 1024, n;
    if (slotAllocBlockOf(block) != block || slotAllocSlotOf(block) != slot) {
        serverLog(LL_WARNING, "Slot migration: block %p of slot %d was "
                  "released during the import: skipped", block, slot);
        return;
    }
    void **allocs = zmalloc(cap * sizeof(void *));
    while ((n = slotAllocBlockAllocs(block, allocs, cap)) > cap) {
        cap = n;
        allocs = zrealloc(allocs, cap * sizeof(void *));
    }
    for (size_t i = 0; i < n; i++) zfree(allocs[i]);
    zfree(allocs);
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
            migDeleteKey(db, slot, de, ms && ms->bulk ? MIG_DEL_IN_BLOCKS : MIG_DEL_SYNC, NULL);
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
            /* Before the blocks go: it looks at whether values lie in them. */
            if (ms->has_keys) {
                migAdoptedFree(&ms->keys);
                ms->has_keys = 0;
            }
            if (ms->bulk && ms->unlinked == 2) {
                migReleaseBulkSlot(ms->slot);
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
        migGetStats(s->r.conn, &s->tstats);
        migClose(s->r.conn);
        s->r.conn = NULL;
    }
    if (s->r.listener) {
        s->r.peers_refused = (long long)migListenerRefused(s->r.listener);
        migCloseListener(s->r.listener);
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

/* One call of the timer for a recipient session. Returns 1 if it linked
 * keys (more may follow at once). */
static int migRecipientTick(migSession *s) {
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
            if (bioPendingJobsOfType(BIO_LAZY_FREE)) return 0;
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
            if (migLinkAdopted(&ms->keys, MIG_LINK_BATCH) == 0) s->r.link_cursor++;
        }
        latencyEndMonitor(lat);
        latencyAddSampleIfNeeded("migration-link-slice", lat);
        if (s->r.link_cursor < s->nmig) return 1;
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

/* ================================ The timer =============================== */

static int migTimerProc(struct aeEventLoop *el, long long id, void *data) {
    UNUSED(el); UNUSED(id); UNUSED(data);
    migSession *s = mig;
    if (s == NULL) {
        migTimerId = -1;
        return AE_NOMORE;
    }
    int busy;
    migPriorityWatch(s);
    if (s->role == MIG_ROLE_DONOR) {
        int done;
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
    } else {
        busy = migRecipientTick(s);
    }
    if (mig == NULL) {
        migTimerId = -1;
        return AE_NOMORE;
    }
    /* While there is main thread work, the next slice comes right after
     * the clients' events of this loop iteration; else look again in 1 ms. */
    return busy ? 0 : 1;
}

/* ================================ Commands ================================ */

/* TRANSPORT <rdma|tcp|auto> or TIMEOUT <ms> at c->argv[*j], the options
 * RDMAMIGRATESLOTS and INITRDMASERVER share. Returns 1 if it was one of
 * them with its value (*j then points at the value), 0 if argv[*j] is
 * something else or lacks its value, -1 after replying an error. */
static int migParseCommonOption(client *c, int *j, migKind *kind, long long *timeout) {
    char *a = c->argv[*j]->ptr;
    robj *v;

    if (*j + 1 >= c->argc) return 0;
    v = c->argv[*j + 1];
    if (!strcasecmp(a, "transport")) {
        if (migParseKind(v->ptr, kind) == -1) {
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
static int migCheckNode(client *c) {
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

static void migStatusCommand(client *c) {
    migSession *s = mig;
    migFigures f;

    if (s) {
        /* The phase under way counts up to now; a donor's bytes are those
         * sent so far. */
        migSessionFigures(s, &f);
        if (!s->transport[0])
            snprintf(f.transport, sizeof(f.transport), "%s", migKindName(s->kind));
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
    migKind kind = (migKind)server.migration_transport;
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
    if (migParseSlots(c, 3, last, bitmap, &nslots) == C_ERR) return;

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
    if (!slotCompactEnabled()) {
        addReplyError(c, "slot-affinity is off, so keys are not in slot blocks: "
            "CONFIG SET slot-affinity yes, or move the slots with MIGRATE "
            "(redis-cli --cluster-transport legacy)");
        return;
    }
    if (kind == MIG_KIND_RDMA && !migRdmaCompiled()) {
        addReplyError(c, "TRANSPORT rdma: this server was built without RDMA "
                         "(BUILD_RDMA=no); use tcp or auto");
        return;
    }
    if (c->flags & CLIENT_MULTI) {
        addReplyError(c, "RDMAMIGRATESLOTS can't run inside MULTI");
        return;
    }

    migSession *s = migNewSession(MIG_ROLE_DONOR);
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
        migKindName(kind), timeout);
    migBlock(c);
    migStartTimer();
}

/* INITRDMASERVER <port> <slot|start-end>... [TRANSPORT rdma|tcp|auto]
 *                [TIMEOUT ms] */
void initRdmaServerCommand(client *c) {
    long long port, timeout = MIG_DEFAULT_TIMEOUT_MS, version = 0;
    const char *vstr = "";
    migKind kind;
    char err[MIG_ERR_LEN] = "", tok[MIG_TOKEN_LEN + 1], ip[NET_IP_STR_LEN];
    unsigned char bitmap[CLUSTER_SLOTS / 8];
    int nslots, last = 2;

    if (migCheckNode(c) == C_ERR) return;
    kind = (migKind)server.migration_transport;
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
    if (migParseSlots(c, 2, last, bitmap, &nslots) == C_ERR) return;
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
    if (!slotCompactEnabled()) {
        addReplyError(c, "slot-affinity is off here: this node can't adopt slot blocks");
        return;
    }
    if (c->conn == NULL || connSockName(c->conn, ip, sizeof(ip), NULL) == -1) {
        addReplyError(c, "INITRDMASERVER must come over a TCP connection");
        return;
    }
    if (port == 0) port = server.rdma_migration_port;
    char sid[MIG_TOKEN_LEN + 1];
    if (migGenerateToken(tok, err) == -1 || migGenerateToken(sid, err) == -1) {
        addReplyErrorFormat(c, "%s", err);
        return;
    }
    const char *bind = kind != MIG_KIND_TCP && server.rdma_bind[0] ? server.rdma_bind : ip;
    migListener *l = migListen(kind, bind, (int)port, tok, err);
    if (l == NULL && kind == MIG_KIND_AUTO && bind != ip) l = migListen(kind, ip, (int)port, tok, err);
    if (l == NULL) {
        addReplyErrorFormat(c, "cannot open the data listener: %s", err);
        return;
    }
    migSession *s = migNewSession(MIG_ROLE_RECIPIENT);
    memcpy(s->bitmap, bitmap, sizeof(bitmap));
    s->nslots = nslots;
    memcpy(s->sid, sid, sizeof(sid));
    s->r.rstate = MIG_R_LISTENING;
    /* Until the import ends, slot compaction leaves its slots alone: a
     * sparse adopted block drained and released would leave a stale
     * block pointer to the rollback (which frees what lies in adopted
     * blocks), and nothing may move in blocks the patcher and the
     * transport are writing. */
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
        if (migSlotIsSet(s->bitmap, slot)) slotCompactPin(slot, 1);
    s->r.listener = l;
    s->kind = migListenerKind(l);
    snprintf(s->transport, sizeof(s->transport), "%s", migKindName(s->kind));
    s->deadline_ms = s->start_ms + timeout;
    s->r.donor_client_id = c->id;
    s->phase = MIG_PHASE_TRANSFER;
    mig = s;
    if (pthread_create(&s->thread, NULL, migRecipientThread, s) != 0) {
        mig = NULL;
        migCloseListener(l);
        s->r.listener = NULL;
        addReplyErrorFormat(c, "cannot start the migration thread: %s", strerror(errno));
        migFail(s, "cannot start the migration thread");
        migEndSession(s, MIG_LAST_FAILED);
        return;
    }
    s->thread_started = 1;
    if (migListenerNote(l)[0])
        serverLog(LL_NOTICE, "Slot migration: %s", migListenerNote(l));
    addReplyMapLen(c, 6);
    addReplyBulkCString(c, "transport"); addReplyBulkCString(c, migKindName(s->kind));
    addReplyBulkCString(c, "host"); addReplyBulkCString(c, bind);
    addReplyBulkCString(c, "port"); addReplyLongLong(c, migListenerPort(l));
    addReplyBulkCString(c, "token"); addReplyBulkCString(c, tok);
    addReplyBulkCString(c, "session"); addReplyBulkCString(c, s->sid);
    addReplyBulkCString(c, "version"); addReplyLongLong(c, MIG_PROTOCOL_VERSION);
    migStartTimer();
}

/* The recipient session of this client, or NULL after an error reply. */
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

/* RDMAREGISTER <session> <slot> <nkeys> <manifest-addr> <nblocks>
 *              [<donor-addr> <size> <bytes> <checksum>]... [<slot> ...] */
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
            getLongLongFromObject(c->argv[j + 3], &nblocks) != C_OK || nblocks < 1 ||
            nblocks > (c->argc - j - 4) / 4) {
            addReplyErrorFormat(c, "RDMAREGISTER: bad slot entry at argument %d "
                "(<slot> <nkeys> <manifest-addr> <nblocks> then <addr> <size> "
                "<bytes> <checksum> per block)", j);
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
        ms->blocks = zcalloc(sizeof(migBlockMap) * nblocks);
        j += 4;
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
    /* Reserve every slot's blocks, all or nothing. */
    for (int i = 0; i < n; i++) {
        migSlot *ms = &slots[i];
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
    s->r.reg_desc = zcalloc(sizeof(migBlockDesc) * (nb ? nb : 1));
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
    if (migParseSlots(c, 2, c->argc, bitmap, &nslots) == C_ERR) return;
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
    s->r.propagate = server.aof_state != AOF_OFF ||
        (server.masterhost == NULL && (server.repl_backlog || listLength(server.slaves)));
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
                            "INITRDMASERVER replied", sid, MIG_TOKEN_LEN);
        return;
    }
    if (migParseSlots(c, 2, c->argc, bitmap, &nslots) == C_ERR) return;
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

/* ============================ Hooks and INFO ============================== */

void migrationClientUnblocked(client *c) {
    migSession *s = mig;
    if (s == NULL) return;
    if (s->d.caller == c) s->d.caller = NULL;
    if (s->r.reg_client == c) s->r.reg_client = NULL;
    if (s->r.done_client == c) s->r.done_client = NULL;
}

/* CLIENT UNBLOCK of a migration's caller: it stops waiting, the migration
 * goes on. */
void migrationReplyUnblocked(client *c) {
    addReplyError(c, "-UNBLOCKED the client stopped waiting; the migration "
                     "goes on (RDMAMIGRATESLOTS STATUS)");
}

sds migrationGenInfo(sds info) {
    migSession *s = mig;
    migStats t = migLast.tstats;
    long long refused = migLast.peers_refused, now = 0;
    if (s) atomicGet(s->r.peers_refused, now);
    refused += now;
    if (s) {
        t.wr_posted += s->tstats.wr_posted;
        t.chains_posted += s->tstats.chains_posted;
        t.rdma_bytes_written += s->tstats.rdma_bytes_written;
        t.tcp_bytes_sent += s->tstats.tcp_bytes_sent;
    }
    return sdscatprintf(info,
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
        "migration_total_migrations:%lld\r\n"
        "migration_total_failed:%lld\r\n"
        "migration_total_keys:%lld\r\n"
        "migration_total_bytes:%lld\r\n"
        "migration_total_writes_replayed:%lld\r\n"
        "migration_thread_priority_raised:%lld\r\n"
        "migration_data_peers_refused:%lld\r\n"
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
        migLast.total_ok, migLast.total_failed, migLast.total_keys, migLast.total_bytes,
        migLast.total_writes_replayed, migLast.prio_raised, refused,
        server.migration_max_bandwidth,
        (unsigned long long)t.wr_posted, (unsigned long long)t.chains_posted,
        (unsigned long long)t.rdma_bytes_written, (unsigned long long)t.tcp_bytes_sent);
}

/* DEBUG MIGRATION-CORRUPT HEADER|MANIFEST <nth> | RANDOM <nth> <seed>
 * <count> | RESET */
static void migrationDebugCorruptCommand(client *c) {
    const char *what = c->argv[2]->ptr;
    long long nth = 0, seed = 0, count = 0;
    int w;

    if (c->argc == 3 && !strcasecmp(what, "reset")) {
        memset(&migCorrupt, 0, sizeof(migCorrupt));
        addReply(c, shared.ok);
        return;
    }
    if (!strcasecmp(what, "header") && c->argc == 4) w = MIG_CORRUPT_HEADER;
    else if (!strcasecmp(what, "manifest") && c->argc == 4) w = MIG_CORRUPT_MANIFEST;
    else if (!strcasecmp(what, "random") && c->argc == 6) w = MIG_CORRUPT_RANDOM;
    else {
        addReplyError(c, "syntax: DEBUG MIGRATION-CORRUPT HEADER|MANIFEST <nth> | "
                         "RANDOM <nth> <seed> <count> | RESET");
        return;
    }
    if (getLongLongFromObject(c->argv[3], &nth) != C_OK || nth < 0 || nth >= CLUSTER_SLOTS) {
        addReplyError(c, "<nth> is a slot's rank in the import, 0 to 16383");
        return;
    }
    if (w == MIG_CORRUPT_RANDOM &&
        (getLongLongFromObject(c->argv[4], &seed) != C_OK ||
         getLongLongFromObject(c->argv[5], &count) != C_OK || count < 1 || count > 1000000)) {
        addReplyError(c, "<seed> is an integer, <count> 1 to 1000000");
        return;
    }
    if (mig) {
        addReplyError(c, "a migration is running: set MIGRATION-CORRUPT before it starts");
        return;
    }
    migCorrupt.what = w;
    migCorrupt.nth = nth;
    migCorrupt.seed = seed;
    migCorrupt.count = count;
    addReply(c, shared.ok);
}

/* DEBUG MIGRATION-CUT: shut the running migration's TCP data connection
 * down (both directions) on this node, without telling the migration, as a
 * cut network ends it: tests watch both nodes find out and roll back. */
static void migrationDebugCutCommand(client *c) {
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

/* DEBUG MIGRATION-DELAY <phase> <ms> | RESET, MIGRATION-CORRUPT and
 * MIGRATION-CUT. */
void migrationDebugCommand(client *c) {
    long long ms;
    if (!strcasecmp(c->argv[1]->ptr, "migration-corrupt")) {
        migrationDebugCorruptCommand(c);
        return;
    }
    if (!strcasecmp(c->argv[1]->ptr, "migration-cut")) {
        migrationDebugCutCommand(c);
        return;
    }
    if (c->argc == 3 && !strcasecmp(c->argv[2]->ptr, "reset")) {
        memset(migDelayMs, 0, sizeof(migDelayMs));
        migDelayWriteMs = migDelayChunkMs = migDelayWatchMs = 0;
        addReply(c, shared.ok);
        return;
    }
    if (c->argc != 4) {
        addReplyError(c, "syntax: DEBUG MIGRATION-DELAY <phase> <ms> | RESET");
        return;
    }
    int write = !strcasecmp(c->argv[2]->ptr, "write");
    int chunk = !strcasecmp(c->argv[2]->ptr, "chunk");
    int watch = !strcasecmp(c->argv[2]->ptr, "watch");
    for (int p = MIG_PHASE_PREPARE; p <= MIG_PHASE_DELETE; p++) {
        if (!write && !chunk && !watch && strcasecmp(c->argv[2]->ptr, migPhaseName[p]))
            continue;
        if (getLongLongFromObject(c->argv[3], &ms) != C_OK || ms < 0 || ms > 3600000) {
            addReplyError(c, "the delay is milliseconds, 0 to 3600000");
            return;
        }
        if (write) migDelayWriteMs = ms;
        else if (chunk) migDelayChunkMs = ms;
        else if (watch) migDelayWatchMs = ms;
        else migDelayMs[p] = ms;
        addReply(c, shared.ok);
        return;
    }
    addReplyErrorFormat(c, "unknown phase '%s' (prepare, watch, transfer, write, chunk, patch, handover, delete)",
                        (char *)c->argv[2]->ptr);
}
