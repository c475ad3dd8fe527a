/* SPDX-License-Identifier: MIT */
/*
 * tests/stress/pt/pt_stress.c - concurrent map/unmap on disjoint ranges that share tables,
 * with a lock-free walker reading all the while.
 *
 *   stress_pt [THREADS [OPS]]    (defaults 4 threads, 20000 operations each)
 *
 * For each format, THREADS mapper threads own interleaved IOVA blocks:
 *  - small blocks of 8 pages, block k owned by thread k % THREADS, so every last-level table
 *    and every upper table is shared and linked by whichever thread gets there first (the CAS
 *    race of pt_install_table), and every 256 operations they all move on to a fresh region
 *    (a whole number of GiB further) whose tables do not exist yet;
 *  - large blocks of two largest-but-one pages (2 x 2M for VT-d), so threads map large leaves,
 *    replace their own empty tables by leaves and unlink covered tables next to each other's
 *    entries in shared upper tables.
 * A one-granule map or unmap goes through pt_map_granule / pt_unmap_granule every other time
 * (pt_fast.h: the per-thread last-leaf-table hint, which every unlink of a covered table by
 * another thread makes stale).
 * Every operation's result (error, bytes) is checked against the thread's own reference
 * model. A walker thread walks random IOVAs and checks that whatever it finds is a valid
 * translation (output = IOVA + a fixed offset, a page size the format allows); gathers are
 * released only after all threads stopped, as the invalidation protocol requires. At the end:
 * dg_pt_check(), the tree equals the union of the models, and unmapping everything leaves only
 * the root.
 */
#include "pt_model.h"

#include <dmaguard/pt.h>

#include "pt/pt_fast.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OFFSET (1ull << 45) /* output = IOVA + OFFSET, preserves every alignment up to 16T */
#define MAXT   16

struct stress_cfg {
	const char *name;
	struct dg_pt_geometry geo;
	uint64_t base; /* start of the stressed IOVA region */
};

static const struct stress_cfg cfgs[] = {
	{"vtd-48", {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48}, 1ull << 39},
	{"lpae-s1-4k", {.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 48}, 1ull << 39},
	{"lpae-s2-16k",
	 {.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 48, .oas = 48, .granule = 0x4000},
	 1ull << 39},
	{"flat-4k",
	 {.format = DG_PT_FMT_FLAT, .oas = 48, .window_base = 1ull << 39, .window_size = 1ull << 30},
	 1ull << 39},
};

struct stress {
	struct dg_pt *pt;
	unsigned int threads;
	uint64_t ops;
	uint64_t granule, large; /* smallest page, and the large-block page */
	uint64_t small_base, large_base;
	uint64_t small_blocks, large_blocks; /* blocks per thread */
	uint64_t pgsizes;
	uint64_t phase_ops, phase_stride; /* every phase_ops, move to fresh tables */
	pthread_barrier_t start;	  /* mappers and walker start together */
	atomic_bool stop;
	uint64_t walks, hits; /* the walker's, for the report */
	atomic_int failed;
};

struct mapper {
	struct stress *s;
	unsigned int id;
	struct pt_model model;
	struct dg_pt_gather gather; /* released only after all threads stopped */
	uint64_t rnd;
	uint64_t maps, unmaps;
	pthread_t thread;
};

static void fail(struct stress *s, const char *fmt, unsigned long long a, unsigned long long b,
		 int x, int y)
{
	fprintf(stderr, "stress_pt: ");
	fprintf(stderr, fmt, a, b, x, y);
	fprintf(stderr, "\n");
	/* Relaxed: a flag that only makes the others stop early; join orders the rest. */
	atomic_store_explicit(&s->failed, 1, memory_order_relaxed);
}

