/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/pt/pt_test.c - IO page tables, every format: known answers for VT-d and flat
 * (written from the specifications), the acceptance list of Linux's generic page-table tests
 * (ANCHORS.md) and every error path.
 *
 *  - one valid entry per page size; small pages, then the large page over them (the empty
 *    table turns into a leaf); partial unmaps remove whole leaves and never the next one;
 *  - 1000 random map/unmap steps per configuration against the reference model
 *    (pt_model.c), dg_pt_check() and a leaf-for-leaf comparison after each step;
 *  - the 20-entry range [0x3fe400 << 12, 0x4c0600 << 12) (14 x 2M, 3 x 1G, 3 x 2M), the
 *    0xfef80000..0xfef9ffff -> 0x208b95d000 case, the last largest page of the input space;
 *  - no table left at the end; gathers; walks from a cached table; -ENOMEM at every
 *    allocation of a map that needs several tables; check() catching corruption.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dmaguard/pt.h>

#include "pt/pt_fast.h"
#include "pt/pt_internal.h"
#include "pt_model.h"
#include "gather_check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef PT_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define SZ_4K  0x1000ull
#define SZ_16K 0x4000ull
#define SZ_64K 0x10000ull
#define SZ_2M  0x200000ull
#define SZ_1G  0x40000000ull
#define RW     (DG_PROT_READ | DG_PROT_WRITE)

struct cfg {
	const char *name;
	struct dg_pt_geometry geo;
};

/* Every format and the shapes that differ: depths, granules, concatenated roots, 52 bits. */
static const struct cfg cfgs[] = {
	{"vtd-39", {.format = DG_PT_FMT_VTD_SS, .ias = 39, .oas = 48}},
	{"vtd-48", {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48}},
	{"vtd-57", {.format = DG_PT_FMT_VTD_SS, .ias = 57, .oas = 52}},
	{"s1-4k-48", {.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 48, .granule = SZ_4K}},
	{"s2-4k-40", {.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 40, .oas = 40, .granule = SZ_4K}},
	{"s1-16k-48", {.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 48, .granule = SZ_16K}},
	{"s2-16k-48", {.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 48, .oas = 48, .granule = SZ_16K}},
	{"s1-64k-52", {.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 48, .oas = 52, .granule = SZ_64K}},
	{"s2-64k-32", {.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 32, .oas = 32, .granule = SZ_64K}},
	{"flat-4k",
	 {.format = DG_PT_FMT_FLAT,
	  .granule = SZ_4K,
	  .window_base = 0xfe000000,
	  .window_size = 0x2000000}},
	{"flat-64k",
	 {.format = DG_PT_FMT_FLAT,
	  .granule = SZ_64K,
	  .oas = 40,
	  .window_base = 1ull << 32,
	  .window_size = 0x10000000}},
	{"flat-2m",
	 {.format = DG_PT_FMT_FLAT, .granule = SZ_2M, .window_base = 0, .window_size = 4 * SZ_1G}},
};

/* ---- helpers ----------------------------------------------------------------------------- */

static struct dg_pt *create(const struct cfg *c)
{
	struct dg_pt *pt = dg_pt_create(&c->geo, NULL, NULL);

	if (!pt)
		fail_msg("%s: create failed: %s", c->name, strerror(errno));
	return pt;
}

static void in_range(const struct dg_pt *pt, uint64_t *base, uint64_t *limit)
{
	struct dg_pt_geometry geo;

	dg_pt_geometry(pt, &geo);
	*base = geo.format == DG_PT_FMT_FLAT ? geo.window_base : 0;
	*limit = geo.format == DG_PT_FMT_FLAT ? geo.window_base + geo.window_size : 1ull << geo.ias;
}

/* Page sizes of @pt, ascending; returns how many. */
static unsigned int sizes_of(const struct dg_pt *pt, uint64_t *out)
{
	struct dg_pt_geometry geo;
	unsigned int n = 0;

	dg_pt_geometry(pt, &geo);
	for (unsigned int b = 0; b < 64; b++)
		if (geo.pgsize_bitmap & (1ull << b))
			out[n++] = 1ull << b;
	return n;
}

static void check_ok(const struct dg_pt *pt, const struct pt_model *m)
{
	if (dg_pt_check(pt, stderr) || dg_pt_hint_check(pt, stderr) ||
	    (m && pt_model_compare(m, pt, stderr))) {
		dg_pt_dump(pt, stderr);
		fail_msg("page table differs from its specification");
	}
}

static size_t count_leaves(const struct dg_pt *pt, uint64_t size)
{
	struct pt_model_leaf *l;
	size_t n = pt_model_collect(pt, &l), k = 0;

	for (size_t i = 0; i < n; i++)
		k += !size || l[i].size == size;
	free(l);
	return k;
}

/* Unmap the whole input space, release, and expect only the root left. */
static void drain(struct dg_pt *pt)
{
	struct dg_pt_gather g;
	uint64_t base, limit, bytes;
	int err;

	in_range(pt, &base, &limit);
	dg_pt_gather_init(&g);
	err = dg_pt_unmap(pt, base, limit - base, &g, &bytes);
	assert_true(err == 0 || err == -ENOENT);
	dg_pt_gather_release(pt, &g);
	assert_int_equal(dg_pt_table_pages(pt), 1);
	check_ok(pt, NULL);
}

/* A test's table ends: everything unmapped (only the root left), the model and table freed. */
static void finish(struct dg_pt *pt, struct pt_model *m)
{
	drain(pt);
	pt_model_fini(m);
	dg_pt_destroy(pt);
}

/*
 * One configuration's table, its reference model (empty) and the shape most tests start
 * from. env_fini() ends it as finish() does; env_destroy() frees it without the drain's checks.
 */
struct env {
	struct dg_pt *pt;
	struct pt_model m;
	uint64_t sizes[8];    /* page sizes, ascending; 0 past nsz */
	unsigned int nsz;     /* how many */
	uint64_t s;	      /* the smallest page (the granule) */
	uint64_t base, limit; /* the input range */
	unsigned int last;    /* the last level: depth - 1 (0: one level, flat) */
	uint64_t span;	      /* what one last-level table maps (one level: the whole range) */
};

static struct dg_pt *env_init(struct env *e, const struct cfg *c)
{
	memset(e, 0, sizeof(*e));
	e->pt = create(c);
	e->nsz = sizes_of(e->pt, e->sizes);
	e->s = e->sizes[0];
	in_range(e->pt, &e->base, &e->limit);
	e->last = e->pt->depth - 1;
	e->span = e->last ? dg_pt_table_span(e->pt, e->last) : e->limit - e->base;
	pt_model_init(&e->m, e->pt);
	return e->pt;
}

static void env_fini(struct env *e)
{
	finish(e->pt, &e->m);
}

static void env_destroy(struct env *e)
{
	pt_model_fini(&e->m);
	dg_pt_destroy(e->pt);
}

static int do_map(struct dg_pt *pt, struct pt_model *m, uint64_t iova, uint64_t pa, uint64_t size,
		  unsigned int prot)
{
	struct dg_pt_gather g;
	int want = pt_model_map(m, iova, pa, size, prot);
	int got;

	dg_pt_gather_init(&g);
	got = dg_pt_map(pt, iova, pa, size, prot, &g);
	if (got != want)
		fail_msg("map 0x%llx+0x%llx -> 0x%llx: got %d, model %d", (unsigned long long)iova,
			 (unsigned long long)size, (unsigned long long)pa, got, want);
	dg_pt_gather_release(pt, &g);
	return got;
}

static int do_unmap(struct dg_pt *pt, struct pt_model *m, uint64_t iova, uint64_t size,
		    uint64_t *bytes)
{
	struct dg_pt_gather g;
	uint64_t want_bytes, got_bytes = 0, lo = iova, hi = iova + size;
	size_t i = pt_model_find(m, iova);
	int want, got;

	/*
	 * The leaves the unmap must remove: the gather covers them and no more than the range
	 * rounded out to them (plus, when it unlinked tables, their spans).
	 */
	if (i < m->n && m->leaf[i].iova < lo)
		lo = m->leaf[i].iova;
	for (; i < m->n && m->leaf[i].iova < iova + size; i++)
		hi = m->leaf[i].iova + m->leaf[i].size;
	if (hi < iova + size)
		hi = iova + size;
	want = pt_model_unmap(m, iova, size, &want_bytes);
	dg_pt_gather_init(&g);
	got = dg_pt_unmap(pt, iova, size, &g, &got_bytes);
	if (got != want || (!got && got_bytes != want_bytes))
		fail_msg("unmap 0x%llx+0x%llx: got %d/0x%llx, model %d/0x%llx",
			 (unsigned long long)iova, (unsigned long long)size, got,
			 (unsigned long long)got_bytes, want, (unsigned long long)want_bytes);
	if (!got) {
		size_t k = pt_model_find(m, g.start);

		assert_true(g.start >= lo && g.end <= hi && g.start < g.end);
		assert_true(g.pgsize >= 1);
		/* With leaves only, nothing that stays is inside the gather's range. */
		assert_true(!g.leaf_only || k == m->n || m->leaf[k].iova >= g.end);
	}
	dg_pt_gather_release(pt, &g);
	if (bytes)
		*bytes = got_bytes;
	return got;
}

/* @body on a fresh env of every configuration in turn; the body ends it. */
static void each_cfg(void (*body)(struct env *e))
{
	for (size_t c = 0; c < DG_ARRAY_SIZE(cfgs); c++) {
		struct env e;

		env_init(&e, &cfgs[c]);
		body(&e);
	}
}

/* Unmap [iova, iova + size) from the table (onto @g) and from the model: both must succeed. */
static void unmap_both(struct env *e, uint64_t iova, uint64_t size, struct dg_pt_gather *g)
{
	uint64_t bytes;

	assert_int_equal(dg_pt_unmap(e->pt, iova, size, g, &bytes), 0);
	assert_int_equal(pt_model_unmap(&e->m, iova, size, &bytes), 0);
}

/* The model's side of pt_map_granules(): granule i of @iova maps @phys[i]. */
static void model_map_granules(struct env *e, uint64_t iova, const uint64_t *phys, unsigned int n,
			       unsigned int prot)
{
	for (unsigned int i = 0; i < n; i++)
		assert_int_equal(pt_model_map(&e->m, iova + i * e->s, phys[i], e->s, prot), 0);
}

