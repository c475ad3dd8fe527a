/* SPDX-License-Identifier: MIT */
/*
 * A randomized test of the two-step API (src/dma/iova_link.c) against a model of the slots:
 * thousands of random single and bulk links and unlinks (good ones, and ones a check must
 * refuse: a NULL buffer, an address beyond the output size, a linked or pending slot, a
 * buffer crossing a granule, a wrong length or direction, a run leaving the range), batch
 * ends at random. The model says what every call must return - the exact error, in the order
 * the API checks - and which slots are linked, pending or free afterwards; the device checks
 * the translations: a linked buffer reads back through its DMA address, and a slot whose
 * unlink's batch has ended (or whose failed bulk link was undone) faults, although the device
 * read it through its IOTLB before. It would fail if a fused fast path stored before a check,
 * left part of a refused bulk call behind, returned another error than the first bad
 * buffer's, or let a slot be linked again before its invalidation.
 *
 * Also a directed test of the bulk link's undo: a refused buffer after others were linked
 * leaves none of them linked or reachable, and they can be linked again at once.
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
#include "../../test_rand.h"

static uint64_t PG = 4096; /* the granule of the run */
#define SLOTS 700	   /* crosses a 2 MiB last-level table boundary */
#define STEPS 2500
#define PAGES 64 /* buffer pages */

enum { M_FREE, M_LINKED, M_BUSY, M_PENDING };

struct mslot {
	int state;  /* M_* (M_BUSY: a later granule of a link) */
	size_t len; /* M_LINKED: the link's */
	enum dg_dma_dir dir;
	unsigned int span; /* M_LINKED: granules */
	const uint8_t *buf;
	uint64_t dma;  /* M_LINKED: its address */
	uint64_t last; /* an address of this slot's last link (0: never), for fault checks */
};

struct bulkrec { /* a successful bulk link, for bulk unlinks to pick */
	unsigned int slot, stride, n;
	size_t len;
	enum dg_dma_dir dir;
};

struct m {
	struct dma_fixture f;
	struct dg_dma_dev *dd;
	struct dg_device *dev;
	struct dg_dma_iova_state st;
	struct dg_dma_batch b;
	bool open;
	bool reference;
	uint8_t *mem;
	uint64_t limit; /* output addresses must be below */
	struct mslot s[SLOTS];
	struct bulkrec rec[16];
	unsigned int nrec;
	uint64_t rng;
};

static uint64_t rnd(struct m *m)
{
	return xorshift64(&m->rng);
}

static unsigned int below(struct m *m, unsigned int n)
{
	return (unsigned int)(rnd(m) % n);
}

/* The first output address a device's page table cannot map. */
static uint64_t oa_limit(struct dg_dma_dev *dd)
{
	struct dg_pt_geometry g;

	dg_pt_geometry(dg_domain_pt(dg_dma_dev_domain(dd)), &g);
	return 1ull << g.oas;
}

static void settle_all(struct m *m)
{
	for (unsigned int i = 0; i < SLOTS; i++)
		if (m->s[i].state == M_PENDING)
			m->s[i].state = M_FREE;
}

/* A buffer for a link of @len: usually inside one page of mem at a random offset; @kind 1 a
 * NULL, 2 an address beyond the output size, 3 one crossing a granule. */
static const uint8_t *pick_buf(struct m *m, size_t len, int kind)
{
	uint64_t off;

	if (kind == 1)
		return NULL;
	if (kind == 2)
		return (const uint8_t *)(uintptr_t)(m->limit + below(m, 4) * PG + below(m, 64));
	if (kind == 3 && len > 1 && len <= PG)
		off = PG - len / 2 - 1 + below(m, (unsigned int)(len / 2) + 1);
	else
		off = len <= PG ? below(m, (unsigned int)(PG - len + 1)) : below(m, 64);
	return m->mem + below(m, PAGES - 4) * PG + off;
}

static unsigned int span_of(const uint8_t *buf, size_t len)
{
	uint64_t off = (uintptr_t)buf & (PG - 1);

	return (unsigned int)((off + len + PG - 1) / PG);
}

static bool span_free(struct m *m, unsigned int slot, unsigned int span)
{
	for (unsigned int j = 0; j < span; j++)
		if (m->s[slot + j].state != M_FREE)
			return false;
	return true;
}

