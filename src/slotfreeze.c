/* Frozen slots: the write fence of a slot migration.
 *
 * While a migration copies a slot's blocks, the bytes under transfer must
 * not change, and no acknowledged write may be lost (docs/DESIGN.md,
 * "Writes during a migration").
 * This node therefore postpones everything that would change a frozen
 * slot, from late in the prepare (once the manifests are built) to the
 * handover, and nothing else:
 *
 *  - commands: a command that may write (CMD_WRITE or CMD_MAY_REPLICATE,
 *    and EXEC of such commands) with a key in a frozen slot, or with no key
 *    at all (FLUSHALL, EVAL with no keys...) except pub/sub, is blocked as
 *    BLOCKED_POSTPONE, the way CLIENT PAUSE WRITE blocks clients (hook in
 *    processCommand, after the cluster redirection check). The client just
 *    waits: when the slots thaw it is processed again, and by then the slot
 *    may have moved, so it gets a MOVED redirection, never an error.
 *    Reads of frozen slots are served, except the few that would change
 *    the bytes they read (a compressed list node is decompressed in place)
 *    and read-only scripts, which may read such keys without naming them:
 *    those wait like writes (slotFreezeCommandWaits).
 *  - expiry: an expired key of a frozen slot is reported missing but not
 *    deleted (expireIfNeeded, active expiry), as during CLIENT PAUSE.
 *  - eviction: keys of frozen slots are skipped (performEvictions).
 *  - access time: reads of frozen slots' keys leave it alone (lookupKey,
 *    slotFreezeKeepsBytes): the bytes under transfer are checksummed.
 *
 * Copied keys (slotFreezeSetCopier): while a migration records the writes
 * it will replay on the recipient (migdonor.c, "Recorded writes"), a
 * write to a key of a frozen slot need not wait for the slot's bytes to
 * leave. The donor's copier moves the key out of the transfer instead: it
 * copies the key's name and value into new memory, leaves the old bytes
 * as they are until they have been sent, and replies 1; the command then
 * runs on the copy, and is recorded and replayed like any write after the
 * transfer. From then on that key is not frozen: reads change it, expiry
 * and eviction delete it (their DELs are recorded too). A key the copier
 * refuses (too big, a module's) waits as above. Scripts and keyless writes
 * always wait: they may touch keys they do not name.
 *
 * A freeze can be relaxed (slotFreezeRelax): then the slots' keys are
 * written, expired and evicted as usual again, and only keyless writes
 * (FLUSHALL, EVAL with no keys...) keep waiting. It can also be relaxed a
 * few slots at a time (slotFreezeRelaxSlots); once every slot is, the
 * freeze is relaxed as a whole. A migration relaxes each slot once that
 * slot's bytes have left (the writes that follow are recorded and replayed
 * on the recipient, migdonor.c), so the first slots sent do not wait for
 * the last ones, and freezes every slot again, briefly, for that replay
 * and the handover.
 *
 * Watched slots (slotWatch): before it freezes, a migration builds its
 * manifests while writes still flow, and only rebuilds, frozen, those of
 * the slots that changed meanwhile. A watched slot that is not frozen
 * holds nothing back: whatever the freeze would have held or left alone
 * (the commands above, an expiry, an eviction) runs, and marks the slot
 * changed (slotWatchTakeChanged); a keyless write or a DEBUG subcommand
 * that writes anywhere marks every watched slot.
 *
 * A freeze has a deadline: if whoever froze the slots does not thaw them in
 * time, serverCron does, so a stuck migration cannot stop writes forever.
 * The time writes were held is reported (the migration's write_pause_ms,
 * INFO migration_last_write_pause_ms).
 *
 * DEBUG SLOTFREEZE <ms> <slot|start-end>... and DEBUG SLOTFREEZE OFF drive
 * it from tests.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "server.h"
#include "cluster.h"
#include "slotfreeze.h"

static struct {
    unsigned char slots[CLUSTER_SLOTS / 8];
    int nslots;
    int relaxed;                /* Only keyless writes wait (slotFreezeRelax). */
    unsigned char relaxed_slots[CLUSTER_SLOTS / 8]; /* slotFreezeRelaxSlots */
    int nrelaxed;               /* Slots of the set relaxed one by one. */
    mstime_t since;             /* When the current freeze started. */
    mstime_t deadline;          /* Thawed by the cron at this time. */
    long long postponed;        /* Commands held by this freeze. */
    long long total_postponed;  /* Since startup. */
    rax *held;                  /* Client id -> when its command was first
                                 * held (ms), while it waits. */
    long long held_max_ms;      /* The longest wait of a command this
                                 * freeze held. */
    long long total_ms;         /* Time spent frozen, since startup. */
    void (*wanted)(int slot);   /* Told when a command starts to wait for
                                 * a frozen slot, or NULL (slotFreeze). */
    /* slotFreezeSetCopier: take a key out of the transfer (1: done, it
     * may be written now), and whether it was (1). NULL: none. */
    int (*copy)(redisDb *db, sds key);
    int (*copied)(sds key);
    /* slotWatch: slots whose changes are noted, and those changed. */
    unsigned char watched[CLUSTER_SLOTS / 8];
    unsigned char changed[CLUSTER_SLOTS / 8];
    int watching;
} sf;

