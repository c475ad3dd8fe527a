/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the two-step API's fast paths (src/dma/iova_link.c, the page-table slots of
 * pt/pt_fast.h and the batch end of src/dma/map.c): a ring slot's link is one PTE store
 * through a kept table, its unlink a PTE clear and a batch entry, and the batch end
 * invalidates the consumed slots and only then lets them be linked again. Each test would
 * fail if a fast path skipped a check, wrote before refusing, or let the device reach an
 * unlinked buffer after the batch end:
 *  - a slot unlinked in a batch is refused (-EEXIST) until the batch ends, also after a
 *    submit, and the range cannot be freed meanwhile (-EBUSY);
 *  - after the end the device faults on every unlinked slot, its IOTLB warmed before;
 *  - a batch of scrambled unlinks, and runs crossing a last-level table boundary, are all
 *    invalidated; the kept tables stay the ones the tree links (pt_slots_check);
 *  - every bad argument is refused with the link left intact and usable;
 *  - an injected page-table failure changes nothing;
 *  - the Linux-like reference device (general path) gives the same answers.
 */
#include "dma/dma_internal.h" /* before cmocka.h: it defines fail() */
#include "dma_test_util.h"
#include "pt/pt_fast.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#define PG    4096ull
#define SLOTS 1024 /* 4 MiB of slots: crosses at least one 2 MiB last-level table boundary */

struct t {
	struct dma_fixture f;
	struct dg_dma_dev *dd;
	struct dg_device *dev;
	struct dg_dma_iova_state st;
	uint8_t *mem; /* SLOTS pages of buffers */
};

static void setup(struct t *t, enum dg_dma_policy p, bool reference)
{
	assert_int_equal(fixture_init(&t->f, false, 0), 0);
	t->dd = fixture_idle_dev(&t->f, 1, p, reference, &t->dev);
	assert_non_null(t->dd);
	assert_int_equal(dg_dma_iova_alloc(t->dd, SLOTS * PG, &t->st), 0);
	t->mem = page_alloc(SLOTS * PG);
	assert_non_null(t->mem);
	for (unsigned int i = 0; i < SLOTS; i++)
		memset(t->mem + i * PG, (int)(i & 0x7f) + 1, PG);
}

static void teardown(struct t *t)
{
	assert_int_equal(dg_dma_iova_free(&t->st), 0);
	assert_int_equal(fixture_end(&t->f, t->dd), 0);
	free(t->mem);
}

static struct dma_links *links(struct t *t)
{
	return t->st.links;
}

/* The kept tables are the ones the tree links, and the tree is valid. */
static void check_tables(struct t *t)
{
	struct pt_slots *s = links(t)->slots;

	if (s)
		assert_int_equal(pt_slots_check(s, stderr), 0);
	assert_int_equal(dg_pt_check(dg_domain_pt(dg_dma_dev_domain(t->dd)), stderr), 0);
}

/* Link slot @i to 64 + i bytes at offset 64 of page i (one granule); returns the address. */
static uint64_t link_slot(struct t *t, unsigned int i)
{
	uint64_t dma = 0;

	assert_int_equal(dg_dma_iova_link(&t->st, i * PG, t->mem + i * PG + 64, 64 + i,
					  DG_DMA_TO_DEVICE, &dma),
			 0);
	assert_int_equal(dma, t->st.addr + i * PG + 64);
	return dma;
}

static int unlink_slot(struct t *t, unsigned int i, struct dg_dma_batch *b)
{
	return dg_dma_iova_unlink(&t->st, i * PG, 64 + i, DG_DMA_TO_DEVICE, b);
}

/* The device reads slot @i's buffer through @dma (and so caches its translation). */
static void reads(struct t *t, unsigned int i, uint64_t dma)
{
	uint8_t got[8];

	assert_int_equal(dg_dev_read(t->dev, dma, got, sizeof(got)), 0);
	assert_int_equal(got[0], (i & 0x7f) + 1);
}

static void faults(struct t *t, uint64_t dma)
{
	uint8_t got[8];

	assert_int_equal(dg_dev_read(t->dev, dma, got, sizeof(got)), -EFAULT);
}