/* One granule mapped in the model and through pt_map_granule(): both must succeed. */
static void map_granule_both(struct env *e, uint64_t iova, uint64_t pa, unsigned int prot,
			     struct dg_pt_gather *g)
{
	assert_int_equal(pt_model_map(&e->m, iova, pa, e->s, prot), 0);
	assert_int_equal(pt_map_granule(e->pt, iova, pa, prot, g), 0);
}

/* One granule unmapped in the model and through pt_unmap_granule(): both must succeed. */
static void unmap_granule_both(struct env *e, uint64_t iova, struct dg_pt_gather *g)
{
	uint64_t bytes;

	assert_int_equal(pt_model_unmap(&e->m, iova, e->s, &bytes), 0);
	assert_int_equal(pt_unmap_granule(e->pt, iova, g), 0);
}

/* ---- known answers: VT-d second stage and flat, from the specifications ------------------ */

struct kat {
	unsigned int cfg; /* index in cfgs[] */
	uint64_t iova, pa, size;
	unsigned int prot;
	uint64_t pte;
	unsigned int level, depth;
};

static const struct kat vtd_flat_kat[] = {
	/* VT-d: R bit 0, W bit 1, PS bit 7 (2M/1G), SNP bit 11 (CACHE); others ignored. */
	{1, 0x3000, 0x5000, SZ_4K, DG_PROT_READ, 0x5001, 1, 3},
	{1, 0x3000, 0x5000, SZ_4K, DG_PROT_WRITE, 0x5002, 1, 3},
	{1, 0x3000, 0x5000, SZ_4K, RW, 0x5003, 1, 3},
	{1, 0x3000, 0x5000, SZ_4K, RW | DG_PROT_CACHE, 0x5803, 1, 3},
	{1, 0x3000, 0x5000, SZ_4K, DG_PROT_READ | DG_PROT_NOEXEC, 0x5001, 1, 3},
	{1, 0x3000, 0x5000, SZ_4K, RW | DG_PROT_MMIO, 0x5003, 1, 3},
	{1, 0x3000, 0x5000, SZ_4K, DG_PROT_READ | DG_PROT_PRIV, 0x5001, 1, 3},
	{1, 0x600000, 0xa00000, SZ_2M, RW | DG_PROT_CACHE, 0xa00883, 2, 2},
	{1, 0x600000, 0xa00000, SZ_2M, DG_PROT_READ, 0xa00081, 2, 2},
	{1, 0xc0000000, 0x140000000, SZ_1G, DG_PROT_READ, 0x140000081, 3, 1},
	{1, 0xc0000000, 0x140000000, SZ_1G, DG_PROT_WRITE | DG_PROT_CACHE, 0x140000882, 3, 1},
	{1, 0xffffffffe000, 0xffffffffd000, SZ_4K, RW | DG_PROT_CACHE, 0xffffffffd803, 1, 3},
	{2, 0x1ffffff80000000, 0xfffff40000000, SZ_1G, RW, 0xfffff40000083, 3, 2},
	{2, 0x1fffffffffff000, 0x5000, SZ_4K, DG_PROT_READ, 0x5001, 1, 4},
	{0, 0x7fffc00000, 0x200000, SZ_2M, DG_PROT_READ, 0x200081, 2, 1},
	/* Flat (TCE style): R bit 0, W bit 1, address bits [51:12]; entry = (iova - base) / page. */
	{9, 0xfe003000, 0x5000, SZ_4K, DG_PROT_READ, 0x5001, 0, 0},
	{9, 0xfe003000, 0x5000, SZ_4K, DG_PROT_WRITE, 0x5002, 0, 0},
	{9, 0xfe003000, 0x5000, SZ_4K, DG_PROT_ALL, 0x5003, 0, 0},
	{10, 0x100030000, 0x50000, SZ_64K, RW, 0x50003, 0, 0},
	{11, 0x600000, 0xa00000, SZ_2M, DG_PROT_WRITE, 0xa00002, 0, 0},
};

static void test_kat_vtd_flat(void **state)
{
	(void)state;
	for (size_t i = 0; i < DG_ARRAY_SIZE(vtd_flat_kat); i++) {
		const struct kat *k = &vtd_flat_kat[i];
		struct dg_pt *pt;
		struct dg_pt_gather g;
		struct dg_pt_walk w;
		uint64_t bytes;

		pt = create(&cfgs[k->cfg]);
		dg_pt_gather_init(&g);
		assert_int_equal(dg_pt_map(pt, k->iova, k->pa, k->size, k->prot, &g), 0);
		assert_int_equal(dg_pt_walk(pt, k->iova + 0x10, &w), 0);
		assert_int_equal(w.pte, k->pte);
		assert_int_equal(w.level, k->level);
		assert_int_equal(w.depth, k->depth);
		assert_int_equal(w.pgsize, k->size);
		assert_int_equal(w.phys, k->pa + 0x10);
		assert_int_equal(w.table[0], (const void *)(uintptr_t)dg_pt_root(pt));
		for (unsigned int d = 0; d <= w.depth; d++) {
			const _Atomic uint64_t *t = w.table[d];
			uint64_t va = k->iova - pt->iova_base;
			uint64_t e = t[(va >> pt->lvl[d].shift) & pt->lvl[d].index_mask];

			if (d < w.depth) /* VT-d table entries: R|W and the address, nothing else */
				assert_int_equal(e & 0xfff0000000000fffull, 0x3);
			else
				assert_int_equal(e, k->pte);
		}
		if (k->cfg >= 9) /* flat: entry (iova - base) / page of the table at the root */
			assert_int_equal(
				((const _Atomic uint64_t *)(uintptr_t)dg_pt_root(
					pt))[(k->iova - cfgs[k->cfg].geo.window_base) / k->size],
				k->pte);
		check_ok(pt, NULL);
		assert_int_equal(dg_pt_unmap(pt, k->iova, k->size, &g, &bytes), 0);
		assert_int_equal(bytes, k->size);
		dg_pt_gather_release(pt, &g);
		drain(pt);
		dg_pt_destroy(pt);
	}
}

/* The last flat entry pointing at the top of a 52-bit output space. */
static void test_kat_flat_high(void **state)
{
	struct dg_pt_geometry geo = cfgs[9].geo;
	struct dg_pt *pt;
	struct dg_pt_gather g;
	struct dg_pt_walk w;
	uint64_t last = geo.window_base + geo.window_size - SZ_4K;

	(void)state;
	geo.oas = 52;
	pt = dg_pt_create(&geo, NULL, NULL);
	assert_non_null(pt);
	dg_pt_gather_init(&g);
	assert_int_equal(dg_pt_map(pt, last, 0xffffffffff000ull, SZ_4K, DG_PROT_READ, &g), 0);
	assert_int_equal(dg_pt_walk(pt, last, &w), 0);
	assert_int_equal(w.pte, 0xffffffffff001ull);
	assert_int_equal(((const _Atomic uint64_t *)(uintptr_t)dg_pt_root(pt))[0x1fff], w.pte);
	assert_int_equal(dg_pt_map(pt, last - SZ_4K, 0xffffffffff000ull, 2 * SZ_4K, DG_PROT_READ,
				   &g),
			 -ERANGE);
	check_ok(pt, NULL);
	dg_pt_destroy(pt);
}

/* ---- create ----------------------------------------------------------------------------- */

static void test_create_errors(void **state)
{
	static const struct dg_pt_geometry bad[] = {
		{.format = 0},
		{.format = 99},
		{.format = DG_PT_FMT_VTD_SS, .ias = 40},
		{.format = DG_PT_FMT_VTD_SS, .oas = 53},
		{.format = DG_PT_FMT_VTD_SS, .oas = 31},
		{.format = DG_PT_FMT_VTD_SS, .granule = SZ_64K},
		{.format = DG_PT_FMT_VTD_SS, .pgsize_bitmap = SZ_2M},
		{.format = DG_PT_FMT_VTD_SS, .pgsize_bitmap = SZ_4K | SZ_64K},
		{.format = DG_PT_FMT_VTD_SS, .window_size = SZ_4K},
		{.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 31},
		{.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 49},
		{.format = DG_PT_FMT_ARM_LPAE_S1, .oas = 38},
		{.format = DG_PT_FMT_ARM_LPAE_S1, .oas = 52}, /* 52 bits need the 64K granule */
		{.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 52, .granule = SZ_16K},
		{.format = DG_PT_FMT_ARM_LPAE_S2, .granule = 0x2000},
		{.format = DG_PT_FMT_ARM_LPAE_S2, .granule = SZ_16K, .pgsize_bitmap = SZ_2M},
		{.format = DG_PT_FMT_ARM_LPAE_S1, .granule = SZ_64K, .pgsize_bitmap = 1ull << 42},
		{.format = DG_PT_FMT_ARM_LPAE_S1,
		 .granule = SZ_64K,
		 .pgsize_bitmap = SZ_64K | (1ull << 42)}, /* 4T only with oas 52 */
		{.format = DG_PT_FMT_ARM_LPAE_S1, .window_base = SZ_4K},
		{.format = DG_PT_FMT_FLAT, .window_size = 0},
		{.format = DG_PT_FMT_FLAT, .window_size = SZ_4K + 1},
		{.format = DG_PT_FMT_FLAT, .window_base = 0x800, .window_size = SZ_4K},
		{.format = DG_PT_FMT_FLAT, .window_base = ~0ull - 0xfff, .window_size = SZ_4K},
		{.format = DG_PT_FMT_FLAT, .window_size = (1ull << 24) * SZ_4K + SZ_4K},
		{.format = DG_PT_FMT_FLAT, .ias = 32, .window_size = SZ_4K},
		{.format = DG_PT_FMT_FLAT, .oas = 53, .window_size = SZ_4K},
		{.format = DG_PT_FMT_FLAT, .granule = SZ_16K, .window_size = SZ_64K},
		{.format = DG_PT_FMT_FLAT, .pgsize_bitmap = SZ_4K | SZ_2M, .window_size = SZ_2M},
	};
	static const struct dg_pt_mem_ops half = {.alloc = NULL, .free = NULL};

	(void)state;
	for (size_t i = 0; i < DG_ARRAY_SIZE(bad); i++) {
		errno = 0;
		if (dg_pt_create(&bad[i], NULL, NULL))
			fail_msg("bad geometry %zu accepted", i);
		assert_int_equal(errno, EINVAL);
	}
	errno = 0;
	assert_null(dg_pt_create(NULL, NULL, NULL));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(dg_pt_create(&cfgs[1].geo, &half, NULL));
	assert_int_equal(errno, EINVAL);
}

