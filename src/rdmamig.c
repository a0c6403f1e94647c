/* rdmamig.c -- build identity of the rdma-migration fork.
 *
 * The fork is upstream Redis plus Debian's security patches plus our patch
 * series (patches/), with our subsystems in new files like this one. An
 * operator must be able to tell at a glance what a running binary is:
 *
 *   - `redis-server --version` prints upstream's line followed by
 *     " rdma-migration=<version> rdma=yes|no";
 *   - INFO server adds rdma_migration_version, rdma_support and
 *     upstream_patchlevel (the Debian revision whose patches were applied,
 *     or "<version>-upstream" when built from upstream's own tarball).
 *
 * "rdma=yes" means the RDMA transport was compiled in (BUILD_RDMA, which
 * defines USE_RDMA and links libibverbs/librdmacm); whether this host has
 * devices to use it with is INFO server's rdma_devices (0 when not
 * compiled in, or when the host has none).
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#include "server.h"
#include "rdmamig.h"
#include "upstream_patchlevel.h"

#ifdef USE_RDMA
#include <infiniband/verbs.h>
#endif

const char *rdmaMigVersion(void) {
    return RDMAMIG_VERSION;
}

/* 1 when the RDMA transport is compiled into this binary. */
int rdmaMigSupportCompiled(void) {
#ifdef USE_RDMA
    return 1;
#else
    return 0;
#endif
}

const char *rdmaMigUpstreamPatchlevel(void) {
    return RDMAMIG_UPSTREAM_PATCHLEVEL;
}

/* Appended by version() to upstream's --version line, so tools that parse
 * "Redis server v=..." keep working and ours can read the tail. */
const char *rdmaMigVersionSuffix(void) {
    return rdmaMigSupportCompiled() ?
        " rdma-migration=" RDMAMIG_VERSION " rdma=yes" :
        " rdma-migration=" RDMAMIG_VERSION " rdma=no";
}

/* Number of RDMA devices the verbs library sees on this host. Listing them
 * scans sysfs, so the answer is cached for RDMAMIG_DEVICES_CACHE_SECS: INFO
 * is polled by monitoring, and devices come and go rarely. */
#define RDMAMIG_DEVICES_CACHE_SECS 10
int rdmaMigCountDevices(void) {
#ifdef USE_RDMA
    static int cached = -1;
    static time_t cached_at = 0;
    time_t now = time(NULL);
    if (cached < 0 || now - cached_at >= RDMAMIG_DEVICES_CACHE_SECS) {
        int n = 0;
        struct ibv_device **list = ibv_get_device_list(&n);
        if (list) ibv_free_device_list(list);
        else n = 0;
        cached = n;
        cached_at = now;
    }
    return cached;
#else
    return 0;
#endif
}

/* Appends our fields to the "# Server" section of INFO. */
sds rdmaMigGenInfoServer(sds info) {
    return sdscatprintf(info,
        "rdma_migration_version:%s\r\n"
        "rdma_support:%s\r\n"
        "rdma_devices:%d\r\n"
        "upstream_patchlevel:%s\r\n",
        rdmaMigVersion(),
        rdmaMigSupportCompiled() ? "yes" : "no",
        rdmaMigCountDevices(),
        rdmaMigUpstreamPatchlevel());
}
