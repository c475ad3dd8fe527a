/* SPDX-License-Identifier: MIT */
/*
 * Multi-threaded stress test of the IOVA allocator (also run under ThreadSanitizer).
 *
 *   stress_iova THREADS ITERATIONS
 *
 * THREADS threads allocate and free mixed sizes with mixed limits (full, 32-bit, prefer32) on
 * one space with magazines. A shared ownership bitmap over every granule catches a range that
 * is handed out twice: each allocation sets its granules with atomic fetch_or and must find
 * them clear. A third of the frees happen on another thread (a hand-off queue), so ranges
 * move between thread caches; threads also re-free what they just freed (must fail), look
 * ranges up, and one thread flushes and trims the caches now and then (stealing the others'
 * caches). The run is repeated with the caches entered by membarrier's handshake and by the
 * exchange fallback (iova_mag.c). At the end everything is freed, dg_iova_check() must pass
 * and no range may be live.
 *
 * Then the racing frees: every thread frees the same batch of ranges at the same moment (each
 * in another order, after a barrier), many rounds. A free takes no lock: each range must be
 * freed exactly once, every other free must fail with -ENOENT (the range is cached, or back in
 * the tree), and the space must pass dg_iova_check() after every round. Between rounds one
 * thread flushes the caches now and then, so nodes go back to the tree and are reused for other
 * ranges (new generations) while stale lookups of them may still be in flight.
 */
#include <dmaguard/iova.h>

#include "iova/iova_priv.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../test_rand.h"

#define G	(1ull << 16) /* granule */
#define NG	(1ull << 17) /* 8 GiB: two cache zones */
#define MAXLIVE 256
#define QCAP	1024

static struct dg_iova_space *space;
static _Atomic uint64_t owner[NG / 64];
static atomic_int failed;
static unsigned int iterations;

struct range {
	uint64_t iova, size, len; /* len: granules reserved */
};

static struct {
	pthread_mutex_t lock;
	struct range q[QCAP];
	unsigned int n;
} handoff = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define FAIL(...)                                             \
	do {                                                  \
		fprintf(stderr, "stress_iova: " __VA_ARGS__); \
		fputc('\n', stderr);                          \
		atomic_store(&failed, 1);                     \
	} while (0)

static uint64_t rnd(uint64_t *st)
{
	return splitmix64(st);
}

/* Claim (or release) the granules of a range in the ownership bitmap. */
static void claim(const struct range *r, bool take)
{
	uint64_t p0 = r->iova / G;

	for (uint64_t p = p0; p < p0 + r->len; p++) {
		uint64_t bit = 1ull << (p % 64), old;

		if (take)
			old = atomic_fetch_or_explicit(&owner[p / 64], bit, memory_order_relaxed);
		else
			old = atomic_fetch_and_explicit(&owner[p / 64], ~bit, memory_order_relaxed);
		if (!!(old & bit) == take)
			FAIL("granule %#llx %s twice (range %#llx + %llu)", (unsigned long long)p,
			     take ? "handed out" : "released", (unsigned long long)r->iova,
			     (unsigned long long)r->len);
	}
}

static void release(struct range *r)
{
	claim(r, false);
	int err = dg_iova_free(space, r->iova, r->size);

	if (err)
		FAIL("free %#llx: %d", (unsigned long long)r->iova, err);
}