/* Defaults and the effective geometry. */
static void test_create_defaults(void **state)
{
	struct dg_pt_geometry geo = {.format = DG_PT_FMT_VTD_SS}, out;
	struct dg_pt *pt;

	(void)state;
	pt = dg_pt_create(&geo, NULL, NULL);
	assert_non_null(pt);
	dg_pt_geometry(pt, &out);
	assert_int_equal(out.ias, 48);
	assert_int_equal(out.oas, 48);
	assert_int_equal(out.granule, SZ_4K);
	assert_int_equal(out.pgsize_bitmap, SZ_4K | SZ_2M | SZ_1G);
	assert_int_equal(dg_pt_table_pages(pt), 1);
	assert_int_equal(dg_pt_root(pt) & (SZ_4K - 1), 0);
	assert_string_equal(dg_pt_format_name(out.format), "vtd-ss");
	dg_pt_destroy(pt);

	/* 4T leaves exist only where a level holds them: not with ias 32. */
	geo = (struct dg_pt_geometry){
		.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 32, .oas = 52, .granule = SZ_64K};
	pt = dg_pt_create(&geo, NULL, NULL);
	assert_non_null(pt);
	dg_pt_geometry(pt, &out);
	assert_int_equal(out.pgsize_bitmap, SZ_64K | 0x20000000);
	dg_pt_destroy(pt);

	geo = (struct dg_pt_geometry){.format = DG_PT_FMT_FLAT, .window_size = SZ_1G};
	pt = dg_pt_create(&geo, NULL, NULL);
	assert_non_null(pt);
	dg_pt_geometry(pt, &out);
	assert_int_equal(out.oas, 52);
	assert_int_equal(out.pgsize_bitmap, SZ_4K);
	assert_int_equal(dg_pt_table_span(pt, 0), SZ_1G);
	assert_int_equal(dg_pt_table_span(pt, 1), 0);
	assert_string_equal(dg_pt_format_name(out.format), "flat");
	dg_pt_destroy(pt);

	assert_string_equal(dg_pt_format_name(DG_PT_FMT_ARM_LPAE_S1), "arm-lpae-s1");
	assert_string_equal(dg_pt_format_name(DG_PT_FMT_ARM_LPAE_S2), "arm-lpae-s2");
	assert_null(dg_pt_format_name(0));
	dg_pt_destroy(NULL);
}

/* ---- acceptance list -------------------------------------------------------------------- */

static void one_entry_per_size_cfg(struct env *e)
{
	struct dg_pt *pt = e->pt;
	const uint64_t base = e->base, limit = e->limit;
	uint64_t bytes;

	for (unsigned int i = 0; i < e->nsz; i++) {
		uint64_t s = e->sizes[i];
		uint64_t iova = base + 3 * s < limit ? base + 3 * s : base;
		uint64_t pa = (5 * s) & ((1ull << pt->geo.oas) - 1);
		struct dg_pt_walk w;

		assert_int_equal(do_map(pt, &e->m, iova, pa, s, RW), 0);
		check_ok(pt, &e->m);
		assert_int_equal(count_leaves(pt, 0), 1);
		assert_int_equal(dg_pt_walk(pt, iova + s - 1, &w), 0);
		assert_int_equal(w.pgsize, s);
		assert_int_equal(w.phys, pa + s - 1);
		assert_int_equal(w.prot, pt_model_prot(&pt->geo, RW));
		assert_int_equal(do_unmap(pt, &e->m, iova, s, &bytes), 0);
		assert_int_equal(bytes, s);
		check_ok(pt, &e->m);
	}
	env_fini(e);
}

static void test_one_entry_per_size(void **state)
{
	(void)state;
	each_cfg(one_entry_per_size_cfg);
}

/*
 * Small pages, then the large page over the same range: refused while one small page is
 * mapped, accepted once they are all unmapped; the empty table becomes the leaf and goes on
 * the gather with its span.
 */
static void small_then_large(struct dg_pt *pt, struct pt_model *m, uint64_t small, uint64_t large,
			     uint64_t iova)
{
	uint64_t n = large / small, bytes, before, freed;
	struct dg_pt_gather g;
	struct dg_pt_walk w;

	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(do_map(pt, m, iova + i * small, iova + i * small, small, RW), 0);
	check_ok(pt, m);
	assert_int_equal(count_leaves(pt, small), n);
	for (uint64_t i = n - 1; i > 0; i--) /* from the top: the model's array stays cheap */
		assert_int_equal(do_unmap(pt, m, iova + i * small, small, &bytes), 0);
	assert_int_equal(do_map(pt, m, iova, iova, large, RW), -EEXIST);
	check_ok(pt, m);
	assert_int_equal(do_unmap(pt, m, iova, small, &bytes), 0);
	before = dg_pt_table_pages(pt);

	dg_pt_gather_init(&g);
	assert_int_equal(pt_model_map(m, iova, iova, large, RW), 0);
	assert_int_equal(dg_pt_map(pt, iova, iova, large, RW, &g), 0);
	assert_gathered(&g, iova, iova + large, 0);
	assert_false(g.leaf_only);
	assert_true(g.nr_tables >= 1);
	assert_int_equal(dg_pt_table_pages(pt), before);
	check_ok(pt, m);
	assert_int_equal(dg_pt_walk(pt, iova + small, &w), 0);
	assert_int_equal(w.pgsize, large);
	freed = g.nr_tables;
	dg_pt_gather_release(pt, &g);
	assert_int_equal(dg_pt_table_pages(pt), before - freed);
	check_ok(pt, m);
	assert_int_equal(do_unmap(pt, m, iova, large, &bytes), 0);
	assert_int_equal(bytes, large);
}

static void small_then_large_cfg(struct env *e)
{
	struct dg_pt *pt = e->pt;
	const uint64_t *sizes = e->sizes, base = e->base, limit = e->limit;
	const unsigned int n = e->nsz;

	for (unsigned int i = 0; i + 1 < n; i++) {
		/* Keep the page count reasonable (64K -> 512M is 8192 maps; 512M -> 4T too). */
		if (sizes[i + 1] / sizes[i] > 8192 || 2 * sizes[i + 1] > limit - base)
			continue;
		small_then_large(pt, &e->m, sizes[i], sizes[i + 1], base + sizes[i + 1]);
	}
	/* Two levels at once: small pages below a table below the largest page. */
	if (n == 3) {
		uint64_t iova = base + 2 * sizes[2], bytes;
		struct dg_pt_gather g;

		assert_int_equal(do_map(pt, &e->m, iova + 5 * sizes[0], 0, sizes[0], RW), 0);
		assert_int_equal(do_map(pt, &e->m, iova + sizes[1], 0, sizes[1], RW), 0);
		assert_int_equal(do_unmap(pt, &e->m, iova + 5 * sizes[0], sizes[0], &bytes), 0);
		assert_int_equal(do_unmap(pt, &e->m, iova + sizes[1], sizes[1], &bytes), 0);
		dg_pt_gather_init(&g);
		assert_int_equal(pt_model_map(&e->m, iova, 0, sizes[2], RW), 0);
		assert_int_equal(dg_pt_map(pt, iova, 0, sizes[2], RW, &g), 0);
		assert_int_equal(g.nr_tables, 2); /* the middle table and the one below */
		dg_pt_gather_release(pt, &g);
		check_ok(pt, &e->m);
	}
	env_fini(e);
}

static void test_small_then_large(void **state)
{
	(void)state;
	each_cfg(small_then_large_cfg);
}

static void unmap_split_cfg(struct env *e)
{
	struct dg_pt *pt = e->pt;
	const uint64_t base = e->base, limit = e->limit, g = e->s;
	uint64_t bytes;

	for (unsigned int i = 0; i < e->nsz; i++) {
		uint64_t s = e->sizes[i], a = base + 2 * s;
		struct dg_pt_walk w;

		if (4 * s > limit - base)
			continue;
		/* A piece of a leaf removes it whole, never the neighbour. */
		assert_int_equal(do_map(pt, &e->m, a, 0, 2 * s, RW), 0);
		assert_int_equal(count_leaves(pt, s), 2);
		assert_int_equal(do_unmap(pt, &e->m, a + s - g, g, &bytes), 0);
		assert_int_equal(bytes, s);
		assert_int_equal(dg_pt_walk(pt, a, &w), -ENOENT);
		assert_int_equal(dg_pt_walk(pt, a + s, &w), 0);
		assert_int_equal(w.phys, s);
		check_ok(pt, &e->m);
		assert_int_equal(do_unmap(pt, &e->m, a + s + g * (s > g), g, &bytes), 0);
		assert_int_equal(bytes, s);
		/* A range across the boundary takes both. */
		assert_int_equal(do_map(pt, &e->m, a, 0, 2 * s, RW), 0);
		assert_int_equal(do_unmap(pt, &e->m, a + s - g, 2 * g, &bytes), 0);
		assert_int_equal(bytes, 2 * s);
		assert_int_equal(do_unmap(pt, &e->m, a, 2 * s, &bytes), -ENOENT);
		check_ok(pt, &e->m);
	}
	env_fini(e);
}

static void test_unmap_split(void **state)
{
	(void)state;
	each_cfg(unmap_split_cfg);
}

