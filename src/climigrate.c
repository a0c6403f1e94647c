/* climigrate.c -- redis-cli talks RDMAMIGRATESLOTS to the donors of a
 * rebalance or reshard.
 *
 * The cluster manager of redis-cli.c keeps its plan (which slots go from
 * which donor to which recipient) and asks here, per pair, whether both
 * nodes can move slots as blocks (cliMigSupports: COMMAND INFO
 * RDMAMIGRATESLOTS is non-nil) and, if so, moves all of the pair's slots
 * with one call (cliMigMoveSlots):
 *
 *   1. RDMAMIGRATESLOTS <host> <port> <ranges> TRANSPORT t [AUTH ...]
 *      TIMEOUT ms is written to the donor's cluster-manager connection;
 *      the donor answers only when the migration has ended.
 *   2. Meanwhile, every 500 ms, RDMAMIGRATESLOTS STATUS on a second
 *      connection to the donor gives the phase, slots and bytes, shown as
 *      one progress line (rewritten in place on a terminal, else a line
 *      per phase and at most one every 3 s).
 *   3. The final reply (a map in RESP3, a flat name/value array in RESP2)
 *      becomes the summary line; an error reply is printed and the move
 *      fails, as a failing MIGRATE does in upstream's path.
 *   4. The other masters are told the new owner at once (CLUSTER SETSLOTS
 *      NODE, one call each), as upstream's clusterManagerMoveSlot does
 *      with SETSLOT so clients are not redirected by stale nodes; this is
 *      best effort, gossip converges anyway.
 *   5. With cliMigOptions.overlap (the cluster manager's rebalance and
 *      reshard), STATUS is asked every CLI_MIG_FAST_POLL_MS instead, and
 *      once it says "delete" (the recipient owns the slots, the donor is
 *      only deleting its copies) the move returns: the next pair starts
 *      while this donor deletes, its reply is read later
 *      (cliMigWaitPending: before the next move that involves that donor,
 *      before telling the other masters, before a MIGRATE move, and when
 *      the command ends), and then its summary is printed. One move at
 *      most waits like that.
 *
 * The wait is single threaded: the command is written with hiredis's
 * buffer API and the donor's socket is poll()ed between STATUS calls.
 * Reply shapes are walked here; every field goes to cliMigStatsSet()
 * (clitransport.c), which ignores what it does not know.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

/* strdup, clock_gettime: -std=c99 hides them (Redis's fmacros.h does the
 * same; this file also builds outside the tree for its unit tests). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "climigrate.h"
#include "migprotocol.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <hiredis.h>

#define CLI_MIG_POLL_MS 500             /* STATUS every 500 ms */
#define CLI_MIG_FAST_POLL_MS 10         /* with overlap: to see "delete" */
#define CLI_MIG_PLAIN_EVERY_MS 3000     /* non-TTY: a line at most every 3 s */
#define CLI_MIG_STATUS_TIMEOUT_MS 2000  /* a STATUS call longer: stop polling */

static long long cliMigNowMs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------------
 * Detection
 * ------------------------------------------------------------------ */

/* What each node said, by ip:port, so every node is asked once per run. */
typedef struct cliMigSupportCache {
    char *ip;
    int port;
    int supports;
    int other_version;              /* It has the command, not our protocol. */
    struct cliMigSupportCache *next;
} cliMigSupportCache;

static cliMigSupportCache *cliMigCache;

/* A field of an INFO reply, "\nname:" (every field follows a line of its
 * section): 1 with its value in *v, 0 if the reply has no such field, -1
 * if r is no INFO text (NULL, an error). */
static int cliMigInfoField(const redisReply *r, const char *field, long long *v) {
    const char *f;

    if (r == NULL || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_VERB))
        return -1;
    if ((f = strstr(r->str, field)) == NULL) return 0;
    *v = strtoll(f + strlen(field), NULL, 10);
    return 1;
}

/* The node's migration_protocol_version (INFO migration): 1 for a node
 * that has RDMAMIGRATESLOTS but no such field (0.1.0), 0 if it cannot be
 * asked. */
