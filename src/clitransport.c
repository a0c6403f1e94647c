/* clitransport.c -- redis-cli's side of block slot migration, the pure
 * part: the --cluster-transport option, the arguments of RDMAMIGRATESLOTS,
 * and the parsing and printing of its statistics.
 *
 * How it fits
 * -----------
 * Upstream's `redis-cli --cluster rebalance|reshard` computes a plan (which
 * slots go from which donor to which recipient) and then moves one slot at
 * a time: SETSLOT IMPORTING/MIGRATING, GETKEYSINSLOT + MIGRATE until the
 * slot is empty, SETSLOT NODE everywhere. With this fork a donor can move a
 * whole set of slots as memory blocks with one command,
 *
 *   RDMAMIGRATESLOTS <host> <port> <slot|start-end>...
 *                    [TRANSPORT rdma|tcp|auto] [AUTH pw | AUTH2 user pw]
 *                    [TIMEOUT ms]
 *
 * which replies when the migration has ended. redis-cli keeps upstream's
 * plan and, when both nodes of a donor->recipient pair have the command,
 * sends ONE such command per pair carrying all of that pair's slots as
 * ranges. The option chooses (--cluster-transport, default auto):
 *
 *   auto    RDMAMIGRATESLOTS ... TRANSPORT auto where both nodes have it,
 *           upstream's MIGRATE path (with one line saying so) elsewhere
 *   rdma    RDMAMIGRATESLOTS ... TRANSPORT rdma; a node without the
 *   tcp     command (or TRANSPORT tcp) is an error before anything moves
 *   legacy  upstream's MIGRATE path, unchanged
 *
 * This file is libc only, so its unit tests (REDIS_TEST, run by
 * tests/c/clitransport-test-main.c) need neither hiredis nor a server.
 * climigrate.c does the talking (detection, the call, progress polling of
 * RDMAMIGRATESLOTS STATUS on a second connection) and feeds every field of
 * the replies, whatever their RESP shape, to cliMigStatsSet() here.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

/* strdup, clock_gettime: -std=c99 hides them (Redis's fmacros.h does the
 * same; this file also builds outside the tree for its unit tests). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "clitransport.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------------
 * The option
 * ------------------------------------------------------------------ */

static const char *cliTransportNames[] = {"auto", "rdma", "tcp", "legacy"};

/* Returns the CLI_TRANSPORT_* of a --cluster-transport value (any case),
 * or -1 if it is none of rdma, tcp, legacy, auto. */
int cliTransportParse(const char *s) {
    if (s == NULL) return -1;
    for (int i = 0; i < 4; i++)
        if (!strcasecmp(s, cliTransportNames[i])) return i;
    return -1;
}

const char *cliTransportName(int transport) {
    if (transport < 0 || transport > 3) return "?";
    return cliTransportNames[transport];
}

void cliFreeStrings(char **v, int n) {
    if (v == NULL) return;
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* ---------------------------------------------------------------------
 * Slot ranges
 * ------------------------------------------------------------------ */

/* Compresses a list of slots (any order, duplicates allowed) into sorted
 * RDMAMIGRATESLOTS arguments: "5" for a lone slot, "0-5460" for a run.
 * On success *ranges is a malloc'ed array of malloc'ed strings (free with
 * cliFreeStrings) and the count is returned; 0 slots give 0 ranges and
 * *ranges NULL. Returns -1 (and sets nothing) if a slot is outside
 * 0..16383. */
int cliSlotRanges(const int *slots, int count, char ***ranges) {
    unsigned char seen[CLI_TRANSPORT_SLOTS];
    int n = 0;

    *ranges = NULL;
    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < count; i++) {
        if (slots[i] < 0 || slots[i] >= CLI_TRANSPORT_SLOTS) return -1;
        seen[slots[i]] = 1;
    }
    /* Count the runs first, to allocate once. */
    for (int s = 0; s < CLI_TRANSPORT_SLOTS; s++)
        if (seen[s] && (s == 0 || !seen[s - 1])) n++;
    if (n == 0) return 0;
    char **v = calloc(n, sizeof(char *));
    if (v == NULL) return -1;
    int j = 0;
    for (int s = 0; s < CLI_TRANSPORT_SLOTS; s++) {
        if (!seen[s]) continue;
        int e = s;
        while (e + 1 < CLI_TRANSPORT_SLOTS && seen[e + 1]) e++;
        char buf[16];
        if (e == s) snprintf(buf, sizeof(buf), "%d", s);
        else snprintf(buf, sizeof(buf), "%d-%d", s, e);
        v[j] = strdup(buf);
        if (v[j] == NULL) {
            cliFreeStrings(v, j);
            return -1;
        }
        j++;
        s = e;
    }
    *ranges = v;
    return n;
}

/* Joins ranges with spaces, for messages. If the result would be longer
 * than maxlen (0 = no limit), it stops at a range boundary and ends with
 * " ..." (plus how many ranges were left out). Returns a malloc'ed
 * string. */
char *cliSlotRangesJoin(char **ranges, int n, size_t maxlen) {
    size_t cap = 32, len = 0;
    for (int i = 0; i < n; i++) cap += strlen(ranges[i]) + 1;
    char *out = malloc(cap);
    if (out == NULL) return NULL;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t l = strlen(ranges[i]);
        if (maxlen && len + l + 1 > maxlen && i > 0) {
            snprintf(out + len, cap - len, " ... (%d more)", n - i);
            return out;
        }
        if (i) out[len++] = ' ';
        memcpy(out + len, ranges[i], l + 1);
        len += l;
    }
    return out;
}

