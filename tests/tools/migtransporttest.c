/* migtransporttest.c -- test tool of the block transport (xfer.h).
 *
 * Usage:
 *
 *   migtransport-test [--case NAME] [--kind tcp|rdma|auto] [--bind ADDR]
 *                     [--donor-bind ADDR] [--port P] [--blocks N]
 *                     [--total BYTES] [--pieces K] [--seed X]
 *                     [--max-chain M] [--max-wr-bytes B] [--timeout MS]
 *
 * One process forks the two ends of a migration data connection: the
 * recipient listens on --bind, the donor connects (from --donor-bind when
 * given; with SoftRoCE the two ends must use two addresses of rxe0). The
 * recipient hands its port and then its block descriptors to the donor over
 * a socketpair, as the RDMAREGISTER reply will over the Redis connection.
 *
 * The data: N blocks of random sizes (tiny ones of a few bytes, medium, and
 * several above 1 MiB; --total adds 8 MiB blocks up to that many bytes),
 * each filled by the donor with a pattern seeded by --seed and the block
 * index, cut into 1..K segments at random points and sent in shuffled
 * order, in several xferWriteBlocks() calls. The recipient's blocks sit
 * between guard zones; after the transfer it checks every byte of every
 * block, the guards, and the per-block byte counts of the summary.
 *
 * Cases (--case; each exits 0 when everything behaved as it must):
 *   happy          the transfer above, verified
 *   wrong-token    a donor with a wrong token is refused (both ends say
 *                  "token mismatch": the donor's error, the listener's
 *                  last refusal) within the same xferAccept() that then
 *                  accepts the right donor; the transfer is verified
 *   stranger-garbage, stranger-token, stranger-short, stranger-silent
 *                  (TCP) before the donor, a stranger connects to the
 *                  listener and sends 48 random bytes / a HELLO with a
 *                  wrong token (it must get a BAD_TOKEN WELCOME) / the
 *                  first 5 bytes of a HELLO and closes / nothing: one that
 *                  says nothing is dropped after XFER_HANDSHAKE_MS, and a
 *                  second one, held open, does not delay the donor (it is
 *                  dropped once the donor is accepted). The recipient
 *                  accepts as the server does (waits of 250 ms, any error
 *                  but a timeout fatal): the donor must be accepted within
 *                  a third of the I/O timeout, the stranger counted as
 *                  refused, the transfer verified
 *   flood          (TCP) a child of the donor connects and closes (half of
 *                  them with a reset) about 1000 times a second, from
 *                  200 ms before the donor connects until its transfer is
 *                  over: the same checks
 *   no-listener    connecting where nobody listens fails with an error
 *                  (no fork; --port must be a free port)
 *   kill-donor     the donor SIGKILLs itself half way: the recipient gets
 *                  an error before its timeout, guards intact
 *   kill-recipient the recipient SIGKILLs itself after registering: the
 *                  donor gets an error before its timeout
 *   lie-block, lie-offset, lie-length, lie-summary
 *                  (TCP) the donor speaks the wire protocol by hand and
 *                  sends a block id / offset / length outside the
 *                  registration, or a summary that does not add up: the
 *                  recipient refuses it, and no byte of any block or guard
 *                  changed
 *   lie-overfill   (TCP) the donor fills block 0, then sends 16 more bytes
 *                  into it: the recipient, which watches the blocks
 *                  (xferWatchBlocks), refuses the second record, and block
 *                  0 keeps what the first one wrote
 *
 * In every case the recipient watches its blocks with xferWatchBlocks():
 * over TCP each block must be reported whole exactly once, and at that
 * moment (in the cases that send the pattern) hold every byte of it; over
 * RDMA no block is reported.
 *   short-waits    the recipient accepts in waits of 1 ms, retried while
 *                  nobody connected (as the recipient thread does in waits
 *                  of 250 ms to see a cancel): the donor connects at the
 *                  end of some wait, and its handshake (TCP: the token;
 *                  RDMA: the connection's establishment) must not be cut
 *                  by the end of the wait (TCP: it carries over to the
 *                  next one); then the happy transfer, verified
 *   timeout        xferAccept with nobody connecting, then xferWaitTransfer
 *                  with a donor that never writes: both time out, on time
 *   rdma-overrun   (RDMA) the donor forges a descriptor 4 KB longer than
 *                  block 0 and writes all of it: the recipient's NIC
 *                  refuses (the MR ends with the block), both ends get an
 *                  error, the guard after the block is intact
 *
 * Output: one line per step, prefixed with the end that prints it, the
 * transport chosen, the stats (WRs, chains, RDMA bytes, TCP bytes) and MB/s
 * of the data transfer; the last line is "migtransport-test: CASE (KIND):
 * PASS" or "FAIL: why". Exit status 0 on PASS, 1 on FAIL, 64 on bad usage.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#define _GNU_SOURCE
#include "xfer.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GUARD 64
#define GUARD_BYTE 0xa5
#define WRITE_BATCH 700     /* segments per xferWriteBlocks() call */
/* flood: connections per second, and bounds of the flooding child. */
#define FLOOD_RATE 1000
#define FLOOD_MAX 20000
#define FLOOD_MAX_MS 20000

typedef struct config {
    const char *caseName;
    xferKind kind;
    const char *bind;
    const char *donorBind;
    int port;
    uint32_t blocks;
    uint64_t total;
    uint32_t pieces;
    uint64_t seed;
    xferOptions opts;
    int timeoutMs;
} config;

static const char *role = "main";

static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("[%s] ", role);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

static int64_t nowMs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ============================ Data and pattern =========================== */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rnd(uint64_t *s, uint64_t lo, uint64_t hi) {
    return lo + splitmix(s) % (hi - lo + 1);
}

static void fillPattern(unsigned char *p, uint64_t len, uint64_t seed) {
    uint64_t s = seed;
    for (uint64_t off = 0; off < len; off += 8) {
        uint64_t w = splitmix(&s);
        if (len - off >= 8) memcpy(p + off, &w, 8);
        else memcpy(p + off, &w, len - off);
    }
}

