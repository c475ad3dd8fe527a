/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the vhost device IOTLB, the memory table and address translation:
 *  - the IOTLB against a reference model (a flat array over four clusters of pages: low
 *    memory, just below 4 GiB, across a root-slot boundary, the top of the 2^64 space) through
 *    thousands of random updates and invalidations, checked after every step;
 *  - range arithmetic at the edges: QEMU's full flush whose end is exactly 2^64, ranges that
 *    wrap past it, empty ranges; a failed update (node cap) changes nothing;
 *  - translation: coalescing only when host addresses are contiguous, a buffer spanning
 *    entries becomes several segments, permissions, the memory-table check as a last line of
 *    defence;
 *  - the per-queue cache on the IOMMU engine: fills, permissions, precise invalidation applied
 *    at quiescent points, offline agents, IOVAs above the engine domain's input space;
 *  - memory-table validation: counts, sizes, wrapping, overlaps, files too short to map.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "vhost/agent.h"
#include "vhost/iotlb.h"
#include "vhost/memtable.h"
#include "vhost/virtq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "../../test_rand.h"

#define PG 4096ull

/* ---- IOTLB against a model ---- */

#define CL_PAGES 8192u
static const uint64_t cl_base[4] = {0, 0xfef00000ull >> 12, (1ull << 36) - 4096,
				    (1ull << 52) - CL_PAGES};

static uint64_t rng_s = 12345;
static uint64_t rnd(void)
{
	return splitmix64(&rng_s);
}

static void check_model(const struct vhost_iotlb *t, const uint64_t *model)
{
	uint64_t n = 0;

	assert_int_equal(vhost_iotlb_check(t), 0);
	for (unsigned int c = 0; c < 4; c++)
		for (unsigned int k = 0; k < CL_PAGES; k++) {
			uint64_t want = model[c * CL_PAGES + k];

			n += want != 0;
			if (vhost_iotlb_lookup(t, cl_base[c] + k) != want)
				fail_msg("cluster %u page %u: got 0x%llx want 0x%llx", c, k,
					 (unsigned long long)vhost_iotlb_lookup(t, cl_base[c] + k),
					 (unsigned long long)want);
		}
	assert_int_equal(n, t->entries);
}

static void test_iotlb_model(void **state)
{
	(void)state;
	struct vhost_iotlb t;
	uint64_t *model = calloc(4 * CL_PAGES, sizeof(*model));

	assert_non_null(model);
	assert_int_equal(vhost_iotlb_init(&t, 0), 0);
	for (unsigned int step = 0; step < 3000; step++) {
		unsigned int c = (unsigned int)(rnd() % 4);
		uint64_t r = rnd() % 100;

		if (r < 55) {
			uint64_t k = rnd() % CL_PAGES, n = 1 + rnd() % (rnd() % 8 ? 8 : 600);
			uint64_t host = (0x10000000ull + (rnd() % 100000) * PG) + (rnd() % 2) * 8;
			uint64_t perm = (rnd() % 3 + 1) << 62;

			uint64_t changed = 7, want = 0;

			if (k + n > CL_PAGES)
				n = CL_PAGES - k;
			for (uint64_t i = 0; i < n; i++) {
				uint64_t old = model[c * CL_PAGES + k + i];

				want += old && old != ((host + (i << 12)) | perm);
			}
			assert_int_equal(vhost_iotlb_update(&t, (cl_base[c] + k) << 12, n << 12,
							    host, perm, &changed),
					 0);
			assert_int_equal(changed, want); /* pages a cache may hold stale */
			for (uint64_t i = 0; i < n; i++)
				model[c * CL_PAGES + k + i] = (host + (i << 12)) | perm;
		} else if (r < 97) {
			/* Byte-granular range: every page it touches goes. */
			uint64_t start = ((cl_base[c] << 12) + rnd() % ((uint64_t)CL_PAGES << 12));
			uint64_t size = 1 + rnd() % (rnd() % 4 ? 3 * PG : 700 * PG), removed = 0;
			uint64_t last = start + size - 1, lim = (cl_base[c] + CL_PAGES) << 12;

			if (lim && last >= lim)
				size = lim - start, last = lim - 1;
			if (!lim && last < start)
				size = 0 - start, last = UINT64_MAX;
			assert_int_equal(vhost_iotlb_invalidate(&t, start, size, &removed), 0);
			uint64_t want = 0;
			for (uint64_t p = start >> 12; p <= last >> 12; p++) {
				want += model[c * CL_PAGES + (p - cl_base[c])] != 0;
				model[c * CL_PAGES + (p - cl_base[c])] = 0;
			}
			assert_int_equal(removed, want);
		} else {
			/* QEMU's whole-space flush around the interrupt window. */
			assert_int_equal(vhost_iotlb_invalidate(&t, 0xfef00000ull,
								0xffffffff01100000ull, NULL),
					 0);
			for (unsigned int cc = 0; cc < 4; cc++)
				for (unsigned int k = 0; k < CL_PAGES; k++)
					if (((cl_base[cc] + k) << 12) >= 0xfef00000ull)
						model[cc * CL_PAGES + k] = 0;
		}
		if (step % 50 == 0 || step > 2990)
			check_model(&t, model);
	}
	vhost_iotlb_flush(&t);
	memset(model, 0, 4 * CL_PAGES * sizeof(*model));
	check_model(&t, model);
	vhost_iotlb_destroy(&t);
	free(model);
}

