/* CLUSTER SETSLOTS: CLUSTER SETSLOT for a whole batch of slots at once.
 *
 *   CLUSTER SETSLOTS IMPORTING|MIGRATING|NODE <node-id> <slot|start-end>...
 *   CLUSTER SETSLOTS STABLE <slot|start-end>...
 *
 * Moving slots between masters is driven by slot-state changes: MIGRATING
 * on the donor, IMPORTING on the recipient, then NODE <recipient> on both
 * (docs/DESIGN.md, "The protocol" and "The handover"). Stock tools send one CLUSTER
 * SETSLOT per slot and per node, and each one costs a round trip, a
 * rewrite of nodes.conf and, on the importing side, an fsync: ~2.7 ms per
 * slot here, about half of a tuned rebalance before any key moves. This
 * command does the same state change for any number of slots in one round
 * trip, one config write and at most one epoch bump.
 *
 * Semantics. For every slot it does exactly what CLUSTER SETSLOT <slot>
 * <action> does (clusterCommand in cluster.c), with the same preconditions:
 * MIGRATING only for slots this node owns, IMPORTING only for slots it does
 * not own, NODE refuses to give away a slot this node still has keys in,
 * the node must be known and a master, and this node must be a master. We
 * add two checks SETSLOT lacks: this node cannot migrate slots to itself
 * nor import them from itself.
 *
 * All or nothing. The command works in three passes over its arguments:
 * parse every <slot> or <start>-<end> (range, order, no slot given twice),
 * check every slot's precondition, and only then change state. The first
 * failure replies an error naming the offending argument or slot, and the
 * cluster state is untouched. Nothing in the last pass can fail.
 *
 * Batching. SETSLOT NODE, per slot, may bump this node's config epoch
 * (when it takes a slot it was importing), broadcast a PONG, and asks
 * clusterBeforeSleep() to save the config. Here the epoch is bumped once
 * for the batch, one PONG is broadcast when any slot changed owner, and
 * the config is saved (with fsync for NODE, since ownership changed) once,
 * in clusterBeforeSleep() before the reply reaches the client. When NODE
 * gives away the last slot of this master, it becomes a replica of the new
 * owner, as with SETSLOT (cluster-allow-replica-migration).
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "server.h"
#include "cluster.h"
#include "clustersetslots.h"
#include "migration.h"

typedef enum {
    SETSLOTS_IMPORTING = CLUSTER_SETSLOTS_IMPORTING,
    SETSLOTS_MIGRATING = CLUSTER_SETSLOTS_MIGRATING,
    SETSLOTS_NODE = CLUSTER_SETSLOTS_NODE,
    SETSLOTS_STABLE = CLUSTER_SETSLOTS_STABLE
} setSlotsAction;

static const char *setSlotsActionName[] = {
    "IMPORTING", "MIGRATING", "NODE", "STABLE"
};

/* Longest part of a user argument quoted back in an error. */
#define SETSLOTS_ARG_QUOTE 64

/* Parses one <slot> or <start>-<end> argument (decimal, no sign or
 * spaces) into *start and *end. On C_ERR an error naming the argument has
 * been replied. */
static int setSlotsParseRange(client *c, robj *arg, int *start, int *end) {
    sds s = arg->ptr;
    size_t len = sdslen(s);
    /* A dash at position 0 is a minus sign: "-1" is an out of range slot,
     * not a range. */
    char *dash = len > 1 ? memchr(s + 1, '-', len - 1) : NULL;
    long long a, b;

    if (dash) {
        size_t alen = dash - s;
        if (!string2ll(s, alen, &a) ||
            !string2ll(dash + 1, len - alen - 1, &b)) a = b = LLONG_MIN;
    } else {
        if (!string2ll(s, len, &a)) a = LLONG_MIN;
        b = a;
    }
    if (a == LLONG_MIN || b == LLONG_MIN) {
        addReplyErrorFormat(c,
            "Invalid slot or range '%.*s': use <slot> or <start>-<end>, "
            "slots are 0-%d", SETSLOTS_ARG_QUOTE, s, CLUSTER_SLOTS - 1);
        return C_ERR;
    }
    if (a < 0 || a >= CLUSTER_SLOTS || b < 0 || b >= CLUSTER_SLOTS) {
        addReplyErrorFormat(c,
            "Slot %lld in '%.*s' is out of range: slots are 0-%d",
            (a < 0 || a >= CLUSTER_SLOTS) ? a : b, SETSLOTS_ARG_QUOTE, s,
            CLUSTER_SLOTS - 1);
        return C_ERR;
    }
    if (a > b) {
        addReplyErrorFormat(c,
            "Invalid range '%.*s': the start slot is greater than the end slot",
            SETSLOTS_ARG_QUOTE, s);
        return C_ERR;
    }
    *start = (int) a;
    *end = (int) b;
    return C_OK;
}

