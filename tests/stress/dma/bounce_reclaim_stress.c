/* SPDX-License-Identifier: MIT */
/*
 * Stress test of the bounce policy's reclaim of cached slots (src/dma/bounce.c, "Reclaim"):
 * exact fits of a direction's whole capacity by threads whose stacks hold each other's slots.
 * Also runs under ThreadSanitizer.
 *
 *   stress_dma_bounce_reclaim THREADS ROUNDS
 *
 * The capacity of each direction is measured first (whole-area slots until -ENOSPC). Every
 * round picks a direction and a slot size (64 B .. 4 KiB: the per-thread stacks and the
 * locked path), so the direction holds exactly C slots, and splits C at random among the
 * threads. Each thread maps its share (single maps and bulk maps), then a few times unmaps a
 * random part of it (onto its own stack) and maps as many again, then unmaps everything.
 * The live slots of all threads never exceed C, so EVERY map must succeed: a map may find the
 * areas dry only while slots sit on other threads' stacks (or are being given back), and must
 * get them back rather than fail - the threads are mapping, unmapping and refilling their
 * stacks on the same areas at the same time, so the thief's steal meets owners inside their
 * caches, and two threads meet at the last free slots (the exact-fit race).
 *
 * Bidirectional rounds fill each buffer with a pattern unique to the mapping and check it
 * after the unmap's copy back (two live mappings sharing a slot would swap patterns). At the
 * end of every round (all threads between two barriers) in_use is 0, the structure check
 * holds (every slot in exactly one place: a free list, a quick cache, a stack) and, every
 * few rounds, every area gives its whole-area slot again: nothing lost.
 */
#include <dmaguard/dev.h>
#include <dmaguard/dma.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../test_rand.h"
#include "race_world.h"

#define MAX_THREADS 8
#define AREA	    (256u << 10)
#define MAX_AREAS   64
#define BULK	    16

static const size_t sizes[] = {64, 256, 2048, 4096, 128, 1024};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static struct dg_dma_dev *dd;
static struct dg_device *dev;
static unsigned int nthreads, rounds;
static unsigned int nareas[3]; /* whole-area slots per direction */
static pthread_barrier_t bar;
static _Atomic unsigned int failed;

/* the current round's plan (written by thread 0 between barriers) */
static enum dg_dma_dir r_dir;
static size_t r_len;
static unsigned int r_share[MAX_THREADS];

struct worker {
	pthread_t thr;
	unsigned int id;
	uint64_t seed;
	uint64_t *dma; /* live addresses, [0, n) */
	uint32_t *tag; /* their patterns */
	uint8_t *mem;  /* the buffers of a share, r_len apart */
	unsigned int n;
};

static struct worker w[MAX_THREADS];
static _Atomic uint32_t next_tag = 1;

static void fail(const char *what, unsigned int id, long v)
{
	fprintf(stderr, "stress_dma_bounce_reclaim: thread %u: %s (%ld)\n", id, what, v);
	atomic_fetch_add(&failed, 1);
}

static uint8_t pat(uint32_t tag, size_t i)
{
	return (uint8_t)(tag * 131u + i * 7u + 1u);
}

/* Map buffers [from, to) of @k with the round's length (single or bulk at random); returns
 * where it stopped (@to, or the first buffer a map refused). */
static unsigned int map_range(struct worker *k, unsigned int from, unsigned int to)
{
	unsigned int i = from;

	while (i < to) {
		unsigned int m = 1 + (unsigned int)(xorshift64(&k->seed) % BULK);
		void *bufs[BULK];
		int r;

		if (m > to - i)
			m = to - i;
		for (unsigned int j = 0; j < m; j++) {
			uint8_t *b = k->mem + (size_t)(i + j) * r_len;

			k->tag[i + j] =
				atomic_fetch_add_explicit(&next_tag, 1, memory_order_relaxed);
			if (r_dir == DG_DMA_BIDIRECTIONAL)
				for (size_t x = 0; x < r_len; x++)
					b[x] = pat(k->tag[i + j], x);
			bufs[j] = b;
		}
		if (m == 1)
			r = dg_dma_map_single(dd, bufs[0], r_len, r_dir, 0, &k->dma[i]);
		else
			r = dg_dma_map_bulk(dd, bufs, m, r_len, r_dir, 0, &k->dma[i]);
		if (r) {
			fail(m == 1 ? "map_single refused with capacity left" :
				      "map_bulk refused with capacity left",
			     k->id, r);
			return i;
		}
		i += m;
	}
	return to;
}

static void unmap_one(struct worker *k, unsigned int i)
{
	int r = dg_dma_unmap_single(dd, k->dma[i], r_len, r_dir, 0, NULL);

	if (r) {
		fail("unmap", k->id, r);
		return;
	}
	if (r_dir == DG_DMA_BIDIRECTIONAL) {
		const uint8_t *b = k->mem + (size_t)i * r_len;

		for (size_t x = 0; x < r_len; x++)
			if (b[x] != pat(k->tag[i], x)) {
				fail("a buffer came back with another mapping's bytes", k->id,
				     (long)x);
				return;
			}
	}
}

