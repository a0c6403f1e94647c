/* migration.h -- slot migration as memory blocks: the commands and the
 * hooks upstream files call (src/migration.c; docs/DESIGN.md, "The
 * protocol").
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __MIGRATION_H
#define __MIGRATION_H

#include "sds.h"

struct client;
struct redisObject;

/* Commands (their JSON is in src/commands/). */
void rdmaMigrateSlotsCommand(struct client *c);
void initRdmaServerCommand(struct client *c);
void rdmaRegisterCommand(struct client *c);
void rdmaDoneCommand(struct client *c);
void rdmaReplayCommand(struct client *c);
void rdmaHandoverCommand(struct client *c);
void rdmaResolveCommand(struct client *c);
void rdmaSlotDropCommand(struct client *c);
void rdmaSlotAdoptCommand(struct client *c);

/* blocked.c: a client blocked by a migration command is being unblocked
 * (disconnected, CLIENT UNBLOCK...): forget it, the migration goes on. */
void migrationClientUnblocked(struct client *c);
void migrationReplyUnblocked(struct client *c);

/* cluster.c: a slot lost to the cluster bus whose keys the migration
 * deletes itself (with DELs to replicas and AOF). */
int migrationDeletesSlot(int slot);
/* cluster.c, nodes.conf, startup and failover: the slots this node's shard
 * handed over ("migration-given-slots" on the vars line), those of an
 * import not handed over yet ("migration-importing-slots") and the last
 * import handed over ("migration-import-session"); the stale copies of
 * their keys are deleted when a master starts or a replica takes over. */
sds migrationConfigVars(sds ci);
void migrationSlotLost(int slot);
int migrationLoadConfigVar(const char *name, const char *value);
void migrationDropStaleCopies(void);
/* clustersetslots.c: a slot of the running import. */
int migrationImportsSlot(int slot);

/* replication.c: whether a replica may PSYNC from psync_offset (one that
 * does not understand RDMASLOTDROP or RDMASLOTADOPT may not over one in
 * the backlog). */
int migrationPsyncAllowed(struct client *c, long long psync_offset);

/* server.c, shouldPropagate() and propagateNow(): a donor records the
 * writes to its migrating slots between its transfer and its handover. */
int migrationCapturing(void);
void migrationPropagated(int dbid, struct redisObject **argv, int argc, int target);

/* The donor's slotFreeze() callback: a command waits to write to this
 * frozen slot (the donor sends it next). */
void migrationSlotWanted(int slot);

/* INFO's "# Migration" section (server.c, genRedisInfoString). */
sds migrationGenInfo(sds info);

/* DEBUG MIGRATION-CUT (tests): shut the running migration's TCP data
 * connection down on this node. */
void migrationDebugCutCommand(struct client *c);

/* The is_valid_fn of the hidden config migration-test-corrupt (the other
 * test hooks, migration-test-delay-*, are plain numbers; migsession.h). */
int migrationTestCorruptValid(char *val, const char **err);

#endif
