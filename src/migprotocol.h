/* migprotocol.h -- the version of the slot migration protocol, shared by
 * the server (migdonor.c, migrecipient.c, INFO in migration.c) and
 * redis-cli (climigrate.c).
 *
 * It covers everything both ends of a migration must agree on: the
 * commands between donor and recipient, their arguments and replies, the
 * transport's wire format and the layout of blocks and manifests. The
 * donor sends it in INITRDMASERVER and the recipient refuses any other;
 * INFO migration shows it (migration_protocol_version), and redis-cli
 * moves a pair's slots as blocks only when both nodes speak its own
 * version, with MIGRATE otherwise (--cluster-transport auto), so a
 * cluster can be upgraded node by node. Bump it with any change of the
 * above. Version 1 (0.1.0) was never announced: a node without the INFO
 * field speaks it.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __MIGPROTOCOL_H
#define __MIGPROTOCOL_H

/* 2: RDMAHANDOVER/RDMARESOLVE name the import session; RDMAREGISTER
 * carries a checksum per block.
 * 3: RDMAREGISTER, RDMADONE and RDMAREPLAY name the import session too
 * (their first argument): every message after INITRDMASERVER does.
 * 4: block layout version 2 (slotalloc.c: jemalloc's size classes, 512
 * bitmap bits per page).
 * 5: slot groups: an RDMAREGISTER entry may carry no block and name
 * instead an earlier slot (its lead) whose blocks hold its keys too. */
#define MIG_PROTOCOL_VERSION 5

#endif
