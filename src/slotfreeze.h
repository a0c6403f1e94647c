/* slotfreeze.h -- frozen slots, the write fence of a slot migration
 * (src/slotfreeze.c): commands that would change a frozen slot wait,
 * expiry and eviction leave its keys alone; and watched slots, whose
 * changes are noted instead of held.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __SLOTFREEZE_H
#define __SLOTFREEZE_H

#include "sds.h"

struct client;
struct redisObject;
struct redisDb;

void slotFreeze(const unsigned char *slots, long long max_ms, void (*wanted)(int slot));
long long slotThaw(void);
long long slotFreezeRelax(void);
long long slotFreezeRelaxSlots(const unsigned char *slots);
int slotFreezeIsFrozen(int slot);
int slotFreezeKeyIsFrozen(sds key);
int slotFreezeKeepsBytes(sds key);
void slotFreezeSetCopier(int (*copy)(struct redisDb *db, sds key), int (*copied)(sds key));
void slotFreezeHeldStats(long long *cmds, long long *max_ms);
void slotWatch(const unsigned char *slots);
void slotUnwatch(void);
int slotWatchTakeChanged(int slot);

/* Hooks: processCommand, serverCron, DEBUG SLOTFREEZE; the freeze's INFO
 * fields (migrationGenInfo writes the "# Migration" section). */
int slotFreezeShouldPostpone(struct client *c);
void slotFreezeCron(void);
sds slotFreezeGenInfo(sds info);
void slotFreezeDebugCommand(struct client *c);

#endif