static int cliMigProtocolVersion(const cliMigNode *n) {
    redisReply *r = redisCommand(n->ctx, "INFO migration");
    long long version = 0;
    int found = cliMigInfoField(r, "\nmigration_protocol_version:", &version);

    if (r) freeReplyObject(r);
    return found == 1 ? (int)version : found == 0 ? 1 : 0;
}

/* See climigrate.h. INFO, not CONFIG GET: operators often rename CONFIG,
 * and a node that cannot tell simply gives its first slots (upstream). */
int cliMigGroupSlots(const cliMigNode *n) {
    redisReply *r;
    long long group = 1;

    if (n->ctx == NULL || n->ctx->err) return 1;
    r = redisCommand(n->ctx, "INFO slotalloc");
    if (cliMigInfoField(r, "\nslotalloc_group_slots:", &group) != 1 || group < 1) group = 1;
    if (r) freeReplyObject(r);
    return (int)group;
}

/* Returns 1 if the node has RDMAMIGRATESLOTS (COMMAND INFO gives a
 * non-nil entry for it) and speaks this redis-cli's protocol version, 0
 * if not, or if it could not be asked (no connection, COMMAND refused):
 * then the reason is printed once. */
static cliMigSupportCache *cliMigCached(const cliMigNode *n) {
    for (cliMigSupportCache *e = cliMigCache; e; e = e->next)
        if (e->port == n->port && !strcmp(e->ip, n->ip)) return e;
    return NULL;
}

int cliMigSupports(const cliMigNode *n) {
    cliMigSupportCache *c = cliMigCached(n);
    if (c) return c->supports;

    int supports = 0, other_version = 0;
    if (n->ctx == NULL || n->ctx->err) {
        fprintf(stderr, "*** %s:%d: no connection to ask for "
                "RDMAMIGRATESLOTS\n", n->ip, n->port);
    } else {
        redisReply *r = redisCommand(n->ctx, "COMMAND INFO RDMAMIGRATESLOTS");
        if (r == NULL) {
            fprintf(stderr, "*** %s:%d: COMMAND INFO failed: %s\n", n->ip,
                    n->port, n->ctx->errstr);
        } else if (r->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "*** %s:%d: COMMAND INFO failed: %s\n", n->ip,
                    n->port, r->str);
        } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
                   r->element[0]->type != REDIS_REPLY_NIL) {
            supports = 1;
        }
        if (r) freeReplyObject(r);
        /* Both nodes of a pair must speak the protocol of this redis-cli:
         * a node of another build moves its slots with MIGRATE. */
        int version = supports ? cliMigProtocolVersion(n) : 0;
        if (supports && version != MIG_PROTOCOL_VERSION) {
            printf(">>> %s:%d speaks slot migration protocol version %d, this "
                   "redis-cli %d: its slots cannot move as blocks with it\n",
                   n->ip, n->port, version, MIG_PROTOCOL_VERSION);
            supports = 0;
            other_version = 1;
        }
    }
    cliMigSupportCache *e = malloc(sizeof(*e));
    if (e != NULL && (e->ip = strdup(n->ip)) != NULL) {
        e->port = n->port;
        e->supports = supports;
        e->other_version = other_version;
        e->next = cliMigCache;
        cliMigCache = e;
    } else {
        free(e);
    }
    return supports;
}

/* Checks --cluster-transport against the nodes that will give or take
 * slots, before anything moves. legacy: nothing to check. auto: prints,
 * once per node without RDMAMIGRATESLOTS, that its slots move with
 * MIGRATE. rdma/tcp: every node must have it; else prints which do not
 * and returns 0. Returns 1 when the move can go ahead. */