static void *mapper_main(void *arg)
{
	struct mapper *m = arg;
	struct stress *s = m->s;

	pthread_barrier_wait(&s->start);
	for (uint64_t op = 0;
	     op < s->ops && !atomic_load_explicit(&s->failed, memory_order_relaxed); op++) {
		uint64_t r = pt_model_rand(&m->rnd), iova, size, bytes = 0, want_bytes;
		uint64_t phase = (op / s->phase_ops) * s->phase_stride;
		bool large = s->large && (r & 1);
		int want, got;

		if (large) {
			/* One of my large blocks: two large pages. */
			uint64_t blk =
				(pt_model_rand(&m->rnd) % s->large_blocks) * s->threads + m->id;

			iova = s->large_base + blk * 2 * s->large;
			switch ((r >> 1) % 4) {
			case 0: /* a large leaf */
				iova += ((r >> 3) & 1) * s->large;
				size = s->large;
				break;
			case 1: /* small pages somewhere inside */
				iova += (pt_model_rand(&m->rnd) % (2 * s->large / s->granule - 8)) *
					s->granule;
				size = (1 + (r >> 3) % 8) * s->granule;
				break;
			default: /* everything, or one half */
				size = ((r >> 3) & 1) ? 2 * s->large : s->large;
				break;
			}
		} else {
			/* One of my small blocks: 8 pages. */
			uint64_t blk =
				(pt_model_rand(&m->rnd) % s->small_blocks) * s->threads + m->id;
			uint64_t first = (r >> 1) % 8;

			iova = s->small_base + (blk * 8 + first) * s->granule;
			size = (1 + (r >> 4) % (8 - first)) * s->granule;
		}
		iova += phase;
		if ((r >> 8) % 5 < 3) {
			want = pt_model_map(&m->model, iova, iova + OFFSET, size,
					    DG_PROT_READ | DG_PROT_WRITE);
			if (size == s->granule && ((r >> 12) & 1))
				got = pt_map_granule(s->pt, iova, iova + OFFSET,
						     DG_PROT_READ | DG_PROT_WRITE, &m->gather);
			else
				got = dg_pt_map(s->pt, iova, iova + OFFSET, size,
						DG_PROT_READ | DG_PROT_WRITE, &m->gather);
			m->maps++;
			if (got != want)
				fail(s, "map 0x%llx+0x%llx: got %d, model %d",
				     (unsigned long long)iova, (unsigned long long)size, got, want);
		} else {
			want = pt_model_unmap(&m->model, iova, size, &want_bytes);
			if (size == s->granule && ((r >> 12) & 1)) {
				got = pt_unmap_granule(s->pt, iova, &m->gather);
				bytes = want_bytes; /* it does not count them */
			} else {
				got = dg_pt_unmap(s->pt, iova, size, &m->gather, &bytes);
			}
			m->unmaps++;
			if (got != want || (!got && bytes != want_bytes))
				fail(s, "unmap 0x%llx+0x%llx: got %d, model %d",
				     (unsigned long long)iova, (unsigned long long)size, got, want);
		}
	}
	return NULL;
}

static void *walker_main(void *arg)
{
	struct stress *s = arg;
	uint64_t rnd = 0x5eed, walks = 0, hits = 0;
	uint64_t span_small = s->small_blocks * s->threads * 8 * s->granule;
	uint64_t span_large = s->large_blocks * s->threads * 2 * s->large;

	pthread_barrier_wait(&s->start);
	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		uint64_t r = pt_model_rand(&rnd);
		uint64_t iova = (r & 1) && s->large ? s->large_base + (r >> 1) % span_large :
						      s->small_base + (r >> 1) % span_small;
		struct dg_pt_walk w;
		int err;

		iova += (pt_model_rand(&rnd) % (s->ops / s->phase_ops + 1)) * s->phase_stride;
		err = dg_pt_walk(s->pt, iova, &w);

		walks++;
		if (err == -ENOENT)
			continue;
		hits++;
		if (err || w.phys != iova + OFFSET || !(w.pgsize & s->pgsizes) ||
		    !(w.prot & DG_PROT_READ)) {
			fail(s, "walk 0x%llx -> 0x%llx: err %d, prot %d", (unsigned long long)iova,
			     (unsigned long long)w.phys, err, (int)w.prot);
			break;
		}
	}
	s->walks = walks;
	s->hits = hits;
	return NULL;
}