static bool beyond(struct m *m, const uint8_t *buf)
{
	return (uintptr_t)buf >= m->limit;
}

static void model_link(struct m *m, unsigned int slot, const uint8_t *buf, size_t len,
		       enum dg_dma_dir dir, uint64_t dma)
{
	unsigned int span = span_of(buf, len);

	m->s[slot] = (struct mslot){.state = M_LINKED,
				    .len = len,
				    .dir = dir,
				    .span = span,
				    .buf = buf,
				    .dma = dma,
				    .last = dma};
	for (unsigned int j = 1; j < span; j++) {
		m->s[slot + j].state = M_BUSY;
		m->s[slot + j].last = m->st.addr + (uint64_t)(slot + j) * PG;
	}
}

/* The unlink of the link at @slot: pending with a batch, free without. */
static void model_unlink(struct m *m, unsigned int slot, bool batch)
{
	for (unsigned int j = 0; j < m->s[slot].span; j++)
		m->s[slot + j].state = batch ? M_PENDING : M_FREE;
}

/* Every translated policy's single link, in the order the API checks. */
static int expect_link(struct m *m, unsigned int slot, const uint8_t *buf, size_t len)
{
	unsigned int span;

	if (!buf)
		return -EINVAL;
	span = span_of(buf, len);
	if (slot + span > SLOTS)
		return -ERANGE;
	if (!span_free(m, slot, span))
		return -EEXIST;
	if (beyond(m, buf))
		return -ERANGE;
	return 0;
}

static void step_link(struct m *m)
{
	const unsigned int slot = below(m, SLOTS);
	const size_t len = below(m, 4) ? 1 + below(m, (unsigned int)PG) :
					 1 + below(m, (unsigned int)(3 * PG));
	const int kind = below(m, 20) == 0 ? 1 + below(m, 3) : 0;
	const uint8_t *buf = pick_buf(m, len, kind);
	const enum dg_dma_dir dir = (enum dg_dma_dir)below(m, 3);
	int want = expect_link(m, slot, buf, len);
	uint64_t dma = 0;

	assert_int_equal(dg_dma_iova_link(&m->st, slot * PG, buf, len, dir, &dma), want);
	if (!want) {
		assert_int_equal(dma, m->st.addr + slot * PG + ((uintptr_t)buf & (PG - 1)));
		model_link(m, slot, buf, len, dir, dma);
	}
}

/* The bulk link's answer: the short way (one-granule buffers) checks buffer by buffer until a
 * buffer crosses a granule; then, or for longer buffers, the general way checks everything
 * and links one by one. */
static int expect_link_bulk(struct m *m, unsigned int slot, unsigned int stride,
			    const uint8_t *const *bufs, unsigned int n, size_t len)
{
	if (!n || slot + (uint64_t)(n - 1) * stride >= SLOTS)
		return n ? -ERANGE : -EINVAL;
	if (len <= PG && !m->reference) {
		for (unsigned int i = 0; i < n; i++) {
			if (!bufs[i])
				return -EINVAL;
			if (span_of(bufs[i], len) > 1)
				goto general;
			if (beyond(m, bufs[i]))
				return -ERANGE;
			if (m->s[slot + i * stride].state != M_FREE)
				return -EEXIST;
		}
		return 0;
	}
general:
	for (unsigned int i = 0; i < n; i++) {
		const unsigned int at = slot + i * stride;

		if (!bufs[i])
			return -EINVAL;
		if (span_of(bufs[i], len) > stride)
			return -EINVAL;
		if (at + span_of(bufs[i], len) > SLOTS)
			return -ERANGE;
		if (!span_free(m, at, span_of(bufs[i], len)))
			return -EEXIST;
	}
	for (unsigned int i = 0; i < n; i++)
		if (beyond(m, bufs[i]))
			return -ERANGE;
	return 0;
}