/* A slot unlinked in a batch stays refused until the batch's end, even after a submit. */
static void run_pending(enum dg_dma_policy p, bool reference)
{
	struct dg_dma_batch b;
	uint64_t dma, d2;
	struct t t;

	setup(&t, p, reference);
	dma = link_slot(&t, 3);
	reads(&t, 3, dma);
	dg_dma_batch_begin(t.dd, &b);
	assert_int_equal(unlink_slot(&t, 3, &b), 0);
	assert_int_equal(unlink_slot(&t, 3, &b), -ENOENT); /* double unlink */
	if (!reference) { /* the reference unlinks at once, as stock Linux */
		assert_int_equal(dg_dma_iova_link(&t.st, 3 * PG, t.mem, 64, DG_DMA_TO_DEVICE, &d2),
				 -EEXIST);
		assert_int_equal(dg_dma_iova_free(&t.st), -EBUSY);
		assert_int_equal(dg_dma_batch_submit(&b), 0);
		assert_int_equal(dg_dma_iova_link(&t.st, 3 * PG, t.mem, 64, DG_DMA_TO_DEVICE, &d2),
				 -EEXIST);
		assert_int_equal(dg_dma_iova_free(&t.st), -EBUSY);
	}
	assert_int_equal(dg_dma_batch_end(&b), 0);
	faults(&t, dma);
	/* linkable again, and the device reaches the new buffer */
	dma = link_slot(&t, 3);
	reads(&t, 3, dma);
	assert_int_equal(unlink_slot(&t, 3, NULL), 0); /* no batch: strict at once */
	faults(&t, dma);
	assert_int_equal(unlink_slot(&t, 3, NULL), -ENOENT);
	check_tables(&t);
	teardown(&t);
}

static void test_pending(void **state)
{
	(void)state;
	run_pending(DG_DMA_STRICT, false);
	run_pending(DG_DMA_LAZY, false);
	run_pending(DG_DMA_WINDOW, false);
	run_pending(DG_DMA_STRICT, true);
}

/* Unlinks in scrambled order, and an early flush of a full batch: everything is invalidated. */
static void run_scrambled(enum dg_dma_policy p, bool reference)
{
	static uint64_t dma[SLOTS];
	unsigned int order[300];
	struct dg_dma_batch b;
	struct dg_dma_stats s0, s1;
	struct t t;

	setup(&t, p, reference);
	for (unsigned int i = 0; i < 300; i++) {
		dma[i] = link_slot(&t, i);
		reads(&t, i, dma[i]);
		order[i] = i;
	}
	for (unsigned int i = 299; i > 0; i--) { /* a fixed shuffle */
		unsigned int j = (i * 7919u + 13u) % (i + 1), x = order[i];

		order[i] = order[j];
		order[j] = x;
	}
	assert_int_equal(dg_dma_dev_stats(t.dd, &s0), 0);
	dg_dma_batch_begin(t.dd, &b);
	for (unsigned int i = 0; i < 300; i++)
		assert_int_equal(unlink_slot(&t, order[i], &b), 0);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	assert_int_equal(dg_dma_dev_stats(t.dd, &s1), 0);
	if (!reference) /* 256 entries flush early once, then the end: two waits */
		assert_int_equal(s1.inval_waits - s0.inval_waits, 2);
	for (unsigned int i = 0; i < 300; i++)
		faults(&t, dma[i]);
	assert_int_equal(s1.unlinks - s0.unlinks, 300);
	/* all linkable again */
	for (unsigned int i = 0; i < 300; i++)
		dma[i] = link_slot(&t, i);
	check_tables(&t);
	dg_dma_batch_begin(t.dd, &b);
	for (unsigned int i = 0; i < 300; i++)
		assert_int_equal(unlink_slot(&t, i, &b), 0);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	teardown(&t);
}

static void test_scrambled(void **state)
{
	(void)state;
	run_scrambled(DG_DMA_STRICT, false);
	run_scrambled(DG_DMA_STRICT, true);
}

/* Runs and multi-granule links across a last-level table boundary (2 MiB). */
static void test_table_boundary(void **state)
{
	struct dg_dma_batch b;
	uint64_t dma[8], big;
	unsigned int e;
	struct t t;

	(void)state;
	setup(&t, DG_DMA_STRICT, false);
	/* the first slot of the second 2 MiB table the range touches */
	e = (unsigned int)((((t.st.addr >> 21) + 1) << 21) - t.st.addr) / PG;
	assert_true(e >= 4 && e + 4 <= SLOTS);
	for (unsigned int k = 0; k < 6; k++) {
		dma[k] = link_slot(&t, e - 3 + k);
		reads(&t, e - 3 + k, dma[k]);
	}
	dg_dma_batch_begin(t.dd, &b);
	for (unsigned int k = 0; k < 6; k++)
		assert_int_equal(unlink_slot(&t, e - 3 + k, &b), 0);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	for (unsigned int k = 0; k < 6; k++)
		faults(&t, dma[k]);
	/* two granules, one in each table: both refused inside, both reachable, both gone */
	assert_int_equal(dg_dma_iova_link(&t.st, (e - 1) * PG, t.mem + 100, 5000,
					  DG_DMA_BIDIRECTIONAL, &big),
			 0);
	assert_int_equal(big, t.st.addr + (e - 1) * PG + 100);
	assert_int_equal(dg_dma_iova_link(&t.st, e * PG, t.mem, 64, DG_DMA_TO_DEVICE, &dma[0]),
			 -EEXIST); /* its second granule */
	assert_int_equal(dg_dma_iova_unlink(&t.st, e * PG, 4900, DG_DMA_BIDIRECTIONAL, NULL),
			 -ENOENT);
	reads(&t, 0, big);
	reads(&t, 1, big + PG - 100);
	assert_int_equal(dg_dev_write(t.dev, big + 4000, "xy", 2), 0);
	assert_int_equal(t.mem[4100], 'x');
	check_tables(&t);
	dg_dma_batch_begin(t.dd, &b);
	assert_int_equal(dg_dma_iova_unlink(&t.st, (e - 1) * PG, 5000, DG_DMA_BIDIRECTIONAL, &b),
			 0);
	assert_int_equal(dg_dma_iova_link(&t.st, e * PG, t.mem, 64, DG_DMA_TO_DEVICE, &dma[0]),
			 -EEXIST); /* pending */
	assert_int_equal(dg_dma_batch_end(&b), 0);
	faults(&t, big);
	faults(&t, big + PG);
	dma[0] = link_slot(&t, e);
	reads(&t, e, dma[0]);
	assert_int_equal(unlink_slot(&t, e, NULL), 0);
	check_tables(&t);
	teardown(&t);
}