static void plan_round(unsigned int round)
{
	uint64_t s = 0x2545f4914f6cdd1dull ^ round;
	unsigned int cap, left;

	r_dir = (enum dg_dma_dir)(round % 3);
	r_len = sizes[(round / 3) % NSIZES];
	cap = (unsigned int)((uint64_t)nareas[r_dir] * AREA / r_len);
	left = cap;
	for (unsigned int t = 0; t + 1 < nthreads; t++) {
		/* uneven: one thread may take most, so stacks hold what others need */
		r_share[t] = (unsigned int)(xorshift64(&s) % (left + 1));
		left -= r_share[t];
	}
	r_share[nthreads - 1] = left;
}

static void check_round(unsigned int round)
{
	struct dg_dma_stats st;

	if (dg_dma_dev_stats(dd, &st) || st.bounce_in_use)
		fail("in_use not 0 at a round's end", 0, (long)st.bounce_in_use);
	if (dg_dma_dev_check(dd, stderr))
		fail("dg_dma_dev_check", 0, (long)round);
}

/* Every area of every direction gives its whole-area slot: nothing is lost anywhere. */
static void check_whole(void)
{
	static uint8_t big[AREA];

	for (unsigned int d = 0; d < 3; d++) {
		uint64_t a[MAX_AREAS];
		unsigned int n = 0;

		while (n < MAX_AREAS &&
		       dg_dma_map_single(dd, big, AREA, (enum dg_dma_dir)d, 0, &a[n]) == 0)
			n++;
		if (n != nareas[d])
			fail("whole areas lost", 0, (long)n);
		for (unsigned int i = 0; i < n; i++)
			if (dg_dma_unmap_single(dd, a[i], AREA, (enum dg_dma_dir)d, 0, NULL))
				fail("unmap of a whole area", 0, (long)i);
	}
}

static void *run(void *p)
{
	struct worker *k = p;

	for (unsigned int round = 0; round < rounds; round++) {
		unsigned int share;

		if (k->id == 0)
			plan_round(round);
		pthread_barrier_wait(&bar);
		share = r_share[k->id];
		share = map_range(k, 0, share);
		for (unsigned int again = 0; again < 3 && share; again++) {
			unsigned int from = (unsigned int)(xorshift64(&k->seed) % share);

			for (unsigned int i = from; i < share; i++)
				unmap_one(k, i);
			share = map_range(k, from, share);
		}
		for (unsigned int i = 0; i < share; i++)
			unmap_one(k, i);
		pthread_barrier_wait(&bar); /* no call runs until the next barrier */
		if (k->id == 0) {
			check_round(round);
			if (round % 8 == 7)
				check_whole();
		}
		pthread_barrier_wait(&bar);
		if (atomic_load(&failed))
			break;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct race_world rw;
	struct dg_dma_dev_config c;
	unsigned int maxcap = 0, maxareas = 0;

	nthreads = argc > 1 ? (unsigned int)atoi(argv[1]) : 3;
	rounds = argc > 2 ? (unsigned int)atoi(argv[2]) : 48;
	if (nthreads < 2 || nthreads > MAX_THREADS) {
		fprintf(stderr, "usage: stress_dma_bounce_reclaim THREADS(2..8) ROUNDS\n");
		return 2;
	}
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_BOUNCE;
	c.bounce.area_size = AREA;
	if (race_world_open_cfg(&rw, &c, true, true))
		return 1;
	dd = rw.dd;
	dev = rw.dev;
	for (unsigned int d = 0; d < 3; d++) {
		static uint8_t big[AREA];
		uint64_t a[MAX_AREAS];

		while (nareas[d] < MAX_AREAS &&
		       dg_dma_map_single(dd, big, AREA, (enum dg_dma_dir)d, 0, &a[nareas[d]]) == 0)
			nareas[d]++;
		for (unsigned int i = 0; i < nareas[d]; i++)
			dg_dma_unmap_single(dd, a[i], AREA, (enum dg_dma_dir)d, 0, NULL);
		if (!nareas[d])
			return 1;
		if (nareas[d] * (AREA / 64) > maxcap)
			maxcap = nareas[d] * (AREA / 64);
		if (nareas[d] > maxareas)
			maxareas = nareas[d];
	}
	if (pthread_barrier_init(&bar, NULL, nthreads))
		return 1;
	for (unsigned int i = 0; i < nthreads; i++) {
		w[i].id = i;
		w[i].seed = 0x9e3779b97f4a7c15ull * (i + 1);
		w[i].dma = calloc(maxcap, sizeof(*w[i].dma));
		w[i].tag = calloc(maxcap, sizeof(*w[i].tag));
		w[i].mem = malloc((size_t)maxareas * AREA); /* a share's buffers, back to back */
		if (!w[i].dma || !w[i].tag || !w[i].mem)
			return 1;
	}
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_create(&w[i].thr, NULL, run, &w[i]);
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_join(w[i].thr, NULL);
	/* the workers exited: their stacks went back, every area whole */
	check_round(rounds);
	check_whole();
	if (race_world_close(&rw))
		fail("destroy (a leak or an open batch)", 0, 0);
	for (unsigned int i = 0; i < nthreads; i++) {
		free(w[i].dma);
		free(w[i].tag);
		free(w[i].mem);
	}
	if (atomic_load(&failed))
		return 1;
	printf("stress_dma_bounce_reclaim: %u threads x %u rounds: ok\n", nthreads, rounds);
	return 0;
}
