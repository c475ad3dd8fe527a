/* SPDX-License-Identifier: MIT */
/*
 * tests/stress/pt/pt_unmap_race.c - an unmap whose first entry is empty when its descent reads
 * it, while another thread links a table into that very slot.
 *
 *   stress_pt_unmap_race [ROUNDS]    (default 4000 free-running rounds per format and depth)
 *
 * The interleaving that stress_pt hit about once in 15 CI runs (session 12: "unmap
 * 0x85005a0000+0x6000: got 0, model -2"): thread U unmaps a few pages nobody mapped, in the
 * middle of a span whose table does not exist yet; its descent stops at the empty slot of the
 * shared upper table and hands that table to the sweep, which loads the slot again. If thread
 * M, mapping a page at the start of the same span, links the table in between, the sweep finds
 * a table covered in part. U must descend into it at its own address - not from the span's
 * start, which clears M's page (and every other owner's leaves in front of U's range) and
 * makes U's unmap report them as its own.
 *
 * Each round starts with nothing under the region but an anchor page that keeps the upper
 * table (@depth 1: only the last-level table is missing; @depth 2: its parent too), and ends
 * with the main thread, which owns the whole region after both joined, unmapping it with its
 * tables. Checked every round: U's unmap returns -ENOENT with 0 bytes, M's page translates,
 * dg_pt_check(). Two ways to meet:
 *  - forced (64 rounds): the sweep hook (dg_pt_set_sweep_hook) stops U between its descent and
 *    its sweep and lets M map its whole page there; the hook must fire at the slot's depth.
 *    Deterministic: every round fails without the fix.
 *  - free-running (ROUNDS): no hook in U; the allocator hook of M's first table waits until U
 *    is about to call dg_pt_unmap (a handshake, so both run), and U starts after a delay that
 *    cycles through 0..DELAYS-1 iterations, so M's linking CAS falls all around U's window of a
 *    few instructions. Without the fix, about 1 round in 300 to 3000 goes wrong (timing: a
 *    loaded machine hits less), enough that 4000 rounds x 6 configurations failed in every
 *    run tried.
 */
#include <dmaguard/pt.h>

#include "pt/pt_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OFFSET	      (1ull << 45) /* output = IOVA + OFFSET */
#define DELAYS	      256	   /* free-running: U's start delays cycled through */
#define FORCED_ROUNDS 64

struct race_cfg {
	const char *name;
	struct dg_pt_geometry geo;
};

static const struct race_cfg cfgs[] = {
	{"vtd-48", {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48}},
	{"lpae-s1-4k", {.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 48}},
	{"lpae-s2-16k", {.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 48, .oas = 48, .granule = 0x4000}},
};

struct race {
	struct dg_pt *pt;
	bool forced; /* this run: the sweep hook, else free-running */
	uint64_t granule;
	uint64_t region;   /* start of the span whose tables come and go; M's page */
	uint64_t unmap_at; /* U's range: a few pages inside the first last-level span */
	uint64_t unmap_len;
	unsigned int delay; /* free-running: this round's delay of U */
	/* Per-round handshake flags (relaxed: they order nothing, the barriers do; set by the
	 * main thread before the start barrier). */
	atomic_bool alloc_armed; /* free-running: M's next table allocation waits for U */
	atomic_bool sweep_armed; /* forced: U's next sweep waits for M */
	atomic_bool m_ready;	 /* free-running: M's allocation hook waits for U */
	atomic_bool u_go;	 /* U is about to unmap (free) or inside its sweep hook (forced) */
	atomic_bool m_done;	 /* M's map returned */
	atomic_bool stop;
	pthread_barrier_t start; /* per round: U, M and the main thread start together */
	pthread_barrier_t done;	 /* per round: U and M finished */
	/* Results, read by the main thread after the done barrier. */
	int u_err, m_err;
	uint64_t u_bytes;
	int hook_depth; /* forced: the depth the sweep hook fired at (-1: it did not) */
	uint64_t hook_iova;
	struct dg_pt_gather ug, mg; /* released by the main thread after each round */
};

/* Wait for @flag; yield now and then, the machine may have fewer free cores than threads. */
static void spin_until(atomic_bool *flag)
{
	/* Relaxed: a handshake that orders nothing, the barriers do. */
	for (unsigned int i = 1; !atomic_load_explicit(flag, memory_order_relaxed); i++)
		if (!(i % 4096))
			sched_yield();
}

static void *race_alloc(void *cookie, size_t size)
{
	struct race *r = cookie;
	void *p = aligned_alloc(size, size);

	if (p)
		memset(p, 0, size);
	/* Free-running: M's first table waits until U runs, then the CAS follows at once. */
	if (atomic_exchange_explicit(&r->alloc_armed, false, memory_order_relaxed)) {
		atomic_store_explicit(&r->m_ready, true, memory_order_relaxed);
		spin_until(&r->u_go);
	}
	return p;
}

