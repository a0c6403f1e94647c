/* xfertcp.c -- block transport of slot migration: the TCP implementation,
 * xferTcpOps. The facade (xfer.c) calls it for listeners and
 * connections of kind XFER_KIND_TCP, and for "auto" when RDMA is not
 * usable; the interface and the wire format are described in
 * xfer.h, what the transports share in xferimpl.h.
 *
 * TCP protocol, one connection, the donor speaks first:
 *
 *  1. donor -> recipient: HELLO (xferWireHello) carrying the token.
 *  2. recipient -> donor: WELCOME with XFER_STATUS_OK, or XFER_STATUS_BAD_TOKEN
 *     after which the recipient closes the connection. A peer that sends
 *     anything but a HELLO, closes, or has not sent all of its HELLO
 *     XFER_HANDSHAKE_MS after it connected is dropped too.
 *  3. donor -> recipient: any number of DATA records, a xferWireRecord
 *     header followed by its payload, sent with writev() straight from
 *     the donor's blocks (up to IOV_MAX iovecs per call). The recipient
 *     reads the stream into a private buffer, validates each header's
 *     block id, offset and length against its registration, and only then
 *     stores the payload in the block: copied from that buffer, or, for
 *     the rest of a long one, read straight into the block (readv() of the
 *     payload plus the buffer). Runs of small records cost no system call
 *     each, long payloads no copy, and no byte of a header can ever land
 *     in block memory.
 *  4. donor -> recipient: DONE, the summary (total bytes, segments, digest
 *     of the extent list, then one big endian u64 per remote block: bytes
 *     written into it). The recipient compares it with what it counted.
 *  5. recipient -> donor: VERDICT, status plus an error text on failure.
 *
 * The listener survives strangers (xfer.h, "Strangers"): it keeps
 * up to XFER_PENDING_MAX accepted peers whose HELLO is still incomplete
 * (struct xferTcpPending, in the listener, so that they carry over from
 * one xferAccept() call to the next) and polls them together with the
 * listening socket: one peer's silence delays nobody, each is dropped at
 * its own deadline, and when more are pending the oldest goes. A peer is
 * read only up to the end of its HELLO (the donor sends nothing more
 * before our WELCOME), and dropped at its first byte that cannot start
 * one.
 *
 * All sockets are non-blocking; every wait is a poll() bounded by a
 * deadline, so no call can hang on a silent peer. Writes use sendmsg()
 * with MSG_NOSIGNAL: a dead peer is an EPIPE error, not a SIGPIPE. No
 * read or write system call moves more than XFER_TCP_IO_MAX bytes (why:
 * at that definition).
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "xferimpl.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif
/* iovecs per writev(): headers and payloads alternate. */
#define XFER_TCP_IOV (IOV_MAX & ~1)
/* The recipient's read-ahead buffer, and the shortest rest of a payload it
 * reads straight into the block rather than through that buffer
 * (xferTcpWaitTransfer). */
#define XFER_TCP_STAGE (256 * 1024)
#define XFER_TCP_DIRECT_MIN (64 * 1024)
_Static_assert(XFER_TCP_STAGE >= 2 * XFER_TCP_DIRECT_MIN, "a stage holds small payloads whole");
/* The most bytes one read or write system call of a migration thread
 * moves. Kernels built without preemption (PREEMPT_NONE, and in effect
 * voluntary) only switch threads when the running one leaves the kernel
 * or sleeps, whatever its priority: a recv() of 4 MB into fresh blocks
 * (a page fault every 4 KB inside the copy) or a sendmsg() of 4 MB over
 * loopback (the receiving side's processing runs in the sender's
 * context) keeps the CPU for milliseconds, and a main thread woken by a
 * client on that CPU waits for it even with the migration thread in the
 * idle class. 128 KB is some tens of microseconds of copying; the extra
 * system calls cost a few ms per GB. */
#define XFER_TCP_IO_MAX (128 * 1024)
/* Largest payload of one DATA record; bigger segments are split. */
#define XFER_TCP_MAX_RECORD (1ULL << 30)
/* Longest error text a VERDICT may carry. */
#define XFER_VERDICT_TEXT 200

/* Linux's madvise() advice that faults a range in, writable (5.14 and
 * later; older kernels refuse it with EINVAL). Its value is the kernel's
 * ABI, for C libraries that do not name it yet. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* ============================ TCP plumbing =============================== */

/* Fault in the pages a payload is about to be read into, all at once.
 * Blocks are fresh memory, and the recipient's socket reads took a page
 * fault every 4 KiB inside the kernel's copy: 72 % of the recipient
 * thread's time in a rebalance (perf, docs/DESIGN.md "What receiving and
 * patching cost"). One
 * madvise(MADV_POPULATE_WRITE) of the range costs about a quarter less
 * than those faults (the pages are the same; the kernel does not enter and
 * leave a fault for each). It yields the CPU between pages as a read
 * does. Best effort: a kernel that refuses it (before 5.14) is not asked
 * again on this connection, and the read faults the pages in as before.
 * [p, p+len) lies in a registered block, whose pages are whole. */
static void xferTcpPrefault(xferConn *c, unsigned char *p, uint64_t len) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo, hi;

    if (c->noPrefault || len < XFER_TCP_DIRECT_MIN) return;
    lo = (uintptr_t)p & ~(page - 1);
    hi = ((uintptr_t)p + len + page - 1) & ~(page - 1);
    if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == -1 && errno == EINVAL)
        c->noPrefault = 1;
}

