/* SPDX-License-Identifier: MIT */
/*
 * base/clock.h - monotonic time for timeouts, fault timestamps and benchmarks.
 *
 * clock_gettime(CLOCK_MONOTONIC) costs ~40 ns here (vDSO), so hot paths read it once per
 * batch, never per translation.
 */
#ifndef DG_BASE_CLOCK_H
#define DG_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t dg_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A pause hint for spin-wait loops. */
static inline void dg_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

#endif /* DG_BASE_CLOCK_H */
