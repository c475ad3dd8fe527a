/* SPDX-License-Identifier: MIT */
/*
 * tests/test_rand.h - the tests' deterministic random numbers, each from one 64-bit state
 * word, so a seed always replays the same sequence: splitmix64 (Steele, Lea and Flood, "Fast
 * splittable pseudorandom number generators", OOPSLA 2014; any seed) and Marsaglia's
 * xorshift64 (13, 7, 17; the state must not be 0).
 */
#ifndef DG_TESTS_TEST_RAND_H
#define DG_TESTS_TEST_RAND_H

#include <stdint.h>

static inline uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t xorshift64(uint64_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return *state;
}

#endif /* DG_TESTS_TEST_RAND_H */
