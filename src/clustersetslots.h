/* clustersetslots.h -- CLUSTER SETSLOTS, a batched CLUSTER SETSLOT.
 *
 * Called from clusterCommand (cluster.c, through a small hook, see
 * patches/). The design is at the top of clustersetslots.c.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __CLUSTERSETSLOTS_H
#define __CLUSTERSETSLOTS_H

struct client;
struct clusterNode;

#define CLUSTER_SETSLOTS_IMPORTING 0
#define CLUSTER_SETSLOTS_MIGRATING 1
#define CLUSTER_SETSLOTS_NODE 2
#define CLUSTER_SETSLOTS_STABLE 3

void clusterSetSlotsCommand(struct client *c);
int clusterParseSlotRanges(struct client *c, int first, int last,
                           unsigned char *slots, int *count);
void clusterSetSlotsApply(int action, struct clusterNode *n,
                          const unsigned char *slots);
int clusterSetSlotImportRefused(struct client *c, int slot);

#endif
