/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/pt/pt_lpae_kat_test.c - ARM LPAE known answers from Linux 6.1 (vectors/README.md).
 *
 * For each of the 20 configurations in vectors/lpae-kat.json: the effective page sizes, the
 * walk geometry (start level, root index bits, concatenated stage-2 root), MAIR and TCR/VTCR
 * fields; for each of the 384 vectors: the leaf descriptor bit for bit, its level, the low
 * bits of every table descriptor crossed, iova_to_phys inside and just outside the page; and
 * each rejected request fails with the same errno and maps nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dmaguard/pt.h>

#include "pt/pt_internal.h"
#include "gather_check.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#ifndef PT_VECTORS_DIR
#error "PT_VECTORS_DIR must name tests/unit/pt/vectors"
#endif

#define TABLE_LOW_BITS 0xF800000000000003ull

static json_t *kat;
static unsigned int vectors_checked, rejects_checked, configs_checked;

static uint64_t hex(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	assert_non_null(v);
	assert_true(json_is_string(v));
	return strtoull(json_string_value(v), NULL, 16);
}

static unsigned int int_field(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	assert_non_null(v);
	assert_true(json_is_integer(v));
	return (unsigned int)json_integer_value(v);
}

/* Linux IOMMU_* names to DG_PROT_* through the file's own prot_flags table. */
static unsigned int prot_of(json_t *list)
{
	json_t *flags = json_object_get(kat, "prot_flags");
	unsigned int prot = 0;
	size_t i;
	json_t *name;

	json_array_foreach(list, i, name)
	{
		json_t *v = json_object_get(flags, json_string_value(name));

		assert_non_null(v);
		prot |= (unsigned int)json_integer_value(v);
	}
	return prot;
}

static struct dg_pt *create_from(json_t *cfg)
{
	const char *fmt = json_string_value(json_object_get(cfg, "format"));
	struct dg_pt_geometry geo = {
		.format = !strcmp(fmt, "ARM_64_LPAE_S1") ? DG_PT_FMT_ARM_LPAE_S1 :
							   DG_PT_FMT_ARM_LPAE_S2,
		.ias = int_field(cfg, "ias"),
		.oas = int_field(cfg, "oas"),
		.granule = int_field(cfg, "granule"),
		.pgsize_bitmap = hex(cfg, "pgsize_bitmap_requested"),
	};
	struct dg_pt *pt;

	assert_true(!strcmp(fmt, "ARM_64_LPAE_S1") || !strcmp(fmt, "ARM_64_LPAE_S2"));
	pt = dg_pt_create(&geo, NULL, NULL);
	assert_non_null(pt);
	return pt;
}