/* Offset of the first byte differing from the pattern, or -1. */
static int64_t checkPattern(const unsigned char *p, uint64_t len,
                            uint64_t seed) {
    uint64_t s = seed;
    for (uint64_t off = 0; off < len; off += 8) {
        uint64_t w = splitmix(&s);
        size_t n = len - off >= 8 ? 8 : (size_t)(len - off);
        if (memcmp(p + off, &w, n)) {
            for (size_t j = 0; j < n; j++)
                if (p[off + j] != ((unsigned char *)&w)[j])
                    return (int64_t)(off + j);
        }
    }
    return -1;
}

static uint64_t blockSeed(const config *cfg, uint32_t i) {
    return cfg->seed * 1000003ULL + i;
}

/* The block sizes, the same in both processes. */
static uint64_t *makeSizes(const config *cfg, uint32_t *nOut) {
    uint64_t s = cfg->seed ^ 0x51eed;
    uint32_t n = cfg->blocks;
    uint64_t sum = 0;
    uint64_t *sizes = malloc(sizeof(uint64_t) * n);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t cls = rnd(&s, 0, 9);
        if (cls < 3) sizes[i] = rnd(&s, 1, 100);
        else if (cls < 7) sizes[i] = rnd(&s, 1024, 256 * 1024);
        else sizes[i] = rnd(&s, (1 << 20) + 1, 3 << 20);
        sum += sizes[i];
    }
    while (cfg->total > sum) {
        uint64_t add = cfg->total - sum;
        if (add > (8 << 20)) add = 8 << 20;
        sizes = realloc(sizes, sizeof(uint64_t) * (n + 1));
        sizes[n++] = add;
        sum += add;
    }
    *nOut = n;
    return sizes;
}

/* ============================ Control channel ============================ */