static int run(const struct stress_cfg *c, unsigned int threads, uint64_t ops)
{
	struct stress s = {.threads = threads, .ops = ops};
	struct mapper *m = calloc(threads, sizeof(*m));
	struct dg_pt_geometry geo;
	struct pt_model all;
	pthread_t walker;
	uint64_t maps = 0, unmaps = 0, bytes;
	int rc = 0;

	s.pt = dg_pt_create(&c->geo, NULL, NULL);
	if (!s.pt || !m) {
		fprintf(stderr, "stress_pt: %s: create failed\n", c->name);
		return 1;
	}
	dg_pt_geometry(s.pt, &geo);
	s.pgsizes = geo.pgsize_bitmap;
	s.granule = geo.granule;
	/* The large blocks use the largest page size but one (2M with 4K pages), if any. */
	s.large = 0;
	for (uint64_t b = geo.pgsize_bitmap & (geo.pgsize_bitmap - 1); b; b &= b - 1) {
		s.large = b & -b;
		break;
	}
	s.small_blocks = 64;
	s.small_base = c->base;
	s.large_blocks = 4;
	s.large_base =
		c->base + (s.large ? 8 * s.large : 0) + s.small_blocks * threads * 8 * s.granule;
	if (s.large)
		s.large_base = (s.large_base + 2 * s.large - 1) & ~(2 * s.large - 1);
	else
		s.large_blocks = 0;

	/* Fresh tables every 256 operations, where the threads race to link them again. */
	s.phase_ops = 256;
	s.phase_stride = 0;
	if (c->geo.format != DG_PT_FMT_FLAT) { /* past both regions, in whole GiBs */
		uint64_t span = s.large_base + s.large_blocks * threads * 2 * s.large - c->base;

		s.phase_stride = (span + (1ull << 30) - 1) & ~((1ull << 30) - 1);
	}
	pthread_barrier_init(&s.start, NULL, threads + 1); /* the mappers and the walker */
	for (unsigned int t = 0; t < threads; t++) {
		m[t].s = &s;
		m[t].id = t;
		m[t].rnd = 0x1234567ull * (t + 1);
		pt_model_init(&m[t].model, s.pt);
		dg_pt_gather_init(&m[t].gather);
	}
	if (pthread_create(&walker, NULL, walker_main, &s))
		abort();
	for (unsigned int t = 0; t < threads; t++)
		if (pthread_create(&m[t].thread, NULL, mapper_main, &m[t]))
			abort();
	for (unsigned int t = 0; t < threads; t++)
		pthread_join(m[t].thread, NULL);
	/* Relaxed: the walker's results are read after pthread_join, which orders them. */
	atomic_store_explicit(&s.stop, true, memory_order_relaxed);
	pthread_join(walker, NULL);

	/* Now nobody walks: the invalidation would be complete, release the tables. */
	for (unsigned int t = 0; t < threads; t++) {
		dg_pt_gather_release(s.pt, &m[t].gather);
		maps += m[t].maps;
		unmaps += m[t].unmaps;
	}
	if (atomic_load_explicit(&s.failed, memory_order_relaxed)) /* after join */
		rc = 1;
	if (!rc && dg_pt_check(s.pt, stderr))
		rc = 1;
	/* The tree is exactly the union of what each thread believes it mapped. */
	pt_model_init(&all, s.pt);
	for (unsigned int t = 0; t < threads && !rc; t++)
		for (size_t i = 0; i < m[t].model.n; i++) {
			const struct pt_model_leaf *l = &m[t].model.leaf[i];

			if (pt_model_map_pages(&all, l->iova, l->phys, l->size, 1,
					       DG_PROT_READ | DG_PROT_WRITE)) {
				fprintf(stderr, "stress_pt: models overlap\n");
				rc = 1;
			}
		}
	if (!rc && pt_model_compare(&all, s.pt, stderr))
		rc = 1;
	if (!rc) {
		struct dg_pt_gather g;
		uint64_t start = c->geo.format == DG_PT_FMT_FLAT ? geo.window_base : 0;
		uint64_t len = c->geo.format == DG_PT_FMT_FLAT ? geo.window_size : 1ull << geo.ias;

		dg_pt_gather_init(&g);
		dg_pt_unmap(s.pt, start, len, &g, &bytes);
		dg_pt_gather_release(s.pt, &g);
		if (dg_pt_table_pages(s.pt) != 1 || dg_pt_check(s.pt, stderr)) {
			fprintf(stderr, "stress_pt: %" PRIu64 " tables left after unmapping all\n",
				dg_pt_table_pages(s.pt));
			rc = 1;
		}
	}
	printf("stress_pt %-12s %u threads: %" PRIu64 " maps, %" PRIu64 " unmaps, %" PRIu64
	       " walks (%" PRIu64 " hits): %s\n",
	       c->name, threads, maps, unmaps, s.walks, s.hits, rc ? "FAILED" : "ok");
	pthread_barrier_destroy(&s.start);
	pt_model_fini(&all);
	for (unsigned int t = 0; t < threads; t++)
		pt_model_fini(&m[t].model);
	free(m);
	dg_pt_destroy(s.pt);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned int threads = argc > 1 ? (unsigned int)strtoul(argv[1], NULL, 0) : 4;
	uint64_t ops = argc > 2 ? strtoull(argv[2], NULL, 0) : 20000;
	int rc = 0;

	if (threads < 1 || threads > MAXT || !ops) {
		fprintf(stderr, "usage: stress_pt [THREADS (1..%d) [OPS per thread]]\n", MAXT);
		return 2;
	}
	for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++)
		rc |= run(&cfgs[i], threads, ops);
	return rc;
}
