/* SPDX-License-Identifier: MIT */
/*
 * Stress test of the unmap claim (src/dma/map.c, xl_claim): racing unmaps of one mapping.
 *
 *   stress_dma_unmap_race RACERS ROUNDS
 *
 * Every round the main thread maps one 64-byte buffer (strict, then lazy) and the racers,
 * released together by a barrier, try to unmap it:
 *  - phase A: every racer with something wrong - the length, the direction, the kind
 *    (dg_dma_unmap_page of a single mapping) or the address (one byte off). Each must be
 *    refused (-EINVAL, or -ENOENT for the address) with nothing changed;
 *  - phase B: every racer with the right arguments, half of the rounds inside its own batch.
 *    Exactly one must win (0), the others get -ENOENT: the claim is one compare-and-swap of
 *    the record, so of racing unmaps one wins, and phase A left the record intact.
 * At the end the statistics must be exact: one map and one unmap per round, every refusal
 * counted by kind, the sub-page bytes of every map, nothing live, dg_dma_dev_check() clean.
 * Then bounce (src/dma/bounce.c: the slot's claim CAS), where the odd racers unmap with
 * dg_dma_unmap_bulk() of two entries, a mapping of their own and the raced one (in turn first
 * and second): exactly one racer wins the raced slot, and a bulk racer that lost must find
 * its own mapping still live (all or nothing: a claim it made is given back) and unmap it
 * alone; a bulk racer that won unmapped both.
 * Runs under ThreadSanitizer too (the record's release/acquire pairs, the claim's CAS, the
 * bounce area locks its claims are made under).
 */
#include "race_world.h"
#include <dmaguard/dma.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RACERS 8
#define BUF_LEN	   64u

struct race {
	struct dg_dma_dev *dd;
	unsigned int nracers;
	unsigned long rounds;
	pthread_barrier_t go, done;
	/* per round, written by the main thread before the barrier */
	uint64_t dma;
	uint64_t own[MAX_RACERS]; /* bounce: each bulk racer's own mapping */
	bool bulk;		  /* bounce: odd racers unmap in bulk */
	unsigned long round;
	/* results, written by the racers before the second barrier */
	int res_a[MAX_RACERS];
	int res_b[MAX_RACERS];
	int res_c[MAX_RACERS]; /* bulk racers: the single unmap of their own after a loss */
};

/* A wrong unmap of the mapping at @dma: four kinds of mistakes, by @v. */
static int wrong_unmap(struct dg_dma_dev *dd, uint64_t dma, unsigned int v)
{
	switch (v % 4) {
	case 0:
		return dg_dma_unmap_single(dd, dma, BUF_LEN + 1, DG_DMA_TO_DEVICE, 0, NULL);
	case 1:
		return dg_dma_unmap_single(dd, dma, BUF_LEN, DG_DMA_FROM_DEVICE, 0, NULL);
	case 2:
		return dg_dma_unmap_page(dd, dma, BUF_LEN, DG_DMA_TO_DEVICE, 0, NULL);
	default:
		return dg_dma_unmap_single(dd, dma + 1, BUF_LEN, DG_DMA_TO_DEVICE, 0, NULL);
	}
}

struct racer_arg {
	struct race *r;
	unsigned int id;
};

static void *racer(void *arg)
{
	struct racer_arg *a = arg;
	struct race *r = a->r;

	for (;;) {
		struct dg_dma_batch b;
		bool batched;
		uint64_t dma;

		pthread_barrier_wait(&r->go);
		if (r->round == r->rounds)
			return NULL;
		dma = r->dma;
		batched = r->round & 1;
		r->res_a[a->id] = wrong_unmap(r->dd, dma, a->id + (unsigned int)r->round);
		pthread_barrier_wait(&r->go); /* phase B starts together */
		if (r->bulk && (a->id & 1)) {
			/* the raced mapping second, or first (every other round pair) */
			const bool first = r->round & 2;
			const uint64_t two[2] = {first ? dma : r->own[a->id],
						 first ? r->own[a->id] : dma};
			int e;

			if (batched)
				dg_dma_batch_begin(r->dd, &b);
			r->res_b[a->id] = dg_dma_unmap_bulk(
				r->dd, two, 2, BUF_LEN, DG_DMA_TO_DEVICE, 0, batched ? &b : NULL);
			e = batched ? dg_dma_batch_end(&b) : 0;
			if (e && !r->res_b[a->id])
				r->res_b[a->id] = e;
			/* lost: its own mapping must still be there */
			r->res_c[a->id] = r->res_b[a->id] ?
						  dg_dma_unmap_single(r->dd, r->own[a->id], BUF_LEN,
								      DG_DMA_TO_DEVICE, 0, NULL) :
						  0;
		} else if (batched) {
			int e;

			dg_dma_batch_begin(r->dd, &b);
			r->res_b[a->id] =
				dg_dma_unmap_single(r->dd, dma, BUF_LEN, DG_DMA_TO_DEVICE, 0, &b);
			e = dg_dma_batch_end(&b);
			if (e && !r->res_b[a->id])
				r->res_b[a->id] = e;
		} else {
			r->res_b[a->id] =
				dg_dma_unmap_single(r->dd, dma, BUF_LEN, DG_DMA_TO_DEVICE, 0, NULL);
		}
		pthread_barrier_wait(&r->done);
	}
}