/* Every bad argument is refused with the link intact (the fast paths check before writing). */
static void test_refusals(void **state)
{
	struct dg_dma_batch b, other;
	struct dg_dma_stats s0, s1;
	uint64_t dma, d2;
	struct t t;

	(void)state;
	setup(&t, DG_DMA_STRICT, false);
	dma = link_slot(&t, 5);
	assert_int_equal(dg_dma_dev_stats(t.dd, &s0), 0);
	dg_dma_batch_begin(t.dd, &b);
	assert_int_equal(dg_dma_iova_unlink(&t.st, 5 * PG + 8, 69, DG_DMA_TO_DEVICE, &b),
			 -EINVAL); /* unaligned offset */
	assert_int_equal(dg_dma_iova_unlink(&t.st, 5 * PG, 68, DG_DMA_TO_DEVICE, &b),
			 -EINVAL); /* length */
	assert_int_equal(dg_dma_iova_unlink(&t.st, 5 * PG, 69, DG_DMA_FROM_DEVICE, &b),
			 -EINVAL); /* direction */
	assert_int_equal(dg_dma_iova_unlink(&t.st, 5 * PG, 69,
					    (enum dg_dma_dir)(64 + DG_DMA_TO_DEVICE), &b),
			 -EINVAL); /* no direction at all (would alias TO_DEVICE in a shift) */
	assert_int_equal(dg_dma_iova_unlink(&t.st, 5 * PG, 69 | (1ull << 58), DG_DMA_TO_DEVICE, &b),
			 -EINVAL); /* a length with direction bits */
	assert_int_equal(dg_dma_iova_unlink(&t.st, 6 * PG, 70, DG_DMA_TO_DEVICE, &b), -ENOENT);
	assert_int_equal(dg_dma_iova_unlink(&t.st, SLOTS * PG, 69, DG_DMA_TO_DEVICE, &b), -ERANGE);
	assert_int_equal(dg_dma_iova_unlink(&t.st, 5 * PG, 0, DG_DMA_TO_DEVICE, &b), -EINVAL);
	other.dev = NULL; /* not begun */
	assert_int_equal(dg_dma_iova_unlink(&t.st, 5 * PG, 69, DG_DMA_TO_DEVICE, &other), -EINVAL);
	/* links over it, beside it, out of range, bad arguments */
	assert_int_equal(dg_dma_iova_link(&t.st, 5 * PG, t.mem, 64, DG_DMA_TO_DEVICE, &d2),
			 -EEXIST);
	assert_int_equal(dg_dma_iova_link(&t.st, 4 * PG, t.mem + 4000, 200, DG_DMA_TO_DEVICE, &d2),
			 -EEXIST); /* its second granule is slot 5 */
	assert_int_equal(dg_dma_iova_link(&t.st, 4 * PG + 64, t.mem, 64, DG_DMA_TO_DEVICE, &d2),
			 -EINVAL);
	assert_int_equal(dg_dma_iova_link(&t.st, 4 * PG, t.mem, 64, (enum dg_dma_dir)3, &d2),
			 -EINVAL);
	assert_int_equal(dg_dma_iova_link(&t.st, 4 * PG, t.mem, 0, DG_DMA_TO_DEVICE, &d2), -EINVAL);
	assert_int_equal(dg_dma_iova_link(&t.st, 4 * PG, NULL, 64, DG_DMA_TO_DEVICE, &d2), -EINVAL);
	assert_int_equal(dg_dma_iova_link(&t.st, 4 * PG, t.mem, 64, DG_DMA_TO_DEVICE, NULL),
			 -EINVAL);
	assert_int_equal(dg_dma_iova_link(&t.st, (SLOTS - 1) * PG, t.mem + 100, PG,
					  DG_DMA_TO_DEVICE, &d2),
			 -ERANGE);
	assert_int_equal(dg_dma_iova_link(&t.st, SLOTS * PG, t.mem, 64, DG_DMA_TO_DEVICE, &d2),
			 -ERANGE);
	assert_int_equal(dg_dma_iova_link(NULL, 0, t.mem, 64, DG_DMA_TO_DEVICE, &d2), -EINVAL);
	assert_int_equal(dg_dma_iova_unlink(NULL, 0, 64, DG_DMA_TO_DEVICE, NULL), -EINVAL);
	/* nothing changed: slot 4 is free, slot 5 still linked and reachable */
	reads(&t, 5, dma);
	d2 = link_slot(&t, 4);
	assert_int_equal(b.n, 0u);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	assert_int_equal(dg_dma_dev_stats(t.dd, &s1), 0);
	assert_int_equal(s1.unlinks, s0.unlinks);
	assert_int_equal(s1.links, s0.links + 1);
	reads(&t, 5, dma);
	assert_int_equal(unlink_slot(&t, 5, NULL), 0);
	assert_int_equal(unlink_slot(&t, 4, NULL), 0);
	faults(&t, dma);
	faults(&t, d2);
	teardown(&t);
}

