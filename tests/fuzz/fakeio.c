/* fakeio.c -- the scripted peers and clock of fakeio.h (why they exist:
 * there).
 *
 * Each fake connection behaves like a non-blocking socket whose peer has
 * written its bytes and then closed (or gone silent): read()/readv() hand
 * out the next bytes, 0 at the end (or EAGAIN if silent); send()/sendmsg()
 * append to the peer's out buffer. The fake listener is readable while
 * peers remain to be accepted. With faults on, a PRNG cuts some calls short
 * or fails them once with EAGAIN or EINTR, as a real socket may; the next
 * call after such a failure always goes through, so the caller never spins.
 * poll() returns what is ready; when nothing is, the clock jumps by the
 * poll's timeout and it returns 0, as a poll that waited it out.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "fakeio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

fakeIo fakeio;

void fakeIoReset(int faults, uint64_t seed) {
    fakePeer keep[FAKEIO_MAX_PEERS];

    memcpy(keep, fakeio.peer, sizeof(keep));
    memset(&fakeio, 0, sizeof(fakeio));
    for (int i = 0; i < FAKEIO_MAX_PEERS; i++) {
        fakeio.peer[i].out = keep[i].out;
        fakeio.peer[i].outcap = keep[i].outcap;
    }
    fakeio.faults = faults;
    fakeio.rng = seed * 0x9e3779b97f4a7c15ULL + 0x2545f4914f6cdd1dULL;
    fakeio.clock_ms = 1000000;
}

int fakeIoAddPeer(const unsigned char *in, size_t inlen, int silent) {
    if (fakeio.npeers == FAKEIO_MAX_PEERS) return -1;
    fakePeer *p = &fakeio.peer[fakeio.npeers];
    p->in = in;
    p->inlen = inlen;
    p->silent = silent;
    return fakeio.npeers++;
}

void fakeIoFree(void) {
    for (int i = 0; i < FAKEIO_MAX_PEERS; i++) {
        free(fakeio.peer[i].out);
        fakeio.peer[i].out = NULL;
        fakeio.peer[i].outcap = fakeio.peer[i].outlen = 0;
    }
}

/* The peer behind a descriptor: one accepted and not closed, or NULL. */
static fakePeer *fakePeerOf(int fd) {
    int i = fd - FAKEIO_CONN_FD;
    if (i < 0 || i >= fakeio.naccepted || fakeio.peer[i].closed) return NULL;
    return &fakeio.peer[i];
}

static int fakeIsOurs(int fd) {
    return fd == FAKEIO_LISTEN_FD ||
           (fd >= FAKEIO_CONN_FD && fd < FAKEIO_CONN_FD + FAKEIO_MAX_PEERS);
}

static uint64_t fakeRand(void) {
    uint64_t x = fakeio.rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    fakeio.rng = x;
    return x * 2685821657736338717ULL;
}

/* Whether this call fails on purpose (errno set), and else how many of
 * 'want' bytes it moves. */
static int fakeCut(size_t *want) {
    if (fakeio.faults == FAKEIO_WHOLE || *want == 0) return 0;
    if (fakeio.retried) {
        fakeio.retried = 0;
        return 0;
    }
    uint64_t r = fakeRand();
    if (fakeio.faults >= FAKEIO_RETRY && (r & 15) == 0) {
        fakeio.retried = 1;
        errno = (r & 16) ? EINTR : EAGAIN;
        if (errno == EINTR) fakeio.eintrs++;
        else fakeio.eagains++;
        return -1;
    }
    if ((r & 3) == 0) {
        /* Mostly a few bytes (headers cut in two), sometimes anywhere. */
        size_t n = (r & 4) ? 1 + (r >> 8) % 48 : 1 + (r >> 8) % *want;
        if (n < *want) {
            *want = n;
            fakeio.short_calls++;
        }
    }
    return 0;
}

/* The next bytes of peer p into iov[] (what readv does). */
static ssize_t fakeIn(fakePeer *p, const struct iovec *iov, int iovcnt) {
    size_t want = 0, left = p->inlen - p->inpos, done = 0;

    for (int i = 0; i < iovcnt; i++) want += iov[i].iov_len;
    if (want > left) want = left;
    if (want == 0 && p->silent && iovcnt > 0) {
        errno = EAGAIN;
        return -1;
    }
    if (fakeCut(&want)) return -1;
    fakeio.reads++;
    for (int i = 0; i < iovcnt && done < want; i++) {
        size_t n = iov[i].iov_len < want - done ? iov[i].iov_len : want - done;
        memcpy(iov[i].iov_base, p->in + p->inpos + done, n);
        done += n;
    }
    p->inpos += done;
    return (ssize_t)done;
}