static int ctlWrite(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int ctlRead(int fd, void *buf, size_t len, int timeoutMs) {
    char *p = buf;
    int64_t deadline = nowMs() + timeoutMs;
    while (len) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int64_t left = deadline - nowMs();
        if (left <= 0 || poll(&pf, 1, (int)left) <= 0) return -1;
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void printStats(xferConn *c, uint64_t bytes, int64_t ms) {
    xferStats st;
    xferGetStats(c, &st);
    say("stats: transport %s, segments %" PRIu64 ", payload %" PRIu64
        " bytes, wr_posted %" PRIu64 ", chains_posted %" PRIu64
        ", rdma_bytes_written %" PRIu64 ", tcp_bytes_sent %" PRIu64
        ", tcp_bytes_received %" PRIu64, xferKindName(xferConnKind(c)),
        st.segments, st.payload_bytes, st.wr_posted, st.chains_posted,
        st.rdma_bytes_written, st.tcp_bytes_sent, st.tcp_bytes_received);
    if (bytes && ms >= 0)
        say("transfer: %" PRIu64 " bytes in %" PRId64 " ms = %.1f MB/s",
            bytes, ms, ms ? (double)bytes / 1e6 / ((double)ms / 1000) : 0.0);
}

/* ================================ Recipient ============================== */

static int isCase(const config *cfg, const char *name) {
    return !strcmp(cfg->caseName, name);
}

/* The cases whose transfer is the pattern, whole, checked byte for byte. */
static int isStranger(const config *cfg) {
    return !strncmp(cfg->caseName, "stranger-", 9) || isCase(cfg, "flood");
}

static int isVerified(const config *cfg) {
    return isCase(cfg, "happy") || isCase(cfg, "wrong-token") ||
           isCase(cfg, "short-waits") || isStranger(cfg);
}

static int isLie(const config *cfg) {
    return !strncmp(cfg->caseName, "lie-", 4);
}

/* xferWatchBlocks() callback: counts each block's reports and, when the
 * donor sends the pattern, checks the block is whole at that moment. */
typedef struct watchState {
    const config *cfg;
    void **addrs;
    const uint64_t *sizes;
    uint32_t *reports;
    int checkPattern;
    int bad;
} watchState;

static int onBlockDone(void *ctx, uint32_t block, char *err) {
    watchState *w = ctx;
    w->reports[block]++;
    if (w->checkPattern &&
        checkPattern(w->addrs[block], w->sizes[block], blockSeed(w->cfg, block)) >= 0) {
        say("FAIL: block %u reported whole before all its bytes arrived", block);
        w->bad = 1;
        snprintf(err, XFER_ERR_LEN, "block %u reported early", block);
        return -1;
    }
    return 0;
}

static int runRecipient(const config *cfg, int ctl, const char *token) {
    char err[XFER_ERR_LEN];
    int ok = 0;
    uint32_t n;
    uint64_t *sizes = makeSizes(cfg, &n);
    unsigned char **mem = calloc(n, sizeof(*mem));
    void **addrs = calloc(n, sizeof(*addrs));
    xferBlockDesc *desc = calloc(n, sizeof(*desc));
    xferConn *c = NULL;

    xferListener *l = xferListen(cfg->kind, cfg->bind, cfg->port, token, err);
    if (l == NULL) {
        say("FAIL: listen: %s", err);
        goto out;
    }
    uint32_t port = (uint32_t)xferListenerPort(l);
    say("listening on %s port %u, transport %s", cfg->bind, port,
        xferKindName(xferListenerKind(l)));
    if (cfg->kind == XFER_KIND_AUTO)
        say("auto chose %s%s%s", xferKindName(xferListenerKind(l)),
            xferListenerNote(l)[0] ? ": " : "", xferListenerNote(l));

    if (isCase(cfg, "timeout")) {
        int64_t t0 = nowMs();
        c = xferAccept(l, 500, cfg->timeoutMs, err);
        int64_t ms = nowMs() - t0;
        if (c || !strstr(err, "timeout after 500 ms") || ms < 450 ||
            ms > 3000) {
            say("FAIL: accept with nobody connecting: %s after %" PRId64
                " ms", c ? "succeeded" : err, ms);
            goto out;
        }
        say("accept with nobody connecting: \"%s\" after %" PRId64 " ms (ok)",
            err, ms);
    }
    if (ctlWrite(ctl, &port, sizeof(port))) {
        say("FAIL: control channel write");
        goto out;
    }
    if (isStranger(cfg)) {
        /* As the server's recipient thread accepts (src/migrecipient.c):
         * waits of 250 ms, any error but a timeout ends the import. */
        int64_t t0 = nowMs(), ms;
        while ((c = xferAccept(l, 250, cfg->timeoutMs, err)) == NULL &&
               strstr(err, "timeout") && nowMs() - t0 < 2 * (int64_t)cfg->timeoutMs) {}
        ms = nowMs() - t0;
        uint64_t refused = xferListenerRefused(l), want = isCase(cfg, "flood") ? 10 :
                           isCase(cfg, "stranger-silent") ? 2 : 1;
        if (c == NULL || ms > cfg->timeoutMs / 3 || refused < want) {
            say("FAIL: accept with strangers about: %s after %" PRId64 " ms "
                "(at most %d), %" PRIu64 " peers refused (at least %" PRIu64
                "), the last: %s", c ? "accepted" : err, ms, cfg->timeoutMs / 3,
                refused, want, xferListenerLastRefusal(l));
            goto out;
        }
        say("accepted the donor after %" PRId64 " ms, %" PRIu64 " strangers "
            "dropped, the last: \"%s\" (ok)", ms, refused,
            xferListenerLastRefusal(l));
    } else if (isCase(cfg, "short-waits")) {
        /* Like the recipient thread, which waits 250 ms at a time to see a
         * cancel: here 1 ms, so the donor always connects near the end of
         * a wait, and its handshake must not be cut by the wait's end. */
        int64_t until = nowMs() + cfg->timeoutMs;
        long waits = 0;
        while ((c = xferAccept(l, 1, cfg->timeoutMs, err)) == NULL &&
               strstr(err, "waiting for the donor to connect") && nowMs() < until)
            waits++;
        if (c) say("accepted after %ld waits of 1 ms", waits);
    } else {
        c = xferAccept(l, cfg->timeoutMs, cfg->timeoutMs, err);
    }
    if (c == NULL) {
        say("FAIL: accept: %s", err);
        goto out;
    }
    if (isCase(cfg, "wrong-token")) {
        if (xferListenerRefused(l) != 1 ||
            !strstr(xferListenerLastRefusal(l), "token mismatch")) {
            say("FAIL: the donor with a wrong token: %" PRIu64 " peers "
                "refused, the last: %s", xferListenerRefused(l),
                xferListenerLastRefusal(l));
            goto out;
        }
        say("wrong token refused: \"%s\" (ok), then the donor accepted",
            xferListenerLastRefusal(l));
    }
    say("accepted %s over %s", xferConnPeer(c), xferKindName(xferConnKind(c)));
    {
        xferConn *again = xferAccept(l, 100, 100, err);
        if (again || !strstr(err, "already accepted")) {
            say("FAIL: a second xferAccept on the listener: %s",
                again ? "returned a connection" : err);
            xferClose(again);
            goto out;
        }
    }
    xferSetOptions(c, &cfg->opts);

    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        mem[i] = malloc(sizes[i] + 2 * GUARD);
        memset(mem[i], GUARD_BYTE, GUARD);
        memset(mem[i] + GUARD, 0, sizes[i]);
        memset(mem[i] + GUARD + sizes[i], GUARD_BYTE, GUARD);
        addrs[i] = mem[i] + GUARD;
        total += sizes[i];
    }
    if (xferRegisterRecvBlocks(c, addrs, sizes, n, desc, err)) {
        say("FAIL: register: %s", err);
        goto out;
    }
    say("registered %u blocks, %" PRIu64 " bytes", n, total);
    uint32_t *reports = calloc(n ? n : 1, sizeof(uint32_t));
    watchState ws = {cfg, addrs, sizes, reports, isVerified(cfg), 0};
    if (xferWatchBlocks(c, sizes, onBlockDone, &ws, err)) {
        say("FAIL: watch: %s", err);
        free(reports);
        goto out;
    }
    {
        uint64_t *tooBig = malloc(sizeof(uint64_t) * (n ? n : 1));
        memcpy(tooBig, sizes, sizeof(uint64_t) * n);
        if (n) tooBig[0]++;
        int again = xferWatchBlocks(c, tooBig, onBlockDone, &ws, err);
        free(tooBig);
        if (again == 0) {
            say("FAIL: a second xferWatchBlocks() was accepted");
            free(reports);
            goto out;
        }
    }
    if (ctlWrite(ctl, &n, sizeof(n)) ||
        ctlWrite(ctl, desc, sizeof(*desc) * n)) {
        say("FAIL: control channel write");
        goto out;
    }
    if (isCase(cfg, "kill-recipient")) {
        say("killing myself with SIGKILL after registering");
        raise(SIGKILL);
    }

    int waitMs = isCase(cfg, "timeout") ? 1500 : cfg->timeoutMs;
    int64_t t0 = nowMs();
    int rc = xferWaitTransfer(c, waitMs, err);
    int64_t ms = nowMs() - t0;
    int guardsOk = 1;
    for (uint32_t i = 0; i < n; i++) {
        for (int g = 0; g < GUARD; g++)
            if (mem[i][g] != GUARD_BYTE ||
                mem[i][GUARD + sizes[i] + g] != GUARD_BYTE) {
                say("FAIL: guard zone of block %u overwritten", i);
                guardsOk = 0;
                break;
            }
    }
    if (!guardsOk || ws.bad) {
        free(reports);
        goto out;
    }
    /* Over TCP a block is reported when its last byte arrived, once. */
    {
        int tcp = xferConnKind(c) == XFER_KIND_TCP;
        uint32_t whole = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (reports[i] > 1 || (!tcp && reports[i])) {
                say("FAIL: block %u reported %u times over %s", i, reports[i],
                    xferKindName(xferConnKind(c)));
                free(reports);
                goto out;
            }
            whole += reports[i];
        }
        if (tcp && rc == 0 && whole != n) {
            say("FAIL: %u of %u blocks reported whole after a complete "
                "transfer", whole, n);
            free(reports);
            goto out;
        }
        say("blocks reported whole during the transfer: %u of %u", whole, n);
    }
    free(reports);

    if (isVerified(cfg)) {
        if (rc) {
            say("FAIL: transfer: %s", err);
            goto out;
        }
        printStats(c, total, ms);
        uint64_t checked = 0;
        for (uint32_t i = 0; i < n; i++) {
            int64_t bad = checkPattern(addrs[i], sizes[i], blockSeed(cfg, i));
            if (bad >= 0) {
                say("FAIL: block %u (%" PRIu64 " bytes): first wrong byte at "
                    "offset %" PRId64, i, sizes[i], bad);
                goto out;
            }
            if (xferRecvBlockBytes(c, i) != sizes[i]) {
                say("FAIL: block %u: summary says %" PRIu64 " bytes, block "
                    "has %" PRIu64, i, xferRecvBlockBytes(c, i), sizes[i]);
                goto out;
            }
            checked += sizes[i];
        }
        say("verified every byte of %u blocks (%" PRIu64 " bytes), guards "
            "intact", n, checked);
        ok = 1;
    } else if (isCase(cfg, "kill-donor")) {
        if (rc == 0 || ms >= cfg->timeoutMs) {
            say("FAIL: donor killed mid-transfer: %s after %" PRId64 " ms",
                rc ? err : "transfer reported complete", ms);
            goto out;
        }
        say("donor killed mid-transfer: \"%s\" after %" PRId64 " ms, guards "
            "intact (ok)", err, ms);
        ok = 1;
    } else if (isCase(cfg, "timeout")) {
        if (rc == 0 || !strstr(err, "timeout after 1500 ms") || ms < 1400 ||
            ms > 5000) {
            say("FAIL: silent donor: %s after %" PRId64 " ms",
                rc ? err : "transfer reported complete", ms);
            goto out;
        }
        say("silent donor: \"%s\" after %" PRId64 " ms (ok)", err, ms);
        ok = 1;
    } else if (isCase(cfg, "rdma-overrun")) {
        /* The guards right after block 0 are where the overrun would land:
         * checked above. */
        if (rc == 0) {
            say("FAIL: a donor writing past block 0 got its transfer "
                "accepted");
            goto out;
        }
        say("donor writing past its block: \"%s\", guards intact (ok)", err);
        ok = 1;
    } else if (isLie(cfg)) {
        const char *want = isCase(cfg, "lie-block") ? "but only" :
                           isCase(cfg, "lie-offset") ? "peer sent offset" :
                           isCase(cfg, "lie-length") ? "past its end" :
                           isCase(cfg, "lie-overfill") ? "more bytes into block 0" :
                           "does not add up";
        if (rc == 0 || !strstr(err, want)) {
            say("FAIL: lying donor: %s (want an error with \"%s\")",
                rc ? err : "transfer accepted", want);
            goto out;
        }
        /* Only lie-summary and lie-overfill wrote one legitimate record
         * (block 0, all of it, 0xee); lie-overfill's second one (0x11)
         * must not have landed. */
        int wroteBlock0 = isCase(cfg, "lie-summary") || isCase(cfg, "lie-overfill");
        for (uint64_t j = 0; wroteBlock0 && n && j < sizes[0]; j++)
            if (mem[0][GUARD + j] != 0xee) {
                say("FAIL: block 0 byte %" PRIu64 " is 0x%02x, not what the "
                    "accepted record wrote", j, mem[0][GUARD + j]);
                goto out;
            }
        for (uint32_t i = wroteBlock0 ? 1 : 0; i < n; i++) {
            for (uint64_t j = 0; j < sizes[i]; j++)
                if (mem[i][GUARD + j]) {
                    say("FAIL: block %u byte %" PRIu64 " was written by a "
                        "refused record", i, j);
                    goto out;
                }
        }
        say("lying donor refused: \"%s\"; no byte written outside what was "
            "valid (ok)", err);
        ok = 1;
    }

out:
    xferClose(c);
    xferCloseListener(l);
    for (uint32_t i = 0; i < n; i++) free(mem[i]);
    free(mem);
    free(addrs);
    free(desc);
    free(sizes);
    return ok ? 0 : 1;
}

