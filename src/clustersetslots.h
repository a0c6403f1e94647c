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

void clusterSetSlotsCommand(struct client *c);

#endif
