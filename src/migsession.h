/* migsession.h -- the slot migration's private header: what migration.c,
 * migdonor.c, migrecipient.c and migsession.c share, and nothing upstream
 * includes (upstream files see only migration.h).
 *
 * A migration is one session (migSession, `mig`), in the donor's role or
 * the recipient's; its fields both roles use are at the top, the donor's
 * in s->d, the recipient's in s->r. The files, and how they call each
 * other (docs/DESIGN.md, "Overview" and "Threads"; the protocol is drawn
 * in migration.c's top comment):
 *
 *   migration.c     RDMAMIGRATESLOTS (start, STATUS, CANCEL), INFO,
 *        |          DEBUG MIGRATION-*, the hooks blocked.c calls
 *        v
 *   migdonor.c      the donor: recorded writes, prepare, transfer,
 *   migrecipient.c  replay, handover, delete, rollback, its thread; the
 *        |          recipient: its commands, threads, link, rollback
 *        v
 *   migsession.c    the session both roles use: lifecycle, failure,
 *                   phases, figures, the timer (role callbacks), key
 *                   deletion, thread priority, nodes.conf variables
 *
 * Calls go down only: the donor and the recipient never call each other
 * (what they share is in migsession.c), and migsession.c calls neither:
 * its timer (migTimerProc, main thread) runs the session's per-tick work
 * through the callback its role gave migNewSession (migDonorTick,
 * migRecipientTick).
 *
 * Threads: the main thread runs the commands, the timer and the jobs
 * posted by the donor thread; the donor thread, the recipient thread and
 * the recipient's patcher run what migdonor.c and migrecipient.c say
 * they run. Shared state is mig (main thread) and the session's fields,
 * under s->lock or atomic where marked.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __MIGSESSION_H
#define __MIGSESSION_H

#include "server.h"
#include "hiredis.h"
#include "slotblocks.h"
#include "xfer.h"

#include <pthread.h>


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
extern const char *migPhaseName[];

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
extern const char *migRStateName[];

enum { MIG_ROLE_NONE, MIG_ROLE_DONOR, MIG_ROLE_RECIPIENT };
extern const char *migRoleName[];

enum { MIG_LAST_NONE, MIG_LAST_OK, MIG_LAST_FAILED, MIG_LAST_CANCELLED };
extern const char *migLastName[];

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
/* A role's main-thread work, run by the session's timer every tick:
 * returns 1 if it did work and more may follow at once (the next tick
 * comes after the clients' events of this loop iteration), 0 to look
 * again in 1 ms. */
typedef int migTickFn(struct migSession *s);

/* One slot of a migration. */
typedef struct migSlot {
    int slot;
    size_t nkeys;
    /* Donor: the manifest and the slot's blocks. */
    blkManifest manifest;
    int has_manifest;
    int built;                      /* The manifest is whole. */
    int restarted;                  /* Begun again once while watched (the
                                     * slot was written between two of its
                                     * steps). */
    /* Both: the blocks (donor addresses; recipient: local copies too).
     * Slots that share an arena and move whole (a unit: slot groups,
     * slotCompactWholeArenas; the arena's other slots, if any, served by
     * another node and empty here) ship it once: the unit's first slot with
     * keys, its lead, carries every block of the arena; the other slots,
     * its members, have no block (nblocks 0) and manifests in the lead's
     * blocks. lead: index in s->slots of the slot's lead (its own for a
     * lead); next_member: the lead's (then each member's) next member, -1
     * for none. docs/DESIGN.md, "Slot groups". */
    blkMap *blocks;
    size_t nblocks;
    int lead, next_member;
    uint64_t manifest_addr;         /* Recipient: from RDMAREGISTER. */
    int adopted;                    /* Recipient: blocks adopted. */
    blkAdopted keys;                /* Recipient: patched keys. */
    int has_keys;
    size_t blocks_left;             /* Recipient thread: blocks of the slot
                                     * not yet whole (TCP reports them). */
    /* Recipient, with replicas or AOF that take RDMASLOTADOPT: the blocks
     * as the donor sent them (blkBlockImageTake, before the patch), until
     * the slot's link begins; adopt_sent: the slot went to them as one
     * RDMASLOTADOPT (its keys are then linked in one go). */
    blkBlockImage *images;
    size_t nimages;
    int adopt_sent;
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
    dict *dirty_keys;               /* The keys those commands name, and
                                     * the keys writes took out of the
                                     * transfer (migDonorCopyKey). */
    /* Keys a write took out of the transfer before their bytes had left
     * (migDonorCopyKey): their old name and value, left untouched in the
     * blocks until those are sent, then freed (migDonorFreeCopied). */
    struct migCopiedKey *copied;
    size_t ncopied, copied_cap;
    long long keep_frozen_ms;       /* Donor: see migDonorKeepFrozenSlice. */
    int handover_begun;             /* Donor: RDMAHANDOVER may be on its way:
                                     * CANCEL is refused (under s->lock). */
    redisAtomic int resolving;      /* Donor: the handover's reply was lost;
                                     * asking the recipient (STATUS). */
} migDonorState;

