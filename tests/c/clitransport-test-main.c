/* clitransport-test-main.c -- standalone runner for the C unit tests of
 * redis-cli's block migration logic (src/clitransport.c: the
 * --cluster-transport option, RDMAMIGRATESLOTS arguments, reply parsing):
 *
 *   cc -std=c11 -D_GNU_SOURCE -DREDIS_TEST -pthread -O2 -g -Wall -Wextra \
 *      -Werror -I src -o build/clitransport-test src/clitransport.c \
 *      tests/c/clitransport-test-main.c && build/clitransport-test
 *
 * Prints one "[ok]: clitransport - <name>" or "[err]: clitransport -
 * <name>" line per test case and exits non-zero if any failed.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "clitransport.h"

int main(int argc, char **argv) {
    return cliTransportTest(argc, argv, 0) ? 1 : 0;
}