/* 1000 random steps against the model, check() and a full comparison after each. */
static void random_steps(const struct cfg *c, unsigned int steps, uint64_t seed)
{
	struct env e;
	struct dg_pt *pt = env_init(&e, c);
	const uint64_t *sizes = e.sizes, base = e.base, limit = e.limit;
	const uint64_t oa_limit = 1ull << pt->geo.oas;
	const unsigned int n = e.nsz;
	uint64_t rnd = seed;
	unsigned int maps = 0, unmaps = 0, eexist = 0, enoent = 0;
	static const unsigned int prots[] = {DG_PROT_READ, DG_PROT_WRITE, RW, RW | DG_PROT_CACHE,
					     RW | DG_PROT_NOEXEC};

	for (unsigned int step = 0; step < steps; step++) {
		unsigned int k = (unsigned int)(pt_model_rand(&rnd) % n);
		uint64_t s = sizes[k], r = pt_model_rand(&rnd);
		/* Addresses cluster so small and large pages collide and tables stay few. */
		uint64_t window = s * 64 < limit - base ? s * 64 : limit - base;
		uint64_t iova = base + (pt_model_rand(&rnd) % (window / sizes[0])) * sizes[0];
		uint64_t count = 1 + pt_model_rand(&rnd) % (k ? 3 : 40);
		uint64_t size = count * s, bytes;
		int err;

		if (r & 1) /* often aligned to the size class, so large pages fit */
			iova = base + (iova - base) / s * s;
		if (r & 2) /* and sometimes a ragged tail */
			size += (pt_model_rand(&rnd) % 8) * sizes[0];
		if (size > limit - iova)
			size = (limit - iova) / sizes[0] * sizes[0];
		/* Maps and unmaps balance; a crowded table gets unmapped more. */
		if (pt_model_rand(&rnd) % 5 < (e.m.n > 1000 ? 2u : 3u)) {
			/* Output aligned to the class, or less so smaller pages must be used (as
			 * long as that stays a few thousand leaves). */
			uint64_t align = (r & 4) ? sizes[0] : (r & 32) && k ? sizes[k - 1] : s;

			if (size / align > 4096)
				align = s;
			uint64_t pa =
				(pt_model_rand(&rnd) % ((oa_limit - size) / align + 1)) * align;

			if (r & 8)
				pa = (iova - base) % (oa_limit - size) / align * align;
			/* At most ~256 leaves per map keeps the model and check() quick. */
			uint64_t al = (iova - base) | pa | s;

			al &= -al;
			if (size / al > 256)
				size = 256 * al;
			if (r & 16 && k) { /* exactly this page size */
				struct dg_pt_gather g;
				int want;

				if (iova + count * s > limit)
					count = (limit - iova) / s;
				if (!count || (iova - base) % s)
					continue;
				want = pt_model_map_pages(&e.m, iova, pa, s, count, prots[r % 5]);
				dg_pt_gather_init(&g);
				err = dg_pt_map_pages(pt, iova, pa, s, count, prots[r % 5], &g);
				assert_int_equal(err, want);
				dg_pt_gather_release(pt, &g);
			} else {
				err = do_map(pt, &e.m, iova, pa, size, prots[r % 5]);
			}
			maps++;
			eexist += err == -EEXIST;
		} else {
			/* Aim at a leaf: a piece of it, or a run from it. */
			if (e.m.n && (r & 64)) {
				const struct pt_model_leaf *l =
					&e.m.leaf[pt_model_rand(&rnd) % e.m.n];

				iova = l->iova +
				       (pt_model_rand(&rnd) % (l->size / sizes[0])) * sizes[0];
				if (size > limit - iova)
					size = limit - iova;
			}
			err = do_unmap(pt, &e.m, iova, size, &bytes);
			unmaps++;
			enoent += err == -ENOENT;
		}
		check_ok(pt, &e.m);
	}
	/* Every path was taken. */
	assert_true(maps > steps / 3 && unmaps > steps / 5);
	assert_true(eexist > 0 && enoent > 0 && eexist < maps);
	env_fini(&e);
}

/*
 * 1000 steps per configuration in the release and ASan builds; under valgrind memcheck
 * (30-50x slower, and the step loop is pure computation it adds nothing to) 200 steps.
 */
static void test_random(void **state)
{
	unsigned int steps = RUNNING_ON_VALGRIND ? 200 : 1000;

	(void)state;
	for (size_t c = 0; c < DG_ARRAY_SIZE(cfgs); c++)
		random_steps(&cfgs[c], steps, 0x1234 + c);
}

/* [0x3fe400 << 12, 0x4c0600 << 12) maps with 20 entries: 14 x 2M, 3 x 1G, 3 x 2M. */
static void test_mixed_20(void **state)
{
	static const unsigned int which[] = {0, 1, 2, 3, 4};
	const uint64_t start = 0x3fe400ull << 12, end = 0x4c0600ull << 12;

	(void)state;
	for (size_t i = 0; i < DG_ARRAY_SIZE(which); i++) {
		struct dg_pt *pt = create(&cfgs[which[i]]);
		struct pt_model m;
		uint64_t bytes;

		pt_model_init(&m, pt);
		assert_int_equal(do_map(pt, &m, start, start, end - start, RW), 0);
		check_ok(pt, &m);
		assert_int_equal(count_leaves(pt, 0), 20);
		assert_int_equal(count_leaves(pt, SZ_2M), 17);
		assert_int_equal(count_leaves(pt, SZ_1G), 3);
		assert_int_equal(dg_pt_iova_to_phys(pt, start + 0x12345000), start + 0x12345000);
		assert_int_equal(do_unmap(pt, &m, start, end - start, &bytes), 0);
		assert_int_equal(bytes, end - start);
		finish(pt, &m);
	}
}

/* 0xfef80000..0xfef9ffff -> 0x208b95d000: 4K aligned output, so 32 4K entries. */
static void test_fef80000(void **state)
{
	(void)state;
	for (size_t c = 0; c < DG_ARRAY_SIZE(cfgs); c++) {
		const uint64_t iova = 0xfef80000, size = 0x20000, pa = 0x208b95d000;
		struct dg_pt *pt;
		struct pt_model m;
		uint64_t bytes, base, limit;

		if (cfgs[c].geo.granule > SZ_4K || cfgs[c].geo.oas == 32 ||
		    (cfgs[c].geo.oas && cfgs[c].geo.oas < 38))
			continue;
		pt = create(&cfgs[c]);
		in_range(pt, &base, &limit);
		if (iova < base || iova + size > limit) {
			dg_pt_destroy(pt);
			continue;
		}
		pt_model_init(&m, pt);
		assert_int_equal(do_map(pt, &m, iova, pa, size, RW), 0);
		check_ok(pt, &m);
		assert_int_equal(count_leaves(pt, SZ_4K), 32);
		assert_int_equal(dg_pt_iova_to_phys(pt, iova), pa);
		assert_int_equal(dg_pt_iova_to_phys(pt, iova + size - 1), pa + size - 1);
		assert_int_equal(dg_pt_iova_to_phys(pt, iova + size), 0);
		assert_int_equal(dg_pt_iova_to_phys(pt, iova - 1), 0);
		assert_int_equal(do_unmap(pt, &m, iova, size, &bytes), 0);
		assert_int_equal(bytes, size);
		finish(pt, &m);
	}
}

/* The last (largest) page of the input space maps, one byte further does not. */
static void last_page_cfg(struct env *e)
{
	struct dg_pt *pt = e->pt;
	const uint64_t limit = e->limit, big = e->sizes[e->nsz - 1], small = e->s;
	const uint64_t pa = (1ull << pt->geo.oas) - big;
	uint64_t bytes;
	struct dg_pt_walk w;

	assert_int_equal(do_map(pt, &e->m, limit - big, pa, big, RW), 0);
	assert_int_equal(count_leaves(pt, big), 1);
	assert_int_equal(dg_pt_walk(pt, limit - 1, &w), 0);
	assert_int_equal(w.phys, pa + big - 1);
	assert_int_equal(dg_pt_walk(pt, limit, &w), -ERANGE);
	assert_int_equal(do_map(pt, &e->m, limit - small, 0, 2 * small, RW), -ERANGE);
	assert_int_equal(do_map(pt, &e->m, limit, 0, small, RW), -ERANGE);
	check_ok(pt, &e->m);
	assert_int_equal(do_unmap(pt, &e->m, limit - small, small, &bytes), 0);
	assert_int_equal(bytes, big);
	/* The smallest last page, at the top of the output space too. */
	assert_int_equal(do_map(pt, &e->m, limit - small, (1ull << pt->geo.oas) - small, small,
				DG_PROT_READ),
			 0);
	check_ok(pt, &e->m);
	env_fini(e);
}

static void test_last_page(void **state)
{
	(void)state;
	each_cfg(last_page_cfg);
}

/* ---- errors ----------------------------------------------------------------------------- */

