/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/iommu/coverage_test.c - invalidation coverage: long random sequences of map,
 * unmap, invalidate, translate, quiesce/offline/online and domain switches on three devices,
 * each translation checked against the model of what a device may still have cached
 * (inval_model.c). A stale translation used after its command was applied fails the test.
 */
#include "inval_model.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>
#include "../../test_rand.h"

static uint64_t rng_state;

static uint64_t rng(void)
{
	return splitmix64(&rng_state);
}

static void test_random_sequences(void **state)
{
	static uint8_t buf[24000];
	struct inval_model_counts n = {0};

	(void)state;
	for (uint64_t seed = 1; seed <= 12; seed++) {
		rng_state = seed;
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = (uint8_t)rng();
		inval_model_run(buf, sizeof(buf), &n);
	}
	/* The cases that matter happened: stale hits before the invalidation was applied. */
	assert_true(n.walks > 1000 && n.hits > 500 && n.stale_hits > 50 && n.refused > 100);
	/* ...and with the neighbour fill: entries it made were used, some after their unmap. */
	assert_true(n.prefetched > 2000 && n.prefetch_hits > 400 && n.prefetch_stale_hits > 20);
	/* ...and the stream detector said both: walks next to one of the device's two streams
	   filled, the others (the first, or two lines from both) filled nothing, both checked
	   exactly. */
	assert_true(n.walks_seq > 1000 && n.walks_far > 100);
	assert_true(n.invals > 1000 && n.done > 100);
}

/* Many translations between few invalidations: long-lived cache entries, then laps. */
static void test_translate_heavy(void **state)
{
	static uint8_t buf[24000];
	struct inval_model_counts n = {0};

	(void)state;
	rng_state = 99;
	for (size_t i = 0; i < sizeof(buf); i += 8) {
		uint64_t r = rng();

		for (size_t j = 1; j < 8; j++)
			buf[i + j] = (uint8_t)(r >> (8 * j));
		/* 3 of 4 records translate (op codes 19..31), the rest anything. */
		buf[i] = (uint8_t)((i / 8) % 4 ? 19 + r % 13 : r);
	}
	inval_model_run(buf, sizeof(buf), &n);
	assert_true(n.hits > 300 && n.stale_hits > 20);
}

/*
 * Few translations, many invalidations, devices often offline: they fall whole queues behind
 * and must flush everything (a device that skipped commands without flushing would serve a
 * stale hit the model refuses).
 */
static void test_laps(void **state)
{
	/* op codes (inval_model.c): 8 inval, 16 state, 19 translate, 0 map, 5 unmap */
	static const uint8_t ops[] = {8, 8, 8, 8, 8, 8, 8, 8, 16, 19, 19, 19, 0, 0, 5};
	static uint8_t buf[24000];
	struct inval_model_counts n = {0};

	(void)state;
	for (uint64_t seed = 1; seed <= 6; seed++) {
		rng_state = seed * 1000;
		for (size_t i = 0; i < sizeof(buf); i += 8) {
			uint64_t r = rng();

			for (size_t j = 0; j < 8; j++)
				buf[i + j] = (uint8_t)(r >> (8 * j));
			buf[i] = ops[buf[i] % sizeof(ops)];
		}
		inval_model_run(buf, sizeof(buf), &n);
	}
	assert_true(n.laps > 100);
	assert_true(n.hits > 10);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_sequences),
		cmocka_unit_test(test_translate_heavy),
		cmocka_unit_test(test_laps),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
