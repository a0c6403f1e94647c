/* slotblocks.h -- what a slot migration puts in the blocks, and how the
 * recipient adopts it (src/slotblocks.c).
 *
 * Donor: blkBuildManifest() writes, into the slot's own blocks, one record
 * per key of the slot saying where its key and value are (donor addresses)
 * and its TTL; values of flat or simply linked encodings travel as they
 * are, others as a DUMP payload also written into the blocks.
 *
 * Recipient: once the slot's blocks are copied byte for byte into blocks of
 * its own and adopted (slotAllocAdoptBlock), blkPatchSlot() checks every
 * record and everything it points to, rewrites donor addresses into local
 * ones, and hands back keys ready to link; blkLinkAdopted() links them into
 * the keyspace (main thread, in bounded slices); blkSweepGarbage() frees
 * whatever no adopted key reaches (the manifest, the payloads, the nodes of
 * hash tables that were rebuilt).
 *
 * Every name of this layer starts with blk / BLK_ (tests/build/layering.sh
 * checks it).
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __SLOTBLOCKS_H
#define __SLOTBLOCKS_H

#include <stddef.h>
#include <stdint.h>
#include "sds.h"
#include "slotalloc.h"

struct redisObject;
struct client;

/* A keyspace entry's neighbours in its slot's list of keys (cluster mode:
 * clusterDictEntryMetadata, cluster.h). */
#define blkNextInSlot(de) (((clusterDictEntryMetadata *)dictMetadata(de))->next)
#define blkPrevInSlot(de) (((clusterDictEntryMetadata *)dictMetadata(de))->prev)

/* Ask for the bucket(s) of a key of hash h in dict d (both tables while it
 * rehashes) ahead of a link or an unlink: a random word of a table of
 * megabytes, a cache miss per key otherwise. */
#define blkPrefetchBucket(d, h) do {                                          \
    for (int t_ = 0; t_ <= 1 && (d)->ht_table[t_]; t_++)                      \
        __builtin_prefetch(&(d)->ht_table[t_][(h) & DICTHT_SIZE_MASK((d)->ht_size_exp[t_])]); \
} while (0)

/* How a key's value travels. */
#define BLK_PATH_ZERO_COPY 1    /* The robj and its allocations, as they are. */
#define BLK_PATH_DUMP 2         /* A DUMP payload in the blocks. */
#define BLK_PATH_INT 3          /* A shared integer: the value itself. */
#define BLK_PATH_DICT 4         /* A hash table (hash, set): the robj, the
                                 * dict, its table, entries and strings as
                                 * they are; the buckets refilled there. */

/* The donor's manifest of one slot, in the slot's blocks. */
typedef struct blkManifest {
    int slot;
    void *addr;                 /* The manifest allocation (donor address). */
    size_t nkeys;
    size_t keys_zero_copy;
    size_t keys_serialized;
    size_t payload_bytes;       /* DUMP payloads written. */
    size_t keys_rebuilt;        /* Of keys_zero_copy: BLK_PATH_DICT. */
    size_t capacity;            /* Records allocated (the slot's keys). */
    sds next;                   /* Next key to write (in the blocks). */
} blkManifest;

int blkManifestBegin(int slot, blkManifest *m, sds *err);
int blkManifestStep(blkManifest *m, uint64_t budget_us, sds *err);
int blkBuildManifest(int slot, blkManifest *m, sds *err);
int blkManifestSame(blkManifest *a, blkManifest *b);
void blkFreeManifest(blkManifest *m);

/* One donor block and where its copy is. */
typedef struct blkMap {
    uint64_t donor;             /* Donor address of the block. */
    uint64_t size;
    char *local;                /* The adopted copy. */
    uint64_t expect;            /* Migration: bytes the donor sends. */
    uint64_t sum;               /* Migration: their checksum (blkSum). */
} blkMap;

/* Keys checked and rebuilt, ready to be linked. */
typedef struct blkAdoptedKey {
    sds key;                    /* In the slot's blocks. */
    struct redisObject *val;
    long long expire;           /* Unix ms, -1: none. */
    uint64_t hash;              /* dictSdsHash(key), computed off the main
                                 * thread for blkLinkAdopted(). */
} blkAdoptedKey;