static inline int slotBit(const unsigned char *bitmap, int slot) {
    return (bitmap[slot >> 3] >> (slot & 7)) & 1;
}

/* Note a change to a watched slot (any slot: those not watched are
 * ignored), or to all of them (slot -1). */
static void slotWatchTouch(int slot) {
    if (!sf.watching) return;
    if (slot < 0) {
        memcpy(sf.changed, sf.watched, sizeof(sf.changed));
    } else if (slotBit(sf.watched, slot)) {
        sf.changed[slot >> 3] |= 1 << (slot & 7);
    }
}

/* Watch these slots (a bitmap of CLUSTER_SLOTS bits), none changed yet,
 * until slotUnwatch(). Replaces any earlier set. */
void slotWatch(const unsigned char *slots) {
    memcpy(sf.watched, slots, sizeof(sf.watched));
    memset(sf.changed, 0, sizeof(sf.changed));
    sf.watching = 1;
}

void slotUnwatch(void) {
    memset(sf.watched, 0, sizeof(sf.watched));
    memset(sf.changed, 0, sizeof(sf.changed));
    sf.watching = 0;
}

/* Whether the watched slot changed since it was watched or since the last
 * call for it, which clears the mark. */
int slotWatchTakeChanged(int slot) {
    if (!slotBit(sf.changed, slot)) return 0;
    sf.changed[slot >> 3] &= ~(1 << (slot & 7));
    return 1;
}

/* Whether the keys of this slot are frozen (a relaxed freeze leaves them
 * alone). */
int slotFreezeIsFrozen(int slot) {
    return sf.nslots && !sf.relaxed && slotBit(sf.slots, slot) &&
           !(sf.nrelaxed && slotBit(sf.relaxed_slots, slot));
}

static int slotFreezeInSet(int slot) {
    return slotBit(sf.slots, slot);
}

/* Whether this key of a frozen slot was copied out of the transfer
 * (slotFreezeSetCopier): then it is not frozen. */
static int slotFreezeKeyCopied(sds key) {
    return sf.copied && sf.copied(key);
}

/* An sds key of the keyspace. Its callers (expiry, eviction) delete the
 * key when it is not frozen: a watched slot is marked changed. */
int slotFreezeKeyIsFrozen(sds key) {
    if (!sf.nslots && !sf.watching) return 0;
    int slot = (int)keyHashSlot(key, (int)sdslen(key));
    if (slotFreezeIsFrozen(slot)) return !slotFreezeKeyCopied(key);
    slotWatchTouch(slot);
    return 0;
}

/* A migration that records its writes takes the keys that writes name out
 * of the transfer instead of holding the writes (see the top of the file):
 * copy(db, key) returns 1 once the key's bytes under transfer are no
 * longer the key's (or it has none: it does not exist), 0 if the write
 * must wait; copied(key) whether copy() did so. Until slotFreeze() or
 * slotThaw(), which forget them; NULL, NULL: none. */
void slotFreezeSetCopier(int (*copy)(redisDb *db, sds key), int (*copied)(sds key)) {
    sf.copy = copy;
    sf.copied = copied;
    /* Writes held meanwhile (the end of a migration's prepare) may copy
     * their keys now rather than wait for the next relax: they are tried
     * again (those that still wait block again). */
    if (copy && sf.held) unblockPostponedClients();
}