/* ================================ Strangers ============================== */

/* The listener's address (to freeaddrinfo()), NULL if it does not
 * resolve. */
static struct addrinfo *listenerAddr(const config *cfg, uint32_t port) {
    struct addrinfo hints, *res = NULL;
    char ps[16];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof(ps), "%u", port);
    return getaddrinfo(cfg->bind, ps, &hints, &res) == 0 ? res : NULL;
}

/* A plain TCP connection to the listener, as any program could make; -1
 * if it failed. */
static int strangerConnect(const config *cfg, uint32_t port) {
    struct addrinfo *res = listenerAddr(cfg, port);
    if (res == NULL) return -1;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) < 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* Milliseconds until the listener closes fd (EOF or reset), reading and
 * ignoring what it sends; -1 if it is still open after ms. */
static int64_t waitClosed(int fd, int ms) {
    int64_t t0 = nowMs();
    for (;;) {
        int64_t left = t0 + ms - nowMs();
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pf, 1, (int)left) == 0) return -1;
        char buf[64];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return nowMs() - t0;
    }
}

/* The stranger of a stranger-* case, before the donor connects; *held is
 * a connection to keep open while the donor works (-1: none). Returns 0,
 * or 1 after saying FAIL. */
static int playStranger(const config *cfg, uint32_t port, int *held) {
    int bound = 3 * XFER_HANDSHAKE_MS;
    int fd = strangerConnect(cfg, port);
    *held = -1;
    if (fd < 0) {
        say("FAIL: a stranger cannot connect to port %u: %s", port,
            strerror(errno));
        return 1;
    }
    /* What it sends: 48 random bytes, a HELLO with a wrong token (by hand,
     * the wire format is in xfer.h), a HELLO's first 5 bytes, or
     * nothing. */
    xferWireHello w;
    size_t len = sizeof(w);
    const char *what = "a stranger that sent 48 random bytes";
    memset(&w, 0, sizeof(w));
    w.magic = htobe32(XFER_WIRE_MAGIC);
    w.version = htobe16(XFER_WIRE_VERSION);
    w.type = htobe16(XFER_MSG_HELLO);
    memset(w.token, 'x', sizeof(w.token));
    if (isCase(cfg, "stranger-garbage")) {
        if (getrandom(&w, sizeof(w), 0) != (ssize_t)sizeof(w)) {
            say("FAIL: getrandom: %s", strerror(errno));
            close(fd);
            return 1;
        }
    } else if (isCase(cfg, "stranger-token")) {
        what = "a stranger with a wrong token";
    } else if (isCase(cfg, "stranger-short")) {
        len = 5;
    } else {
        what = "a silent stranger";
        len = 0;
    }
    if (len && ctlWrite(fd, &w, len)) {
        say("FAIL: %s cannot send its bytes", what);
        close(fd);
        return 1;
    }
    if (isCase(cfg, "stranger-short")) {
        close(fd);
        say("a stranger sent the first 5 bytes of a HELLO and closed");
        return 0;
    }
    if (isCase(cfg, "stranger-token") &&
        (ctlRead(fd, &w, sizeof(w), bound) || be32toh(w.magic) != XFER_WIRE_MAGIC ||
         be16toh(w.type) != XFER_MSG_WELCOME ||
         be32toh(w.status) != XFER_STATUS_BAD_TOKEN)) {
        say("FAIL: %s got no BAD_TOKEN WELCOME within %d ms", what, bound);
        close(fd);
        return 1;
    }
    int64_t ms = waitClosed(fd, bound);
    close(fd);
    if (ms < 0) {
        say("FAIL: %s is still connected after %d ms", what, bound);
        return 1;
    }
    say("%s%s: dropped after %" PRId64 " ms (ok)", what,
        isCase(cfg, "stranger-token") ? ", told BAD_TOKEN" : "", ms);
    if (isCase(cfg, "stranger-silent")) {
        if (ms < XFER_HANDSHAKE_MS * 9 / 10) {
            say("FAIL: %s was dropped before the handshake bound", what);
            return 1;
        }
        /* Another one stays silent while the donor connects. */
        if ((*held = strangerConnect(cfg, port)) < 0) {
            say("FAIL: a stranger cannot connect to port %u", port);
            return 1;
        }
    }
    return 0;
}

