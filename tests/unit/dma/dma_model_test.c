/* SPDX-License-Identifier: MIT */
/*
 * Randomized driver-like sequences against a reference model of what the device may reach,
 * for every policy (and window with a direct region, pool with a pool).
 *
 * The driver maps buffers (single, page, scatter-gather; random offsets, lengths and
 * directions) out of an arena whose every byte outside a live buffer holds a SECRET pattern,
 * lets the device read and write them, syncs, unmaps (alone or in batches), and probes
 * addresses that were unmapped. After every step the device's view is checked against the
 * model:
 *
 *  - live mappings: every byte of the buffer is readable (to-device, bidirectional) with the
 *    driver's data, writes land (from-device, bidirectional), and the access the direction
 *    forbids is refused;
 *  - translated policies keep a page map IOVA page -> host page of every live mapping: a read
 *    of any IOVA page must return exactly the host page it maps (sub-page exposure is what
 *    strict gives up), a page in no live mapping must fault - except, under lazy, pages
 *    unmapped since the last flush point (the window), which may still read the old page;
 *  - permanently mapped regions (pools, a window's direct region) always read host memory;
 *  - bounce: no read anywhere ever returns the SECRET pattern (the device never reaches the
 *    driver's memory, only shadow slots);
 *  - dg_dma_dev_check() holds every few steps, and the counters match the model at the end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dma_test_util.h"

#include <stdio.h>
#include "../../test_rand.h"

#define SLOTS	   40
#define SLOT_PAGES 4
#define PG	   4096u
#define SECRET	   0x5ec2e7d00dfeed5aull
#define MAX_ENTS   3

struct m_map {
	bool live;
	bool sg;
	bool page_api;
	enum dg_dma_dir dir;
	unsigned int nents, nr;
	struct dg_dma_sg ent[MAX_ENTS];
	uint64_t dma;		    /* single */
	void *pool_buf;		    /* a pool buffer instead of arena memory */
	uint64_t dma_ent[MAX_ENTS]; /* DMA address of each entry's first byte */
};

struct m_page {
	uint64_t iova; /* page */
	uintptr_t host;
	unsigned int prot;
};

struct model {
	struct dma_fixture f;
	struct dg_dma_dev *dd;
	struct dg_device *dev;
	enum dg_dma_policy policy;
	bool translated; /* per-mapping page tables (strict, lazy, window, pool fallbacks) */
	uint8_t *arena;
	struct m_map map[SLOTS];
	struct m_page stale[4096]; /* lazy: unmapped since the last flush point */
	unsigned int nstale;
	uint64_t probes[64]; /* addresses once mapped */
	unsigned int nprobes;
	uintptr_t perm_host[2]; /* permanently mapped regions */
	uint64_t perm_dma[2], perm_len[2];
	unsigned int nperm;
	struct dg_dma_pool *pool;
	uint64_t rng;
	uint64_t maps, unmaps;
	struct dg_dma_batch batch;
	bool in_batch;
};

static uint64_t rnd(struct model *m)
{
	return xorshift64(&m->rng);
}

static unsigned int rn(struct model *m, unsigned int n)
{
	return (unsigned int)(rnd(m) % n);
}

static void fill_secret(uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(SECRET >> (8 * (((uintptr_t)p + i) & 7)));
}

static bool has_secret(const uint8_t *p, size_t len, uint64_t dma)
{
	/* eight SECRET bytes in a row at their aligned positions */
	for (size_t i = 0; i + 8 <= len; i++) {
		if (((dma + i) & 7) != 0)
			continue;
		uint64_t v;

		memcpy(&v, p + i, 8);
		if (v == SECRET)
			return true;
	}
	return false;
}

static uint8_t *slot_mem(struct model *m, unsigned int s)
{
	return m->arena + (size_t)s * SLOT_PAGES * PG;
}

static unsigned int dir_prot(enum dg_dma_dir d)
{
	return d == DG_DMA_TO_DEVICE ? DG_PROT_READ : d == DG_DMA_FROM_DEVICE ? DG_PROT_WRITE : 3;
}

/* ---- expectations -------------------------------------------------------------------------- */

enum expect { E_FAULT, E_MAYBE, E_OK };

/* What a read of [dma, dma + len) (inside one page) must do; *host: where it lands. */
static enum expect expect_at(struct model *m, uint64_t dma, uintptr_t *host, unsigned int *prot)
{
	uint64_t pg = dma & ~(uint64_t)(PG - 1);

