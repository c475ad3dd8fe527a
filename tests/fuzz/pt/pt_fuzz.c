/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/pt/pt_fuzz.c - random operation sequences on an IO page table, checked against
 * the reference model (tests/unit/pt/pt_model.c).
 *
 * Input: byte 0 picks a configuration (format, granule, address sizes); then 8 bytes per
 * operation:
 *   [0] op:    0-2 map, 3 map_pages, 4-5 unmap, 6 walk, 7 map with table allocation failing
 *   [1..2]     IOVA: slot in a small region, scaled by a page size picked by [3] bits 6..7
 *   [3]        size: count (bits 0..5) of the page size picked by bits 6..7
 *   [4..5]     output address slot, [6] prot (any bits, invalid ones included), [7] skew:
 *              bit 0 shifts the output by one granule (forces small pages), bits 1..7 the
 *              allocation that fails for op 7.
 * Every result (errno, bytes, walk fields) must equal the model's; dg_pt_check() runs after
 * every operation and the whole tree is compared leaf for leaf every 8 operations and at the
 * end. Any difference aborts with a description.
 */
#include "../../unit/pt/pt_model.h"

#include <dmaguard/pt.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct dg_pt_geometry fuzz_cfgs[] = {
	{.format = DG_PT_FMT_VTD_SS, .ias = 39, .oas = 40},
	{.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48},
	{.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 40, .oas = 44, .granule = 0x1000},
	{.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 40, .oas = 40, .granule = 0x1000},
	{.format = DG_PT_FMT_ARM_LPAE_S1, .ias = 36, .oas = 48, .granule = 0x4000},
	{.format = DG_PT_FMT_ARM_LPAE_S2, .ias = 42, .oas = 52, .granule = 0x10000},
	{.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48, .pgsize_bitmap = 0x40001000},
	{.format = DG_PT_FMT_FLAT, .oas = 36, .window_base = 0x100000, .window_size = 0x4000000},
};

#define OP_BYTES 8
#define MAX_OPS	 96

/* Allocator whose n-th allocation fails (countdown < 0: never), for -ENOMEM paths. */
struct fuzz_mem {
	long countdown;
	long outstanding;
};

static void *fuzz_alloc(void *cookie, size_t size)
{
	struct fuzz_mem *m = cookie;
	void *p;

	if (m->countdown == 0)
		return NULL;
	if (m->countdown > 0)
		m->countdown--;
	p = aligned_alloc(size, size);
	if (p) {
		memset(p, 0, size);
		m->outstanding++;
	}
	return p;
}

static void fuzz_free(void *cookie, void *page, size_t size)
{
	struct fuzz_mem *m = cookie;

	(void)size;
	m->outstanding--;
	free(page);
}

static const struct dg_pt_mem_ops fuzz_mem_ops = {.alloc = fuzz_alloc, .free = fuzz_free};

static void die(const char *what, unsigned long long a, unsigned long long b, int got, int want)
{
	fprintf(stderr, "pt fuzz: %s 0x%llx 0x%llx: got %d, want %d\n", what, a, b, got, want);
	abort();
}

static void check_tree(const struct dg_pt *pt, const struct pt_model *m, bool full)
{
	if (dg_pt_check(pt, stderr) || (full && pt_model_compare(m, pt, stderr))) {
		dg_pt_dump(pt, stderr);
		abort();
	}
}

