/* migpatch-env.h -- the server state the migpatch fuzz target and its seed
 * maker run in (migpatch-env.c).
 *
 * Input format of the target (little endian), which the seed maker
 * writes:
 *
 *   u16 slot (modulo 16384), u8 blocks - 1 (low 2 bits: 1..4),
 *   u32 keys the manifest must hold, u64 the manifest's donor address,
 *   per block: u64 its donor address, u8 size in 64 KB units - 1 (low 4
 *   bits), then patches of the blocks' bytes, as in slotalloc-fuzz.c:
 *   u8 block, u24 offset (modulo the block's size), u16 length, the bytes.
 *
 * Copyright (c) 2026, the rdma-migration authors. BSD-3-Clause, like Redis.
 */

#ifndef __MIGPATCH_ENV_H
#define __MIGPATCH_ENV_H

#include <stddef.h>

#define MIGPATCH_MAX_BLOCKS 4

void fuzzServerInit(void);
size_t fuzzDeleteSlotKeys(int slot);

#endif