ssize_t fakeRead(int fd, void *buf, size_t len) {
    if (!fakeIsOurs(fd)) return read(fd, buf, len);
    struct iovec v = {buf, len};
    return fakeReadv(fd, &v, 1);
}

ssize_t fakeReadv(int fd, const struct iovec *iov, int iovcnt) {
    if (!fakeIsOurs(fd)) return readv(fd, iov, iovcnt);
    fakePeer *p = fakePeerOf(fd);
    if (p == NULL) {
        errno = EBADF;
        return -1;
    }
    return fakeIn(p, iov, iovcnt);
}

ssize_t fakeSendmsg(int fd, const struct msghdr *msg, int flags) {
    if (!fakeIsOurs(fd)) return sendmsg(fd, msg, flags);
    fakePeer *p = fakePeerOf(fd);
    if (p == NULL) {
        errno = EBADF;
        return -1;
    }
    if (fakeio.epipe) {
        errno = EPIPE;
        return -1;
    }
    size_t want = 0, done = 0;
    for (size_t i = 0; i < msg->msg_iovlen; i++) want += msg->msg_iov[i].iov_len;
    if (fakeCut(&want)) return -1;
    if (p->outlen + want > p->outcap) {
        size_t cap = p->outcap ? p->outcap : 4096;
        while (cap < p->outlen + want) cap *= 2;
        unsigned char *o = realloc(p->out, cap);
        if (o == NULL) {
            errno = ENOMEM;
            return -1;
        }
        p->out = o;
        p->outcap = cap;
    }
    for (size_t i = 0; i < msg->msg_iovlen && done < want; i++) {
        size_t n = msg->msg_iov[i].iov_len;
        if (n > want - done) n = want - done;
        memcpy(p->out + p->outlen + done, msg->msg_iov[i].iov_base, n);
        done += n;
    }
    p->outlen += done;
    return (ssize_t)done;
}

ssize_t fakeSend(int fd, const void *buf, size_t len, int flags) {
    if (!fakeIsOurs(fd)) return send(fd, buf, len, flags);
    struct iovec v = {(void *)buf, len};
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &v;
    mh.msg_iovlen = 1;
    return fakeSendmsg(fd, &mh, flags);
}

/* What of 'events' a fake descriptor has ready. */
static short fakeReady(int fd, short events) {
    if (fd == FAKEIO_LISTEN_FD)
        return fakeio.naccepted < fakeio.npeers ? (events & POLLIN) : 0;
    fakePeer *p = fakePeerOf(fd);
    if (p == NULL) return POLLNVAL;
    short r = events & POLLOUT;
    if ((events & POLLIN) && (p->inpos < p->inlen || !p->silent)) r |= POLLIN;
    return r;
}

int fakePoll(struct pollfd *fds, nfds_t nfds, int timeout) {
    int ours = 0, ready = 0;
    for (nfds_t i = 0; i < nfds; i++) ours |= fakeIsOurs(fds[i].fd);
    if (!ours) return poll(fds, nfds, timeout);
    for (nfds_t i = 0; i < nfds; i++) {
        fds[i].revents = fakeReady(fds[i].fd, fds[i].events);
        if (fds[i].revents) ready++;
    }
    if (ready) return ready;
    /* Nothing will ever be: the whole timeout passes at once. */
    fakeio.polls_timed_out++;
    fakeio.clock_ms += timeout < 0 ? 3600 * 1000 : timeout;
    return 0;
}

int fakeAccept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags) {
    if (fd != FAKEIO_LISTEN_FD) return accept4(fd, addr, addrlen, flags);
    if (fakeio.naccepted == fakeio.npeers) {
        errno = EAGAIN;
        return -1;
    }
    /* An address family xferFormatSockaddr does not know: "?". */
    if (addr && addrlen && *addrlen >= sizeof(sa_family_t)) {
        memset(addr, 0, *addrlen);
        addr->sa_family = AF_UNIX;
        *addrlen = sizeof(sa_family_t);
    }
    return FAKEIO_CONN_FD + fakeio.naccepted++;
}

int fakeClose(int fd) {
    if (!fakeIsOurs(fd)) return close(fd);
    fakePeer *p = fakePeerOf(fd);
    if (p) p->closed = 1;
    return 0;
}

int fakeClockGettime(clockid_t clk, struct timespec *ts) {
    if (clk != CLOCK_MONOTONIC) return clock_gettime(clk, ts);
    ts->tv_sec = fakeio.clock_ms / 1000;
    ts->tv_nsec = (long)(fakeio.clock_ms % 1000) * 1000000;
    return 0;
}