/* db.c lookupKey(): a read of a frozen slot's key must not write the
 * access time (LRU clock or LFU counter) into its object: the slot's
 * blocks are being shipped, checksummed as they were when frozen
 * (migdonor.c). The key's access time is then the one it had at the
 * freeze, as under a fork. */
int slotFreezeKeepsBytes(sds key) {
    if (!sf.nslots) return 0;
    return slotFreezeIsFrozen((int)keyHashSlot(key, (int)sdslen(key))) &&
           !slotFreezeKeyCopied(key);
}

/* No slot is relaxed on its own (slotFreezeRelaxSlots) any more. */
static void slotFreezeForgetRelaxed(void) {
    memset(sf.relaxed_slots, 0, sizeof(sf.relaxed_slots));
    sf.nrelaxed = 0;
}

/* Freeze these slots (a bitmap of CLUSTER_SLOTS bits) until slotThaw() or
 * for at most max_ms. Slots already frozen stay frozen, and every slot of
 * a relaxed freeze, wholly or slot by slot, is frozen again; the deadline
 * is the later one. wanted, if not NULL, is called with a slot when a
 * command starts to wait for it: the donor sends that slot next. It is a
 * callback because the fence sits below the migration (calls go down). */
void slotFreeze(const unsigned char *slots, long long max_ms, void (*wanted)(int slot)) {
    if (wanted) sf.wanted = wanted;     /* A DEBUG SLOTFREEZE keeps the donor's. */
    slotFreezeSetCopier(NULL, NULL);    /* Every key waits again. */
    if (!sf.nslots) sf.postponed = sf.held_max_ms = 0;
    if (!sf.nslots || sf.relaxed) sf.since = mstime();
    sf.relaxed = 0;
    slotFreezeForgetRelaxed();
    for (int j = 0; j < CLUSTER_SLOTS; j++) {
        if (slotBit(slots, j) && !slotFreezeInSet(j)) {
            sf.slots[j >> 3] |= 1 << (j & 7);
            sf.nslots++;
        }
    }
    if (mstime() + max_ms > sf.deadline) sf.deadline = mstime() + max_ms;
}

/* A held command runs now (or its freeze ended): count its wait. */
static void slotFreezeHeldEnd(void *since) {
    long long waited = (long long)(mstime() - (mstime_t)(intptr_t)since);
    if (waited > sf.held_max_ms) sf.held_max_ms = waited;
}

/* The commands this freeze held, and the longest any waited (the ones
 * still waiting count once they run, or when the freeze ends). */
void slotFreezeHeldStats(long long *cmds, long long *max_ms) {
    *cmds = sf.postponed;
    *max_ms = sf.held_max_ms;
}

/* Thaw every slot and let the postponed clients run again. Returns how long
 * the keys were frozen since the freeze began or last stopped being
 * relaxed, in ms (0 if it was relaxed). */
long long slotThaw(void) {
    mstime_t lasted;

    if (!sf.nslots) return 0;
    if (sf.held) {
        /* Everything held runs now (once the event loop gets to it). A
         * client that disconnected while held ran nothing: its wait is not
         * counted (it would be the whole freeze, whenever it left). */
        raxIterator ri;
        raxStart(&ri, sf.held);
        raxSeek(&ri, "^", NULL, 0);
        while (raxNext(&ri)) {
            uint64_t id;
            memcpy(&id, ri.key, sizeof(id));
            if (lookupClientByID(id)) slotFreezeHeldEnd(ri.data);
        }
        raxStop(&ri);
        raxFree(sf.held);
        sf.held = NULL;
    }
    lasted = sf.relaxed ? 0 : mstime() - sf.since;
    memset(sf.slots, 0, sizeof(sf.slots));
    sf.nslots = 0;
    sf.relaxed = 0;
    slotFreezeForgetRelaxed();
    sf.deadline = 0;
    sf.wanted = NULL;
    slotFreezeSetCopier(NULL, NULL);
    sf.total_ms += lasted;
    /* Also wakes clients held by CLIENT PAUSE: they check again and block
     * again if that pause still holds. */
    unblockPostponedClients();
    return lasted;
}