/* ---------------------------------------------------------------------
 * RDMAMIGRATESLOTS arguments
 * ------------------------------------------------------------------ */

/* Builds the argument vector of one RDMAMIGRATESLOTS call (for
 * redisAppendCommandArgv):
 *
 *   RDMAMIGRATESLOTS host port range... TRANSPORT t [AUTH pw | AUTH2 user pw]
 *                    [TIMEOUT ms]
 *
 * AUTH is added like upstream's MIGRATE does it: AUTH2 when both a user and
 * a password are set, AUTH when only a password is. Returns argc, with
 * *argv and *argvlen malloc'ed (free with cliMigFreeArgv), or -1 if a slot is
 * out of range, there are none, or the transport is legacy (which has no
 * RDMAMIGRATESLOTS form). */
int cliMigBuildArgv(const cliMigArgs *a, char ***argv, size_t **argvlen) {
    char **ranges;
    int nranges;

    *argv = NULL;
    *argvlen = NULL;
    if (a->transport == CLI_TRANSPORT_LEGACY || a->host == NULL ||
        a->port <= 0 || a->port > 65535) return -1;
    nranges = cliSlotRanges(a->slots, a->nslots, &ranges);
    if (nranges <= 0) return -1;

    int max = 3 + nranges + 2 + 3 + 2;
    char **v = calloc(max, sizeof(char *));
    size_t *vl = calloc(max, sizeof(size_t));
    if (v == NULL || vl == NULL) {
        free(v);
        free(vl);
        cliFreeStrings(ranges, nranges);
        return -1;
    }
    int c = 0;
    char num[32];
    v[c++] = strdup("RDMAMIGRATESLOTS");
    v[c++] = strdup(a->host);
    snprintf(num, sizeof(num), "%d", a->port);
    v[c++] = strdup(num);
    for (int i = 0; i < nranges; i++) v[c++] = ranges[i];
    free(ranges);   /* the strings now belong to v */
    v[c++] = strdup("TRANSPORT");
    v[c++] = strdup(cliTransportName(a->transport));
    if (a->pass != NULL) {
        if (a->user != NULL) {
            v[c++] = strdup("AUTH2");
            v[c++] = strdup(a->user);
        } else {
            v[c++] = strdup("AUTH");
        }
        v[c++] = strdup(a->pass);
    }
    if (a->timeout_ms > 0) {
        v[c++] = strdup("TIMEOUT");
        snprintf(num, sizeof(num), "%lld", a->timeout_ms);
        v[c++] = strdup(num);
    }
    for (int i = 0; i < c; i++) {
        if (v[i] == NULL) {
            cliMigFreeArgv(c, v, vl);
            return -1;
        }
        vl[i] = strlen(v[i]);
    }
    *argv = v;
    *argvlen = vl;
    return c;
}

void cliMigFreeArgv(int argc, char **argv, size_t *argvlen) {
    cliFreeStrings(argv, argc);
    free(argvlen);
}

/* The TIMEOUT given to RDMAMIGRATESLOTS: a bound on the whole migration,
 * not on one network operation like MIGRATE's. It must not cut a big but
 * healthy migration short, so it is the --cluster-timeout value (base_ms,
 * 60 s by default) plus the time the donor's whole dataset (donor_bytes,
 * its used_memory; unknown if < 0) takes at a floor rate of 10 MB/s, or at
 * the donor's migration-max-bandwidth (donor_bandwidth, bytes/s; 0 or
 * unknown: none) when that is lower, capped at 24 hours. */
long long cliMigTimeout(long long base_ms, long long donor_bytes,
                        long long donor_bandwidth) {
    const long long cap = 24LL * 3600 * 1000;
    long long t = base_ms > 0 ? base_ms : 60000;
    long long rate = 10000;                         /* 10 MB/s = 10^4 B/ms */
    if (donor_bandwidth > 0 && donor_bandwidth / 1000 < rate)
        rate = donor_bandwidth / 1000 > 0 ? donor_bandwidth / 1000 : 1;
    if (donor_bytes > 0) {
        long long more = donor_bytes / rate;
        t = more > cap - t ? cap : t + more;
    }
    return t > cap ? cap : t;
}

/* ---------------------------------------------------------------------
 * Statistics
 * ------------------------------------------------------------------ */

void cliMigStatsInit(cliMigStats *s) {
    memset(s, 0, sizeof(*s));
    s->slots = s->keys = s->bytes = s->bytes_total = -1;
    s->keys_zero_copy = s->keys_serialized = -1;
    s->prepare_ms = s->transfer_ms = s->patch_ms = s->handover_ms = -1;
    s->delete_ms = s->write_pause_ms = s->writes_replayed = s->elapsed_ms = -1;
    s->write_pause_mean_ms = s->commands_held = s->commands_held_max_ms = -1;
    s->throttled_ms = -1;
}