/* migration-test-corrupt "header|manifest <nth>" | "random <nth> <seed>
 * <count>": the recipient's patcher damages the blocks of the nth slot it
 * patches before checking them, to test that bad data fails the import,
 * at whatever point of the transfer it is found, and costs nothing:
 * HEADER and MANIFEST as a lying donor would (the checksums match the
 * damage, the structural checks must find it), RANDOM as the way would
 * (the checksums must). Set between migrations (migrationTestCorruptValid
 * refuses it during one); each import takes its value at its start
 * (s->r.corrupt). */
enum { MIG_CORRUPT_NONE, MIG_CORRUPT_HEADER, MIG_CORRUPT_MANIFEST, MIG_CORRUPT_RANDOM };
struct migCorrupt {
    int what;
    long long nth, seed, count;
};
/* Parses a migration-test-corrupt value into *out ("" : MIG_CORRUPT_NONE).
 * Returns 0, or -1 with *err set (migrecipient.c). */
int migParseTestCorrupt(const char *spec, struct migCorrupt *out, const char **err);

/* The recipient's part of a session (s->r; zero on a donor). */
typedef struct migRecipientState {
    uint64_t donor_client_id;       /* The connection INITRDMASERVER came on. */
    xferListener *listener;
    xferConn *conn;
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
    char patch_err[XFER_ERR_LEN];
    uint32_t reg_n;
    xferBlockDesc *reg_desc;
    client *reg_client;
    int done_requested, patched;    /* RDMADONE handed to the thread. */
    int propagate;                  /* Tell replicas/AOF about the keys. */
    int keep_images;                /* RDMAREGISTER: every replica took
                                     * RDMASLOTADOPT then (2: with MEMBERS):
                                     * the patcher keeps the images
                                     * (migSlot.images). */
    int adopt;                      /* RDMADONE: propagate, and every replica
                                     * takes RDMASLOTADOPT (2: with MEMBERS):
                                     * no RESTORE payloads are made. */
    int late_payloads;              /* The main thread made RESTORE payloads
                                     * (logged once). */
    client *done_client;
    int link_cursor;
    long long link_resume_ms;       /* migration-test-delay-link. */
    int rstate;                     /* MIG_R_*: see migRecipientTo. */
    int rb_stage;                   /* See migRecipientRollbackSlice. */
    long long rb_dropped;
    redisAtomic long long peers_refused; /* Recipient: strangers its data
                                     * listener dropped (atomic). */
    struct migCorrupt corrupt;      /* migration-test-corrupt at the start. */
} migRecipientState;

/* One migration, in either role: what both roles use, then the donor's
 * part (d) and the recipient's (r). Both parts are always there (not a
 * union): some code reads the other role's fields on any session (a
 * client unblocked, STATUS, CANCEL, INFO), and finds them zero. */
typedef struct migSession {
    int role;
    migTickFn *tick;                /* The role's timer work (migNewSession). */
    volatile int phase;
    unsigned char bitmap[CLUSTER_SLOTS / 8];
    int nslots;
    migSlot *slots;                 /* Slots holding keys (donor), or the
                                     * registered ones (recipient). */
    int nmig;
    long long start_ms, deadline_ms, phase_start_ms;
    xferKind kind;
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
    long long manifests_stale;      /* Donor: kept but found stale
                                     * (migration-test-delay-watch; a bug). */
    long long prepare_frozen_ms;    /* Donor: the prepare's frozen part. */
    /* Donor: what the prepare relocated into blocks (slot-affinity no, or
     * keys background compaction had not reached), and the main-thread
     * time it took: keys of the migrating slots only
     * (slotCompactTallyTotals). */
    long long relocated_keys, relocated_bytes, relocated_ns;
    long long isolated_slots;       /* Donor: slots the prepare gave an arena
                                     * of their own (their group split). */
    long long pause_slot_ms;        /* Donor: sum over the slots of how long
                                     * each was frozen by the prepare's
                                     * freeze. */
    long long pause_first_ms;       /* Donor: the longest of those (the
                                     * freeze). */
    long long writes_replayed;      /* Both: commands applied by RDMAREPLAY. */
    long long keys_copied, bytes_copied; /* Donor: keys writes took out of
                                     * the transfer, and their size
                                     * (migDonorCopyKey). */
    xferStats tstats;
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
    char sid[XFER_TOKEN_LEN + 1];
    migDonorState d;                /* Donor. */
    migRecipientState r;            /* Recipient. */
} migSession;