static void map_errors_cfg(struct env *e)
{
	struct dg_pt *pt = e->pt;
	const uint64_t *sizes = e->sizes, base = e->base, limit = e->limit, s = e->s;
	const uint64_t oa = 1ull << pt->geo.oas, a = base + 16 * s;
	const unsigned int n = e->nsz;
	struct dg_pt_gather g;

	dg_pt_gather_init(&g);
	/* -EINVAL */
	assert_int_equal(dg_pt_map(pt, a, 0, 0, RW, &g), -EINVAL);
	assert_int_equal(dg_pt_map(pt, a + 1, 0, s, RW, &g), -EINVAL);
	assert_int_equal(dg_pt_map(pt, a + s / 2, 0, s, RW, &g), -EINVAL);
	assert_int_equal(dg_pt_map(pt, a, s / 2, s, RW, &g), -EINVAL);
	assert_int_equal(dg_pt_map(pt, a, 0, s + s / 2, RW, &g), -EINVAL);
	assert_int_equal(dg_pt_map(pt, a, 0, s, 0, &g), -EINVAL);
	assert_int_equal(dg_pt_map(pt, a, 0, s, DG_PROT_CACHE | DG_PROT_NOEXEC, &g), -EINVAL);
	assert_int_equal(dg_pt_map(pt, a, 0, s, RW | (DG_PROT_ALL + 1), &g), -EINVAL);
	assert_int_equal(dg_pt_map(pt, a, 0, s, RW, NULL), -EINVAL);
	/* -ERANGE */
	assert_int_equal(dg_pt_map(pt, limit, 0, s, RW, &g), -ERANGE);
	assert_int_equal(dg_pt_map(pt, limit - s, 0, 2 * s, RW, &g), -ERANGE);
	assert_int_equal(dg_pt_map(pt, a, 0, 0 - s, RW, &g), -ERANGE);
	assert_int_equal(dg_pt_map(pt, a, oa, s, RW, &g), -ERANGE);
	assert_int_equal(dg_pt_map(pt, a, oa - s, 2 * s, RW, &g), -ERANGE);
	assert_int_equal(dg_pt_map(pt, a, 0 - s, s, RW, &g), -ERANGE);
	if (base)
		assert_int_equal(dg_pt_map(pt, base - s, 0, s, RW, &g), -ERANGE);
	/* map_pages: -EINVAL and -ERANGE of its own */
	assert_int_equal(dg_pt_map_pages(pt, a, 0, 3 * s, 1, RW, &g), -EINVAL);
	assert_int_equal(dg_pt_map_pages(pt, a, 0, s / 2, 2, RW, &g), -EINVAL);
	assert_int_equal(dg_pt_map_pages(pt, a, 0, s, 0, RW, &g), -EINVAL);
	assert_int_equal(dg_pt_map_pages(pt, a, 0, s, 1, 0, &g), -EINVAL);
	assert_int_equal(dg_pt_map_pages(pt, a, 0, s, UINT64_MAX / s + 1, RW, &g), -ERANGE);
	if (n > 1) {
		assert_int_equal(dg_pt_map_pages(pt, base + sizes[1] + s, 0, sizes[1], 1, RW, &g),
				 -EINVAL);
		assert_int_equal(dg_pt_map_pages(pt, base, s, sizes[1], 1, RW, &g), -EINVAL);
	}
	assert_int_equal(g.start, g.end);
	check_ok(pt, &e->m);
	assert_int_equal(dg_pt_table_pages(pt), 1);

	/* -EEXIST half way: what was mapped is undone, nothing else moves. */
	assert_int_equal(do_map(pt, &e->m, a + 8 * s, 0x10 * s, 4 * s, RW), 0);
	assert_int_equal(do_map(pt, &e->m, a, 0, 10 * s, RW), -EEXIST);
	assert_int_equal(do_map(pt, &e->m, a + 11 * s, 0, 10 * s, RW), -EEXIST);
	assert_int_equal(do_map(pt, &e->m, a + 9 * s, 0, s, RW), -EEXIST);
	check_ok(pt, &e->m);
	dg_pt_gather_init(&g);
	assert_int_equal(dg_pt_map(pt, a, 0, 9 * s, RW, &g), -EEXIST);
	assert_true(g.start == a && g.end == a + 8 * s); /* the undo's range */
	dg_pt_gather_release(pt, &g);
	if (n > 1) { /* a larger page over a leaf */
		uint64_t L = sizes[1];
		uint64_t b = base + 4 * L;

		if (b + L <= limit) {
			assert_int_equal(do_map(pt, &e->m, b + s, 0, s, RW), 0);
			assert_int_equal(do_map(pt, &e->m, b, 0, L, RW), -EEXIST);
			assert_int_equal(do_map(pt, &e->m, b - L, 0, 2 * L, RW), -EEXIST);
			/* a small page under a large leaf */
			assert_int_equal(do_map(pt, &e->m, b + L, 0, L, RW), 0);
			assert_int_equal(do_map(pt, &e->m, b + L + s, s, s, RW), -EEXIST);
			check_ok(pt, &e->m);
		}
	}
	env_fini(e);
}

static void test_map_errors(void **state)
{
	(void)state;
	each_cfg(map_errors_cfg);
}

static void unmap_walk_errors_cfg(struct env *e)
{
	struct dg_pt *pt = e->pt;
	const uint64_t base = e->base, limit = e->limit, s = e->s;
	struct dg_pt_gather g;
	struct dg_pt_walk w;
	uint64_t bytes = 7;

	dg_pt_gather_init(&g);
	assert_int_equal(dg_pt_unmap(pt, base, 0, &g, &bytes), -EINVAL);
	assert_int_equal(dg_pt_unmap(pt, base + s / 2, s, &g, &bytes), -EINVAL);
	assert_int_equal(dg_pt_unmap(pt, base, s / 2, &g, &bytes), -EINVAL);
	assert_int_equal(dg_pt_unmap(pt, base, s, NULL, &bytes), -EINVAL);
	assert_int_equal(dg_pt_unmap(pt, base, s, &g, NULL), -EINVAL);
	assert_int_equal(dg_pt_unmap(pt, limit, s, &g, &bytes), -ERANGE);
	assert_int_equal(dg_pt_unmap(pt, limit - s, 2 * s, &g, &bytes), -ERANGE);
	assert_int_equal(dg_pt_unmap(pt, base + s, 0 - s, &g, &bytes), -ERANGE);
	if (base)
		assert_int_equal(dg_pt_unmap(pt, base - s, s, &g, &bytes), -ERANGE);
	assert_int_equal(bytes, 7);
	assert_int_equal(dg_pt_unmap(pt, base, s, &g, &bytes), -ENOENT);
	assert_int_equal(bytes, 0);
	assert_int_equal(g.start, g.end);

	assert_int_equal(dg_pt_walk(pt, limit, &w), -ERANGE);
	if (base)
		assert_int_equal(dg_pt_walk(pt, base - 1, &w), -ERANGE);
	assert_int_equal(dg_pt_walk(pt, base, &w), -ENOENT);
	assert_int_equal(w.depth, 0);
	assert_int_equal(w.table[0], (const void *)(uintptr_t)dg_pt_root(pt));
	assert_int_equal(dg_pt_walk_from(pt, base, NULL, 0, &w), -EINVAL);
	assert_int_equal(dg_pt_walk_from(pt, base, w.table[0], pt->depth, &w), -EINVAL);
	assert_int_equal(dg_pt_walk_from(pt, limit, w.table[0], 0, &w), -ERANGE);
	assert_int_equal(dg_pt_iova_to_phys(pt, limit), 0);
	assert_int_equal(dg_pt_table_span(pt, pt->depth), 0);
	check_ok(pt, NULL);
	env_destroy(e);
}

static void test_unmap_walk_errors(void **state)
{
	(void)state;
	each_cfg(unmap_walk_errors_cfg);
}

/* An allocator that fails the n-th allocation and counts what is outstanding. */
struct fail_alloc {
	long countdown; /* allocations left before failing; < 0: never fail */
	long outstanding;
	long calls;
	bool misalign; /* hand out memory 8 bytes off its alignment */
};

static void *fa_alloc(void *cookie, size_t size)
{
	struct fail_alloc *f = cookie;
	char *p;

	f->calls++;
	if (f->countdown == 0)
		return NULL;
	if (f->countdown > 0)
		f->countdown--;
	p = aligned_alloc(size, 2 * size);
	if (!p)
		return NULL;
	memset(p, 0, 2 * size);
	f->outstanding++;
	return f->misalign ? p + 8 : p;
}

static void fa_free(void *cookie, void *page, size_t size)
{
	struct fail_alloc *f = cookie;

	(void)size;
	f->outstanding--;
	free(f->misalign ? (char *)page - 8 : page);
}

static const struct dg_pt_mem_ops fa_ops = {.alloc = fa_alloc, .free = fa_free};

static void test_enomem(void **state)
{
	(void)state;
	for (size_t c = 0; c < DG_ARRAY_SIZE(cfgs); c++) {
		struct fail_alloc f = {.countdown = 0};
		struct dg_pt *pt;
		bool done = false;

		/* Create: the root allocation fails, or the allocator breaks its contract. */
		errno = 0;
		assert_null(dg_pt_create(&cfgs[c].geo, &fa_ops, &f));
		assert_int_equal(errno, ENOMEM);
		f = (struct fail_alloc){.countdown = -1, .misalign = true};
		assert_null(dg_pt_create(&cfgs[c].geo, &fa_ops, &f));
		assert_int_equal(errno, ENOMEM);
		assert_int_equal(f.outstanding, 0);

		for (long k = 0; !done; k++) {
			struct pt_model m;
			struct dg_pt_gather g;
			uint64_t base, limit, sizes[8], s, span, a;
			int err;

			f = (struct fail_alloc){.countdown = -1};
			pt = dg_pt_create(&cfgs[c].geo, &fa_ops, &f);
			assert_non_null(pt);
			sizes_of(pt, sizes);
			s = sizes[0];
			in_range(pt, &base, &limit);
			pt_model_init(&m, pt);
			/* Three last-level tables' worth of small pages, plus what is above. */
			span = pt->depth > 1 ? 3 * pt->lvl[pt->depth - 2].size : 64 * s;
			if (span > (limit - base) / 2)
				span = (limit - base) / 2;
			a = base + (limit - base) / 2 - s;
			assert_int_equal(do_map(pt, &m, base, 0, s, RW), 0);
			f.countdown = k;
			dg_pt_gather_init(&g);
			err = dg_pt_map(pt, a, s, span, RW, &g);
			if (err) {
				assert_int_equal(err, -ENOMEM);
				dg_pt_gather_release(pt, &g);
				check_ok(pt, &m); /* consistent, and only the first leaf */
				assert_int_equal(dg_pt_iova_to_phys(pt, a), 0);
			} else {
				assert_int_equal(pt_model_map(&m, a, s, span, RW), 0);
				check_ok(pt, &m);
				done = true;
				/* Tables were needed (or the flat format, which never allocates). */
				assert_true(k > 1 || pt->depth == 1);
			}
			dg_pt_gather_release(pt, &g);
			f.countdown = -1;
			finish(pt, &m);
			assert_int_equal(f.outstanding, 0);
		}
	}
}

/* ---- gather, walk caches, check --------------------------------------------------------- */

