/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/iommu/test_arena.h - host memory for the engine's unit tests: one arena of
 * ARENA_SIZE bytes (the including test defines it) aligned to 2 MiB, so every granule and
 * 2 MiB pages can map it; a cmocka group setup/teardown pair, and host(off) = its address.
 */
#ifndef DG_TEST_ARENA_H
#define DG_TEST_ARENA_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef ARENA_SIZE
#error "define ARENA_SIZE before including test_arena.h"
#endif

static uint8_t *arena;

static int setup_arena(void **state)
{
	(void)state;
	arena = aligned_alloc(0x200000, ARENA_SIZE);
	if (!arena)
		return -1;
	memset(arena, 0, ARENA_SIZE);
	return 0;
}

static int teardown_arena(void **state)
{
	(void)state;
	free(arena);
	return 0;
}

static uint64_t host(uint64_t off)
{
	return (uint64_t)(uintptr_t)(arena + off);
}

#endif /* DG_TEST_ARENA_H */