/* Relax the freeze: the frozen slots' keys may be written, expired and
 * evicted again; keyless writes still wait (they could touch any slot) until
 * slotThaw(), or until slotFreeze() freezes the keys again. The postponed
 * clients run again (keyless ones block again). Returns how long the keys
 * were frozen, in ms. */
long long slotFreezeRelax(void) {
    mstime_t lasted;

    if (!sf.nslots || sf.relaxed) return 0;
    lasted = mstime() - sf.since;
    sf.total_ms += lasted;
    sf.relaxed = 1;
    slotFreezeForgetRelaxed();
    unblockPostponedClients();
    return lasted;
}

/* Relax the freeze of some of the frozen slots (a bitmap; slots not frozen
 * are ignored): their keys may be written, expired and evicted again, the
 * others' still wait. The postponed clients run again (those still held
 * block again). Once no slot of the freeze is left frozen, the freeze is
 * relaxed as a whole, and that call returns what slotFreezeRelax() would
 * (how long the keys were frozen, in ms); earlier calls return 0. */
long long slotFreezeRelaxSlots(const unsigned char *slots) {
    int added = 0;

    if (!sf.nslots || sf.relaxed) return 0;
    for (int j = 0; j < CLUSTER_SLOTS / 8; j++) {
        unsigned char b = slots[j] & sf.slots[j] & ~sf.relaxed_slots[j];
        if (!b) continue;
        sf.relaxed_slots[j] |= b;
        added += __builtin_popcount(b);
    }
    if (!added) return 0;
    sf.nrelaxed += added;
    if (sf.nrelaxed == sf.nslots) return slotFreezeRelax();
    unblockPostponedClients();
    return 0;
}

/* serverCron: a freeze never outlives its deadline. */
void slotFreezeCron(void) {
    if (sf.nslots && mstime() >= sf.deadline) {
        serverLog(LL_WARNING, "Slot freeze of %d slots reached its deadline "
            "after %lld ms: writes to them are let through again",
            sf.nslots, (long long)(mstime() - sf.since));
        slotThaw();
    }
}

/* Whether the keys of some slot are frozen (not relaxed). */
static int slotFreezeKeysFrozen(void) {
    return sf.nslots && !sf.relaxed && sf.nrelaxed < sf.nslots;
}

/* Whether reading this key (of a frozen slot) would change its bytes: a
 * list whose quicklist compresses nodes (list-compress-depth when it was
 * made) is read by decompressing a node in place (a new allocation in the
 * slot's blocks, the node's pointer and encoding rewritten, the compressed
 * copy freed) and compressing it again afterwards. The migration's sending
 * thread may be reading those very bytes, so such reads wait like writes.
 * Looked up without touching the LRU clock or expiring anything. */
static int slotFreezeReadChanges(redisDb *db, sds key) {
    dictEntry *de = dictFind(db->dict, key);
    if (de == NULL) return 0;
    robj *o = dictGetVal(de);
    return o->type == OBJ_LIST && o->encoding == OBJ_ENCODING_QUICKLIST &&
           ((quicklist *)o->ptr)->compress != 0;
}

/* Whether a command must wait for key k: a write, a script or a read that
 * would change the key's bytes (listread: a list read of elements), of a
 * frozen slot, unless the key was or can be copied out of the transfer (a
 * write; not a script's: slotFreezeSetCopier). A migration sending that
 * slot then sends it next. */
static int slotFreezeKeyWaits(redisDb *db, robj *k, int write, int script, int listread) {
    if (!sdsEncodedObject(k)) return 0;
    int slot = (int)keyHashSlot(k->ptr, (int)sdslen(k->ptr));
    int frozen = slotFreezeIsFrozen(slot);
    if (!frozen && !(sf.watching && slotBit(sf.watched, slot))) return 0;
    if (!write && !script && !(listread && slotFreezeReadChanges(db, k->ptr))) return 0;
    if (!frozen) {                  /* Watched: it runs, and changes the slot. */
        slotWatchTouch(slot);
        return 0;
    }
    if (!script && slotFreezeKeyCopied(k->ptr)) return 0;
    if (write && !script && sf.copy && sf.copy(db, k->ptr)) return 0;
    if (sf.wanted) sf.wanted(slot);
    return 1;
}