/* The numeric fields we know, by name. */
static long long *cliMigStatsField(cliMigStats *s, const char *name,
                                   size_t len) {
    static const struct {
        const char *name;
        size_t off;
    } fields[] = {
        {"slots", offsetof(cliMigStats, slots)},
        {"keys", offsetof(cliMigStats, keys)},
        {"bytes", offsetof(cliMigStats, bytes)},
        {"bytes_total", offsetof(cliMigStats, bytes_total)},
        {"keys_zero_copy", offsetof(cliMigStats, keys_zero_copy)},
        {"keys_serialized", offsetof(cliMigStats, keys_serialized)},
        {"prepare_ms", offsetof(cliMigStats, prepare_ms)},
        {"transfer_ms", offsetof(cliMigStats, transfer_ms)},
        {"patch_ms", offsetof(cliMigStats, patch_ms)},
        {"handover_ms", offsetof(cliMigStats, handover_ms)},
        {"delete_ms", offsetof(cliMigStats, delete_ms)},
        {"write_pause_ms", offsetof(cliMigStats, write_pause_ms)},
        {"write_pause_mean_ms", offsetof(cliMigStats, write_pause_mean_ms)},
        {"commands_held", offsetof(cliMigStats, commands_held)},
        {"commands_held_max_ms", offsetof(cliMigStats, commands_held_max_ms)},
        {"writes_replayed", offsetof(cliMigStats, writes_replayed)},
        {"elapsed_ms", offsetof(cliMigStats, elapsed_ms)},
        {"throttled_ms", offsetof(cliMigStats, throttled_ms)},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (strlen(fields[i].name) == len &&
            !strncasecmp(fields[i].name, name, len))
            return (long long *)((char *)s + fields[i].off);
    }
    return NULL;
}

static void cliMigCopyWord(char *dst, size_t dstlen, const char *val,
                           size_t vallen) {
    size_t n = vallen < dstlen - 1 ? vallen : dstlen - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)val[i];
        dst[i] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    dst[n] = '\0';
}

/* Records one field of a reply. Values come as text whatever their RESP
 * type (climigrate.c formats integers and doubles). Unknown names, and
 * numbers that do not parse or are negative, are ignored (return 0), so a
 * server with more, fewer or renamed fields never breaks the client.
 * Returns 1 if the field was recorded. */
int cliMigStatsSet(cliMigStats *s, const char *name, size_t namelen,
                   const char *val, size_t vallen) {
    if (name == NULL || val == NULL) return 0;
    if (namelen == 9 && !strncasecmp(name, "transport", 9)) {
        cliMigCopyWord(s->transport, sizeof(s->transport), val, vallen);
        return 1;
    }
    if (namelen == 5 && !strncasecmp(name, "phase", 5)) {
        cliMigCopyWord(s->phase, sizeof(s->phase), val, vallen);
        return 1;
    }
    if (namelen == 6 && !strncasecmp(name, "status", 6)) {
        cliMigCopyWord(s->status, sizeof(s->status), val, vallen);
        return 1;
    }
    long long *f = cliMigStatsField(s, name, namelen);
    if (f == NULL || vallen == 0 || vallen > 30) return 0;
    char buf[32], *end;
    memcpy(buf, val, vallen);
    buf[vallen] = '\0';
    double d = strtod(buf, &end);
    if (end == buf || *end != '\0' || !(d >= 0) || d > 9e18) return 0;
    *f = (long long)d;
    return 1;
}

#define CLI_MB (1000.0 * 1000.0)

/* Appends printf-style to a NUL-terminated buffer of cap bytes, truncating
 * what does not fit. */
static void cliAppend(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void cliAppend(char *buf, size_t cap, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len >= cap - 1) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

/* The progress line of a running migration, from a STATUS reply:
 *
 *   transfer: 1365 slots, 12.3/250.0 MB, 85.1 MB/s, 3.2 s
 *
 * The rate is the average since the start (the server's elapsed_ms when it
 * reports one, else elapsed_s measured by the client). Fields the server
 * did not report are left out. Returns a malloc'ed string. */
char *cliMigFormatProgress(const cliMigStats *s, double elapsed_s) {
    size_t cap = 160;
    char *out = malloc(cap);
    if (out == NULL) return NULL;
    out[0] = '\0';
    if (s->elapsed_ms >= 0) elapsed_s = s->elapsed_ms / 1000.0;
    cliAppend(out, cap, "%s:", s->phase[0] ? s->phase : "running");
    if (s->slots >= 0) cliAppend(out, cap, " %lld slots,", s->slots);
    if (s->bytes >= 0) {
        if (s->bytes_total > 0)
            cliAppend(out, cap, " %.1f/%.1f MB,", s->bytes / CLI_MB,
                      s->bytes_total / CLI_MB);
        else
            cliAppend(out, cap, " %.1f MB,", s->bytes / CLI_MB);
        if (elapsed_s > 0)
            cliAppend(out, cap, " %.1f MB/s,", s->bytes / CLI_MB / elapsed_s);
    }
    if (s->keys >= 0) cliAppend(out, cap, " %lld keys,", s->keys);
    cliAppend(out, cap, " %.1f s", elapsed_s > 0 ? elapsed_s : 0.0);
    return out;
}

/* The summary of a finished migration, from the final reply:
 *
 *   [OK] 1365 slots from 127.0.0.1:7000 to 127.0.0.1:7003: 10000 keys,
 *   12.3 MB in 0.52 s (23.6 MB/s) over tcp; prepare 10 ms, transfer 300 ms,
 *   patch 100 ms, handover 5 ms, delete 20 ms; writes paused 40 ms, 7
 *   replayed; keys 9000 zero-copy, 1000 serialized
 *
 * (one line). elapsed_s is the wall time of the call seen by the client.
 * Fields the server did not report are left out. Returns a malloc'ed
 * string. */
char *cliMigFormatSummary(const cliMigStats *s, const char *from,
                          const char *to, double elapsed_s) {
    size_t cap = 640 + strlen(from) + strlen(to);
    char *out = malloc(cap);
    if (out == NULL) return NULL;
    out[0] = '\0';
    cliAppend(out, cap, "[OK] ");
    if (s->slots >= 0) cliAppend(out, cap, "%lld slots ", s->slots);
    cliAppend(out, cap, "from %s to %s:", from, to);
    if (s->keys >= 0) cliAppend(out, cap, " %lld keys,", s->keys);
    if (s->bytes >= 0) cliAppend(out, cap, " %.1f MB", s->bytes / CLI_MB);
    cliAppend(out, cap, " in %.2f s", elapsed_s);
    if (s->bytes >= 0 && elapsed_s > 0)
        cliAppend(out, cap, " (%.1f MB/s)", s->bytes / CLI_MB / elapsed_s);
    if (s->transport[0]) cliAppend(out, cap, " over %s", s->transport);
    const struct {
        const char *name;
        long long v;
    } phases[] = {
        {"prepare", s->prepare_ms}, {"transfer", s->transfer_ms},
        {"patch", s->patch_ms}, {"handover", s->handover_ms},
        {"delete", s->delete_ms},
    };
    int any = 0;
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
        if (phases[i].v < 0) continue;
        cliAppend(out, cap, "%s %s %lld ms", any ? "," : ";", phases[i].name,
                  phases[i].v);
        if (!strcmp(phases[i].name, "transfer") && s->throttled_ms > 0)
            cliAppend(out, cap, " (%lld ms of it held back by "
                      "migration-max-bandwidth)", s->throttled_ms);
        any = 1;
    }
    if (s->write_pause_ms >= 0)
        cliAppend(out, cap, "; writes paused %lld ms", s->write_pause_ms);
    if (s->write_pause_ms >= 0 && s->write_pause_mean_ms >= 0)
        cliAppend(out, cap, " (%lld ms per slot on average)", s->write_pause_mean_ms);
    if (s->write_pause_ms >= 0 && s->commands_held >= 0 && s->commands_held_max_ms >= 0)
        cliAppend(out, cap, ", %lld commands held up to %lld ms", s->commands_held,
                  s->commands_held_max_ms);
    if (s->write_pause_ms >= 0 && s->writes_replayed >= 0)
        cliAppend(out, cap, ", %lld replayed", s->writes_replayed);
    if (s->keys_zero_copy >= 0 || s->keys_serialized >= 0) {
        cliAppend(out, cap, "; keys");
        if (s->keys_zero_copy >= 0)
            cliAppend(out, cap, " %lld zero-copy", s->keys_zero_copy);
        if (s->keys_serialized >= 0)
            cliAppend(out, cap, "%s %lld serialized",
                      s->keys_zero_copy >= 0 ? "," : "", s->keys_serialized);
    }
    return out;
}