int cliMigCheckNodes(const cliMigNode *nodes, int count, int transport) {
    int ok = 1;
    if (transport == CLI_TRANSPORT_LEGACY) return 1;
    for (int i = 0; i < count; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            if (nodes[j].port == nodes[i].port &&
                !strcmp(nodes[j].ip, nodes[i].ip)) dup = 1;
        if (dup || cliMigSupports(&nodes[i])) continue;
        cliMigSupportCache *c = cliMigCached(&nodes[i]);
        if (c && c->other_version) {
            /* (Its protocol version was printed.) */
            if (transport == CLI_TRANSPORT_AUTO) {
                printf(">>> %s:%d: moving its slots with MIGRATE (legacy)\n",
                       nodes[i].ip, nodes[i].port);
            } else {
                fprintf(stderr, "*** %s:%d cannot move slots as blocks with this "
                        "redis-cli, required by --cluster-transport %s (use auto or "
                        "legacy to move slots with MIGRATE)\n", nodes[i].ip,
                        nodes[i].port, cliTransportName(transport));
                ok = 0;
            }
            continue;
        }
        if (transport == CLI_TRANSPORT_AUTO) {
            printf(">>> %s:%d does not support RDMAMIGRATESLOTS: moving its "
                   "slots with MIGRATE (legacy)\n", nodes[i].ip,
                   nodes[i].port);
        } else {
            fprintf(stderr, "*** %s:%d does not support RDMAMIGRATESLOTS, "
                    "required by --cluster-transport %s (use auto or legacy "
                    "to move slots with MIGRATE)\n", nodes[i].ip,
                    nodes[i].port, cliTransportName(transport));
            ok = 0;
        }
    }
    if (!ok) fprintf(stderr, "*** No slot was moved.\n");
    fflush(stdout);
    return ok;
}

/* ---------------------------------------------------------------------
 * Replies
 * ------------------------------------------------------------------ */

/* The text of a scalar reply (in buf for numbers); NULL for anything
 * else. */
static const char *cliMigReplyText(const redisReply *r, char *buf,
                                   size_t buflen, size_t *len) {
    switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_VERB:
    case REDIS_REPLY_DOUBLE:
    case REDIS_REPLY_BIGNUM:
        if (r->str == NULL) return NULL;
        *len = r->len;
        return r->str;
    case REDIS_REPLY_INTEGER:
    case REDIS_REPLY_BOOL:
        *len = (size_t)snprintf(buf, buflen, "%lld", r->integer);
        return buf;
    default:
        return NULL;
    }
}

/* Fills s from a reply of RDMAMIGRATESLOTS or its STATUS: a map (RESP3)
 * or an array of name, value, name, value... (RESP2; hiredis lays maps out
 * the same way). Anything else leaves s as it is. */
static void cliMigParseStats(const redisReply *r, cliMigStats *s) {
    if (r->type != REDIS_REPLY_MAP && r->type != REDIS_REPLY_ARRAY) return;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        char kb[32], vb[32];
        size_t kl, vl;
        const char *kt = cliMigReplyText(k, kb, sizeof(kb), &kl);
        const char *vt = cliMigReplyText(v, vb, sizeof(vb), &vl);
        if (kt && vt) cliMigStatsSet(s, kt, kl, vt, vl);
    }
}

/* ---------------------------------------------------------------------
 * Progress
 * ------------------------------------------------------------------ */

typedef struct cliMigProgress {
    int tty;
    int shown;              /* something is on the current TTY line */
    size_t width;           /* of the last TTY line, to blank it out */
    long long last_print;   /* non-TTY */
    char last_phase[32];
    long long last_bytes, last_slots;
} cliMigProgress;

static void cliMigShowProgress(cliMigProgress *p, const cliMigStats *s,
                               double elapsed_s) {
    if (s->phase[0] == '\0' || !strcasecmp(s->phase, "idle")) return;
    char *line = cliMigFormatProgress(s, elapsed_s);
    if (line == NULL) return;
    if (p->tty) {
        size_t w = strlen(line);
        printf("\r    %s", line);
        for (size_t i = w; i < p->width; i++) putchar(' ');
        p->width = w;
        p->shown = 1;
    } else {
        long long now = cliMigNowMs();
        int new_phase = strcmp(p->last_phase, s->phase) != 0;
        int moved = s->bytes != p->last_bytes || s->slots != p->last_slots;
        if (new_phase || (moved && now - p->last_print >=
                                   CLI_MIG_PLAIN_EVERY_MS)) {
            printf("    %s\n", line);
            p->last_print = now;
            snprintf(p->last_phase, sizeof(p->last_phase), "%s", s->phase);
            p->last_bytes = s->bytes;
            p->last_slots = s->slots;
        }
    }
    fflush(stdout);
    free(line);
}