static void step_link_bulk(struct m *m)
{
	const uint8_t *bufs[48];
	uint64_t dma[48];
	unsigned int n = 1 + below(m, below(m, 4) ? 24 : 48);
	const unsigned int stride = below(m, 4) ? 1 : 1 + below(m, 3);
	const size_t len = below(m, 8) ? 1 + below(m, (unsigned int)PG) :
					 1 + below(m, (unsigned int)(2 * PG));
	const unsigned int strd = len > PG && stride < 2 ? 2 : stride;
	const enum dg_dma_dir dir = (enum dg_dma_dir)below(m, 3);
	unsigned int slot = below(m, SLOTS);
	int want;

	if (below(m, 4)) /* mostly a free run, so that most calls succeed */
		for (unsigned int tries = 0; tries < 32; tries++) {
			bool ok = slot + (n - 1) * strd + 2 < SLOTS;

			for (unsigned int i = 0; ok && i < n; i++)
				ok = span_free(m, slot + i * strd, len > PG ? 2 : 1);
			if (ok)
				break;
			slot = below(m, SLOTS);
		}
	else if (below(m, 2)) /* over a pending slot (an unlink whose batch is open) */
		for (unsigned int tries = 0; tries < 64; tries++) {
			const unsigned int at = below(m, SLOTS);

			if (m->s[at].state == M_PENDING) {
				slot = at > 2 ? at - below(m, 3) : at;
				n = 1 + below(m, 4);
				break;
			}
		}
	for (unsigned int i = 0; i < n; i++)
		bufs[i] = pick_buf(m, len, below(m, 40) == 0 ? 1 + below(m, 3) : 0);
	want = expect_link_bulk(m, slot, strd, bufs, n, len);
	assert_int_equal(dg_dma_iova_link_bulk(&m->st, slot * PG, strd * PG, (void *const *)bufs, n,
					       len, dir, dma),
			 want);
	if (want)
		return;
	for (unsigned int i = 0; i < n; i++) {
		assert_int_equal(dma[i], m->st.addr + (slot + i * strd) * PG +
						 ((uintptr_t)bufs[i] & (PG - 1)));
		model_link(m, slot + i * strd, bufs[i], len, dir, dma[i]);
	}
	m->rec[m->nrec++ % 16] =
		(struct bulkrec){.slot = slot, .stride = strd, .n = n, .len = len, .dir = dir};
}

/* The unlink answer at @slot: -ENOENT unless a link starts there, -EINVAL if @len or @dir
 * differ from it. */
static int expect_unlink(struct m *m, unsigned int slot, size_t len, enum dg_dma_dir dir)
{
	if (m->s[slot].state != M_LINKED)
		return -ENOENT;
	if (m->s[slot].len != len || m->s[slot].dir != dir)
		return -EINVAL;
	return 0;
}

/* Run @op's unlinks; a batch that flushed early (it lacked room) settled what was pending
 * before (flushes moved). */
static void batch_flushed(struct m *m, uint32_t before)
{
	if (m->open && m->b.flushes != before)
		settle_all(m);
}

static void step_unlink(struct m *m)
{
	unsigned int slot = below(m, SLOTS);
	size_t len;
	enum dg_dma_dir dir;
	uint32_t fl;
	int want;

	for (unsigned int tries = 0; tries < 16 && m->s[slot].state != M_LINKED; tries++)
		slot = below(m, SLOTS);
	len = m->s[slot].state == M_LINKED ? m->s[slot].len : 1 + below(m, (unsigned int)PG);
	dir = m->s[slot].state == M_LINKED ? m->s[slot].dir : (enum dg_dma_dir)below(m, 3);
	if (below(m, 16) == 0)
		len += 1;
	if (below(m, 16) == 0)
		dir = (enum dg_dma_dir)((dir + 1) % 3);
	if (!m->open && below(m, 4)) {
		dg_dma_batch_begin(m->dd, &m->b);
		m->open = true;
	}
	want = expect_unlink(m, slot, len, dir);
	fl = m->b.flushes;
	assert_int_equal(dg_dma_iova_unlink(&m->st, slot * PG, len, dir, m->open ? &m->b : NULL),
			 want);
	batch_flushed(m, fl);
	if (!want)
		model_unlink(m, slot, m->open && !m->reference);
}

