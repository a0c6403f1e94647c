/* slotcompact.h -- slot affinity: the slot allocator wired into Redis.
 *
 * What upstream files call (through small hooks, see patches/): startup,
 * configuration checks, the "# Slotalloc" INFO section, DEBUG SLOTCOMPACT
 * and CLUSTER SLOTBLOCKS. The design is at the top of slotcompact.c.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __SLOTCOMPACT_H
#define __SLOTCOMPACT_H

#include "sds.h"

#include <stdint.h>

struct client;
struct redisObject;

/* Startup (initServer, after clusterInit) and CONFIG SET slot-affinity. */
int slotCompactInit(void);
int slotCompactApplyAffinity(const char **err);
int slotCompactIsValidBlockSize(long long val, const char **err);
int slotCompactIsValidGroupSlots(long long val, const char **err);
int slotCompactApplyGroups(const char **err);
void slotCompactCron(void);

/* Whether keys are being put into slot blocks (cluster mode, slot-affinity
 * yes, and the range could be reserved). */
int slotCompactEnabled(void);
/* Whether the allocator runs (cluster mode, range reserved), whatever
 * slot-affinity says: what a migration needs. */
int slotCompactRunning(void);
int slotCompactStart(const char **err);
/* Keys and bytes relocated into blocks, and the main-thread time it took
 * (nanoseconds), counted for the keys of the slots of a bitmap (bit s of
 * byte s/8) since TallyStart: a migration's prepare reports them as its
 * own, whatever else background compaction relocates meanwhile. */
void slotCompactTallyStart(const unsigned char *slots);
void slotCompactTallyTotals(long long *keys, long long *bytes, long long *ns);

/* Background compaction: hooks of signalModifiedKey() and stopLoading(). */
void slotCompactKeyModified(struct redisObject *key);
void slotCompactLoadingEnded(void);
/* Writes that keep a key in its blocks: a hash-table field's new value
 * replaces the old one in place or in the key's slot blocks; between
 * PlaceBegin and PlaceEnd, every allocation goes to o's slot blocks. */
sds slotCompactReplaceSds(struct redisObject *o, sds old, sds value, int take);
int slotCompactPlaceBegin(struct redisObject *o);
void slotCompactPlaceEnd(struct redisObject *o, int placing);
/* Inside a placement scope, an allocation that is not o's (a list's
 * popped element): back to the heap for it, then placing again. */
int slotCompactPlaceSuspend(void);
void slotCompactPlaceResume(int arena);
/* Around one allocation that belongs to the structure at p, outside any
 * write (a quicklist node (de)compressed by a read): made in p's slot
 * blocks when p lives there. */
int slotCompactPlaceNear(const void *p);
void slotCompactPlaceNearEnd(int placing);
/* call(), before a command runs: what an earlier command's writes noted
 * (a placed write that signalled no key) is forgotten. */
void slotCompactCommandStart(void);
/* setKey() overwriting the entry de of a string key with a string: 1 if
 * val's bytes were written over the old value in its slot blocks (the
 * keyspace did not take val), 0 to overwrite as usual. */
struct dictEntry;
int slotCompactOverwriteString(struct dictEntry *de, struct redisObject *val);
/* setKey() adding a string key: a copy of val born in the key's slot
 * blocks, for the keyspace to hold instead of val (no reference taken on
 * val), or NULL to add val as usual. dbAdd()'s copy of a key's name: in
 * the blocks of its value when the value was born there. */
struct redisObject *slotCompactNewString(struct redisObject *key, struct redisObject *val);
sds slotCompactDupKeyName(sds name, struct redisObject *val);

/* For a migration's prepare phase: relocate this slot first; run bounded
 * steps (each returns 1 while any work remains) until the slot is no
 * longer pending. Main thread only. */
void slotCompactRequest(int slot);
/* After a migration (an import's values that came as DUMP payloads are in
 * the heap): the background cycle visits this slot before the others, to
 * its blocks with slot-affinity yes, to the heap with no. Unlike Request,
 * no migration holds the slot afterwards. */
void slotCompactVisitFirst(int slot);
int slotCompactSlotPending(int slot);
int slotCompactStep(uint64_t budget_us);
long long slotCompactSlotSync(int slot);
/* While a migration reads a slot's blocks: no relocation, no draining.
 * Unpin when it is over (also ends slotCompactRequest's request). */
void slotCompactPin(int slot);
void slotCompactUnpin(int slot);
int slotCompactIsPinned(int slot);
/* Slot groups (slot-affinity-group-slots): before a migration lists or
 * reserves a slot's blocks, Isolate gives the slot an arena of its own if
 * its arena may hold other slots' keys (it shares its group's, or a slot
 * mapped away from it has not moved out yet): 1 it did, and the slot's
 * keys must be relocated; 0 the slot had one; -1 no arena id is free, with
 * *why saying why, for a reply after "slot N ". Regroup maps the slot back
 * to its group's arena once the migration is over (Unpin does), to be
 * relocated there in the background. */
int slotCompactIsolate(int slot, const char **why);
void slotCompactRegroup(int slot);
/* A migration of the slots in bitmap may ship an arena whole, without
 * isolating its slots, when every slot mapping to it moves or is idle (in
 * idle, NULL for none: slots the caller vouches hold no key and can get
 * none, a donor's slots that another node serves) and it holds nobody
 * else's leftovers (not mixed). WholeArenas sets in whole (a bitmap of
 * CLUSTER_SLOTS bits) the slots of bitmap whose arena is such a unit, one
 * of its own included, and returns how many. Unite (recipient)
 * maps the n slots of a unit an import receives to one arena free of
 * anything else, before their blocks are reserved: the arena's id, or -1
 * if no id is free. */
int slotCompactWholeArenas(const unsigned char *bitmap, const unsigned char *idle,
                           unsigned char *whole);
int slotCompactUnite(const int *slots, int n);
/* Everything key de owns (what CLUSTER SLOTBLOCKS counts) lies in slot's
 * blocks, its value held by no one else: unlinking it and releasing the
 * blocks wholesale frees it whole. */
int slotCompactKeyInBlocks(struct dictEntry *de, int slot);
/* One key now, even in a pinned slot (a migration's stragglers). */
int slotCompactKeyNow(struct dictEntry *de);
/* A value and its flat payload are in the slot's blocks. */
int slotCompactValueInSlot(struct redisObject *o, int slot);
/* Drop a slot's blocks wholesale, accounting used_memory. */
size_t slotCompactReleaseSlot(int slot);
size_t slotCompactRetireSlot(int slot);
size_t slotCompactRetireUnit(int slot, const unsigned char *unit);
/* Whether the lazyfree thread has nothing queued that may still free into
 * live blocks (the purge of retired blocks, serverCron's, aside): before
 * blocks are released wholesale. */
int slotCompactLazyfreeIdle(void);
/* A replica's drop of a group of slots spread over several commands: keys
 * unlinked without a free are held until their arena goes wholesale
 * (HoldKey); after each drop, HeldRelease releases every arena that can go
 * (serverCron retries, and frees one by one what cannot go). */
void slotCompactHoldKey(int slot, sds key, struct redisObject *val);
void slotCompactHeldRelease(void);
size_t slotCompactHeldKeys(void);

sds slotCompactGenInfo(sds info);
void slotCompactDebugCommand(struct client *c);
void slotBlocksCommand(struct client *c);

#endif