static void *worker(void *arg)
{
	uint64_t seed = (uintptr_t)arg * 7919 + 1;
	struct range live[MAXLIVE];
	unsigned int nlive = 0;

	for (unsigned int it = 0; it < iterations && !atomic_load(&failed); it++) {
		unsigned int op = rnd(&seed) % 100;

		if (op < 50 && nlive < MAXLIVE) {
			static const uint64_t sizes[] = {1, 1, 1, 2, 2, 3, 4, 8, 16, 64, 1024};
			uint64_t n = sizes[rnd(&seed) % (sizeof(sizes) / sizeof(sizes[0]))];
			unsigned int flags = rnd(&seed) % 5 == 0 ? DG_IOVA_ALLOC_PAGE_ALIGN : 0;
			unsigned int lk = rnd(&seed) % 4;
			uint64_t limit = lk == 1 ? (1ull << 32) - 1 : UINT64_MAX;
			struct range r = {.size = n * G - rnd(&seed) % G, .len = n};
			if (!flags)
				while (r.len & (r.len - 1))
					r.len += r.len & -r.len; /* round up to a power of two */
			int err = lk == 2 ? dg_iova_alloc_prefer32(space, r.size, limit, flags,
								   &r.iova) :
					    dg_iova_alloc(space, r.size, limit, flags, &r.iova);

			if (err == -ENOSPC)
				continue;
			if (err) {
				FAIL("alloc: %d", err);
				break;
			}
			if (r.iova % G || (!flags && r.iova % (r.len * G)) ||
			    r.iova + r.len * G - 1 > limit || r.iova / G + r.len > NG)
				FAIL("bad range %#llx + %llu", (unsigned long long)r.iova,
				     (unsigned long long)r.len);
			claim(&r, true);
			live[nlive++] = r;
		} else if (op < 80 && nlive) {
			unsigned int i = rnd(&seed) % nlive;
			struct range r = live[i];

			live[i] = live[--nlive];
			if (rnd(&seed) % 3 == 0) {
				/* hand it to whichever thread comes next */
				pthread_mutex_lock(&handoff.lock);
				if (handoff.n < QCAP) {
					handoff.q[handoff.n++] = r;
					r.size = 0;
				}
				pthread_mutex_unlock(&handoff.lock);
				if (!r.size)
					continue;
			}
			release(&r);
		} else if (op < 82 && nlive) {
			/* Bad frees that no race can make valid: a live range of ours with the
			 * wrong size, and a reserved granule. */
			const struct range *r = &live[rnd(&seed) % nlive];
			int err = dg_iova_free(space, r->iova, r->size + G);

			if (err != -EINVAL)
				FAIL("free with a wrong size: %d", err);
			err = dg_iova_free(space, (1 + rnd(&seed) % 15) * G, G);
			if (err != -ENOENT)
				FAIL("free of a reserved granule: %d", err);
		} else if (op < 90) {
			struct range r = {0};

			pthread_mutex_lock(&handoff.lock);
			if (handoff.n)
				r = handoff.q[--handoff.n];
			pthread_mutex_unlock(&handoff.lock);
			if (r.size)
				release(&r);
		} else if (op < 98 && nlive) {
			const struct range *r = &live[rnd(&seed) % nlive];
			uint64_t start, size;
			int err = dg_iova_find(space, r->iova + (rnd(&seed) % r->len) * G, &start,
					       &size);

			if (err || start != r->iova || (size + G - 1) / G != (r->size + G - 1) / G)
				FAIL("find %#llx: %d", (unsigned long long)r->iova, err);
		} else if ((uintptr_t)arg == 0) {
			if (op == 98)
				dg_iova_flush_caches(space);
			else
				dg_iova_trim(space);
		}
	}
	while (nlive)
		release(&live[--nlive]);
	return NULL;
}

static int run(unsigned int nthreads, bool fallback)
{
	struct dg_iova_config cfg = {.start = 0, .end = NG * G - 1, .granule = G};
	pthread_t th[64];
	struct dg_iova_stats st;

	space = dg_iova_create(&cfg);
	if (!space || dg_iova_reserve(space, G, 15 * G)) {
		perror("dg_iova_create");
		return 1;
	}
	if (fallback)
		iova_mag_force_fallback(space);
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	while (handoff.n)
		release(&handoff.q[--handoff.n]);
	if (dg_iova_check(space, stderr))
		FAIL("check failed");
	dg_iova_get_stats(space, &st);
	if (st.live_ranges)
		FAIL("%llu ranges still live", (unsigned long long)st.live_ranges);
	for (size_t i = 0; i < NG / 64; i++)
		if (atomic_load(&owner[i]))
			FAIL("ownership bitmap not empty");
	printf("stress_iova: %u threads, %s: %llu allocs (%llu from magazines), %llu frees, "
	       "%llu bad frees, %llu flushes, max %llu nodes/op\n",
	       nthreads, fallback ? "fallback" : "membarrier", (unsigned long long)st.allocs,
	       (unsigned long long)st.magazine_hits, (unsigned long long)st.frees,
	       (unsigned long long)st.bad_frees, (unsigned long long)st.cache_flushes,
	       (unsigned long long)st.max_op_nodes_visited);
	dg_iova_destroy(space);
	return atomic_load(&failed);
}

