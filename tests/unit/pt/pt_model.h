/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/pt/pt_model.h - the reference model the page-table tests compare against.
 *
 * A sorted array of leaves {iova, size, phys, prot}, written from the specification, not from
 * the implementation: map decomposes the range greedily into the largest allowed page that
 * divides both addresses and fits (the fewest entries) and fails with -EEXIST when any leaf
 * intersects the range; unmap removes every leaf intersecting the range, whole. Arguments
 * outside the geometry are checked the way pt.h documents them. O(n) per operation: the tests
 * keep n in the thousands.
 *
 * pt_model_compare() enumerates the real tree's leaves (through pt_internal.h) and compares
 * them one for one with the model, including each leaf's decoded permissions.
 */
#ifndef DG_TESTS_PT_MODEL_H
#define DG_TESTS_PT_MODEL_H

#include <dmaguard/pt.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "../../test_rand.h"

struct pt_model_leaf {
	uint64_t iova;
	uint64_t size;
	uint64_t phys;
	unsigned int prot; /* as the format reads it back (pt_model_prot) */
};

struct pt_model {
	struct dg_pt_geometry geo;  /* effective geometry (dg_pt_geometry) */
	uint64_t in_base, in_limit; /* IOVA range [in_base, in_limit) */
	struct pt_model_leaf *leaf; /* sorted by iova, disjoint */
	size_t n, cap;
};

void pt_model_init(struct pt_model *m, const struct dg_pt *pt);
void pt_model_fini(struct pt_model *m);

/* DG_PROT_* as the format @geo reads it back after a map with @prot. */
unsigned int pt_model_prot(const struct dg_pt_geometry *geo, unsigned int prot);

/* What dg_pt_map must do; applies it to the model and returns 0 or the expected errno. */
int pt_model_map(struct pt_model *m, uint64_t iova, uint64_t phys, uint64_t size,
		 unsigned int prot);

/* Same for dg_pt_map_pages (every leaf exactly @pgsize). */
int pt_model_map_pages(struct pt_model *m, uint64_t iova, uint64_t phys, uint64_t pgsize,
		       uint64_t pgcount, unsigned int prot);

/* Index of the first leaf that ends after @iova (m->n when none). */
size_t pt_model_find(const struct pt_model *m, uint64_t iova);

/* What dg_pt_unmap must do; *bytes gets the size removed. */
int pt_model_unmap(struct pt_model *m, uint64_t iova, uint64_t size, uint64_t *bytes);

/* 0 when @pt holds exactly the model's leaves; otherwise prints the first difference. */
int pt_model_compare(const struct pt_model *m, const struct dg_pt *pt, FILE *why);

/* Leaves of @pt (through the private tree), in IOVA order, into a malloc'd array. */
size_t pt_model_collect(const struct dg_pt *pt, struct pt_model_leaf **out);

/* Deterministic test randomness (splitmix64). */
static inline uint64_t pt_model_rand(uint64_t *state)
{
	return splitmix64(state);
}

#endif /* DG_TESTS_PT_MODEL_H */