/* Whether a DEBUG subcommand must wait. DEBUG is no write command, but
 * some of its subcommands write keys anywhere: RELOAD and LOADAOF empty
 * the keyspace and load it again, POPULATE adds keys, SLOTCOMPACT and
 * SLOTREPLANT move keys' memory. They wait like FLUSHALL, while any freeze
 * lasts. Others read values in ways that change their bytes: DIGEST reads
 * every value, DIGEST-VALUE the values it names and QUICKLIST <key> 1 the
 * list it names, decompressing compressed lists in place. They wait while
 * some slot's keys are frozen, as such list reads do. The rest (OBJECT,
 * SLOTFREEZE, MIGRATION-CUT, SLEEP...) change no key and run. */
static int slotFreezeDebugWaits(redisDb *db, robj **argv, int argc) {
    static const char *writers[] = {"reload", "loadaof", "populate", "slotcompact",
                                    "slotreplant", NULL};
    int waits = 0;

    if (argc < 2 || !sdsEncodedObject(argv[1])) return 0;
    const char *sub = argv[1]->ptr;
    for (int j = 0; writers[j]; j++) {
        if (strcasecmp(sub, writers[j])) continue;
        slotWatchTouch(-1);
        return sf.nslots != 0;
    }
    if (!slotFreezeKeysFrozen() && !sf.watching) return 0;
    if (argc == 2 && !strcasecmp(sub, "digest")) {
        slotWatchTouch(-1);
        return slotFreezeKeysFrozen();
    }
    if (argc == 4 && !strcasecmp(sub, "quicklist") && sdsEncodedObject(argv[3]) &&
        atoi(argv[3]->ptr) != 0)
        return slotFreezeKeyWaits(db, argv[2], 0, 0, 1);
    if (argc < 3 || strcasecmp(sub, "digest-value")) return 0;
    for (int j = 2; j < argc && !waits; j++)
        waits = slotFreezeKeyWaits(db, argv[j], 0, 0, 1);
    return waits;
}

/* Whether one command (with its arguments) must wait. Writes wait when
 * they name a key of a frozen slot, or no key at all (FLUSHALL, EVAL
 * without keys...: anything could be touched). Reads wait only when they
 * would change a frozen slot's bytes: list reads of elements (LRANGE,
 * LINDEX, LPOS, SORT_RO; not LLEN, and not DUMP, which copies compressed
 * nodes as they are) of a list that compresses (slotFreezeReadChanges),
 * DEBUG DIGEST and DIGEST-VALUE (slotFreezeDebugWaits), and scripts
 * that only read when they name a key of a frozen slot or none at all (a
 * script may read keys it did not name, of its slot or, naming none, of
 * any). */
static int slotFreezeCommandWaits(redisDb *db, struct redisCommand *cmd, uint64_t flags,
                                  robj **argv, int argc) {
    getKeysResult result = GETKEYS_RESULT_INIT;
    int waits = 0, numkeys;
    int write = (flags & (CMD_WRITE | CMD_MAY_REPLICATE)) != 0;
    int script = (cmd->flags & CMD_NO_MANDATORY_KEYS) != 0;
    int listread = (cmd->acl_categories & ACL_CATEGORY_LIST) && cmd->proc != llenCommand;

    if (cmd->proc == debugCommand) return slotFreezeDebugWaits(db, argv, argc);
    if (!write && !slotFreezeKeysFrozen() && !(sf.watching && (script || listread)))
        return 0;
    numkeys = getKeysFromCommand(cmd, argv, argc, &result);
    if (numkeys == 0) {
        /* It could touch (or read) any key: a write waits while any
         * freeze lasts, a script while some slot's keys are frozen, and
         * every watched slot changes. */
        int any = write ? !(cmd->flags & CMD_PUBSUB) : script;
        if (any) slotWatchTouch(-1);
        waits = any && (write ? sf.nslots != 0 : slotFreezeKeysFrozen());
    }
    for (int j = 0; j < numkeys && !waits; j++)
        waits = slotFreezeKeyWaits(db, argv[result.keys[j].pos], write, script, listread);
    getKeysFreeResult(&result);
    return waits;
}