static int setup(void **state)
{
	json_error_t err;

	(void)state;
	kat = json_load_file(PT_VECTORS_DIR "/lpae-kat.json", 0, &err);
	if (!kat) {
		fprintf(stderr, "cannot load lpae-kat.json: %s line %d\n", err.text, err.line);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	json_decref(kat);
	return 0;
}

static void test_regs(void **state)
{
	json_t *cfg;
	size_t i;

	(void)state;
	configs_checked = 0;
	json_array_foreach(json_object_get(kat, "configs"), i, cfg)
	{
		struct dg_pt *pt = create_from(cfg);
		struct dg_pt_geometry geo;
		struct pt_lpae_regs r;
		bool s1 = pt->geo.format == DG_PT_FMT_ARM_LPAE_S1;
		json_t *tcr = json_object_get(cfg, s1 ? "tcr" : "vtcr");

		dg_pt_geometry(pt, &geo);
		assert_int_equal(geo.pgsize_bitmap, hex(cfg, "pgsize_bitmap"));
		assert_int_equal(geo.ias, int_field(cfg, "ias"));
		assert_int_equal(geo.oas, int_field(cfg, "oas"));
		assert_int_equal(dg_pt_lpae_regs(pt, &r), 0);
		assert_int_equal(r.start_level, int_field(cfg, "start_level"));
		assert_int_equal(r.root_index_bits, int_field(cfg, "root_index_bits"));
		assert_int_equal(r.bits_per_level, int_field(cfg, "bits_per_level"));
		assert_int_equal(r.concatenated, r.root_index_bits > r.bits_per_level);
		assert_int_equal(r.ttbr, dg_pt_root(pt));
		/* The root is as big as its index bits say (a concatenated root is several pages). */
		assert_int_equal(pt->lvl[0].index_mask + 1, 1ull << r.root_index_bits);
		assert_int_equal(dg_pt_table_span(pt, 0), 1ull << geo.ias);
		if (s1)
			assert_int_equal(r.mair, hex(cfg, "mair"));
		else
			assert_int_equal(r.sl, int_field(tcr, "sl"));
		assert_int_equal(r.ps, int_field(tcr, s1 ? "ips" : "ps"));
		assert_int_equal(r.tg, int_field(tcr, "tg"));
		assert_int_equal(r.sh, int_field(tcr, "sh"));
		assert_int_equal(r.orgn, int_field(tcr, "orgn"));
		assert_int_equal(r.irgn, int_field(tcr, "irgn"));
		assert_int_equal(r.tsz, int_field(tcr, "tsz"));
		dg_pt_destroy(pt);
		configs_checked++;
	}
	assert_int_equal(configs_checked, 20);
}

/* Map one vector with @how (0: map_pages, 1: map) and check everything the vector says. */
static void check_vector(struct dg_pt *pt, json_t *v, int how)
{
	uint64_t iova = hex(v, "iova"), pa = hex(v, "paddr"), size = hex(v, "size");
	unsigned int prot = prot_of(json_object_get(v, "prot"));
	unsigned int level = int_field(v, "leaf_level");
	json_t *lows = json_object_get(v, "table_pte_low_bits_by_level");
	struct dg_pt_gather g;
	struct dg_pt_walk w;
	uint64_t unmapped;
	struct pt_lpae_regs r;

	dg_pt_gather_init(&g);
	assert_int_equal(dg_pt_lpae_regs(pt, &r), 0);
	if (how == 0)
		assert_int_equal(dg_pt_map_pages(pt, iova, pa, size, 1, prot, &g), 0);
	else
		assert_int_equal(dg_pt_map(pt, iova, pa, size, prot, &g), 0);
	if (g.start != g.end) {
		/* An empty table left by an earlier vector was replaced by this leaf. */
		assert_gathered(&g, iova, iova + size, 0);
		assert_false(g.leaf_only);
		assert_true(g.nr_tables > 0);
		dg_pt_gather_release(pt, &g);
	}

	assert_int_equal(dg_pt_walk(pt, iova + 0x123, &w), 0);
	assert_int_equal(w.pte, hex(v, "leaf_pte"));
	assert_int_equal(w.level, level);
	assert_int_equal(w.pgsize, size);
	assert_int_equal(w.phys, pa + 0x123);
	assert_int_equal(w.depth, level - r.start_level);
	assert_int_equal(json_object_size(lows), w.depth);
	for (unsigned int d = 0; d < w.depth; d++) {
		char key[4];
		const _Atomic uint64_t *t = w.table[d];
		uint64_t idx = (iova >> pt->lvl[d].shift) & pt->lvl[d].index_mask;

		snprintf(key, sizeof(key), "%u", r.start_level + d);
		assert_int_equal(t[idx] & TABLE_LOW_BITS, hex(lows, key));
	}
	/* The walk's tables hold the leaf where the hardware would read it. */
	assert_int_equal(
		((const _Atomic uint64_t *)w.table[w.depth])[(iova >> pt->lvl[w.depth].shift) &
							     pt->lvl[w.depth].index_mask],
		w.pte);
	assert_int_equal(dg_pt_iova_to_phys(pt, iova), pa);
	assert_int_equal(dg_pt_iova_to_phys(pt, iova + size - 1), pa + size - 1);
	assert_int_equal(dg_pt_iova_to_phys(pt, iova - pt->geo.granule), 0);
	if (iova + size < (1ull << pt->geo.ias))
		assert_int_equal(dg_pt_iova_to_phys(pt, iova + size), 0);
	assert_int_equal(dg_pt_check(pt, stderr), 0);

	assert_int_equal(dg_pt_unmap(pt, iova, size, &g, &unmapped), 0);
	assert_int_equal(unmapped, size);
	assert_gathered(&g, iova, iova + size, size);
	assert_true(g.leaf_only);
	assert_int_equal(dg_pt_iova_to_phys(pt, iova), 0);
	dg_pt_gather_release(pt, &g);
}

static void test_leaves(void **state)
{
	json_t *cfg, *v;
	size_t i, j;

	(void)state;
	vectors_checked = 0;
	json_array_foreach(json_object_get(kat, "configs"), i, cfg)
	{
		struct dg_pt *pt = create_from(cfg);

		json_array_foreach(json_object_get(cfg, "vectors"), j, v)
		{
			check_vector(pt, v, 0);
			check_vector(pt, v, 1);
			vectors_checked++;
		}
		/* Tables left empty by the unmaps are reclaimed by one covering unmap. */
		struct dg_pt_gather g;
		uint64_t unmapped;

		dg_pt_gather_init(&g);
		assert_int_equal(dg_pt_unmap(pt, 0, 1ull << pt->geo.ias, &g, &unmapped), -ENOENT);
		dg_pt_gather_release(pt, &g);
		assert_int_equal(dg_pt_table_pages(pt), 1);
		assert_int_equal(dg_pt_check(pt, stderr), 0);
		dg_pt_destroy(pt);
	}
	assert_int_equal(vectors_checked, 384);
}

static void test_rejected(void **state)
{
	json_t *cfg, *v;
	size_t i, j;

	(void)state;
	rejects_checked = 0;
	json_array_foreach(json_object_get(kat, "configs"), i, cfg)
	{
		struct dg_pt *pt = create_from(cfg);
		struct dg_pt_gather g;

		dg_pt_gather_init(&g);
		json_array_foreach(json_object_get(cfg, "rejected"), j, v)
		{
			uint64_t iova = hex(v, "iova"), pa = hex(v, "paddr"), size = hex(v, "size");
			unsigned int prot = prot_of(json_object_get(v, "prot"));
			int want = (int)json_integer_value(json_object_get(v, "errno"));

			assert_true(want < 0);
			assert_int_equal(dg_pt_map_pages(pt, iova, pa, size, 1, prot, &g), want);
			assert_int_equal(dg_pt_iova_to_phys(pt, iova), 0);
			assert_int_equal(g.start, g.end);
			assert_null(g.freelist);
			rejects_checked++;
		}
		assert_int_equal(dg_pt_table_pages(pt), 1);
		assert_int_equal(dg_pt_check(pt, stderr), 0);
		dg_pt_destroy(pt);
	}
	assert_int_equal(rejects_checked, 100);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_regs),
		cmocka_unit_test(test_leaves),
		cmocka_unit_test(test_rejected),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
