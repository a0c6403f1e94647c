/* transport-floor -- what moving a migration's bytes costs, with nothing else.
 *
 * The block transport over TCP moves a slot's blocks from the donor's
 * memory into blocks the recipient has just created: every byte is copied
 * into the kernel by the sender, out of it by the receiver, and lands in a
 * page the recipient touches for the first time (a page fault, a page
 * allocated, zeroed and charged to the process). No migration over
 * loopback TCP can cost less CPU time than that, however little Redis
 * work it adds around it. This program measures it, on the CPU it is
 * pinned to (taskset), in each of three ways:
 *
 *   fresh     loopback TCP, received into pages never touched (what the
 *             recipient does with new blocks)
 *   resident  loopback TCP, received into pages already faulted in
 *             (the TCP stack and the two copies alone)
 *   touch     no socket: first touch of as many fresh pages (the page
 *             faults alone)
 *
 * Both threads read and write at most CHUNK bytes per system call, like
 * the migration threads (XFER_TCP_IO_MAX in src/xfertcp.c). CPU time is
 * the process's (both threads), from CLOCK_PROCESS_CPUTIME_ID; wall time
 * from CLOCK_MONOTONIC. utils/bench/README.md says how BENCHMARKS.md uses
 * these figures.
 *
 * Build: cc -O2 -pthread -o build/transport-floor utils/bench/transport-floor.c
 * Usage: transport-floor [MB [ROUNDS [CHUNK_KIB]]]   (defaults 163 3 128)
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static size_t total;          /* bytes per transfer */
static size_t chunk;          /* bytes per system call */
static int rounds;
static int conn[2];           /* connected loopback TCP sockets */

static double clockSeconds(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "transport-floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void *freshPages(void) {
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("mmap");
    return p;
}

/* Two sockets of one loopback TCP connection (an ephemeral port). */
static void connectPair(void) {
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int l = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) ||
        listen(l, 1) || getsockname(l, (struct sockaddr *)&sa, &len))
        die("listen on loopback");
    if ((conn[0] = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
        connect(conn[0], (struct sockaddr *)&sa, sizeof(sa)))
        die("connect");
    if ((conn[1] = accept(l, NULL, NULL)) < 0) die("accept");
    close(l);
}

/* The sender: each transfer is 'total' bytes from one resident buffer,
 * then it waits for the receiver's one-byte go-ahead. */
static void *sender(void *arg) {
    char *src = malloc(total), go;
    (void)arg;

    if (src == NULL) die("malloc");
    memset(src, 'x', total);
    for (;;) {
        if (read(conn[0], &go, 1) != 1 || go == 'q') break;
        for (size_t off = 0; off < total;) {
            size_t n = total - off < chunk ? total - off : chunk;
            ssize_t w = write(conn[0], src + off, n);
            if (w <= 0) die("write");
            off += (size_t)w;
        }
    }
    free(src);
    return NULL;
}

/* One line of output: what was measured since (c0, t0), CPU and wall. */
static void printSince(const char *mode, double c0, double t0) {
    double c1 = clockSeconds(CLOCK_PROCESS_CPUTIME_ID),
           t1 = clockSeconds(CLOCK_MONOTONIC);
    printf("%-9s %6zu MB  wall %7.1f ms  cpu %7.1f ms  (%.2f CPU-s per GB)\n",
           mode, total >> 20, (t1 - t0) * 1e3, (c1 - c0) * 1e3,
           (c1 - c0) / ((double)total / (1 << 30)));
}

/* One transfer into dst, timed; prints a line. */
static void receiveInto(const char *mode, char *dst) {
    double c0 = clockSeconds(CLOCK_PROCESS_CPUTIME_ID),
           t0 = clockSeconds(CLOCK_MONOTONIC);
    if (write(conn[1], "g", 1) != 1) die("write go-ahead");
    for (size_t off = 0; off < total;) {
        size_t n = total - off < chunk ? total - off : chunk;
        ssize_t r = read(conn[1], dst + off, n);
        if (r <= 0) die("read");
        off += (size_t)r;
    }
    printSince(mode, c0, t0);
}

int main(int argc, char **argv) {
    pthread_t t;

    total = (size_t)(argc > 1 ? atol(argv[1]) : 163) << 20;
    rounds = argc > 2 ? atoi(argv[2]) : 3;
    chunk = (size_t)(argc > 3 ? atol(argv[3]) : 128) << 10;
    if (total == 0 || rounds <= 0 || chunk == 0) {
        fprintf(stderr, "usage: transport-floor [MB [ROUNDS [CHUNK_KIB]]]\n");
        return 1;
    }
    connectPair();
    if (pthread_create(&t, NULL, sender, NULL)) die("pthread_create");

    char *resident = freshPages();
    memset(resident, 0, total);
    for (int r = 0; r < rounds; r++) {
        char *p = freshPages();
        receiveInto("fresh", p);
        munmap(p, total);
        receiveInto("resident", resident);

        p = freshPages();
        double c0 = clockSeconds(CLOCK_PROCESS_CPUTIME_ID),
               t0 = clockSeconds(CLOCK_MONOTONIC);
        for (size_t off = 0; off < total; off += 4096) p[off] = 1;
        printSince("touch", c0, t0);
        munmap(p, total);
    }
    if (write(conn[1], "q", 1) != 1) die("write quit");
    pthread_join(t, NULL);
    return 0;
}