extern migSession *mig;            /* The running migration, if any. */

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
struct migLast {
    int role, last;
    sds last_error;
    migFigures fig;                 /* Its figures ("" transport: none yet). */
    long long manifests_rebuilt, manifests_stale, prepare_frozen_ms;
    long long relocated_keys, relocated_bytes, relocated_ns;
    long long isolated_slots;
    long long keys_copied, bytes_copied;
    long long total_writes_replayed, total_keys_copied;
    long long total_ok, total_failed, total_keys, total_bytes;
    long long prio_raised;          /* auto: threads raised to normal. */
    /* RDMASLOTDROP applied here (a donor's replica, an AOF load): keys
     * unlinked with their blocks released wholesale, and freed one by one. */
    long long drop_keys_wholesale, drop_keys_freed;
    xferStats tstats;                /* Summed over migrations. */
    /* The last import session here, for RDMARESOLVE: its id, and whether
     * it ended with the slots this node's. */
    char import_sid[XFER_TOKEN_LEN + 1];
    int import_owned;
    long long peers_refused;        /* Summed over imports. */
};
extern struct migLast migLast;      /* migsession.c */

/* The test hooks are hidden configs (config.c, server.h; 0 / "": off),
 * never a branch of the data path:
 * - migration-test-delay-<point> <ms>: the donor thread sleeps at the
 *   start of a phase (prepare, transfer, patch, handover, delete), or
 *   ("write") in the transfer once both ends registered their blocks and
 *   before the first WRITE (tests fork a BGSAVE there: fork + live MRs),
 *   or ("chunk") after each chunk of the transfer that completed at least
 *   one slot (tests watch the slots take writes again; the chunks are cut
 *   as without it); or ("watch") the prepare waits between its manifests
 *   built with writes flowing and the freeze, and then checks each
 *   manifest it keeps against a fresh one; or ("handed") the recipient
 *   has answered RDMAHANDOVER's OK (it owns the slots) and the donor has
 *   not applied it yet (tests kill it there). Read by the donor thread
 *   (migTestDelayMs, migdonor.c), settable at any time.
 * - migration-test-corrupt: see struct migCorrupt. */

/* How migDeleteKey() lets go of a key's memory. MIG_DEL_IN_BLOCKS: the
 * key's slot lies wholly in its blocks (migSlot.bulk); nothing is freed
 * but the keyspace's dictEntry (general heap), and once every key of the
 * slot is unlinked and no lazy free can still reach them, the blocks are
 * released at once (slotCompactReleaseSlot): O(keys) pointer work plus
 * O(blocks), instead of a free per allocation. */
enum { MIG_DEL_SYNC, MIG_DEL_LAZY, MIG_DEL_IN_BLOCKS };

/* ======================= migsession.c: the session ======================== */

/* The time left before the session's deadline (0: past it), in ms; the
 * same as the int timeout the transport calls take. */
long long migRemainingMs(migSession *s);
int migRemainingMsInt(migSession *s);
/* Whether to stop now (cancel, failure or deadline), and the failure's
 * cause: set once (the first wins), or "cancelled"/"timed out". */
int migAborting(migSession *s);
void migFail(migSession *s, const char *fmt, ...);
void migFailAborted(migSession *s);
/* Phase changes, counting the time spent in the phase left. */
void migSetPhase(migSession *s, int phase);
/* A session id as INITRDMASERVER makes them. */
int migValidSid(const char *sid);
/* Slot bitmaps: a bit, range arguments for a command to send, and their
 * freeing. (Parsing <slot|start-end>...: clusterParseSlotRanges.) */
int migSlotIsSet(const unsigned char *bitmap, int slot);
void migAppendRanges(const unsigned char *bitmap, sds **argv, int *argc);
void migFreeArgv(sds *argv, int argc);
/* The options RDMAMIGRATESLOTS and INITRDMASERVER share, and the node
 * checks every command makes. */
int migParseCommonOption(client *c, int *j, xferKind *kind, long long *timeout);
int migCheckNode(client *c);
/* Session lifecycle: new, interrupt its thread's blocking I/O, end it
 * (records migLast, frees it, clears mig), and the 1 ms timer that drives
 * it from the main thread. */
