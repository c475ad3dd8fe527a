/* SPDX-License-Identifier: MIT */
/*
 * dma/pool.c - the pool policy: buffers whose mappings persist while the driver recycles
 * them (Linux page_pool with PP_FLAG_DMA_MAP; DPDK/SPDK memory mapped once at start-up).
 *
 * A pool is one allocation of nbufs buffers, mapped once for the pool's direction when it is
 * created (2 MiB pages with DG_DMA_POOL_HUGE: the ANCHORS figure "~0% with 2M pages" comes from
 * IOTLB reach) and unmapped, with a strict invalidation, when it is destroyed. A streaming map
 * of memory inside a pool returns the fixed address and does nothing else; of memory outside
 * every pool it falls back to a strict mapping (counted in pool_fallbacks), so a driver works
 * unchanged and the statistics show how much of its traffic the pools absorbed.
 *
 * What it gives up: everything a pool holds is exposed to the device for the pool's life, in
 * use or not, including stale data of recycled buffers (reported as persistent bytes).
 *
 * Free buffers are a lock-free stack: head = ABA tag << 32 | (index + 1), next[] links, one
 * CAS per get and per put; out[] catches a double put (exchange) before it could corrupt the
 * stack. Pools are published in dd->pools[] with release stores and looked up with acquire
 * loads by the map path (a handful of range compares). The streaming hooks are the ones the
 * window policy has too (dma/fixed_map.h), with the pools as the fixed part; so are its bulk
 * calls (map.c takes them through dma_pool_ops.fixed).
 */
#include "dma/dma_internal.h"
#include "dma/fixed_map.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define POOL_MAX_BUFS (1u << 24)
#define POOL_HUGE     (2ull << 20)

bool dma_pool_lookup(struct dg_dma_dev *dd, uintptr_t buf, size_t len, enum dg_dma_dir dir,
		     uint64_t *dma)
{
	/* Acquire pairs with the release store in dg_dma_pool_create(). */
	uint32_t n = atomic_load_explicit(&dd->nr_pools_hw, memory_order_acquire);

	for (uint32_t i = 0; i < n; i++) {
		/* Acquire pairs with the release store in dg_dma_pool_create(). */
		struct dg_dma_pool *p = atomic_load_explicit(&dd->pools[i], memory_order_acquire);
		uintptr_t m;

		if (!p)
			continue;
		m = (uintptr_t)p->mem;
		if (buf >= m && buf - m < p->mem_size && len <= p->mem_size - (buf - m) &&
		    !(dma_dir_prot(dir) & ~dma_dir_prot(p->dir))) {
			*dma = p->iova + (buf - m);
			return true;
		}
	}
	return false;
}

bool dma_pool_owns(struct dg_dma_dev *dd, uint64_t dma, size_t len)
{
	/* Acquire pairs with the release store in dg_dma_pool_create(). */
	uint32_t n = atomic_load_explicit(&dd->nr_pools_hw, memory_order_acquire);

	for (uint32_t i = 0; i < n; i++) {
		/* Acquire pairs with the release store in dg_dma_pool_create(). */
		struct dg_dma_pool *p = atomic_load_explicit(&dd->pools[i], memory_order_acquire);

		if (p && dma >= p->iova && dma - p->iova < p->mem_size &&
		    len <= p->mem_size - (dma - p->iova))
			return true;
	}
	return false;
}

struct dg_dma_pool *dg_dma_pool_create(struct dg_dma_dev *dd, size_t buf_size, uint32_t nbufs,
				       enum dg_dma_dir dir, unsigned int flags)
{
	struct dg_dma_pool *p;
	uint64_t align, total;
	unsigned int slot;
	int r;