static volatile sig_atomic_t floodStop;

static void onFloodStop(int sig) {
    (void)sig;
    floodStop = 1;
}

/* The flood's child: connect and close (every other one with a reset),
 * FLOOD_RATE a second, until SIGTERM, FLOOD_MAX connections or
 * FLOOD_MAX_MS. Writes how many attempts it made and how many connected
 * to 'out'. */
static void floodChild(const config *cfg, uint32_t port, int out) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = onFloodStop;
    sigaction(SIGTERM, &sa, NULL);
    role = "flood";
    struct addrinfo *res = listenerAddr(cfg, port);
    uint32_t counts[2] = {0, 0};        /* attempts, connected */
    if (res != NULL) {
        int64_t t0 = nowMs();
        struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
        struct linger reset = {.l_onoff = 1, .l_linger = 0};
        while (!floodStop && counts[0] < FLOOD_MAX &&
               nowMs() - t0 < FLOOD_MAX_MS) {
            int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0) break;
            /* A full backlog drops SYNs: bounded by SO_SNDTIMEO. */
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
            if (counts[0] & 1)
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
            if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) counts[1]++;
            close(fd);
            counts[0]++;
            int64_t next = t0 + (int64_t)counts[0] * 1000 / FLOOD_RATE;
            int64_t wait = next - nowMs();
            if (wait > 0) usleep((useconds_t)wait * 1000);
        }
        freeaddrinfo(res);
    }
    ctlWrite(out, counts, sizeof(counts));
}

/* Start the flood's child; *pipeFd reads its counts once it ended. */
static pid_t startFlood(const config *cfg, uint32_t port, int *pipeFd) {
    int p[2];
    if (pipe(p)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        floodChild(cfg, port, p[1]);
        close(p[1]);
        _exit(0);
    }
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        return -1;
    }
    *pipeFd = p[0];
    return pid;
}

/* Stop the flood; 0 if it made enough connections to mean something. */
static int stopFlood(pid_t pid, int pipeFd, int64_t t0) {
    uint32_t counts[2] = {0, 0};
    kill(pid, SIGTERM);
    int got = ctlRead(pipeFd, counts, sizeof(counts), 5000);
    close(pipeFd);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
    int64_t ms = nowMs() - t0;
    if (got || counts[1] < 20) {
        say("FAIL: the flood made %u connections (%u attempts) in %" PRId64
            " ms", counts[1], counts[0], ms);
        return 1;
    }
    say("flood: %u connections (%u attempts, every other one reset) in %"
        PRId64 " ms (ok)", counts[1], counts[0], ms);
    return 0;
}

/* ================================== Donor ================================ */

