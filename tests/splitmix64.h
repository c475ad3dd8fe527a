/* SPDX-License-Identifier: MIT */
/*
 * tests/splitmix64.h - the tests' deterministic random numbers: splitmix64 (Steele, Lea and
 * Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014), one 64-bit state
 * word, every output a bijection of the state: a seed always replays the same sequence.
 */
#ifndef DG_TESTS_SPLITMIX64_H
#define DG_TESTS_SPLITMIX64_H

#include <stdint.h>

static inline uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

#endif /* DG_TESTS_SPLITMIX64_H */