static int run(enum dg_dma_policy p, unsigned int nracers, unsigned long rounds)
{
	uint64_t want_inval = 0, want_noent = 0, want_maps = 0;
	struct racer_arg args[MAX_RACERS];
	pthread_t thr[MAX_RACERS];
	struct race_world w;
	struct dg_dma_stats st;
	struct race *r = calloc(1, sizeof(*r));
	uint8_t *buf = aligned_alloc(4096, 4096);
	int bad = 0;

	if (!r || !buf || race_world_open(&w, p)) {
		fprintf(stderr, "stress_dma_unmap_race: set-up failed: %s\n", strerror(errno));
		return 1;
	}
	r->dd = w.dd;
	r->nracers = nracers;
	r->rounds = rounds;
	r->bulk = p == DG_DMA_BOUNCE;
	pthread_barrier_init(&r->go, NULL, nracers + 1);
	pthread_barrier_init(&r->done, NULL, nracers + 1);
	for (unsigned int i = 0; i < nracers; i++) {
		args[i] = (struct racer_arg){r, i};
		pthread_create(&thr[i], NULL, racer, &args[i]);
	}
	for (r->round = 0; r->round < rounds; r->round++) {
		unsigned int won = 0;
		int e = dg_dma_map_single(r->dd, buf + 64 * (r->round % 64), BUF_LEN,
					  DG_DMA_TO_DEVICE, 0, &r->dma);

		for (unsigned int i = 1; !e && r->bulk && i < nracers; i += 2)
			e = dg_dma_map_single(r->dd, buf + 2048 + 64 * i, BUF_LEN, DG_DMA_TO_DEVICE,
					      0, &r->own[i]);
		if (e) {
			fprintf(stderr, "round %lu: map: %d\n", r->round, e);
			bad++;
			break;
		}
		want_maps += 1 + (r->bulk ? nracers / 2 : 0);
		pthread_barrier_wait(&r->go); /* phase A */
		pthread_barrier_wait(&r->go); /* phase B */
		pthread_barrier_wait(&r->done);
		for (unsigned int i = 0; i < nracers; i++) {
			int a = r->res_a[i], want = (i + r->round) % 4 == 3 ? -ENOENT : -EINVAL;

			if (a != want) {
				fprintf(stderr, "round %lu racer %u: wrong unmap gave %d, not %d\n",
					r->round, i, a, want);
				bad++;
			}
			want_inval += want == -EINVAL;
			want_noent += want == -ENOENT;
			if (r->bulk && (i & 1) && r->res_c[i]) {
				fprintf(stderr,
					"round %lu racer %u: lost the bulk unmap, then its own "
					"mapping's unmap gave %d\n",
					r->round, i, r->res_c[i]);
				bad++;
			}
			if (r->res_b[i] == 0) {
				won++;
			} else if (r->res_b[i] == -ENOENT) {
				want_noent++;
			} else {
				fprintf(stderr, "round %lu racer %u: unmap gave %d\n", r->round, i,
					r->res_b[i]);
				bad++;
			}
		}
		if (won != 1) {
			fprintf(stderr, "round %lu: %u racing unmaps won, not 1\n", r->round, won);
			bad++;
		}
	}
	r->round = rounds;
	pthread_barrier_wait(&r->go); /* round == rounds: the racers leave */
	for (unsigned int i = 0; i < nracers; i++)
		pthread_join(thr[i], NULL);

	dg_dma_dev_stats(r->dd, &st);
	if (st.maps != want_maps || st.unmaps != want_maps || st.live ||
	    st.err_invalid != want_inval || st.err_not_mapped != want_noent ||
	    st.subpage_bytes != (p == DG_DMA_BOUNCE ? 0 : rounds * (uint64_t)(4096 - BUF_LEN)) ||
	    st.bounce_in_use) {
		fprintf(stderr,
			"%s: stats maps %llu unmaps %llu live %llu invalid %llu (want %llu) "
			"not mapped %llu (want %llu) subpage %llu\n",
			dg_dma_policy_name(p), (unsigned long long)st.maps,
			(unsigned long long)st.unmaps, (unsigned long long)st.live,
			(unsigned long long)st.err_invalid, (unsigned long long)want_inval,
			(unsigned long long)st.err_not_mapped, (unsigned long long)want_noent,
			(unsigned long long)st.subpage_bytes);
		bad++;
	}
	if (dg_dma_dev_check(r->dd, stderr))
		bad++;
	printf("stress_dma_unmap_race %-6s racers %u rounds %lu: %s\n", dg_dma_policy_name(p),
	       nracers, rounds, bad ? "FAILED" : "one winner every round, refusals exact");
	bad += race_world_close(&w);
	pthread_barrier_destroy(&r->go);
	pthread_barrier_destroy(&r->done);
	free(buf);
	free(r);
	return bad;
}

int main(int argc, char **argv)
{
	unsigned int nracers = argc > 1 ? (unsigned int)atoi(argv[1]) : 3;
	unsigned long rounds = argc > 2 ? strtoul(argv[2], NULL, 0) : 1000;
	int bad = 0;

	if (nracers < 2 || nracers > MAX_RACERS) {
		fprintf(stderr, "usage: stress_dma_unmap_race RACERS(2..%d) ROUNDS\n", MAX_RACERS);
		return 2;
	}
	bad += run(DG_DMA_STRICT, nracers, rounds);
	bad += run(DG_DMA_LAZY, nracers, rounds);
	bad += run(DG_DMA_BOUNCE, nracers, rounds);
	return bad ? 1 : 0;
}