static void test_iotlb_edges(void **state)
{
	(void)state;
	struct vhost_iotlb t;
	uint64_t removed = 7;
	const uint64_t RW = VHOST_IOTLB_READ | VHOST_IOTLB_WRITE;

	assert_int_equal(vhost_iotlb_init(&t, 0), 0);
	/* The last page of the 64-bit space and a page below the flush range. */
	assert_int_equal(vhost_iotlb_update(&t, UINT64_MAX - PG + 1, PG, 0x10000, RW, NULL), 0);
	assert_int_equal(vhost_iotlb_update(&t, 0xfee00000ull, PG, 0x20000, RW, NULL), 0);
	assert_int_equal(vhost_iotlb_update(&t, 0xfef00000ull, PG, 0x30000, RW, NULL), 0);
	/* Wrapping past 2^64, empty, misaligned, bad perms: refused, nothing changed. */
	assert_int_equal(vhost_iotlb_invalidate(&t, UINT64_MAX - PG + 1, 2 * PG, &removed),
			 -ERANGE);
	assert_int_equal(vhost_iotlb_invalidate(&t, 5, 0, &removed), -EINVAL);
	assert_int_equal(removed, 7);
	assert_int_equal(vhost_iotlb_update(&t, UINT64_MAX - PG + 1, 2 * PG, 0x1000, RW, NULL),
			 -ERANGE);
	assert_int_equal(vhost_iotlb_update(&t, 0x1000, 0, 0x1000, RW, NULL), -EINVAL);
	assert_int_equal(vhost_iotlb_update(&t, 0x1800, PG, 0x1000, RW, NULL), -EINVAL);
	assert_int_equal(vhost_iotlb_update(&t, 0x1000, 0x800, 0x1000, RW, NULL), -EINVAL);
	assert_int_equal(vhost_iotlb_update(&t, 0x1000, PG, 0x1000, 0, NULL), -EINVAL);
	assert_int_equal(vhost_iotlb_update(&t, 0x1000, PG, 0x1000, 1, NULL), -EINVAL);
	assert_int_equal(vhost_iotlb_update(&t, 0x1000, PG, 0, RW, NULL), -EINVAL);
	assert_int_equal(vhost_iotlb_update(&t, 0x1000, PG, 1ull << 62, RW, NULL), -EINVAL);
	assert_int_equal(t.entries, 3);
	/* The full flush: iova + size is exactly 2^64. */
	assert_int_equal(vhost_iotlb_invalidate(&t, 0xfef00000ull, 0xffffffff01100000ull, &removed),
			 0);
	assert_int_equal(removed, 2);
	assert_int_equal(vhost_iotlb_lookup(&t, 0xfee00), 0x20000 | RW);
	assert_int_equal(vhost_iotlb_lookup(&t, (UINT64_MAX >> 12)), 0);
	/* The whole space in one range. */
	assert_int_equal(vhost_iotlb_invalidate(&t, 0, UINT64_MAX, &removed), 0);
	assert_int_equal(removed, 1);
	assert_int_equal(vhost_iotlb_check(&t), 0);
	vhost_iotlb_destroy(&t);

	/* A failed update changes nothing: node cap of 3 = one path from the root. */
	assert_int_equal(vhost_iotlb_init(&t, 3), 0);
	assert_int_equal(vhost_iotlb_update(&t, 0, 2 * PG, 0x5000, RW, NULL), 0);
	assert_int_equal(vhost_iotlb_update(&t, 4095 * PG, 2 * PG, 0x9000, RW, NULL), -ENOSPC);
	assert_int_equal(vhost_iotlb_lookup(&t, 4095), 0);
	assert_int_equal(vhost_iotlb_lookup(&t, 1), 0x6000 | RW);
	assert_int_equal(t.entries, 2);
	assert_int_equal(vhost_iotlb_check(&t), 0);
	vhost_iotlb_reset(&t);
	assert_int_equal(t.nodes, 0);
	assert_int_equal(vhost_iotlb_update(&t, 4095 * PG, PG, 0x9000, RW, NULL), 0);
	vhost_iotlb_destroy(&t);
}