/* processCommand hook: 1 if the client must be postponed. */
int slotFreezeShouldPostpone(client *c) {
    int waits = 0;

    if ((!sf.nslots && !sf.watching) || (c->flags & (CLIENT_SLAVE | CLIENT_MASTER)))
        return 0;
    if (c->cmd->proc == execCommand) {
        for (int j = 0; j < c->mstate.count && !waits; j++) {
            multiCmd *mc = &c->mstate.commands[j];
            waits = slotFreezeCommandWaits(c->db, mc->cmd, mc->cmd->flags, mc->argv, mc->argc);
        }
    } else if (!(c->flags & CLIENT_MULTI)) {
        /* getCommandFlags: a script declaring no-writes is a read. */
        waits = slotFreezeCommandWaits(c->db, c->cmd, getCommandFlags(c), c->argv, c->argc);
    }
    /* A client woken by a relax may be held again: its command counts
     * once, from the first time it was held to the time it runs. */
    if (waits) {
        if (sf.held == NULL) sf.held = raxNew();
        if (raxTryInsert(sf.held, (unsigned char *)&c->id, sizeof(c->id),
                         (void *)(intptr_t)mstime(), NULL)) {
            sf.postponed++;
            sf.total_postponed++;
        }
    } else if (sf.held) {
        void *since;
        if (raxRemove(sf.held, (unsigned char *)&c->id, sizeof(c->id), &since))
            slotFreezeHeldEnd(since);
    }
    return waits;
}

/* The freeze's fields of the "# Migration" INFO section (migration.c
 * writes the section and calls this). */
sds slotFreezeGenInfo(sds info) {
    return sdscatprintf(info,
        "migration_frozen_slots:%d\r\n"
        "migration_frozen_ms:%lld\r\n"
        "migration_postponed_commands:%lld\r\n"
        "migration_total_frozen_ms:%lld\r\n",
        sf.relaxed ? 0 : sf.nslots - sf.nrelaxed,
        sf.nslots && !sf.relaxed ? (long long)(mstime() - sf.since) : 0,
        sf.total_postponed, sf.total_ms);
}

/* Parse "<slot>" or "<start>-<end>" into a bitmap. Returns C_ERR with a
 * reply sent on bad input. */
static int slotFreezeParseRange(client *c, robj *arg, unsigned char *slots) {
    long long start, end;
    char *s = arg->ptr, *dash = strchr(s, '-');

    if (dash && dash != s) {
        if (string2ll(s, dash - s, &start) == 0 ||
            string2ll(dash + 1, strlen(dash + 1), &end) == 0) {
            addReplyErrorFormat(c, "Invalid slot range '%s'", s);
            return C_ERR;
        }
    } else if (string2ll(s, sdslen(arg->ptr), &start) == 0) {
        addReplyErrorFormat(c, "Invalid slot '%s'", s);
        return C_ERR;
    } else {
        end = start;
    }
    if (start < 0 || end >= CLUSTER_SLOTS || start > end) {
        addReplyErrorFormat(c, "Slot range '%s' is out of range (0-%d, start <= end)",
            s, CLUSTER_SLOTS - 1);
        return C_ERR;
    }
    for (long long j = start; j <= end; j++) slots[j >> 3] |= 1 << (j & 7);
    return C_OK;
}

/* DEBUG SLOTFREEZE <ms> <slot|start-end>... | OFF */
void slotFreezeDebugCommand(client *c) {
    unsigned char slots[CLUSTER_SLOTS / 8];
    long long ms;

    if (!server.cluster_enabled) {
        addReplyError(c, "DEBUG SLOTFREEZE needs cluster mode");
        return;
    }
    if (c->argc == 3 && !strcasecmp(c->argv[2]->ptr, "off")) {
        addReplyLongLong(c, slotThaw());
        return;
    }
    if (c->argc < 4 || getLongLongFromObject(c->argv[2], &ms) != C_OK || ms <= 0) {
        addReplyError(c, "syntax: DEBUG SLOTFREEZE <ms> <slot|start-end>... | OFF");
        return;
    }
    memset(slots, 0, sizeof(slots));
    for (int j = 3; j < c->argc; j++)
        if (slotFreezeParseRange(c, c->argv[j], slots) == C_ERR) return;
    slotFreeze(slots, ms, NULL);
    addReply(c, shared.ok);
}
