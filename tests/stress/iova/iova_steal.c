/* SPDX-License-Identifier: MIT */
/*
 * Stress test of the thread caches' owner/stealer handshake (iova_mag.c), also run under
 * ThreadSanitizer and ASan.
 *
 *   stress_iova_steal THREADS ITERATIONS [expect-fallback]
 *
 * THREADS owner threads run the magazine hit paths flat out (bursts of allocations, then
 * their frees, some through the DMA layer's owned path; a free with a wrong size must be
 * refused) while one more thread steals their caches all the time: dg_iova_flush_caches(),
 * dg_iova_get_stats() (which counts every cache), dg_iova_check() (which must pass at any
 * moment: a CACHED range is always in exactly one magazine) and dg_iova_trim(), and starts
 * short-lived threads that fill a cache and exit (their caches go back while the others run).
 * A shared ownership bitmap over every granule catches a range handed out twice. At the end
 * every range is free, no thread cache is left (every thread that used the space exited), and
 * what is cached is whole magazines in the depot.
 *
 * Then destroy with caches held: threads fill their caches and wait while the space is
 * destroyed; a new space is made (perhaps at the same address) and the same threads use it
 * and exit. A cache of the dead space reached through a thread's remembered entry, or freed
 * twice, is a use after free for ASan (and valgrind).
 *
 * Each part runs twice: with membarrier (when the kernel has it) and with the exchange
 * fallback (iova_mag_force_fallback). With "expect-fallback" (run with
 * DG_IOVA_NO_MEMBARRIER=1) the process must have come up without membarrier.
 */
#include "iova/iova_owned.h"
#include "iova/iova_priv.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../test_rand.h"

#define G     4096ull
#define NG    (1ull << 16) /* 256 MiB: one zone */
#define BURST 48

static struct dg_iova_space *space;
static _Atomic uint64_t owner[NG / 64];
static atomic_int failed;
static atomic_int owners_left;
static atomic_uint steal_rounds; /* owners go on until the stealer made this many */
static unsigned int iterations;

#define FAIL(...)                                                   \
	do {                                                        \
		fprintf(stderr, "stress_iova_steal: " __VA_ARGS__); \
		fputc('\n', stderr);                                \
		atomic_store(&failed, 1);                           \
	} while (0)

static uint64_t rnd(uint64_t *st)
{
	return xorshift64(st);
}

static void take(uint64_t iova, uint64_t len)
{
	for (uint64_t g = iova / G; g < iova / G + len; g++) {
		uint64_t bit = 1ull << (g % 64);

		if (atomic_fetch_or(&owner[g / 64], bit) & bit)
			FAIL("granule %#llx handed out twice", (unsigned long long)g);
	}
}

static void give(uint64_t iova, uint64_t len)
{
	for (uint64_t g = iova / G; g < iova / G + len; g++)
		atomic_fetch_and(&owner[g / 64], ~(1ull << (g % 64)));
}

static void *owner_thread(void *arg)
{
	uint64_t rng = 0x9e3779b9u + (uintptr_t)arg * 7919;
	struct iova_owned o[BURST];

	for (unsigned int it = 0;
	     (it < iterations || atomic_load(&steal_rounds) < 16) && !atomic_load(&failed); it++) {
		unsigned int n = 1 + (unsigned int)(rnd(&rng) % BURST);
		bool owned = it % 4 == 3;

		for (unsigned int i = 0; i < n; i++) {
			uint64_t len = 1ull << (rnd(&rng) % 3);
			int e = owned ? iova_alloc_owned(space, len * G, UINT64_MAX, &o[i].iova,
							 &o[i].token) :
					dg_iova_alloc(space, len * G, UINT64_MAX, 0, &o[i].iova);

			if (e) {
				FAIL("alloc of %llu granules: %d", (unsigned long long)len, e);
				n = i;
				break;
			}
			o[i].size = len * G;
			take(o[i].iova, len);
		}
		for (unsigned int i = 0; i < n; i++)
			give(o[i].iova, o[i].size / G);
		if (owned) {
			iova_free_owned(space, o, n);
			continue;
		}
		/* a free of a live range of ours with another size is refused, changing nothing (a
		 * second free of a freed range is no test here: another thread may have it now) */
		if (n && dg_iova_free(space, o[0].iova, 2 * o[0].size) != -EINVAL)
			FAIL("free of %#llx with a wrong size accepted",
			     (unsigned long long)o[0].iova);
		for (unsigned int i = 0; i < n; i++) {
			if (dg_iova_free(space, o[i].iova, o[i].size))
				FAIL("free of %#llx failed", (unsigned long long)o[i].iova);
		}
	}
	atomic_fetch_sub(&owners_left, 1);
	return NULL;
}

/* A short life: fill a cache (two full magazines and a partial one) and exit. */
static void *brief_thread(void *arg)
{
	uint64_t r[300];

	(void)arg;
	for (unsigned int i = 0; i < 300; i++) {
		if (dg_iova_alloc(space, G, UINT64_MAX, 0, &r[i])) {
			FAIL("brief alloc");
			return NULL;
		}
		take(r[i], 1);
	}
	for (unsigned int i = 0; i < 300; i++) {
		give(r[i], 1);
		if (dg_iova_free(space, r[i], G))
			FAIL("brief free");
	}
	return NULL;
}

