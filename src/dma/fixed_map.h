/* SPDX-License-Identifier: MIT */
/*
 * dma/fixed_map.h - what the pool and window policies share: part of memory has a DMA
 * address fixed for the policy's life (a pool's buffers, the window's direct region), so a
 * streaming map of it returns that address and its unmap does nothing; every other buffer is
 * mapped and unmapped like strict.
 *
 * A policy describes its fixed part with a const struct dma_fixed and passes it from its four
 * hooks to the helpers below. They are inline and the descriptor is a constant, so the
 * compiler calls find/owns directly, as the two hand-written copies they replace did.
 *
 * A scatterlist is fixed only when every entry is: one entry outside sends the whole list to
 * strict. Its unmap is a no-op only when every entry is fixed and was not merged (dma_len ==
 * len); otherwise the list goes to strict's unmap.
 */
#ifndef DG_DMA_FIXED_MAP_H
#define DG_DMA_FIXED_MAP_H

#include "dma/dma_internal.h"

struct dma_fixed {
	/* Has [buf, buf + len) a fixed address that allows @dir? Then *dma gets it. Called
	 * from any CPU thread; must not block. */
	bool (*find)(struct dg_dma_dev *dd, uintptr_t buf, size_t len, enum dg_dma_dir dir,
		     uint64_t *dma);
	/* Is [dma, dma + len) inside the fixed part's DMA addresses? Same context. */
	bool (*owns)(struct dg_dma_dev *dd, uint64_t dma, size_t len);
	enum dma_ctr hit;      /* counted per map (or list) that needed no mapping */
	enum dma_ctr fallback; /* counted per map (or list) that strict mapped */
};

static inline int dma_fixed_map(const struct dma_fixed *fx, struct dg_dma_dev *dd, void *buf,
				size_t len, enum dg_dma_dir dir, unsigned int attrs,
				enum dma_kind kind, uint64_t *dma)
{
	int r;

	if (fx->find(dd, (uintptr_t)buf, len, dir, dma)) {
		ctr_add(dma_tstats(dd), fx->hit, 1);
		return 0;
	}
	r = dma_strict_ops.map(dd, buf, len, dir, attrs, kind, dma);
	if (!r)
		ctr_add(dma_tstats(dd), fx->fallback, 1);
	return r;
}

static inline int dma_fixed_unmap(const struct dma_fixed *fx, struct dg_dma_dev *dd, uint64_t dma,
				  size_t len, enum dg_dma_dir dir, unsigned int attrs,
				  enum dma_kind kind, struct dg_dma_batch *b)
{
	if (fx->owns(dd, dma, len))
		return 0; /* the translation stays: nothing to undo */
	return dma_strict_ops.unmap(dd, dma, len, dir, attrs, kind, b);
}

static inline int dma_fixed_map_sg(const struct dma_fixed *fx, struct dg_dma_dev *dd,
				   struct dg_dma_sg *sg, unsigned int nents, enum dg_dma_dir dir,
				   unsigned int attrs, unsigned int *nr_dma)
{
	uint64_t d;
	unsigned int i;
	int r;

	/* Look first, write after: a list strict maps keeps its dma fields untouched until then. */
	for (i = 0; i < nents && fx->find(dd, (uintptr_t)sg[i].addr, sg[i].len, dir, &d); i++)
		;
	if (i == nents) { /* all fixed: one segment per entry, like identity */
		for (i = 0; i < nents; i++) {
			fx->find(dd, (uintptr_t)sg[i].addr, sg[i].len, dir, &sg[i].dma_addr);
			sg[i].dma_len = sg[i].len;
		}
		*nr_dma = nents;
		ctr_add(dma_tstats(dd), fx->hit, 1);
		return 0;
	}
	r = dma_strict_ops.map_sg(dd, sg, nents, dir, attrs, nr_dma);
	if (!r)
		ctr_add(dma_tstats(dd), fx->fallback, 1);
	return r;
}

static inline int dma_fixed_unmap_sg(const struct dma_fixed *fx, struct dg_dma_dev *dd,
				     struct dg_dma_sg *sg, unsigned int nents, enum dg_dma_dir dir,
				     unsigned int attrs, struct dg_dma_batch *b)
{
	unsigned int i;

	for (i = 0;
	     i < nents && sg[i].dma_len == sg[i].len && fx->owns(dd, sg[i].dma_addr, sg[i].len);
	     i++)
		;
	if (i == nents)
		return 0;
	return dma_strict_ops.unmap_sg(dd, sg, nents, dir, attrs, b);
}

#endif /* DG_DMA_FIXED_MAP_H */