	for (unsigned int i = 0; i < m->nperm; i++)
		if (dma >= m->perm_dma[i] && dma - m->perm_dma[i] < m->perm_len[i]) {
			*host = m->perm_host[i] + (dma - m->perm_dma[i]);
			*prot = 3;
			return E_OK;
		}
	for (unsigned int s = 0; s < SLOTS; s++) {
		struct m_map *mm = &m->map[s];

		if (!mm->live)
			continue;
		for (unsigned int e = 0; e < mm->nents; e++) {
			uint64_t first = mm->dma_ent[e] & ~(uint64_t)(PG - 1);
			uint64_t last = (mm->dma_ent[e] + mm->ent[e].len - 1) & ~(uint64_t)(PG - 1);

			if (pg >= first && pg <= last) {
				*host = ((uintptr_t)mm->ent[e].addr & ~(uintptr_t)(PG - 1)) +
					(dma - first);
				*prot = dir_prot(mm->dir);
				return E_OK;
			}
		}
	}
	for (unsigned int i = 0; i < m->nstale; i++)
		if (m->stale[i].iova == pg) {
			*host = m->stale[i].host + (dma - pg);
			*prot = m->stale[i].prot;
			return E_MAYBE;
		}
	return E_FAULT;
}

/* Read @len bytes at @dma (one page) and check it against the model. */
static void probe(struct model *m, uint64_t dma, size_t len)
{
	uint8_t got[PG];
	uintptr_t host = 0;
	unsigned int prot = 0;
	int r = dg_dev_read(m->dev, dma, got, len);

	if (m->policy == DG_DMA_IDENTITY)
		return;
	if (m->policy == DG_DMA_BOUNCE) {
		if (!r)
			assert_false(has_secret(got, len, dma));
		return;
	}
	switch (expect_at(m, dma, &host, &prot)) {
	case E_OK:
		if (prot & DG_PROT_READ) {
			assert_int_equal(r, 0);
			assert_memory_equal(got, (void *)host, len);
		} else {
			assert_int_equal(r, -EACCES);
		}
		break;
	case E_MAYBE:
		if (!r)
			assert_memory_equal(got, (void *)host, len);
		else
			assert_true(r == -EFAULT || r == -EACCES);
		break;
	case E_FAULT:
		if (r != -EFAULT && r != -ERANGE) {
			fprintf(stderr, "policy %s: read of %#llx returned %d, model says fault\n",
				dg_dma_policy_name(m->policy), (unsigned long long)dma, r);
			fail();
		}
		break;
	}
}

/* Does [dma, dma + 1) lie in a permanently mapped region (pool, window direct part)? */
static bool in_perm(struct model *m, uint64_t dma)
{
	for (unsigned int i = 0; i < m->nperm; i++)
		if (dma >= m->perm_dma[i] && dma - m->perm_dma[i] < m->perm_len[i])
			return true;
	return false;
}

/* ---- driver operations ------------------------------------------------------------------------ */

/* Compute each entry's DMA address from the DMA segments (entries are contiguous in IOVA). */
static void entry_addrs(struct m_map *mm)
{
	uint64_t off = 0;

	for (unsigned int e = 0; e < mm->nents; e++) {
		uint64_t seg_off = 0;

		for (unsigned int k = 0; k < mm->nr; k++) {
			if (off < seg_off + mm->ent[k].dma_len) {
				mm->dma_ent[e] = mm->ent[k].dma_addr + (off - seg_off);
				break;
			}
			seg_off += mm->ent[k].dma_len;
		}
		off += mm->ent[e].len;
	}
}