static void step_unlink_bulk(struct m *m)
{
	struct bulkrec r;
	uint32_t fl;
	int want = 0;

	if (!m->nrec)
		return;
	r = m->rec[below(m, m->nrec < 16 ? m->nrec : 16)];
	if (below(m, 2)) { /* the adjacent links like the one at a random linked slot */
		r.slot = below(m, SLOTS);
		for (unsigned int tries = 0; tries < 16 && m->s[r.slot].state != M_LINKED; tries++)
			r.slot = below(m, SLOTS);
		if (m->s[r.slot].state != M_LINKED)
			return;
		r.len = m->s[r.slot].len;
		r.dir = m->s[r.slot].dir;
		r.stride = m->s[r.slot].span ? m->s[r.slot].span : 1;
		for (r.n = 1; r.slot + r.n * r.stride < SLOTS && r.n < 64; r.n++) {
			const struct mslot *x = &m->s[r.slot + r.n * r.stride];

			if (x->state != M_LINKED || x->len != r.len || x->dir != r.dir)
				break;
		}
	}
	if (below(m, 3) == 0) { /* a part of it */
		unsigned int k = below(m, r.n);

		r.slot += k * r.stride;
		r.n = 1 + below(m, r.n - k);
	}
	if (below(m, 12) == 0)
		r.n++;
	if (below(m, 12) == 0)
		r.len++;
	if (below(m, 12) == 0)
		r.dir = (enum dg_dma_dir)((r.dir + 1) % 3);
	if (r.slot + (uint64_t)(r.n - 1) * r.stride >= SLOTS)
		want = -ERANGE;
	for (unsigned int i = 0; !want && i < r.n; i++)
		want = expect_unlink(m, r.slot + i * r.stride, r.len, r.dir);
	if (!m->open && below(m, 4)) {
		dg_dma_batch_begin(m->dd, &m->b);
		m->open = true;
	}
	fl = m->b.flushes;
	assert_int_equal(dg_dma_iova_unlink_bulk(&m->st, r.slot * PG, r.stride * PG, r.n, r.len,
						 r.dir, m->open ? &m->b : NULL),
			 want);
	batch_flushed(m, fl);
	for (unsigned int i = 0; !want && i < r.n; i++)
		model_unlink(m, r.slot + i * r.stride, m->open && !m->reference);
}

static void step_end(struct m *m)
{
	if (!m->open)
		return;
	assert_int_equal(dg_dma_batch_end(&m->b), 0);
	m->open = false;
	settle_all(m);
}

/* The device against the model at a few slots: a link reads back (first and last byte); a
 * free slot it reached before faults. */
static void step_device(struct m *m)
{
	for (unsigned int k = 0; k < 6; k++) {
		const unsigned int i = below(m, SLOTS);
		const struct mslot *x = &m->s[i];
		uint8_t got[8];

		if (x->state == M_LINKED && x->dir == DG_DMA_FROM_DEVICE) { /* writes back */
			assert_int_equal(dg_dev_write(m->dev, x->dma, x->buf, 1), 0);
			assert_int_equal(dg_dev_write(m->dev, x->dma + x->len - 1,
						      x->buf + x->len - 1, 1),
					 0);
		} else if (x->state == M_LINKED) {
			const size_t n = x->len < sizeof(got) ? x->len : sizeof(got);

			assert_int_equal(dg_dev_read(m->dev, x->dma, got, n), 0);
			assert_memory_equal(got, x->buf, n);
			assert_int_equal(dg_dev_read(m->dev, x->dma + x->len - 1, got, 1), 0);
			assert_int_equal(got[0], x->buf[x->len - 1]);
		} else if (x->state == M_FREE && x->last) {
			assert_int_equal(dg_dev_read(m->dev, x->last, got, 1), -EFAULT);
		}
	}
	fixture_faults(&m->f);
}

