/* wakeprobe -- how long a thread that wakes up waits for its CPU.
 *
 * A stand-in for a Redis main thread woken by a client: it sleeps 100 us
 * (absolute deadlines) over and over, and measures how late each wake-up
 * runs. Pin it to the servers' CPU (taskset -c 0) while something runs
 * there (a migration: utils/bench/migrate-pair --pin yes); every 100 ms it
 * prints one line:
 *
 *     <unix time> <wake-ups> p50 <us> p99 <us> max <us>
 *
 * A thread that keeps the CPU without being preemptible (a long system
 * call on a kernel without preemption, or a normal-priority thread the
 * scheduler lets run its whole time slice) shows as a late wake-up. Line
 * the output up with migrate-pair's results.json (each call's t_start and
 * elapsed_ms) with utils/bench/wakeprobe-report.
 *
 * Build: cc -O2 -o build/wakeprobe utils/bench/wakeprobe.c
 * Usage: wakeprobe SECONDS
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define PERIOD_NS 100000L
#define WINDOW_S 0.1
#define MAX_SAMPLES 100000

static double monoNow(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int cmpDouble(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    static double late[MAX_SAMPLES];
    if (argc != 2 || atof(argv[1]) <= 0) {
        fprintf(stderr, "usage: wakeprobe SECONDS\n");
        return 2;
    }
    double seconds = atof(argv[1]), start = monoNow(), window = start;
    int n = 0;
    while (monoNow() - start < seconds) {
        struct timespec due;
        clock_gettime(CLOCK_MONOTONIC, &due);
        due.tv_nsec += PERIOD_NS;
        if (due.tv_nsec >= 1000000000L) {
            due.tv_sec++;
            due.tv_nsec -= 1000000000L;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL);
        double now = monoNow();
        if (n < MAX_SAMPLES)
            late[n++] = (now - (due.tv_sec + due.tv_nsec / 1e9)) * 1e6;
        if (now - window >= WINDOW_S) {
            struct timespec wall;
            qsort(late, n, sizeof(double), cmpDouble);
            clock_gettime(CLOCK_REALTIME, &wall);
            printf("%.3f %d p50 %.0f p99 %.0f max %.0f\n",
                   wall.tv_sec + wall.tv_nsec / 1e9, n, late[n / 2],
                   late[n * 99 / 100], late[n - 1]);
            fflush(stdout);
            n = 0;
            window = now;
        }
    }
    return 0;
}
