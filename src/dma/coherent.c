/* SPDX-License-Identifier: MIT */
/*
 * dma/coherent.c - coherent allocations: memory that stays mapped for its whole life
 * (descriptor rings, completion queues, doorbell records).
 *
 * The memory is allocated here, page aligned and zeroed, in whole pages of the device's
 * granule, so nothing else shares its pages. It is mapped read/write like a bidirectional
 * streaming mapping (one IOVA range, a record of kind COHERENT that streaming unmaps refuse),
 * in every policy that translates - bounce included, since a ring cannot be bounced, and
 * window in its on-demand part. Free is always strict, whatever the policy: the memory goes
 * back to the C allocator, so no device may reach it afterwards (Linux in lazy mode frees the
 * pages before the flush; here that window does not exist). Under identity the DMA address is
 * the host address and the allocation is kept on a short locked list (coherent allocations
 * are few and long-lived), so a bad or double free is refused there too.
 */
#include "dma/dma_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct coh_ent {
	struct coh_ent *next;
	void *mem;
	uint64_t bytes;
};

static uint64_t coh_align(const struct dg_dma_dev *dd)
{
	return dd->sp && dd->sp->granule > DMA_HOST_PAGE ? dd->sp->granule : DMA_HOST_PAGE;
}

void *dg_dma_alloc_coherent(struct dg_dma_dev *dd, size_t size, uint64_t *dma)
{
	struct dg_dma_sg s;
	uint64_t align, bytes, iova;
	struct dma_tstats *t;
	void *mem;
	int r;

	if (!dd) {
		errno = EINVAL;
		return NULL;
	}
	if (!size || !dma || size > (1ull << 40)) {
		errno = -dma_err(dd, -EINVAL);
		return NULL;
	}
	align = coh_align(dd);
	bytes = dg_align_up(size, align);
	r = dma_fail(dd, DG_DMA_FAIL_ALLOC);
	if (r) {
		errno = -dma_err(dd, r);
		return NULL;
	}
	mem = aligned_alloc(align, bytes);
	if (!mem) {
		errno = -dma_err(dd, -ENOMEM);
		return NULL;
	}
	memset(mem, 0, bytes);
	if (!dd->sp) {
		if ((uintptr_t)mem + (bytes - 1) > dd->mask) {
			free(mem);
			errno = -dma_err(dd, -ERANGE);
			return NULL;
		}
		struct coh_ent *e = malloc(sizeof(*e));

		if (!e) {
			free(mem);
			errno = -dma_err(dd, -ENOMEM);
			return NULL;
		}
		e->mem = mem;
		e->bytes = bytes;
		pthread_mutex_lock(&dd->coh_lock);
		e->next = dd->coh_list;
		dd->coh_list = e;
		pthread_mutex_unlock(&dd->coh_lock);
		*dma = (uintptr_t)mem;
	} else {
		s.addr = mem;
		s.len = bytes;
		r = dma_xl_map(dd, dd->sp, &s, 1, DG_DMA_BIDIRECTIONAL, KIND_COHERENT, &iova, dma);
		if (r) {
			free(mem);
			errno = -dma_err(dd, r);
			return NULL;
		}
	}
	t = dma_tstats(dd);
	ctr_add(t, CTR_COH_ALLOCS, 1);
	atomic_fetch_add_explicit(&dd->persistent, bytes, memory_order_relaxed);
	return mem;
}

int dg_dma_free_coherent(struct dg_dma_dev *dd, void *cpu, size_t size, uint64_t dma)
{
	uint64_t bytes, iova, isize, token;
	int r;

	if (!dd)
		return -EINVAL;
	if (!cpu || !size || size > (1ull << 40))
		return dma_err(dd, -EINVAL);
	bytes = dg_align_up(size, coh_align(dd));
	if (!dd->sp) {
		struct coh_ent **pe, *e;

		pthread_mutex_lock(&dd->coh_lock);
		for (pe = &dd->coh_list; (e = *pe) && e->mem != (void *)(uintptr_t)dma;)
			pe = &e->next;
		r = !e ? -ENOENT : e->mem != cpu || e->bytes != bytes ? -EINVAL : 0;
		if (!r)
			*pe = e->next;
		pthread_mutex_unlock(&dd->coh_lock);
		if (r)
			return dma_err(dd, r);
		free(e);
	} else {
		if (dma < dd->sp->first || dma > dd->sp->last)
			return dma_err(dd, -ENOENT);
		if (dg_pt_iova_to_phys(dd->sp->pt, dma) != (uintptr_t)cpu) {
			/* Not this allocation's memory: tell "nothing there" from "wrong pointer". */
			struct dma_rec *rec = dma_rec_get(&dd->sp->rec, dma, false);

			return dma_err(
				dd, rec && (atomic_load_explicit(&rec->w0, memory_order_relaxed) &
					    REC_VALID) ?
					    -EINVAL :
					    -ENOENT);
		}
		r = dma_xl_claim(dd->sp, dma, bytes, DG_DMA_BIDIRECTIONAL, KIND_COHERENT, 0, &iova,
				 &isize, &token);
		if (r)
			return dma_err(dd, r);
		/* The memory is freed once no device can reach it: now, or from quarantine. */
		r = dma_strict_retire(dd, dd->sp, iova, isize, true, token, NULL, cpu);
		ctr_add(dma_tstats(dd), CTR_COH_FREES, 1);
		atomic_fetch_sub_explicit(&dd->persistent, bytes, memory_order_relaxed);
		return r ? dma_err(dd, r) : 0;
	}
	ctr_add(dma_tstats(dd), CTR_COH_FREES, 1);
	atomic_fetch_sub_explicit(&dd->persistent, bytes, memory_order_relaxed);
	free(cpu);
	return 0;
}