/* One run of @seed under @p, on the page table @geo describes (NULL: the default, VT-d 4K). */
static void run_model(enum dg_dma_policy p, bool reference, uint64_t seed,
		      const struct dg_pt_geometry *geo)
{
	struct m *m = calloc(1, sizeof(*m));
	struct dg_dma_dev_config c;
	struct dma_links *l;

	assert_non_null(m);
	m->rng = seed;
	m->reference = reference;
	assert_int_equal(fixture_init(&m->f, false, 0), 0);
	dg_dma_dev_config_init(&c);
	c.policy = p;
	if (reference)
		c.flags = DG_DMA_DEV_LINUX_REFERENCE;
	if (geo)
		c.geo = *geo;
	m->dd = fixture_dev(&m->f, 1, p, &c, &m->dev);
	assert_non_null(m->dd);
	dg_dev_set_auto_offline(m->dev, true);
	PG = geo && geo->granule ? geo->granule : 4096;
	assert_int_equal(dg_dma_iova_alloc(m->dd, SLOTS * PG, &m->st), 0);
	assert_int_equal(m->st.granule, PG);
	l = m->st.links;
	assert_non_null(l);
	assert_true(reference == !l->slots);
	m->limit = oa_limit(m->dd);
	assert_true(m->limit > (1ull << 32) && m->limit < (1ull << 62));
	m->mem = aligned_alloc(PG, PAGES * PG); /* granule aligned */
	assert_non_null(m->mem);
	for (unsigned int i = 0; i < PAGES * PG; i++)
		m->mem[i] = (uint8_t)(i * 7 + i / PG);
	for (unsigned int step = 0; step < STEPS; step++) {
		unsigned int used = 0, op = below(m, 10);

		for (unsigned int i = 0; i < SLOTS; i++)
			used += m->s[i].state != M_FREE;
		if (used > SLOTS / 4 && op < 4) /* keep room: mostly unlinks then */
			op += 4;
		switch (op) {
		case 0:
		case 1:
			step_link(m);
			break;
		case 2:
		case 3:
			step_link_bulk(m);
			break;
		case 4:
		case 5:
			step_unlink(m);
			break;
		case 6:
		case 7:
			step_unlink_bulk(m);
			break;
		case 8:
			step_end(m);
			break;
		default:
			step_device(m);
			break;
		}
	}
	step_end(m);
	for (unsigned int i = 0; i < SLOTS; i++) { /* the device faults on every slot now */
		if (m->s[i].state == M_LINKED)
			assert_int_equal(dg_dma_iova_unlink(&m->st, i * PG, m->s[i].len,
							    m->s[i].dir, NULL),
					 0);
		if (m->s[i].state == M_LINKED)
			model_unlink(m, i, false);
	}
	for (unsigned int i = 0; i < SLOTS; i++) {
		uint8_t got;

		assert_int_equal(m->s[i].state, M_FREE);
		if (m->s[i].last)
			assert_int_equal(dg_dev_read(m->dev, m->s[i].last, &got, 1), -EFAULT);
	}
	fixture_faults(&m->f);
	if (l->slots)
		assert_int_equal(pt_slots_check(l->slots, stderr), 0);
	assert_int_equal(dg_pt_check(dg_domain_pt(dg_dma_dev_domain(m->dd)), stderr), 0);
	assert_int_equal(dg_dma_iova_free(&m->st), 0);
	assert_int_equal(fixture_end(&m->f, m->dd), 0);
	free(m->mem);
	free(m);
}

static void test_model_strict(void **state)
{
	(void)state;
	run_model(DG_DMA_STRICT, false, 0x9e3779b97f4a7c15ull, NULL);
	run_model(DG_DMA_STRICT, false, 0x2545f4914f6cdd1dull, NULL);
}

/* ARM LPAE: 4K and 48 bits (the ring loop), 64K and 52 bits (PA[51:48] in the leaf: the
 * general loop for every stride). */
static void test_model_lpae(void **state)
{
	const struct dg_pt_geometry g4 = {.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 48};
	const struct dg_pt_geometry g64 = {
		.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 52, .granule = 65536};

	(void)state;
	run_model(DG_DMA_STRICT, false, 0x5851f42d4c957f2dull, &g4);
	run_model(DG_DMA_STRICT, false, 0x14057b7ef767814full, &g64);
	PG = 4096;
}

static void test_model_lazy(void **state)
{
	(void)state;
	run_model(DG_DMA_LAZY, false, 0xd1b54a32d192ed03ull, NULL);
}

static void test_model_reference(void **state)
{
	(void)state;
	run_model(DG_DMA_STRICT, true, 0x8cb92ba72f3d8dd7ull, NULL);
}