/* ---------------------------------------------------------------------
 * Which slots move
 * ------------------------------------------------------------------ */

/* dst |= src << k, over bitsets of 'words' 64-bit words (bits pushed past
 * the last word are dropped). */
static void cliBitsOrShifted(uint64_t *dst, const uint64_t *src, size_t words, int k) {
    size_t ws = (size_t)k / 64;
    int bs = k % 64;

    for (size_t w = words; w-- > ws;) {
        uint64_t v = src[w - ws] << bs;
        if (bs && w > ws) v |= src[w - ws - 1] >> (64 - bs);
        dst[w] |= v;
    }
}

#define CLI_BIT(set, b) (((set)[(b) / 64] >> ((b) % 64)) & 1)

/* Upstream's rebalance and reshard move the first 'count' slots a donor
 * owns. A donor of this fork with slot-affinity keeps the keys of a group
 * of 'group' aligned slots in one arena, and ships that arena whole when
 * every slot of the group it serves moves; a move that splits its part of
 * a group first relocates the moving slots' keys into an arena of their
 * own (docs/DESIGN.md, "Slot groups"). So the choice here is made of
 * whole parts (the donor's slots of one group), as many as sum to count,
 * and splits one part only for what no sum of parts reaches. A subset sum
 * over the parts (at most 1,024: group >= CLI_PICK_MIN_GROUP), taking the
 * first parts that still allow the best sum, so that the slots stay as
 * near upstream's first ones as the sums allow. The cluster's own layout
 * (3 masters: 0-5460, 5461-10922, 10923-16383, groups of 256) gives the
 * donors parts of 85 and 171 slots besides their whole groups: a quarter
 * of each (1,365 or 1,366 slots) is then whole parts, nothing relocated.
 * owned[s] is non-zero for the donor's slots. Writes the chosen slots,
 * ascending, to out; returns how many (count, or what the donor owns if
 * fewer), or -1 without memory (the caller takes the first slots). */