typedef struct blkAdopted {
    int slot;
    blkAdoptedKey *keys;
    size_t nkeys, linked;
    /* Every allocation adopted keys own: per received block (in the order
     * of the map given to blkPatchSlot), one bit per 16-byte granule, set
     * at the allocation's first byte. Those of a unit's lead count for
     * the unit's other slots too, which have none of their own. */
    uint64_t **owned;
    size_t nowned;
    int owned_twice;            /* An allocation was claimed twice. */
    size_t keys_zero_copy, keys_serialized, keys_rebuilt;
    /* Keys whose value object is in the general heap (DUMP path, or an
     * integer that is not shared here): freeing the blocks alone would
     * leak them. */
    size_t keys_in_heap;
    sds *payloads;              /* blkSerializeAdopted(), or NULL. */
} blkAdopted;

/* The checksum of what a migration ships of a block: XXH3-64 over its used
 * ranges (slotAllocBlockUsedRanges), in order. The donor sums its block's
 * ranges as it lists them (blkSumRanges); the recipient sums its
 * received copy before adopting it, finding the ranges in the copy's own
 * metadata (blkImageSum: -1 if the copy is not a well formed block).
 * Equal sums mean every shipped byte arrived as sent: allocator metadata,
 * manifest, keys and values alike. */
uint64_t blkSumRanges(const void *block, const slotAllocRangeInfo *r, size_t n);
int blkImageSum(void *block, size_t size, uint64_t *sum);
int blkAdoptBlock(int slot, void *addr);
int blkPatchSlot(int slot, blkMap *map, size_t nmap, uint64_t manifest,
                 size_t nkeys, const blkAdopted *unit, blkAdopted *out, sds *err);
void blkSerializeAdopted(blkAdopted *a);
size_t blkLinkAdopted(blkAdopted *a, size_t max);
size_t blkFreeBlockAllocs(void *block, const uint64_t *keep);
size_t blkSweepGarbage(blkAdopted *a, blkMap *map, size_t nmap);
void blkAdoptedFree(blkAdopted *a);

/* A received block as the donor sent it, kept by the recipient for its
 * replicas and AOF (RDMASLOTADOPT): the used ranges of the image (pairs
 * of native uint64 offset and length) and their bytes, in order; donor,
 * size and sum as in blkMap. blkBlockImageTake() copies them from a
 * received block before it is adopted (adoption and the patch rewrite
 * it), into one allocation with headroom bytes before them and at least
 * tailroom after (where the caller may put a header and what follows:
 * the recipient sends the bytes to its replicas as a replication buffer
 * block, without copying them again); blkAdoptImages() is the replica's
 * (or the AOF load's) side: it rebuilds the blocks from the images and
 * runs the recipient's checked adopt path on them for each slot of the
 * unit, links the keys and sweeps. It returns the number of keys linked,
 * or -1 with *err set and nothing of the slots adopted. */
typedef struct blkBlockImage {
    uint64_t donor, size, sum;
    sds ranges;
    char *bytes;        /* len bytes */
    size_t len;
    void *alloc;        /* what bytes lie in, if ours (freed with the image) */
    size_t room;        /* bytes of alloc free after them */
} blkBlockImage;

int blkBlockImageTake(const blkMap *m, blkBlockImage *img, size_t headroom,
                      size_t tailroom);
void blkBlockImagesFree(blkBlockImage *imgs, size_t n);
/* One slot of what blkAdoptImages() adopts: the first (the lead) and, for
 * a unit of slots sharing one arena (slot groups), its members, all with
 * their manifests in the same blocks. */
typedef struct blkUnitSlot {
    int slot;
    size_t nkeys;
    uint64_t manifest;
} blkUnitSlot;
long long blkAdoptImages(const blkUnitSlot *us, int nus, const blkBlockImage *imgs,
                         size_t n, sds *err);

/* DEBUG SLOTREPLANT <slot>: the whole path inside one process (test). */
void blkReplantDebugCommand(struct client *c);

#endif