static void race_free(void *cookie, void *page, size_t size)
{
	(void)cookie;
	(void)size;
	free(page);
}

static const struct dg_pt_mem_ops race_mem = {.alloc = race_alloc, .free = race_free};

/* Forced: U's first sweep of the round waits here, descent done, until M has mapped. */
static void race_sweep_hook(void *arg, uint64_t iova, unsigned int depth)
{
	struct race *r = arg;

	if (!atomic_exchange_explicit(&r->sweep_armed, false, memory_order_relaxed))
		return; /* the main thread's cleanup, or U's later passes */
	r->hook_depth = (int)depth;
	r->hook_iova = iova;
	atomic_store_explicit(&r->u_go, true, memory_order_relaxed);
	spin_until(&r->m_done);
}

static void *unmapper_main(void *arg)
{
	struct race *r = arg;

	for (;;) {
		pthread_barrier_wait(&r->start);
		if (atomic_load_explicit(&r->stop, memory_order_relaxed))
			break;
		if (!r->forced) {
			spin_until(&r->m_ready);
			atomic_store_explicit(&r->u_go, true, memory_order_relaxed);
			/* M's CAS follows as soon as it sees u_go: start a little later. */
			for (volatile unsigned int i = 0; i < r->delay; i++)
				;
		}
		r->u_bytes = 0;
		r->u_err = dg_pt_unmap(r->pt, r->unmap_at, r->unmap_len, &r->ug, &r->u_bytes);
		/* Forced, the hook not reached (reported as an error): let M go on. */
		atomic_store_explicit(&r->u_go, true, memory_order_relaxed);
		pthread_barrier_wait(&r->done);
	}
	return NULL;
}

static void *mapper_main(void *arg)
{
	struct race *r = arg;

	for (;;) {
		pthread_barrier_wait(&r->start);
		if (atomic_load_explicit(&r->stop, memory_order_relaxed))
			break;
		if (r->forced)
			spin_until(&r->u_go);
		r->m_err = dg_pt_map(r->pt, r->region, r->region + OFFSET, r->granule,
				     DG_PROT_READ | DG_PROT_WRITE, &r->mg);
		atomic_store_explicit(&r->m_done, true, memory_order_relaxed);
		/* Free-running, no table allocated (reported as an error): let U go on. */
		atomic_store_explicit(&r->m_ready, true, memory_order_relaxed);
		pthread_barrier_wait(&r->done);
	}
	return NULL;
}

/* Tables of @pt (root included) and the spans of a last-level table and of its parent. */
static unsigned int spans(const struct dg_pt *pt, uint64_t *s1, uint64_t *s2)
{
	unsigned int levels = 0;

	while (dg_pt_table_span(pt, levels))
		levels++;
	*s1 = dg_pt_table_span(pt, levels - 1);
	*s2 = dg_pt_table_span(pt, levels - 2);
	return levels;
}

