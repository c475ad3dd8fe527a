/* SPDX-License-Identifier: MIT */
/*
 * Stress test of the claim of stream mappings (src/dma/map.c: claim_bulk, claim_live; the
 * live bitmap of stream.c): racing unmaps of the same granules by single and bulk calls.
 *
 *   stress_dma_claim_race RACERS ROUNDS
 *
 * Every round the main thread maps a ring of RING one-granule buffers with bulk calls (a
 * stream's adjacent granules, over more than one bitmap word: bit mappings) or, every third
 * round, single calls (the record's compare-and-swap), the device reads each (its
 * IOTLB caches them), and the racers, released together by a barrier, each unmap a window of
 * the ring that overlaps the others' - by single calls (in a batch or not), or one bulk call
 * (its own batch, or the caller's), ascending (the fast way: one atomic AND per word) or
 * shuffled (separate groups, and the slow way). Then:
 *  - every call either succeeded or said -ENOENT (a granule already claimed, or claimed for
 *    a moment by a racing call that then gave it back);
 *  - no granule was unmapped by two calls that succeeded (the claim linearizes);
 *  - a call that failed changed nothing: the main thread unmaps every granule no call took,
 *    and each of those unmaps must succeed;
 *  - strict: the device faults on every granule of the ring (the batch ends waited);
 * and at the end the statistics are exact (maps == unmaps, nothing live) and
 * dg_dma_dev_check() holds (the live bits match the records, spare chunks clear). Strict and
 * lazy. Runs under ThreadSanitizer too (the bitmap's release OR / acquire AND pairs).
 */
#include "race_world.h"
#include <dmaguard/dev.h>
#include <dmaguard/dma.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../test_rand.h"

#define MAX_RACERS 6
#define RING	   100 /* granules per round (> one bitmap word) */
#define BUF_LEN	   64u
#define PG	   4096u

enum how { SINGLE, SINGLE_BATCH, BULK_OWN, BULK_BATCH, BULK_SHUFFLED, HOW_NR };

struct plan {
	unsigned int lo, n; /* the window [lo, lo + n) of the ring */
	enum how how;
	unsigned int perm[RING]; /* BULK_SHUFFLED: the order */
};

struct race {
	struct dg_dma_dev *dd;
	unsigned int nracers;
	unsigned long rounds;
	pthread_barrier_t go, done;
	_Atomic unsigned long gate; /* round + 1: the racers, spinning, start together */
	unsigned long round;
	uint64_t dma[RING]; /* this round's ring, written by the main thread */
	struct plan plan[MAX_RACERS];
	int res[MAX_RACERS][RING]; /* per granule of the window: the result of its call */
	int ncalls[MAX_RACERS], nfail[MAX_RACERS];
};

struct racer_arg {
	struct race *r;
	unsigned int id;
};

static void *racer(void *arg)
{
	struct racer_arg *a = arg;
	struct race *r = a->r;

	for (;;) {
		const struct plan *p;
		struct dg_dma_batch b;
		uint64_t v[RING];
		int e, *res;

		pthread_barrier_wait(&r->go);
		if (r->round == r->rounds)
			return NULL;
		p = &r->plan[a->id];
		res = r->res[a->id];
		r->ncalls[a->id] = r->nfail[a->id] = 0;
		/* Acquire pairs with the main thread's release store. */
		while (atomic_load_explicit(&r->gate, memory_order_acquire) != r->round + 1)
			sched_yield();
		switch (p->how) {
		case SINGLE:
		case SINGLE_BATCH:
			if (p->how == SINGLE_BATCH)
				dg_dma_batch_begin(r->dd, &b);
			for (unsigned int j = 0; j < p->n; j++) {
				res[j] = dg_dma_unmap_single(r->dd, r->dma[p->lo + j], BUF_LEN,
							     DG_DMA_FROM_DEVICE, 0,
							     p->how == SINGLE_BATCH ? &b : NULL);
				r->ncalls[a->id]++;
				r->nfail[a->id] += res[j] != 0;
			}
			if (p->how == SINGLE_BATCH && (e = dg_dma_batch_end(&b)) != 0)
				for (unsigned int j = 0; j < p->n; j++)
					res[j] = res[j] ? res[j] : e;
			break;
		default:
			for (unsigned int j = 0; j < p->n; j++)
				v[j] = r->dma[p->lo + (p->how == BULK_SHUFFLED ? p->perm[j] : j)];
			if (p->how == BULK_BATCH)
				dg_dma_batch_begin(r->dd, &b);
			e = dg_dma_unmap_bulk(r->dd, v, p->n, BUF_LEN, DG_DMA_FROM_DEVICE, 0,
					      p->how == BULK_BATCH ? &b : NULL);
			if (p->how == BULK_BATCH) {
				int e2 = dg_dma_batch_end(&b);

				e = e ? e : e2;
			}
			r->ncalls[a->id]++;
			r->nfail[a->id] += e != 0;
			for (unsigned int j = 0; j < p->n; j++)
				res[j] = e;
			break;
		}
		pthread_barrier_wait(&r->done);
	}
}