/* Ends the TTY progress line so the next message starts on its own. */
static void cliMigEndProgress(cliMigProgress *p) {
    if (p->tty && p->shown) printf("\n");
    p->shown = 0;
}

/* Asks the donor how the migration is going, and shows it if show is
 * set; *deleting is set when the donor says it is in its delete phase.
 * Returns 0 when polling should stop (the STATUS connection failed or
 * STATUS is refused). */
static int cliMigPollStatus(redisContext *status, cliMigProgress *p,
                            double elapsed_s, int show, int *deleting) {
    redisReply *r = redisCommand(status, "RDMAMIGRATESLOTS STATUS");
    if (r == NULL) return 0;
    int ok = r->type != REDIS_REPLY_ERROR;
    if (ok) {
        cliMigStats s;
        cliMigStatsInit(&s);
        cliMigParseStats(r, &s);
        if (show) cliMigShowProgress(p, &s, elapsed_s);
        if (!strcasecmp(s.phase, "delete")) *deleting = 1;
    }
    freeReplyObject(r);
    return ok;
}

/* ---------------------------------------------------------------------
 * The move
 * ------------------------------------------------------------------ */

/* What sizes the TIMEOUT (cliMigTimeout): the donor's used_memory (INFO
 * memory) and migration_max_bandwidth (INFO migration), both from one
 * INFO round trip; -1 for what is unknown. */
static void cliMigDonorFigures(redisContext *c, long long *used_memory,
                               long long *max_bandwidth) {
    const char *argv[3] = {"INFO", "memory", "migration"};
    const char *fields[2] = {"\nused_memory:", "\nmigration_max_bandwidth:"};
    long long *values[2] = {used_memory, max_bandwidth};
    redisReply *r = redisCommandArgv(c, 3, argv, NULL);

    for (int i = 0; i < 2; i++)
        if (cliMigInfoField(r, fields[i], values[i]) != 1) *values[i] = -1;
    if (r) freeReplyObject(r);
}

/* Sends argv to the donor and waits for its reply, polling STATUS on
 * 'status' (may be NULL: no progress) every CLI_MIG_POLL_MS meanwhile.
 * Returns the reply (the caller frees it), or NULL with *err set (a
 * malloc'ed message) when the connection failed. With early set, polls
 * every CLI_MIG_FAST_POLL_MS (progress still shown at the slow pace) and
 * returns NULL with *handed_over set, the reply still to come on donor,
 * as soon as STATUS says the donor is deleting. */
static redisReply *cliMigCall(redisContext *donor, redisContext *status,
                              int argc, char **argv, size_t *argvlen,
                              cliMigProgress *p, long long start, int early,
                              int *handed_over, char **err) {
    redisReply *reply = NULL;
    int done = 0;
    int every = early ? CLI_MIG_FAST_POLL_MS : CLI_MIG_POLL_MS;
    long long next_show = start + CLI_MIG_POLL_MS;

    if (redisAppendCommandArgv(donor, argc, (const char **)argv,
                               argvlen) != REDIS_OK)
        goto ioerr;
    do {
        if (redisBufferWrite(donor, &done) == REDIS_ERR) goto ioerr;
    } while (!done);

    long long next_poll = start + every;
    while (1) {
        if (redisGetReplyFromReader(donor, (void **)&reply) == REDIS_ERR)
            goto ioerr;
        if (reply != NULL) return reply;
        long long now = cliMigNowMs();
        int wait = status ? (int)(next_poll > now ? next_poll - now : 0) : -1;
        struct pollfd pfd = {.fd = donor->fd, .events = POLLIN};
        int rc = poll(&pfd, 1, wait);
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) {
            *err = strdup(strerror(errno));
            return NULL;
        }
        if (rc > 0) {
            if (redisBufferRead(donor) == REDIS_ERR) goto ioerr;
            continue;
        }
        int show = cliMigNowMs() >= next_show, deleting = 0;
        if (!cliMigPollStatus(status, p, (cliMigNowMs() - start) / 1000.0,
                              show, &deleting))
            status = NULL;  /* no progress, keep waiting for the reply */
        if (show) next_show = cliMigNowMs() + CLI_MIG_POLL_MS;
        if (early && deleting) {
            *handed_over = 1;
            return NULL;
        }
        next_poll = cliMigNowMs() + every;
    }