static int fail_pt(void *cookie, enum dg_dma_fail_point point, uint32_t rid)
{
	(void)rid;
	if (point != DG_DMA_FAIL_PT_MAP)
		return 0;
	++*(unsigned int *)cookie;
	return -ENOMEM;
}

/* An injected page-table failure refuses the link with nothing changed. */
static void test_fail_hook(void **state)
{
	unsigned int hits = 0;
	struct dg_dma_fail_hook hook = {fail_pt, &hits};
	uint64_t dma;
	struct t t;

	(void)state;
	setup(&t, DG_DMA_STRICT, false);
	dma = link_slot(&t, 0); /* the slot's table is kept: the fast path applies */
	assert_int_equal(unlink_slot(&t, 0, NULL), 0);
	dg_dma_set_fail_hook(t.f.dma, &hook);
	assert_int_equal(dg_dma_iova_link(&t.st, 0, t.mem + 64, 64, DG_DMA_TO_DEVICE, &dma),
			 -ENOMEM);
	assert_int_equal(dg_dma_iova_link(&t.st, PG, t.mem + 64, 5000, DG_DMA_TO_DEVICE, &dma),
			 -ENOMEM);
	assert_int_equal(hits, 2);
	faults(&t, t.st.addr + 64);
	assert_int_equal(dg_dma_iova_unlink(&t.st, 0, 64, DG_DMA_TO_DEVICE, NULL), -ENOENT);
	dg_dma_set_fail_hook(t.f.dma, NULL);
	dma = link_slot(&t, 0);
	reads(&t, 0, dma);
	assert_int_equal(unlink_slot(&t, 0, NULL), 0);
	teardown(&t);
}

/* A mixed batch: streaming unmaps next to two-step unlinks; neither disturbs the other. */
static void test_mixed_batch(void **state)
{
	uint8_t *buf = page_alloc(4 * PG);
	uint64_t sd[4], ld[4];
	struct dg_dma_batch b;
	struct t t;

	(void)state;
	setup(&t, DG_DMA_STRICT, false);
	for (unsigned int i = 0; i < 4; i++) {
		assert_int_equal(
			dg_dma_map_single(t.dd, buf + i * PG, 512, DG_DMA_TO_DEVICE, 0, &sd[i]), 0);
		ld[i] = link_slot(&t, i);
		reads(&t, i, ld[i]);
	}
	dg_dma_batch_begin(t.dd, &b);
	for (unsigned int i = 0; i < 4; i++) {
		assert_int_equal(dg_dma_unmap_single(t.dd, sd[i], 512, DG_DMA_TO_DEVICE, 0, &b), 0);
		assert_int_equal(unlink_slot(&t, i, &b), 0);
	}
	assert_int_equal(dg_dma_batch_end(&b), 0);
	for (unsigned int i = 0; i < 4; i++) {
		faults(&t, sd[i]);
		faults(&t, ld[i]);
	}
	check_tables(&t);
	for (unsigned int i = 0; i < 4; i++) {
		ld[i] = link_slot(&t, i);
		reads(&t, i, ld[i]);
		assert_int_equal(unlink_slot(&t, i, NULL), 0);
	}
	teardown(&t);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pending),	       cmocka_unit_test(test_scrambled),
		cmocka_unit_test(test_table_boundary), cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_fail_hook),      cmocka_unit_test(test_mixed_batch),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
