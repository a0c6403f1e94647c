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

struct client;

/* Startup (initServer, after clusterInit) and CONFIG SET slot-affinity. */
int slotCompactInit(void);
int slotCompactApplyAffinity(const char **err);
int slotCompactIsValidBlockSize(long long val, const char **err);
void slotCompactCron(void);

/* Whether keys are being put into slot blocks (cluster mode, slot-affinity
 * yes, and the range could be reserved). */
int slotCompactEnabled(void);

sds slotCompactGenInfo(sds info);
void slotCompactDebugCommand(struct client *c);
void slotBlocksCommand(struct client *c);

#endif
