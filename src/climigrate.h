/* climigrate.h -- redis-cli talks RDMAMIGRATESLOTS: detection, one batched
 * call per donor->recipient pair with a progress line, and the summary.
 *
 * Linked into redis-cli only (RDMAMIG_CLI_OBJ in src/rdmamig.mk) and
 * called from the cluster manager of redis-cli.c through small hooks (see
 * patches/). The pure logic it uses is clitransport.c; the design is at
 * the top of that file.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __CLIMIGRATE_H
#define __CLIMIGRATE_H

#include "clitransport.h"

struct redisContext;

/* A cluster node as the cluster manager knows it (redis-cli.c fills it
 * from its clusterManagerNode; nothing here is owned). */
typedef struct cliMigNode {
    const char *ip;
    int port;
    const char *name;               /* node id */
    struct redisContext *ctx;       /* the cluster manager's connection */
} cliMigNode;

/* Opens another authenticated connection to ip:port the way the cluster
 * manager opens its own (TLS, AUTH); NULL on failure. */
typedef struct redisContext *cliMigConnectFn(const char *ip, int port);

/* What the move needs to know besides the pair. */
typedef struct cliMigOptions {
    int transport;                  /* CLI_TRANSPORT_AUTO|RDMA|TCP */
    const char *user, *pass;        /* -a / --user: passed as AUTH/AUTH2 */
    long long timeout_ms;           /* --cluster-timeout */
    const cliMigNode *others;       /* the other masters, told SETSLOTS NODE */
    int nothers;
    cliMigConnectFn *connect;       /* for the STATUS connection */
    int overlap;                    /* 1: may return once the slots are
                                     * handed over, the donor still deleting
                                     * (see cliMigWaitPending) */
} cliMigOptions;

int cliMigSupports(const cliMigNode *n);
/* The slot group size a node places keys by (INFO slotalloc_group_slots;
 * 1 if it has none or does not say): what cliPickSlots keeps whole. */
int cliMigGroupSlots(const cliMigNode *n);
int cliMigCheckNodes(const cliMigNode *nodes, int count, int transport);
int cliMigMoveSlots(const cliMigNode *src, const cliMigNode *dst,
                    const int *slots, int nslots, const cliMigOptions *o);
/* Waits for the reply of a move that returned early (overlap) and prints
 * its summary; 1 if there was none or it succeeded, 0 if it failed. The
 * cluster manager calls it before it ends and before a MIGRATE move. */
int cliMigWaitPending(void);

#endif
