/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/pt/gather_check.h - what the page-table tests (pt_test.c, pt_lpae_kat_test.c)
 * assert about a gather after a map or an unmap: the range it would invalidate. Include after
 * cmocka.h and dmaguard/pt.h.
 */
#ifndef DG_TESTS_PT_GATHER_CHECK_H
#define DG_TESTS_PT_GATHER_CHECK_H

#include <stdint.h>

/* @g covers exactly [start, end) and, unless @pgsize is 0, its largest page is @pgsize. */
static inline void assert_gathered(const struct dg_pt_gather *g, uint64_t start, uint64_t end,
				   uint64_t pgsize)
{
	assert_int_equal(g->start, start);
	assert_int_equal(g->end, end);
	if (pgsize)
		assert_int_equal(g->pgsize, pgsize);
}

#endif /* DG_TESTS_PT_GATHER_CHECK_H */