/* TCP lies: speak the wire format by hand on the connection's socket. */
static int donorLie(const config *cfg, xferConn *c, const xferBlockDesc *desc,
                    uint32_t n) {
    int fd = xferTcpFd(c);
    xferWireRecord h;
    uint32_t block = 0;
    uint64_t off = 0, len = 16;
    if (fd < 0) {
        say("FAIL: the lie cases need --kind tcp");
        return 1;
    }
    /* Blocking writes: each forged message goes out whole, in order (the
     * recipient may hang up early: SIGPIPE is ignored, EPIPE is fine). */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (isCase(cfg, "lie-block")) {
        block = n + 3;
    } else if (isCase(cfg, "lie-offset")) {
        off = desc[0].len + 1;
    } else if (isCase(cfg, "lie-length")) {
        len = desc[0].len + 4096;
    } else {
        len = desc[0].len;      /* lie-summary, lie-overfill: all of it */
    }
    unsigned char *payload = malloc(len);
    memset(payload, 0xee, len);
    h.magic = htobe32(XFER_WIRE_MAGIC);
    h.version = htobe16(XFER_WIRE_VERSION);
    h.type = htobe16(XFER_MSG_DATA);
    h.block = htobe32(block);
    h.status = 0;
    h.offset = htobe64(off);
    h.length = htobe64(len);
    h.digest = 0;
    struct iovec iov[2] = {{&h, sizeof(h)}, {payload, len}};
    say("sending a forged record: block %u offset %" PRIu64 " length %" PRIu64,
        block, off, len);
    ssize_t w = writev(fd, iov, 2);
    (void)w;
    if (isCase(cfg, "lie-overfill")) {
        /* 16 more bytes into the block just filled. */
        unsigned char more[16];
        memset(more, 0x11, sizeof(more));
        h.offset = htobe64(0);
        h.length = htobe64(sizeof(more));
        struct iovec iov3[2] = {{&h, sizeof(h)}, {more, sizeof(more)}};
        say("sending a forged record: 16 more bytes into block 0");
        w = writev(fd, iov3, 2);
        (void)w;
    }
    if (isCase(cfg, "lie-summary")) {
        /* DONE claiming 1 more byte than was sent into block 0. */
        uint64_t cnt = htobe64(len + 1);
        h.type = htobe16(XFER_MSG_DONE);
        h.block = htobe32(1);
        h.offset = htobe64(1);
        h.length = htobe64(len + 1);
        struct iovec iov2[2] = {{&h, sizeof(h)}, {&cnt, 8}};
        w = writev(fd, iov2, 2);
        (void)w;
    }
    free(payload);
    /* Let the recipient read it all before the connection closes. */
    char buf[256];
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, cfg->timeoutMs) > 0) {
        ssize_t r = read(fd, buf, sizeof(buf));
        (void)r;
    }
    return 0;
}

