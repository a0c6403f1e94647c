/* fakeio.h -- scripted peers behind the block transport's sockets, and a
 * clock of their own, for the fuzzer of the recipient side
 * (migtransport-fuzz.c) and its seed maker.
 *
 * Why a seam instead of socketpairs: a fuzzer needs every run of an input
 * to take the same path. With real sockets, how the kernel cuts the stream
 * into reads (and so which of xferTcpWaitTransfer's stage / direct-read
 * paths a record takes), and in which order a listener sees its peers'
 * bytes, depend on scheduling; a stream longer than a socket buffer needs
 * a second thread to write it; and every handshake or transfer timeout
 * would cost its real duration. Here each peer's bytes are a buffer, how
 * each read() is cut short, or fails with EAGAIN / EINTR first, is drawn
 * from a PRNG seeded by the input, and time (CLOCK_MONOTONIC) only moves
 * when a poll() finds nothing ready: it then "waits" its whole timeout at
 * once. So the fuzzer controls the cuts, a timeout costs nothing, and a
 * crash replays exactly.
 *
 * How: the fuzz build compiles the transport (src/xfer.c,
 * src/xfertcp.c, src/xferrdma.c) with `-include tests/fuzz/fakeio.h` and
 * -DFAKEIO_SEAM, which turns its calls of read, readv, send, sendmsg,
 * poll, accept4, close and clock_gettime into the fake* functions below. They act on fake descriptors (FAKEIO_LISTEN_FD,
 * and FAKEIO_CONN_FD + i for peer i, handed out by accept4 in order) and
 * pass anything else to the real call. Nothing in src/ changes.
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
#include <time.h>
#include <unistd.h>

/* Far above any descriptor the process really has. */
#define FAKEIO_LISTEN_FD 999999
#define FAKEIO_CONN_FD 1000000
/* More than a listener keeps in their handshake (XFER_PENDING_MAX). */
#define FAKEIO_MAX_PEERS 20

/* How reads and writes on the fake connections are cut (fakeIo.faults). */
#define FAKEIO_WHOLE 0      /* every call moves all it can */
#define FAKEIO_SHORT 1      /* some calls move fewer bytes */
#define FAKEIO_RETRY 2      /* also EAGAIN (then poll says ready), EINTR */

typedef struct fakePeer {
    /* What the peer sends, in order, and how far it was read. After the
     * last byte it closes (read returns 0), or, if silent, sends nothing
     * more (poll finds nothing). */
    const unsigned char *in;
    size_t inlen, inpos;
    int silent;
    /* What was sent to it. */
    unsigned char *out;
    size_t outlen, outcap;
    int closed;             /* close() was called on it */
} fakePeer;

typedef struct fakeIo {
    fakePeer peer[FAKEIO_MAX_PEERS];
    int npeers;
    int naccepted;          /* peers handed out by accept4 so far */
    int epipe;              /* Every send fails with EPIPE. */
    int faults;             /* FAKEIO_* */
    uint64_t rng;
    int retried;            /* The last call failed on purpose: next one
                             * goes through (no live lock). */
    int64_t clock_ms;       /* CLOCK_MONOTONIC, as the seam tells it */
    /* What happened, for the oracle and FUZZ_VERBOSE. */
    uint64_t reads, short_calls, eagains, eintrs, polls_timed_out;
} fakeIo;

extern fakeIo fakeio;

/* Start a run with no peer; faults and seed pick how calls are cut. Keeps
 * the peers' out buffers' memory. */
void fakeIoReset(int faults, uint64_t seed);
/* A peer that will connect (after those added before it) and send
 * in[0..inlen), then close, or go silent. Returns its index. */
int fakeIoAddPeer(const unsigned char *in, size_t inlen, int silent);
void fakeIoFree(void);

ssize_t fakeRead(int fd, void *buf, size_t len);
ssize_t fakeReadv(int fd, const struct iovec *iov, int iovcnt);
ssize_t fakeSend(int fd, const void *buf, size_t len, int flags);
ssize_t fakeSendmsg(int fd, const struct msghdr *msg, int flags);
int fakePoll(struct pollfd *fds, nfds_t nfds, int timeout);
int fakeAccept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags);
int fakeClose(int fd);
int fakeClockGettime(clockid_t clk, struct timespec *ts);

#ifdef FAKEIO_SEAM
#define read(fd, buf, len) fakeRead(fd, buf, len)
#define readv(fd, iov, cnt) fakeReadv(fd, iov, cnt)
#define send(fd, buf, len, flags) fakeSend(fd, buf, len, flags)
#define sendmsg(fd, msg, flags) fakeSendmsg(fd, msg, flags)
#define poll(fds, n, ms) fakePoll(fds, n, ms)
#define accept4(fd, a, l, f) fakeAccept4(fd, a, l, f)
#define close(fd) fakeClose(fd)
#define clock_gettime(clk, ts) fakeClockGettime(clk, ts)
#endif

#endif