/* ---- translation ---- */

struct xl {
	int fd;
	uint8_t *p; /* the mapping the memtable made */
	struct vhost_memtable mt;
	struct vhost_iotlb t;
	_Atomic uint64_t outside;
	struct vhost_as as;
};

static void xl_init(struct xl *x, unsigned int pages)
{
	struct vu_memory m = {.nregions = 1};

	x->fd = memfd_create("xl", 0);
	assert_true(x->fd >= 0);
	assert_int_equal(ftruncate(x->fd, pages * PG), 0);
	m.regions[0] = (struct vu_region){.gpa = 0x100000, .size = pages * PG, .uaddr = 0x5000000};
	assert_int_equal(vhost_memtable_map(&x->mt, &m, &x->fd, 1), 0);
	x->p = x->mt.r[0].host;
	assert_int_equal(vhost_iotlb_init(&x->t, 0), 0);
	atomic_init(&x->outside, 0);
	x->as = (struct vhost_as){.mt = &x->mt, .iotlb = &x->t, .outside = &x->outside};
}

static void xl_fini(struct xl *x)
{
	vhost_iotlb_destroy(&x->t);
	vhost_memtable_unmap(&x->mt);
	close(x->fd);
}

static void test_xlate_segments(void **state)
{
	(void)state;
	const uint64_t RW = VHOST_IOTLB_READ | VHOST_IOTLB_WRITE;
	struct vhost_seg seg[8];
	struct vhost_fault f;
	unsigned int n = 0;
	struct xl x;

	xl_init(&x, 16);
	/* iova pages 0-3 -> host pages 0-3 (one UPDATE), page 4 -> host 4 (contiguous, separate
	 * UPDATE: coalesced), page 5 -> host 9 (not contiguous: a new segment). */
	assert_int_equal(vhost_iotlb_update(&x.t, 0, 4 * PG, (uintptr_t)x.p, RW, NULL), 0);
	assert_int_equal(vhost_iotlb_update(&x.t, 4 * PG, PG, (uintptr_t)x.p + 4 * PG, RW, NULL),
			 0);
	assert_int_equal(vhost_iotlb_update(&x.t, 5 * PG, PG, (uintptr_t)x.p + 9 * PG, RW, NULL),
			 0);
	assert_int_equal(
		vhost_xlate(&x.as, NULL, 0x800, 5 * PG, VU_ACCESS_RO, false, seg, 8, &n, &f), 0);
	assert_int_equal(n, 2);
	assert_ptr_equal(seg[0].host, x.p + 0x800);
	assert_int_equal(seg[0].len, 5 * PG - 0x800);
	assert_ptr_equal(seg[1].host, x.p + 9 * PG);
	assert_int_equal(seg[1].len, 0x800);
	/* Segment capacity. */
	n = 0;
	assert_int_equal(vhost_xlate(&x.as, NULL, 0x800, 5 * PG, VU_ACCESS_RO, false, seg, 1, &n,
				     &f),
			 -E2BIG);
	/* A miss reports the page. */
	n = 0;
	assert_int_equal(vhost_xlate(&x.as, NULL, 5 * PG + 10, 2 * PG, VU_ACCESS_WO, false, seg, 8,
				     &n, &f),
			 -EAGAIN);
	assert_int_equal(f.addr, 6 * PG);
	assert_int_equal(f.perm, VU_ACCESS_WO);
	/* Permissions: read-only page written to. */
	assert_int_equal(vhost_iotlb_update(&x.t, 6 * PG, PG, (uintptr_t)x.p + 10 * PG,
					    VHOST_IOTLB_READ, NULL),
			 0);
	n = 0;
	assert_int_equal(vhost_xlate(&x.as, NULL, 6 * PG, 16, VU_ACCESS_WO, false, seg, 8, &n, &f),
			 -EACCES);
	assert_int_equal(f.addr, 6 * PG);
	/* Wrapping range. */
	n = 0;
	assert_int_equal(vhost_xlate(&x.as, NULL, UINT64_MAX - 5, 10, VU_ACCESS_RO, false, seg, 8,
				     &n, &f),
			 -EFAULT);
	/* Last line of defence: a leaf pointing outside the table (impossible through the
	 * UPDATE path, forged here) is refused and counted. */
	assert_int_equal(vhost_iotlb_update(&x.t, 7 * PG, PG, (uintptr_t)x.p + 16 * PG, RW, NULL),
			 0);
	n = 0;
	assert_int_equal(vhost_xlate(&x.as, NULL, 7 * PG, 8, VU_ACCESS_RO, false, seg, 8, &n, &f),
			 -EPERM);
	assert_int_equal(atomic_load(&x.outside), 1);
	/* Without IOMMU: guest physical (buffers) and front-end virtual (rings). */
	x.as.iotlb = NULL;
	n = 0;
	assert_int_equal(vhost_xlate(&x.as, NULL, 0x100000 + 15 * PG, PG, VU_ACCESS_RO, false, seg,
				     8, &n, &f),
			 0);
	assert_ptr_equal(seg[0].host, x.p + 15 * PG);
	n = 0;
	assert_int_equal(vhost_xlate(&x.as, NULL, 0x100000 + 15 * PG, PG + 1, VU_ACCESS_RO, false,
				     seg, 8, &n, &f),
			 -EFAULT);
	n = 0;
	assert_int_equal(
		vhost_xlate(&x.as, NULL, 0x5000000 + PG, 8, VU_ACCESS_RO, true, seg, 8, &n, &f), 0);
	assert_ptr_equal(seg[0].host, x.p + PG);
	assert_int_equal(atomic_load(&x.outside), 1);
	xl_fini(&x);
}