/* The model's answer for a walk of @iova. */
static int model_walk(const struct pt_model *m, uint64_t iova, struct pt_model_leaf *out)
{
	size_t i = pt_model_find(m, iova);

	if (iova < m->in_base || iova >= m->in_limit)
		return -ERANGE;
	if (i == m->n || m->leaf[i].iova > iova)
		return -ENOENT;
	*out = m->leaf[i];
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct dg_pt_geometry *geo;
	struct fuzz_mem mem = {.countdown = -1};
	struct dg_pt_geometry eff;
	struct dg_pt *pt;
	struct pt_model m;
	uint64_t sizes[8];
	unsigned int nsizes = 0;
	size_t ops;

	if (size < 1)
		return 0;
	geo = &fuzz_cfgs[data[0] % (sizeof(fuzz_cfgs) / sizeof(fuzz_cfgs[0]))];
	pt = dg_pt_create(geo, &fuzz_mem_ops, &mem);
	if (!pt)
		die("create", geo->format, geo->ias, errno, 0);
	dg_pt_geometry(pt, &eff);
	for (unsigned int b = 0; b < 64; b++)
		if (eff.pgsize_bitmap & (1ull << b))
			sizes[nsizes++] = 1ull << b;
	pt_model_init(&m, pt);
	ops = (size - 1) / OP_BYTES;
	if (ops > MAX_OPS)
		ops = MAX_OPS;

	for (size_t k = 0; k < ops; k++) {
		const uint8_t *op = data + 1 + k * OP_BYTES;
		uint64_t pgsize = sizes[(op[3] >> 6) % nsizes];
		uint64_t slot = (uint64_t)op[1] | (uint64_t)op[2] << 8;
		/* IOVAs in a region of 64 of the chosen pages, so operations collide. */
		uint64_t iova = m.in_base + (slot % 64) * pgsize + ((slot >> 6) % 16) * eff.granule;
		uint64_t len = (op[3] & 0x3f) * pgsize + ((slot >> 10) & 3) * eff.granule;
		uint64_t pa = ((uint64_t)op[4] | (uint64_t)op[5] << 8) * pgsize +
			      (op[7] & 1) * eff.granule;
		unsigned int prot = op[6];
		struct dg_pt_gather g;
		uint64_t bytes = 0, want_bytes;
		int got, want;

		if (iova >= m.in_limit)
			iova = m.in_base;
		pa &= (1ull << eff.oas) - 1;
		/* At most ~512 leaves per map: misaligned large ranges would make millions. */
		uint64_t al = (iova - m.in_base) | pa | pgsize;

		al &= -al;
		if (len / al > 512)
			len = 512 * al;
		dg_pt_gather_init(&g);
		switch (op[0] % 8) {
		case 0:
		case 1:
		case 2:
			want = pt_model_map(&m, iova, pa, len, prot);
			got = dg_pt_map(pt, iova, pa, len, prot, &g);
			if (got != want)
				die("map", iova, len, got, want);
			break;
		case 3: {
			uint64_t count = op[3] & 0x3f;

			want = pt_model_map_pages(&m, iova, pa, pgsize, count, prot);
			got = dg_pt_map_pages(pt, iova, pa, pgsize, count, prot, &g);
			if (got != want)
				die("map_pages", iova, count, got, want);
			break;
		}
		case 4:
		case 5:
			want = pt_model_unmap(&m, iova, len, &want_bytes);
			got = dg_pt_unmap(pt, iova, len, &g, &bytes);
			if (got != want || (!got && bytes != want_bytes))
				die("unmap", iova, len, got, want);
			break;
		case 6: {
			struct dg_pt_walk w;
			struct pt_model_leaf l;
			uint64_t at = iova + (op[7] % 16) * 0x111;

			want = model_walk(&m, at, &l);
			got = dg_pt_walk(pt, at, &w);
			if (got != want)
				die("walk", at, 0, got, want);
			if (!got && (w.phys != l.phys + (at - l.iova) || w.pgsize != l.size ||
				     w.prot != l.prot))
				die("walk result", at, w.phys, (int)w.prot, (int)l.prot);
			if (!got) /* a walk cache resuming at any depth agrees */
				for (unsigned int d = 0; d <= w.depth; d++) {
					struct dg_pt_walk w2;

					if (dg_pt_walk_from(pt, at, w.table[d], d, &w2) ||
					    w2.pte != w.pte || w2.phys != w.phys)
						die("walk_from", at, d, -1, 0);
				}
			break;
		}
		default:
			/* The (op[7] >> 1)-th table allocation fails; what ran stays consistent. */
			mem.countdown = op[7] >> 1;
			got = dg_pt_map(pt, iova, pa, len, prot, &g);
			mem.countdown = -1;
			if (got == -ENOMEM) {
				dg_pt_gather_release(pt, &g);
				check_tree(pt, &m, true); /* nothing changed */
				break;
			}
			want = pt_model_map(&m, iova, pa, len, prot);
			if (got != want)
				die("map (failing allocator)", iova, len, got, want);
			break;
		}
		dg_pt_gather_release(pt, &g);
		check_tree(pt, &m, (k & 7) == 7);
	}
	check_tree(pt, &m, true);
	dg_pt_destroy(pt);
	if (mem.outstanding)
		die("table pages leaked", (unsigned long long)mem.outstanding, 0, 0, 0);
	pt_model_fini(&m);
	return 0;
}