static int runDonor(const config *cfg, int ctl, const char *token) {
    char err[XFER_ERR_LEN];
    int ok = 0;
    uint32_t n, rn = 0;
    uint32_t port;
    uint64_t *sizes = makeSizes(cfg, &n);
    unsigned char **mem = calloc(n, sizeof(*mem));
    xferBlockDesc *desc = NULL;
    xferSegment *segs = NULL;
    xferConn *c = NULL;
    size_t nseg = 0;
    int held = -1, floodFd = -1;
    pid_t flood = -1;
    int64_t floodT0 = 0;

    if (ctlRead(ctl, &port, sizeof(port), cfg->timeoutMs + 5000)) {
        say("FAIL: no port from the recipient");
        goto out;
    }
    if (isStranger(cfg) && !isCase(cfg, "flood") && playStranger(cfg, port, &held))
        goto out;
    if (isCase(cfg, "flood")) {
        floodT0 = nowMs();
        if ((flood = startFlood(cfg, port, &floodFd)) < 0) {
            say("FAIL: cannot start the flood: %s", strerror(errno));
            goto out;
        }
        usleep(200 * 1000);
    }
    /* short-waits: let the recipient go through many of its waits first. */
    if (isCase(cfg, "short-waits")) usleep(200 * 1000);
    if (isCase(cfg, "wrong-token")) {
        char bad[XFER_TOKEN_LEN + 1];
        xferGenerateToken(bad, NULL);
        c = xferConnect(cfg->kind, cfg->bind, (int)port, bad, cfg->donorBind,
                        cfg->timeoutMs, err);
        if (c || !strstr(err, "token mismatch")) {
            say("FAIL: a wrong token was %s", c ? "accepted" : err);
            goto out;
        }
        say("wrong token refused: \"%s\" (ok); connecting again", err);
    }
    c = xferConnect(cfg->kind, cfg->bind, (int)port, token, cfg->donorBind,
                    cfg->timeoutMs, err);
    if (c == NULL) {
        say("FAIL: connect: %s", err);
        goto out;
    }
    say("connected to %s over %s%s%s", xferConnPeer(c),
        xferKindName(xferConnKind(c)), xferConnNote(c)[0] ? "; auto: " : "",
        xferConnNote(c));
    xferSetOptions(c, &cfg->opts);

    if (ctlRead(ctl, &rn, sizeof(rn), cfg->timeoutMs) || rn != n) {
        say("FAIL: no block descriptors from the recipient");
        goto out;
    }
    desc = calloc(n, sizeof(*desc));
    if (ctlRead(ctl, desc, sizeof(*desc) * n, cfg->timeoutMs)) {
        say("FAIL: no block descriptors from the recipient");
        goto out;
    }
    if (isLie(cfg)) {
        ok = donorLie(cfg, c, desc, n) == 0;
        goto out;
    }
    if (isCase(cfg, "rdma-overrun")) {
        /* A descriptor forged 4 KB longer than block 0 really is: the
         * recipient's NIC must refuse the WRITE (its MR ends there). */
        uint64_t big = desc[0].len + 4096;
        unsigned char *buf = malloc(big);
        memset(buf, 0xee, big);
        const void *a[1] = {buf};
        uint64_t l[1] = {big};
        xferBlockDesc forged = desc[0];
        forged.len = big;
        xferSegment sg = {buf, big, &forged, 0};
        int rc = xferRegisterSendBlocks(c, a, l, 1, err);
        if (rc == 0) {
            say("writing %" PRIu64 " bytes into block 0 of %" PRIu64
                " bytes", big, desc[0].len);
            rc = xferWriteBlocks(c, &sg, 1, err);
            if (rc == 0) rc = xferFinish(c, err);
        }
        if (rc == 0) {
            say("FAIL: writing past the recipient's block succeeded");
        } else {
            say("writing past the recipient's block: \"%s\" (ok)", err);
            ok = 1;
        }
        xferClose(c);
        c = NULL;
        free(buf);
        goto out;
    }
    if (isCase(cfg, "timeout")) {
        say("staying silent for %d ms", 1500 + 2000);
        usleep((1500 + 2000) * 1000);
        ok = 1;
        goto out;
    }

    /* Blocks, pattern, segments cut at random points, shuffled. */
    uint64_t s = cfg->seed ^ 0xd0d0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        mem[i] = malloc(sizes[i]);
        fillPattern(mem[i], sizes[i], blockSeed(cfg, i));
        total += sizes[i];
    }
    size_t cap = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t k = rnd(&s, 1, cfg->pieces);
        if (k > sizes[i]) k = sizes[i];
        /* k-1 distinct-ish cut points, sorted: simple with rejection. */
        uint64_t *cuts = malloc(sizeof(uint64_t) * (k + 1));
        cuts[0] = 0;
        for (uint64_t j = 1; j < k; j++) cuts[j] = rnd(&s, 1, sizes[i] - 1);
        cuts[k] = sizes[i];
        for (uint64_t a = 1; a < k; a++)          /* insertion sort */
            for (uint64_t b = a; b > 1 && cuts[b - 1] > cuts[b]; b--) {
                uint64_t t = cuts[b];
                cuts[b] = cuts[b - 1];
                cuts[b - 1] = t;
            }
        for (uint64_t j = 0; j < k; j++) {
            if (cuts[j + 1] == cuts[j]) continue;
            if (nseg == cap) {
                cap = cap ? cap * 2 : 256;
                segs = realloc(segs, cap * sizeof(*segs));
            }
            segs[nseg].local = mem[i] + cuts[j];
            segs[nseg].len = cuts[j + 1] - cuts[j];
            segs[nseg].remote = &desc[i];
            segs[nseg].remoteOffset = cuts[j];
            nseg++;
        }
        free(cuts);
    }
    for (size_t i = nseg; i > 1; i--) {
        size_t j = (size_t)rnd(&s, 0, i - 1);
        xferSegment t = segs[i - 1];
        segs[i - 1] = segs[j];
        segs[j] = t;
    }
    if (xferRegisterSendBlocks(c, (const void *const *)mem, sizes, n, err)) {
        say("FAIL: register: %s", err);
        goto out;
    }
    say("%u blocks, %" PRIu64 " bytes, %zu segments", n, total, nseg);

    int64_t t0 = nowMs();
    size_t done = 0;
    while (done < nseg) {
        size_t batch = WRITE_BATCH;
        if (isCase(cfg, "kill-donor") && nseg / 4 < batch)
            batch = nseg / 4 ? nseg / 4 : 1;
        size_t k = nseg - done < batch ? nseg - done : batch;
        if (isCase(cfg, "kill-donor") && done >= nseg / 2) {
            say("killing myself with SIGKILL after %zu of %zu segments", done,
                nseg);
            raise(SIGKILL);
        }
        if (xferWriteBlocks(c, segs + done, k, err)) break;
        done += k;
    }
    int rc = done < nseg ? -1 : xferFinish(c, err);
    int64_t ms = nowMs() - t0;
    if (isCase(cfg, "kill-recipient")) {
        if (rc == 0 || ms >= cfg->timeoutMs + 3000) {
            say("FAIL: recipient killed: %s after %" PRId64 " ms",
                rc ? err : "transfer reported complete", ms);
            goto out;
        }
        say("recipient killed: \"%s\" after %" PRId64 " ms (ok)", err, ms);
        ok = 1;
        goto out;
    }
    if (rc) {
        say("FAIL: transfer: %s", err);
        goto out;
    }
    printStats(c, total, ms);
    if (held >= 0) {
        /* Dropped at the latest when the donor was accepted. */
        int64_t closed = waitClosed(held, 1000);
        close(held);
        held = -1;
        if (closed < 0) {
            say("FAIL: a silent stranger is still connected after the transfer");
            goto out;
        }
        say("the second silent stranger was dropped (ok)");
    }
    if (flood > 0) {
        int bad = stopFlood(flood, floodFd, floodT0);
        flood = -1;
        if (bad) goto out;
    }
    if (xferConnKind(c) == XFER_KIND_RDMA) {
        xferStats st;
        xferGetStats(c, &st);
        if (st.wr_posted < nseg || st.chains_posted == 0 ||
            st.rdma_bytes_written != total) {
            say("FAIL: RDMA stats do not add up");
            goto out;
        }
    }
    say("transfer accepted by the recipient");
    ok = 1;

out:
    if (held >= 0) close(held);
    if (flood > 0 && stopFlood(flood, floodFd, floodT0)) ok = 0;
    xferClose(c);
    for (uint32_t i = 0; i < n; i++) free(mem[i]);
    free(mem);
    free(desc);
    free(segs);
    free(sizes);
    return ok ? 0 : 1;
}

/* ============================== Entry point ============================== */

static void usage(void) {
    fprintf(stderr,
"usage: migtransport-test [--case NAME] [--kind tcp|rdma|auto] [--bind ADDR]\n"
"                         [--donor-bind ADDR] [--port P] [--blocks N]\n"
"                         [--total BYTES] [--pieces K] [--seed X]\n"
"                         [--max-chain M] [--max-wr-bytes B] [--timeout MS]\n"
"cases: happy wrong-token no-listener kill-donor kill-recipient lie-block\n"
"       lie-offset lie-length lie-summary lie-overfill timeout rdma-overrun\n"
"       short-waits stranger-garbage stranger-token stranger-short\n"
"       stranger-silent flood\n"
"defaults: --case happy --kind tcp --bind 127.0.0.1 --port 0 --blocks 48\n"
"          --pieces 40 --seed 1 --timeout 10000; sizes take k/m/g\n");
}

