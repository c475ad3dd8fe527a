/* SPDX-License-Identifier: MIT */
/*
 * iommu/domain.c - domains: one page table of any format plus a domain id that tags every
 * IOTLB and walk-cache entry made from it.
 *
 * The id space is small (1..DG_DOMAIN_ID_MAX) because IOTLB keys keep the id below the page
 * base (iotlb.h). Ids are looked up lock-free by dg_inval_submit() (an acquire load of the
 * domains[] slot); creation and destruction take mmu->lock.
 */
#include "iommu/iommu_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct dg_domain *dg_domain_create(struct dg_iommu *mmu, const struct dg_pt_geometry *geo,
				   const struct dg_pt_mem_ops *mem, void *cookie)
{
	struct dg_pt_geometry g;
	struct dg_domain *dom;
	uint32_t id = 0;

	if (!mmu || !geo) {
		errno = EINVAL;
		return NULL;
	}
	dom = calloc(1, sizeof(*dom));
	if (!dom) {
		errno = ENOMEM;
		return NULL;
	}
	if (pthread_mutex_init(&dom->pending_lock, NULL)) {
		free(dom);
		errno = ENOMEM;
		return NULL;
	}
	atomic_init(&dom->has_pending, 0);
	dom->pt = dg_pt_create(geo, mem, cookie);
	if (!dom->pt) {
		int e = errno;

		pthread_mutex_destroy(&dom->pending_lock);
		free(dom);
		errno = e;
		return NULL;
	}
	dg_pt_geometry(dom->pt, &g);
	dom->mmu = mmu;
	dom->granule = g.granule;
	dom->pgsize_bitmap = g.pgsize_bitmap;
	if (g.format == DG_PT_FMT_FLAT) {
		dom->in_first = g.window_base;
		dom->in_last = g.window_base + (g.window_size - 1);
	} else {
		dom->in_first = 0;
		dom->in_last = g.ias >= 64 ? UINT64_MAX : (1ull << g.ias) - 1;
	}
	/* Depths 1.. whose tables a walk cache may keep (dg_pt_table_span() is 0 past them). */
	for (unsigned int d = 1; d < DG_PT_MAX_DEPTH; d++) {
		uint64_t span = dg_pt_table_span(dom->pt, d);

		if (!span || !dg_is_pow2(span))
			break;
		dom->wc_shift[d] = dg_ilog2(span);
		dom->wc_depths = d;
	}

	pthread_mutex_lock(&mmu->lock);
	for (uint32_t i = 1; i <= DG_DOMAIN_ID_MAX; i++) {
		if (!atomic_load_explicit(&mmu->domains[i], memory_order_relaxed)) {
			id = i;
			break;
		}
	}
	if (id) {
		dom->id = id;
		/* Release pairs with the acquire load in find_domain() (inval.c). */
		atomic_store_explicit(&mmu->domains[id], dom, memory_order_release);
		mmu->nr_domains++;
	}
	pthread_mutex_unlock(&mmu->lock);
	if (!id) {
		dg_pt_destroy(dom->pt);
		pthread_mutex_destroy(&dom->pending_lock);
		free(dom);
		errno = ENOSPC;
		return NULL;
	}
	return dom;
}

int dg_domain_destroy(struct dg_domain *dom)
{
	struct dg_iommu *mmu;

	if (!dom)
		return -EINVAL;
	mmu = dom->mmu;
	pthread_mutex_lock(&mmu->lock);
	if (dom->refs) {
		pthread_mutex_unlock(&mmu->lock);
		return -EBUSY;
	}
	atomic_store_explicit(&mmu->domains[dom->id], NULL, memory_order_relaxed);
	mmu->nr_domains--;
	pthread_mutex_unlock(&mmu->lock);
	/* No device references the domain any more (refs == 0 means every change away from
	   it was confirmed), so nothing can still walk the tables pending release. */
	for (unsigned int i = 0; i < dom->nr_pending; i++)
		dg_pt_gather_release(dom->pt, &dom->pending[i]);
	free(dom->pending);
	dg_pt_destroy(dom->pt);
	pthread_mutex_destroy(&dom->pending_lock);
	free(dom);
	return 0;
}

uint32_t dg_domain_id(const struct dg_domain *dom)
{
	return dom->id;
}

struct dg_pt *dg_domain_pt(const struct dg_domain *dom)
{
	return dom->pt;
}

struct dg_iommu *dg_domain_iommu(const struct dg_domain *dom)
{
	return dom->mmu;
}

/* Keep a gather whose flush timed out for a later flush (0, or -ENOMEM). */
static int domain_defer_gather(struct dg_domain *dom, struct dg_pt_gather *g)
{
	struct dg_pt_gather *p;

	pthread_mutex_lock(&dom->pending_lock);
	p = realloc(dom->pending, (dom->nr_pending + 1) * sizeof(*p));
	if (!p) {
		pthread_mutex_unlock(&dom->pending_lock);
		return -ENOMEM;
	}
	dom->pending = p;
	p[dom->nr_pending++] = *g;
	atomic_store_explicit(&dom->has_pending, 1, memory_order_relaxed);
	pthread_mutex_unlock(&dom->pending_lock);
	dg_pt_gather_init(g);
	return 0;
}

int dg_domain_map(struct dg_domain *dom, uint64_t iova, uint64_t phys, uint64_t size,
		  unsigned int prot, struct dg_pt_gather *gather)
{
	struct dg_pt_gather own;
	int r, f;

	if (!dom)
		return -EINVAL;
	if (gather)
		return dg_pt_map(dom->pt, iova, phys, size, prot, gather);
	dg_pt_gather_init(&own);
	r = dg_pt_map(dom->pt, iova, phys, size, prot, &own);
	/* Replaced tables (or a failed map's undo) must be invalidated before release. */
	f = dg_iommu_flush_gather(dom->mmu, dom, &own);
	if (f == -ETIMEDOUT && domain_defer_gather(dom, &own)) {
		/* Cannot even keep the gather for later: wait until the flush completes. */
		while (dg_iommu_flush_gather(dom->mmu, dom, &own) == -ETIMEDOUT)
			;
	}
	return r ? r : f;
}

int dg_domain_unmap(struct dg_domain *dom, uint64_t iova, uint64_t size,
		    struct dg_pt_gather *gather, uint64_t *unmapped)
{
	if (!dom)
		return -EINVAL;
	return dg_pt_unmap(dom->pt, iova, size, gather, unmapped);
}