migSession *migNewSession(int role, migTickFn *tick);
void migInterrupt(migSession *s);
void migEndSession(migSession *s, int last);
void migStartTimer(void);
/* Figures: a session's so far, and their fields in a reply. */
void migSessionFigures(migSession *s, migFigures *f);
void migAddReplyFigureFields(client *c, const migFigures *f, int status);
/* Block a client until the migration answers it. */
void migBlock(client *c);
/* Deleting keys outside a command (donor's delete, recipient's rollback,
 * stale copies): pauses, propagation, one key, the s->slots walk, the
 * lazyfree barriers, unpinning and releasing the slots' blocks. */
int migClientsPaused(void);
int migPropagateBegin(void);
void migPropagateEnd(int prev);
void migDeleteKey(redisDb *db, int slot, dictEntry *de, int how, const uint64_t *hash,
                  int propagate);
/* While one key of a slot's list is deleted, the next ones' memory is
 * asked for (the next key's hash is computed: it may be passed on only
 * when nothing but an unlink runs). */
typedef struct migDelAhead {
    dictEntry *de;              /* The next key to delete... */
    uint64_t hash;              /* ...and its hash. */
} migDelAhead;
void migDelLookahead(dict *d, dictEntry *de, migDelAhead *la);
/* RDMASLOTDROP for a batch of deleted slots instead of their keys' DELs,
 * if every replica attached understands it. */
int migSlotDropUsable(void);
void migPropagateSlotDrop(const unsigned char *bitmap);
/* RDMASLOTDROP's work on a replica or at AOF load (migration.c has the
 * command), and where the last one applied ended in the master's stream. */
long long migDropSlots(const unsigned char *bitmap, int lazy);
void migSlotDropApplied(long long reploff);
/* RDMASLOTADOPT for an imported slot (with MEMBERS: a unit of slots, slot
 * groups) instead of its keys' RESTOREs, if every replica attached
 * understands it; where the last one applied on a replica ended in its
 * master's stream. */
int migSlotAdoptUsable(void);
int migUnitAdoptUsable(void);
/* Room around a block image's bytes: before them for a replication buffer
 * block's header (migPropagateSlotAdopt() sends them to the replicas as
 * one), after them for what follows in the stream (the next block's or the
 * next slot's arguments, usually in the page already written, rather than
 * in a new 16 KB block each). */
#define MIG_IMAGE_HEADROOM offsetof(replBufBlock, buf)
#define MIG_IMAGE_TAILROOM 256
void migPropagateSlotAdopt(const blkUnitSlot *us, int nus, blkBlockImage *imgs, size_t n);
void migSlotAdoptApplied(long long reploff, int unit);
migSlot *migSlotEntry(migSession *s, int slot);
int migLazyfreeBarrierPassed(migSession *s, int purge);
void migUnpinAll(migSession *s);
void migReleaseIfEmpty(int slot);
int migUnitUnlinked(migSession *s, migSlot *ms);
void migReleaseBulkSlot(migSession *s, int slot);
/* The donor's recorded writes, freed (commands only, or everything);
 * migEndSession frees them too. */
void migCaptureFreeArgs(migSession *s);
void migCaptureFree(migSession *s);
/* The first call of every migration thread: its name, signals (bio.c's
 * conventions). */
void migThreadInit(const char *title);
/* migration-thread-priority, applied by each migration thread to itself. */
void migApplyThreadPriority(migSession *s);
/* nodes.conf: the slots a donor gave away, the slots of an import (saved
 * before its first key is linked, forgotten once it ended), and the id of
 * the last import handed over (RDMARESOLVE after a restart). */
void migGiveSlots(const unsigned char *bitmap);
int migRememberImporting(const unsigned char *bitmap);
void migForgetImporting(const unsigned char *bitmap);
extern char migImportSid[XFER_TOKEN_LEN + 1];

/* ========================= migdonor.c: the donor ========================== */

/* The donor thread (RDMAMIGRATESLOTS starts it). */
void *migDonorThread(void *arg);
/* The timer's donor work (its migTickFn): relax the slots sent, run the
 * thread's main-thread job, end the session once the thread has
 * returned. */
int migDonorTick(migSession *s);

/* ===================== migrecipient.c: the recipient ====================== */

/* The timer's recipient work (its migTickFn): answer, link, roll back.
 * Returns 1 if it linked keys (more may follow at once). */
int migRecipientTick(migSession *s);

#endif