static int xferSetNonBlock(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0) return -1;
    return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/* poll() one fd until 'events' or the deadline. 1 ready, 0 timeout, -1
 * error (errno). */
static int xferPollFd(int fd, short events, int64_t deadline) {
    for (;;) {
        int64_t left = deadline - xferNowMs();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (r > 0) return 1;
        if (r == 0) return 0;
        if (errno != EINTR) return -1;
    }
}

static void xferFormatSockaddr(const struct sockaddr *sa, char *buf,
                               size_t len) {
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s->sin_addr, host, sizeof(host));
        port = ntohs(s->sin_port);
        snprintf(buf, len, "%s:%d", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof(host));
        port = ntohs(s->sin6_port);
        snprintf(buf, len, "[%s]:%d", host, port);
    } else {
        snprintf(buf, len, "?");
    }
}

/* One read() or readv() (of one or two iovecs, at most XFER_TCP_IO_MAX bytes
 * in all) that returns data: waits (poll, up to the deadline) while there
 * is none. Returns the byte count, 0 if the peer closed the
 * connection, or -1 with err set (what: what we wait for, and received:
 * the payload bytes received so far, UINT64_MAX for none to tell, for
 * messages). */
static ssize_t xferTcpRecvSome(xferConn *c, struct iovec *iov, int iovcnt,
                               int64_t deadline, int timeoutMs, const char *what,
                               uint64_t received, char *err) {
    /* At most XFER_TCP_IO_MAX bytes per call: the first iovec first. */
    struct iovec v[2];
    v[0] = iov[0];
    if (v[0].iov_len >= XFER_TCP_IO_MAX) {
        v[0].iov_len = XFER_TCP_IO_MAX;
        iovcnt = 1;
    } else if (iovcnt == 2) {
        v[1] = iov[1];
        if (v[1].iov_len > XFER_TCP_IO_MAX - v[0].iov_len)
            v[1].iov_len = XFER_TCP_IO_MAX - v[0].iov_len;
    }
    for (;;) {
        ssize_t r = iovcnt == 1 ? read(c->fd, v[0].iov_base, v[0].iov_len)
                                : readv(c->fd, v, iovcnt);
        if (r >= 0) {
            c->stats.tcp_bytes_received += (uint64_t)r;
            return r;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            xferSetError(err, "tcp: reading %s from %s: %s", what, c->peer,
                         strerror(errno));
            return -1;
        }
        int p = xferPollFd(c->fd, POLLIN, deadline);
        if (p == 0) {
            char got[48] = "";
            if (received != UINT64_MAX)
                snprintf(got, sizeof(got), " (%" PRIu64 " bytes received)", received);
            xferSetError(err, "tcp: timeout after %d ms waiting for %s from %s%s",
                         timeoutMs, what, c->peer, got);
            return -1;
        }
        if (p < 0) {
            xferSetError(err, "tcp: poll: %s", strerror(errno));
            return -1;
        }
    }
}

/* Read exactly len bytes before the deadline. 'what' names the thing read
 * in errors. */