/*
 * The duel: the tightest race, with no barrier in between. Thread 0 maps DUEL adjacent
 * granules (one bulk call, or single calls), publishes them and at once unmaps them; thread 1, spinning on
 * the publication, unmaps them too - each by single calls or one bulk call, by the
 * iteration. Per granule exactly one of the two must succeed (the other: -ENOENT).
 */
#define DUEL 4

struct duel {
	struct dg_dma_dev *dd;
	uint8_t *mem;
	unsigned long iters;
	_Atomic unsigned long seq;  /* thread 0: iteration + 1 published (dma[] written) */
	_Atomic unsigned long seen; /* thread 1: iteration + 1 done (res[1] written) */
	uint64_t dma[DUEL];
	int res[2][DUEL];
	unsigned long twice, none, bad;
	_Atomic unsigned long fails; /* calls refused (each thread's) */
};

static void duel_unmap(struct duel *d, unsigned int id, unsigned long it)
{
	const bool bulk = (it >> id) & 1; /* single/single, bulk/single, single/bulk, bulk/bulk */

	if (bulk) {
		int e = dg_dma_unmap_bulk(d->dd, d->dma, DUEL, BUF_LEN, DG_DMA_FROM_DEVICE, 0,
					  NULL);

		for (unsigned int j = 0; j < DUEL; j++)
			d->res[id][j] = e;
		if (e)
			atomic_fetch_add_explicit(&d->fails, 1, memory_order_relaxed);
		return;
	}
	for (unsigned int j = 0; j < DUEL; j++) {
		d->res[id][j] =
			dg_dma_unmap_single(d->dd, d->dma[j], BUF_LEN, DG_DMA_FROM_DEVICE, 0, NULL);
		if (d->res[id][j])
			atomic_fetch_add_explicit(&d->fails, 1, memory_order_relaxed);
	}
}

static void *duel_second(void *arg)
{
	struct duel *d = arg;

	for (unsigned long it = 0; it < d->iters; it++) {
		/* Acquire pairs with the release store of thread 0: dma[] is written. */
		unsigned long s;

		while ((s = atomic_load_explicit(&d->seq, memory_order_acquire)) != it + 1)
			if (s == ~0ul)
				return NULL; /* thread 0 stopped early */
		duel_unmap(d, 1, it);
		/* Release pairs with thread 0's acquire load: res[1] is written. */
		atomic_store_explicit(&d->seen, it + 1, memory_order_release);
	}
	return NULL;
}

static int duel_run(struct dg_dma_dev *dd, uint8_t *mem, unsigned long iters, uint64_t *fails)
{
	struct duel *d = calloc(1, sizeof(*d));
	void *bufs[DUEL];
	pthread_t th;
	int bad;

	if (!d)
		return 1;
	*d = (struct duel){.dd = dd, .mem = mem, .iters = iters};
	for (unsigned int j = 0; j < DUEL; j++)
		bufs[j] = mem + (size_t)j * PG;
	pthread_create(&th, NULL, duel_second, d);
	for (unsigned long it = 0; it < iters && !d->bad; it++) {
		int e = 0;

		if (it & 4) /* single maps: the record's CAS against bulk and single unmaps */
			for (unsigned int j = 0; j < DUEL && !e; j++)
				e = dg_dma_map_single(dd, bufs[j], BUF_LEN, DG_DMA_FROM_DEVICE, 0,
						      &d->dma[j]);
		else /* a bulk map: bit mappings */
			e = dg_dma_map_bulk(dd, bufs, DUEL, BUF_LEN, DG_DMA_FROM_DEVICE, 0, d->dma);
		if (e) {
			d->bad++;
			break;
		}
		/* Release pairs with thread 1's acquire load. */
		atomic_store_explicit(&d->seq, it + 1, memory_order_release);
		duel_unmap(d, 0, it);
		/* Acquire pairs with thread 1's release store. */
		while (atomic_load_explicit(&d->seen, memory_order_acquire) != it + 1)
			;
		for (unsigned int j = 0; j < DUEL; j++) {
			const int a = d->res[0][j], b = d->res[1][j];

			if ((a && a != -ENOENT) || (b && b != -ENOENT)) {
				fprintf(stderr, "duel %lu: unmaps gave %d and %d\n", it, a, b);
				d->bad++;
			}
			d->twice += !a && !b;
			d->none += a && b;
		}
		/* a bulk call that lost changed nothing: what neither took is still mapped */
		for (unsigned int j = 0; j < DUEL; j++)
			if (d->res[0][j] && d->res[1][j] &&
			    dg_dma_unmap_single(dd, d->dma[j], BUF_LEN, DG_DMA_FROM_DEVICE, 0,
						NULL))
				d->bad++;
	}
	atomic_store_explicit(&d->seq, ~0ul, memory_order_release); /* (if it stopped early) */
	pthread_join(th, NULL);
	*fails = atomic_load_explicit(&d->fails, memory_order_relaxed);
	if (d->twice)
		fprintf(stderr, "duel: %lu granules unmapped twice\n", d->twice);
	bad = d->bad || d->twice;
	free(d);
	return bad;
}