/*
 * A queue's cache: an agent of the IOMMU engine (vhost/agent.h) filled from the store. Misses
 * and permissions, no false hit between pages sharing a slot, precise invalidation applied at
 * the agent's quiescent point (not before: the wait is what makes it complete), an offline
 * agent that never holds up a wait and catches up when it comes back, IOVAs above the engine
 * domain's input space (a whole flush), and hits for a full table filled in random order.
 */
static void test_agent_cache(void **state)
{
	(void)state;
	const uint64_t RW = VHOST_IOTLB_READ | VHOST_IOTLB_WRITE;
	const uint64_t top = UINT64_MAX - PG + 1; /* the last page of the 64-bit space */
	struct dg_device *dev[1];
	struct vhost_engine e;
	uint64_t seq;
	uint8_t *h = NULL;
	struct xl x;

	xl_init(&x, 16);
	assert_int_equal(vhost_engine_init(&e, dev, 1), 0);
	dg_dev_online(dev[0]);
	assert_null(vhost_agent_probe(dev[0], 3 * PG, VU_ACCESS_RO));
	assert_int_equal(vhost_agent_fill(dev[0], &x.t, 3 * PG + 5, VU_ACCESS_RO, &h), -EAGAIN);
	assert_int_equal(vhost_iotlb_update(&x.t, 3 * PG, 2 * PG, (uintptr_t)x.p, RW, NULL), 0);
	assert_int_equal(vhost_iotlb_update(&x.t, (3 + VHOST_AGENT_CACHE_ENTRIES) * PG, PG,
					    (uintptr_t)x.p + 8 * PG, VHOST_IOTLB_READ, NULL),
			 0);
	assert_int_equal(vhost_iotlb_update(&x.t, top, PG, (uintptr_t)x.p + 9 * PG, RW, NULL), 0);
	/* Fill, then hits with either access; a page sharing the slot does not hit. */
	assert_int_equal(vhost_agent_fill(dev[0], &x.t, 3 * PG + 5, VU_ACCESS_RO, &h), 0);
	assert_ptr_equal(h, x.p + 5);
	assert_ptr_equal(vhost_agent_probe(dev[0], 3 * PG + 7, VU_ACCESS_WO), x.p + 7);
	assert_null(vhost_agent_probe(dev[0], (3 + VHOST_AGENT_CACHE_ENTRIES) * PG, VU_ACCESS_RO));
	/* Granted read-only: a write is refused, from the cache too; a read hits. */
	assert_int_equal(vhost_agent_fill(dev[0], &x.t, (3 + VHOST_AGENT_CACHE_ENTRIES) * PG,
					  VU_ACCESS_WO, &h),
			 -EACCES);
	assert_null(vhost_agent_probe(dev[0], (3 + VHOST_AGENT_CACHE_ENTRIES) * PG, VU_ACCESS_WO));
	assert_ptr_equal(vhost_agent_probe(dev[0], (3 + VHOST_AGENT_CACHE_ENTRIES) * PG + 1,
					   VU_ACCESS_RO),
			 x.p + 8 * PG + 1);
	assert_null(vhost_agent_probe(dev[0], 3 * PG, VU_ACCESS_RO)); /* evicted by it */
	assert_int_equal(vhost_agent_fill(dev[0], &x.t, 3 * PG, VU_ACCESS_RO, &h), 0);
	assert_int_equal(vhost_agent_fill(dev[0], &x.t, 4 * PG, VU_ACCESS_RO, &h), 0);
	assert_int_equal(vhost_agent_fill(dev[0], &x.t, top + 9, VU_ACCESS_WO, &h), 0);
	assert_ptr_equal(h, x.p + 9 * PG + 9);
	/* Invalidate page 3 (a byte of it): applied at the quiescent point, page 4 kept. */
	assert_int_equal(vhost_iotlb_invalidate(&x.t, 3 * PG + 100, 1, NULL), 0);
	assert_int_equal(vhost_engine_submit(&e, 3 * PG + 100, 3 * PG + 100, &seq), 0);
	assert_false(dg_inval_done(e.mmu, seq));
	assert_non_null(vhost_agent_probe(dev[0], 3 * PG, VU_ACCESS_RO)); /* not yet applied */
	vhost_agents_quiesce(dev, 1);
	assert_true(dg_inval_done(e.mmu, seq));
	assert_null(vhost_agent_probe(dev[0], 3 * PG, VU_ACCESS_RO));
	assert_ptr_equal(vhost_agent_probe(dev[0], 4 * PG, VU_ACCESS_RO), x.p + PG);
	assert_non_null(vhost_agent_probe(dev[0], top, VU_ACCESS_RO));
	/* Offline: the wait completes at once; the command is applied when it comes back. */
	vhost_agents_offline(dev, 1);
	assert_int_equal(vhost_iotlb_invalidate(&x.t, 4 * PG, PG, NULL), 0);
	assert_int_equal(vhost_engine_submit(&e, 4 * PG, 5 * PG - 1, &seq), 0);
	assert_int_equal(dg_inval_wait(e.mmu, seq), 0);
	vhost_agents_online(dev, 1);
	assert_null(vhost_agent_probe(dev[0], 4 * PG, VU_ACCESS_RO));
	assert_non_null(vhost_agent_probe(dev[0], top, VU_ACCESS_RO));
	/* Above the domain's 2^57 input space (and QEMU's whole-space flush ending at 2^64):
	 * the caches are emptied whole. */
	assert_int_equal(vhost_agent_fill(dev[0], &x.t, 4 * PG, VU_ACCESS_RO, &h), -EAGAIN);
	assert_int_equal(vhost_iotlb_update(&x.t, 4 * PG, PG, (uintptr_t)x.p + PG, RW, NULL), 0);
	assert_int_equal(vhost_agent_fill(dev[0], &x.t, 4 * PG, VU_ACCESS_RO, &h), 0);
	assert_int_equal(vhost_engine_submit(&e, 0xfef00000ull, UINT64_MAX, &seq), 0);
	vhost_agents_quiesce(dev, 1);
	assert_null(vhost_agent_probe(dev[0], top, VU_ACCESS_RO));
	assert_null(vhost_agent_probe(dev[0], 4 * PG, VU_ACCESS_RO));
	/* A full table filled in random order: every page hits, one probe each. */
	uint64_t order[VHOST_AGENT_CACHE_ENTRIES];
	for (unsigned int i = 0; i < VHOST_AGENT_CACHE_ENTRIES; i++)
		order[i] = i;
	for (unsigned int i = VHOST_AGENT_CACHE_ENTRIES - 1; i > 0; i--) {
		unsigned int k = (unsigned int)(rnd() % (i + 1));
		uint64_t t = order[i];

		order[i] = order[k];
		order[k] = t;
	}
	for (unsigned int i = 0; i < VHOST_AGENT_CACHE_ENTRIES; i++) {
		uint64_t iova = (1ull << 40) + order[i] * PG;

		assert_int_equal(vhost_iotlb_update(&x.t, iova, PG,
						    (uintptr_t)x.p + (order[i] % 16) * PG, RW,
						    NULL),
				 0);
		assert_int_equal(vhost_agent_fill(dev[0], &x.t, iova, VU_ACCESS_WO, &h), 0);
	}
	for (unsigned int i = 0; i < VHOST_AGENT_CACHE_ENTRIES; i++)
		assert_ptr_equal(vhost_agent_probe(dev[0], (1ull << 40) + i * PG + 1, VU_ACCESS_RO),
				 x.p + (i % 16) * PG + 1);
	assert_int_equal(iotlb_count(&dev[0]->iotlb), VHOST_AGENT_CACHE_ENTRIES);
	assert_int_equal(iotlb_check(&dev[0]->iotlb, stderr), 0);
	vhost_agents_offline(dev, 1);
	vhost_engine_fini(&e, dev, 1);
	xl_fini(&x);
}

