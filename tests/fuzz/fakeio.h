/* fakeio.h -- a scripted peer behind the block transport's sockets, for the
 * fuzzer of the recipient side (migtransport-fuzz.c) and its seed maker.
 *
 * Why a seam instead of a socketpair: a fuzzer needs every run of an input
 * to take the same path. With a real socket, how the kernel cuts the stream
 * into reads (and so which of migTcpWaitTransfer's stage / direct-read
 * paths a record takes) depends on scheduling, and a stream longer than the
 * socket buffer needs a second thread to write it. Here the bytes the peer
 * "sends" are a buffer, and how each read() is cut short, or fails with
 * EAGAIN / EINTR first, is drawn from a PRNG seeded by the input: the
 * fuzzer controls the cuts too, and a crash replays exactly.
 *
 * How: the fuzz build compiles src/migtransport.c with `-include
 * tests/fuzz/fakeio.h` and -DFAKEIO_SEAM, which turns its calls of read,
 * readv, sendmsg, poll, accept4 and close into the fake* functions below.
 * They act on two fake descriptors (FAKEIO_CONN_FD, FAKEIO_LISTEN_FD) and
 * pass any other descriptor to the real call. Nothing in src/ changes.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __FAKEIO_H
#define __FAKEIO_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

/* Far above any descriptor the process really has. */
#define FAKEIO_CONN_FD 1000000
#define FAKEIO_LISTEN_FD 1000001

/* How reads and writes on the fake connection are cut (fakeIo.faults). */
#define FAKEIO_WHOLE 0      /* every call moves all it can */
#define FAKEIO_SHORT 1      /* some calls move fewer bytes */
#define FAKEIO_RETRY 2      /* also EAGAIN (then poll says ready), EINTR */

typedef struct fakeIo {
    /* What the peer sends, in order, and how far we have read. */
    const unsigned char *in;
    size_t inlen, inpos;
    /* After the last byte the peer closes (read returns 0), or, if
     * silent, sends nothing more (poll times out). */
    int silent;
    /* What we sent (WELCOME, VERDICT: the donor never reads them here). */
    unsigned char *out;
    size_t outlen, outcap;
    int epipe;              /* Every send fails with EPIPE. */
    int faults;             /* FAKEIO_* */
    uint64_t rng;
    int retried;            /* The last call failed on purpose: next one
                             * goes through (no live lock). */
    int accepts;            /* Connections the listener has to hand out. */
    /* What happened, for the oracle. */
    uint64_t reads, short_reads, eagains, eintrs, polls_timed_out;
} fakeIo;

extern fakeIo fakeio;

/* Start a run: the peer sends in[0..inlen), then closes (silent 0) or
 * goes quiet; faults and seed pick how calls are cut. Keeps the out
 * buffer's memory. */
void fakeIoReset(const unsigned char *in, size_t inlen, int silent, int faults,
                 uint64_t seed);
void fakeIoFree(void);

ssize_t fakeRead(int fd, void *buf, size_t len);
ssize_t fakeReadv(int fd, const struct iovec *iov, int iovcnt);
ssize_t fakeSendmsg(int fd, const struct msghdr *msg, int flags);
int fakePoll(struct pollfd *fds, nfds_t nfds, int timeout);
int fakeAccept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags);
int fakeClose(int fd);

#ifdef FAKEIO_SEAM
#define read(fd, buf, len) fakeRead(fd, buf, len)
#define readv(fd, iov, cnt) fakeReadv(fd, iov, cnt)
#define sendmsg(fd, msg, flags) fakeSendmsg(fd, msg, flags)
#define poll(fds, n, ms) fakePoll(fds, n, ms)
#define accept4(fd, a, l, f) fakeAccept4(fd, a, l, f)
#define close(fd) fakeClose(fd)
#endif

#endif