static int run(enum dg_dma_policy pol, unsigned int nracers, unsigned long rounds)
{
	struct racer_arg args[MAX_RACERS];
	pthread_t thr[MAX_RACERS];
	struct race_world w;
	struct dg_dma_stats st;
	struct race *r = calloc(1, sizeof(*r));
	uint8_t *mem = aligned_alloc(PG, (size_t)RING * PG);
	uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)pol;
	uint64_t maps = 0, unmaps = 0, noent = 0, contested = 0, failed_calls = 0;
	int bad = 0;

	if (!r || !mem || race_world_open(&w, pol)) {
		fprintf(stderr, "stress_dma_claim_race: set-up failed: %s\n", strerror(errno));
		return 1;
	}
	r->dd = w.dd;
	dg_dev_set_auto_offline(w.dev, true); /* the main thread's reads: no device thread */
	for (unsigned int i = 0; i < RING; i++)
		mem[(size_t)i * PG] = (uint8_t)(i + 1);
	r->nracers = nracers;
	r->rounds = rounds;
	pthread_barrier_init(&r->go, NULL, nracers + 1);
	pthread_barrier_init(&r->done, NULL, nracers + 1);
	for (unsigned int i = 0; i < nracers; i++) {
		args[i] = (struct racer_arg){r, i};
		pthread_create(&thr[i], NULL, racer, &args[i]);
	}
	for (r->round = 0; r->round < rounds && !bad; r->round++) {
		unsigned int taken[RING] = {0};
		void *bufs[RING];
		int e = 0;

		for (unsigned int i = 0; i < RING; i++)
			bufs[i] = mem + (size_t)i * PG;
		/* the ring in two bulk maps (a refill of 60, then 40: bit mappings) or, every
		 * third round, by single calls (the record's CAS: the bulk unmaps' slow way) */
		if (r->round % 3 == 2) {
			for (unsigned int i = 0; i < RING && !e; i++)
				e = dg_dma_map_single(r->dd, bufs[i], BUF_LEN, DG_DMA_FROM_DEVICE,
						      0, &r->dma[i]);
		} else {
			e = dg_dma_map_bulk(r->dd, bufs, 60, BUF_LEN, DG_DMA_FROM_DEVICE, 0,
					    r->dma);
			if (!e)
				e = dg_dma_map_bulk(r->dd, bufs + 60, RING - 60, BUF_LEN,
						    DG_DMA_FROM_DEVICE, 0, r->dma + 60);
		}
		if (e) {
			fprintf(stderr, "round %lu: map: %d\n", r->round, e);
			bad++;
			break;
		}
		maps += RING;
		for (unsigned int i = 0; i < RING; i++) { /* the device caches each */
			uint8_t x = (uint8_t)i;

			if (dg_dev_write(w.dev, r->dma[i], &x, 1)) {
				fprintf(stderr, "round %lu: the device cannot reach granule %u\n",
					r->round, i);
				bad++;
			}
		}
		/* odd rounds: overlapping windows, racer i's near i * RING / (nracers + 1); even
		 * rounds: all the same few granules (the tightest race, on one word) */
		const unsigned int hot = (unsigned int)(xorshift64(&seed) % (RING - 4));
		const unsigned int nhot = 1 + (unsigned int)(xorshift64(&seed) % 4);

		for (unsigned int i = 0; i < nracers; i++) {
			struct plan *p = &r->plan[i];
			unsigned int lo =
				(unsigned int)(i * RING / (nracers + 1) + xorshift64(&seed) % 8);
			unsigned int n =
				8 + (unsigned int)(xorshift64(&seed) % (2 * RING / nracers));

			if (r->round % 2 == 0) {
				lo = hot;
				n = nhot;
			}

			p->lo = lo < RING ? lo : RING - 1;
			p->n = p->lo + n <= RING ? n : RING - p->lo;
			p->how = (enum how)((i + r->round + xorshift64(&seed) % 2) % HOW_NR);
			for (unsigned int j = 0; j < p->n; j++)
				p->perm[j] = j;
			for (unsigned int j = p->n; j > 1; j--) {
				unsigned int k = (unsigned int)(xorshift64(&seed) % j),
					     t = p->perm[j - 1];

				p->perm[j - 1] = p->perm[k];
				p->perm[k] = t;
			}
		}
		pthread_barrier_wait(&r->go);
		/* Release pairs with the racers' acquire loads. */
		atomic_store_explicit(&r->gate, r->round + 1, memory_order_release);
		pthread_barrier_wait(&r->done);
		for (unsigned int i = 0; i < nracers; i++) {
			const struct plan *p = &r->plan[i];

			failed_calls += (uint64_t)r->nfail[i];
			noent += (uint64_t)r->nfail[i];
			for (unsigned int j = 0; j < p->n; j++) {
				const int x = r->res[i][j];
				const unsigned int gi = p->lo + j;

				if (x && x != -ENOENT) {
					fprintf(stderr,
						"round %lu racer %u (how %d): unmap gave %d\n",
						r->round, i, p->how, x);
					bad++;
				}
				if (!x && taken[gi]++) {
					fprintf(stderr, "round %lu: granule %u unmapped twice\n",
						r->round, gi);
					bad++;
				}
				contested += x != 0;
			}
		}
		for (unsigned int i = 0; i < RING; i++) { /* what no call took is still mapped */
			if (taken[i]) {
				unmaps++;
				continue;
			}
			e = dg_dma_unmap_single(r->dd, r->dma[i], BUF_LEN, DG_DMA_FROM_DEVICE, 0,
						NULL);
			if (e) {
				fprintf(stderr,
					"round %lu: granule %u untaken, its unmap gave %d\n",
					r->round, i, e);
				bad++;
			}
			unmaps++;
		}
		if (pol == DG_DMA_STRICT)
			for (unsigned int i = 0; i < RING; i++) {
				uint8_t x = 0;

				if (!dg_dev_write(w.dev, r->dma[i], &x, 1)) {
					fprintf(stderr,
						"round %lu: granule %u reachable after unmap\n",
						r->round, i);
					bad++;
				}
			}
	}
	r->round = rounds;
	pthread_barrier_wait(&r->go); /* round == rounds: the racers leave */
	for (unsigned int i = 0; i < nracers; i++)
		pthread_join(thr[i], NULL);
	if (!bad) {
		uint64_t fails = 0;

		if (duel_run(r->dd, mem, rounds * 20, &fails)) {
			fprintf(stderr, "%s: the duel failed\n", dg_dma_policy_name(pol));
			bad++;
		}
		maps += rounds * 20 * DUEL;
		unmaps += rounds * 20 * DUEL;
		noent += fails;
	}

	dg_dma_dev_stats(r->dd, &st);
	if (!bad && (st.maps != maps || st.unmaps != unmaps || st.live ||
		     st.err_not_mapped != noent || st.err_invalid)) {
		fprintf(stderr,
			"%s: stats maps %llu (want %llu) unmaps %llu (want %llu) live %llu "
			"not mapped %llu (want %llu) invalid %llu\n",
			dg_dma_policy_name(pol), (unsigned long long)st.maps,
			(unsigned long long)maps, (unsigned long long)st.unmaps,
			(unsigned long long)unmaps, (unsigned long long)st.live,
			(unsigned long long)st.err_not_mapped, (unsigned long long)noent,
			(unsigned long long)st.err_invalid);
		bad++;
	}
	if (dg_dma_dev_check(r->dd, stderr))
		bad++;
	printf("stress_dma_claim_race %-6s racers %u rounds %lu: %s (%llu calls refused, "
	       "%llu contested granules)\n",
	       dg_dma_policy_name(pol), nracers, rounds,
	       bad ? "FAILED" : "each granule unmapped once, refusals changed nothing",
	       (unsigned long long)failed_calls, (unsigned long long)contested);
	bad += race_world_close(&w);
	pthread_barrier_destroy(&r->go);
	pthread_barrier_destroy(&r->done);
	free(mem);
	free(r);
	return bad;
}

int main(int argc, char **argv)
{
	unsigned int nracers = argc > 1 ? (unsigned int)atoi(argv[1]) : 3;
	unsigned long rounds = argc > 2 ? strtoul(argv[2], NULL, 0) : 500;
	int bad = 0;

	if (nracers < 2 || nracers > MAX_RACERS) {
		fprintf(stderr, "usage: stress_dma_claim_race RACERS(2..%d) ROUNDS\n", MAX_RACERS);
		return 2;
	}
	bad += run(DG_DMA_STRICT, nracers, rounds);
	bad += run(DG_DMA_LAZY, nracers, rounds);
	return bad ? 1 : 0;
}