/* ---- memory table ---- */

static void test_memtable_validate(void **state)
{
	(void)state;
	struct vu_memory m = {.nregions = 2};

	m.regions[0] = (struct vu_region){.gpa = 0, .size = 0x1000, .uaddr = 0x10000};
	m.regions[1] = (struct vu_region){.gpa = 0x1000, .size = 0x1000, .uaddr = 0x11000};
	assert_int_equal(vhost_memtable_validate(&m, 2), 0); /* adjacent is fine */
	assert_int_equal(vhost_memtable_validate(&m, 1), -EINVAL);
	assert_int_equal(vhost_memtable_validate(&m, 3), -EINVAL);
	m.nregions = 0;
	assert_int_equal(vhost_memtable_validate(&m, 0), -EINVAL);
	m.nregions = 9;
	assert_int_equal(vhost_memtable_validate(&m, 9), -EINVAL);
	m.nregions = 2;

	struct vu_memory b = m;
	b.regions[1].gpa = 0xfff; /* gpa overlap */
	assert_int_equal(vhost_memtable_validate(&b, 2), -EINVAL);
	b = m;
	b.regions[1].uaddr = 0x10800; /* uaddr overlap */
	assert_int_equal(vhost_memtable_validate(&b, 2), -EINVAL);
	b = m;
	b.regions[1].size = 0;
	assert_int_equal(vhost_memtable_validate(&b, 2), -EINVAL);
	b = m;
	b.regions[1].gpa = UINT64_MAX - 0x800; /* wraps */
	assert_int_equal(vhost_memtable_validate(&b, 2), -EINVAL);
	b = m;
	b.regions[1].uaddr = UINT64_MAX - 0x800;
	assert_int_equal(vhost_memtable_validate(&b, 2), -EINVAL);
	b = m;
	b.regions[1].mmap_off = UINT64_MAX - 0x800;
	assert_int_equal(vhost_memtable_validate(&b, 2), -EINVAL);
	b = m;
	b.regions[1].gpa = UINT64_MAX - 0xfff; /* ends exactly at 2^64: allowed */
	assert_int_equal(vhost_memtable_validate(&b, 2), 0);
}

