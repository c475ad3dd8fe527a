/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/iommu/test_pool.h - a LIFO table-page allocator for page-table tests: a freed
 * 4 KiB page is the next one handed out (so a freed table is reused at once, for another
 * region), and the last 4 KiB page handed out is remembered. Include after <cmocka.h>, with
 * K4 defined; pool_fini() frees what the pool keeps.
 */
#ifndef DG_TEST_POOL_H
#define DG_TEST_POOL_H

#include <dmaguard/pt.h>

#include <stdlib.h>
#include <string.h>

#define POOL_MAX 64

struct pool {
	void *free[POOL_MAX];
	unsigned int nfree;
	void *last; /* the last 4 KiB page handed out */
};

static void *pool_alloc(void *cookie, size_t size)
{
	struct pool *p = cookie;
	void *page;

	if (p->nfree && size == K4)
		page = p->free[--p->nfree];
	else
		page = aligned_alloc(size, size);
	if (page)
		memset(page, 0, size);
	if (size == K4)
		p->last = page;
	return page;
}

static void pool_free(void *cookie, void *page, size_t size)
{
	struct pool *p = cookie;

	if (size == K4 && p->nfree < POOL_MAX)
		p->free[p->nfree++] = page;
	else
		free(page);
}

static const struct dg_pt_mem_ops pool_ops = {.alloc = pool_alloc, .free = pool_free};

static inline void pool_fini(struct pool *p)
{
	while (p->nfree)
		free(p->free[--p->nfree]);
}

#endif