static void op_map(struct model *m, unsigned int s)
{
	struct m_map *mm = &m->map[s];
	uint8_t *base = slot_mem(m, s);
	int r;

	memset(mm, 0, sizeof(*mm));
	fill_secret(base, SLOT_PAGES * PG);
	mm->dir = (enum dg_dma_dir)rn(m, 3);
	mm->sg = rn(m, 4) == 0;
	if (mm->sg) {
		mm->nents = 1 + rn(m, MAX_ENTS);
		for (unsigned int e = 0; e < mm->nents; e++) {
			/* entry e lives in page e (+ maybe the next), random offset and length */
			unsigned int off = rn(m, 3) ? rn(m, PG) : 0;
			unsigned int len = 1 + rn(m, PG - off + (e + 1 == mm->nents ? PG : 0));

			mm->ent[e].addr = base + e * PG + off;
			mm->ent[e].len = len;
		}
	} else {
		unsigned int off = rn(m, PG), len = 1 + rn(m, 2 * PG);

		mm->nents = 1;
		mm->page_api = rn(m, 2);
		mm->ent[0].addr = base + off;
		mm->ent[0].len = len;
	}
	for (unsigned int e = 0; e < mm->nents; e++)
		for (size_t k = 0; k < mm->ent[e].len; k++)
			((uint8_t *)mm->ent[e].addr)[k] = (uint8_t)rnd(m);
	if (m->policy == DG_DMA_POOL && m->pool && rn(m, 3) == 0 && !mm->sg) {
		/* a pool buffer instead of arena memory: always reachable */
		void *pb;
		uint64_t pd;

		if (!dg_dma_pool_get(m->pool, &pb, &pd)) {
			memcpy(pb, mm->ent[0].addr, mm->ent[0].len > 2048 ? 2048 : mm->ent[0].len);
			fill_secret(base, SLOT_PAGES * PG);
			mm->ent[0].addr = pb;
			if (mm->ent[0].len > 2048)
				mm->ent[0].len = 2048;
			mm->page_api = false;
			mm->pool_buf = pb;
		}
	}
	if (mm->sg) {
		r = dg_dma_map_sg(m->dd, mm->ent, mm->nents, mm->dir, 0, &mm->nr);
		if (!r)
			entry_addrs(mm);
	} else if (mm->page_api) {
		uintptr_t a = (uintptr_t)mm->ent[0].addr;

		r = dg_dma_map_page(m->dd, (void *)(a & ~(uintptr_t)(PG - 1)), a & (PG - 1),
				    mm->ent[0].len, mm->dir, 0, &mm->dma);
	} else {
		r = dg_dma_map_single(m->dd, mm->ent[0].addr, mm->ent[0].len, mm->dir, 0, &mm->dma);
	}
	assert_int_equal(r, 0);
	if (!mm->sg)
		mm->dma_ent[0] = mm->dma;
	mm->live = true;
	m->maps++;
	if (m->nprobes < 64)
		m->probes[m->nprobes++] = mm->dma_ent[0];
	else
		m->probes[rn(m, 64)] = mm->dma_ent[0];
}

static void op_unmap(struct model *m, unsigned int s)
{
	struct m_map *mm = &m->map[s];
	struct dg_dma_batch *b = m->in_batch ? &m->batch : NULL;
	bool tracked = (m->translated || m->policy == DG_DMA_BOUNCE) && !in_perm(m, mm->dma_ent[0]);
	int r;

	/* a wrong call first: nothing may change */
	if (tracked) {
		if (mm->sg)
			r = dg_dma_unmap_sg(m->dd, mm->ent, mm->nents,
					    (enum dg_dma_dir)((mm->dir + 1) % 3), 0, b);
		else
			r = dg_dma_unmap_single(m->dd, mm->dma, mm->ent[0].len + 1, mm->dir, 0, b);
		assert_int_equal(r, -EINVAL);
	}
	if (mm->sg)
		r = dg_dma_unmap_sg(m->dd, mm->ent, mm->nents, mm->dir, 0, b);
	else if (mm->page_api)
		r = dg_dma_unmap_page(m->dd, mm->dma, mm->ent[0].len, mm->dir, 0, b);
	else
		r = dg_dma_unmap_single(m->dd, mm->dma, mm->ent[0].len, mm->dir, 0, b);
	assert_int_equal(r, 0);
	mm->live = false;
	m->unmaps++;
	if (m->policy == DG_DMA_LAZY || b) { /* pages still reachable until the flush point */
		for (unsigned int e = 0; e < mm->nents; e++) {
			uint64_t first = mm->dma_ent[e] & ~(uint64_t)(PG - 1);
			uint64_t last = (mm->dma_ent[e] + mm->ent[e].len - 1) & ~(uint64_t)(PG - 1);

			for (uint64_t p = first; p <= last && m->nstale < 4096; p += PG)
				m->stale[m->nstale++] = (struct m_page){
					p,
					((uintptr_t)mm->ent[e].addr & ~(uintptr_t)(PG - 1)) +
						(p - first),
					dir_prot(mm->dir)};
		}
	}
	if (mm->pool_buf)
		assert_int_equal(dg_dma_pool_put(m->pool, mm->pool_buf), 0);
	fill_secret(slot_mem(m, s), SLOT_PAGES * PG);
	/* the double unmap is refused */
	if (tracked) {
		if (mm->sg)
			r = dg_dma_unmap_sg(m->dd, mm->ent, mm->nents, mm->dir, 0, b);
		else if (mm->page_api)
			r = dg_dma_unmap_page(m->dd, mm->dma, mm->ent[0].len, mm->dir, 0, b);
		else
			r = dg_dma_unmap_single(m->dd, mm->dma, mm->ent[0].len, mm->dir, 0, b);
		assert_int_equal(r, -ENOENT);
	}
}