static void test_memtable_map(void **state)
{
	(void)state;
	struct vu_memory m = {.nregions = 2};
	struct vhost_memtable mt;
	int fds[2], pfd[2];
	uint64_t room;

	fds[0] = memfd_create("a", 0);
	fds[1] = memfd_create("b", 0);
	assert_int_equal(ftruncate(fds[0], 8 * PG), 0);
	assert_int_equal(ftruncate(fds[1], 4 * PG), 0);
	m.regions[0] =
		(struct vu_region){.gpa = 0, .size = 4 * PG, .uaddr = 0x10000, .mmap_off = 4 * PG};
	m.regions[1] = (struct vu_region){
		.gpa = 0x100000, .size = 4 * PG, .uaddr = 0x40000, .mmap_off = 0};
	assert_int_equal(vhost_memtable_map(&mt, &m, fds, 2), 0);
	assert_int_equal(mt.n, 2);
	mt.r[0].host[0] = 0x5a; /* writable, and backed by the file at the offset */
	uint8_t b = 0;
	assert_int_equal(pread(fds[0], &b, 1, 4 * PG), 1);
	assert_int_equal(b, 0x5a);
	assert_ptr_equal(vhost_memtable_gpa(&mt, 0x100010, &room), mt.r[1].host + 0x10);
	assert_int_equal(room, 4 * PG - 0x10);
	assert_null(vhost_memtable_gpa(&mt, 4 * PG, &room));
	assert_ptr_equal(vhost_memtable_uva(&mt, 0x10000 + 5, &room), mt.r[0].host + 5);
	assert_null(vhost_memtable_uva(&mt, 0x40000 + 4 * PG, &room));
	assert_true(vhost_memtable_contains(&mt, mt.r[1].host, 4 * PG));
	assert_false(vhost_memtable_contains(&mt, &b, 1)); /* the stack */
	if (mt.r[1].host + 4 * PG != mt.r[0].host)	   /* unless mmap put them side by side */
		assert_false(vhost_memtable_contains(&mt, mt.r[1].host, 4 * PG + 1));
	vhost_memtable_unmap(&mt);
	assert_int_equal(mt.n, 0);

	/* Past the end of the file: would SIGBUS on access, refused up front. */
	m.regions[1].size = 5 * PG;
	assert_int_equal(vhost_memtable_map(&mt, &m, fds, 2), -EINVAL);
	assert_int_equal(mt.n, 0);
	m.regions[1].size = 4 * PG;
	/* Not a file. */
	assert_int_equal(pipe(pfd), 0);
	int bad[2] = {fds[0], pfd[0]};
	assert_int_equal(vhost_memtable_map(&mt, &m, bad, 2), -EINVAL);
	assert_int_equal(mt.n, 0);
	close(pfd[0]);
	close(pfd[1]);
	close(fds[0]);
	close(fds[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_iotlb_model),	  cmocka_unit_test(test_iotlb_edges),
		cmocka_unit_test(test_xlate_segments),	  cmocka_unit_test(test_agent_cache),
		cmocka_unit_test(test_memtable_validate), cmocka_unit_test(test_memtable_map),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