ioerr:
    *err = strdup(donor->errstr[0] ? donor->errstr : "I/O error");
    return NULL;
}

/* Tells the masters other than donor and recipient that the recipient owns
 * the slots now (CLUSTER SETSLOTS NODE <id> <ranges>). Best effort: a node
 * that refuses learns it from the cluster bus. */
static void cliMigInformOthers(const cliMigNode *dst, char **ranges,
                               int nranges, const cliMigOptions *o) {
    if (o->nothers == 0 || dst->name == NULL) return;
    int argc = 4 + nranges;
    const char **argv = malloc(sizeof(char *) * argc);
    if (argv == NULL) return;
    argv[0] = "CLUSTER";
    argv[1] = "SETSLOTS";
    argv[2] = "NODE";
    argv[3] = dst->name;
    for (int i = 0; i < nranges; i++) argv[4 + i] = ranges[i];
    for (int i = 0; i < o->nothers; i++) {
        const cliMigNode *n = &o->others[i];
        if (n->ctx == NULL) continue;
        redisReply *r = redisCommandArgv(n->ctx, argc, argv, NULL);
        if (r == NULL || r->type == REDIS_REPLY_ERROR)
            printf("    (%s:%d did not take the new owner now: %s; the "
                   "cluster bus will tell it)\n", n->ip, n->port,
                   r ? r->str : n->ctx->errstr);
        if (r) freeReplyObject(r);
    }
    free(argv);
}

/* The move whose donor is still deleting (cliMigMoveSlots with overlap):
 * its reply is still to be read on ctx. ctx == NULL: none. */
static struct {
    redisContext *ctx;              /* the donor's cluster-manager connection */
    char from[320], to[320];
    long long start;
    double handed_s;                /* when it returned, after its start */
} cliMigPend;

/* Prints the outcome of a move from its reply r (NULL: the connection
 * failed, err says why); returns 1 if it succeeded. handed_s >= 0: the
 * move returned early, handed_s after its start; its length is then that
 * plus the donor's delete_ms (the reply was read later than it came). */
static int cliMigReport(redisReply *r, const char *err, const char *from,
                        const char *to, double elapsed, double handed_s) {
    int ok = 0;

    if (r == NULL) {
        fprintf(stderr, "*** RDMAMIGRATESLOTS from %s to %s failed after "
                "%.1f s: %s (connection to the donor lost: check the state of "
                "the slots with --cluster check)\n", from, to, elapsed,
                err ? err : "?");
    } else if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "*** RDMAMIGRATESLOTS from %s to %s failed after "
                "%.1f s: %s\n", from, to, elapsed, r->str);
    } else {
        cliMigStats s;
        cliMigStatsInit(&s);
        cliMigParseStats(r, &s);
        if (handed_s >= 0 && s.delete_ms >= 0)
            elapsed = handed_s + s.delete_ms / 1000.0;
        char *sum = cliMigFormatSummary(&s, from, to, elapsed);
        if (sum) printf("%s\n", sum);
        free(sum);
        ok = 1;
    }
    fflush(stdout);
    return ok;
}

int cliMigWaitPending(void) {
    redisContext *c = cliMigPend.ctx;
    redisReply *r = NULL;

    if (c == NULL) return 1;
    cliMigPend.ctx = NULL;
    if (redisGetReply(c, (void **)&r) != REDIS_OK) r = NULL;
    int ok = cliMigReport(r, c->errstr[0] ? c->errstr : "I/O error",
                          cliMigPend.from, cliMigPend.to,
                          (cliMigNowMs() - cliMigPend.start) / 1000.0,
                          cliMigPend.handed_s);
    if (r) freeReplyObject(r);
    return ok;
}

/* Moves 'slots' (any order) from src to dst with one RDMAMIGRATESLOTS sent
 * to src, with progress and a summary line, then tells the other masters.
 * Both nodes must support it (cliMigSupports). On failure prints the
 * donor's error (which says the phase and the cause; the nodes are back to
 * STABLE) and returns 0; returns 1 on success. With o->overlap, returns 1
 * as soon as the slots are handed over (see the top of this file); a
 * failure of the move that was waiting then makes this one fail. */
