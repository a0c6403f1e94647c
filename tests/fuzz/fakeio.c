/* fakeio.c -- the scripted peer of fakeio.h (why it exists: there).
 *
 * The fake connection behaves like a non-blocking socket whose peer has
 * written fakeio.in and then closed (or gone silent): read()/readv() hand
 * out the next bytes, 0 at the end (or EAGAIN, and poll() then times out,
 * if silent); sendmsg() appends to fakeio.out. With faults on, a PRNG cuts
 * some calls short or fails them once with EAGAIN or EINTR, as a real
 * socket may; the next call after a failure always goes through, so the
 * caller never spins.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "fakeio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

fakeIo fakeio;

void fakeIoReset(const unsigned char *in, size_t inlen, int silent, int faults,
                 uint64_t seed) {
    unsigned char *out = fakeio.out;
    size_t outcap = fakeio.outcap;

    memset(&fakeio, 0, sizeof(fakeio));
    fakeio.in = in;
    fakeio.inlen = inlen;
    fakeio.silent = silent;
    fakeio.faults = faults;
    fakeio.rng = seed * 0x9e3779b97f4a7c15ULL + 0x2545f4914f6cdd1dULL;
    fakeio.out = out;
    fakeio.outcap = outcap;
    fakeio.accepts = 1;
}

void fakeIoFree(void) {
    free(fakeio.out);
    fakeio.out = NULL;
    fakeio.outcap = fakeio.outlen = 0;
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
            fakeio.short_reads++;
        }
    }
    return 0;
}

/* The next bytes of the peer into iov[] (what readv does). */
static ssize_t fakeIn(const struct iovec *iov, int iovcnt) {
    size_t want = 0, left = fakeio.inlen - fakeio.inpos, done = 0;

    for (int i = 0; i < iovcnt; i++) want += iov[i].iov_len;
    if (want > left) want = left;
    if (want == 0 && fakeio.silent && iovcnt > 0) {
        errno = EAGAIN;
        return -1;
    }
    if (fakeCut(&want)) return -1;
    fakeio.reads++;
    for (int i = 0; i < iovcnt && done < want; i++) {
        size_t n = iov[i].iov_len < want - done ? iov[i].iov_len : want - done;
        memcpy(iov[i].iov_base, fakeio.in + fakeio.inpos + done, n);
        done += n;
    }
    fakeio.inpos += done;
    return (ssize_t)done;
}

ssize_t fakeRead(int fd, void *buf, size_t len) {
    if (fd != FAKEIO_CONN_FD) return read(fd, buf, len);
    struct iovec v = {buf, len};
    return fakeIn(&v, 1);
}

ssize_t fakeReadv(int fd, const struct iovec *iov, int iovcnt) {
    if (fd != FAKEIO_CONN_FD) return readv(fd, iov, iovcnt);
    return fakeIn(iov, iovcnt);
}

ssize_t fakeSendmsg(int fd, const struct msghdr *msg, int flags) {
    if (fd != FAKEIO_CONN_FD) return sendmsg(fd, msg, flags);
    if (fakeio.epipe) {
        errno = EPIPE;
        return -1;
    }
    size_t want = 0, done = 0;
    for (size_t i = 0; i < msg->msg_iovlen; i++) want += msg->msg_iov[i].iov_len;
    if (fakeCut(&want)) return -1;
    if (fakeio.outlen + want > fakeio.outcap) {
        size_t cap = fakeio.outcap ? fakeio.outcap : 4096;
        while (cap < fakeio.outlen + want) cap *= 2;
        unsigned char *p = realloc(fakeio.out, cap);
        if (p == NULL) {
            errno = ENOMEM;
            return -1;
        }
        fakeio.out = p;
        fakeio.outcap = cap;
    }
    for (size_t i = 0; i < msg->msg_iovlen && done < want; i++) {
        size_t n = msg->msg_iov[i].iov_len;
        if (n > want - done) n = want - done;
        memcpy(fakeio.out + fakeio.outlen + done, msg->msg_iov[i].iov_base, n);
        done += n;
    }
    fakeio.outlen += done;
    return (ssize_t)done;
}

/* Ready unless the peer has gone silent with nothing left to read (then
 * at once what a poll() that waited out its timeout returns). */
int fakePoll(struct pollfd *fds, nfds_t nfds, int timeout) {
    if (nfds != 1 || (fds[0].fd != FAKEIO_CONN_FD && fds[0].fd != FAKEIO_LISTEN_FD))
        return poll(fds, nfds, timeout);
    if (fds[0].fd == FAKEIO_LISTEN_FD) {
        fds[0].revents = fakeio.accepts ? POLLIN : 0;
        if (!fakeio.accepts) fakeio.polls_timed_out++;
        return fakeio.accepts ? 1 : 0;
    }
    if ((fds[0].events & POLLIN) && fakeio.silent && fakeio.inpos == fakeio.inlen) {
        fds[0].revents = 0;
        fakeio.polls_timed_out++;
        return 0;
    }
    fds[0].revents = fds[0].events & (POLLIN | POLLOUT);
    return 1;
}

int fakeAccept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags) {
    if (fd != FAKEIO_LISTEN_FD) return accept4(fd, addr, addrlen, flags);
    if (!fakeio.accepts) {
        errno = EAGAIN;
        return -1;
    }
    fakeio.accepts--;
    /* An address family migFormatSockaddr does not know: "?". */
    if (addr && addrlen && *addrlen >= sizeof(sa_family_t)) {
        memset(addr, 0, *addrlen);
        addr->sa_family = AF_UNIX;
        *addrlen = sizeof(sa_family_t);
    }
    return FAKEIO_CONN_FD;
}

int fakeClose(int fd) {
    if (fd == FAKEIO_CONN_FD || fd == FAKEIO_LISTEN_FD) return 0;
    return close(fd);
}