/* A bulk link refused at buffer k after k buffers were linked undoes them: none reachable,
 * all linkable again at once, the counters unchanged. */
static void test_bulk_undo(void **state)
{
	struct dma_fixture f;
	struct dg_dma_iova_state st;
	struct dg_dma_stats s0, s1;
	struct dg_iommu_stats i0, i1;
	struct dg_device *dev = NULL;
	struct dg_dma_dev *dd;
	void *bufs[64];
	uint64_t dma[64], one;
	uint8_t *mem = page_alloc(64 * PG), got;

	(void)state;
	assert_non_null(mem);
	assert_int_equal(fixture_init(&f, false, 0), 0);
	dd = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, &dev);
	assert_non_null(dd);
	assert_int_equal(dg_dma_iova_alloc(dd, 1024 * PG, &st), 0);
	for (unsigned int i = 0; i < 64; i++)
		bufs[i] = mem + i * PG + 16;
	/* slot 40 linked: a run over it is refused at buffer 40 with -EEXIST */
	assert_int_equal(dg_dma_iova_link(&st, 40 * PG, mem, 64, DG_DMA_TO_DEVICE, &one), 0);
	for (int round = 0; round < 3; round++) {
		void *saved = bufs[30];
		int want = round == 0 ? -EEXIST : round == 1 ? -EINVAL : -ERANGE;

		if (round == 1)
			bufs[30] = NULL;
		if (round == 2)
			bufs[30] = (void *)(uintptr_t)oa_limit(dd);
		assert_int_equal(dg_dma_dev_stats(dd, &s0), 0);
		dg_iommu_stats(f.mmu, &i0);
		assert_int_equal(dg_dma_iova_link_bulk(&st, 0, PG, bufs, 64, 100, DG_DMA_TO_DEVICE,
						       dma),
				 want);
		dg_iommu_stats(f.mmu, &i1);
		/* the 30 links made were invalidated, with a wait, before the answer */
		assert_true(i1.submits > i0.submits);
		assert_true(i1.waits > i0.waits);
		assert_int_equal(dg_dma_dev_stats(dd, &s1), 0);
		assert_int_equal(s1.links, s0.links);
		assert_int_equal(s1.unlinks, s0.unlinks);
		bufs[30] = saved;
		for (unsigned int i = 0; i < 64; i++)
			if (i != 40)
				assert_int_equal(dg_dev_read(dev, st.addr + i * PG + 16, &got, 1),
						 -EFAULT);
		fixture_faults(&f);
	}
	/* refused at the first buffer: nothing to undo, no invalidation */
	dg_iommu_stats(f.mmu, &i0);
	assert_int_equal(dg_dma_iova_link_bulk(&st, 40 * PG, PG, bufs, 8, 100, DG_DMA_TO_DEVICE,
					       dma),
			 -EEXIST);
	dg_iommu_stats(f.mmu, &i1);
	assert_int_equal(i1.submits, i0.submits);
	assert_int_equal(dg_dma_iova_unlink(&st, 40 * PG, 64, DG_DMA_TO_DEVICE, NULL), 0);
	assert_int_equal(dg_dma_iova_link_bulk(&st, 0, PG, bufs, 64, 100, DG_DMA_TO_DEVICE, dma),
			 0);
	for (unsigned int i = 0; i < 64; i++) {
		assert_int_equal(dma[i], st.addr + i * PG + 16);
		assert_int_equal(dg_dev_read(dev, dma[i], &got, 1), 0);
		assert_int_equal(got, mem[i * PG + 16]);
	}
	assert_int_equal(dg_dma_iova_unlink_bulk(&st, 0, PG, 64, 100, DG_DMA_TO_DEVICE, NULL), 0);
	for (unsigned int i = 0; i < 64; i++)
		assert_int_equal(dg_dev_read(dev, dma[i], &got, 1), -EFAULT);
	fixture_faults(&f);
	assert_int_equal(dg_dma_iova_free(&st), 0);
	assert_int_equal(fixture_end(&f, dd), 0);
	free(mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model_strict), cmocka_unit_test(test_model_lazy),
		cmocka_unit_test(test_model_lpae),   cmocka_unit_test(test_model_reference),
		cmocka_unit_test(test_bulk_undo),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
