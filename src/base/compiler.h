/* SPDX-License-Identifier: MIT */
/*
 * base/compiler.h - compiler helpers shared by every layer (private, never installed).
 *
 * Only what C11 and gcc/clang give directly: branch hints, cache-line alignment,
 * container_of, and power-of-two arithmetic that every layer needs for page sizes.
 */
#ifndef DG_BASE_COMPILER_H
#define DG_BASE_COMPILER_H

#include <stddef.h>
#include <stdint.h>

#define DG_CACHELINE			   64

#define dg_likely(x)			   __builtin_expect(!!(x), 1)
#define dg_unlikely(x)			   __builtin_expect(!!(x), 0)
#define dg_aligned(n)			   __attribute__((aligned(n)))
#define dg_cacheline			   dg_aligned(DG_CACHELINE)
#define dg_unused			   __attribute__((unused))
#define dg_noinline			   __attribute__((noinline))
#define dg_always_inline		   inline __attribute__((always_inline))

#define dg_container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

#define DG_ARRAY_SIZE(a)		   (sizeof(a) / sizeof((a)[0]))

static inline int dg_is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

/* log2 of a non-zero value, rounded down. */
static inline unsigned int dg_ilog2(uint64_t x)
{
	return 63u - (unsigned int)__builtin_clzll(x);
}

/* Smallest power of two >= x, for 0 < x <= 2^63. */
static inline uint64_t dg_roundup_pow2(uint64_t x)
{
	return x <= 1 ? 1 : 1ull << (64u - (unsigned int)__builtin_clzll(x - 1));
}

/* Alignment helpers; @a must be a power of two. */
static inline uint64_t dg_align_down(uint64_t x, uint64_t a)
{
	return x & ~(a - 1);
}

static inline uint64_t dg_align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) & ~(a - 1);
}

static inline int dg_is_aligned(uint64_t x, uint64_t a)
{
	return (x & (a - 1)) == 0;
}

#endif /* DG_BASE_COMPILER_H */