/* The device uses a live mapping as its direction allows. */
static void op_device(struct model *m, unsigned int s)
{
	struct m_map *mm = &m->map[s];
	unsigned int e = rn(m, mm->nents);
	size_t off = rn(m, (unsigned int)mm->ent[e].len), len;
	uint64_t dma = mm->dma_ent[e] + off;
	uint8_t data[PG], got[PG];
	int r;

	len = 1 + rn(m, (unsigned int)(mm->ent[e].len - off));
	if (len > PG - (dma & (PG - 1)))
		len = PG - (dma & (PG - 1)); /* stay in one page */
	if (mm->dir != DG_DMA_FROM_DEVICE) {
		r = dg_dev_read(m->dev, dma, got, len);
		assert_int_equal(r, 0);
		assert_memory_equal(got, (uint8_t *)mm->ent[e].addr + off, len);
	} else if (m->policy != DG_DMA_IDENTITY && !in_perm(m, dma)) {
		assert_int_equal(dg_dev_read(m->dev, dma, got, len), -EACCES);
	}
	if (mm->dir != DG_DMA_TO_DEVICE) {
		for (size_t k = 0; k < len; k++)
			data[k] = (uint8_t)rnd(m);
		assert_int_equal(dg_dev_write(m->dev, dma, data, len), 0);
		if (m->policy == DG_DMA_BOUNCE) /* visible after sync_for_cpu */
			assert_int_equal(dg_dma_sync_for_cpu(m->dd, dma, len, mm->dir), 0);
		assert_memory_equal((uint8_t *)mm->ent[e].addr + off, data, len);
	} else if (m->policy != DG_DMA_IDENTITY && !in_perm(m, dma)) {
		assert_int_equal(dg_dev_write(m->dev, dma, data, 1), -EACCES);
	}
}

static void flush_point(struct model *m)
{
	if (m->in_batch) {
		assert_int_equal(dg_dma_batch_end(&m->batch), 0);
		m->in_batch = false;
	}
	fixture_advance(&m->f, 20000000);
	dg_dma_housekeep(m->f.dma);
	dg_dma_housekeep(m->f.dma);
	m->nstale = 0;
}

