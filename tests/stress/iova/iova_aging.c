/* SPDX-License-Identifier: MIT */
/*
 * Aging test of the IOVA allocator: no slowdown after millions of operations.
 *
 *   stress_iova_aging OPS
 *
 * Linux's lazy-mode IOVA allocator was seen to fall from 1.7M to 0.33-0.69M IOPS after 16 hours,
 * as magazines drained into a fragmented tree that its linear walk then had to cross. Here a
 * single thread (so the run is deterministic) drives OPS mixed operations through the
 * magazines: a background of long-lived ranges of mixed sizes that slowly churns, and a
 * working set that swells and shrinks in a sawtooth so the depot fills (and overflows back
 * into the tree) and drains, with sizes inside and outside the cached classes, natural and
 * page alignment, and dg_iova_trim() every 20000 operations.
 *
 * The work per operation is measured deterministically, as tree nodes visited per operation
 * (not time: the machine is shared). The run is cut into 10 phases; phase 0 is warm-up. The
 * test asserts that the last two phases cost no more per operation than phases 1-2 (within 10%
 * plus half a node), that the depot really filled and drained, and dg_iova_check() at every
 * phase boundary.
 */
#include <dmaguard/iova.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "../../test_rand.h"

#define G	   4096ull
#define PHASES	   10
#define BACKGROUND 20000
#define WS_MAX	   6000
#define WS_MIN	   200
#define SAW_PERIOD 40000
#define TRIM_EVERY 20000

struct range {
	uint64_t iova, size;
};

static uint64_t rng = 12345;

static uint64_t rnd(void)
{
	return splitmix64(&rng);
}

static struct dg_iova_space *s;

static int alloc_one(struct range *r)
{
	static const struct {
		uint64_t pages;
		unsigned int flags;
		unsigned int weight;
	} mix[] = {
		{1, 0, 40},
		{2, 0, 10},
		{4, 0, 10},
		{16, 0, 10},
		{64, 0, 10},
		{3, 0, 5},
		{5, DG_IOVA_ALLOC_PAGE_ALIGN, 5},
		{1024, 0, 5},
		{33, DG_IOVA_ALLOC_PAGE_ALIGN, 5},
	};
	unsigned int w = rnd() % 100, i = 0;

	while (w >= mix[i].weight) {
		w -= mix[i].weight;
		i++;
	}
	r->size = mix[i].pages * G;
	return dg_iova_alloc(s, r->size, UINT64_MAX, mix[i].flags, &r->iova);
}

int main(int argc, char **argv)
{
	uint64_t ops = argc > 1 ? strtoull(argv[1], NULL, 0) : 2000000;
	struct dg_iova_config cfg = {.start = 0, .end = (1ull << 40) - 1, .granule = G, .ncpus = 1};
	struct range *bg = malloc(BACKGROUND * sizeof(*bg)), *ws = malloc(WS_MAX * sizeof(*ws));
	double per_op[PHASES];
	uint64_t nws = 0, max_depot = 0, drained = 0, prev_depot = 0;
	struct dg_iova_stats st, st0;
	int fail = 0;

	if (ops < PHASES * 100000ull) {
		fprintf(stderr, "stress_iova_aging: OPS must be at least %u\n", PHASES * 100000);
		return 2;
	}
	s = dg_iova_create(&cfg);
	if (!s || !bg || !ws)
		return 1;
	for (unsigned int i = 0; i < BACKGROUND; i++)
		if (alloc_one(&bg[i]))
			return 1;
	for (unsigned int ph = 0; ph < PHASES; ph++) {
		uint64_t n = ops / PHASES;

		dg_iova_get_stats(s, &st0);
		for (uint64_t k = 0; k < n; k++) {
			uint64_t t = ph * n + k;
			/* sawtooth target for the working set */
			uint64_t pos = t % SAW_PERIOD;
			uint64_t target =
				pos < SAW_PERIOD / 2 ?
					WS_MIN + (WS_MAX - WS_MIN) * pos / (SAW_PERIOD / 2) :
					WS_MAX - (WS_MAX - WS_MIN) * (pos - SAW_PERIOD / 2) /
							 (SAW_PERIOD / 2);
			unsigned int r = rnd() % 100;

			if (r < 2) {
				/* background churn */
				struct range *b = &bg[rnd() % BACKGROUND];

				if (dg_iova_free(s, b->iova, b->size) || alloc_one(b)) {
					fprintf(stderr, "background churn failed\n");
					return 1;
				}
			} else if ((nws < target && r < 80) || nws == 0) {
				if (alloc_one(&ws[nws])) {
					fprintf(stderr, "alloc failed\n");
					return 1;
				}
				nws++;
			} else {
				uint64_t i = rnd() % nws;

				if (dg_iova_free(s, ws[i].iova, ws[i].size)) {
					fprintf(stderr, "free failed\n");
					return 1;
				}
				ws[i] = ws[--nws];
			}
			if (t % TRIM_EVERY == 0)
				dg_iova_trim(s);
			if ((t & 1023) == 0) {
				dg_iova_get_stats(s, &st);
				if (st.depot_magazines > max_depot)
					max_depot = st.depot_magazines;
				if (st.depot_magazines < prev_depot)
					drained += prev_depot - st.depot_magazines;
				prev_depot = st.depot_magazines;
			}
		}
		dg_iova_get_stats(s, &st);
		per_op[ph] = (double)(st.tree_nodes_visited - st0.tree_nodes_visited) / (double)n;
		printf("phase %u: %.3f nodes/op, hits %.1f%%, tree %llu nodes, live %llu, cached "
		       "%llu, depot %llu, max node/op %llu\n",
		       ph, per_op[ph],
		       100.0 * (double)(st.magazine_hits - st0.magazine_hits) /
			       (double)(st.allocs - st0.allocs),
		       (unsigned long long)st.tree_nodes, (unsigned long long)st.live_ranges,
		       (unsigned long long)st.cached_ranges, (unsigned long long)st.depot_magazines,
		       (unsigned long long)st.max_op_nodes_visited);
		if (dg_iova_check(s, stderr)) {
			fprintf(stderr, "check failed after phase %u\n", ph);
			return 1;
		}
	}
	double early = (per_op[1] + per_op[2]) / 2,
	       late = (per_op[PHASES - 2] + per_op[PHASES - 1]) / 2;

	printf("early %.3f late %.3f nodes/op; depot max %llu, drained %llu magazines, trimmed "
	       "%llu\n",
	       early, late, (unsigned long long)max_depot, (unsigned long long)drained,
	       (unsigned long long)st.trimmed_magazines);
	if (late > early * 1.10 + 0.5) {
		fprintf(stderr, "FAIL: late phase costs %.3f nodes/op, early %.3f\n", late, early);
		fail = 1;
	}
	if (max_depot < 4 || drained < 4 || !st.trimmed_magazines) {
		fprintf(stderr, "FAIL: the depot did not fill and drain (max %llu, drained %llu)\n",
			(unsigned long long)max_depot, (unsigned long long)drained);
		fail = 1;
	}
	free(bg);
	free(ws);
	dg_iova_destroy(s);
	return fail;
}
