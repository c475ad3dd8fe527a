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
 * strict, its dma fields untouched until then (each entry is looked up once, twice past
 * DMA_FIXED_SG_LOCAL entries). Its unmap is a no-op only when every entry is fixed and was
 * not merged (dma_len == len); otherwise the list goes to strict's unmap.
 *
 * The bulk calls (dg_dma_map_bulk/dg_dma_unmap_bulk, which check the arguments and dispatch
 * here through the policy's ops->fixed, its struct dma_fixed): a map takes each buffer as
 * the single map would - its fixed address, or strict's map one by one - and a failure unmaps
 * the strict maps it made (one batch; a timed-out wait parks them and is not counted: the
 * call returns its own error), nothing left mapped; the counters once per call. An
 * unmap needs nothing for a fixed entry (as the single unmap) and gives map.c the others
 * (dma_fixed_unmap_rest), which takes them strict's bulk way: every one claimed before any
 * is unmapped, a bad one refusing the call with nothing changed.
 */
#ifndef DG_DMA_FIXED_MAP_H
#define DG_DMA_FIXED_MAP_H

#include "dma/dma_internal.h"

/* Entries of a fixed scatterlist whose addresses dma_fixed_map_sg() keeps from its one look-up
 * (a TSO send is 16 pages, the tcp workloads' lists); longer lists are looked up twice. */
#define DMA_FIXED_SG_LOCAL 32

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
	uint64_t d[DMA_FIXED_SG_LOCAL], past;
	unsigned int i;
	int r;

	/* Look first, write after: a list strict maps keeps its dma fields untouched until then.
	 * The addresses found wait in d[] (one look-up per entry); the entries past the first
	 * DMA_FIXED_SG_LOCAL are looked up again to write theirs. */
	for (i = 0; i < nents; i++)
		if (!fx->find(dd, (uintptr_t)sg[i].addr, sg[i].len, dir,
			      i < DMA_FIXED_SG_LOCAL ? &d[i] : &past))
			break;
	if (i == nents) { /* all fixed: one segment per entry, like identity */
		for (i = 0; i < nents; i++) {
			if (i < DMA_FIXED_SG_LOCAL)
				sg[i].dma_addr = d[i];
			else
				fx->find(dd, (uintptr_t)sg[i].addr, sg[i].len, dir,
					 &sg[i].dma_addr);
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

/* dg_dma_map_bulk() of the policy (arguments and buffers checked by the caller): 0 with
 * dma[0..n) set, or -errno with nothing mapped (not passed through dma_err). */
static inline int dma_fixed_map_bulk(const struct dma_fixed *fx, struct dg_dma_dev *dd,
				     void *const *bufs, unsigned int n, size_t len,
				     enum dg_dma_dir dir, unsigned int attrs, uint64_t *dma)
{
	uint64_t fb[DG_DMA_BULK_MAX / 64] = {0}; /* bit i: entry i mapped by strict */
	unsigned int i, hits = 0;
	struct dma_tstats *t;
	int r;

	for (i = 0; i < n; i++) {
		if (fx->find(dd, (uintptr_t)bufs[i], len, dir, &dma[i])) {
			hits++;
			continue;
		}
		r = dma_strict_ops.map(dd, bufs[i], len, dir, attrs, KIND_SINGLE, &dma[i]);
		if (dg_unlikely(r)) {
			struct dg_dma_batch b;

			dg_dma_batch_begin(dd, &b);
			while (i--)
				if (fb[i >> 6] >> (i & 63) & 1)
					dma_strict_ops.unmap(dd, dma[i], len, dir, attrs,
							     KIND_SINGLE, &b);
			dma_batch_end_undo(&b); /* the call's error is r alone */
			return r;
		}
		fb[i >> 6] |= 1ull << (i & 63);
	}
	t = dma_tstats(dd);
	if (hits)
		ctr_add(t, fx->hit, hits);
	if (hits < n)
		ctr_add(t, fx->fallback, n - hits);
	ctr_add(t, CTR_MAPS, n);
	ctr_add(t, CTR_MAP_BYTES, (uint64_t)n * len);
	return 0;
}

/* The entries of dma[0..n) (@len bytes each) that are not fixed, in order, into rest[];
 * returns how many. The fixed ones need nothing, as their single unmap. */
static inline unsigned int dma_fixed_unmap_rest(const struct dma_fixed *fx, struct dg_dma_dev *dd,
						const uint64_t *dma, unsigned int n, size_t len,
						uint64_t *rest)
{
	unsigned int m = 0;

	for (unsigned int i = 0; i < n; i++)
		if (!fx->owns(dd, dma[i], len))
			rest[m++] = dma[i];
	return m;
}

#endif /* DG_DMA_FIXED_MAP_H */