/* First pass: parses c->argv[first..last) into argof, where argof[slot] is
 * the index in c->argv of the argument that names the slot, 0 if none does.
 * A slot named twice (a repeated slot, overlapping ranges) is an error. On
 * C_ERR an error has been replied. */
static int setSlotsCollect(client *c, int first, int last, int *argof) {
    for (int j = first; j < last; j++) {
        int start, end;
        if (setSlotsParseRange(c, c->argv[j], &start, &end) == C_ERR)
            return C_ERR;
        for (int slot = start; slot <= end; slot++) {
            if (argof[slot]) {
                addReplyErrorFormat(c,
                    "Slot %d is given twice, in '%.*s' and in '%.*s'",
                    slot, SETSLOTS_ARG_QUOTE,
                    (char *) c->argv[argof[slot]]->ptr,
                    SETSLOTS_ARG_QUOTE, (char *) c->argv[j]->ptr);
                return C_ERR;
            }
            argof[slot] = j;
        }
    }
    return C_OK;
}

/* Second pass: checks for every slot the precondition CLUSTER SETSLOT
 * checks for that action. n is the target node (NULL for STABLE). On C_ERR
 * an error naming the first offending slot has been replied. */
static int setSlotsCheck(client *c, setSlotsAction action, clusterNode *n,
                         const int *argof)
{
    clusterNode *me = server.cluster->myself;

    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        if (!argof[slot]) continue;
        char *arg = c->argv[argof[slot]]->ptr;
        clusterNode *owner = server.cluster->slots[slot];

        if (action == SETSLOTS_MIGRATING && owner != me) {
            addReplyErrorFormat(c,
                "I'm not the owner of hash slot %d (in '%.*s'), "
                "so I can't set it MIGRATING", slot, SETSLOTS_ARG_QUOTE, arg);
            return C_ERR;
        }
        if (action == SETSLOTS_IMPORTING && owner == me) {
            addReplyErrorFormat(c,
                "I'm already the owner of hash slot %d (in '%.*s'), "
                "so I can't set it IMPORTING", slot, SETSLOTS_ARG_QUOTE, arg);
            return C_ERR;
        }
        /* An import's slots become this node's through its handover
         * only (RDMAHANDOVER, migrecipient.c): taken now, they would be owned
         * without the keys the import may still drop. */
        if (action == SETSLOTS_NODE && migrationImportsSlot(slot)) {
            addReplyErrorFormat(c,
                "Hash slot %d (in '%.*s') is being imported by a block "
                "migration: it becomes this node's at the migration's "
                "handover (RDMAMIGRATESLOTS STATUS; CANCEL to stop it)",
                slot, SETSLOTS_ARG_QUOTE, arg);
            return C_ERR;
        }
        if (action == SETSLOTS_NODE && owner == me && n != me) {
            unsigned int keys = countKeysInSlot(slot);
            if (keys != 0) {
                addReplyErrorFormat(c,
                    "Can't assign hash slot %d (in '%.*s') to a different "
                    "node while I still hold %u keys in it",
                    slot, SETSLOTS_ARG_QUOTE, arg, keys);
                return C_ERR;
            }
        }
    }
    return C_OK;
}

/* Third pass of NODE: CLUSTER SETSLOT <slot> NODE <n> for every slot in
 * argof, with one epoch bump, one broadcast and one config save for the
 * whole batch. Cannot fail: setSlotsCheck() has passed. */