static void gather_and_stale_walk_cfg(struct env *e)
{
	struct dg_pt *pt = e->pt;
	const uint64_t *sizes = e->sizes, base = e->base, limit = e->limit, s = e->s;
	const uint64_t span = e->span, a = base + 2 * span;
	const unsigned int last = e->last;
	struct dg_pt_gather g;
	struct dg_pt_walk w, w2;
	uint64_t bytes, before;

	if (pt->depth < 2) {
		env_destroy(e);
		return;
	}
	assert_int_equal(span, pt->lvl[last].size * (pt->lvl[last].index_mask + 1));
	assert_int_equal(dg_pt_table_span(pt, 0), limit - base);
	/* A whole last-level table of small pages (the output only granule aligned). */
	assert_int_equal(do_map(pt, &e->m, a, s, span, RW), 0);
	assert_int_equal(dg_pt_walk(pt, a + s, &w), 0);
	assert_int_equal(w.depth, last);
	for (unsigned int d = 0; d <= last; d++) {
		assert_int_equal(dg_pt_walk_from(pt, a + s, w.table[d], d, &w2), 0);
		assert_int_equal(w2.pte, w.pte);
		assert_int_equal(w2.depth, w.depth);
		assert_int_equal(w2.table[last], w.table[last]);
	}
	before = dg_pt_table_pages(pt);

	/* Unmapping the table's whole span unlinks it onto the gather, not freed yet. */
	dg_pt_gather_init(&g);
	assert_int_equal(pt_model_unmap(&e->m, a, span, &bytes), 0);
	assert_int_equal(dg_pt_unmap(pt, a, span, &g, &bytes), 0);
	assert_int_equal(bytes, span);
	assert_gathered(&g, a, a + span, s);
	assert_false(g.leaf_only);
	assert_int_equal(g.nr_tables, 1);
	assert_ptr_equal(g.freelist, w.table[last]);
	assert_int_equal(dg_pt_table_pages(pt), before);
	check_ok(pt, &e->m);
	assert_int_equal(dg_pt_walk(pt, a + s, &w2), -ENOENT);
	/*
	 * A walk cache still holding the table sees word 0 as "not present" and the other
	 * entries as they were, until the invalidation and the release.
	 */
	assert_int_equal(dg_pt_walk_from(pt, a, w.table[last], last, &w2), -ENOENT);
	assert_int_equal(dg_pt_walk_from(pt, a + s, w.table[last], last, &w2), 0);
	assert_int_equal(w2.pte, w.pte);
	dg_pt_gather_release(pt, &g);
	assert_int_equal(dg_pt_table_pages(pt), before - 1);
	assert_null(g.freelist);
	assert_true(g.leaf_only);
	assert_int_equal(g.start, g.end);

	/* One gather collects several calls: the hull, the largest page. */
	assert_int_equal(do_map(pt, &e->m, a, a, s, RW), 0);
	assert_int_equal(do_map(pt, &e->m, a + 4 * span, 0, sizes[1], RW), 0);
	dg_pt_gather_init(&g);
	assert_int_equal(dg_pt_unmap(pt, a + 4 * span, s, &g, &bytes), 0);
	assert_int_equal(dg_pt_unmap(pt, a, s, &g, &bytes), 0);
	assert_gathered(&g, a, a + 4 * span + sizes[1], sizes[1]);
	assert_true(g.leaf_only);
	dg_pt_gather_release(pt, &g);
	pt_model_unmap(&e->m, a, limit - a, &bytes);
	check_ok(pt, &e->m);
	env_fini(e);
}

static void test_gather_and_stale_walk(void **state)
{
	(void)state;
	each_cfg(gather_and_stale_walk_cfg);
}

/*
 * pt_map_granules(): a page list mapped across a last-level table boundary equals the model;
 * a granule it cannot map (slot taken, bad address) stops it there with the error dg_pt_map
 * gives and *done = the granules mapped before it, which stay mapped.
 */
static void map_granules_cfg(struct env *e)
{
	struct dg_pt *pt = e->pt;
	const uint64_t base = e->base, limit = e->limit, s = e->s;
	struct dg_pt_gather g;
	uint64_t a, phys[12];
	unsigned int n = 12, done = 99;

	a = base + 2 * e->span - 5 * s; /* granules 0..4 in one table, 5..11 in the next */
	if (a < base || a + n * s > limit)
		a = base;
	for (unsigned int i = 0; i < n; i++)
		phys[i] = (5 * i + 1) * s;
	dg_pt_gather_init(&g);
	assert_int_equal(pt_map_granules(pt, a, phys, n, RW, &g, &done), 0);
	assert_int_equal(done, n);
	model_map_granules(e, a, phys, n, RW);
	check_ok(pt, &e->m);
	unmap_both(e, a, n * s, &g);
	dg_pt_gather_release(pt, &g);
	check_ok(pt, &e->m);

	/* a slot already taken: stops there */
	assert_int_equal(pt_map_granule(pt, a + 7 * s, 3 * s, DG_PROT_READ, &g), 0);
	assert_int_equal(pt_model_map(&e->m, a + 7 * s, 3 * s, s, DG_PROT_READ), 0);
	assert_int_equal(pt_map_granules(pt, a, phys, n, RW, &g, &done), -EEXIST);
	assert_int_equal(done, 7);
	model_map_granules(e, a, phys, 7, RW);
	check_ok(pt, &e->m);
	unmap_both(e, a, n * s, &g);
	dg_pt_gather_release(pt, &g);

	/* a misaligned address, then one beyond the output size */
	phys[3] = s + 1;
	assert_int_equal(pt_map_granules(pt, a, phys, n, RW, &g, &done), -EINVAL);
	assert_int_equal(done, 3);
	model_map_granules(e, a, phys, 3, RW);
	check_ok(pt, &e->m);
	phys[3] = 1ull << pt->geo.oas;
	assert_int_equal(pt_map_granules(pt, a + 3 * s, phys + 3, n - 3, RW, &g, &done), -ERANGE);
	assert_int_equal(done, 0);
	/* bad arguments: the general path's errors, nothing mapped */
	assert_int_equal(pt_map_granules(pt, a + 3 * s, phys, 1, 0, &g, &done), -EINVAL);
	assert_int_equal(pt_map_granules(pt, a + 3 * s + 1, phys, 1, RW, &g, &done), -EINVAL);
	assert_int_equal(pt_map_granules(pt, limit, phys, 1, RW, &g, &done), -ERANGE);
	assert_int_equal(pt_map_granules(pt, a, phys, 0, RW, &g, &done), 0);
	assert_int_equal(done, 0);
	check_ok(pt, &e->m);
	unmap_both(e, a, 3 * s, &g);
	dg_pt_gather_release(pt, &g);
	check_ok(pt, &e->m);
	env_fini(e);
}

static void test_map_granules(void **state)
{
	(void)state;
	each_cfg(map_granules_cfg);
}

/*
 * The last-leaf-table hint and the one-granule paths (pt_fast.h): they give dg_pt_map's and
 * dg_pt_unmap's results and errors; the hint is used inside its table (one entry touched,
 * same table as a walk finds) and never after the table was unlinked - by an unmap covering
 * its span or by a larger leaf mapped over it - even once the table page is freed and another
 * takes its place (dg_pt_hint_check after every step). The checker itself catches a hint
 * whose unlink was not counted.
 */
static void hint_granule_cfg(struct env *e)
{
	struct dg_pt *pt = e->pt;
	const uint64_t base = e->base, limit = e->limit, s = e->s, span = e->span;
	const unsigned int last = e->last;
	struct dg_pt_gather g;
	struct dg_pt_walk w, w2;
	uint64_t a, pages, gen;

	a = base + 2 * span;
	if (a + span > limit)
		a = base;
	assert_int_equal(pt->granule_fast, last > 0);

	/* Errors as dg_pt_map / dg_pt_unmap, nothing changed. */
	dg_pt_gather_init(&g);
	assert_int_equal(pt_map_granule(pt, a, s + 1, RW, &g), -EINVAL);
	assert_int_equal(pt_map_granule(pt, a + 1, s, RW, &g), -EINVAL);
	assert_int_equal(pt_map_granule(pt, a, s, 0, &g), -EINVAL);
	assert_int_equal(pt_map_granule(pt, a, s, RW | 0x100, &g), -EINVAL);
	assert_int_equal(pt_map_granule(pt, a, s, RW, NULL), -EINVAL);
	assert_int_equal(pt_map_granule(pt, a, 1ull << pt->geo.oas, RW, &g), -ERANGE);
	assert_int_equal(pt_map_granule(pt, limit, s, RW, &g), -ERANGE);
	if (base)
		assert_int_equal(pt_map_granule(pt, base - s, s, RW, &g), -ERANGE);
	assert_int_equal(pt_unmap_granule(pt, a, &g), -ENOENT);
	assert_int_equal(pt_unmap_granule(pt, a + 1, &g), -EINVAL);
	assert_int_equal(pt_unmap_granule(pt, a, NULL), -EINVAL);
	assert_int_equal(g.start, g.end);
	check_ok(pt, &e->m);

	/* First map: the descent records the hint; the next ones in the table use it. */
	map_granule_both(e, a, 7 * s, RW, &g);
	check_ok(pt, &e->m);
	pages = dg_pt_table_pages(pt);
	for (uint64_t k = 1; k < 8 && k * s < span; k++) {
		map_granule_both(e, a + k * s, 9 * k * s, DG_PROT_READ, &g);
		check_ok(pt, &e->m);
	}
	assert_int_equal(dg_pt_table_pages(pt), pages);
	assert_int_equal(pt_map_granule(pt, a, 7 * s, RW, &g), -EEXIST);
	assert_int_equal(dg_pt_walk(pt, a, &w), 0);
	assert_int_equal(w.phys, 7 * s);
	if (span > s) {
		assert_int_equal(dg_pt_walk(pt, a + s, &w2), 0);
		assert_int_equal(w2.phys, 9 * s);
		assert_int_equal(w2.prot, DG_PROT_READ);
		assert_ptr_equal(w2.table[last], w.table[last]);
		/* Unmap through the hint: one leaf, the gather gets its page. */
		unmap_granule_both(e, a + s, &g);
		assert_gathered(&g, a + s, a + 2 * s, 0);
		assert_true(g.leaf_only);
		assert_int_equal(pt_unmap_granule(pt, a + s, &g), -ENOENT);
		check_ok(pt, &e->m);
	}
	dg_pt_gather_release(pt, &g);
	if (!last) {
		env_fini(e);
		return;
	}

	/* An unmap covering the table's span unlinks it: the hint goes stale at once. */
	gen = atomic_load(&pt->unlink_gen);
	dg_pt_gather_init(&g);
	unmap_both(e, a, span, &g);
	assert_int_equal(g.nr_tables, 1);
	assert_true(atomic_load(&pt->unlink_gen) > gen);
	check_ok(pt, &e->m);
	dg_pt_gather_release(pt, &g); /* the table page is freed */
	assert_int_equal(dg_pt_table_pages(pt), pages - 1);
	/* The next map descends and links a new table (no use of the freed one). */
	map_granule_both(e, a + s, 3 * s, RW, &g);
	assert_int_equal(dg_pt_table_pages(pt), pages);
	assert_int_equal(dg_pt_walk(pt, a + s, &w2), 0);
	assert_int_equal(w2.phys, 3 * s);
	check_ok(pt, &e->m);

	/* A larger leaf over the (now empty) table unlinks it too. */
	if (e->nsz > 1 && e->sizes[1] == span) {
		uint64_t bytes;

		unmap_granule_both(e, a + s, &g);
		dg_pt_gather_release(pt, &g);
		check_ok(pt, &e->m);
		gen = atomic_load(&pt->unlink_gen);
		assert_int_equal(pt_model_map(&e->m, a, 0, span, RW), 0);
		assert_int_equal(dg_pt_map(pt, a, 0, span, RW, &g), 0);
		assert_int_equal(g.nr_tables, 1);
		assert_true(atomic_load(&pt->unlink_gen) > gen);
		check_ok(pt, &e->m);
		dg_pt_gather_release(pt, &g);
		assert_int_equal(pt_map_granule(pt, a + s, 3 * s, RW, &g), -EEXIST);
		assert_int_equal(pt_unmap_granule(pt, a + s, &g), 0); /* the whole leaf */
		assert_int_equal(g.end - g.start, span);
		assert_int_equal(pt_model_unmap(&e->m, a, span, &bytes), 0);
		dg_pt_gather_release(pt, &g);
		check_ok(pt, &e->m);
		map_granule_both(e, a + s, 3 * s, RW, &g);
		check_ok(pt, &e->m);
	}

	/* The checker: an unlink the generation does not count leaves a wrong hint. */
	map_granule_both(e, a + span, 5 * s, RW, &g); /* the hint there */
	check_ok(pt, &e->m);
	gen = atomic_load(&pt->unlink_gen);
	unmap_both(e, a + span, span, &g);
	atomic_store(&pt->unlink_gen, gen); /* as if the unlink had not been counted */
	assert_int_equal(dg_pt_hint_check(pt, NULL), -EUCLEAN);
	atomic_store(&pt->unlink_gen, gen + 1);
	assert_int_equal(dg_pt_hint_check(pt, NULL), 0);
	dg_pt_gather_release(pt, &g);
	check_ok(pt, &e->m);

	env_fini(e);
}