#define RACE_N 48

static struct range race_r[RACE_N];
static atomic_int race_wins[RACE_N];
static pthread_barrier_t race_bar;
static unsigned int race_rounds, race_threads;

static void *race_worker(void *arg)
{
	unsigned int id = (unsigned int)(uintptr_t)arg;
	uint64_t rng = 0x5eed + id;

	for (unsigned int round = 0; round < race_rounds; round++) {
		if (id == 0) {
			for (unsigned int i = 0; i < RACE_N; i++) {
				/* cacheable sizes, and 3 granules page aligned: a tree free */
				uint64_t size = i % 4 == 3 ? 3 * G : (1 + rnd(&rng) % 4) * G;
				unsigned int fl = i % 4 == 3 ? DG_IOVA_ALLOC_PAGE_ALIGN : 0;
				int e = dg_iova_alloc(space, size, UINT64_MAX, fl, &race_r[i].iova);

				if (e)
					FAIL("race alloc: %d", e);
				race_r[i].size = size;
				atomic_store(&race_wins[i], 0);
			}
			if (round % 8 == 7)
				dg_iova_flush_caches(space);
		}
		pthread_barrier_wait(&race_bar);
		for (unsigned int k = 0; k < RACE_N; k++) {
			unsigned int i = (k * (2 * id + 1) + id * 7) % RACE_N;
			int e = dg_iova_free(space, race_r[i].iova, race_r[i].size);

			if (!e)
				atomic_fetch_add(&race_wins[i], 1);
			else if (e != -ENOENT)
				FAIL("racing free of %#llx: %d", (unsigned long long)race_r[i].iova,
				     e);
		}
		pthread_barrier_wait(&race_bar);
		if (id == 0) {
			for (unsigned int i = 0; i < RACE_N; i++)
				if (atomic_load(&race_wins[i]) != 1)
					FAIL("range %#llx freed %d times",
					     (unsigned long long)race_r[i].iova,
					     atomic_load(&race_wins[i]));
			if (dg_iova_check(space, stderr))
				FAIL("check failed after a racing round");
		}
		pthread_barrier_wait(&race_bar);
	}
	return NULL;
}

static int race(unsigned int nthreads, bool fallback)
{
	struct dg_iova_config cfg = {.start = 0, .end = NG * G - 1, .granule = G};
	pthread_t th[64];
	struct dg_iova_stats st;

	space = dg_iova_create(&cfg);
	if (!space)
		return 1;
	if (fallback)
		iova_mag_force_fallback(space);
	race_threads = nthreads < 2 ? 2 : nthreads;
	race_rounds = iterations / 500 + 1;
	pthread_barrier_init(&race_bar, NULL, race_threads);
	for (unsigned int i = 0; i < race_threads; i++)
		pthread_create(&th[i], NULL, race_worker, (void *)(uintptr_t)i);
	for (unsigned int i = 0; i < race_threads; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&race_bar);
	dg_iova_get_stats(space, &st);
	if (st.live_ranges || st.bad_frees != (uint64_t)(race_threads - 1) * RACE_N * race_rounds)
		FAIL("racing frees: %llu live, %llu bad frees", (unsigned long long)st.live_ranges,
		     (unsigned long long)st.bad_frees);
	printf("stress_iova: racing frees, %u threads, %s: %u rounds of %u ranges, %llu "
	       "refused\n",
	       race_threads, fallback ? "fallback" : "membarrier", race_rounds, RACE_N,
	       (unsigned long long)st.bad_frees);
	dg_iova_destroy(space);
	return atomic_load(&failed);
}

int main(int argc, char **argv)
{
	unsigned int nthreads = argc > 1 ? (unsigned int)atoi(argv[1]) : 2;

	iterations = argc > 2 ? (unsigned int)atoi(argv[2]) : 100000;
	if (nthreads < 1 || nthreads > 64) {
		fprintf(stderr, "usage: stress_iova THREADS(1..64) ITERATIONS\n");
		return 2;
	}
	if (run(nthreads, false) || run(nthreads, true) || race(nthreads, false) ||
	    race(nthreads, true))
		return 1;
	return 0;
}
