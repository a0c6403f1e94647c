/* rdmamig.h -- identity of the rdma-migration fork of Redis.
 *
 * This fork ships as a patch series over a pinned upstream Redis (see
 * deps/upstream.env). This header is what upstream files include to say
 * which fork, which version of it and which build options they run with:
 * `redis-server --version` and the "# Server" section of INFO use it.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __RDMAMIG_H
#define __RDMAMIG_H

#include "sds.h"

/* Version of the fork, independent of REDIS_VERSION. */
#define RDMAMIG_VERSION "0.9.0"

const char *rdmaMigVersion(void);
int rdmaMigSupportCompiled(void);
int rdmaMigCountDevices(void);
const char *rdmaMigUpstreamPatchlevel(void);
const char *rdmaMigVersionSuffix(void);
sds rdmaMigGenInfoServer(sds info);

#endif