	if (!dd) {
		errno = EINVAL;
		return NULL;
	}
	if (!buf_size || !nbufs || nbufs > POOL_MAX_BUFS || !dma_dir_ok(dir) ||
	    (flags & ~DG_DMA_POOL_HUGE) || buf_size > (1ull << 40)) {
		errno = -dma_err(dd, -EINVAL);
		return NULL;
	}
	if (dd->policy != DG_DMA_POOL && dd->policy != DG_DMA_IDENTITY) {
		errno = -dma_err(dd, -EPERM);
		return NULL;
	}
	buf_size = dg_align_up(buf_size, 64);
	align = flags & DG_DMA_POOL_HUGE ? POOL_HUGE : DMA_HOST_PAGE;
	if (dd->sp && dd->sp->granule > align)
		align = dd->sp->granule;
	total = dg_align_up((uint64_t)buf_size * nbufs, align);
	p = calloc(1, sizeof(*p));
	if (!p) {
		errno = -dma_err(dd, -ENOMEM);
		return NULL;
	}
	p->dd = dd;
	p->buf_size = buf_size;
	p->nbufs = nbufs;
	p->dir = dir;
	p->mem_size = total;
	r = dma_fail(dd, DG_DMA_FAIL_ALLOC);
	if (!r) {
		p->mem = aligned_alloc(align, total);
		p->next = calloc(nbufs, sizeof(*p->next));
		p->out = calloc(nbufs, sizeof(*p->out));
		r = p->mem && p->next && p->out ? 0 : -ENOMEM;
	}
	if (r)
		goto fail;
	memset(p->mem, 0, total);
	if (dd->policy == DG_DMA_IDENTITY) {
		p->iova = (uintptr_t)p->mem;
		r = p->iova + (total - 1) > dd->mask ? -ERANGE : 0;
	} else {
		r = dma_fail(dd, DG_DMA_FAIL_IOVA);
		if (!r)
			r = dg_iova_alloc(dd->sp->iova, total, dd->sp->limit, 0, &p->iova);
		if (!r) {
			p->iova_size = total;
			r = dg_domain_map(dd->sp->dom, p->iova, (uintptr_t)p->mem, total,
					  dma_dir_prot(dir), NULL);
			if (r)
				dg_iova_free(dd->sp->iova, p->iova, total);
		}
	}
	if (r)
		goto fail;
	/* Stack of every buffer, index 0 on top. */
	for (uint32_t i = 0; i < nbufs; i++)
		atomic_init(&p->next[i], i + 1 < nbufs ? i + 2 : 0);
	atomic_init(&p->head, 1);
	pthread_mutex_lock(&dd->pool_lock);
	for (slot = 0; slot < DMA_MAX_POOLS; slot++)
		if (!atomic_load_explicit(&dd->pools[slot], memory_order_relaxed))
			break;
	if (slot == DMA_MAX_POOLS) {
		pthread_mutex_unlock(&dd->pool_lock);
		r = -ENOSPC;
		goto fail_unmap;
	}
	p->slot = slot;
	/* Release pairs with the acquire loads in dma_pool_lookup()/dma_pool_owns(). */
	atomic_store_explicit(&dd->pools[slot], p, memory_order_release);
	atomic_store_explicit(&dd->nr_pools,
			      atomic_load_explicit(&dd->nr_pools, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	/* Release pairs with the acquire loads of nr_pools_hw in dma_pool_lookup()/owns(): the
	 * slot below it is visible to whoever sees the new bound. */
	if (slot + 1 > atomic_load_explicit(&dd->nr_pools_hw, memory_order_relaxed))
		atomic_store_explicit(&dd->nr_pools_hw, slot + 1, memory_order_release);
	pthread_mutex_unlock(&dd->pool_lock);
	atomic_fetch_add_explicit(&dd->persistent, total, memory_order_relaxed);
	return p;

fail_unmap:
	if (p->iova_size) {
		struct dg_pt_gather g;
		uint64_t un;

		dg_pt_gather_init(&g);
		dg_domain_unmap(dd->sp->dom, p->iova, total, &g, &un);
		if (!dma_flush_gather(dd, dd->sp, &g))
			dg_iova_free(dd->sp->iova, p->iova, total);
	}
fail:
	free(p->mem);
	free((void *)p->next);
	free((void *)p->out);
	free(p);
	errno = -dma_err(dd, r);
	return NULL;
}

int dg_dma_pool_destroy(struct dg_dma_pool *p)
{
	struct dg_dma_dev *dd;
	int r = 0;

	if (!p)
		return -EINVAL;
	dd = p->dd;
	for (uint32_t i = 0; i < p->nbufs; i++)
		if (atomic_load_explicit(&p->out[i], memory_order_relaxed))
			return dma_err(dd, -EBUSY);
	pthread_mutex_lock(&dd->pool_lock);
	atomic_store_explicit(&dd->pools[p->slot], NULL, memory_order_relaxed);
	atomic_store_explicit(&dd->nr_pools,
			      atomic_load_explicit(&dd->nr_pools, memory_order_relaxed) - 1,
			      memory_order_relaxed);
	pthread_mutex_unlock(&dd->pool_lock);
	atomic_fetch_sub_explicit(&dd->persistent, p->mem_size, memory_order_relaxed);
	if (p->iova_size)
		/* unmap, invalidate, then free the memory (or quarantine it until confirmed) */
		r = dma_strict_retire(dd, dd->sp, p->iova, p->iova_size, true, 0, NULL, p->mem);
	else
		free(p->mem);
	free((void *)p->next);
	free((void *)p->out);
	free(p);
	return r ? dma_err(dd, r) : 0;
}

int dg_dma_pool_get(struct dg_dma_pool *p, void **buf, uint64_t *dma)
{
	uint64_t h, nh;
	uint32_t idx;
	int r;

	if (!p || !buf || !dma)
		return p ? dma_err(p->dd, -EINVAL) : -EINVAL;
	r = dma_fail(p->dd, DG_DMA_FAIL_POOL);
	if (dg_unlikely(r))
		return dma_err(p->dd, r);
	/* Acquire pairs with the release CAS in dg_dma_pool_put(): next[] of the top is set. */
	h = atomic_load_explicit(&p->head, memory_order_acquire);
	do {
		idx = (uint32_t)h;
		if (!idx) { /* empty: back-pressure, not IOVA exhaustion */
			atomic_fetch_add_explicit(&p->dd->err[ERR_OTHER], 1, memory_order_relaxed);
			return -ENOSPC;
		}
		nh = ((h >> 32) + 1) << 32 |
		     atomic_load_explicit(&p->next[idx - 1], memory_order_relaxed);
		/* Acquire as above on success; the tag makes a stale next[] lose the CAS. */
	} while (!atomic_compare_exchange_weak_explicit(&p->head, &h, nh, memory_order_acquire,
							memory_order_acquire));
	atomic_store_explicit(&p->out[idx - 1], 1, memory_order_relaxed);
	*buf = p->mem + (uint64_t)(idx - 1) * p->buf_size;
	*dma = p->iova + (uint64_t)(idx - 1) * p->buf_size;
	return 0;
}

int dg_dma_pool_put(struct dg_dma_pool *p, void *buf)
{
	uint64_t off, h, nh;
	uint32_t idx;

	if (!p)
		return -EINVAL;
	off = (uintptr_t)buf - (uintptr_t)p->mem;
	if ((uintptr_t)buf < (uintptr_t)p->mem || off % p->buf_size ||
	    off / p->buf_size >= p->nbufs)
		return dma_err(p->dd, -EINVAL);
	idx = (uint32_t)(off / p->buf_size) + 1;
	if (!atomic_exchange_explicit(&p->out[idx - 1], 0, memory_order_relaxed))
		return dma_err(p->dd, -EINVAL); /* not handed out: a double put */
	h = atomic_load_explicit(&p->head, memory_order_relaxed);
	do {
		atomic_store_explicit(&p->next[idx - 1], (uint32_t)h, memory_order_relaxed);
		nh = ((h >> 32) + 1) << 32 | idx;
		/* Release pairs with the acquire load/CAS in dg_dma_pool_get(). */
	} while (!atomic_compare_exchange_weak_explicit(&p->head, &h, nh, memory_order_release,
							memory_order_relaxed));
	return 0;
}

/* ---- the policy's streaming maps ------------------------------------------------------------ */

static const struct dma_fixed pool_fixed = {
	.find = dma_pool_lookup,
	.owns = dma_pool_owns,
	.hit = CTR_POOL_HITS,
	.fallback = CTR_POOL_FALLBACKS,
};

static int pool_map(struct dg_dma_dev *dd, void *buf, size_t len, enum dg_dma_dir dir,
		    unsigned int attrs, enum dma_kind kind, uint64_t *dma)
{
	return dma_fixed_map(&pool_fixed, dd, buf, len, dir, attrs, kind, dma);
}

static int pool_unmap(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
		      unsigned int attrs, enum dma_kind kind, struct dg_dma_batch *b)
{
	return dma_fixed_unmap(&pool_fixed, dd, dma, len, dir, attrs, kind, b);
}

static int pool_map_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
		       enum dg_dma_dir dir, unsigned int attrs, unsigned int *nr_dma)
{
	return dma_fixed_map_sg(&pool_fixed, dd, sg, nents, dir, attrs, nr_dma);
}

static int pool_unmap_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			 enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b)
{
	return dma_fixed_unmap_sg(&pool_fixed, dd, sg, nents, dir, attrs, b);
}

const struct dma_policy_ops dma_pool_ops = {
	.map = pool_map,
	.unmap = pool_unmap,
	.map_sg = pool_map_sg,
	.unmap_sg = pool_unmap_sg,
	.fixed = &pool_fixed,
};