static void test_hint_granule(void **state)
{
	(void)state;
	each_cfg(hint_granule_cfg);
}

/*
 * pt_unmap_granules (a batch's run of one-granule buffers) against the model on every format:
 * a run across a last-level table boundary with a hole in it, the same run again (-ENOENT),
 * a run over a larger leaf (the general path takes it), bad arguments; tables are kept.
 */
static void unmap_granules_cfg(struct env *e)
{
	struct dg_pt *pt = e->pt;
	const uint64_t *sizes = e->sizes, base = e->base, limit = e->limit, s = e->s;
	const unsigned int last = e->last;
	/* a table boundary */
	const uint64_t a = last ? base + 2 * e->span : base + 8 * s;
	struct dg_pt_gather g;
	uint64_t bytes, tables;

	dg_pt_gather_init(&g);
	assert_int_equal(pt_unmap_granules(pt, a + 1, 2, &g), -EINVAL);
	assert_int_equal(pt_unmap_granules(pt, a, 0, &g), -EINVAL);
	assert_int_equal(pt_unmap_granules(pt, a, 2, NULL), -EINVAL);
	assert_int_equal(pt_unmap_granules(pt, a, 2, &g), -ENOENT);
	for (int k = -3; k < 3; k++) {
		if (k == 1)
			continue; /* a hole */
		assert_int_equal(do_map(pt, &e->m, a + k * (int64_t)s, (9 + k) * s, s, RW), 0);
	}
	check_ok(pt, &e->m);
	tables = dg_pt_table_pages(pt);
	assert_int_equal(pt_unmap_granules(pt, a - 3 * s, 6, &g), 0);
	assert_int_equal(pt_model_unmap(&e->m, a - 3 * s, 6 * s, &bytes), 0);
	assert_true(g.start <= a - 3 * s && g.end >= a + 3 * s);
	assert_true(g.leaf_only);
	check_ok(pt, &e->m);
	assert_int_equal(dg_pt_table_pages(pt), tables); /* kept */
	assert_int_equal(pt_unmap_granules(pt, a - 3 * s, 6, &g), -ENOENT);
	/* a larger leaf in the run: the general path removes it whole */
	if (last && e->nsz > 1 && a + sizes[1] + 2 * s <= limit) {
		uint64_t l = a + sizes[1];

		l -= l % sizes[1];
		assert_int_equal(do_map(pt, &e->m, l, 0, sizes[1], RW), 0);
		assert_int_equal(do_map(pt, &e->m, l + sizes[1], 3 * s, s, RW), 0);
		assert_int_equal(pt_unmap_granules(pt, l, sizes[1] / s + 1, &g), 0);
		assert_int_equal(pt_model_unmap(&e->m, l, sizes[1] + s, &bytes), 0);
		check_ok(pt, &e->m);
	}
	dg_pt_gather_release(pt, &g);
	env_fini(e);
}

static void test_unmap_granules(void **state)
{
	(void)state;
	each_cfg(unmap_granules_cfg);
}

/*
 * Slots (pt_fast.h): kept last-level tables under a range, on every format. Stores and clears
 * through them match the reference model, refusals change nothing, a range crossing a table
 * boundary keeps two tables, neighbours mapping and unmapping in the same tables leave the kept
 * ones linked (pt_slots_check), and pt_slots_check catches a kept table unlinked by a covering
 * unmap (the caller bug the slots' rule forbids).
 */
static void slots_cfg(struct env *e)
{
	struct dg_pt *pt = e->pt;
	const uint64_t base = e->base, limit = e->limit, s = e->s, span = e->span;
	const unsigned int last = e->last;
	/* 4 slots, two on each side of a last-level table boundary (one-level: the start) */
	const uint64_t a = last ? base + 2 * span - 2 * s : base + 8 * s;
	struct pt_slots *sl;
	struct dg_pt_gather g;
	uint64_t bytes;

	errno = 0;
	assert_null(pt_slots_create(pt, a, 0));
	assert_int_equal(errno, EINVAL);
	assert_null(pt_slots_create(pt, a + 1, 4));
	assert_int_equal(errno, EINVAL);
	assert_null(pt_slots_create(pt, limit - s, 2));
	assert_int_equal(errno, ERANGE);
	sl = pt_slots_create(pt, a, 4);
	assert_non_null(sl);

	/* refusals, nothing changed */
	assert_int_equal(pt_slot_map(sl, 0, s + 1, RW), -EINVAL);
	assert_int_equal(pt_slot_map(sl, 0, s, 0), -EINVAL);
	assert_int_equal(pt_slot_map(sl, 0, 1ull << pt->geo.oas, RW), -ERANGE);
	assert_int_equal(pt_slots_map(sl, 2, 3, s, RW), -ERANGE);
	assert_int_equal(pt_slots_map(sl, 0, 0, s, RW), -EINVAL);
	check_ok(pt, &e->m);

	/* one by one, the short way once the table is kept */
	assert_int_equal(pt_slot_map(sl, 0, 5 * s, DG_PROT_READ), 0);
	assert_int_equal(pt_model_map(&e->m, a, 5 * s, s, DG_PROT_READ), 0);
	assert_true(pt_slot_try_map(sl, 1, 9 * s, pt_slots_tmpl(sl, RW)));
	assert_int_equal(pt_model_map(&e->m, a + s, 9 * s, s, RW), 0);
	assert_false(pt_slot_try_map(sl, 1, 3 * s, pt_slots_tmpl(sl, RW))); /* present */
	assert_int_equal(pt_slot_map(sl, 1, 3 * s, RW), -EEXIST);
	/* across the boundary: slot 3 present makes the run of 2..3 refused whole */
	assert_int_equal(pt_slot_map(sl, 3, 11 * s, DG_PROT_WRITE), 0);
	assert_int_equal(pt_model_map(&e->m, a + 3 * s, 11 * s, s, DG_PROT_WRITE), 0);
	assert_int_equal(pt_slots_map(sl, 2, 2, 20 * s, RW), -EEXIST);
	check_ok(pt, &e->m);
	assert_int_equal(pt_slots_check(sl, stderr), 0);

	/* a neighbour maps and unmaps in the same tables: the kept ones stay linked */
	dg_pt_gather_init(&g);
	if (a >= base + 4 * s) {
		assert_int_equal(dg_pt_map(pt, a - 4 * s, 40 * s, 2 * s, RW, &g), 0);
		assert_int_equal(dg_pt_unmap(pt, a - 4 * s, 2 * s, &g, &bytes), 0);
	}
	assert_int_equal(dg_pt_map(pt, a + 4 * s, 44 * s, s, RW, &g), 0);
	assert_int_equal(dg_pt_unmap(pt, a + 4 * s, s, &g, &bytes), 0);
	dg_pt_gather_release(pt, &g);
	assert_int_equal(pt_slots_check(sl, stderr), 0);

	/* clears */
	pt_slot_unmap(sl, 0);
	assert_int_equal(pt_model_unmap(&e->m, a, s, &bytes), 0);
	assert_int_equal(pt_slots_unmap(sl, 0, 4), 2);
	assert_int_equal(pt_model_unmap(&e->m, a + s, s, &bytes), 0);
	assert_int_equal(pt_model_unmap(&e->m, a + 3 * s, s, &bytes), 0);
	check_ok(pt, &e->m);
	/* a run of four across the boundary, then cleared whole */
	assert_int_equal(pt_slots_map(sl, 0, 4, 64 * s, RW), 0);
	assert_int_equal(pt_model_map_pages(&e->m, a, 64 * s, s, 4, RW), 0);
	check_ok(pt, &e->m);
	assert_int_equal(pt_slots_unmap(sl, 0, 4), 4);
	assert_int_equal(pt_model_unmap(&e->m, a, 4 * s, &bytes), 0);
	check_ok(pt, &e->m);
	assert_int_equal(pt_slots_check(sl, stderr), 0);

	/* the forbidden covering unmap is caught */
	if (last) {
		assert_int_equal(pt_slot_map(sl, 3, 7 * s, RW), 0);
		dg_pt_gather_init(&g);
		assert_int_equal(dg_pt_unmap(pt, base + 2 * span, span, &g, &bytes), 0);
		assert_int_equal(pt_slots_check(sl, NULL), -EUCLEAN);
		dg_pt_gather_release(pt, &g);
	}
	pt_slots_destroy(sl);
	env_fini(e);
}

