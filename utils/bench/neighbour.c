/* neighbour -- an idle-class neighbour for a Redis main thread.
 *
 * Stands in for the migration threads (SCHED_IDLE, see
 * migration-thread-priority) on the CPU of a server that serves clients,
 * one kind of work at a time, so that utils/bench/neighbour-cost can
 * measure what each kind costs the server: its main thread's CPU time per
 * request and its throughput. The modes:
 *
 *   none     nothing (sleeps)
 *   busy     a loop that never enters the kernel
 *   copy     memcpy() of SIZE bytes at a time through a 64 MB buffer
 *   tcp      a thread writing SIZE bytes at a time to another thread over
 *            a loopback TCP connection (what the TCP transport does when
 *            the donor and the recipient share a host)
 *   unix     the same over a Unix socket pair
 *   pipe     the same over a pipe (1 MB of pipe buffer)
 *
 * Every thread it starts runs in the SCHED_IDLE class. Pin it with taskset
 * to the server's CPU.
 *
 * Build: cc -O2 -pthread -o build/neighbour utils/bench/neighbour.c
 * Usage: neighbour MODE SECONDS [SIZE]      (SIZE: bytes, default 131072)
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF_BYTES (64UL << 20)

static size_t ioSize = 128 << 10;

static double monoNow(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void idleClass(void) {
    struct sched_param p = {0};
    if (sched_setscheduler(0, SCHED_IDLE, &p) != 0) {
        perror("neighbour: sched_setscheduler(SCHED_IDLE)");
        exit(1);
    }
}

static char *bigBuffer(void) {
    char *b = malloc(BUF_BYTES);
    if (b == NULL) {
        perror("neighbour: malloc");
        exit(1);
    }
    memset(b, 1, BUF_BYTES);
    return b;
}

/* The receiving end of tcp/unix/pipe: reads until end of file. */
static void *reader(void *arg) {
    int fd = *(int *)arg;
    char *buf = bigBuffer();
    size_t off = 0;
    ssize_t n;
    idleClass();
    while ((n = read(fd, buf + off, ioSize)) > 0) {
        off += (size_t)n;
        if (off + ioSize > BUF_BYTES) off = 0;
    }
    free(buf);
    return NULL;
}

/* Writes for the given time, then closes (the reader sees end of file). */
static void writeFor(int fd, double end) {
    char *buf = bigBuffer();
    size_t off = 0;
    while (monoNow() < end) {
        ssize_t n = write(fd, buf + off, ioSize);
        if (n <= 0) {
            perror("neighbour: write");
            break;
        }
        off += (size_t)n;
        if (off + ioSize > BUF_BYTES) off = 0;
    }
    close(fd);
    free(buf);
}

/* A connected loopback TCP pair: *out is the writer's end, *in the reader's. */
static void tcpPair(int *out, int *in) {
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (l == -1 || bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &len) != 0) {
        perror("neighbour: listen");
        exit(1);
    }
    *out = socket(AF_INET, SOCK_STREAM, 0);
    if (*out == -1 || connect(*out, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        (*in = accept(l, NULL, NULL)) == -1) {
        perror("neighbour: connect");
        exit(1);
    }
    close(l);
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4 || atof(argv[2]) <= 0 || (argc == 4 && atol(argv[3]) <= 0)) {
        fprintf(stderr, "usage: neighbour none|busy|copy|tcp|unix|pipe SECONDS [SIZE]\n");
        return 1;
    }
    const char *mode = argv[1];
    double end = monoNow() + atof(argv[2]);
    if (argc == 4) ioSize = (size_t)atol(argv[3]);
    if (ioSize > BUF_BYTES / 2) ioSize = BUF_BYTES / 2;

    if (!strcmp(mode, "none")) {
        while (monoNow() < end) usleep(100000);
    } else if (!strcmp(mode, "busy")) {
        volatile unsigned long x = 0;
        idleClass();
        while (monoNow() < end)
            for (int i = 0; i < 100000; i++) x++;
    } else if (!strcmp(mode, "copy")) {
        char *a = bigBuffer(), *b = bigBuffer();
        size_t off = 0;
        idleClass();
        while (monoNow() < end) {
            memcpy(b + off, a + off, ioSize);
            off += ioSize;
            if (off + ioSize > BUF_BYTES) off = 0;
        }
    } else if (!strcmp(mode, "tcp") || !strcmp(mode, "unix") || !strcmp(mode, "pipe")) {
        int fds[2];
        pthread_t t;
        if (!strcmp(mode, "tcp")) {
            tcpPair(&fds[1], &fds[0]);
        } else if (!strcmp(mode, "unix")) {
            if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
                perror("neighbour: socketpair");
                return 1;
            }
        } else {
            if (pipe(fds) != 0) {
                perror("neighbour: pipe");
                return 1;
            }
            fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);
        }
        if (pthread_create(&t, NULL, reader, &fds[0]) != 0) {
            fprintf(stderr, "neighbour: cannot start the reader thread\n");
            return 1;
        }
        idleClass();
        writeFor(fds[1], end);
        pthread_join(t, NULL);
    } else {
        fprintf(stderr, "neighbour: unknown mode '%s'\n", mode);
        return 1;
    }
    return 0;
}