int cliPickSlots(const unsigned char *owned, int group, int count, int *out) {
    int ngroups, total = 0, best, need, split = -1, n = 0;
    int *size;
    unsigned char *take;
    uint64_t *reach;
    size_t words;

    if (group < 1 || group > CLI_TRANSPORT_SLOTS || (group & (group - 1))) group = 1;
    ngroups = CLI_TRANSPORT_SLOTS / group;
    for (int s = 0; s < CLI_TRANSPORT_SLOTS; s++) total += owned[s] != 0;
    if (count > total) count = total;
    if (count <= 0) return 0;
    words = (size_t)count / 64 + 1;
    size = calloc((size_t)ngroups, sizeof(*size));
    take = calloc((size_t)ngroups, 1);
    /* reach[i]: the sums the parts i..ngroups-1 can make, up to count. */
    reach = calloc((size_t)(ngroups + 1) * words, sizeof(*reach));
    if (size == NULL || take == NULL || reach == NULL) {
        free(size);
        free(take);
        free(reach);
        return -1;
    }
    for (int s = 0; s < CLI_TRANSPORT_SLOTS; s++)
        if (owned[s]) size[s / group]++;
    reach[(size_t)ngroups * words] = 1;
    for (int i = ngroups - 1; i >= 0; i--) {
        uint64_t *ri = reach + (size_t)i * words, *next = ri + words;
        memcpy(ri, next, words * sizeof(*ri));
        if (size[i] && size[i] <= count) cliBitsOrShifted(ri, next, words, size[i]);
    }
    for (best = count; !CLI_BIT(reach, best); best--);
    /* A part is taken when the parts after it still make what is left. */
    need = best;
    for (int i = 0; i < ngroups; i++) {
        if (size[i] && size[i] <= need &&
            CLI_BIT(reach + (size_t)(i + 1) * words, need - size[i])) {
            take[i] = 1;
            need -= size[i];
        }
    }
    /* The rest comes from the first part not taken: each one is larger
     * than the rest, or the best sum would have taken it. */
    need = count - best;
    for (int i = 0; i < ngroups && need; i++)
        if (size[i] && !take[i]) {
            split = i;
            break;
        }
    for (int s = 0; s < CLI_TRANSPORT_SLOTS; s++) {
        int g = s / group;
        if (!owned[s]) continue;
        if (take[g]) {
            out[n++] = s;
        } else if (g == split && need > 0) {
            out[n++] = s;
            need--;
        }
    }
    free(size);
    free(take);
    free(reach);
    return n;
}

/* ---------------------------------------------------------------------
 * Unit tests (REDIS_TEST)
 * ------------------------------------------------------------------ */

#ifdef REDIS_TEST

static int ctFailed;

#define CT_CHECK(cond) do { \
    if (!(cond)) { \
        fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, \
                #cond); \
        ctFailed = 1; \
    } \
} while (0)

#define CT_STREQ(a, b) do { \
    const char *_a = (a), *_b = (b); \
    if (_a == NULL || strcmp(_a, _b) != 0) { \
        fprintf(stderr, "  %s:%d: got \"%s\", want \"%s\"\n", __FILE__, \
                __LINE__, _a ? _a : "(null)", _b); \
        ctFailed = 1; \
    } \
} while (0)

static void ctParse(void) {
    CT_CHECK(cliTransportParse("auto") == CLI_TRANSPORT_AUTO);
    CT_CHECK(cliTransportParse("rdma") == CLI_TRANSPORT_RDMA);
    CT_CHECK(cliTransportParse("TCP") == CLI_TRANSPORT_TCP);
    CT_CHECK(cliTransportParse("legacy") == CLI_TRANSPORT_LEGACY);
    CT_CHECK(cliTransportParse("") == -1);
    CT_CHECK(cliTransportParse("rdm") == -1);
    CT_CHECK(cliTransportParse("tcp ") == -1);
    CT_CHECK(cliTransportParse(NULL) == -1);
    CT_STREQ(cliTransportName(CLI_TRANSPORT_TCP), "tcp");
    CT_STREQ(cliTransportName(9), "?");
}

/* Ranges of a slot list, joined: "" when there are none, "ERR" on -1. */
static char *ctRanges(const int *slots, int n) {
    char **r;
    int nr = cliSlotRanges(slots, n, &r);
    if (nr < 0) return strdup("ERR");
    char *s = cliSlotRangesJoin(r, nr, 0);
    cliFreeStrings(r, nr);
    return s;
}

static void ctRangesCase(const int *slots, int n, const char *want) {
    char *got = ctRanges(slots, n);
    CT_STREQ(got, want);
    free(got);
}

static void ctSlotRanges(void) {
    int one[] = {7};
    ctRangesCase(one, 1, "7");
    ctRangesCase(NULL, 0, "");
    int mixed[] = {5480, 5470, 5481, 5482, 0, 1, 2, 3, 5500};
    ctRangesCase(mixed, 9, "0-3 5470 5480-5482 5500");
    int dup[] = {3, 3, 2, 2, 4, 3};
    ctRangesCase(dup, 6, "2-4");
    int edges[] = {16383, 0, 16382};
    ctRangesCase(edges, 3, "0 16382-16383");
    int bad[] = {1, 16384};
    ctRangesCase(bad, 2, "ERR");
    int neg[] = {-1};
    ctRangesCase(neg, 1, "ERR");

    /* A whole range, built as rebalance builds it (descending order, the
     * way clusterManagerComputeReshardTable walks a node's slots, is not
     * assumed: any order works). */
    int *all = malloc(sizeof(int) * 5461);
    for (int i = 0; i < 5461; i++) all[i] = 5460 - i;
    ctRangesCase(all, 5461, "0-5460");
    /* Every other slot: 8192 ranges. */
    int *odd = malloc(sizeof(int) * 8192);
    for (int i = 0; i < 8192; i++) odd[i] = 2 * i + 1;
    char **r;
    int nr = cliSlotRanges(odd, 8192, &r);
    CT_CHECK(nr == 8192);
    if (nr == 8192) {
        CT_STREQ(r[0], "1");
        CT_STREQ(r[8191], "16383");
        char *j = cliSlotRangesJoin(r, nr, 20);
        CT_STREQ(j, "1 3 5 7 9 11 13 15 ... (8184 more)");
        free(j);
    }
    cliFreeStrings(r, nr);
    free(all);
    free(odd);
}

static char *ctJoinArgv(int argc, char **argv, size_t *argvlen) {
    size_t cap = 1;
    for (int i = 0; i < argc; i++) cap += argvlen[i] + 1;
    char *s = calloc(1, cap);
    for (int i = 0; i < argc; i++) {
        if (i) strcat(s, " ");
        CT_CHECK(strlen(argv[i]) == argvlen[i]);
        strcat(s, argv[i]);
    }
    return s;
}

