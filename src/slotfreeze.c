/* Frozen slots: the write fence of a slot migration.
 *
 * While a migration copies a slot's blocks, the bytes under transfer must
 * not change, and no acknowledged write may be lost (DESIGN.md section 5).
 * This node therefore postpones everything that would change a frozen
 * slot, from the start of the transfer to the handover, and nothing else:
 *
 *  - commands: a command that may write (CMD_WRITE or CMD_MAY_REPLICATE,
 *    and EXEC of such commands) with a key in a frozen slot, or with no key
 *    at all (FLUSHALL, EVAL with no keys...) except pub/sub, is blocked as
 *    BLOCKED_POSTPONE, the way CLIENT PAUSE WRITE blocks clients (hook in
 *    processCommand, after the cluster redirection check). The client just
 *    waits: when the slots thaw it is processed again, and by then the slot
 *    may have moved, so it gets a MOVED redirection, never an error.
 *    Reads of frozen slots are served.
 *  - expiry: an expired key of a frozen slot is reported missing but not
 *    deleted (expireIfNeeded, active expiry), as during CLIENT PAUSE.
 *  - eviction: keys of frozen slots are skipped (performEvictions).
 *
 * A freeze can be relaxed (slotFreezeRelax): then the slots' keys are
 * written, expired and evicted as usual again, and only keyless writes
 * (FLUSHALL, EVAL with no keys...) keep waiting. A migration relaxes its
 * freeze once the bytes have left (the writes that follow are recorded and
 * replayed on the recipient, migration.c) and freezes again, briefly, for
 * that replay and the handover.
 *
 * A freeze has a deadline: if whoever froze the slots does not thaw them in
 * time, serverCron does, so a stuck migration cannot stop writes forever.
 * The time writes were held is reported (INFO migration, later; the
 * migration's write_pause_ms).
 *
 * DEBUG SLOTFREEZE <ms> <slot|start-end>... and DEBUG SLOTFREEZE OFF drive
 * it from tests.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "server.h"
#include "cluster.h"
#include "slotfreeze.h"
#include "migration.h"

static struct {
    unsigned char slots[CLUSTER_SLOTS / 8];
    int nslots;
    int relaxed;                /* Only keyless writes wait (slotFreezeRelax). */
    mstime_t since;             /* When the current freeze started. */
    mstime_t deadline;          /* Thawed by the cron at this time. */
    long long postponed;        /* Commands held by this freeze. */
    long long total_postponed;  /* Since startup. */
    long long total_ms;         /* Time spent frozen, since startup. */
} sf;

int slotFreezeActive(void) {
    return sf.nslots != 0;
}

/* Whether the keys of this slot are frozen (a relaxed freeze leaves them
 * alone). */
int slotFreezeIsFrozen(int slot) {
    return sf.nslots && !sf.relaxed && ((sf.slots[slot >> 3] >> (slot & 7)) & 1);
}

static int slotFreezeInSet(int slot) {
    return (sf.slots[slot >> 3] >> (slot & 7)) & 1;
}

/* An sds key of the keyspace. */
int slotFreezeKeyIsFrozen(sds key) {
    if (!sf.nslots) return 0;
    return slotFreezeIsFrozen((int)keyHashSlot(key, (int)sdslen(key)));
}

/* Freeze these slots (a bitmap of CLUSTER_SLOTS bits) until slotThaw() or
 * for at most max_ms. Slots already frozen stay frozen; the deadline is
 * the later one. */
void slotFreeze(const unsigned char *slots, long long max_ms) {
    if (!sf.nslots) sf.postponed = 0;
    if (!sf.nslots || sf.relaxed) sf.since = mstime();
    sf.relaxed = 0;
    for (int j = 0; j < CLUSTER_SLOTS; j++) {
        if (((slots[j >> 3] >> (j & 7)) & 1) && !slotFreezeInSet(j)) {
            sf.slots[j >> 3] |= 1 << (j & 7);
            sf.nslots++;
        }
    }
    if (mstime() + max_ms > sf.deadline) sf.deadline = mstime() + max_ms;
}

/* Thaw every slot and let the postponed clients run again. Returns how long
 * the keys were frozen since the freeze began or last stopped being
 * relaxed, in ms (0 if it was relaxed). */
long long slotThaw(void) {
    mstime_t lasted;

    if (!sf.nslots) return 0;
    lasted = sf.relaxed ? 0 : mstime() - sf.since;
    memset(sf.slots, 0, sizeof(sf.slots));
    sf.nslots = 0;
    sf.relaxed = 0;
    sf.deadline = 0;
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
    unblockPostponedClients();
    return lasted;
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

/* Whether one command (with its arguments) must wait. */
static int slotFreezeCommandWaits(struct redisCommand *cmd, uint64_t flags,
                                  robj **argv, int argc) {
    getKeysResult result = GETKEYS_RESULT_INIT;
    int waits = 0, numkeys;

    if (!(flags & (CMD_WRITE | CMD_MAY_REPLICATE))) return 0;
    numkeys = getKeysFromCommand(cmd, argv, argc, &result);
    if (numkeys == 0) {
        /* FLUSHALL, EVAL without keys...: anything could be touched. */
        waits = !(cmd->flags & CMD_PUBSUB);
    }
    for (int j = 0; j < numkeys && !waits && !sf.relaxed; j++) {
        sds key = argv[result.keys[j].pos]->ptr;
        if (sdsEncodedObject(argv[result.keys[j].pos]) && slotFreezeKeyIsFrozen(key))
            waits = 1;
    }
    getKeysFreeResult(&result);
    return waits;
}

/* processCommand hook: 1 if the client must be postponed. */
int slotFreezeShouldPostpone(client *c) {
    int waits = 0;

    if (!sf.nslots || (c->flags & (CLIENT_SLAVE | CLIENT_MASTER))) return 0;
    if (c->cmd->proc == execCommand) {
        for (int j = 0; j < c->mstate.count && !waits; j++) {
            multiCmd *mc = &c->mstate.commands[j];
            waits = slotFreezeCommandWaits(mc->cmd, mc->cmd->flags, mc->argv, mc->argc);
        }
    } else if (!(c->flags & CLIENT_MULTI)) {
        /* getCommandFlags: a script declaring no-writes is a read. */
        waits = slotFreezeCommandWaits(c->cmd, getCommandFlags(c), c->argv, c->argc);
    }
    if (waits) {
        sf.postponed++;
        sf.total_postponed++;
    }
    return waits;
}

/* The "# Migration" INFO section: the migration's fields (migration.c),
 * then the freeze's. */
sds slotFreezeGenInfo(sds info) {
    info = sdscat(info, "# Migration\r\n");
    info = migrationGenInfo(info);
    return sdscatprintf(info,
        "migration_frozen_slots:%d\r\n"
        "migration_frozen_ms:%lld\r\n"
        "migration_postponed_commands:%lld\r\n"
        "migration_total_frozen_ms:%lld\r\n",
        sf.relaxed ? 0 : sf.nslots,
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
    slotFreeze(slots, ms);
    addReply(c, shared.ok);
}