static void setSlotsAssign(clusterNode *n, const int *argof) {
    clusterNode *me = server.cluster->myself;
    int slots = 0, moved = 0, given_away = 0, imported = 0;
    int flags = CLUSTER_TODO_SAVE_CONFIG | CLUSTER_TODO_UPDATE_STATE |
                CLUSTER_TODO_FSYNC_CONFIG;

    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        if (!argof[slot]) continue;
        slots++;
        /* Assigning a migrating slot without keys ends the migration. */
        if (server.cluster->migrating_slots_to[slot] &&
            countKeysInSlot(slot) == 0)
            server.cluster->migrating_slots_to[slot] = NULL;
        if (server.cluster->slots[slot] != n) moved++;
        if (server.cluster->slots[slot] == me && n != me)
            given_away++;
        clusterDelSlot(slot);
        clusterAddSlot(n, slot);
        /* Taking a slot this node was importing ends the import (also a
         * block migration's handover, which marks nothing, migrecipient.c). */
        if (n == me && (server.cluster->importing_slots_from[slot] ||
                        migrationImportsSlot(slot))) {
            server.cluster->importing_slots_from[slot] = NULL;
            imported++;
        }
    }

    serverLog(LL_NOTICE,
        "CLUSTER SETSLOTS NODE %.40s: %d slots assigned, %d changed owner",
        n->name, slots, moved);

    /* The slots were migrated by hand: take a new config epoch so the rest
     * of the cluster prefers our claim (see SETSLOT NODE in cluster.c; a
     * collision is resolved by clusterHandleConfigEpochCollision). Once. */
    if (imported) {
        if (clusterBumpConfigEpochWithoutConsensus() == C_OK) {
            serverLog(LL_WARNING,
                "configEpoch updated after importing %d slots", imported);
        }
    }

    /* A master left without slots follows them, as with SETSLOT. */
    if (given_away && me->numslots == 0 &&
        server.cluster_allow_replica_migration)
    {
        serverLog(LL_WARNING,
                  "Configuration change detected. Reconfiguring myself "
                  "as a replica of %.40s", n->name);
        clusterSetMaster(n);
    }

    /* Let the other nodes know as soon as possible, once for the batch. */
    if (moved || imported) clusterBroadcastPong(CLUSTER_BROADCAST_ALL);
    clusterDoBeforeSleep(flags);
}

/* Third pass of IMPORTING, MIGRATING and STABLE: set the state of every
 * slot in argof. Cannot fail. */
static void setSlotsMark(setSlotsAction action, clusterNode *n,
                         const int *argof)
{
    int slots = 0;

    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        if (!argof[slot]) continue;
        slots++;
        switch (action) {
        case SETSLOTS_MIGRATING:
            server.cluster->migrating_slots_to[slot] = n;
            break;
        case SETSLOTS_IMPORTING:
            server.cluster->importing_slots_from[slot] = n;
            break;
        case SETSLOTS_STABLE:
            server.cluster->importing_slots_from[slot] = NULL;
            server.cluster->migrating_slots_to[slot] = NULL;
            break;
        default:
            serverPanic("setSlotsMark: unexpected action");
        }
    }
    serverLog(LL_VERBOSE, "CLUSTER SETSLOTS %s: %d slots",
              setSlotsActionName[action], slots);
    clusterDoBeforeSleep(CLUSTER_TODO_SAVE_CONFIG | CLUSTER_TODO_UPDATE_STATE);
}

/* Looks up the target node of IMPORTING, MIGRATING or NODE and checks it
 * can be one. Returns NULL after replying an error. */
static clusterNode *setSlotsTarget(client *c, setSlotsAction action,
                                   robj *id)
{
    clusterNode *me = server.cluster->myself;
    clusterNode *n = clusterLookupNode(id->ptr, sdslen(id->ptr));

    if (n == NULL) {
        addReplyErrorFormat(c, "I don't know about node %.*s",
                            SETSLOTS_ARG_QUOTE, (char *) id->ptr);
        return NULL;
    }
    if (nodeIsSlave(n)) {
        addReplyErrorFormat(c, "Target node %.40s is not a master", n->name);
        return NULL;
    }
    if (n == me && action == SETSLOTS_MIGRATING) {
        addReplyError(c, "I can't migrate hash slots to myself");
        return NULL;
    }
    if (n == me && action == SETSLOTS_IMPORTING) {
        addReplyError(c, "I can't import hash slots from myself");
        return NULL;
    }
    return n;
}

/* CLUSTER SETSLOTS IMPORTING|MIGRATING|NODE <node-id> <slot|start-end>...
 * CLUSTER SETSLOTS STABLE <slot|start-end>...
 *
 * Replies +OK after changing the state of every slot given, or an error
 * having changed nothing. Called by clusterCommand, which has checked
 * that cluster mode is enabled. */