static void ctArgvCase(const cliMigArgs *a, const char *want) {
    char **argv;
    size_t *argvlen;
    int argc = cliMigBuildArgv(a, &argv, &argvlen);
    if (want == NULL) {
        CT_CHECK(argc == -1);
        CT_CHECK(argv == NULL && argvlen == NULL);
        return;
    }
    CT_CHECK(argc > 0);
    if (argc <= 0) return;
    char *got = ctJoinArgv(argc, argv, argvlen);
    CT_STREQ(got, want);
    free(got);
    cliMigFreeArgv(argc, argv, argvlen);
}

static void ctArgv(void) {
    int slots[] = {5470, 0, 1, 2, 5480, 5481};
    cliMigArgs a = {"10.0.0.5", 7001, slots, 6, CLI_TRANSPORT_AUTO,
                    NULL, NULL, 0};
    ctArgvCase(&a, "RDMAMIGRATESLOTS 10.0.0.5 7001 0-2 5470 5480-5481 "
                   "TRANSPORT auto");
    a.transport = CLI_TRANSPORT_TCP;
    a.timeout_ms = 120000;
    ctArgvCase(&a, "RDMAMIGRATESLOTS 10.0.0.5 7001 0-2 5470 5480-5481 "
                   "TRANSPORT tcp TIMEOUT 120000");
    a.transport = CLI_TRANSPORT_RDMA;
    a.pass = "s3cret";
    ctArgvCase(&a, "RDMAMIGRATESLOTS 10.0.0.5 7001 0-2 5470 5480-5481 "
                   "TRANSPORT rdma AUTH s3cret TIMEOUT 120000");
    a.user = "admin";
    a.timeout_ms = 0;
    ctArgvCase(&a, "RDMAMIGRATESLOTS 10.0.0.5 7001 0-2 5470 5480-5481 "
                   "TRANSPORT rdma AUTH2 admin s3cret");
    /* A user without a password is not sent (upstream's MIGRATE does the
     * same: no password, no AUTH). */
    a.pass = NULL;
    ctArgvCase(&a, "RDMAMIGRATESLOTS 10.0.0.5 7001 0-2 5470 5480-5481 "
                   "TRANSPORT rdma");
    /* An empty password is still a password. */
    a.user = NULL;
    a.pass = "";
    char **argv;
    size_t *argvlen;
    int argc = cliMigBuildArgv(&a, &argv, &argvlen);
    CT_CHECK(argc == 10);
    if (argc == 10) {
        CT_STREQ(argv[8], "AUTH");
        CT_CHECK(argvlen[9] == 0);
        cliMigFreeArgv(argc, argv, argvlen);
    }
    a.pass = NULL;

    /* Refusals: legacy, no slots, a bad slot, a bad port. */
    a.transport = CLI_TRANSPORT_LEGACY;
    ctArgvCase(&a, NULL);
    a.transport = CLI_TRANSPORT_AUTO;
    a.nslots = 0;
    ctArgvCase(&a, NULL);
    int bad[] = {1, 20000};
    a.slots = bad;
    a.nslots = 2;
    ctArgvCase(&a, NULL);
    a.slots = slots;
    a.nslots = 6;
    a.port = 0;
    ctArgvCase(&a, NULL);

    /* The biggest: every other slot, one argument per slot. */
    int *odd = malloc(sizeof(int) * 8192);
    for (int i = 0; i < 8192; i++) odd[i] = 2 * i;
    cliMigArgs b = {"h", 1, odd, 8192, CLI_TRANSPORT_TCP, "u", "p", 5};
    argc = cliMigBuildArgv(&b, &argv, &argvlen);
    CT_CHECK(argc == 3 + 8192 + 2 + 3 + 2);
    if (argc > 0) {
        CT_STREQ(argv[3], "0");
        CT_STREQ(argv[3 + 8191], "16382");
        CT_STREQ(argv[argc - 1], "5");
        cliMigFreeArgv(argc, argv, argvlen);
    }
    free(odd);
}

static void ctTimeout(void) {
    CT_CHECK(cliMigTimeout(60000, -1, 0) == 60000);
    CT_CHECK(cliMigTimeout(0, 0, 0) == 60000);
    /* 1 GB at 10 MB/s: 100 s more. */
    CT_CHECK(cliMigTimeout(60000, 1000LL * 1000 * 1000, 0) == 160000);
    CT_CHECK(cliMigTimeout(5000, 1LL << 50, 0) == 24LL * 3600 * 1000);
    /* A donor limited to 2 MB/s: 1 GB takes 500 s more; a limit above
     * 10 MB/s changes nothing; a limit under 1 KB/s counts as 1 KB/s;
     * unknown (-1) is no limit. */
    CT_CHECK(cliMigTimeout(60000, 1000LL * 1000 * 1000, 2000000) == 560000);
    CT_CHECK(cliMigTimeout(60000, 1000LL * 1000 * 1000, 50000000) == 160000);
    CT_CHECK(cliMigTimeout(60000, 1000LL * 1000, 10) == 1060000);
    CT_CHECK(cliMigTimeout(60000, 1000LL * 1000 * 1000, -1) == 160000);
    CT_CHECK(cliMigTimeout(5000, 1LL << 50, 1) == 24LL * 3600 * 1000);
}

/* Sets name=value pairs from a NULL-terminated list. */
static int ctSet(cliMigStats *s, const char **kv) {
    int n = 0;
    for (int i = 0; kv[i] != NULL; i += 2)
        n += cliMigStatsSet(s, kv[i], strlen(kv[i]), kv[i + 1],
                            strlen(kv[i + 1]));
    return n;
}