static int parseNum(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-' || !*s) return -1;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s) return -1;
    int shift = 0;
    if (*end == 'k' || *end == 'K') shift = 10, end++;
    else if (*end == 'm' || *end == 'M') shift = 20, end++;
    else if (*end == 'g' || *end == 'G') shift = 30, end++;
    if (*end) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

int main(int argc, char **argv) {
    config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.caseName = "happy";
    cfg.kind = XFER_KIND_TCP;
    cfg.bind = "127.0.0.1";
    cfg.blocks = 48;
    cfg.pieces = 40;
    cfg.seed = 1;
    cfg.timeoutMs = 10000;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);

    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        uint64_t v = 0;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage();
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "migtransport-test: %s needs a value\n", o);
            return 64;
        }
        const char *a = argv[++i];
        int numeric = strcmp(o, "--case") && strcmp(o, "--kind") &&
                      strcmp(o, "--bind") && strcmp(o, "--donor-bind");
        if (numeric && parseNum(a, &v)) {
            fprintf(stderr, "migtransport-test: bad number for %s: %s\n", o, a);
            return 64;
        }
        if (!strcmp(o, "--case")) cfg.caseName = a;
        else if (!strcmp(o, "--kind")) {
            if (xferParseKind(a, &cfg.kind)) {
                fprintf(stderr, "migtransport-test: --kind tcp|rdma|auto\n");
                return 64;
            }
        } else if (!strcmp(o, "--bind")) cfg.bind = a;
        else if (!strcmp(o, "--donor-bind")) cfg.donorBind = a;
        else if (!strcmp(o, "--port") && v <= 65535) cfg.port = (int)v;
        else if (!strcmp(o, "--blocks") && v >= 1 && v <= 100000)
            cfg.blocks = (uint32_t)v;
        else if (!strcmp(o, "--total")) cfg.total = v;
        else if (!strcmp(o, "--pieces") && v >= 1 && v <= 100000)
            cfg.pieces = (uint32_t)v;
        else if (!strcmp(o, "--seed")) cfg.seed = v;
        else if (!strcmp(o, "--max-chain") && v <= UINT32_MAX)
            cfg.opts.maxChain = (uint32_t)v;
        else if (!strcmp(o, "--max-wr-bytes")) cfg.opts.maxWrBytes = v;
        else if (!strcmp(o, "--timeout") && v >= 100 && v <= 3600000)
            cfg.timeoutMs = (int)v;
        else {
            fprintf(stderr, "migtransport-test: unknown option or bad value: "
                    "%s %s\n", o, a);
            usage();
            return 64;
        }
    }
    static const char *cases[] = {"happy", "wrong-token", "no-listener",
        "kill-donor", "kill-recipient", "lie-block", "lie-offset",
        "lie-length", "lie-summary", "lie-overfill", "timeout", "rdma-overrun",
        "short-waits", "stranger-garbage", "stranger-token", "stranger-short",
        "stranger-silent", "flood", NULL};
    int known = 0;
    for (int i = 0; cases[i]; i++) known |= !strcmp(cases[i], cfg.caseName);
    if (!known) {
        fprintf(stderr, "migtransport-test: unknown case %s\n", cfg.caseName);
        usage();
        return 64;
    }
    printf("migtransport-test: case %s, kind %s, rdma compiled %s\n",
           cfg.caseName, xferKindName(cfg.kind),
           xferRdmaCompiled() ? "yes" : "no");

    int result;
    char why[2 * XFER_ERR_LEN] = "";
    if (!strcmp(cfg.caseName, "no-listener")) {
        char err[XFER_ERR_LEN];
        if (cfg.port == 0) {
            fprintf(stderr, "migtransport-test: no-listener needs --port\n");
            return 64;
        }
        int64_t t0 = nowMs();
        xferConn *c = xferConnect(cfg.kind, cfg.bind, cfg.port, "0123456789",
                                  cfg.donorBind, cfg.timeoutMs, err);
        int64_t ms = nowMs() - t0;
        if (c == NULL && strstr(err, "no listener")) {
            say("connect with nobody listening: \"%s\" after %" PRId64 " ms "
                "(ok)", err, ms);
            result = 0;
        } else {
            snprintf(why, sizeof(why), "connect with nobody listening: %s",
                     c ? "succeeded" : err);
            result = 1;
        }
        xferClose(c);
    } else {
        char token[XFER_TOKEN_LEN + 1];
        int sp[2];
        if (xferGenerateToken(token, why) ||
            socketpair(AF_UNIX, SOCK_STREAM, 0, sp)) {
            fprintf(stderr, "migtransport-test: setup: %s\n",
                    why[0] ? why : strerror(errno));
            return 1;
        }
        /* Fork before any RDMA call: verbs state must not be inherited. */
        int childIsDonor = strcmp(cfg.caseName, "kill-recipient") != 0;
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            close(sp[0]);
            role = childIsDonor ? "donor" : "recipient";
            int rc = childIsDonor ? runDonor(&cfg, sp[1], token)
                                  : runRecipient(&cfg, sp[1], token);
            close(sp[1]);
            exit(rc);
        }
        close(sp[1]);
        role = childIsDonor ? "recipient" : "donor";
        int rc = childIsDonor ? runRecipient(&cfg, sp[0], token)
                              : runDonor(&cfg, sp[0], token);
        close(sp[0]);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        int killedCase = !strcmp(cfg.caseName, "kill-donor") ||
                         !strcmp(cfg.caseName, "kill-recipient");
        int childOk = killedCase ?
            (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) :
            (WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (rc)
            snprintf(why, sizeof(why), "the %s failed (see above)", role);
        else if (!childOk)
            snprintf(why, sizeof(why), "the %s %s", childIsDonor ? "donor" :
                     "recipient", WIFSIGNALED(st) ? "died of a signal" :
                     "failed (see above)");
        result = rc || !childOk;
    }
    if (result == 0)
        printf("migtransport-test: %s (%s): PASS\n", cfg.caseName,
               xferKindName(cfg.kind));
    else
        printf("migtransport-test: %s (%s): FAIL: %s\n", cfg.caseName,
               xferKindName(cfg.kind), why);
    return result ? 1 : 0;
}