static void *stealer_thread(void *arg)
{
	struct dg_iova_stats st;
	unsigned int round = 0;

	(void)arg;
	while (atomic_load(&owners_left) > 0 && !atomic_load(&failed)) {
		pthread_t t;

		atomic_store(&steal_rounds, round);
		switch (round++ % 4) {
		case 0:
			dg_iova_flush_caches(space);
			break;
		case 1:
			dg_iova_get_stats(space, &st);
			if (st.live_ranges > (uint64_t)BURST * 70 + 300)
				FAIL("%llu live ranges", (unsigned long long)st.live_ranges);
			break;
		case 2:
			if (dg_iova_check(space, stderr))
				FAIL("check failed mid-stream");
			dg_iova_trim(space);
			break;
		default:
			if (round % 16 == 3 && !pthread_create(&t, NULL, brief_thread, NULL))
				pthread_join(t, NULL);
			break;
		}
	}
	return NULL;
}

static struct dg_iova_space *make(bool fallback)
{
	struct dg_iova_config cfg = {.start = 0, .end = NG * G - 1, .granule = G};
	struct dg_iova_space *s = dg_iova_create(&cfg);

	if (!s) {
		perror("dg_iova_create");
		exit(1);
	}
	if (fallback)
		iova_mag_force_fallback(s);
	return s;
}

static int run(unsigned int nthreads, bool fallback)
{
	pthread_t th[64], stealer;
	struct dg_iova_stats st;

	space = make(fallback);
	atomic_store(&owners_left, (int)nthreads);
	atomic_store(&steal_rounds, 0);
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_create(&th[i], NULL, owner_thread, (void *)(uintptr_t)i);
	pthread_create(&stealer, NULL, stealer_thread, NULL);
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	pthread_join(stealer, NULL);
	if (dg_iova_check(space, stderr))
		FAIL("check failed");
	dg_iova_get_stats(space, &st);
	if (st.live_ranges)
		FAIL("%llu ranges still live", (unsigned long long)st.live_ranges);
	if (iova_mag_ncaches(space))
		FAIL("%llu thread caches after every user exited",
		     (unsigned long long)iova_mag_ncaches(space));
	if (st.cached_ranges != st.depot_magazines * DG_IOVA_MAG_SIZE)
		FAIL("%llu cached ranges, %llu depot magazines",
		     (unsigned long long)st.cached_ranges, (unsigned long long)st.depot_magazines);
	for (size_t i = 0; i < NG / 64; i++)
		if (atomic_load(&owner[i]))
			FAIL("ownership bitmap not empty");
	printf("stress_iova_steal: %u owners (%s): %llu allocs (%llu hits), %llu bad frees, %llu "
	       "flushes\n",
	       nthreads,
	       fallback	   ? "fallback" :
	       space->memb ? "membarrier" :
			     "no membarrier",
	       (unsigned long long)st.allocs, (unsigned long long)st.magazine_hits,
	       (unsigned long long)st.bad_frees, (unsigned long long)st.cache_flushes);
	dg_iova_destroy(space);
	return atomic_load(&failed);
}

static pthread_barrier_t bar;

static void *holder_thread(void *arg)
{
	uint64_t r[200];

	(void)arg;
	for (int phase = 0; phase < 2; phase++) {
		for (unsigned int i = 0; i < 200; i++)
			if (dg_iova_alloc(space, G << (i % 2), UINT64_MAX, 0, &r[i]))
				FAIL("holder alloc");
		for (unsigned int i = 0; i < 200; i++)
			if (dg_iova_free(space, r[i], G << (i % 2)))
				FAIL("holder free");
		pthread_barrier_wait(&bar); /* caches full */
		pthread_barrier_wait(&bar); /* the space was destroyed, a new one made */
	}
	return NULL;
}

static int destroy_held(unsigned int nthreads, bool fallback)
{
	pthread_t th[64];
	struct dg_iova_stats st;

	pthread_barrier_init(&bar, NULL, nthreads + 1);
	space = make(fallback);
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_create(&th[i], NULL, holder_thread, NULL);
	for (int phase = 0; phase < 2; phase++) {
		pthread_barrier_wait(&bar);
		dg_iova_get_stats(space, &st);
		if (st.cached_ranges != 200ull * nthreads || iova_mag_ncaches(space) != nthreads)
			FAIL("%llu cached in %llu caches before destroy",
			     (unsigned long long)st.cached_ranges,
			     (unsigned long long)iova_mag_ncaches(space));
		dg_iova_destroy(space); /* the caches are held */
		space = make(fallback);
		pthread_barrier_wait(&bar);
	}
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	if (iova_mag_ncaches(space) || dg_iova_check(space, stderr))
		FAIL("caches left after exits, or check failed");
	dg_iova_destroy(space);
	pthread_barrier_destroy(&bar);
	return atomic_load(&failed);
}

int main(int argc, char **argv)
{
	unsigned int nthreads = argc > 1 ? (unsigned int)atoi(argv[1]) : 2;
	struct dg_iova_space *probe;

	iterations = argc > 2 ? (unsigned int)atoi(argv[2]) : 20000;
	if (nthreads < 1 || nthreads > 64) {
		fprintf(stderr, "usage: stress_iova_steal THREADS(1..64) ITERATIONS "
				"[expect-fallback]\n");
		return 2;
	}
	probe = make(false);
	if (argc > 3 && !strcmp(argv[3], "expect-fallback") && probe->memb) {
		fprintf(stderr, "stress_iova_steal: membarrier in use despite "
				"DG_IOVA_NO_MEMBARRIER\n");
		return 1;
	}
	dg_iova_destroy(probe);
	for (int fb = 0; fb < 2; fb++) {
		if (run(nthreads, fb) || destroy_held(nthreads, fb))
			return 1;
	}
	return 0;
}