static void ctStats(void) {
    cliMigStats s;
    cliMigStatsInit(&s);
    CT_CHECK(s.keys == -1 && s.bytes == -1 && s.phase[0] == '\0');
    const char *final[] = {
        "transport", "tcp", "slots", "1365", "keys", "10000",
        "bytes", "12345678", "keys_zero_copy", "9000",
        "keys_serialized", "1000", "prepare_ms", "10", "transfer_ms", "300",
        "patch_ms", "100", "handover_ms", "5", "delete_ms", "20",
        "write_pause_ms", "40", "writes_replayed", "7", NULL};
    CT_CHECK(ctSet(&s, final) == 13);
    CT_CHECK(s.slots == 1365 && s.keys == 10000 && s.bytes == 12345678);
    CT_CHECK(s.keys_zero_copy == 9000 && s.keys_serialized == 1000);
    CT_CHECK(s.prepare_ms == 10 && s.delete_ms == 20 &&
             s.write_pause_ms == 40 && s.writes_replayed == 7);
    CT_STREQ(s.transport, "tcp");
    char *sum = cliMigFormatSummary(&s, "127.0.0.1:7000", "127.0.0.1:7003",
                                    0.5);
    CT_STREQ(sum, "[OK] 1365 slots from 127.0.0.1:7000 to 127.0.0.1:7003: "
                  "10000 keys, 12.3 MB in 0.50 s (24.7 MB/s) over tcp; "
                  "prepare 10 ms, transfer 300 ms, patch 100 ms, "
                  "handover 5 ms, delete 20 ms; writes paused 40 ms, "
                  "7 replayed; keys 9000 zero-copy, 1000 serialized");
    free(sum);
    const char *mean[] = {"write_pause_mean_ms", "25", NULL};
    CT_CHECK(ctSet(&s, mean) == 1 && s.write_pause_mean_ms == 25);
    sum = cliMigFormatSummary(&s, "127.0.0.1:7000", "127.0.0.1:7003", 0.5);
    CT_CHECK(strstr(sum, "; writes paused 40 ms (25 ms per slot on average), "
                         "7 replayed; keys") != NULL);
    free(sum);
    const char *held[] = {"commands_held", "12", "commands_held_max_ms", "9", NULL};
    CT_CHECK(ctSet(&s, held) == 2 && s.commands_held == 12 && s.commands_held_max_ms == 9);
    sum = cliMigFormatSummary(&s, "127.0.0.1:7000", "127.0.0.1:7003", 0.5);
    CT_CHECK(strstr(sum, "; writes paused 40 ms (25 ms per slot on average), "
                         "12 commands held up to 9 ms, 7 replayed; keys") != NULL);
    free(sum);
    /* A donor with migration-max-bandwidth: said after the transfer, only
     * when it waited. */
    const char *nowait[] = {"throttled_ms", "0", NULL};
    CT_CHECK(ctSet(&s, nowait) == 1 && s.throttled_ms == 0);
    sum = cliMigFormatSummary(&s, "127.0.0.1:7000", "127.0.0.1:7003", 0.5);
    CT_CHECK(strstr(sum, "migration-max-bandwidth") == NULL);
    free(sum);
    const char *waited[] = {"throttled_ms", "250", NULL};
    CT_CHECK(ctSet(&s, waited) == 1 && s.throttled_ms == 250);
    sum = cliMigFormatSummary(&s, "127.0.0.1:7000", "127.0.0.1:7003", 0.5);
    CT_CHECK(strstr(sum, ", transfer 300 ms (250 ms of it held back by "
                         "migration-max-bandwidth), patch 100 ms,") != NULL);
    free(sum);

    /* Defensive: unknown fields, bad numbers, odd case, binary junk. */
    cliMigStatsInit(&s);
    const char *odd[] = {
        "future_field", "42", "keys", "12abc", "bytes", "-5",
        "slots", "", "KEYS_ZERO_COPY", "7", "phase", "tr\x01nsfer",
        "transfer_ms", "2.9", "transport",
        "a-very-long-transport-name-indeed", NULL};
    CT_CHECK(ctSet(&s, odd) == 4);
    CT_CHECK(s.keys == -1 && s.bytes == -1 && s.slots == -1);
    CT_CHECK(s.keys_zero_copy == 7 && s.transfer_ms == 2);
    CT_STREQ(s.phase, "tr?nsfer");
    CT_STREQ(s.transport, "a-very-long-tra");
    CT_CHECK(cliMigStatsSet(&s, "keys", 4, NULL, 0) == 0);
    /* Length-delimited, not NUL-terminated, names and values. */
    CT_CHECK(cliMigStatsSet(&s, "keysXX", 4, "123456", 2) == 1);
    CT_CHECK(s.keys == 12);

    /* Nothing reported: the summary still says who and how long. */
    cliMigStatsInit(&s);
    sum = cliMigFormatSummary(&s, "a:1", "b:2", 1.25);
    CT_STREQ(sum, "[OK] from a:1 to b:2: in 1.25 s");
    free(sum);
}

