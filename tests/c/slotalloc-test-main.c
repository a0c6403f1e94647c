/* slotalloc-test-main.c -- standalone runner for the slot allocator's C
 * unit tests (the same ones `redis-server test slotalloc` would run):
 *
 *   cc -std=c11 -D_GNU_SOURCE -DREDIS_TEST -pthread -O2 -g -Wall -Wextra \
 *      -Werror -I src -o build/slotalloc-test src/slotalloc.c \
 *      tests/c/slotalloc-test-main.c && build/slotalloc-test
 *
 * Prints one "[ok]: slotalloc - <name>" or "[err]: slotalloc - <name>" line
 * per test case and exits non-zero if any failed.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "slotalloc.h"

int main(int argc, char **argv) {
    return slotAllocTest(argc, argv, 0);
}