int cliMigMoveSlots(const cliMigNode *src, const cliMigNode *dst,
                    const int *slots, int nslots, const cliMigOptions *o) {
    char from[320], to[320];
    snprintf(from, sizeof(from), "%s:%d", src->ip, src->port);
    snprintf(to, sizeof(to), "%s:%d", dst->ip, dst->port);

    /* A donor still deleting can't give or take slots yet. */
    if (cliMigPend.ctx && (cliMigPend.ctx == src->ctx ||
                           cliMigPend.ctx == dst->ctx) &&
        !cliMigWaitPending())
        return 0;

    long long used_memory, max_bandwidth;
    cliMigDonorFigures(src->ctx, &used_memory, &max_bandwidth);
    cliMigArgs a = {
        .host = dst->ip, .port = dst->port, .slots = slots, .nslots = nslots,
        .transport = o->transport, .user = o->user, .pass = o->pass,
        .timeout_ms = cliMigTimeout(o->timeout_ms, used_memory, max_bandwidth),
    };
    char **argv, **ranges;
    size_t *argvlen;
    int argc = cliMigBuildArgv(&a, &argv, &argvlen);
    int nranges = cliSlotRanges(slots, nslots, &ranges);
    if (argc < 0 || nranges < 0) {
        fprintf(stderr, "*** Cannot build RDMAMIGRATESLOTS for %d slots from "
                "%s to %s\n", nslots, from, to);
        if (argc >= 0) cliMigFreeArgv(argc, argv, argvlen);
        if (nranges >= 0) cliFreeStrings(ranges, nranges);
        return 0;
    }
    char *shown = cliSlotRangesJoin(ranges, nranges, 120);
    printf(">>> Moving %d slots from %s to %s with RDMAMIGRATESLOTS "
           "(transport %s, timeout %lld ms): %s\n", nslots, from, to,
           cliTransportName(o->transport), a.timeout_ms,
           shown ? shown : "");
    free(shown);
    fflush(stdout);

    redisContext *status = o->connect ? o->connect(src->ip, src->port) : NULL;
    if (status) {
        struct timeval tv = {CLI_MIG_STATUS_TIMEOUT_MS / 1000,
                             (CLI_MIG_STATUS_TIMEOUT_MS % 1000) * 1000};
        redisSetTimeout(status, tv);
    } else {
        printf("    (no second connection to %s: no progress shown)\n", from);
    }

    cliMigProgress p = {.tty = isatty(fileno(stdout)), .last_bytes = -1,
                        .last_slots = -1};
    char *err = NULL;
    int handed_over = 0;
    long long start = cliMigNowMs();
    redisReply *r = cliMigCall(src->ctx, status, argc, argv, argvlen, &p,
                               start, o->overlap && status, &handed_over, &err);
    double elapsed = (cliMigNowMs() - start) / 1000.0;
    cliMigEndProgress(&p);
    if (status) redisFree(status);
    cliMigFreeArgv(argc, argv, argvlen);

    /* The move waiting before this one ends first: the other masters,
     * told next, include its donor. */
    int ok;
    if (handed_over) {
        printf("    slots handed over to %s after %.1f s; %s deletes its "
               "copies while the next move starts (its summary follows)\n",
               to, elapsed, from);
        fflush(stdout);
        ok = cliMigWaitPending();
        cliMigInformOthers(dst, ranges, nranges, o);
        cliMigPend.ctx = src->ctx;
        snprintf(cliMigPend.from, sizeof(cliMigPend.from), "%s", from);
        snprintf(cliMigPend.to, sizeof(cliMigPend.to), "%s", to);
        cliMigPend.start = start;
        cliMigPend.handed_s = elapsed;
    } else {
        ok = cliMigReport(r, err, from, to, elapsed, -1);
        int prev_ok = cliMigWaitPending();
        if (ok) cliMigInformOthers(dst, ranges, nranges, o);
        ok = ok && prev_ok;
    }
    if (r) freeReplyObject(r);
    free(err);
    cliFreeStrings(ranges, nranges);
    return ok;
}