static void run_model(enum dg_dma_policy policy, int variant, uint64_t seed, unsigned int steps)
{
	struct dg_dma_dev_config c;
	struct model *m = calloc(1, sizeof(*m));
	uint8_t *direct = NULL;

	m->policy = policy;
	m->rng = seed;
	m->arena = page_alloc((size_t)SLOTS * SLOT_PAGES * PG);
	fill_secret(m->arena, (size_t)SLOTS * SLOT_PAGES * PG);
	assert_int_equal(fixture_init(&m->f, false, 0), 0);
	dg_dma_dev_config_init(&c);
	c.policy = policy;
	c.lazy.queue_size = 32;
	if (policy == DG_DMA_WINDOW && variant) {
		/* the first half of the arena is the direct region */
		direct = m->arena;
		c.window.direct = direct;
		c.window.direct_size = (size_t)SLOTS / 2 * SLOT_PAGES * PG;
		m->perm_host[0] = (uintptr_t)direct;
		m->perm_dma[0] = c.window.base;
		m->perm_len[0] = c.window.direct_size;
		m->nperm = 1;
	}
	m->dd = fixture_dev(&m->f, 1, policy, &c, &m->dev);
	assert_non_null(m->dd);
	dg_dev_set_auto_offline(m->dev, true);
	m->translated = policy == DG_DMA_STRICT || policy == DG_DMA_LAZY ||
			policy == DG_DMA_WINDOW || policy == DG_DMA_POOL;
	if (policy == DG_DMA_POOL && variant) {
		void *b;
		uint64_t d;

		m->pool = dg_dma_pool_create(m->dd, 2048, 16, DG_DMA_BIDIRECTIONAL, 0);
		assert_non_null(m->pool);
		assert_int_equal(dg_dma_pool_get(m->pool, &b, &d), 0);
		m->perm_host[0] = (uintptr_t)b;
		m->perm_dma[0] = d;
		m->perm_len[0] = 16 * 2048;
		m->nperm = 1;
		assert_int_equal(dg_dma_pool_put(m->pool, b), 0);
	}
	for (unsigned int step = 0; step < steps; step++) {
		unsigned int s = rn(m, SLOTS), op = rn(m, 100);

		if (op < 30) {
			if (!m->map[s].live)
				op_map(m, s);
		} else if (op < 55) {
			if (m->map[s].live)
				op_unmap(m, s);
		} else if (op < 85) {
			if (m->map[s].live)
				op_device(m, s);
		} else if (op < 93) {
			if (m->nprobes) {
				uint64_t a = m->probes[rn(m, m->nprobes)];

				probe(m, a & ~(uint64_t)(PG - 1), PG);
			}
		} else if (op < 96) {
			if (!m->in_batch && m->policy != DG_DMA_LAZY) {
				dg_dma_batch_begin(m->dd, &m->batch);
				m->in_batch = true;
			} else if (m->in_batch) {
				assert_int_equal(dg_dma_batch_end(&m->batch), 0);
				m->in_batch = false;
				if (m->policy != DG_DMA_LAZY)
					m->nstale = 0;
			}
		} else if (op < 98) {
			flush_point(m);
		} else {
			assert_int_equal(dg_dma_dev_check(m->dd, stderr), 0);
		}
	}
	flush_point(m);
	for (unsigned int s = 0; s < SLOTS; s++)
		if (m->map[s].live)
			op_unmap(m, s);
	flush_point(m);
	for (unsigned int i = 0; i < m->nprobes; i++)
		probe(m, m->probes[i] & ~(uint64_t)(PG - 1), PG);
	struct dg_dma_stats st;
	assert_int_equal(dg_dma_dev_stats(m->dd, &st), 0);
	assert_int_equal(st.maps, m->maps);
	assert_int_equal(st.unmaps, m->unmaps);
	assert_int_equal(st.live, 0);
	if (policy == DG_DMA_STRICT || policy == DG_DMA_LAZY || policy == DG_DMA_BOUNCE)
		assert_int_equal(st.err_invalid, m->unmaps);
	assert_int_equal(dg_dma_dev_check(m->dd, stderr), 0);
	if (m->pool)
		assert_int_equal(dg_dma_pool_destroy(m->pool), 0);
	fixture_dev_destroy(m->dd);
	fixture_fini(&m->f);
	free(m->arena);
	free(m);
}

static void test_model_identity(void **state)
{
	(void)state;
	run_model(DG_DMA_IDENTITY, 0, 0x1234567, 3000);
}

static void test_model_strict(void **state)
{
	(void)state;
	run_model(DG_DMA_STRICT, 0, 0x9e3779b97f4a7c15ull, 6000);
}

static void test_model_lazy(void **state)
{
	(void)state;
	run_model(DG_DMA_LAZY, 0, 0xabcdef12345ull, 6000);
}

static void test_model_window(void **state)
{
	(void)state;
	run_model(DG_DMA_WINDOW, 0, 0x42424242ull, 4000);
	run_model(DG_DMA_WINDOW, 1, 0x31415926ull, 4000);
}

static void test_model_bounce(void **state)
{
	(void)state;
	run_model(DG_DMA_BOUNCE, 0, 0x2718281828ull, 6000);
}

static void test_model_pool(void **state)
{
	(void)state;
	run_model(DG_DMA_POOL, 0, 0x55aa55aa1ull, 3000);
	run_model(DG_DMA_POOL, 1, 0x77777777ull, 4000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model_identity), cmocka_unit_test(test_model_strict),
		cmocka_unit_test(test_model_lazy),     cmocka_unit_test(test_model_window),
		cmocka_unit_test(test_model_bounce),   cmocka_unit_test(test_model_pool),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