static int xferTcpReadFull(xferConn *c, void *buf, size_t len, int64_t deadline,
                           int timeoutMs, const char *what, char *err) {
    unsigned char *p = buf;
    while (len) {
        struct iovec v = {p, len};
        ssize_t n = xferTcpRecvSome(c, &v, 1, deadline, timeoutMs, what,
                                    UINT64_MAX, err);
        if (n < 0) return -1;
        if (n == 0) {
            xferSetError(err, "tcp: %s closed the connection while we waited "
                         "for %s", c->peer, what);
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Send an iovec array completely, resuming after partial writes; each wait
 * for the socket to drain is bounded by the I/O timeout (no progress for
 * that long is an error). The array is modified. */
static int xferTcpWritev(xferConn *c, struct iovec *iov, int iovcnt,
                         const char *what, char *err) {
    while (iovcnt > 0) {
        /* At most XFER_TCP_IO_MAX bytes per call: the iovecs that fit,
         * or the start of the first one. */
        struct iovec first = iov[0];
        size_t bytes = iov[0].iov_len;
        int cnt = 1;
        while (cnt < iovcnt && bytes + iov[cnt].iov_len <= XFER_TCP_IO_MAX)
            bytes += iov[cnt++].iov_len;
        if (first.iov_len > XFER_TCP_IO_MAX) first.iov_len = XFER_TCP_IO_MAX;
        struct msghdr mh;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = cnt == 1 ? &first : iov;
        mh.msg_iovlen = (size_t)cnt;
        ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int r = xferPollFd(c->fd, POLLOUT, xferNowMs() + c->timeoutMs);
                if (r == 0) {
                    xferSetError(err, "tcp: timeout after %d ms sending %s to "
                                 "%s (the peer reads nothing)", c->timeoutMs,
                                 what, c->peer);
                    return -1;
                }
                if (r < 0) {
                    xferSetError(err, "tcp: poll: %s", strerror(errno));
                    return -1;
                }
                continue;
            }
            xferSetError(err, "tcp: sending %s to %s: %s%s", what, c->peer,
                         strerror(errno), errno == EPIPE || errno == ECONNRESET
                         ? " (the recipient closed the connection)" : "");
            return -1;
        }
        c->stats.tcp_bytes_sent += (uint64_t)n;
        size_t left = (size_t)n;
        while (iovcnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0 && left) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

static int xferTcpWriteFull(xferConn *c, const void *buf, size_t len,
                            const char *what, char *err) {
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    return xferTcpWritev(c, &iov, 1, what, err);
}

/* ============================= TCP listener ============================== */

/* An accepted peer whose HELLO is not complete yet. */
typedef struct xferTcpPending {
    int fd;
    int64_t deadline;           /* dropped then if still incomplete */
    int boundMs;                /* its handshake bound, for the message */
    size_t got;                 /* bytes of hello[] received */
    unsigned char hello[sizeof(xferWireHello)];
    char peer[80];
} xferTcpPending;

static int xferTcpListen(xferListener *l, const char *bindaddr, int port,
                         char *err) {
    struct addrinfo hints, *res = NULL, *ai;
    char portstr[16];
    int rv, fd = -1, lastErrno = 0;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(portstr, sizeof(portstr), "%d", port);
    if ((rv = getaddrinfo(bindaddr, portstr, &hints, &res)) != 0) {
        xferSetError(err, "tcp: cannot resolve bind address %s: %s",
                     bindaddr ? bindaddr : "*", gai_strerror(rv));
        return -1;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            lastErrno = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd, XFER_LISTEN_BACKLOG) == 0)
            break;
        lastErrno = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        xferSetError(err, "tcp: cannot listen on %s:%d: %s",
                     bindaddr ? bindaddr : "*", port, strerror(lastErrno));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (xferSetNonBlock(fd) ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        xferSetError(err, "tcp: listener setup on %s:%d: %s",
                     bindaddr ? bindaddr : "*", port, strerror(errno));
        close(fd);
        return -1;
    }
    l->pending = calloc(XFER_PENDING_MAX, sizeof(*l->pending));
    if (l->pending == NULL) {
        xferSetError(err, "tcp: out of memory");
        close(fd);
        return -1;
    }
    l->port = ntohs(ss.ss_family == AF_INET6 ?
                    ((struct sockaddr_in6 *)&ss)->sin6_port :
                    ((struct sockaddr_in *)&ss)->sin_port);
    l->fd = fd;
    return 0;
}

/* What xferTcpServe() did with a pending peer. */
enum { XFER_HS_WAIT, XFER_HS_DROPPED, XFER_HS_DONE, XFER_HS_FATAL };

/* Remove pending peer i (closing its socket unless it was handed on). */
static void xferTcpUnpend(xferListener *l, int i, int closeFd) {
    if (closeFd) close(l->pending[i].fd);
    memmove(&l->pending[i], &l->pending[i + 1],
            (size_t)(l->npending - i - 1) * sizeof(*l->pending));
    l->npending--;
}

/* Drop every pending peer, counted as refused ('why' says why). */
static void xferTcpDropAllPending(xferListener *l, const char *why) {
    while (l->npending > 0) {
        xferListenerRefuse(l, "tcp: %s: dropped (%s)", l->pending[0].peer, why);
        xferTcpUnpend(l, 0, 1);
    }
}

/* Read what pending peer i has sent of its HELLO, without waiting, and
 * judge it once it is whole. XFER_HS_WAIT: incomplete, keep it; DROPPED:
 * refused and removed (a wrong token is told so first); DONE: *out is its
 * connection, WELCOME sent; FATAL: our own failure, err set. */
static int xferTcpServe(xferListener *l, int i, int ioTimeoutMs, xferConn **out,
                        char *err) {
    xferTcpPending *p = &l->pending[i];
    /* Any HELLO starts like this one: magic, version, type. */
    xferWireHello w, h;
    const size_t head = offsetof(xferWireHello, status);
    xferEncodeHello(&w, XFER_MSG_HELLO, 0, NULL);

    while (p->got < sizeof(p->hello)) {
        ssize_t n = read(p->fd, p->hello + p->got, sizeof(p->hello) - p->got);
        if (n > 0) {
            size_t was = p->got;
            p->got += (size_t)n;
            size_t cmp = p->got < head ? p->got : head;
            if (was < cmp && memcmp(p->hello, &w, cmp)) {
                xferListenerRefuse(l, "tcp: %s sent %zu bytes that do not "
                                   "start a migration HELLO (%02x%02x%02x%02x"
                                   "...): dropped", p->peer, p->got,
                                   p->hello[0], p->hello[1],
                                   p->got > 2 ? p->hello[2] : 0,
                                   p->got > 3 ? p->hello[3] : 0);
                xferTcpUnpend(l, i, 1);
                return XFER_HS_DROPPED;
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return XFER_HS_WAIT;
        if (n == 0)
            xferListenerRefuse(l, "tcp: %s closed the connection after %zu of "
                               "the %zu bytes of a HELLO: dropped", p->peer,
                               p->got, sizeof(p->hello));
        else
            xferListenerRefuse(l, "tcp: reading the HELLO of %s: %s: dropped",
                               p->peer, strerror(errno));
        xferTcpUnpend(l, i, 1);
        return XFER_HS_DROPPED;
    }

    if (xferDecodeHello(p->hello, sizeof(p->hello), XFER_MSG_HELLO, &h)) {
        /* Its head was checked as it came: defensive only. */
        xferListenerRefuse(l, "tcp: %s sent a malformed HELLO: dropped",
                           p->peer);
        xferTcpUnpend(l, i, 1);
        return XFER_HS_DROPPED;
    }
    if (!xferTokenEqual(h.token, l->token)) {
        /* Told so, best effort: a 48 byte write to a fresh socket fits. */
        xferEncodeHello(&w, XFER_MSG_WELCOME, XFER_STATUS_BAD_TOKEN, NULL);
        ssize_t sent = send(p->fd, &w, sizeof(w), MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)sent;
        xferListenerRefuse(l, "tcp: token mismatch: %s presented a wrong "
                           "token: dropped", p->peer);
        xferTcpUnpend(l, i, 1);
        return XFER_HS_DROPPED;
    }
    xferConn *c = xferNewConn(&xferTcpOps, 0, ioTimeoutMs);
    if (c == NULL) {
        xferTcpUnpend(l, i, 1);
        xferSetError(err, "tcp: out of memory");
        return XFER_HS_FATAL;
    }
    c->fd = p->fd;
    snprintf(c->peer, sizeof(c->peer), "%s", p->peer);
    xferTcpUnpend(l, i, 0);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char werr[XFER_ERR_LEN];
    xferEncodeHello(&w, XFER_MSG_WELCOME, XFER_STATUS_OK, NULL);
    if (xferTcpWriteFull(c, &w, sizeof(w), "WELCOME", werr)) {
        /* It presented the token and left: nothing to do with it. */
        xferListenerRefuse(l, "%s", werr);
        xferClose(c);
        return XFER_HS_DROPPED;
    }
    *out = c;
    return XFER_HS_DONE;
}

/* Accept what is queued on the listening socket (up to a burst, so that
 * the pending peers get their turn), serving each new peer at once: a
 * donor's HELLO is usually there already, a closed peer's EOF too. When
 * XFER_PENDING_MAX peers are pending, they are served first and the oldest
 * dropped if none finished. Returns like xferTcpServe(); XFER_HS_WAIT when
 * no donor was completed. */
static int xferTcpAcceptBurst(xferListener *l, int ioTimeoutMs, xferConn **out,
                              char *err) {
    int hsMs = ioTimeoutMs < XFER_HANDSHAKE_MS ? ioTimeoutMs : XFER_HANDSHAKE_MS;
    for (int k = 0; k < 4 * XFER_PENDING_MAX; k++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            switch (errno) {
            case EINTR: continue;
            case EAGAIN:
#if EWOULDBLOCK != EAGAIN
            case EWOULDBLOCK:
#endif
                return XFER_HS_WAIT;
            /* The peer's problem, not the listener's (accept(2) says to
             * retry on these). */
            case ECONNABORTED: case EPROTO: case ENETDOWN: case ENOPROTOOPT:
            case EHOSTDOWN: case ENONET: case EHOSTUNREACH: case EOPNOTSUPP:
            case ENETUNREACH: case ETIMEDOUT: case EPERM:
                xferListenerRefuse(l, "tcp: a connection to port %d failed "
                                   "before it was accepted: %s", l->port,
                                   strerror(errno));
                continue;
            }
            xferSetError(err, "tcp: accept on port %d: %s%s", l->port,
                         strerror(errno), errno == EMFILE || errno == ENFILE ?
                         " (raise the limit of open files of the process)" : "");
            return XFER_HS_FATAL;
        }
        if (l->npending == XFER_PENDING_MAX) {
            for (int i = l->npending - 1; i >= 0; i--) {
                int r = xferTcpServe(l, i, ioTimeoutMs, out, err);
                if (r == XFER_HS_DONE || r == XFER_HS_FATAL) {
                    /* The peer just accepted is dropped unheard, and
                     * counted like every other refused one. */
                    char peer[80];
                    xferFormatSockaddr((struct sockaddr *)&ss, peer, sizeof(peer));
                    xferListenerRefuse(l, "tcp: %s: dropped (%s)", peer, r == XFER_HS_DONE ?
                                       "the donor was accepted" : "the listener failed");
                    close(fd);
                    return r;
                }
            }
            if (l->npending == XFER_PENDING_MAX) {
                xferListenerRefuse(l, "tcp: %s: dropped, the oldest of %d "
                                   "peers in their handshake",
                                   l->pending[0].peer, XFER_PENDING_MAX);
                xferTcpUnpend(l, 0, 1);
            }
        }
        xferTcpPending *p = &l->pending[l->npending++];
        memset(p, 0, sizeof(*p));
        p->fd = fd;
        p->deadline = xferNowMs() + hsMs;
        p->boundMs = hsMs;
        xferFormatSockaddr((struct sockaddr *)&ss, p->peer, sizeof(p->peer));
        int r = xferTcpServe(l, l->npending - 1, ioTimeoutMs, out, err);
        if (r == XFER_HS_DONE || r == XFER_HS_FATAL) return r;
    }
    return XFER_HS_WAIT;
}

/* Wait until a peer presents the right token, or the wait ends. The
 * listening socket and every pending peer are polled together; each peer
 * is dropped at its own handshake deadline, and those still pending stay
 * in the listener for the next call (a donor that connected at the end of
 * this wait is served by the next). */
static xferConn *xferTcpAccept(xferListener *l, int waitMs, int ioTimeoutMs,
                               char *err) {
    int64_t deadline = xferNowMs() + waitMs;
    struct pollfd pfd[1 + XFER_PENDING_MAX];
    xferConn *c = NULL;
    int r;

    for (;;) {
        /* Deadlines: a peer whose bytes arrived while we were not looking
         * still gets them read first. */
        int64_t now = xferNowMs(), wake = deadline;
        for (int i = l->npending - 1; i >= 0; i--) {
            xferTcpPending *p = &l->pending[i];
            if (p->deadline > now) continue;
            r = xferTcpServe(l, i, ioTimeoutMs, &c, err);
            if (r == XFER_HS_DONE) goto accepted;
            if (r == XFER_HS_FATAL) return NULL;
            if (r == XFER_HS_WAIT) {
                xferListenerRefuse(l, "tcp: %s sent %zu of the %zu bytes of a "
                                   "HELLO in %d ms: dropped", p->peer, p->got,
                                   sizeof(p->hello), p->boundMs);
                xferTcpUnpend(l, i, 1);
            }
        }
        if (now >= deadline) {
            xferSetError(err, "tcp: timeout after %d ms waiting for the donor "
                         "to connect to port %d", waitMs, l->port);
            return NULL;
        }
        pfd[0].fd = l->fd;
        pfd[0].events = POLLIN;
        for (int i = 0; i < l->npending; i++) {
            pfd[1 + i].fd = l->pending[i].fd;
            pfd[1 + i].events = POLLIN;
            pfd[1 + i].revents = 0;
            if (l->pending[i].deadline < wake) wake = l->pending[i].deadline;
        }
        int n = l->npending;
        int64_t left = wake - now;
        r = poll(pfd, (nfds_t)(1 + n), left < 0 ? 0 : left > INT_MAX ?
                 INT_MAX : (int)left);
        if (r < 0) {
            if (errno == EINTR) continue;
            xferSetError(err, "tcp: poll: %s", strerror(errno));
            return NULL;
        }
        /* Backwards: removing peer i moves only those after it. */
        for (int i = n - 1; i >= 0; i--) {
            if (!pfd[1 + i].revents) continue;
            r = xferTcpServe(l, i, ioTimeoutMs, &c, err);
            if (r == XFER_HS_DONE) goto accepted;
            if (r == XFER_HS_FATAL) return NULL;
        }
        if (pfd[0].revents & (POLLERR | POLLNVAL)) {
            xferSetError(err, "tcp: the listening socket of port %d failed",
                         l->port);
            return NULL;
        }
        if (pfd[0].revents) {
            r = xferTcpAcceptBurst(l, ioTimeoutMs, &c, err);
            if (r == XFER_HS_DONE) goto accepted;
            if (r == XFER_HS_FATAL) return NULL;
        }
    }

accepted:
    xferTcpDropAllPending(l, "the donor was accepted");
    return c;
}

/* ============================== TCP donor ================================ */

static xferConn *xferTcpConnect(const char *host, int port, const uint8_t *token,
                                const char *bindaddr, int timeoutMs, char *err) {
    int64_t deadline = xferNowMs() + timeoutMs;
    struct addrinfo hints, *res = NULL, *ai;
    char portstr[16];
    int rv, fd = -1;
    char lastErr[XFER_ERR_LEN] = "no address";

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(portstr, sizeof(portstr), "%d", port);
    if ((rv = getaddrinfo(host, portstr, &hints, &res)) != 0) {
        xferSetError(err, "tcp: cannot resolve %s: %s", host, gai_strerror(rv));
        return NULL;
    }
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
                    SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            snprintf(lastErr, sizeof(lastErr), "socket: %s", strerror(errno));
            continue;
        }
        /* Our ephemeral port may lie in the range listeners use: with
         * SO_REUSEADDR its TIME_WAIT does not keep a listener from binding
         * that port after we are gone. */
        int reuse = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof(reuse));
        if (bindaddr && *bindaddr) {
            struct addrinfo bh, *br = NULL;
            memset(&bh, 0, sizeof(bh));
            bh.ai_family = ai->ai_family;
            bh.ai_socktype = SOCK_STREAM;
            bh.ai_flags = AI_PASSIVE;
            if (getaddrinfo(bindaddr, NULL, &bh, &br) != 0 ||
                bind(fd, br->ai_addr, br->ai_addrlen) < 0) {
                snprintf(lastErr, sizeof(lastErr), "cannot bind to %s: %s",
                         bindaddr, br ? strerror(errno) : "unresolvable");
                if (br) freeaddrinfo(br);
                close(fd);
                fd = -1;
                continue;
            }
            freeaddrinfo(br);
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        if (errno == EINPROGRESS) {
            int r = xferPollFd(fd, POLLOUT, deadline);
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (r == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0
                && soerr == 0) break;
            if (r == 0)
                snprintf(lastErr, sizeof(lastErr), "timeout after %d ms",
                         timeoutMs);
            else
                snprintf(lastErr, sizeof(lastErr), "%s%s",
                         strerror(soerr ? soerr : errno),
                         soerr == ECONNREFUSED ? " (no listener)" : "");
        } else {
            snprintf(lastErr, sizeof(lastErr), "%s%s", strerror(errno),
                     errno == ECONNREFUSED ? " (no listener)" : "");
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        xferSetError(err, "tcp: connect to %s:%d failed: %s", host, port,
                     lastErr);
        return NULL;
    }

    xferConn *c = xferNewConn(&xferTcpOps, 1, timeoutMs);
    if (c == NULL) {
        close(fd);
        xferSetError(err, "tcp: out of memory");
        return NULL;
    }
    c->fd = fd;
    snprintf(c->peer, sizeof(c->peer), "%s:%d", host, port);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    xferWireHello w, h;
    xferEncodeHello(&w, XFER_MSG_HELLO, 0, token);
    if (xferTcpWriteFull(c, &w, sizeof(w), "the token (HELLO)", err))
        goto fail;
    if (xferTcpReadFull(c, &w, sizeof(w), deadline, timeoutMs,
                        "the recipient's WELCOME", err)) {
        if (strstr(err ? err : "", "closed the connection"))
            xferSetError(err, "tcp: %s closed the connection before answering "
                         "our token (not a migration listener, or it already "
                         "has its peer)", c->peer);
        goto fail;
    }
    if (xferDecodeHello(&w, sizeof(w), XFER_MSG_WELCOME, &h)) {
        xferSetError(err, "tcp: %s answered with something that is not a "
                     "migration WELCOME", c->peer);
        goto fail;
    }
    if (h.status == XFER_STATUS_BAD_TOKEN) {
        xferSetError(err, "tcp: token mismatch: %s refused our token",
                     c->peer);
        goto fail;
    }
    if (h.status != XFER_STATUS_OK) {
        xferSetError(err, "tcp: %s refused the connection (status %" PRIu32 ")",
                     c->peer, h.status);
        goto fail;
    }
    return c;

fail:
    close(c->fd);
    xferFreeConnCommon(c);
    return NULL;
}

/* Write segments as DATA records: per batch one header array and an
 * iovec array alternating header / payload, handed to writev() in runs of
 * up to IOV_MAX iovecs. Payloads are never copied. */
static int xferTcpWrite(xferConn *c, const xferSegment *segs, size_t n,
                        char *err) {
    size_t maxRecs = XFER_TCP_IOV / 2;
    xferWireRecord *hdrs = malloc(maxRecs * sizeof(*hdrs));
    struct iovec *iov = malloc(XFER_TCP_IOV * sizeof(*iov));
    int rc = -1;
    if (hdrs == NULL || iov == NULL) {
        xferSetError(err, "tcp: out of memory");
        goto out;
    }
    size_t i = 0;
    uint64_t done = 0;      /* bytes of segs[i] already framed */
    while (i < n) {
        size_t nrec = 0;
        while (i < n && nrec < maxRecs) {
            const xferSegment *s = &segs[i];
            uint64_t chunk = s->len - done;
            if (chunk > XFER_TCP_MAX_RECORD) chunk = XFER_TCP_MAX_RECORD;
            xferEncodeRecord(&hdrs[nrec], XFER_MSG_DATA, s->remote->id, 0,
                             s->remoteOffset + done, chunk, 0);
            iov[2 * nrec].iov_base = &hdrs[nrec];
            iov[2 * nrec].iov_len = sizeof(xferWireRecord);
            iov[2 * nrec + 1].iov_base = (char *)s->local + done;
            iov[2 * nrec + 1].iov_len = chunk;
            if (xferAccountExtent(c, s->remote->id, s->remoteOffset + done,
                                  chunk, err)) goto out;
            nrec++;
            done += chunk;
            if (done == s->len) {
                i++;
                done = 0;
            }
        }
        if (xferTcpWritev(c, iov, (int)(2 * nrec), "block data", err))
            goto out;
    }
    rc = 0;
out:
    free(hdrs);
    free(iov);
    return rc;
}

/* DONE: the summary, then wait for the VERDICT. */
static int xferTcpFinish(xferConn *c, char *err) {
    uint32_t n = c->blockBytesLen;
    while (n > 0 && c->blockBytes[n - 1] == 0) n--;
    size_t len = sizeof(xferWireRecord) + (size_t)n * 8;
    unsigned char *buf = malloc(len);
    if (buf == NULL) {
        xferSetError(err, "tcp: out of memory");
        return -1;
    }
    xferEncodeRecord((xferWireRecord *)buf, XFER_MSG_DONE, n, 0,
                     c->stats.segments, c->stats.payload_bytes, c->digest);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t be = htobe64(c->blockBytes[i]);
        memcpy(buf + sizeof(xferWireRecord) + (size_t)i * 8, &be, 8);
    }
    int rc = xferTcpWriteFull(c, buf, len, "the DONE summary", err);
    free(buf);
    if (rc) return -1;

    xferWireRecord w, v;
    int64_t deadline = xferNowMs() + c->timeoutMs;
    if (xferTcpReadFull(c, &w, sizeof(w), deadline, c->timeoutMs,
                        "the recipient's VERDICT", err)) return -1;
    xferDecodeRecord(&w, &v);
    if (v.magic != XFER_WIRE_MAGIC || v.version != XFER_WIRE_VERSION ||
        v.type != XFER_MSG_VERDICT || v.length > XFER_VERDICT_TEXT) {
        xferSetError(err, "tcp: %s answered DONE with something that is not a "
                     "VERDICT", c->peer);
        return -1;
    }
    char text[XFER_VERDICT_TEXT + 1];
    if (xferTcpReadFull(c, text, v.length, deadline, c->timeoutMs,
                        "the VERDICT text", err)) return -1;
    text[v.length] = '\0';
    if (v.status != XFER_STATUS_OK) {
        xferSetError(err, "tcp: the recipient rejected the transfer: %s",
                     v.length ? text : "(no reason given)");
        return -1;
    }
    return 0;
}

/* ============================ TCP recipient ============================== */

/* Best effort: tell the donor why we reject its transfer. */
static void xferTcpSendVerdict(xferConn *c, uint32_t status, const char *why) {
    unsigned char buf[sizeof(xferWireRecord) + XFER_VERDICT_TEXT];
    size_t tl = why ? strlen(why) : 0;
    if (tl > XFER_VERDICT_TEXT) tl = XFER_VERDICT_TEXT;
    xferEncodeRecord((xferWireRecord *)buf, XFER_MSG_VERDICT, 0, status, 0, tl, 0);
    if (tl) memcpy(buf + sizeof(xferWireRecord), why, tl);
    xferTcpWriteFull(c, buf, sizeof(xferWireRecord) + tl, "the VERDICT", NULL);
}

/* What the recipient has read from the connection and not parsed yet: the
 * headers of DATA records, the payloads of small ones, and whatever comes
 * with them (see xferTcpWaitTransfer). Never block memory. */
typedef struct xferTcpStage {
    unsigned char *buf;     /* XFER_TCP_STAGE bytes */
    size_t off, len;        /* unparsed bytes: buf[off, off + len) */
} xferTcpStage;

/* Make the stage hold at least need (<= XFER_TCP_STAGE) unparsed bytes,
 * reading as much as the socket has. 0, or -1 with err set. */
static int xferTcpStageFill(xferConn *c, xferTcpStage *st, size_t need,
                            int64_t deadline, int timeoutMs, const char *what,
                            char *err) {
    if (st->len >= need) return 0;
    memmove(st->buf, st->buf + st->off, st->len);
    st->off = 0;
    while (st->len < need) {
        struct iovec v = {st->buf + st->len, XFER_TCP_STAGE - st->len};
        ssize_t r = xferTcpRecvSome(c, &v, 1, deadline, timeoutMs, what,
                                    c->stats.payload_bytes, err);
        if (r < 0) return -1;
        if (r == 0) {
            xferSetError(err, "tcp: %s closed the connection while we waited "
                         "for %s", c->peer, what);
            return -1;
        }
        st->len += (size_t)r;
    }
    return 0;
}

/* Receive DATA records into the registered blocks until DONE. Each header
 * is validated before a single byte of its payload is stored: a block id,
 * offset or length that does not fit the registration ends the transfer
 * with an error naming it.
 *
 * The connection is read in big pieces into a private stage, and records
 * are parsed from there: a record's payload is copied from the stage into
 * its block, and once the stage is drained, a payload of at least
 * XFER_TCP_DIRECT_MIN bytes still to come is read straight into the block,
 * together with what follows it (readv() of the payload and the whole
 * stage). So a long payload costs no copy, and a run of small records (a
 * slot's blocks are shipped as many short ranges) no system call each;
 * no byte of a header ever lands in block memory. */
static int xferTcpWaitTransfer(xferConn *c, int timeoutMs, char *err) {
    int64_t deadline = xferNowMs() + timeoutMs;
    xferWireRecord raw, h;
    xferTcpStage st = {malloc(XFER_TCP_STAGE), 0, 0};
    char why[XFER_ERR_LEN];
    int rc = -1;

    if (st.buf == NULL) {
        xferSetError(err, "tcp: out of memory");
        return -1;
    }
    for (;;) {
        if (xferTcpStageFill(c, &st, sizeof(raw), deadline, timeoutMs,
                             "the donor's data", err))
            goto out;
        memcpy(&raw, st.buf + st.off, sizeof(raw));
        st.off += sizeof(raw);
        st.len -= sizeof(raw);
        xferDecodeRecord(&raw, &h);
        if (h.magic != XFER_WIRE_MAGIC || h.version != XFER_WIRE_VERSION) {
            xferSetError(err, "tcp: %s sent a record with magic 0x%08" PRIx32
                         " version %u after %" PRIu64 " segments: not a "
                         "migration record", c->peer, h.magic, h.version,
                         c->stats.segments);
            goto out;
        }
        if (h.type == XFER_MSG_DONE) break;
        if (h.type != XFER_MSG_DATA) {
            xferSetError(err, "tcp: %s sent a record of type %u where DATA or "
                         "DONE was expected", c->peer, h.type);
            goto out;
        }
        if (h.block >= c->nblocks) {
            snprintf(why, sizeof(why), "peer sent block id %" PRIu32 " but "
                     "only %" PRIu32 " blocks are registered", h.block,
                     c->nblocks);
            goto lying;
        }
        xferBlock *b = &c->blocks[h.block];
        if (h.offset > b->len) {
            snprintf(why, sizeof(why), "peer sent offset %" PRIu64 " in block "
                     "%" PRIu32 " of %" PRIu64 " bytes", h.offset, h.block,
                     b->len);
            goto lying;
        }
        if (h.length > b->len - h.offset) {
            snprintf(why, sizeof(why), "peer sent %" PRIu64 " bytes at offset "
                     "%" PRIu64 " of block %" PRIu32 " of %" PRIu64 " bytes "
                     "(past its end)", h.length, h.offset, h.block, b->len);
            goto lying;
        }
        if (c->watchExpect) {
            uint64_t have = h.block < c->blockBytesLen ? c->blockBytes[h.block] : 0;
            if (h.length > c->watchExpect[h.block] - have) {
                snprintf(why, sizeof(why), "peer sent %" PRIu64 " more bytes "
                         "into block %" PRIu32 ", which already holds %" PRIu64
                         " of the %" PRIu64 " it is to receive", h.length,
                         h.block, have, c->watchExpect[h.block]);
                goto lying;
            }
        }
        if (xferAccountExtent(c, h.block, h.offset, h.length, err)) goto out;

        /* The payload: what the stage holds of it, then the rest. */
        unsigned char *dst = b->addr + h.offset;
        uint64_t left = h.length;
        size_t take = left < st.len ? (size_t)left : st.len;
        xferTcpPrefault(c, dst, left);
        memcpy(dst, st.buf + st.off, take);
        dst += take;
        left -= take;
        st.off += take;
        st.len -= take;
        while (left) {
            /* The stage is empty here. */
            struct iovec iov[2] = {
                {.iov_base = dst, .iov_len = left > SSIZE_MAX ? SSIZE_MAX : left},
                {.iov_base = st.buf, .iov_len = XFER_TCP_STAGE},
            };
            int direct = left >= XFER_TCP_DIRECT_MIN;
            ssize_t r = direct ? xferTcpRecvSome(c, iov, 2, deadline, timeoutMs,
                                                 "the donor's data",
                                                 c->stats.payload_bytes - left, err)
                               : xferTcpRecvSome(c, iov + 1, 1, deadline, timeoutMs,
                                                 "the donor's data",
                                                 c->stats.payload_bytes - left, err);
            if (r < 0) goto out;
            if (r == 0) {
                xferSetError(err, "tcp: %s closed the connection in the middle "
                             "of a record (block %" PRIu32 ", %" PRIu64 " of %"
                             PRIu64 " bytes missing) after %" PRIu64
                             " segments", c->peer, h.block, left, h.length,
                             c->stats.segments - 1);
                goto out;
            }
            st.off = 0;
            if (direct) {
                if ((uint64_t)r <= left) {
                    dst += r;
                    left -= (uint64_t)r;
                    st.len = 0;
                } else {
                    st.len = (size_t)((uint64_t)r - left);
                    left = 0;
                }
            } else {
                st.len = (size_t)r;
                take = left < st.len ? (size_t)left : st.len;
                memcpy(dst, st.buf, take);
                dst += take;
                left -= take;
                st.off = take;
                st.len -= take;
            }
        }
        /* The block is whole: its owner may use it from now on. */
        if (c->watchDone && h.length &&
            c->blockBytes[h.block] == c->watchExpect[h.block] &&
            c->watchDone(c->watchCtx, h.block, err) == -1)
            goto out;
    }

    /* DONE: h.block per-block counts follow. */
    if (h.block > c->nblocks) {
        snprintf(why, sizeof(why), "peer's summary covers %" PRIu32 " blocks "
                 "but only %" PRIu32 " are registered", h.block, c->nblocks);
        goto lying;
    }
    uint64_t *counts = NULL;
    if (h.block) {
        size_t want = (size_t)h.block * 8, got = want < st.len ? want : st.len;
        counts = malloc(want);
        if (counts == NULL) {
            xferSetError(err, "tcp: out of memory");
            goto out;
        }
        memcpy(counts, st.buf + st.off, got);
        st.off += got;
        st.len -= got;
        if (xferTcpReadFull(c, (char *)counts + got, want - got, deadline,
                            timeoutMs, "the donor's summary", err)) {
            free(counts);
            goto out;
        }
        for (uint32_t i = 0; i < h.block; i++) counts[i] = be64toh(counts[i]);
    }
    int bad = xferCheckSummary(c, &h, counts, why, sizeof(why));
    free(counts);
    if (bad) {
        xferTcpSendVerdict(c, XFER_STATUS_BAD_SUMMARY, why);
        xferSetError(err, "tcp: transfer from %s does not add up: %s", c->peer,
                     why);
        goto out;
    }
    xferTcpSendVerdict(c, XFER_STATUS_OK, NULL);
    rc = 0;
    goto out;

lying:
    xferTcpSendVerdict(c, XFER_STATUS_BAD_SUMMARY, why);
    xferSetError(err, "tcp: %s; transfer from %s refused", why, c->peer);
out:
    free(st.buf);
    return rc;
}

/* ============================ Registration =============================== */

/* Nothing to register with the kernel: the recipient hands out each
 * block's id and length only (a donor's DATA records name the block by id,
 * and the recipient checks them against c->blocks). */
static int xferTcpRegisterRecv(xferConn *c, xferBlockDesc out[], char *err) {
    (void)err;
    for (uint32_t i = 0; i < c->nblocks; i++) {
        out[i].id = i;
        out[i].rkey = 0;
        out[i].addr = 0;
        out[i].len = c->blocks[i].len;
    }
    return 0;
}

/* Nothing to do: writev() reads the donor's blocks where they are. */
static int xferTcpRegisterSend(xferConn *c, char *err) {
    (void)c;
    (void)err;
    return 0;
}

/* ================================ Closing ================================ */

static void xferTcpCloseListener(xferListener *l) {
    for (int i = 0; i < l->npending; i++) close(l->pending[i].fd);
    free(l->pending);
    if (l->fd >= 0) close(l->fd);
}

static void xferTcpClose(xferConn *c) {
    if (c->fd >= 0) close(c->fd);
}

int xferTcpFd(const xferConn *c) {
    return c->kind == XFER_KIND_TCP ? c->fd : -1;
}

const xferOps xferTcpOps = {
    .kind = XFER_KIND_TCP,
    .recipientSeesWrites = 1,
    .listen = xferTcpListen,
    .accept = xferTcpAccept,
    .closeListener = xferTcpCloseListener,
    .connect = xferTcpConnect,
    .registerRecv = xferTcpRegisterRecv,
    .registerSend = xferTcpRegisterSend,
    .waitTransfer = xferTcpWaitTransfer,
    .write = xferTcpWrite,
    .finish = xferTcpFinish,
    .closeConn = xferTcpClose,
};