static void ctProgress(void) {
    cliMigStats s;
    cliMigStatsInit(&s);
    const char *st[] = {"phase", "transfer", "slots", "1365",
                        "bytes", "12300000", "bytes_total", "250000000",
                        NULL};
    ctSet(&s, st);
    char *p = cliMigFormatProgress(&s, 2.0);
    CT_STREQ(p, "transfer: 1365 slots, 12.3/250.0 MB, 6.2 MB/s, 2.0 s");
    free(p);
    /* The server's clock wins over the client's. */
    cliMigStatsSet(&s, "elapsed_ms", 10, "4000", 4);
    p = cliMigFormatProgress(&s, 2.0);
    CT_STREQ(p, "transfer: 1365 slots, 12.3/250.0 MB, 3.1 MB/s, 4.0 s");
    free(p);
    /* No total: bytes so far only; keys when reported. */
    cliMigStatsInit(&s);
    const char *st2[] = {"phase", "prepare", "bytes", "0", "keys", "10",
                         NULL};
    ctSet(&s, st2);
    p = cliMigFormatProgress(&s, 0.5);
    CT_STREQ(p, "prepare: 0.0 MB, 0.0 MB/s, 10 keys, 0.5 s");
    free(p);
    cliMigStatsInit(&s);
    p = cliMigFormatProgress(&s, 0);
    CT_STREQ(p, "running: 0.0 s");
    free(p);
}

/* The parts of group g (group slots each) that picked holds: 0 none, 1
 * all of owned's, 2 some. */
static int ctPartState(const unsigned char *owned, const int *picked, int n, int group, int g) {
    int owned_n = 0, in = 0;

    for (int s = g * group; s < (g + 1) * group; s++) owned_n += owned[s] != 0;
    for (int i = 0; i < n; i++) in += picked[i] / group == g;
    return in == 0 ? 0 : in == owned_n ? 1 : 2;
}

static int ctSplitParts(const unsigned char *owned, const int *picked, int n, int group) {
    int split = 0;

    for (int g = 0; g < CLI_TRANSPORT_SLOTS / group; g++)
        split += ctPartState(owned, picked, n, group, g) == 2;
    return split;
}

static void ctOwn(unsigned char *owned, int from, int to) {
    memset(owned, 0, CLI_TRANSPORT_SLOTS);
    for (int s = from; s <= to; s++) owned[s] = 1;
}

static void ctPickSlots(void) {
    unsigned char owned[CLI_TRANSPORT_SLOTS];
    int out[CLI_TRANSPORT_SLOTS], n;

    /* The 3-master layout, a quarter of each to a 4th: whole parts only,
     * the donor's part of the group the layout splits included. */
    ctOwn(owned, 0, 5460);
    n = cliPickSlots(owned, 256, 1365, out);
    CT_CHECK(n == 1365 && ctSplitParts(owned, out, n, 256) == 0);
    CT_CHECK(out[0] == 0 && out[1279] == 1279 && out[1280] == 5376 && out[1364] == 5460);
    ctOwn(owned, 5461, 10922);
    n = cliPickSlots(owned, 256, 1366, out);
    CT_CHECK(n == 1366 && ctSplitParts(owned, out, n, 256) == 0);
    CT_CHECK(out[0] == 5461 && out[n - 1] == 10922);
    ctOwn(owned, 10923, 16383);
    n = cliPickSlots(owned, 256, 1365, out);
    CT_CHECK(n == 1365 && ctSplitParts(owned, out, n, 256) == 0 && out[0] == 10923);
    /* No sum of parts reaches count: one part split, the rest whole;
     * sorted, no duplicate, every slot the donor's. */
    ctOwn(owned, 0, 5460);
    n = cliPickSlots(owned, 256, 1000, out);
    CT_CHECK(n == 1000 && ctSplitParts(owned, out, n, 256) == 1);
    for (int i = 0; i < n; i++) CT_CHECK(owned[out[i]] && (i == 0 || out[i] > out[i - 1]));
    /* Groups of 1, or below CLI_PICK_MIN_GROUP: the first slots. */
    n = cliPickSlots(owned, 1, 100, out);
    CT_CHECK(n == 100 && out[0] == 0 && out[99] == 99);
    /* More than the donor owns: all of it; none; scattered slots. */
    ctOwn(owned, 100, 199);
    CT_CHECK(cliPickSlots(owned, 64, 500, out) == 100 && out[99] == 199);
    CT_CHECK(cliPickSlots(owned, 64, 0, out) == 0);
    memset(owned, 0, sizeof(owned));
    for (int s = 0; s < CLI_TRANSPORT_SLOTS; s += 7) owned[s] = 1;
    n = cliPickSlots(owned, 64, 2000, out);
    CT_CHECK(n == 2000 && ctSplitParts(owned, out, n, 64) <= 1);
    for (int i = 0; i < n; i++) CT_CHECK(owned[out[i]] && (i == 0 || out[i] > out[i - 1]));
    /* A bad group size counts as 1. */
    ctOwn(owned, 0, 99);
    CT_CHECK(cliPickSlots(owned, 48, 10, out) == 10 && out[9] == 9);
}

/* Runs every case; prints one [ok]/[err] line per case; returns the
 * number of failed cases. */
int cliTransportTest(int argc, char **argv, int flags) {
    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"--cluster-transport values", ctParse},
        {"slot lists compress into sorted ranges", ctSlotRanges},
        {"RDMAMIGRATESLOTS arguments (ranges, TRANSPORT, AUTH/AUTH2, TIMEOUT)",
         ctArgv},
        {"TIMEOUT grows with the donor's data", ctTimeout},
        {"reply fields parsed defensively; summary line", ctStats},
        {"progress line", ctProgress},
        {"the slots a donor gives keep its parts of slot groups whole", ctPickSlots},
    };
    int failed = 0;

    (void)argc;
    (void)argv;
    (void)flags;
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        ctFailed = 0;
        tests[i].fn();
        printf("[%s]: clitransport - %s\n", ctFailed ? "err" : "ok",
               tests[i].name);
        failed += ctFailed;
    }
    return failed;
}

#endif