static void test_slots(void **state)
{
	(void)state;
	each_cfg(slots_cfg);
}

/* check() finds what is wrong, dump() prints what is there. */
static void check_catches_cfg(struct env *e)
{
	struct dg_pt *pt = e->pt;
	const uint64_t *sizes = e->sizes, base = e->base, limit = e->limit, s = e->s;
	struct dg_pt_gather g;
	struct dg_pt_walk w;
	char *buf = NULL;
	size_t len = 0;
	FILE *out;
	_Atomic uint64_t *leaf, saved;

	dg_pt_gather_init(&g);
	assert_int_equal(dg_pt_map(pt, base + s, 0x5 * s, s, RW, &g), 0);
	assert_int_equal(dg_pt_walk(pt, base + s, &w), 0);
	leaf = (_Atomic uint64_t *)(uintptr_t)w.table[w.depth] +
	       (((base + s - pt->iova_base) >> pt->lvl[w.depth].shift) &
		pt->lvl[w.depth].index_mask);
	saved = *leaf;

	out = open_memstream(&buf, &len);
	dg_pt_dump(pt, out);
	fclose(out);
	assert_non_null(strstr(buf, "leaf"));
	assert_non_null(strstr(buf, dg_pt_format_name(pt->geo.format)));
	free(buf);

	static const uint64_t stray[] = {1ull << 63, 1ull << 62, 1ull << 58, 1ull << 56, 0x800};
	for (size_t i = 0; i < DG_ARRAY_SIZE(stray); i++) {
		if (stray[i] == 0x800 && pt->geo.format != DG_PT_FMT_FLAT)
			continue; /* SNP / nG are legal attribute bits there */
		*leaf = saved ^ stray[i];
		assert_int_equal(dg_pt_check(pt, NULL), -EUCLEAN);
	}
	*leaf = saved & ~pt->valid_mask; /* not present but not zero */
	out = open_memstream(&buf, &len);
	assert_int_equal(dg_pt_check(pt, out), -EUCLEAN);
	fclose(out);
	assert_non_null(strstr(buf, "not zero"));
	free(buf);
	if (pt->geo.oas < 48) { /* output beyond oas */
		*leaf = saved | (1ull << pt->geo.oas);
		assert_int_equal(dg_pt_check(pt, NULL), -EUCLEAN);
	}
	*leaf = saved;
	assert_int_equal(dg_pt_check(pt, NULL), 0);
	if (sizes[1] && base + 4 * sizes[1] <= limit) {
		/* Address bits below a large leaf's size. */
		assert_int_equal(dg_pt_map(pt, base + 2 * sizes[1], 0, sizes[1], RW, &g), 0);
		assert_int_equal(dg_pt_walk(pt, base + 2 * sizes[1], &w), 0);
		leaf = (_Atomic uint64_t *)(uintptr_t)w.table[w.depth] +
		       (((base + 2 * sizes[1]) >> pt->lvl[w.depth].shift) &
			pt->lvl[w.depth].index_mask);
		saved = *leaf;
		*leaf = saved | (sizes[1] / 2);
		assert_int_equal(dg_pt_check(pt, NULL), -EUCLEAN);
		*leaf = saved;
		assert_int_equal(dg_pt_check(pt, NULL), 0);
	}
	if (w.depth > 0) {
		/* A lost table: the count no longer matches. */
		atomic_fetch_add(&pt->nr_tables, 1);
		assert_int_equal(dg_pt_check(pt, NULL), -EUCLEAN);
		atomic_fetch_sub(&pt->nr_tables, 1);
	}
	env_fini(e);
}

static void test_check_catches(void **state)
{
	(void)state;
	each_cfg(check_catches_cfg);
}

/* A restricted page-size set: 4K and 1G only, so 2M-aligned runs stay 4K. */
static void test_restricted_sizes(void **state)
{
	struct dg_pt_geometry geo = {.format = DG_PT_FMT_VTD_SS, .pgsize_bitmap = SZ_4K | SZ_1G};
	struct dg_pt *pt;
	struct pt_model m;
	uint64_t bytes;

	(void)state;
	pt = dg_pt_create(&geo, NULL, NULL);
	assert_non_null(pt);
	pt_model_init(&m, pt);
	assert_int_equal(do_map(pt, &m, SZ_1G - SZ_2M, SZ_1G - SZ_2M, SZ_1G + 2 * SZ_2M, RW), 0);
	assert_int_equal(count_leaves(pt, SZ_1G), 1);
	assert_int_equal(count_leaves(pt, SZ_4K), 2 * 512);
	check_ok(pt, &m);
	assert_int_equal(do_unmap(pt, &m, 0, 4 * SZ_1G, &bytes), 0);
	assert_int_equal(bytes, SZ_1G + 2 * SZ_2M);
	finish(pt, &m);
}

/* The io-pgtable-arm selftest sequence for one configuration (Linux 6.13+ unmap semantics). */
static void lpae_selftest(const struct dg_pt_geometry *geo)
{
	struct dg_pt *pt = dg_pt_create(geo, NULL, NULL);
	uint64_t iova = 0, bytes, small = geo->granule, size;
	uint64_t second = geo->pgsize_bitmap & (geo->pgsize_bitmap - 1);
	struct pt_model m;

	assert_non_null(pt);
	pt_model_init(&m, pt);
	assert_int_equal(dg_pt_iova_to_phys(pt, 42), 0);
	assert_int_equal(dg_pt_iova_to_phys(pt, SZ_1G + 42), 0);
	assert_int_equal(dg_pt_iova_to_phys(pt, 2 * SZ_1G + 42), 0);
	/* Distinct mappings of every page size, 1G apart; overlaps refused. */
	for (uint64_t b = geo->pgsize_bitmap; b; b &= b - 1, iova += SZ_1G) {
		size = b & -b;
		assert_int_equal(
			do_map(pt, &m, iova, iova, size, RW | DG_PROT_NOEXEC | DG_PROT_CACHE), 0);
		assert_int_equal(do_map(pt, &m, iova, iova + size, size,
					DG_PROT_READ | DG_PROT_NOEXEC),
				 -EEXIST);
		assert_int_equal(dg_pt_iova_to_phys(pt, iova + 42), iova + 42);
	}
	/* Partial unmap: the whole (second-size) leaf at 1G goes. */
	assert_int_equal(do_unmap(pt, &m, SZ_1G + small, small, &bytes), 0);
	assert_int_equal(bytes, second & -second);
	assert_int_equal(dg_pt_iova_to_phys(pt, SZ_1G + 42), 0);
	/* Remap of the partial unmap. */
	assert_int_equal(do_map(pt, &m, SZ_1G + small, small, small, DG_PROT_READ), 0);
	assert_int_equal(dg_pt_iova_to_phys(pt, SZ_1G + small + 42), small + 42);
	assert_int_equal(do_unmap(pt, &m, SZ_1G + small, small, &bytes), 0);
	/* Full unmap, remap of full blocks. */
	iova = 0;
	for (uint64_t b = geo->pgsize_bitmap; b; b &= b - 1, iova += SZ_1G) {
		size = b & -b;
		if (iova != SZ_1G) {
			assert_int_equal(do_unmap(pt, &m, iova, size, &bytes), 0);
			assert_int_equal(bytes, size);
		}
		assert_int_equal(dg_pt_iova_to_phys(pt, iova + 42), 0);
		assert_int_equal(do_map(pt, &m, iova, iova, size, DG_PROT_WRITE), 0);
		assert_int_equal(dg_pt_iova_to_phys(pt, iova + 42), iova + 42);
	}
	check_ok(pt, &m);
	finish(pt, &m);
}

/*
 * The io-pgtable-arm selftest matrix: page-size sets {4K,2M,1G}, {16K,32M}, {64K,512M} x
 * IAS/OAS in {32,36,40,42,44,48} (IAS <= OAS) x stage 1 and 2.
 */
static void test_lpae_sweep(void **state)
{
	static const uint64_t sets[] = {SZ_4K | SZ_2M | SZ_1G, SZ_16K | 0x2000000,
					SZ_64K | 0x20000000};
	static const unsigned int bits[] = {32, 36, 40, 42, 44, 48};
	unsigned int configs = 0;

	(void)state;
	for (unsigned int stage = 1; stage <= 2; stage++)
		for (size_t ps = 0; ps < DG_ARRAY_SIZE(sets); ps++)
			for (size_t ia = 0; ia < DG_ARRAY_SIZE(bits); ia++)
				for (size_t oa = ia; oa < DG_ARRAY_SIZE(bits); oa++) {
					struct dg_pt_geometry geo = {
						.format = stage == 1 ? DG_PT_FMT_ARM_LPAE_S1 :
								       DG_PT_FMT_ARM_LPAE_S2,
						.ias = bits[ia],
						.oas = bits[oa],
						.granule = sets[ps] & -sets[ps],
						.pgsize_bitmap = sets[ps],
					};

					lpae_selftest(&geo);
					configs++;
				}
	assert_int_equal(configs, 2 * 3 * 21);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kat_vtd_flat),
		cmocka_unit_test(test_kat_flat_high),
		cmocka_unit_test(test_create_errors),
		cmocka_unit_test(test_create_defaults),
		cmocka_unit_test(test_one_entry_per_size),
		cmocka_unit_test(test_small_then_large),
		cmocka_unit_test(test_unmap_split),
		cmocka_unit_test(test_random),
		cmocka_unit_test(test_mixed_20),
		cmocka_unit_test(test_fef80000),
		cmocka_unit_test(test_last_page),
		cmocka_unit_test(test_map_errors),
		cmocka_unit_test(test_unmap_walk_errors),
		cmocka_unit_test(test_enomem),
		cmocka_unit_test(test_gather_and_stale_walk),
		cmocka_unit_test(test_hint_granule),
		cmocka_unit_test(test_map_granules),
		cmocka_unit_test(test_slots),
		cmocka_unit_test(test_unmap_granules),
		cmocka_unit_test(test_check_catches),
		cmocka_unit_test(test_restricted_sizes),
		cmocka_unit_test(test_lpae_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
