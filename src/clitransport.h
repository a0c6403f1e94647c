/* clitransport.h -- redis-cli's side of block slot migration: the
 * --cluster-transport option, the RDMAMIGRATESLOTS arguments and the
 * parsing and printing of its statistics.
 *
 * Pure logic (libc only), unit-tested on its own (tests/c/
 * clitransport-test-main.c). The part that talks to the nodes through
 * hiredis is climigrate.c; redis-cli.c calls both through small hooks
 * (see patches/). The design is at the top of clitransport.c.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __CLITRANSPORT_H
#define __CLITRANSPORT_H

#include <stddef.h>

/* --cluster-transport values. AUTO is 0 so a zeroed config means auto. */
#define CLI_TRANSPORT_AUTO 0    /* RDMAMIGRATESLOTS where both nodes have it */
#define CLI_TRANSPORT_RDMA 1    /* RDMAMIGRATESLOTS ... TRANSPORT rdma, required */
#define CLI_TRANSPORT_TCP 2     /* RDMAMIGRATESLOTS ... TRANSPORT tcp, required */
#define CLI_TRANSPORT_LEGACY 3  /* upstream's per-key MIGRATE, always */

#define CLI_TRANSPORT_SLOTS 16384

int cliTransportParse(const char *s);
const char *cliTransportName(int transport);

/* Which of a donor's slots a rebalance or reshard moves, keeping its parts
 * of slot groups whole (slot-affinity-group-slots; see clitransport.c).
 * Groups smaller than CLI_PICK_MIN_GROUP take the first slots (upstream). */
#define CLI_PICK_MIN_GROUP 16
int cliPickSlots(const unsigned char *owned, int group, int count, int *out);

/* Slot lists as RDMAMIGRATESLOTS arguments ("0-5460", "5470"). */
int cliSlotRanges(const int *slots, int count, char ***ranges);
char *cliSlotRangesJoin(char **ranges, int n, size_t maxlen);
void cliFreeStrings(char **v, int n);

/* One RDMAMIGRATESLOTS call: what the donor is told. */
typedef struct cliMigArgs {
    const char *host;       /* recipient */
    int port;
    const int *slots;       /* any order, duplicates allowed */
    int nslots;
    int transport;          /* CLI_TRANSPORT_AUTO|RDMA|TCP */
    const char *user;       /* AUTH2 user pw when set (with pass) */
    const char *pass;       /* AUTH pw when set */
    long long timeout_ms;   /* TIMEOUT, omitted when <= 0 */
} cliMigArgs;

int cliMigBuildArgv(const cliMigArgs *a, char ***argv, size_t **argvlen);
void cliMigFreeArgv(int argc, char **argv, size_t *argvlen);
long long cliMigTimeout(long long base_ms, long long donor_bytes,
                        long long donor_bandwidth);

/* Statistics of a migration: the final reply of RDMAMIGRATESLOTS, or
 * RDMAMIGRATESLOTS STATUS. Numbers absent from the reply stay -1. */
typedef struct cliMigStats {
    char transport[16];
    char phase[32];
    char status[16];
    long long slots, keys, bytes, bytes_total;
    long long keys_zero_copy, keys_serialized;
    long long prepare_ms, transfer_ms, patch_ms, handover_ms, delete_ms;
    long long write_pause_ms, write_pause_mean_ms, writes_replayed, elapsed_ms;
    long long commands_held, commands_held_max_ms;
    long long throttled_ms;     /* waits for migration-max-bandwidth */
} cliMigStats;

void cliMigStatsInit(cliMigStats *s);
int cliMigStatsSet(cliMigStats *s, const char *name, size_t namelen,
                   const char *val, size_t vallen);
char *cliMigFormatProgress(const cliMigStats *s, double elapsed_s);
char *cliMigFormatSummary(const cliMigStats *s, const char *from,
                          const char *to, double elapsed_s);

#ifdef REDIS_TEST
int cliTransportTest(int argc, char **argv, int flags);
#endif

#endif