void clusterSetSlotsCommand(client *c) {
    clusterNode *me = server.cluster->myself;
    setSlotsAction action;
    clusterNode *n = NULL;
    int first, *argof;

    if (nodeIsSlave(me)) {
        addReplyError(c, "Please use SETSLOTS only with masters.");
        return;
    }
    if (c->argc < 4) {
        addReplyError(c, "CLUSTER SETSLOTS needs an action and at least one "
                         "slot or range. Try CLUSTER HELP");
        return;
    }

    char *verb = c->argv[2]->ptr;
    if (!strcasecmp(verb, "importing")) action = SETSLOTS_IMPORTING;
    else if (!strcasecmp(verb, "migrating")) action = SETSLOTS_MIGRATING;
    else if (!strcasecmp(verb, "node")) action = SETSLOTS_NODE;
    else if (!strcasecmp(verb, "stable")) action = SETSLOTS_STABLE;
    else {
        addReplyErrorFormat(c, "Invalid CLUSTER SETSLOTS action '%.*s': use "
            "IMPORTING, MIGRATING, NODE or STABLE. Try CLUSTER HELP",
            SETSLOTS_ARG_QUOTE, verb);
        return;
    }

    if (action == SETSLOTS_STABLE) {
        /* A node id where the slots start is a likely mistake: say so
         * rather than "invalid slot". */
        if (clusterLookupNode(c->argv[3]->ptr, sdslen(c->argv[3]->ptr))) {
            addReplyError(c, "CLUSTER SETSLOTS STABLE takes no node id, "
                             "only slots or ranges");
            return;
        }
        first = 3;
    } else {
        if (c->argc < 5) {
            addReplyErrorFormat(c, "CLUSTER SETSLOTS %s needs a node id and "
                "at least one slot or range", setSlotsActionName[action]);
            return;
        }
        if ((n = setSlotsTarget(c, action, c->argv[3])) == NULL) return;
        first = 4;
    }

    argof = zcalloc(sizeof(int) * CLUSTER_SLOTS);
    if (setSlotsCollect(c, first, c->argc, argof) == C_OK &&
        setSlotsCheck(c, action, n, argof) == C_OK)
    {
        if (action == SETSLOTS_NODE)
            setSlotsAssign(n, argof);
        else
            setSlotsMark(action, n, argof);
        addReply(c, shared.ok);
    }
    zfree(argof);
}

/* cluster.c, CLUSTER SETSLOT <slot> NODE: refused, with an error replied,
 * for a slot a block migration is importing here (see setSlotsCheck; an
 * IMPORTING mark, which lets ASKING clients write there, is allowed: the
 * donor's copies win at the link). Returns 1 if it replied. */
int clusterSetSlotImportRefused(client *c, int slot) {
    if (c->argc < 4 || strcasecmp(c->argv[3]->ptr, "node") || !migrationImportsSlot(slot))
        return 0;
    addReplyErrorFormat(c, "Hash slot %d is being imported by a block migration: "
        "it becomes this node's at the migration's handover "
        "(RDMAMIGRATESLOTS STATUS; CANCEL to stop it)", slot);
    return 1;
}

/* The same state change for the slot migration (migdonor.c,
 * migrecipient.c), which has checked its preconditions itself: slots is a
 * bitmap of CLUSTER_SLOTS bits. Unlike the command, NODE may give away
 * slots that still hold keys: the donor hands its slots over first and
 * deletes their keys after. */
void clusterSetSlotsApply(int action, clusterNode *n, const unsigned char *slots) {
    int *argof = zcalloc(sizeof(int) * CLUSTER_SLOTS);

    for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
        if ((slots[slot >> 3] >> (slot & 7)) & 1) argof[slot] = 1;
    if (action == SETSLOTS_NODE) setSlotsAssign(n, argof);
    else setSlotsMark((setSlotsAction)action, n, argof);
    zfree(argof);
}

/* The same parsing for other commands taking slots (RDMAMIGRATESLOTS,
 * INITRDMASERVER, RDMADONE, RDMAHANDOVER): c->argv[first..last) into a
 * bitmap of CLUSTER_SLOTS bits and its count; at least one is needed. On
 * C_ERR an error naming the argument (bad syntax, out of range, a slot
 * given twice) has been replied. */
int clusterParseSlotRanges(client *c, int first, int last, unsigned char *slots, int *count) {
    if (first >= last) {
        addReplyError(c, "at least one slot or range <start>-<end> is needed");
        return C_ERR;
    }
    int *argof = zcalloc(sizeof(int) * CLUSTER_SLOTS);
    int ret = setSlotsCollect(c, first, last, argof);

    memset(slots, 0, CLUSTER_SLOTS / 8);
    *count = 0;
    for (int slot = 0; slot < CLUSTER_SLOTS && ret == C_OK; slot++) {
        if (!argof[slot]) continue;
        slots[slot >> 3] |= 1 << (slot & 7);
        (*count)++;
    }
    zfree(argof);
    return ret;
}