static int run(const struct race_cfg *c, unsigned int depth, bool forced, unsigned int rounds)
{
	struct race r = {.forced = forced};
	struct dg_pt_geometry geo;
	struct dg_pt_gather g;
	pthread_t u, m;
	uint64_t s1, s2, bytes, anchor, tables, gone;
	unsigned int bad = 0, round, levels;
	int rc = 0;

	r.pt = dg_pt_create(&c->geo, &race_mem, &r);
	if (!r.pt) {
		fprintf(stderr, "stress_pt_unmap_race: %s: create failed\n", c->name);
		return 1;
	}
	dg_pt_geometry(r.pt, &geo);
	r.granule = geo.granule;
	levels = spans(r.pt, &s1, &s2);
	/* Region: a whole parent span at 2 * s2. The anchor keeps the parent table (depth 1)
	 * or, in the next parent span, the grandparent (depth 2); the round removes the rest. */
	r.region = 2 * s2;
	anchor = depth == 1 ? r.region + s2 - r.granule : r.region + s2;
	gone = depth == 1 ? s1 : s2;
	/* U: 6 pages near the end of the first last-level span, M's page is at its start. */
	r.unmap_len = 6 * r.granule;
	r.unmap_at = r.region + s1 - 16 * r.granule;
	dg_pt_gather_init(&r.ug);
	dg_pt_gather_init(&r.mg);
	dg_pt_gather_init(&g);
	if (dg_pt_map(r.pt, anchor, anchor + OFFSET, r.granule, DG_PROT_READ, &g))
		rc = 1;
	tables = dg_pt_table_pages(r.pt);
	if (forced)
		dg_pt_set_sweep_hook(r.pt, race_sweep_hook, &r);
	pthread_barrier_init(&r.start, NULL, 3);
	pthread_barrier_init(&r.done, NULL, 3);
	if (pthread_create(&u, NULL, unmapper_main, &r) ||
	    pthread_create(&m, NULL, mapper_main, &r))
		abort();
	for (round = 0; round < rounds && !rc; round++) {
		struct dg_pt_walk w;
		/* The sweep hook fires where U's descent stops: the empty slot's table. */
		const int want_depth = (int)(levels - 1 - depth);
		bool wrong;

		r.delay = round % DELAYS;
		r.hook_depth = -1;
		atomic_store_explicit(&r.u_go, false, memory_order_relaxed);
		atomic_store_explicit(&r.m_ready, false, memory_order_relaxed);
		atomic_store_explicit(&r.m_done, false, memory_order_relaxed);
		atomic_store_explicit(&r.alloc_armed, !forced, memory_order_relaxed);
		atomic_store_explicit(&r.sweep_armed, forced, memory_order_relaxed);
		pthread_barrier_wait(&r.start); /* orders the stores above before both threads */
		pthread_barrier_wait(&r.done);	/* orders their results before us */
		if (!forced && atomic_load_explicit(&r.alloc_armed, memory_order_relaxed)) {
			fprintf(stderr,
				"stress_pt_unmap_race: %s depth %u: M allocated no table: the race "
				"was not set up\n",
				c->name, depth);
			rc = 1;
		}
		atomic_store_explicit(&r.sweep_armed, false, memory_order_relaxed);
		wrong = r.m_err || r.u_err != -ENOENT || r.u_bytes ||
			dg_pt_walk(r.pt, r.region, &w) || w.phys != r.region + OFFSET;
		if (forced && (r.hook_depth != want_depth || r.hook_iova != r.unmap_at)) {
			fprintf(stderr,
				"stress_pt_unmap_race: %s depth %u: the sweep hook fired at depth %d "
				"iova 0x%" PRIx64 ", not %d 0x%" PRIx64
				": the race was not forced\n",
				c->name, depth, r.hook_depth, r.hook_iova, want_depth, r.unmap_at);
			rc = 1;
		}
		if (wrong && bad++ < 5)
			fprintf(stderr,
				"stress_pt_unmap_race: %s depth %u %s round %u: map %d; unmap 0x%" PRIx64
				"+0x%" PRIx64 ": %d, %" PRIu64
				" bytes (want -ENOENT, 0); page 0x%" PRIx64 " %s\n",
				c->name, depth, forced ? "forced" : "free", round, r.m_err,
				r.unmap_at, r.unmap_len, r.u_err, r.u_bytes, r.region,
				dg_pt_iova_to_phys(r.pt, r.region) ? "mapped" : "gone");
		if (dg_pt_check(r.pt, stderr))
			rc = 1;
		/* Both joined: this thread owns the region; remove it with its tables. */
		dg_pt_unmap(r.pt, r.region, gone, &g, &bytes);
		dg_pt_gather_release(r.pt, &r.ug);
		dg_pt_gather_release(r.pt, &r.mg);
		dg_pt_gather_release(r.pt, &g);
	}
	atomic_store_explicit(&r.stop, true, memory_order_relaxed);
	pthread_barrier_wait(&r.start);
	pthread_join(u, NULL);
	pthread_join(m, NULL);
	if (bad)
		rc = 1;
	if (!rc && (dg_pt_check(r.pt, stderr) || dg_pt_table_pages(r.pt) != tables)) {
		fprintf(stderr,
			"stress_pt_unmap_race: %s: %" PRIu64 " tables left, not %" PRIu64 "\n",
			c->name, dg_pt_table_pages(r.pt), tables);
		rc = 1;
	}
	printf("stress_pt_unmap_race %-12s depth %u %-6s: %u rounds, %u wrong: %s\n", c->name,
	       depth, forced ? "forced" : "free", round, bad, rc ? "FAILED" : "ok");
	pthread_barrier_destroy(&r.start);
	pthread_barrier_destroy(&r.done);
	dg_pt_destroy(r.pt);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned int rounds = argc > 1 ? (unsigned int)strtoul(argv[1], NULL, 0) : 4000;
	int rc = 0;

	if (!rounds) {
		fprintf(stderr, "usage: stress_pt_unmap_race [ROUNDS]\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++)
		for (unsigned int depth = 1; depth <= 2; depth++) {
			rc |= run(&cfgs[i], depth, true, FORCED_ROUNDS);
			rc |= run(&cfgs[i], depth, false, rounds);
		}
	return rc;
}
